/**
 * The group tree: groups with their node ids (used in `node:<id>` resources), tags, devices with
 * their online status; search by name, id or tag, and filters by tag and status.
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import type { GroupTree, GroupTreeNode } from '../../../shared/api-types.js';
import { api, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { useDeviceEvents, type DeviceEvent } from '../events.js';
import { Link, navigate, useLocation, withQuery } from '../router.js';
import { HEARD_REFRESH_MS, isOnline, LastContact, StatusDot } from './device-status.js';
import { columnFiltersOf, DevicesTable, deviceRows, SORT_KEYS, type SortKey } from './devices-table.js';
import { ErrorBox, FilterFold, Loading, Notice, PageTitle, Tags, useAction, useLoad, useNotice } from '../ui.js';
import { findNode, groupOptions, mayManage, NodeManager } from './tree-manage.js';

export { agoText, isOnline, LastContact, StatusDot } from './device-status.js';

interface Filter {
  text: string;
  tag: string;
  status: '' | 'online' | 'offline';
}

function deviceMatches(node: GroupTreeNode, f: Filter): boolean {
  if (f.status && (f.status === 'online') !== isOnline(node)) return false;
  if (f.tag && !(node.tags ?? []).includes(f.tag)) return false;
  if (!f.text) return true;
  const text = f.text.toLowerCase();
  const attrs = node.attributes ? Object.values(node.attributes).filter((v) => typeof v === 'string') : [];
  return [node.title, node.node_id, ...(node.tags ?? []), ...(attrs as string[])].some((v) => v?.toLowerCase().includes(text));
}

/** The tree with only what matches: matching devices and the groups leading to them. */
export function pruneTree(node: GroupTreeNode, f: Filter, tagsAbove: string[] = []): GroupTreeNode | null {
  const active = Boolean(f.text || f.tag || f.status);
  if (!active) return node;
  if (node.type === 'device') {
    // A device carries the tags of the groups above it.
    return deviceMatches({ ...node, tags: [...tagsAbove, ...(node.tags ?? [])] }, f) ? node : null;
  }
  const tags = [...tagsAbove, ...(node.tags ?? [])];
  const groupMatches =
    !f.tag && !f.status && f.text && [node.title, node.node_id, ...(node.tags ?? [])].some((v) => v.toLowerCase().includes(f.text.toLowerCase()));
  if (groupMatches) return node;
  const children = (node.nodes ?? []).map((c) => pruneTree(c, f, tags)).filter((c): c is GroupTreeNode => c !== null);
  return children.length ? { ...node, nodes: children } : null;
}

/** The tree with the live status and last contact of the devices events told about. */
export function applyLive(node: GroupTreeNode, live: Map<string, DeviceEvent>): GroupTreeNode {
  if (live.size === 0) return node;
  if (node.type === 'device') {
    const e = live.get(node.node_id);
    if (!e) return node;
    return { ...node, status: e.event === 'device.online' ? 'online' : 'offline', last_reported: Math.floor(Date.parse(e.at) / 1000) };
  }
  return { ...node, nodes: (node.nodes ?? []).map((c) => applyLive(c, live)) };
}

function countDevices(node: GroupTreeNode): number {
  if (node.type === 'device') return 1;
  return (node.nodes ?? []).reduce((n, c) => n + countDevices(c), 0);
}

interface TreeItemProps {
  node: GroupTreeNode;
  open: boolean;
  /** Offered to users with device:manage: opens the manager of this node. */
  onManage?: (node: GroupTreeNode) => void;
  /** With device:manage: a device dropped on a group moves there. */
  onMove?: (deviceId: string, groupId: string) => void;
}

/** The drag data type of a device row being dragged onto a group. */
const DRAG_TYPE = 'application/x-fleet-device';

function ManageButton({ node, onManage }: { node: GroupTreeNode; onManage?: (node: GroupTreeNode) => void }) {
  // Not offered on a node the broker says this user may not manage (a manager restricted to other groups).
  if (!onManage || !mayManage(node)) return null;
  return (
    <button
      type="button"
      class="small manage"
      aria-label={`Manage ${node.title || node.node_id}`}
      onClick={(e) => {
        e.preventDefault();
        onManage(node);
      }}
    >
      Manage
    </button>
  );
}

