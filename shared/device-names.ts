/**
 * How the `fleet` CLI names a device, for the CLI itself and for the commands the web console
 * shows: one rule in one place, so a name the console prints is a name the CLI resolves.
 *
 * The CLI (cli/devices.ts, resolveDevice) takes a 64-hex id as the id; otherwise the device whose
 * name is exactly the argument, refusing a name that several devices the caller sees share.
 */
import type { GroupTree, GroupTreeNode } from './api-types.js';

const DEVICE_ID = /^[0-9a-f]{64}$/;
/** What sh takes as one word without quotes. */
const SHELL_PLAIN = /^[A-Za-z0-9._@%+=:,/-]+$/;

/** The name of a device node: its device_name attribute, else its title, else its id. */
export function deviceNameOf(node: Pick<GroupTreeNode, 'node_id' | 'title' | 'attributes'>): string {
  return node.attributes?.device_name || node.title || node.node_id;
}

/** Every device of a group tree with its name (the caller's view: the tree holds what they may read). */
export function namedDevices(tree: GroupTree | undefined): { id: string; name: string }[] {
  const out: { id: string; name: string }[] = [];
  const walk = (node: GroupTreeNode) => {
    if (node.type === 'device') out.push({ id: node.node_id, name: deviceNameOf(node) });
    else for (const child of node.nodes ?? []) walk(child);
  };
  if (tree?.tree) walk(tree.tree);
  return out;
}

/** One word for sh: as it is when that is safe, else in single quotes. */
export function shellWord(word: string): string {
  return SHELL_PLAIN.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * The device argument of a `fleet` command for this device: its name when the CLI resolves that
 * name to it, else its id, with the reason the name would not do.
 */
export function cliDeviceArgument(deviceId: string, devices: { id: string; name: string }[]): { arg: string; reason?: string } {
  const name = devices.find((d) => d.id === deviceId)?.name;
  if (!name || name === deviceId) return { arg: deviceId };
  if (DEVICE_ID.test(name)) return { arg: deviceId, reason: 'its name reads as a device id' };
  if (name.startsWith('-')) return { arg: deviceId, reason: 'its name starts with a dash, which the CLI reads as an option' };
  const same = devices.filter((d) => d.name === name).length;
  if (same > 1) return { arg: deviceId, reason: `${same} devices you can see are named "${name}"` };
  return { arg: shellWord(name) };
}
