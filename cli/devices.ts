import type { GroupTree, GroupTreeNode } from '../shared/api-types.js';
import { deviceNameOf } from '../shared/device-names.js';
import type { ApiClient } from './api.js';
import { nameComparator } from './collate.js';
import { CliError } from './errors.js';
import { escapeForTerminal } from '../shared/text.js';

export interface DeviceRow {
  id: string;
  name: string;
  status: string;
  tags: string[];
  group: string;
}

const DEVICE_ID = /^[0-9a-f]{64}$/;

/** Every device of the group tree the caller may read, with the path of groups above it. */
export async function listDevices(client: ApiClient): Promise<DeviceRow[]> {
  const tree = await client.call<GroupTree>('GET', '/grouptree');
  const rows: DeviceRow[] = [];
  const walk = (node: GroupTreeNode, groups: string[]) => {
    if (node.type === 'device') {
      rows.push({
        id: node.node_id,
        name: deviceNameOf(node),
        status: node.status ?? '',
        tags: node.tags ?? [],
        group: groups.join('/') || '/',
      });
      return;
    }
    const path = node.node_id === 'root' ? groups : [...groups, node.title || node.node_id];
    for (const child of node.nodes ?? []) walk(child, path);
  };
  if (tree?.tree) walk(tree.tree, []);
  const compare = nameComparator();
  return rows.sort((a, b) => compare(a.name, b.name) || compare(a.id, b.id));
}

/** The shortest prefix that tells each id apart from the others, at least `min` characters. */
export function shortIds(ids: string[], min = 8): Map<string, string> {
  const sorted = [...new Set(ids)].sort();
  const short = new Map<string, string>();
  const common = (a: string, b: string) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
  };
  sorted.forEach((id, i) => {
    const shared = Math.max(i > 0 ? common(id, sorted[i - 1]) : 0, i + 1 < sorted.length ? common(id, sorted[i + 1]) : 0);
    short.set(id, id.slice(0, Math.max(min, shared + 1)));
  });
  return short;
}

/** The least of an id prefix a device may be named by. */
export const MIN_ID_PREFIX = 4;

/**
 * A device given by its id, its name, or a unique prefix of its id (at least 4 characters); an
 * ambiguous name or prefix lists the matching short ids.
 */
export async function resolveDevice(client: ApiClient, given: string): Promise<{ id: string; name: string }> {
  if (DEVICE_ID.test(given)) return { id: given, name: given.slice(0, 12) };
  const devices = await listDevices(client);
  const short = shortIds(devices.map((d) => d.id));
  const list = (found: DeviceRow[]) => found.map((d) => short.get(d.id)).join(', ');
  const byName = devices.filter((d) => d.name === given);
  if (byName.length === 1) return byName[0];
  if (byName.length > 1) throw new CliError(`"${given}" names ${byName.length} devices (${list(byName)}); give the device id or more of it.`);
  const prefix = given.toLowerCase();
  if (new RegExp(`^[0-9a-f]{${MIN_ID_PREFIX},63}$`).test(prefix)) {
    const byPrefix = devices.filter((d) => d.id.startsWith(prefix));
    if (byPrefix.length === 1) return byPrefix[0];
    if (byPrefix.length > 1) throw new CliError(`"${given}" is the start of ${byPrefix.length} device ids (${list(byPrefix)}); give more of it.`);
  } else if (/^[0-9a-f]{1,3}$/i.test(given)) {
    throw new CliError(`"${given}" is too short for a device id: give at least ${MIN_ID_PREFIX} characters of it, or the device name.`);
  }
  throw new CliError(`No device "${given}" among those you may see; list them with "fleet devices".`);
}

/** A table of text the broker and devices control: control characters are shown escaped, never sent to the terminal. */
export function formatTable(given: string[][]): string {
  const rows = given.map((r) => r.map(escapeForTerminal));
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')).join('\n');
}

/** Seconds as m:ss or h:mm:ss (--:-- when unknown). */
export function humanDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '--:--';
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const mm = String(m).padStart(h ? 2 : 1, '0');
  return `${h ? `${h}:` : ''}${mm}:${String(s % 60).padStart(2, '0')}`;
}
