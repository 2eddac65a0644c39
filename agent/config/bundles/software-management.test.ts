import { mkdtemp, rm, readFile, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, type SoftwareTestContext } from '../test-support/test-context.js';
import { buildDeb, indexRepository, installedInRoot, prepareDebRoot } from '../test-support/deb-fixture.js';
import { softwareManagementBundle } from './software-management.js';

let work: string;
let repo: string;
let t: SoftwareTestContext;

async function apply(data: unknown): Promise<void> {
  await softwareManagementBundle.apply(softwareManagementBundle.parse(data), t.ctx);
}

/** An init script in the temp root that counts its restarts in a file. */
async function installInitScript(name: string): Promise<string> {
  const log = path.join(t.root, 'var/log', `${name}.restarts`);
  await mkdir(path.join(t.root, 'etc/init.d'), { recursive: true });
  await mkdir(path.dirname(log), { recursive: true });
  await writeFile(path.join(t.root, 'etc/init.d', name), `#!/bin/sh\necho "$1" >> '${log}'\necho "${name} $1"\n`, { mode: 0o755 });
  return log;
}

async function restarts(log: string): Promise<string[]> {
  return (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);
}

beforeEach(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'sw-mgmt-'));
  repo = path.join(work, 'repo');
  t = await createSoftwareTestContext({ parameters: { site: 'oslo' } });
  await prepareDebRoot(t.root, repo);
  await buildDeb(path.join(work, 'build'), repo, { name: 'demo-daemon', version: '1.0', files: { '/usr/bin/demo-daemon': '#!/bin/sh\n' } });
  await indexRepository(repo);
  t.files.set('/templates/demo.conf', 'port={{port}}\nsite={{ site }}\nmissing={{nothing}}\n');
});

afterEach(async () => {
  await t.cleanup();
  await rm(work, { recursive: true, force: true });
});

const item = {
  package: 'demo-daemon',
  config_files: [{ config_template: '/templates/demo.conf', config_location: '/etc/demo/demo.conf' }],
  parameters: [{ key: 'port', value: '8080' }],
};

describe('software_management with apt and dpkg on a temp root', () => {
  it('installs the package, renders the config template with parameters, restarts the service once', async () => {
    const log = await installInitScript('demo-daemon');
    await apply({ items: [item] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['INFO', "Successfully installed 'demo-daemon'."],
      ['INFO', 'Successfully rendered template file /templates/demo.conf to /etc/demo/demo.conf.'],
      ['INFO', "Restarted service 'demo-daemon'."],
    ]);
    expect(await installedInRoot(t.root)).toEqual({ 'demo-daemon': '1.0' });
    expect(await readFile(path.join(t.root, 'etc/demo/demo.conf'), 'utf8')).toBe('port=8080\nsite=oslo\nmissing={{nothing}}\n');
    expect(await restarts(log)).toEqual(['restart']);

    t.clear();
    await apply({ items: [item] });
    expect(t.reports).toEqual([]);
    expect(await restarts(log)).toEqual(['restart']);
  });

  it('re-renders and restarts when a parameter changes; restarts the named service_name', async () => {
    const log = await installInitScript('demo');
    await apply({ items: [{ ...item, service_name: 'demo' }] });
    t.clear();
    await apply({ items: [{ ...item, service_name: 'demo', parameters: [{ key: 'port', value: '9090' }] }] });
    expect(t.reports.map((r) => r.text)).toEqual([
      'Successfully rendered template file /templates/demo.conf to /etc/demo/demo.conf.',
      "Restarted service 'demo'.",
    ]);
    expect(await readFile(path.join(t.root, 'etc/demo/demo.conf'), 'utf8')).toMatch(/^port=9090$/m);
    expect(await restarts(log)).toEqual(['restart', 'restart']);
  });

  it('installs a .deb of the file store with dpkg, and not again on the second run', async () => {
    const deb = await buildDeb(path.join(work, 'build'), path.join(work, 'files'), { name: 'from-file', version: '3.1', files: { '/opt/from-file/x': 'x\n' } });
    t.files.set('/packages/from-file_3.1_all.deb', await readFile(deb));
    await apply({ items: [{ package: '/packages/from-file_3.1_all.deb' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['INFO', "Successfully installed '/packages/from-file_3.1_all.deb'."]]);
    expect(await installedInRoot(t.root)).toEqual({ 'from-file': '3.1' });
    t.clear();
    await apply({ items: [{ package: '/packages/from-file_3.1_all.deb' }] });
    expect(t.reports).toEqual([]);
    expect(t.commands.some((argv) => argv.includes('install'))).toBe(false);
  });

  it('skips an item whose pre_condition fails', async () => {
    await apply({ items: [{ ...item, pre_condition: 'false' }] });
    expect(t.reports).toEqual([]);
    expect(await installedInRoot(t.root)).toEqual({});
  });

  it('reports a missing template and stops before the restart', async () => {
    const log = await installInitScript('demo-daemon');
    await apply({ items: [{ ...item, config_files: [{ config_template: '/templates/absent.conf', config_location: '/etc/demo/x.conf' }] }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['INFO', "Successfully installed 'demo-daemon'."],
      ['ERR', "Unable to download template '/templates/absent.conf' from the file store."],
    ]);
    expect(await restarts(log)).toEqual([]);
  });

  it('reports a package that cannot be installed, and writes no config file', async () => {
    await apply({ items: [{ ...item, package: 'absent-package' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', "Unable to install 'absent-package'."]]);
    expect(t.reports[0]!.log).toMatch(/absent-package/);
    await expect(readFile(path.join(t.root, 'etc/demo/demo.conf'), 'utf8')).rejects.toThrow();
  });

  it('reports a failing restart as a warning', async () => {
    await mkdir(path.join(t.root, 'etc/init.d'), { recursive: true });
    await writeFile(path.join(t.root, 'etc/init.d/demo-daemon'), '#!/bin/sh\necho broken >&2\nexit 3\n', { mode: 0o755 });
    await apply({ items: [item] });
    expect(t.reports.at(-1)!.severity).toBe('WARN');
    expect(t.reports.at(-1)!.text).toMatch(/Required restart of 'demo-daemon' cannot be performed \(exit code 3: broken\)/);
  });
});

describe('software_management errors', () => {
  it('reports clearly when no package manager is present, and runs nothing', async () => {
    const empty = await mkdtemp(path.join(tmpdir(), 'no-tools-'));
    const bare = await createSoftwareTestContext({ path: empty });
    try {
      await softwareManagementBundle.apply(softwareManagementBundle.parse({ items: [item] }), bare.ctx);
      expect(bare.reports.map((r) => r.severity)).toEqual(['ERR']);
      expect(bare.reports[0]!.text).toMatch(/No supported package manager found/);
      expect(bare.commands).toEqual([]);
    } finally {
      await bare.cleanup();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('rejects malformed data with the field that is wrong', () => {
    expect(() => softwareManagementBundle.parse({ items: [{ package: '' }] })).toThrow(/items\.0\.package/);
    expect(() => softwareManagementBundle.parse({ items: [{ package: 'a', config_files: [{ config_template: 't', config_location: 'relative' }] }] })).toThrow(
      /config_location: must be an absolute path/,
    );
  });
});
