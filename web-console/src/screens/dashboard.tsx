/**
 * The Dashboard: the fleet at a glance. Each card reads its own data and is shown only to users
 * holding the permission that data needs: devices online/offline (device:read, live through
 * GET /events), unread reports by severity (reports:read, linking into the Logs), devices whose
 * configuration is behind or failing (device:read; its failures from the reports with
 * reports:read), the top CVEs with the feed's age, or that no feed is imported (cve:read, GET /cvelist, /cvefeed) and the hottest devices (analysis:read,
 * GET /analysis). A call this broker does not have yet (501) shows "not available on this
 * broker", never made-up numbers.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import type { AnalysisAnswer, CveFeedState, CveItem, GroupTree, GroupTreeNode, ListPage, ReportItem, ReportSeverity } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { allowed } from '../areas.js';
import { useDeviceEvents, type DeviceEvent } from '../events.js';
import { Link, withQuery } from '../router.js';
import { can } from '../session.js';
import { ErrorBox, formatTime, Loading, PageTitle } from '../ui.js';
import { feedAge, NoFeed } from './cve.js';
import { isOnline } from './devices.js';
import { pendingLabel, usePendingCount } from './pending.js';

export const SEVERITIES: readonly ReportSeverity[] = ['CRIT', 'ERR', 'WARN', 'INFO'];

/** Whether the broker answered that it does not have this call (yet). */
export function notBuilt(err: unknown): boolean {
  return err instanceof ApiFailure && (err.status === 501 || (err.status === 404 && err.error === 'unknown_call'));
}

function Card({ title, id, children, wide }: { title: string; id: string; children: ComponentChildren; wide?: boolean }) {
  return (
    <section class={`panel card${wide ? ' wide' : ''}`} aria-labelledby={`h-${id}`} data-testid={`card-${id}`}>
      <h2 id={`h-${id}`}>{title}</h2>
      {children}
    </section>
  );
}

export function NotAvailable({ what }: { what: string }) {
  return (
    <p class="muted not-available" data-testid="not-available">
      {what} is not available on this broker.
    </p>
  );
}

/** Every device of the tree (each once). */
export function devicesOf(node: GroupTreeNode | undefined, out: GroupTreeNode[] = [], seen = new Set<string>()): GroupTreeNode[] {
  if (!node) return out;
  if (node.type === 'device') {
    if (!seen.has(node.node_id)) {
      seen.add(node.node_id);
      out.push(node);
    }
    return out;
  }
  for (const c of node.nodes ?? []) devicesOf(c, out, seen);
  return out;
}

/** Online and offline counts, with the live status of the devices events told about. */
export function statusCounts(devices: GroupTreeNode[], live: Map<string, DeviceEvent>): { online: number; offline: number } {
  let online = 0;
  for (const d of devices) {
    const e = live.get(d.node_id);
    if (e ? e.event === 'device.online' : isOnline(d)) online += 1;
  }
  return { online, offline: devices.length - online };
}

function useTree() {
  const [state, setState] = useState<{ data?: GroupTree; error?: unknown; round: number }>({ round: 0 });
  useEffect(() => {
    if (!allowed('devices')) return;
    let live = true;
    api.get<GroupTree>('/grouptree', { _format: 'json' }).then(
      (data) => live && setState((s) => ({ ...s, data, error: undefined })),
      (error: unknown) => live && setState((s) => ({ ...s, error })),
    );
    return () => {
      live = false;
    };
  }, [state.round]);
  return { ...state, reload: () => setState((s) => ({ ...s, round: s.round + 1 })) };
}

function DevicesCard({ devices, live }: { devices: GroupTreeNode[] | undefined; live: Map<string, DeviceEvent> }) {
  if (!devices) return <Loading what="devices" />;
  const { online, offline } = statusCounts(devices, live);
  return (
    <div class="stat-row">
      <Link href="/devices?status=online" class="stat online" data-testid="online-count">
        <strong>{online}</strong> online
      </Link>
      <Link href="/devices?status=offline" class="stat offline" data-testid="offline-count">
        <strong>{offline}</strong> offline
      </Link>
      <span class="stat muted">
        <strong>{devices.length}</strong> in all
      </span>
    </div>
  );
}

/** Hosts waiting for approval, live (device:approve). */
function PendingCard() {
  const count = usePendingCount(true);
  if (count === undefined) return <Loading what="pending hosts" />;
  return (
    <p>
      <Link href="/pending" class="stat" data-testid="dashboard-pending-count">
        <strong>{pendingLabel(count)}</strong> waiting for approval
      </Link>
    </p>
  );
}

