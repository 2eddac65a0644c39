/**
 * Changing the group tree from the device list: a group can get a sub-group, a new name, a new
 * parent, other tags, or be deleted; a device can be renamed, moved to another group and tagged.
 * Every change is one call (PUT /grouptree or PATCH /grouptree/{node_id}); the broker decides
 * whether this user may make it, and its message is shown when it refuses.
 */
import { useState } from 'preact/hooks';
import type { GroupTreeNode } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { ConfirmButton, ErrorBox, useAction } from '../ui.js';

/** root and unassigned_group are fixed: neither moved nor deleted. */
export const FIXED_GROUPS = new Set(['root', 'unassigned_group']);

export interface GroupOption {
  node_id: string;
  /** Path of titles from the top, for the move target list. */
  label: string;
}

/** Every group of the tree, in tree order, with its path (for "move to"). */
export function groupOptions(node: GroupTreeNode, above: string[] = []): GroupOption[] {
  if (node.type !== 'group') return [];
  const path = [...above, node.title || node.node_id];
  return [{ node_id: node.node_id, label: path.join(' / ') }, ...(node.nodes ?? []).flatMap((c) => groupOptions(c, path))];
}

/** The node ids at or below a node: a group cannot move into itself or below itself. */
export function subtreeIds(node: GroupTreeNode): Set<string> {
  const ids = new Set<string>([node.node_id]);
  for (const c of node.nodes ?? []) for (const id of subtreeIds(c)) ids.add(id);
  return ids;
}

/** Tags typed as "a, b c": split on commas and spaces, without duplicates. */
export function parseTags(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}

function changeTree(change: { action: string; data: Record<string, unknown> }) {
  return api.put('/grouptree', { changes: [change] });
}

export function NodeManager({
  node,
  groups,
  onChanged,
  onClose,
}: {
  node: GroupTreeNode;
  groups: GroupOption[];
  onChanged: (notice: string) => void;
  onClose: () => void;
}) {
  const action = useAction();
  const isGroup = node.type === 'group';
  const fixed = FIXED_GROUPS.has(node.node_id);
  const [title, setTitle] = useState(node.title);
  const [tags, setTags] = useState((node.tags ?? []).join(', '));
  const excluded = isGroup ? subtreeIds(node) : new Set<string>();
  const targets = groups.filter((g) => !excluded.has(g.node_id) && g.node_id !== node.node_id);
  const [target, setTarget] = useState('');
  const [childTitle, setChildTitle] = useState('');
  const name = node.title || node.node_id;

  const done = (notice: string) => () => onChanged(notice);
  return (
    <section class="panel node-manager" aria-label={`Manage ${name}`}>
      <header class="node-manager-head">
        <h2>
          {isGroup ? 'Group' : 'Device'} {name} <code class="node-id">{node.node_id}</code>
        </h2>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </header>
      <ErrorBox error={action.error} />
      {!fixed && (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            void action.run(() =>
              changeTree({ action: 'rename', data: { node_id: node.node_id, title: title.trim() } }).then(done(`Renamed to ${title.trim()}.`)),
            );
          }}
        >
          <label for="nm-title">Name</label>
          <input id="nm-title" value={title} required maxLength={255} onInput={(e) => setTitle(e.currentTarget.value)} />
          <button type="submit" disabled={action.busy || !title.trim() || title.trim() === node.title}>
            Rename
          </button>
        </form>
      )}
      {!fixed && (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            const to = groups.find((g) => g.node_id === target);
            void action.run(() =>
              changeTree({ action: 'move', data: { node_id: node.node_id, parent_id: target } }).then(done(`Moved ${name} to ${to?.label ?? target}.`)),
            );
          }}
        >
          <label for="nm-move">Move to</label>
          <select id="nm-move" value={target} onChange={(e) => setTarget(e.currentTarget.value)}>
            <option value="">Choose a group…</option>
            {targets.map((g) => (
              <option key={g.node_id} value={g.node_id}>
                {g.label}
              </option>
            ))}
          </select>
          <button type="submit" disabled={action.busy || !target}>
            Move
          </button>
        </form>
      )}
      <form
        class="inline-form"
        onSubmit={(e) => {
          e.preventDefault();
          void action.run(() => api.patch(`/grouptree/${encodeURIComponent(node.node_id)}`, { tags: parseTags(tags) }).then(done(`Tags of ${name} saved.`)));
        }}
      >
        <label for="nm-tags">Tags</label>
        <input id="nm-tags" value={tags} placeholder="tag1, tag2" onInput={(e) => setTags(e.currentTarget.value)} />
        <button type="submit" disabled={action.busy}>
          Save tags
        </button>
      </form>
      {isGroup && (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            const t = childTitle.trim();
            void action.run(() => changeTree({ action: 'create', data: { title: t, parent_id: node.node_id } }).then(done(`Group ${t} created.`)));
          }}
        >
          <label for="nm-child">New sub-group</label>
          <input id="nm-child" value={childTitle} maxLength={255} placeholder="Name" onInput={(e) => setChildTitle(e.currentTarget.value)} />
          <button type="submit" disabled={action.busy || !childTitle.trim()}>
            Create group
          </button>
        </form>
      )}
      {isGroup && !fixed && (
        <ConfirmButton
          label="Delete group"
          question={`Delete the group ${name}? Only an empty group can be deleted.`}
          disabled={action.busy}
          onConfirm={() => void action.run(() => changeTree({ action: 'delete', data: { node_id: node.node_id } }).then(done(`Group ${name} deleted.`)))}
        />
      )}
    </section>
  );
}
