import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import {
  auditableChangeBody,
  credentialValues,
  extendBundle,
  scrubReports,
  maskSecrets,
  referencedFiles,
  restoreSecrets,
  secretRef,
  validateBundle,
  type BundleData,
} from './bundles.js';
import { render, type Level, type OwnBundle } from './render.js';

const own = (data: BundleData, extend = false, commitCreated = 1, commitSha = `c${commitCreated}`): OwnBundle => ({ data, extend, commitCreated, commitSha });
const lvl = (type: 'node' | 'tag', id: string, bundles: Record<string, OwnBundle> = {}): Level => ({
  type,
  id,
  title: id.toUpperCase(),
  bundles: new Map(Object.entries(bundles)),
});

describe('render', () => {
  it('replaces down the tree unless a level extends; says where each bundle comes from', () => {
    const root = lvl('node', 'root', { ntp: own({ servers: ['a'] }, false, 1), settings: own({ agentinterval: 5 }, false, 1) });
    const group = lvl('node', 'g1', { ntp: own({ servers: ['b'] }, true, 2) });
    const device = lvl('node', 'dev', { settings: own({ agentinterval: 10 }, false, 3) });
    const r = render({ type: 'node', id: 'dev' }, [root, group, device], []);
    expect(r.bundles).toEqual(['settings', 'ntp']);
    expect(r.bundle_data.ntp).toMatchObject({
      servers: ['a', 'b'],
      extend: true,
      inherited: true,
      bundle_commit_id: 'c2',
      inherits: { root: 'ROOT', g1: 'G1', dev: 'DEV' },
    });
    expect(r.bundle_data.ntp.inherited_from).toEqual([
      { type: 'node', id: 'root', title: 'ROOT' },
      { type: 'node', id: 'g1', title: 'G1' },
    ]);
    expect(r.bundle_data.settings).toMatchObject({ agentinterval: 10, inherited: false, enabled: true, version: 'v1' });
    expect(r.commit_id).toBe('c3');
    expect(r.commit_created).toBe(3_000_000);
  });

  it('places tags between the groups and the node, newest commit last', () => {
    const root = lvl('node', 'root', { parameters: own({ parameters: [{ key: 'k', value: 'root' }] }, false, 1) });
    const device = lvl('node', 'dev');
    const older = lvl('tag', 'zeta', {
      parameters: own(
        {
          parameters: [
            { key: 'k', value: 'zeta' },
            { key: 'z', value: '1' },
          ],
        },
        true,
        2,
      ),
    });
    const newer = lvl('tag', 'alpha', { parameters: own({ parameters: [{ key: 'k', value: 'alpha' }] }, true, 5) });
    const r = render({ type: 'node', id: 'dev' }, [root, device], [newer, older]);
    expect(r.bundle_data.parameters.parameters).toEqual([
      { key: 'k', value: 'alpha' },
      { key: 'z', value: '1' },
    ]);
    expect((r.bundle_data.parameters.inherited_from as { id: string }[]).map((s) => s.id)).toEqual(['root', 'zeta', 'alpha']);
    // The device's own bundle, not extending, replaces everything it inherits.
    device.bundles.set('parameters', own({ parameters: [] }, false, 6));
    const again = render({ type: 'node', id: 'dev' }, [root, device], [newer, older]);
    expect(again.bundle_data.parameters).toMatchObject({ parameters: [], inherited: false });
  });

  it('a tag renders as itself only', () => {
    const r = render({ type: 'tag', id: 't' }, [], [lvl('tag', 't', { ntp: own({ servers: ['x'] }) })]);
    expect(r).toMatchObject({ id: 't', type: 'tag', bundles: ['ntp'] });
  });
});

