import { describe, expect, it } from 'vitest';
import { NOT_BUILT_PERMISSIONS, PERMISSION_NAMES } from '../shared/permissions.js';
import { routeTable } from './routes.js';

describe('route table', () => {
  it('lists as not built exactly the permissions none of whose calls is built (the role editor marks them)', () => {
    const built = new Set(routeTable().flatMap((r) => (r.notImplemented ? [] : [r.access].flat())));
    expect([...NOT_BUILT_PERMISSIONS].sort()).toEqual(PERMISSION_NAMES.filter((p) => !built.has(p)).sort());
  });
});
