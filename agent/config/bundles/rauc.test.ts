/**
 * rauc up to the rauc commands it runs: this machine has no RAUC system, so a fake `rauc` answers
 * `status` and `info` from files the test writes and records `install`.
 */
import { mkdtemp, rm, writeFile, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, writeFakeTool, type SoftwareTestContext } from '../test-support/test-context.js';
import { raucBundle } from './rauc.js';

const FAKE_RAUC = `#!/bin/sh
state="$FAKE_RAUC_STATE"
echo "$*" >> "$state/log"
case "$1" in
  status) cat "$state/status.json" ;;
  info) last=""; for a in "$@"; do last="$a"; done
        if [ ! -s "$last" ]; then echo "rauc: failed to open bundle $last" >&2; exit 1; fi
        cat "$state/info.json" ;;
  install) last=""; for a in "$@"; do last="$a"; done
        if [ -e "$state/fail-install" ]; then echo "installing $last failed: no space left" >&2; exit 1; fi
        echo "installing $last: succeeded" ;;
  *) exit 2 ;;
esac
`;

let work: string;
let t: SoftwareTestContext;

function status(hash: string): string {
  return JSON.stringify({
    compatible: 'demo-board',
    booted: 'A',
    slots: [{ 'rootfs.0': { bootname: 'A', slot_status: { bundle: { hash } } } }, { 'rootfs.1': { bootname: 'B', slot_status: { bundle: { hash: 'old' } } } }],
  });
}

async function apply(data: unknown): Promise<void> {
  await raucBundle.apply(raucBundle.parse(data), t.ctx);
}

async function raucLog(): Promise<string[]> {
  return (await readFile(path.join(work, 'log'), 'utf8').catch(() => '')).split('\n').filter(Boolean);
}

beforeEach(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'rauc-bundle-'));
  await writeFakeTool(path.join(work, 'bin'), 'rauc', FAKE_RAUC);
  await writeFile(path.join(work, 'status.json'), status('running-hash'));
  await writeFile(path.join(work, 'info.json'), JSON.stringify({ compatible: 'demo-board', version: '2.0', hash: 'new-hash' }));
  t = await createSoftwareTestContext({
    pathPrepend: [path.join(work, 'bin')],
    env: { FAKE_RAUC_STATE: work },
    files: { '/images/update.raucb': 'bundle bytes' },
  });
});

afterEach(async () => {
  await t.cleanup();
  await rm(work, { recursive: true, force: true });
});

describe('rauc (fake rauc: no RAUC system here)', () => {
  it('installs a compatible bundle not running yet, asks for a reboot, and does not install it again before that', async () => {
    await apply({ rauc_bundle: '/images/update.raucb' });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['INFO', "RAUC bundle successfully installed '/images/update.raucb'."],
      ['WARN', 'Reboot required: RAUC bundle /images/update.raucb installed'],
    ]);
    // the log names the file-store path, not the temporary download
    expect(t.reports[0]!.log).toBe('installing /images/update.raucb: succeeded');
    expect((await raucLog()).filter((l) => l.startsWith('install'))).toHaveLength(1);

    t.clear();
    await apply({ rauc_bundle: '/images/update.raucb' });
    expect(t.reports).toEqual([]);
    expect((await raucLog()).filter((l) => l.startsWith('install'))).toHaveLength(1);
  });

  it('does nothing when the booted slot already runs the bundle', async () => {
    await writeFile(path.join(work, 'status.json'), status('new-hash'));
    await apply({ rauc_bundle: '/images/update.raucb' });
    expect(t.reports).toEqual([]);
    expect((await raucLog()).some((l) => l.startsWith('install'))).toBe(false);
  });

  it('does nothing when the pre_condition fails', async () => {
    await apply({ rauc_bundle: '/images/update.raucb', pre_condition: 'false' });
    expect(t.reports).toEqual([]);
    expect(await raucLog()).toEqual([]);
  });

  it('refuses an incompatible bundle', async () => {
    await writeFile(path.join(work, 'info.json'), JSON.stringify({ compatible: 'other-board', hash: 'x' }));
    await apply({ rauc_bundle: '/images/update.raucb' });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', "RAUC bundle 'other-board' is not compatible with the system 'demo-board'."]]);
  });

  it('reports a failed install with rauc’s output, and a missing file', async () => {
    await writeFile(path.join(work, 'fail-install'), '');
    await apply({ rauc_bundle: '/images/update.raucb' });
    expect(t.reports.map((r) => [r.severity, r.text, r.log])).toEqual([
      ['ERR', 'Failed to install RAUC bundle.', 'installing /images/update.raucb failed: no space left'],
    ]);
    t.clear();
    await apply({ rauc_bundle: '/images/absent.raucb' });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', "Failed to download RAUC bundle '/images/absent.raucb'."]]);
  });

  it('reports clearly when rauc is missing, and runs nothing', async () => {
    const empty = await mkdtemp(path.join(tmpdir(), 'no-tools-'));
    const bare = await createSoftwareTestContext({ path: empty });
    try {
      await raucBundle.apply(raucBundle.parse({ rauc_bundle: '/images/update.raucb' }), bare.ctx);
      expect(bare.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', 'RAUC not found on this device: nothing applied.']]);
      expect(bare.commands).toEqual([]);
    } finally {
      await bare.cleanup();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('rejects data without a bundle', () => {
    expect(() => raucBundle.parse({})).toThrow(/rauc_bundle/);
    expect(() => raucBundle.parse({ rauc_bundle: '' })).toThrow(/rauc_bundle/);
  });
});
