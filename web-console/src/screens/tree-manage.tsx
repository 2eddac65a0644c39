/**
 * Changing the group tree from the device list: a group can get a sub-group, a new name, a new
 * parent, other tags, or be deleted; a device can be renamed, moved to another group and tagged.
 * Every change is one call (PUT /grouptree or PATCH /grouptree/{node_id}); the broker decides
 * whether this user may make it, and its message is shown when it refuses. What is offered
 * follows the broker's hints (GET /grouptree?manage_hints=true: `can_manage` per node and
 * `manageable_tags`), so a manager restricted to some groups is not offered the others.
 */
import { useState } from 'preact/hooks';
import type { GroupTreeNode } from '../../../shared/api-types.js';
import { holdsSentence, type GroupHolds } from '../../../shared/group-holds.js';
import { api } from '../api.js';
import { ConfirmButton, ErrorBox, useAction } from '../ui.js';

/** root and unassigned_group are fixed: neither moved nor deleted. */
export const FIXED_GROUPS = new Set(['root', 'unassigned_group']);

export interface GroupOption {
  node_id: string;
  /** Path of titles from the top, for the move target list. */
  label: string;
  /** The broker's hint: the user may move things into it (see mayManage). */
  manageable: boolean;
}

/**
 * Whether to offer managing this node: the broker's `can_manage` hint; a tree without hints (an
 * older broker) offers everything and the broker's refusal is shown.
 */
export function mayManage(node: Pick<GroupTreeNode, 'can_manage'>): boolean {
  return node.can_manage !== false;
}

/** Every group of the tree, in tree order, with its path (for "move to"). */
export function groupOptions(node: GroupTreeNode, above: string[] = []): GroupOption[] {
  if (node.type !== 'group') return [];
  const path = [...above, node.title || node.node_id];
  return [{ node_id: node.node_id, label: path.join(' / '), manageable: mayManage(node) }, ...(node.nodes ?? []).flatMap((c) => groupOptions(c, path))];
}

/** The tags the broker says this user may add or remove: '*' for any (also when it did not say). */
export type ManageableTags = '*' | string[];

/**
 * The tags a change from `before` to `after` adds or removes that are not among `manageable`: the
 * broker would refuse the change, so it is not sent.
 */
export function tagsOutside(before: string[], after: string[], manageable: ManageableTags): string[] {
  if (manageable === '*') return [];
  const changed = [...after.filter((t) => !before.includes(t)), ...before.filter((t) => !after.includes(t))];
  return [...new Set(changed.filter((t) => !manageable.includes(t)))];
}

/** A sentence naming the tags a restricted manager may change. */
export function manageableTagsNote(manageable: ManageableTags): string | null {
  if (manageable === '*') return null;
  if (manageable.length === 0) return 'Your device:manage resources let you add or remove no tags.';
  return `You may add or remove only these tags: ${manageable.join(', ')}.`;
}

/** The node ids at or below a node: a group cannot move into itself or below itself. */
export function subtreeIds(node: GroupTreeNode): Set<string> {
  const ids = new Set<string>([node.node_id]);
  for (const c of node.nodes ?? []) for (const id of subtreeIds(c)) ids.add(id);
  return ids;
}

/**
 * What a group holds as this user sees it (its direct devices and sub-groups). The broker counts
 * what the user cannot see too, and its refusal says so.
 */
export function groupHolds(node: GroupTreeNode): GroupHolds {
  const children = node.nodes ?? [];
  return { devices: children.filter((c) => c.type === 'device').length, groups: children.filter((c) => c.type === 'group').length };
}

/** The node with this id in the tree, if it is (still) there. */
export function findNode(node: GroupTreeNode, id: string): GroupTreeNode | null {
  if (node.node_id === id) return node;
  for (const c of node.nodes ?? []) {
    const found = findNode(c, id);
    if (found) return found;
  }
  return null;
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
  manageableTags = '*',
  onChanged,
  onStart,
  onClose,
}: {
  node: GroupTreeNode;
  groups: GroupOption[];
  /** GET /grouptree's manageable_tags */
  manageableTags?: ManageableTags;
  onChanged: (notice: string) => void;
  /** a change is being sent: the last one's notice is old news */
  onStart?: () => void;
  onClose: () => void;
}) {
  const actions = useAction();
  const action = {
    ...actions,
    run: <T,>(change: () => Promise<T>) => {
      onStart?.();
      return actions.run(change);
    },
  };
  const isGroup = node.type === 'group';
  const fixed = FIXED_GROUPS.has(node.node_id);
  const [title, setTitle] = useState(node.title);
  const [tags, setTags] = useState((node.tags ?? []).join(', '));
  const excluded = isGroup ? subtreeIds(node) : new Set<string>();
  const targets = groups.filter((g) => g.manageable && !excluded.has(g.node_id) && g.node_id !== node.node_id);
  const refusedTags = tagsOutside(node.tags ?? [], parseTags(tags), manageableTags);
  const tagsNote = manageableTagsNote(manageableTags);
  const [target, setTarget] = useState('');
  const [childTitle, setChildTitle] = useState('');
  const name = node.title || node.node_id;
  const holds = groupHolds(node);

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
      {/* A refusal reads as the broker's sentence under "Not changed", never "Something went wrong". */}
      <ErrorBox error={action.error} title="Not changed" />
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
              changeTree({ action: 'move', data: { node_id: node.node_id, parent_id: target } }).then(() => {
                setTarget('');
                onChanged(`Moved ${name} to ${to?.label ?? target}.`);
              }),
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
        <input
          id="nm-tags"
          value={tags}
          placeholder="tag1, tag2"
          aria-describedby={tagsNote ? 'nm-tags-note' : undefined}
          onInput={(e) => setTags(e.currentTarget.value)}
        />
        <button type="submit" disabled={action.busy || refusedTags.length > 0}>
          Save tags
        </button>
        {tagsNote && (
          <p id="nm-tags-note" class={`hint${refusedTags.length ? ' field-error' : ''}`}>
            {refusedTags.length ? `Outside your device:manage resources: ${refusedTags.join(', ')}. ` : ''}
            {tagsNote}
          </p>
        )}
      </form>
      {isGroup && (
        <form
          class="inline-form"
          onSubmit={(e) => {
            e.preventDefault();
            const t = childTitle.trim();
            void action.run(() =>
              changeTree({ action: 'create', data: { title: t, parent_id: node.node_id } }).then(() => {
                setChildTitle('');
                onChanged(`Group ${t} created.`);
              }),
            );
          }}
        >
          <label for="nm-child">New sub-group</label>
          <input id="nm-child" value={childTitle} maxLength={255} placeholder="Name" onInput={(e) => setChildTitle(e.currentTarget.value)} />
          <button type="submit" disabled={action.busy || !childTitle.trim()}>
            Create group
          </button>
        </form>
      )}
      {isGroup && !fixed && holds.devices + holds.groups > 0 && (
        <p class="hint" data-testid="group-holds">
          This group {holdsSentence(holds)}: move or remove them to delete it.
        </p>
      )}
      {isGroup && !fixed && holds.devices + holds.groups === 0 && (
        <ConfirmButton
          label="Delete group"
          question={`Delete the group ${name}?`}
          disabled={action.busy}
          onConfirm={() => void action.run(() => changeTree({ action: 'delete', data: { node_id: node.node_id } }).then(done(`Group ${name} deleted.`)))}
        />
      )}
    </section>
  );
}
