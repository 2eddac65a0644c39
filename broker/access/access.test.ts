import { describe, expect, it } from 'vitest';
import { compilePolicies, type DeviceScope, type Policy } from '../../shared/resources.js';
import { AccessService } from './access.js';
import { Principal } from './principal.js';

const access = new AccessService({ scopeOf: async () => undefined });

function principal(policies: Policy[]): Principal {
  return new Principal({ id: 'u', email: 'u@example.com', fname: 'U', lname: 'Ser' }, 's', compilePolicies(policies));
}

const scopes: DeviceScope[] = [
  { deviceId: 'd1', nodeIds: ['d1', 'rack', 'root'], tags: ['east', 'hot'] },
  { deviceId: 'd2', nodeIds: ['d2', 'lab', 'root'], tags: [] },
  { deviceId: 'd3', nodeIds: ['d3', 'unassigned_group', 'root'], tags: ['hot'] },
];

describe('AccessService.seer (the group tree’s predicate)', () => {
  it.each<[string, Policy[]]>([
    ['nothing', []],
    ['another permission only', [{ permission: 'device:manage', resources: ['*'] }]],
    ['everything', [{ permission: 'device:read', resources: ['*'] }]],
    ['one tag', [{ permission: 'device:read', resources: ['tag:hot'] }]],
    ['a group', [{ permission: 'device:read', resources: ['node:lab'] }]],
    [
      'a device and a tag over two policies',
      [
        { permission: 'device:read', resources: ['node:d1'] },
        { permission: 'device:read', resources: ['tag:none'] },
      ],
    ],
  ])('answers as canSee does for %s', (_what, policies) => {
    const p = principal(policies);
    const see = access.seer(p, 'device:read');
    for (const scope of scopes) expect(see(scope)).toBe(access.canSee(p, 'device:read', scope));
  });
});
