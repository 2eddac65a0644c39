import type { GroupTree, GroupTreeNode } from '../shared/api-types.js';
import type { ApiClient } from './api.js';
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
        name: node.attributes?.device_name || node.title || node.node_id,
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
  return rows.sort((a, b) => a.name.localeCompare(b.name) || a.id.localeCompare(b.id));
}

/** A device given by id, by name, or by an unambiguous id prefix (at least 6 characters). */
export async function resolveDevice(client: ApiClient, given: string): Promise<{ id: string; name: string }> {
  if (DEVICE_ID.test(given)) return { id: given, name: given.slice(0, 12) };
  const devices = await listDevices(client);
  const byName = devices.filter((d) => d.name === given);
  if (byName.length === 1) return byName[0];
  if (byName.length > 1)
    throw new CliError(`"${given}" names ${byName.length} devices (${byName.map((d) => d.id.slice(0, 12)).join(', ')}); give the device id.`);
  if (/^[0-9a-f]{6,63}$/.test(given)) {
    const byPrefix = devices.filter((d) => d.id.startsWith(given));
    if (byPrefix.length === 1) return byPrefix[0];
    if (byPrefix.length > 1) throw new CliError(`"${given}" is the start of ${byPrefix.length} device ids; give more of it.`);
  }
  throw new CliError(`No device "${given}" among those you may see; list them with "fleet devices".`);
}

/** A table of text the broker and devices control: control characters are shown escaped, never sent to the terminal. */
export function formatTable(given: string[][]): string {
  const rows = given.map((r) => r.map(escapeForTerminal));
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]))).join('  ')).join('\n');
}
