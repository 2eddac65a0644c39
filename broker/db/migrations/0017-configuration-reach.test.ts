import { describe, expect, it } from 'vitest';
import { explicitConfigurationReach } from './0017-configuration-reach.js';

describe('migration 0017: configuration reach made explicit', () => {
  const lab = { id: 'lab', policies: [{ permission: 'device:read', resources: ['tag:lab'] }, { permission: 'configuration:manage' }] };
  const configOnly = { id: 'cfg', policies: [{ permission: 'configuration:read', resources: ['*'] }] };
  const readLab = { id: 'read-lab', policies: [{ permission: 'device:read', resources: ['tag:lab', 'node:g1'] }] };
  const readAll = { id: 'read-all', policies: [{ permission: 'device:read' }] };
  const admin = {
    id: 'admin',
    builtin: true,
    policies: [
      { permission: 'device:read', resources: ['*'] },
      { permission: 'configuration:manage', resources: ['*'] },
    ],
  };

  it('narrows a configuration grant to the device:read its holders had, never wider than any holder reached', () => {
    const out = explicitConfigurationReach([lab, configOnly, readLab, readAll, admin], new Map([['u1', ['lab']]]));
    expect(out.get('lab')).toEqual([
      { permission: 'device:read', resources: ['tag:lab'] },
      { permission: 'configuration:manage', resources: ['tag:lab'] },
    ]);
    // the device:read another role gives the holder restricted them too; a holder on `*` (or without device:read) reached everything
    const shared = explicitConfigurationReach(
      [configOnly, readLab, readAll],
      new Map([
        ['u1', ['cfg', 'read-lab']],
        ['u2', ['cfg']],
        ['u3', ['cfg', 'read-all']],
      ]),
    );
    expect(shared.get('cfg')).toEqual([{ permission: 'configuration:read', resources: ['node:g1', 'tag:lab'] }]);
    // holders with nothing in common: nothing is left, the grant goes
    const disjoint = explicitConfigurationReach(
      [configOnly, readLab, { id: 'read-x', policies: [{ permission: 'device:read', resources: ['tag:x'] }] }],
      new Map([
        ['u1', ['cfg', 'read-lab']],
        ['u2', ['cfg', 'read-x']],
      ]),
    );
    expect(disjoint.get('cfg')).toEqual([]);
  });

  it('leaves unrestricted holders, unheld roles without device:read and built-in roles as they are', () => {
    const out = explicitConfigurationReach(
      [configOnly, readAll, admin],
      new Map([
        ['u1', ['cfg', 'read-all']],
        ['u2', ['admin', 'cfg']],
      ]),
    );
    expect(out.size).toBe(0);
    expect(explicitConfigurationReach([configOnly], new Map()).size).toBe(0);
    // an unheld role with its own device:read keeps what an assignee would have had
    expect(explicitConfigurationReach([lab], new Map()).get('lab')?.[1]).toEqual({ permission: 'configuration:manage', resources: ['tag:lab'] });
  });
});