function useLoadState<T>(load: () => Promise<T>, enabled: boolean) {
  const [state, setState] = useState<{ data?: T; error?: unknown; done: boolean }>({ done: false });
  useEffect(() => {
    if (!enabled) return;
    let live = true;
    load().then(
      (data) => live && setState({ data, done: true }),
      (error: unknown) => live && setState({ error, done: true }),
    );
    return () => {
      live = false;
    };
  }, [enabled]);
  return state;
}

function ReportsCard() {
  const counts = useLoadState(
    () =>
      Promise.all(
        SEVERITIES.map((sev) =>
          api.get<ListPage<ReportItem>>('/reportlist', { read: 'false', severity: sev, items_per_page: 1 }).then((p) => [sev, p.total] as const),
        ),
      ),
    true,
  );
  const recent = useLoadState(() => api.get<ListPage<ReportItem>>('/reportlist', { read: 'false', severity: 'ERR,CRIT', items_per_page: 5 }), true);
  if (counts.error) return <ErrorBox error={counts.error} />;
  if (!counts.data) return <Loading what="reports" />;
  return (
    <>
      <p class="muted small">Unread reports, by severity:</p>
      <div class="stat-row">
        {counts.data.map(([sev, n]) => (
          <Link key={sev} href={withQuery('/logs', { severity: sev, read: 'false' })} class={`stat sev-${sev.toLowerCase()}`} data-testid={`unread-${sev}`}>
            <strong>{n}</strong> {sev}
          </Link>
        ))}
      </div>
      <ErrorBox error={recent.error} />
      {recent.data && recent.data.items.length > 0 && (
        <>
          <h3>Latest unread errors</h3>
          <ul class="plain-list" data-testid="recent-errors">
            {recent.data.items.map((r) => (
              <li key={r.id}>
                <span class={`badge sev-${r.sev.toLowerCase()}`}>{r.sev}</span>{' '}
                <Link href={withQuery('/logs', { node_id: r.node_id, read: 'false' })}>{r.title || r.node_id.slice(0, 12)}</Link>: {r.text}{' '}
                <span class="muted small">{formatTime(new Date(r.ts * 1000).toISOString())}</span>
              </li>
            ))}
          </ul>
        </>
      )}
    </>
  );
}

interface Failing {
  node_id: string;
  title: string;
  behind: boolean;
  errors: number;
}

/** Devices whose agent applied an older commit than their configuration's, and those with unread configuration errors. */
export function failingDevices(devices: GroupTreeNode[], errors: Pick<ReportItem, 'node_id' | 'title' | 'bundle'>[]): Failing[] {
  const byId = new Map<string, Failing>();
  for (const d of devices) {
    if (d.config_propagated === false && d.device_commit_sha) byId.set(d.node_id, { node_id: d.node_id, title: d.title || d.node_id, behind: true, errors: 0 });
  }
  const titles = new Map(devices.map((d) => [d.node_id, d.title]));
  for (const r of errors) {
    // The agent's own events (connections) are not configuration runs.
    if (r.bundle === 'agent_internal') continue;
    const f = byId.get(r.node_id) ?? { node_id: r.node_id, title: titles.get(r.node_id) || r.title || r.node_id, behind: false, errors: 0 };
    f.errors += 1;
    byId.set(r.node_id, f);
  }
  return [...byId.values()].sort((a, b) => b.errors - a.errors || Number(b.behind) - Number(a.behind) || a.title.localeCompare(b.title));
}

function ConfigurationCard({ devices }: { devices: GroupTreeNode[] | undefined }) {
  const withReports = allowed('logs');
  const errors = useLoadState(() => api.get<ListPage<ReportItem>>('/reportlist', { read: 'false', severity: 'ERR,CRIT', items_per_page: 500 }), withReports);
  if (!devices || (withReports && !errors.done)) return <Loading what="configuration states" />;
  const failing = failingDevices(devices, errors.data?.items ?? []);
  const never = devices.filter((d) => !d.device_commit_sha).length;
  return (
    <>
      <ErrorBox error={errors.error} />
      {failing.length === 0 ? (
        <p data-testid="config-ok">No device is behind its configuration{withReports ? ' or reports unread configuration errors' : ''}.</p>
      ) : (
        <ul class="plain-list" data-testid="config-failing">
          {failing.slice(0, 10).map((f) => (
            <li key={f.node_id}>
              <Link href={`/devices/${f.node_id}`}>{f.title}</Link> {f.behind && <span class="badge sev-warn">not applied</span>}{' '}
              {f.errors > 0 && (
                <Link href={withQuery('/logs', { node_id: f.node_id, severity: 'ERR,CRIT', read: 'false' })} class="badge sev-err">
                  {f.errors} error{f.errors === 1 ? '' : 's'}
                </Link>
              )}
            </li>
          ))}
          {failing.length > 10 && <li class="muted">and {failing.length - 10} more</li>}
        </ul>
      )}
      {never > 0 && (
        <p class="muted small">
          {never} device{never === 1 ? ' has' : 's have'} not applied a configuration yet.
        </p>
      )}
    </>
  );
}

