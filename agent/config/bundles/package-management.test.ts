import { mkdtemp, rm, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, type SoftwareTestContext } from '../test-support/test-context.js';
import { buildDeb, indexRepository, installedInRoot, prepareDebRoot } from '../test-support/deb-fixture.js';
import { packageManagementBundle } from './package-management.js';

let work: string;
let repo: string;
let t: SoftwareTestContext;

async function publish(name: string, version: string, content: string): Promise<void> {
  await buildDeb(path.join(work, 'build'), repo, { name, version, files: { '/usr/share/demo/hello': content } });
  await indexRepository(repo);
}

async function apply(data: unknown): Promise<void> {
  await packageManagementBundle.apply(packageManagementBundle.parse(data), t.ctx);
}

beforeEach(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'pkg-mgmt-'));
  repo = path.join(work, 'repo');
  t = await createSoftwareTestContext();
  await prepareDebRoot(t.root, repo);
  await publish('demo-hello', '1.0', 'one\n');
});

afterEach(async () => {
  await t.cleanup();
  await rm(work, { recursive: true, force: true });
});

describe('package_management with apt and dpkg on a temp root', () => {
  it('installs a listed package at its version into the root, and a second run changes nothing', async () => {
    await apply({ items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['INFO', "Package 'demo-hello' successfully installed."]]);
    expect(await installedInRoot(t.root)).toEqual({ 'demo-hello': '1.0' });
    expect(await readFile(path.join(t.root, 'usr/share/demo/hello'), 'utf8')).toBe('one\n');

    t.clear();
    await apply({ items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(t.reports).toEqual([]);
    expect(t.commands.some((argv) => argv.includes('install'))).toBe(false);
  });

  it('keeps an unversioned ("latest") package at the newest version the repository offers', async () => {
    await apply({ items: [{ name: 'demo-hello', version: 'latest' }] });
    expect(await installedInRoot(t.root)).toEqual({ 'demo-hello': '1.0' });
    t.clear();
    await apply({ items: [{ name: 'demo-hello' }] });
    expect(t.reports).toEqual([]);

    await publish('demo-hello', '2.0', 'two\n');
    await apply({ items: [{ name: 'demo-hello' }] });
    expect(t.reports.map((r) => r.text)).toEqual(["Package 'demo-hello' successfully installed."]);
    expect(await installedInRoot(t.root)).toEqual({ 'demo-hello': '2.0' });
    expect(await readFile(path.join(t.root, 'usr/share/demo/hello'), 'utf8')).toBe('two\n');
  });

  it('full_upgrade upgrades every installed package once, then reports nothing', async () => {
    await apply({ items: [{ name: 'demo-hello', version: '1.0' }] });
    await publish('demo-hello', '1.5', 'one and a half\n');
    t.clear();
    await apply({ full_upgrade: true, items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['INFO', 'Full upgrade was successful - 1 packages updated.']]);
    expect(await installedInRoot(t.root)).toEqual({ 'demo-hello': '1.5' });
    t.clear();
    await apply({ full_upgrade: true });
    expect(t.reports).toEqual([]);
  });

  it('does nothing when the pre_condition fails', async () => {
    await apply({ pre_condition: 'test -e /nonexistent-precondition-file', items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(t.reports).toEqual([]);
    expect(await installedInRoot(t.root)).toEqual({});
    expect(t.commands).toEqual([['sh', '-c', 'test -e /nonexistent-precondition-file']]);
  });

  it('resolves $(parameters) in names and versions', async () => {
    t.ctx.parameters = { pkg: 'demo-hello', ver: '1.0' };
    await apply({ items: [{ name: '$(pkg)', version: '$(ver)' }] });
    expect(await installedInRoot(t.root)).toEqual({ 'demo-hello': '1.0' });
  });

  it('reports an install failure with the package manager output, and changes nothing', async () => {
    await apply({ items: [{ name: 'no-such-package', version: '' }] });
    expect(t.reports).toHaveLength(1);
    expect(t.reports[0]!.severity).toBe('ERR');
    expect(t.reports[0]!.text).toBe("Unable to install package 'no-such-package'.");
    expect(t.reports[0]!.log).toMatch(/no-such-package/);
    expect(await installedInRoot(t.root)).toEqual({});
  });

  it('refuses a name that would read as an option, running nothing', async () => {
    await apply({ items: [{ name: '-oAPT::Get::Fix-Broken=true', version: '' }] });
    expect(t.reports.map((r) => r.severity)).toEqual(['ERR']);
    expect(t.reports[0]!.text).toMatch(/Invalid package name/);
    expect(t.commands.filter((argv) => argv[0] === 'apt-get')).toEqual([]);
  });

  it('asks for a reboot after a change when reboot_mode is always, not when nothing changed', async () => {
    const reboots: string[] = [];
    Object.assign(t.ctx, { requestReboot: (why: string) => reboots.push(why) });
    await apply({ reboot_mode: 'always', items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(reboots).toHaveLength(1);
    await apply({ reboot_mode: 'always', items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(reboots).toHaveLength(1);
  });

  it('without a reboot hook in the context, says a reboot is required', async () => {
    await apply({ reboot_mode: 'always', items: [{ name: 'demo-hello', version: '1.0' }] });
    expect(t.reports.map((r) => r.severity)).toEqual(['INFO', 'WARN']);
    expect(t.reports[1]!.text).toMatch(/Reboot required/);
  });
});

describe('package_management errors', () => {
  it('reports clearly when no package manager is present, and runs nothing', async () => {
    const empty = await mkdtemp(path.join(tmpdir(), 'no-tools-'));
    const bare = await createSoftwareTestContext({ path: empty });
    try {
      await packageManagementBundle.apply(packageManagementBundle.parse({ items: [{ name: 'demo-hello' }] }), bare.ctx);
      expect(bare.reports.map((r) => r.severity)).toEqual(['ERR']);
      expect(bare.reports[0]!.text).toMatch(/No supported package manager found/);
      expect(bare.commands).toEqual([]);
    } finally {
      await bare.cleanup();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('rejects malformed data with the field that is wrong', () => {
    expect(() => packageManagementBundle.parse({ reboot_mode: 'sometimes' })).toThrow(/reboot_mode/);
    expect(() => packageManagementBundle.parse({ items: [{ version: '1' }] })).toThrow(/items\.0\.name/);
    expect(() => packageManagementBundle.parse({ full_upgrade: 'yes' })).toThrow(/full_upgrade/);
  });
});
