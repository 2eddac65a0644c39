/**
 * qbee's `ntp`: `servers` the device synchronises its clock with. The agent writes a drop-in for
 * the NTP client present: chrony (`/etc/chrony/sources.d/fleet-ntp.sources`, then
 * `chronyc reload sources`; chrony.conf must include `sourcedir /etc/chrony/sources.d`, as Debian's
 * does) or systemd-timesyncd (`/etc/systemd/timesyncd.conf.d/fleet-ntp.conf`, then a restart of
 * the service). An empty list removes the drop-in. With neither client, nothing is applied.
 * (qbee's own agent dropped this bundle in favour of software_management; this one keeps it.)
 */
import path from 'node:path';
import type { Bundle, BundleContext } from '../bundle.js';
import { makeDirectories, removeDeviceFile, sha256OfFile, writeFileAtomic } from '../device-files.js';
import { sha256 } from '../fsutil.js';
import { reportCommand } from '../helpers.js';
import { list, object } from '../parse.js';

export interface NtpData {
  servers: string[];
}

const HOST = /^[A-Za-z0-9]([A-Za-z0-9.:-]{0,252})$/;

export const CHRONY_SOURCES = '/etc/chrony/sources.d/fleet-ntp.sources';
export const TIMESYNCD_DROPIN = '/etc/systemd/timesyncd.conf.d/fleet-ntp.conf';

export const ntpBundle: Bundle<NtpData> = {
  name: 'ntp',
  parse(data) {
    const o = object(data, 'ntp');
    return {
      servers: list(o, 'servers', 'ntp', 32).map((s, i) => {
        if (typeof s !== 'string' || !HOST.test(s)) throw new Error(`ntp.servers[${i}] must be a host name or address`);
        return s;
      }),
    };
  },
  async apply(data, ctx) {
    if (await ctx.has('chronyc')) {
      const content = data.servers.map((s) => `server ${s} iburst\n`).join('');
      if (await place(ctx, CHRONY_SOURCES, content))
        reportCommand(
          ctx,
          await ctx.run(['chronyc', 'reload', 'sources']),
          `NTP servers set for chrony: ${data.servers.join(', ') || 'none'}`,
          'chronyc reload sources failed',
        );
      return;
    }
    if ((await ctx.has('systemctl')) && (await ctx.has('timedatectl'))) {
      const content = `# written by the fleet agent (ntp bundle)\n[Time]\nNTP=${data.servers.join(' ')}\n`;
      if (await place(ctx, TIMESYNCD_DROPIN, content))
        reportCommand(
          ctx,
          await ctx.run(['systemctl', 'restart', 'systemd-timesyncd']),
          `NTP servers set for systemd-timesyncd: ${data.servers.join(', ') || 'none'}`,
          'Restarting systemd-timesyncd failed',
        );
      return;
    }
    ctx.report('ERR', 'No NTP client is installed on this device (chrony or systemd-timesyncd): ntp not applied.');
  },
};

/** Writes (or, for an empty list, removes) the drop-in; true when it changed. */
async function place(ctx: BundleContext, devicePath: string, content: string): Promise<boolean> {
  const empty = !content.includes('server ') && !/NTP=\S/.test(content);
  if (empty) return removeDeviceFile(ctx.root, devicePath);
  if ((await sha256OfFile(ctx.root, devicePath).catch(() => undefined)) === sha256(content)) return false;
  await makeDirectories(ctx.root, path.posix.dirname(devicePath), 0o755);
  await writeFileAtomic(ctx.root, devicePath, content, { mode: 0o644 });
  return true;
}
