import { type Kysely, type Migration } from 'kysely';

/**
 * This migration's rule: configuration:read and configuration:manage used to reach what the holder's
 * device:read reached when they held device:read, and everything when they did not. They now reach
 * their own resources only. So that no one reaches more after the upgrade, each role's configuration
 * policies are narrowed to what every current holder reached before: the device:read resources all of
 * them share (a holder without device:read, or with it on `*`, reached everything). A role without
 * holders is narrowed to its own device:read resources, as an assignee without another device:read
 * would have had. Where nothing is left, the configuration policy is dropped. Built-in roles (every
 * permission on `*`) are left as they are.
 */
/** A role's policy as stored then. */
interface Policy {
  permission: string;
  resources?: string[];
}

const CONFIGURATION = new Set(['configuration:read', 'configuration:manage']);

function resourcesOf(p: Policy): string[] {
  return p.resources === undefined || p.resources.length === 0 ? ['*'] : p.resources;
}

/** The device:read resources a set of policies hold; undefined: every device (held on `*`, or not held, which reached everything). */
function deviceReadReach(policies: Policy[]): Set<string> | undefined {
  const held = policies.filter((p) => p.permission === 'device:read').flatMap(resourcesOf);
  if (held.length === 0 || held.includes('*')) return undefined;
  return new Set(held);
}

/** The roles whose policies change, with their new policies. `holders`: each user's role ids. */
export function explicitConfigurationReach(
  roles: { id: string; policies: Policy[]; builtin?: boolean }[],
  holders: Map<string, string[]>,
): Map<string, Policy[]> {
  const byId = new Map(roles.map((r) => [r.id, r]));
  const changed = new Map<string, Policy[]>();
  for (const role of roles) {
    if (role.builtin) continue;
    if (!role.policies.some((p) => CONFIGURATION.has(p.permission) && resourcesOf(p).includes('*'))) continue;
    const users = [...holders.values()].filter((ids) => ids.includes(role.id));
    let reach: Set<string> | undefined;
    if (users.length === 0) reach = deviceReadReach(role.policies);
    else
      for (const ids of users) {
        const theirs = deviceReadReach(ids.flatMap((id) => byId.get(id)?.policies ?? []));
        if (theirs === undefined) continue;
        reach = reach === undefined ? theirs : new Set([...reach].filter((r) => theirs.has(r)));
      }
    if (reach === undefined) continue;
    const narrowed = [...reach].sort();
    changed.set(
      role.id,
      role.policies.flatMap((p) => {
        if (!CONFIGURATION.has(p.permission) || !resourcesOf(p).includes('*')) return [p];
        return narrowed.length === 0 ? [] : [{ ...p, resources: narrowed }];
      }),
    );
  }
  return changed;
}

/**
 * configuration:read and configuration:manage take resources of their own; they used to reach
 * what the holder's device:read reached. Existing roles keep no more than their holders reached
 * (see explicitConfigurationReach). A role's updated_at moves, so sign-in reads its policies afresh.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const q = db as unknown as Kysely<{
      roles: { id: string; policies: string; builtin: number; updated_at: string };
      user_roles: { user_id: string; role_id: string };
    }>;
    const roles = await q.selectFrom('roles').select(['id', 'policies', 'builtin']).execute();
    const holders = new Map<string, string[]>();
    for (const row of await q.selectFrom('user_roles').select(['user_id', 'role_id']).execute())
      holders.set(row.user_id, [...(holders.get(row.user_id) ?? []), row.role_id]);
    const changed = explicitConfigurationReach(
      roles.map((r) => ({
        id: r.id,
        builtin: Number(r.builtin) === 1,
        policies: JSON.parse(r.policies) as Policy[],
      })),
      holders,
    );
    const now = new Date().toISOString();
    for (const [id, policies] of changed)
      await q
        .updateTable('roles')
        .set({ policies: JSON.stringify(policies), updated_at: now })
        .where('id', '=', id)
        .execute();
  },
};