function TreeItem({ node, open, onManage, onMove }: TreeItemProps) {
  if (node.type === 'device') {
    return (
      <li
        class="device-row"
        draggable={Boolean(onMove) && mayManage(node)}
        onDragStart={(e) => {
          e.dataTransfer?.setData(DRAG_TYPE, node.node_id);
          if (e.dataTransfer) e.dataTransfer.effectAllowed = 'move';
        }}
      >
        <StatusDot online={isOnline(node)} />
        <Link href={`/devices/${node.node_id}`} class="device-name">
          {node.title || node.node_id}
        </Link>
        <code class="short-id" title={node.node_id}>
          {node.node_id.slice(0, 8)}
        </code>
        <Tags tags={node.tags} />
        <LastContact online={isOnline(node)} at={node.last_reported ? node.last_reported * 1000 : null} />
        <ManageButton node={node} onManage={onManage} />
      </li>
    );
  }
  const children = node.nodes ?? [];
  return (
    <li class="group-row">
      <details open={open}>
        <summary
          onDragOver={(e) => {
            if (onMove && mayManage(node) && e.dataTransfer?.types.includes(DRAG_TYPE)) e.preventDefault();
          }}
          onDrop={(e) => {
            const deviceId = e.dataTransfer?.getData(DRAG_TYPE);
            if (!onMove || !deviceId || !mayManage(node)) return;
            e.preventDefault();
            onMove(deviceId, node.node_id);
          }}
        >
          <span class="group-name">{node.title}</span>{' '}
          <code class="node-id" title="Node id, for node:<id> resources">
            {node.node_id}
          </code>
          <Tags tags={node.tags} />
          <span class="muted small">
            {countDevices(node)} device{countDevices(node) === 1 ? '' : 's'}
          </span>
          <ManageButton node={node} onManage={onManage} />
        </summary>
        {children.length > 0 ? (
          <ul>
            {children.map((c) => (
              <TreeItem key={c.node_id} node={c} open={open} onManage={onManage} onMove={onMove} />
            ))}
          </ul>
        ) : (
          <p class="muted small empty">Empty group</p>
        )}
      </details>
    </li>
  );
}

