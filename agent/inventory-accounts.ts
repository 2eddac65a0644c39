/**
 * Users and groups of the inventory: /etc/passwd (with /etc/shadow's facts when readable, never a
 * hash) and /etc/group, parsed into qbee's shapes.
 */
import { INVENTORY_LIMITS } from '../shared/inventory-limits.js';
import type { SystemGroup, SystemUser } from '../shared/inventory.js';
import { clean } from './inventory-read.js';

/** qbee's password algorithm numbers, from the `$id$` prefix of a shadow hash. */
function passwordAlgorithm(hash: string): number {
  const m = /^\$(\w+)\$/.exec(hash);
  switch (m?.[1]) {
    case '1':
      return 1;
    case '2':
    case '2a':
    case '2b':
    case '2y':
      return 2;
    case '5':
      return 5;
    case '6':
      return 6;
    case 'y':
      return 7;
    default:
      return 0;
  }
}

/** /etc/passwd, with /etc/shadow's facts when it could be read (no hash ever leaves this function). */
export function parsePasswd(passwd: string, shadow?: string): SystemUser[] {
  const shadowed = new Map<string, { hash: string; changed: number }>();
  for (const line of (shadow ?? '').split('\n')) {
    const [name, hash, changed] = line.split(':');
    if (name && hash !== undefined) shadowed.set(name, { hash, changed: Number(changed) || 0 });
  }
  const out: SystemUser[] = [];
  for (const line of passwd.split('\n')) {
    if (!line || line.startsWith('#') || line.startsWith('+') || line.startsWith('-')) continue;
    const [user, , uid, gid, gecos = '', home = '', shell = ''] = line.split(':');
    if (!user || !/^\d+$/.test(uid ?? '') || !/^\d+$/.test(gid ?? '')) continue;
    const s = shadow === undefined ? undefined : shadowed.get(user);
    const hasPassword = s ? s.hash.length > 0 && !s.hash.startsWith('!') && !s.hash.startsWith('*') : false;
    out.push({
      user: clean(user),
      uid: Math.min(Number(uid), 4_294_967_295),
      gid: Math.min(Number(gid), 4_294_967_295),
      gecos: clean(gecos, INVENTORY_LIMITS.long),
      home: clean(home, INVENTORY_LIMITS.long),
      shell: clean(shell, INVENTORY_LIMITS.long),
      has_pwd: shadow === undefined ? '' : hasPassword ? 'yes' : 'no',
      pwd_alg: s && hasPassword ? passwordAlgorithm(s.hash) : 0,
      pwd_age: s ? Math.min(s.changed, 1_000_000) : 0,
    });
    if (out.length >= INVENTORY_LIMITS.users) break;
  }
  return out;
}

export function parseGroups(text: string): SystemGroup[] {
  const out: SystemGroup[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#') || line.startsWith('+') || line.startsWith('-')) continue;
    const [group, , gid, members = ''] = line.split(':');
    if (!group || !/^\d+$/.test(gid ?? '')) continue;
    out.push({
      group: clean(group),
      gid: Math.min(Number(gid), 4_294_967_295),
      members: members
        .split(',')
        .filter(Boolean)
        .slice(0, 1_000)
        .map((m) => clean(m)),
    });
    if (out.length >= INVENTORY_LIMITS.groups) break;
  }
  return out;
}
