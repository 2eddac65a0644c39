/**
 * Devices and groups by name, for filters that the API takes by id (Audit, Logs): the names come
 * from the group tree the caller may read, so a filter never suggests or resolves a node the
 * caller cannot see. A name two nodes share is told apart by the start of the id.
 */
import type { GroupTree, GroupTreeNode } from '../../shared/api-types.js';

export interface NodeChoice {
  id: string;
  /** what the operator reads and types: the title, or `title · <id start>` when the title is shared */
  label: string;
  type: 'device' | 'group';
}

/** A device id as the API writes it; typed as it is, it filters without a name. */
const DEVICE_ID = /^[0-9a-f]{64}$/;

/** Every node of `types` in the tree, with labels unique among them (ignoring case). */
export function nodeChoices(tree: GroupTree | undefined, types: readonly ('device' | 'group')[]): NodeChoice[] {
  if (!tree) return [];
  const nodes: GroupTreeNode[] = [];
  const walk = (node: GroupTreeNode) => {
    if (types.includes(node.type) && node.node_id !== 'root') nodes.push(node);
    node.nodes?.forEach(walk);
  };
  walk(tree.tree);
  const uses = new Map<string, number>();
  for (const n of nodes) uses.set(n.title.toLowerCase(), (uses.get(n.title.toLowerCase()) ?? 0) + 1);
  return nodes
    .map((n) => ({
      id: n.node_id,
      type: n.type,
      label: (uses.get(n.title.toLowerCase()) ?? 0) > 1 || !n.title ? `${n.title} · ${n.node_id.slice(0, 8)}` : n.title,
    }))
    .sort((a, b) => a.label.localeCompare(b.label));
}

/** The label to show for an id from the URL: its name when known, else the id itself. */
export function labelOf(id: string, choices: readonly NodeChoice[]): string {
  return choices.find((c) => c.id === id)?.label ?? id;
}

export type Resolved = { id: string | undefined } | { problem: string };

/**
 * What the operator typed, as the id the API takes: empty is no filter; a label (any case) or a
 * known id is that node; a 64-hex device id passes as it is (a removed device's entries stay
 * findable). With no names to choose from (the caller may not read the tree) the text passes as
 * an id. Anything else is a problem to show, never a silent empty filter.
 */
export function resolveNode(text: string, choices: readonly NodeChoice[], what: 'device' | 'device or group'): Resolved {
  const typed = text.trim();
  if (!typed) return { id: undefined };
  const lower = typed.toLowerCase();
  const byLabel = choices.find((c) => c.label.toLowerCase() === lower);
  if (byLabel) return { id: byLabel.id };
  const byId = choices.find((c) => c.id === typed);
  if (byId || DEVICE_ID.test(typed) || choices.length === 0) return { id: typed };
  // A shared name typed without its id start: say which ones it could be.
  const same = choices.filter((c) => c.label.toLowerCase().startsWith(`${lower} · `));
  if (same.length > 1)
    return {
      problem: `${same.length} of the ${what === 'device' ? 'devices' : 'devices and groups'} you may see are named “${typed}”: pick one from the list.`,
    };
  return { problem: `No ${what} you may see is named “${typed}”.` };
}