function CveCard() {
  const list = useLoadState(() => api.get<ListPage<CveItem>>('/cvelist'), true);
  const feed = useLoadState(() => api.get<CveFeedState>('/cvefeed'), true);
  if (notBuilt(list.error)) return <NotAvailable what="Vulnerability (CVE) data" />;
  if (list.error) return <ErrorBox error={list.error} />;
  if (feed.error && !notBuilt(feed.error)) return <ErrorBox error={feed.error} />;
  if (!list.data || !feed.done) return <Loading what="CVEs" />;
  if (feed.data && !feed.data.imported) return <NoFeed mayManage={can('cve:manage')} />;
  const age = feed.data && (
    <p class="muted small" data-testid="dashboard-feed-age">
      {feedAge(feed.data)}
    </p>
  );
  const items = [...(list.data.items ?? [])]
    .map((c) => ({ id: c.cve_id, score: c.score ?? undefined, hosts: c.hosts }))
    .filter((c) => c.id)
    .sort((a, b) => (b.score ?? 0) - (a.score ?? 0))
    .slice(0, 5);
  if (items.length === 0)
    return (
      <>
        <p>No vulnerabilities of the imported feed found on the devices you can see.</p>
        {age}
      </>
    );
  return (
    <>
      <ul class="plain-list" data-testid="top-cves">
        {items.map((c) => (
          <li key={c.id}>
            <strong>{c.id}</strong>
            {c.score !== undefined && <span class="muted"> score {c.score}</span>}
            {c.hosts !== undefined && (
              <span class="muted">
                , {c.hosts} device{c.hosts === 1 ? '' : 's'}
              </span>
            )}
          </li>
        ))}
      </ul>
      {age}
    </>
  );
}

function HottestCard() {
  const top = useLoadState(() => api.get<AnalysisAnswer>('/analysis', { limit: 5 }), true);
  if (notBuilt(top.error)) return <NotAvailable what="Fleet analysis" />;
  if (top.error) return <ErrorBox error={top.error} />;
  if (!top.data) return <Loading what="analysis" />;
  const items = (top.data.items ?? []).filter((i) => i.device_id);
  if (items.length === 0) return <p>No metrics from the last 24 hours.</p>;
  return (
    <>
      <p class="muted small">Average {top.data.metric ?? 'CPU'} over the last 24 hours:</p>
      <ol class="plain-list" data-testid="hottest">
        {items.map((i) => (
          <li key={i.device_id}>
            {allowed('devices') ? <Link href={`/devices/${i.device_id}`}>{i.title || i.device_id?.slice(0, 12)}</Link> : <span>{i.title}</span>}{' '}
            <span class="muted">{Math.round(i.value * 10) / 10}%</span>
          </li>
        ))}
      </ol>
    </>
  );
}

export function DashboardScreen() {
  const tree = useTree();
  const [live, setLive] = useState<Map<string, DeviceEvent>>(new Map());
  useEffect(() => setLive(new Map()), [tree.data]);
  useDeviceEvents(
    allowed('devices'),
    (e) => setLive((m) => new Map(m).set(e.device_id, e)),
    () => tree.reload(),
  );
  const devices = useMemo(() => (tree.data ? devicesOf(tree.data.tree) : undefined), [tree.data]);
  // Refresh reloads the tree and, by a new key, every card.
  const [round, setRound] = useState(0);
  return (
    <section class="dashboard">
      <PageTitle
        actions={
          <button
            type="button"
            onClick={() => {
              tree.reload();
              setRound((n) => n + 1);
            }}
          >
            Refresh
          </button>
        }
      >
        Dashboard
      </PageTitle>
      <div class="panels" key={round}>
        {allowed('devices') && (
          <Card title="Devices" id="devices">
            <ErrorBox error={tree.error} />
            <DevicesCard devices={devices} live={live} />
          </Card>
        )}
        {allowed('pendingHosts') && (
          <Card title="Pending hosts" id="pending">
            <PendingCard />
          </Card>
        )}
        {allowed('logs') && (
          <Card title="Reports" id="reports">
            <ReportsCard />
          </Card>
        )}
        {allowed('devices') && (
          <Card title="Configuration" id="configuration">
            <DevicesConfiguration devices={devices} error={tree.error} />
          </Card>
        )}
        {can('cve:read') && (
          <Card title="Top CVEs" id="cves">
            <CveCard />
          </Card>
        )}
        {can('analysis:read') && (
          <Card title="Hottest devices" id="hottest">
            <HottestCard />
          </Card>
        )}
      </div>
    </section>
  );
}

function DevicesConfiguration({ devices, error }: { devices: GroupTreeNode[] | undefined; error: unknown }) {
  if (error) return null;
  return <ConfigurationCard devices={devices} />;
}
