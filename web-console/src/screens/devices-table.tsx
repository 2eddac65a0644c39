// Kept whole, near ~450 lines: one table, its rows, text and column filters and sorting; the pure helpers are tested beside it (manage.test.ts).
/**
 * The devices as a table: one row per device with its group, status, OS, address, agent version,
 * tags and last contact (from GET /grouptree, and GET /inventory when the user may read it),
 * sortable by any column, and bulk actions on the rows picked: tag, move, reload.
 */
import { useMemo, useState } from 'preact/hooks';
import type { GroupTreeNode, InventoryListItem } from '../../../shared/api-types.js';
import { api, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { Link } from '../router.js';
import { ConfirmButton, ErrorBox, Notice, Tags, useAction, useLoad, useNotice } from '../ui.js';
import { isOnline, LastContact, StatusDot } from './device-status.js';
import { manageableTagsNote, mayManage, parseTags, tagsOutside, type GroupOption, type ManageableTags } from './tree-manage.js';

export interface DeviceRow {
  id: string;
  name: string;
  group: string;
  online: boolean;
  /** own tags (what PATCH /grouptree/{id} replaces) */
  ownTags: string[];
  /** own and inherited tags */
  tags: string[];
  /** Unix seconds, null if never */
  lastSeen: number | null;
  /** The broker's hint: the user may tag and move this device (see mayManage). */
  manageable: boolean;
  /** Attribute values, for the search. */
  attributes: string[];
  os: string;
  ip: string;
  agent: string;
}

export type SortKey = 'name' | 'status' | 'os' | 'ip' | 'agent' | 'tags' | 'seen';
export const SORT_KEYS: SortKey[] = ['name', 'status', 'os', 'ip', 'agent', 'tags', 'seen'];

/** Every device below a node, with its group's title and the tags it inherits. */
export function deviceRows(node: GroupTreeNode, group = '', tagsAbove: string[] = []): DeviceRow[] {
  if (node.type === 'device') {
    const own = node.tags ?? [];
    return [
      {
        id: node.node_id,
        name: node.title || node.node_id,
        group,
        online: isOnline(node),
        ownTags: own,
        tags: [...new Set([...tagsAbove, ...own])],
        lastSeen: node.last_reported ?? null,
        manageable: mayManage(node),
        attributes: node.attributes ? Object.values(node.attributes).filter((v): v is string => typeof v === 'string') : [],
        os: '',
        ip: '',
        agent: '',
      },
    ];
  }
  const tags = [...tagsAbove, ...(node.tags ?? [])];
  return (node.nodes ?? []).flatMap((c) => deviceRows(c, node.title || node.node_id, tags));
}

/**
 * The table's search: what the tree's search matches (name, id, tags, attribute values) and the
 * table's own columns besides (group, OS, IP, agent version), case-insensitive.
 */
export function rowMatches(row: DeviceRow, text: string): boolean {
  const wanted = text.trim().toLowerCase();
  if (!wanted) return true;
  return [row.name, row.id, row.group, row.os, row.ip, row.agent, ...row.tags, ...row.attributes].some((v) => v.toLowerCase().includes(wanted));
}

/** The last-seen column's filter: when a device was last heard from (an online device: its last heartbeat). */
export type SeenFilter = '' | 'within1h' | 'over1h' | 'over1d' | 'over7d' | 'never';
export const SEEN_FILTERS: Record<SeenFilter, string> = {
  '': 'Any time',
  within1h: 'Seen within 1 h',
  over1h: 'Not seen for > 1 h',
  over1d: 'Not seen for > 1 day',
  over7d: 'Not seen for > 7 days',
  never: 'Never seen',
};
const HOUR_S = 3600;
const SEEN_AGE_S: Partial<Record<SeenFilter, number>> = { over1h: HOUR_S, over1d: 24 * HOUR_S, over7d: 7 * 24 * HOUR_S };

/** Per-column filters of the table, as kept in the query string (`os`, `ip`, `agent`, `seen`). */
export interface ColumnFilters {
  os?: string;
  ip?: string;
  agent?: string;
  seen?: SeenFilter;
}

export function columnFiltersOf(query: URLSearchParams): ColumnFilters {
  const seen = query.get('seen') ?? '';
  const out: ColumnFilters = {};
  for (const key of ['os', 'ip', 'agent'] as const) {
    const v = query.get(key);
    if (v) out[key] = v;
  }
  if (seen in SEEN_FILTERS && seen) out.seen = seen as SeenFilter;
  return out;
}

/** OS, IP and agent version: contained, case-insensitive; last seen: by age at `nowS` (Unix seconds). */
export function columnMatches(row: DeviceRow, f: ColumnFilters, nowS: number): boolean {
  for (const key of ['os', 'ip', 'agent'] as const) {
    const wanted = f[key]?.trim().toLowerCase();
    if (wanted && !row[key].toLowerCase().includes(wanted)) return false;
  }
  switch (f.seen ?? '') {
    case '':
      return true;
    case 'never':
      return row.lastSeen === null;
    case 'within1h':
      return row.lastSeen !== null && nowS - row.lastSeen <= HOUR_S;
    default:
      return row.lastSeen === null || nowS - row.lastSeen > (SEEN_AGE_S[f.seen as SeenFilter] ?? 0);
  }
}

function sortValue(row: DeviceRow, key: SortKey): string | number {
  switch (key) {
    case 'status':
      return row.online ? 0 : 1;
    case 'seen':
      return row.lastSeen ?? 0;
    case 'tags':
      return row.tags.join(',');
    default:
      return row[key].toLowerCase();
  }
}

export function sortRows(rows: DeviceRow[], key: SortKey, descending: boolean): DeviceRow[] {
  const sign = descending ? -1 : 1;
  return [...rows].sort((a, b) => {
    const x = sortValue(a, key);
    const y = sortValue(b, key);
    if (x < y) return -sign;
    if (x > y) return sign;
    return a.id < b.id ? -1 : 1;
  });
}

const LABELS: Record<SortKey, string> = { name: 'Name', status: 'Status', os: 'OS', ip: 'IP', agent: 'Agent', tags: 'Tags', seen: 'Last seen' };

export function DevicesTable({
  rows,
  text = '',
  columns = {},
  onColumns,
  groups,
  manageableTags = '*',
  sort,
  descending,
  onSort,
  onChanged,
}: {
  rows: DeviceRow[];
  /** The search, matched here against the inventory columns too (see rowMatches). */
  text?: string;
  /** Per-column filters (see columnMatches) and where changes to them go (the URL). */
  columns?: ColumnFilters;
  onColumns?: (next: ColumnFilters) => void;
  groups: GroupOption[];
  /** GET /grouptree's manageable_tags */
  manageableTags?: ManageableTags;
  sort: SortKey;
  descending: boolean;
  onSort: (key: SortKey, descending: boolean) => void;
  onChanged: () => void;
}) {
  const inventory = useLoad(
    () => (allowed('inventory') ? api.get('/inventory', { items_per_page: 1000 }).then((a) => itemsOf<InventoryListItem>(a)) : Promise.resolve([])),
    [],
  );
  const byId = useMemo(() => new Map((inventory.data ?? []).map((i) => [i.node_id ?? '', i])), [inventory.data]);
  const full = useMemo(
    () =>
      rows.map((r) => {
        const i = byId.get(r.id);
        if (!i) return r;
        const os = i.os?.pretty_name ?? [i.os?.name, i.os?.version].filter(Boolean).join(' ');
        return { ...r, os, ip: i.system?.ipv4_first || i.system?.remoteaddr || '', agent: i.agent_version ?? '' };
      }),
    [rows, byId],
  );
  const sorted = useMemo(
    () =>
      sortRows(
        full.filter((r) => rowMatches(r, text) && columnMatches(r, columns, Math.floor(Date.now() / 1000))),
        sort,
        descending,
      ),
    [full, text, columns.os, columns.ip, columns.agent, columns.seen, sort, descending],
  );
  const filtering = Boolean(text.trim() || columns.os || columns.ip || columns.agent || columns.seen);
  const setColumn = (key: keyof ColumnFilters, value: string) => onColumns?.({ ...columns, [key]: value || undefined } as ColumnFilters);
  const distinct = (key: 'os' | 'agent') => [...new Set(full.map((r) => r[key]).filter(Boolean))].sort();
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const selected = sorted.filter((r) => picked.has(r.id));
  const action = useAction();
  const [notice, setNotice] = useNotice();
  const [tag, setTag] = useState('');
  const [target, setTarget] = useState('');
  const manage = allowed('manageTree');
  const reload = allowed('connectConsole');
  const bulk = manage || reload;
  // Tagging and moving are offered on a selection the user may manage as a whole (the broker's hints).
  const unmanageable = selected.filter((r) => !r.manageable);
  const refusedTags = tagsOutside([], parseTags(tag), manageableTags);
  const tagsNote = manageableTagsNote(manageableTags);
  const targets = groups.filter((g) => g.manageable);
  // A name several devices share gets its short id, so they can be told apart.
  const names = new Map<string, number>();
  for (const r of rows) names.set(r.name, (names.get(r.name) ?? 0) + 1);

  const toggle = (id: string) => {
    const next = new Set(picked);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setPicked(next);
  };
  // The selection stays after an action: the next one often concerns the same devices.
  const finish = (text: string) => {
    setNotice(text);
    onChanged();
  };
  const plural = (n: number) => `${n} device${n === 1 ? '' : 's'}`;

  return (
    <div class="devices-table">
      {bulk && (
        <div class="bulk-actions" role="group" aria-label="Actions on the selected devices">
          <span>{selected.length} selected</span>
          <button type="button" class="link-button" disabled={!selected.length} onClick={() => setPicked(new Set())}>
            Clear selection
          </button>
          {manage && (
            <>
              <input aria-label="Tags to add" placeholder="tag" value={tag} title={tagsNote ?? undefined} onInput={(e) => setTag(e.currentTarget.value)} />
              <button
                type="button"
                disabled={!selected.length || unmanageable.length > 0 || !parseTags(tag).length || refusedTags.length > 0 || action.busy}
                onClick={() =>
                  void action.run(async () => {
                    setNotice('');
                    const add = parseTags(tag);
                    const changes = selected.map((r) => ({ action: 'update', data: { node_id: r.id, tags: [...new Set([...r.ownTags, ...add])] } }));
                    await api.put('/grouptree', { changes });
                    setTag('');
                    finish(`Tagged ${plural(selected.length)}.`);
                  })
                }
              >
                Add tags
              </button>
              <select aria-label="Move selected to" value={target} onChange={(e) => setTarget(e.currentTarget.value)}>
                <option value="">Move to…</option>
                {targets.map((g) => (
                  <option key={g.node_id} value={g.node_id}>
                    {g.label}
                  </option>
                ))}
              </select>
              <button
                type="button"
                disabled={!selected.length || unmanageable.length > 0 || !target || action.busy}
                onClick={() =>
                  void action.run(async () => {
                    setNotice('');
                    await api.put('/grouptree', { changes: selected.map((r) => ({ action: 'move', data: { node_id: r.id, parent_id: target } })) });
                    finish(`Moved ${plural(selected.length)}.`);
                  })
                }
              >
                Move
              </button>
            </>
          )}
          {reload && (
            <ConfirmButton
              label="Reload agents"
              class=""
              disabled={!selected.length || action.busy}
              question={`Reload the agent of ${plural(selected.length)}? Every open console, tunnel and transfer on them ends.`}
              confirmLabel="Yes, reload"
              onConfirm={() =>
                void action.run(async () => {
                  setNotice('');
                  const failed: string[] = [];
                  for (const r of selected) {
                    await api.post(`/remote/reload/${encodeURIComponent(r.id)}`, {}, { source: 'web' }).catch((err: unknown) => {
                      failed.push(`${r.name}: ${err instanceof Error ? err.message : String(err)}`);
                    });
                  }
                  if (failed.length) throw new Error(`Not reloaded: ${failed.join('; ')}`);
                  finish(`Reloading ${plural(selected.length)}.`);
                })
              }
            />
          )}
        </div>
      )}
      {manage && unmanageable.length > 0 && (
        <p class="hint" role="status">
          Tagging and moving are off: {plural(unmanageable.length)} selected {unmanageable.length === 1 ? 'is' : 'are'} outside your device:manage resources (
          {unmanageable.map((r) => r.name).join(', ')}).
        </p>
      )}
      {manage && refusedTags.length > 0 && (
        <p class="hint field-error" role="status">
          Outside your device:manage resources: {refusedTags.join(', ')}. {tagsNote}
        </p>
      )}
      <ErrorBox error={action.error} />
      <ErrorBox error={inventory.error} title="The inventory could not be loaded" />
      {notice && <Notice>{notice}</Notice>}
      {filtering && (
        <p class="muted" role="status">
          {sorted.length} of {rows.length} match{text.trim() ? ` “${text.trim()}”` : ''}
          {(columns.os || columns.ip || columns.agent || columns.seen) && onColumns && (
            <>
              {' '}
              <button type="button" class="link-button" onClick={() => onColumns({})}>
                Clear column filters
              </button>
            </>
          )}
        </p>
      )}
      <datalist id="dt-os-values">
        {distinct('os').map((v) => (
          <option key={v} value={v} />
        ))}
      </datalist>
      <datalist id="dt-agent-values">
        {distinct('agent').map((v) => (
          <option key={v} value={v} />
        ))}
      </datalist>
      <div class="table-wrap">
        <table class="devices">
          <thead>
            <tr>
              {bulk && (
                <th scope="col">
                  <input
                    type="checkbox"
                    aria-label="Select all shown"
                    checked={sorted.length > 0 && selected.length === sorted.length}
                    onChange={(e) => setPicked(e.currentTarget.checked ? new Set(sorted.map((r) => r.id)) : new Set())}
                  />
                </th>
              )}
              {SORT_KEYS.map((key) => (
                <th scope="col" key={key} aria-sort={sort === key ? (descending ? 'descending' : 'ascending') : undefined}>
                  <button type="button" class="link-button sort" onClick={() => onSort(key, sort === key ? !descending : false)}>
                    {LABELS[key]}
                    {sort === key ? (descending ? ' ▼' : ' ▲') : ''}
                  </button>
                </th>
              ))}
            </tr>
            {onColumns && (
              <tr class="column-filters">
                {bulk && <td />}
                <td />
                <td />
                <td>
                  <input
                    type="search"
                    aria-label="Filter by OS"
                    placeholder="OS"
                    list="dt-os-values"
                    value={columns.os ?? ''}
                    onInput={(e) => setColumn('os', e.currentTarget.value)}
                  />
                </td>
                <td>
                  <input
                    type="search"
                    aria-label="Filter by IP"
                    placeholder="IP"
                    value={columns.ip ?? ''}
                    onInput={(e) => setColumn('ip', e.currentTarget.value)}
                  />
                </td>
                <td>
                  <input
                    type="search"
                    aria-label="Filter by agent version"
                    placeholder="Version"
                    list="dt-agent-values"
                    value={columns.agent ?? ''}
                    onInput={(e) => setColumn('agent', e.currentTarget.value)}
                  />
                </td>
                <td />
                <td>
                  <select aria-label="Filter by last seen" value={columns.seen ?? ''} onChange={(e) => setColumn('seen', e.currentTarget.value)}>
                    {(Object.keys(SEEN_FILTERS) as SeenFilter[]).map((k) => (
                      <option key={k} value={k}>
                        {SEEN_FILTERS[k]}
                      </option>
                    ))}
                  </select>
                </td>
              </tr>
            )}
          </thead>
          <tbody>
            {sorted.map((r) => (
              <tr key={r.id} data-device={r.id}>
                {bulk && (
                  <td>
                    <input type="checkbox" aria-label={`Select ${r.name} ${r.id.slice(0, 8)}`} checked={picked.has(r.id)} onChange={() => toggle(r.id)} />
                  </td>
                )}
                <td>
                  <Link href={`/devices/${r.id}`}>{r.name}</Link>{' '}
                  <code class={`short-id${(names.get(r.name) ?? 0) > 1 ? ' same-name' : ''}`} title={r.id}>
                    {r.id.slice(0, 8)}
                  </code>
                  {r.group && <div class="muted small">{r.group}</div>}
                </td>
                <td>
                  <StatusDot online={r.online} />
                </td>
                <td>{r.os}</td>
                <td>{r.ip}</td>
                <td>{r.agent}</td>
                <td>
                  <Tags tags={r.tags} />
                </td>
                <td class="last-contact">
                  <LastContact online={r.online} at={r.lastSeen === null ? null : r.lastSeen * 1000} prefix={false} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </div>
  );
}
