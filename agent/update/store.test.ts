import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { chooseLaunch, compareVersions, MAX_ATTEMPTS, UpdateStore } from './store.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function setup() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-update-store-'));
  dirs.push(dir);
  const pkg = path.join(dir, 'pkg');
  fs.mkdirSync(path.join(pkg, 'node_modules'), { recursive: true });
  const bundle = path.join(dir, 'bundle.mjs');
  fs.writeFileSync(bundle, 'export {};\n');
  return { store: new UpdateStore(path.join(dir, 'state')), pkg, bundle };
}

describe('compareVersions', () => {
  it('orders numerically, a pre-release before its release', () => {
    expect(compareVersions('1.10.0', '1.9.2')).toBe(1);
    expect(compareVersions('1.0.0', '1.0.0')).toBe(0);
    expect(compareVersions('1.0', '1.0.0')).toBe(0);
    expect(compareVersions('1.0.0-rc1', '1.0.0')).toBe(-1);
    expect(compareVersions('1.0.0-rc2', '1.0.0-rc1')).toBe(1);
    expect(compareVersions('0.9.0', '1.0.0')).toBe(-1);
  });

  it('follows semver precedence between pre-releases, build metadata aside', () => {
    const ordered = ['1.0.0-alpha', '1.0.0-alpha.0', '1.0.0-alpha.1', '1.0.0-alpha.beta', '1.0.0-beta', '1.0.0-beta.2', '1.0.0-beta.11', '1.0.0-rc.1', '1.0.0'];
    for (let i = 1; i < ordered.length; i++) expect([ordered[i - 1], compareVersions(ordered[i - 1], ordered[i])]).toEqual([ordered[i - 1], -1]);
    expect(compareVersions('1.0.0+build.7', '1.0.0')).toBe(0);
  });
});

describe('update store and launcher choice', () => {
  it('runs the package when nothing is installed, the installed version once confirmed', () => {
    const { store, pkg, bundle } = setup();
    expect(chooseLaunch(store, '1.0.0')).toBeUndefined();
    store.install('1.1.0', bundle, pkg, '1.0.0', undefined);
    expect(chooseLaunch(store, '1.0.0')).toMatchObject({ version: '1.1.0', pending: true });
    store.confirm('1.1.0');
    expect(chooseLaunch(store, '1.0.0')).toMatchObject({ version: '1.1.0', pending: false });
  });

  it(`rolls back after ${MAX_ATTEMPTS} starts without a welcome, to the previous version, and keeps two versions at most`, () => {
    const { store, pkg, bundle } = setup();
    store.install('1.1.0', bundle, pkg, '1.0.0', undefined);
    store.confirm('1.1.0');
    store.install('1.2.0', bundle, pkg, '1.0.0', '1.1.0');
    store.confirm('1.2.0');
    store.install('1.3.0', bundle, pkg, '1.0.0', '1.2.0');
    expect(fs.readdirSync(store.versionsDir).sort()).toEqual(['1.2.0', '1.3.0']);
    for (let i = 0; i < MAX_ATTEMPTS; i++) expect(chooseLaunch(store, '1.0.0')).toMatchObject({ version: '1.3.0', pending: true });
    expect(chooseLaunch(store, '1.0.0')).toMatchObject({ version: '1.2.0', pending: false });
    expect(store.read()).toMatchObject({ current: '1.2.0', refused: ['1.3.0'], failed: { version: '1.3.0', rolled_back_to: '1.2.0' } });
    expect(fs.readdirSync(store.versionsDir)).toEqual(['1.2.0']);
  });

  it('goes back to the package when the first update fails, and a newer package wins over an update', () => {
    const { store, pkg, bundle } = setup();
    store.install('1.1.0', bundle, pkg, '1.0.0', undefined);
    store.rollback('1.1.0', 'it failed to start: boom');
    expect(chooseLaunch(store, '1.0.0')).toBeUndefined();
    expect(store.read().failed).toMatchObject({ version: '1.1.0', rolled_back_to: 'package' });

    store.install('1.2.0', bundle, pkg, '1.0.0', undefined);
    store.confirm('1.2.0');
    // apt installed package 2.0.0 since: it runs, the update is dropped.
    expect(chooseLaunch(store, '2.0.0')).toBeUndefined();
    expect(store.read().current).toBeUndefined();
    expect(fs.readdirSync(store.versionsDir)).toEqual([]);
  });

  it('ignores a pointer that names no installed version or a path', () => {
    const { store } = setup();
    store.write({ current: '../../../etc', package_version: '1.0.0' });
    expect(chooseLaunch(store, '1.0.0')).toBeUndefined();
    store.write({ current: '9.9.9', package_version: '1.0.0' });
    expect(chooseLaunch(store, '1.0.0')).toBeUndefined();
    fs.writeFileSync(path.join(store.dir, 'update.json'), '{not json');
    expect(chooseLaunch(store, '1.0.0')).toBeUndefined();
    const { store: other, pkg, bundle } = setup();
    expect(() => other.install('../x', bundle, pkg, '1.0.0', undefined)).toThrow('not a version');
  });
});