describe('bundles', () => {
  it('extend merges objects, lists and keyed items', () => {
    expect(
      extendBundle({ a: { x: 1, y: [1] }, items: [{ name: 'p', version: '1' }] }, { a: { y: [2] }, items: [{ name: 'p', version: '2' }, { name: 'q' }] }),
    ).toEqual({
      a: { x: 1, y: [1, 2] },
      items: [{ name: 'p', version: '2' }, { name: 'q' }],
    });
  });

  it('validates names, fields, shapes and sizes', () => {
    const bad = (bundle: string, config: unknown) => {
      try {
        validateBundle(bundle, config);
      } catch (err) {
        expect(err).toBeInstanceOf(DomainError);
        return (err as DomainError).kind;
      }
      return 'accepted';
    };
    expect(bad('nope', {})).toBe('invalid');
    expect(bad('settings', [])).toBe('invalid');
    expect(bad('settings', { agentintervall: 5 })).toBe('invalid');
    expect(bad('parameters', { parameters: [{ key: 1, value: 'x' }] })).toBe('invalid');
    expect(bad('file_distribution', { files: [{ templates: [{ source: 5 }] }] })).toBe('invalid');
    expect(bad('ntp', { servers: ['x'.repeat(70_000)] })).toBe('invalid');
    expect(bad('ntp', { servers: Array.from({ length: 1001 }, () => 'x') })).toBe('invalid');
    let deep: unknown = 'x';
    for (let i = 0; i < 20; i++) deep = { d: deep };
    expect(bad('ntp', { servers: deep })).toBe('invalid');
    expect(bad('users', { items: Array.from({ length: 900 }, () => ({ username: 'u'.repeat(400) })) })).toBe('invalid');
    expect(bad('settings', { enabled: true, agentinterval: 5, version: 'v1' })).toBe('accepted');
    // Broker-set metadata is not taken from clients.
    expect(validateBundle('ntp', { servers: [], inherited: true, bundle_commit_id: 'x' })).toEqual({ servers: [] });
  });

  it('masks every credential field and restores a reference sent back for the same place', () => {
    const key = Buffer.alloc(32, 7);
    const home = { entity: 'node:root', version: 'c1' };
    const stored: BundleData = { secrets: [{ key: 'pw', value: 'hunter2' }] };
    const masked = maskSecrets('parameters', stored, key, home);
    expect(JSON.stringify(masked)).not.toContain('hunter2');
    expect(masked.secrets).toEqual([{ key: 'pw', value: secretRef(key, home, '.secrets[[["key","pw"]]].value', 'hunter2') }]);
    expect(restoreSecrets('parameters', masked, [{ data: stored, home }], key)).toEqual(stored);
    // another item, another entity or another stored version: the reference does not fit
    expect(() =>
      restoreSecrets('parameters', { secrets: [{ key: 'other', value: (masked.secrets as { value: string }[])[0].value }] }, [{ data: stored, home }], key),
    ).toThrow(DomainError);
    expect(() => restoreSecrets('parameters', masked, [{ data: stored, home: { ...home, entity: 'node:g' } }], key)).toThrow(DomainError);
    expect(() => restoreSecrets('parameters', masked, [{ data: stored, home: { ...home, version: 'c2' } }], key)).toThrow(DomainError);
    // the same value stored elsewhere (a guess staged beside it) has an unrelated reference
    expect(maskSecrets('parameters', stored, key, { ...home, version: 'change-2' })).not.toEqual(masked);
    // registry passwords and password hashes are credentials too
    const docker = maskSecrets('docker_containers', { registry_auths: [{ server: 'r.io', username: 'u', password: 'pw1' }] }, key, home);
    const hashes = maskSecrets('password', { users: [{ username: 'root', passwordhash: '$6$salt$hash' }] }, key, home);
    expect(JSON.stringify([docker, hashes])).not.toMatch(/pw1|\$6\$/);
    expect(JSON.stringify([docker, hashes])).toMatch(/secret-ref:.*secret-ref:/);
  });

  it('masks the credential fields of change and commit bodies for the audit trail, whatever the body', () => {
    const docker = { formtype: 'docker_containers', config: { registry_auths: [{ server: 'r', username: 'u', password: 'pw1' }] } };
    const hashes = { formtype: 'password', config: { users: [{ username: 'root', passwordhash: '$6$x$y' }] } };
    expect(auditableChangeBody(docker)).toEqual({
      formtype: 'docker_containers',
      config: { registry_auths: [{ server: 'r', username: 'u', password: '[redacted]' }] },
    });
    expect(JSON.stringify(auditableChangeBody({ message: 'm', changes: [docker, hashes, 7] }))).not.toMatch(/pw1|\$6\$/);
    // an unknown bundle name: every credential field of the list is masked
    expect(JSON.stringify(auditableChangeBody({ formtype: 'nope', config: { secrets: [{ key: 'k', value: 'v1' }] } }))).not.toContain('v1');
    for (const odd of [null, 'x', [], { changes: 'x' }, { formtype: 'parameters', config: 'x' }]) expect(auditableChangeBody(odd)).toEqual(odd);
  });

  it('scrubs the device’s credentials from what its agent reports, in text and log', () => {
    const values = credentialValues({
      parameters: { secrets: [{ key: 'db', value: 'db-pass-1' }] },
      docker_containers: { registry_auths: [{ server: 'r', username: 'u', password: 'reg-pw-2' }] },
      ntp: { servers: ['pool'] },
    });
    expect(values.sort()).toEqual(['db-pass-1', 'reg-pw-2']);
    const log = Buffer.from('login reg-pw-2 failed; db=db-pass-1 ✓').toString('base64');
    const [r] = scrubReports([{ text: 'echo db-pass-1', log, sev: 'ERR' }], values);
    expect(r.text).toBe('echo [redacted]');
    expect(Buffer.from(r.log!, 'base64').toString('utf8')).toBe('login [redacted] failed; db=[redacted] ✓');
    expect(r.sev).toBe('ERR');
  });

  it('lists the file-store files a configuration names', () => {
    expect(
      [
        ...referencedFiles({
          file_distribution: { files: [{ templates: [{ source: '/a/b.txt' }, { source: 'c.txt' }] }] },
          software_management: { items: [{ config_files: [{ config_template: '/t.conf' }] }] },
          docker_containers: { items: [{ env_file: '/env' }] },
          rauc: { rauc_bundle: '/r.raucb' },
        }),
      ].sort(),
    ).toEqual(['a/b.txt', 'c.txt', 'env', 'r.raucb', 't.conf']);
  });
});