export function DevicesScreen() {
  // A manager gets per-node hints, so what they may not change is not offered.
  const tree = useLoad(() => api.get<GroupTree>('/grouptree', { _format: 'json', ...(allowed('manageTree') ? { manage_hints: 'true' } : {}) }), []);
  const tags = useLoad(() => api.get('/tagslist').then((a) => itemsOf<string | { tag?: string; name?: string }>(a)), []);
  // Filters, view and order live in the query string: a filtered list can be bookmarked and shared.
  const { query } = useLocation();
  const status = query.get('status');
  const filter: Filter = { text: query.get('q') ?? '', tag: query.get('tag') ?? '', status: status === 'online' || status === 'offline' ? status : '' };
  const view = query.get('view') === 'table' ? 'table' : 'tree';
  const sortParam = query.get('sort') ?? '';
  const sort: SortKey = (SORT_KEYS as string[]).includes(sortParam) ? (sortParam as SortKey) : 'name';
  const descending = query.get('dir') === 'desc';
  // The table's own column filters (OS, IP, agent version, last seen), in the query string too.
  const columns = columnFiltersOf(query);
  const setQuery = (next: Record<string, string | undefined>) => {
    const all: Record<string, string | undefined> = {
      q: filter.text,
      tag: filter.tag,
      status: filter.status,
      view: view === 'table' ? 'table' : undefined,
      sort: sortParam || undefined,
      dir: descending ? 'desc' : undefined,
      ...columns,
    };
    navigate(withQuery('/devices', { ...all, ...next }), { replace: true });
  };
  const setFilter = (f: Filter) => setQuery({ q: f.text, tag: f.tag, status: f.status });
  // Devices go online and offline on the page as the broker tells (GET /events); a fresh tree
  // starts from what it says.
  const [live, setLive] = useState<Map<string, DeviceEvent>>(new Map());
  useEffect(() => setLive(new Map()), [tree.data]);
  useDeviceEvents(
    allowed('devices'),
    (e) => setLive((m) => new Map(m).set(e.device_id, e)),
    () => tree.reload(),
  );
  // "heard … ago" of online devices: the broker answers their last heartbeat; read it again now and then.
  useEffect(() => {
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') tree.reload();
    }, HEARD_REFRESH_MS);
    return () => clearInterval(timer);
  }, []);
  const liveTree = useMemo(() => (tree.data?.tree ? applyLive(tree.data.tree, live) : null), [tree.data, live]);
  // The table searches its inventory columns too, so there the text is matched per row (DevicesTable).
  const treeText = view === 'table' ? '' : filter.text;
  const shown = useMemo(
    () => (liveTree ? pruneTree(liveTree, { text: treeText, tag: filter.tag, status: filter.status }) : null),
    [liveTree, treeText, filter.tag, filter.status],
  );
  const active = Boolean(treeText || filter.tag || filter.status);
  /** The node whose Manage panel is open: it stays open between changes, showing the node as reloaded. */
  const [managingId, setManagingId] = useState<string | null>(null);
  const managing = useMemo(() => (managingId && tree.data?.tree ? findNode(tree.data.tree, managingId) : null), [managingId, tree.data]);
  /** Phones: tag and status fold away until asked for (search stays). */
  const [filtersOpen, setFiltersOpen] = useState(false);
  const [notice, setNotice] = useNotice();
  const groups = useMemo(() => (tree.data?.tree ? groupOptions(tree.data.tree) : []), [tree.data]);
  const move = useAction();
  const onMove = allowed('manageTree')
    ? (deviceId: string, groupId: string) =>
        void move.run(async () => {
          setNotice('');
          await api.put('/grouptree', { changes: [{ action: 'move', data: { node_id: deviceId, parent_id: groupId } }] });
          setNotice(`Moved to ${groups.find((g) => g.node_id === groupId)?.label ?? groupId}.`);
          tree.reload();
        })
    : undefined;
  const onManage = allowed('manageTree')
    ? (node: GroupTreeNode) => {
        setNotice('');
        setManagingId(node.node_id);
      }
    : undefined;
  const tagNames = (tags.data ?? []).map((t) => (typeof t === 'string' ? t : (t.tag ?? t.name ?? ''))).filter(Boolean);

  return (
    <section>
      <PageTitle
        actions={
          <>
            {allowed('pendingHosts') && <Link href="/pending">Pending hosts</Link>}
            <button type="button" aria-pressed={view === 'table'} onClick={() => setQuery({ view: view === 'table' ? undefined : 'table' })}>
              {view === 'table' ? 'Show as tree' : 'Show as table'}
            </button>
            <button type="button" onClick={tree.reload}>
              Refresh
            </button>
          </>
        }
      >
        Devices
      </PageTitle>
      <FilterFold
        controls="device-filters"
        active={[filter.tag, filter.status].filter(Boolean).length}
        open={filtersOpen}
        onToggle={() => setFiltersOpen(!filtersOpen)}
      />
      <form id="device-filters" class={`filters${filtersOpen ? '' : ' folded'}`} role="search" onSubmit={(e) => e.preventDefault()}>
        <div class="field grow">
          <label for="d-search">Search</label>
          <input
            id="d-search"
            type="search"
            placeholder={view === 'table' ? 'Name, id, tag, group, OS, IP or agent version' : 'Name, id, node id or tag'}
            value={filter.text}
            onInput={(e) => setFilter({ ...filter, text: e.currentTarget.value })}
          />
        </div>
        <div class="field fold">
          <label for="d-tag">Tag</label>
          <select id="d-tag" value={filter.tag} onChange={(e) => setFilter({ ...filter, tag: e.currentTarget.value })}>
            <option value="">Any tag</option>
            {tagNames.map((t) => (
              <option key={t} value={t}>
                {t}
              </option>
            ))}
          </select>
        </div>
        <div class="field fold">
          <label for="d-status">Status</label>
          <select id="d-status" value={filter.status} onChange={(e) => setFilter({ ...filter, status: e.currentTarget.value as Filter['status'] })}>
            <option value="">Any status</option>
            <option value="online">Online</option>
            <option value="offline">Offline</option>
          </select>
        </div>
      </form>
      <ErrorBox error={tree.error} />
      <ErrorBox error={move.error} />
      {notice && <Notice>{notice}</Notice>}
      {managing && (
        <NodeManager
          key={managing.node_id}
          node={managing}
          groups={groups}
          manageableTags={tree.data?.manageable_tags}
          onClose={() => setManagingId(null)}
          onStart={() => setNotice('')}
          onChanged={(text) => {
            setNotice(text);
            tree.reload();
            tags.reload();
          }}
        />
      )}
      {tree.loading && !tree.data && <Loading what="devices" />}
      {tree.data && (
        <>
          <p class="muted" role="status">
            {tree.data.total_devices} device{tree.data.total_devices === 1 ? '' : 's'} you can see
            {active && shown ? `, ${countDevices(shown)} matching` : ''}
          </p>
          {shown && view === 'table' ? (
            <DevicesTable
              rows={deviceRows(shown)}
              text={filter.text}
              columns={columns}
              onColumns={(next) => setQuery({ os: next.os, ip: next.ip, agent: next.agent, seen: next.seen })}
              groups={groups}
              manageableTags={tree.data?.manageable_tags}
              sort={sort}
              descending={descending}
              onSort={(key, desc) => setQuery({ sort: key, dir: desc ? 'desc' : undefined })}
              onChanged={() => {
                tree.reload();
                tags.reload();
              }}
            />
          ) : shown ? (
            <ul class="tree">
              <TreeItem node={shown} open onManage={onManage} onMove={onMove} />
            </ul>
          ) : (
            <p>No device or group matches.</p>
          )}
        </>
      )}
    </section>
  );
}
