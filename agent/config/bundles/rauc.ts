/**
 * qbee's `rauc`: installs a RAUC bundle (`rauc_bundle`, a file of the file store) when the `pre_condition`
 * holds, the bundle is compatible with the system, and its hash is not what the booted slot runs — then
 * asks for a reboot. What it installed is kept in the bundle's state, so a run before that reboot does not
 * install it again. The bundle is downloaded (no streaming: the context offers no signed URL).
 */
import { rm } from 'node:fs/promises';
import { z } from 'zod';
import type { Bundle } from '../bundle.js';
import { outputTail, parseBundleData, preConditionHolds, readBundleState, requestReboot, resolveParameters, writeBundleState } from './software-support.js';

const schema = z.looseObject({
  pre_condition: z.string().max(4096).optional().default(''),
  rauc_bundle: z.string().min(1).max(1024),
});

export type RaucData = z.infer<typeof schema>;

interface RaucStatus {
  compatible?: string;
  booted?: string;
  slots?: Array<Record<string, { bootname?: string; slot_status?: { bundle?: { hash?: string } } }>>;
}

interface RaucBundleInfo {
  compatible?: string;
  version?: string;
  hash?: string;
}

/** The bundle hash of the slot the system booted from. */
function bootedHash(status: RaucStatus): string | undefined {
  for (const slot of status.slots ?? []) {
    for (const data of Object.values(slot)) {
      if (data.bootname && data.bootname === status.booted) return data.slot_status?.bundle?.hash;
    }
  }
  return undefined;
}

const STATE = 'rauc';

export const raucBundle: Bundle<RaucData> = {
  name: 'rauc',
  parse: (data) => parseBundleData('rauc', schema, data),
  async apply(data, ctx) {
    if (!(await ctx.has('rauc'))) {
      ctx.report('ERR', 'RAUC not found on this device: nothing applied.');
      return;
    }
    if (!(await preConditionHolds(ctx, data.pre_condition))) return;
    const bundlePath = resolveParameters(data.rauc_bundle, ctx.parameters).trim();

    const statusResult = await ctx.run(['rauc', 'status', '--output-format=json']);
    let status: RaucStatus;
    try {
      if (statusResult.code !== 0) throw new Error('rauc status failed');
      status = JSON.parse(statusResult.stdout) as RaucStatus;
    } catch {
      ctx.report('ERR', 'Failed to get RAUC status.', outputTail(statusResult));
      return;
    }

    let local: string;
    try {
      local = await ctx.fetchFile(bundlePath);
    } catch (err) {
      ctx.report('ERR', `Failed to download RAUC bundle '${bundlePath}'.`, (err as Error).message);
      return;
    }
    try {
      // reports name the bundle by its file-store path, not the temporary download
      const tail = (result: Parameters<typeof outputTail>[0]): string => outputTail(result).split(local).join(bundlePath);
      const infoResult = await ctx.run(['rauc', 'info', '--output-format=json', '--', local]);
      let info: RaucBundleInfo;
      try {
        if (infoResult.code !== 0) throw new Error('rauc info failed');
        info = JSON.parse(infoResult.stdout) as RaucBundleInfo;
      } catch {
        ctx.report('ERR', `Failed to get RAUC bundle info for '${bundlePath}'.`, tail(infoResult));
        return;
      }
      if (info.compatible !== status.compatible) {
        ctx.report('ERR', `RAUC bundle '${String(info.compatible)}' is not compatible with the system '${String(status.compatible)}'.`);
        return;
      }
      const state = await readBundleState<{ installedHash?: string; booted?: string }>(ctx, STATE, {});
      if (info.hash && info.hash === bootedHash(status)) return;
      // installed already and waiting for the reboot into it
      if (info.hash && state.installedHash === info.hash && state.booted === status.booted) return;

      const installed = await ctx.run(['rauc', 'install', '--', local], { timeoutMs: 60 * 60_000 });
      if (installed.code !== 0) {
        ctx.report('ERR', 'Failed to install RAUC bundle.', tail(installed));
        return;
      }
      await writeBundleState(ctx, STATE, { installedHash: info.hash, booted: status.booted });
      ctx.report('INFO', `RAUC bundle successfully installed '${bundlePath}'.`, tail(installed));
      requestReboot(ctx, `RAUC bundle ${bundlePath} installed`);
    } finally {
      await rm(local, { force: true });
    }
  },
};
