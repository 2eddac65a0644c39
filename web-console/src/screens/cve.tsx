/**
 * CVE: the vulnerabilities of the imported feed that affect devices (severity, score, host
 * count, decision), one CVE with the devices it affects and accept/ignore with a reason, feed
 * import, and the CVE panel of the device page. Reading needs cve:read (the spec's "CVE");
 * import, decisions and removal need cve:manage ("CVE, Manage"). Host lists and counts cover the
 * devices the broker lets the user see.
 */
import { useRef, useState } from 'preact/hooks';
import type { CveDetail, CveFeedState, CveItem, CveScoreStats, CveSeverity, CveStatus, ListPage } from '../../../shared/api-types.js';
import { api, uploadForm } from '../api.js';
import { allowed } from '../areas.js';
import { Link, navigate, useLocation, withQuery, QueryPager } from '../router.js';
import { ConfirmButton, ErrorBox, formatTime, Loading, Notice, PageTitle, Table, useAction, useLoad } from '../ui.js';

/** The feed's age in a sentence: when it was imported, and the newest date its advisories give. */
export function feedAge(feed: CveFeedState): string {
  const parts = [`Feed of ${feed.advisories} advisor${feed.advisories === 1 ? 'y' : 'ies'}, imported ${formatTime(feed.imported_at)}`];
  if (feed.feed_date) parts.push(`newest advisory dated ${formatTime(feed.feed_date)}`);
  return `${parts.join('; ')}.`;
}

/**
 * Before any feed is imported nothing can match, so "no CVE affects your devices" would be a false
 * all-clear: say there is no feed, and how to get one (or whom to ask).
 */
export function NoFeed({ mayManage }: { mayManage: boolean }) {
  return (
    <p class="notice warn" role="status" data-testid="cve-no-feed">
      <strong>No vulnerability feed has been imported</strong>, so no CVE can be found on any device yet.{' '}
      {mayManage ? (
        <>
          Import one (OSV JSON, the advisories of your distributions as osv.dev exports them) with <em>Import feed</em> on the <Link href="/cve">CVE page</Link>
          , or on the broker with <code>npm start -- cve-import &lt;file or folder&gt;</code>.
        </>
      ) : (
        <>Ask someone who may manage CVEs (the “CVE, Manage” permission) to import one.</>
      )}
    </p>
  );
}

const PAGE = 50;
const FILTERS = ['severity', 'status', 'search'] as const;
type Filters = Record<(typeof FILTERS)[number], string>;

export function SeverityBadge({ severity, score }: { severity: CveSeverity; score: number | null }) {
  return (
    <span class={`badge cve-${severity}`} title={score === null ? 'no CVSS score in the feed' : `CVSS ${score.toFixed(1)}`}>
      {severity}
      {score !== null && ` ${score.toFixed(1)}`}
    </span>
  );
}

function StatusBadge({ status, reason }: { status: CveStatus; reason: string }) {
  if (status === 'open') return <span class="muted">open</span>;
  return (
    <span class={`badge cve-status-${status}`} title={reason}>
      {status}
    </span>
  );
}

function ImportFeed({ onDone }: { onDone: () => void }) {
  const input = useRef<HTMLInputElement>(null);
  const action = useAction();
  const [result, setResult] = useState<string>();
  const send = async () => {
    const file = input.current?.files?.[0];
    if (!file) return;
    const form = new FormData();
    form.append('file', file, file.name);
    const done = await action.run(() =>
      uploadForm<{ advisories: number; cves: number; skipped: number; matches: number; devices_affected: number }>('/cve/import', form, () => {}),
    );
    if (done) {
      setResult(
        `Imported ${done.advisories} advisories (${done.cves} CVE ids, ${done.skipped} skipped): ${done.matches} findings on ${done.devices_affected} devices.`,
      );
      onDone();
    }
    if (input.current) input.current.value = '';
  };
  return (
    <div class="cve-import">
      <label for="cve-file">Import feed (OSV JSON)</label>{' '}
      <input id="cve-file" ref={input} type="file" accept=".json,application/json" onChange={send} disabled={action.busy} />
      <ErrorBox error={action.error} title="The feed was not imported" />
      {result && <Notice>{result}</Notice>}
    </div>
  );
}

export function CveScreen() {
  const { query } = useLocation();
  const applied = Object.fromEntries(FILTERS.map((f) => [f, query.get(f) ?? ''])) as Filters;
  const offset = Number(query.get('offset') ?? 0) || 0;
  const [draft, setDraft] = useState<Filters>(applied);
  const mayManage = allowed('cveManage');
  const key = JSON.stringify([applied, offset]);
  const list = useLoad(
    () =>
      api.get<ListPage<CveItem>>('/cvelist', {
        severity: applied.severity || undefined,
        status: applied.status || undefined,
        search: applied.search.trim() || undefined,
        offset,
        items_per_page: PAGE,
      }),
    [key],
  );
  const stats = useLoad(() => api.get<CveScoreStats>('/cvescorestats'), [key]);
  const feed = useLoad(() => api.get<CveFeedState>('/cvefeed'), [key]);
  const set = (name: keyof Filters) => (e: Event) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value });
  const items = list.data?.items ?? [];
  const total = list.data?.total ?? 0;
  return (
    <section>
      <PageTitle>CVE</PageTitle>
      {feed.data && !feed.data.imported && <NoFeed mayManage={mayManage} />}
      {feed.data?.imported && (
        <p class="muted small" data-testid="cve-feed-age">
          {feedAge(feed.data)}
        </p>
      )}
      {stats.data && (
        <ul class="cve-stats" aria-label="CVEs by severity">
          {(['critical', 'high', 'medium', 'low', 'unknown'] as const).map((s) => (
            <li key={s}>
              <span class={`badge cve-${s}`}>{s}</span> <strong data-testid={`cve-count-${s}`}>{stats.data![s]}</strong>
            </li>
          ))}
          <li class="muted">
            {stats.data.accepted} accepted, {stats.data.ignored} ignored
          </li>
        </ul>
      )}
      {mayManage && (
        <ImportFeed
          onDone={() => {
            list.reload();
            stats.reload();
            feed.reload();
          }}
        />
      )}
      <form
        class="filters"
        aria-label="CVE filters"
        onSubmit={(e) => {
          e.preventDefault();
          navigate(withQuery('/cve', { ...draft }));
        }}
      >
        <div class="field">
          <label for="c-severity">Severity</label>
          <select id="c-severity" value={draft.severity} onChange={set('severity')}>
            <option value="">Any</option>
            <option value="critical">Critical</option>
            <option value="critical,high">High and worse</option>
            <option value="critical,high,medium">Medium and worse</option>
            <option value="low">Low</option>
            <option value="unknown">Unknown</option>
          </select>
        </div>
        <div class="field">
          <label for="c-status">Status</label>
          <select id="c-status" value={draft.status} onChange={set('status')}>
            <option value="">Any</option>
            <option value="open">Open</option>
            <option value="accepted">Accepted</option>
            <option value="ignored">Ignored</option>
          </select>
        </div>
        <div class="field">
          <label for="c-search">Text</label>
          <input id="c-search" value={draft.search} onInput={set('search')} placeholder="CVE id, package or summary" />
        </div>
        <div class="filter-buttons">
          <button type="submit" class="primary">
            Filter
          </button>
          <button
            type="button"
            onClick={() => {
              setDraft({ severity: '', status: '', search: '' });
              navigate('/cve');
            }}
          >
            Clear
          </button>
        </div>
      </form>
      <ErrorBox error={list.error ?? stats.error} />
      {list.loading && !list.data && <Loading what="the CVEs" />}
      {list.data && (
        <>
          <p class="muted" role="status">
            {total === 0
              ? feed.data?.imported === false
                ? 'No CVEs: there is no feed to match against.'
                : 'No CVE affects your devices (or none matches).'
              : `CVEs ${offset + 1}–${Math.min(offset + PAGE, total)} of ${total}`}
          </p>
          <Table class="cve-table" columns={['CVE', 'Severity', 'Summary', 'Packages', 'Hosts', 'Status']}>
            {items.map((c) => (
              <tr key={c.cve_id} data-testid="cve-row">
                <td>
                  <Link href={`/cve/${encodeURIComponent(c.cve_id)}`}>{c.cve_id}</Link>
                </td>
                <td>
                  <SeverityBadge severity={c.severity} score={c.score} />
                </td>
                <td>{c.summary}</td>
                <td>{c.packages.join(', ')}</td>
                <td data-testid="cve-hosts">{c.hosts}</td>
                <td>
                  <StatusBadge status={c.status} reason={c.reason} />
                </td>
              </tr>
            ))}
          </Table>
          <QueryPager path="/cve" query={applied} offset={offset} page={PAGE} total={total} />
        </>
      )}
    </section>
  );
}

function Decision({ cve, onChange }: { cve: CveDetail; onChange: () => void }) {
  const [status, setStatus] = useState<CveStatus>(cve.status === 'open' ? 'accepted' : cve.status);
  const [reason, setReason] = useState(cve.reason);
  const action = useAction();
  const save = async (e: Event) => {
    e.preventDefault();
    const done = await action.run(() => api.patch(`/cve/${encodeURIComponent(cve.cve_id)}`, { status, reason }));
    if (done !== undefined) onChange();
  };
  return (
    <form class="cve-decision" onSubmit={save} aria-label="CVE decision">
      <div class="field">
        <label for="d-status">Decision</label>
        <select id="d-status" value={status} onChange={(e) => setStatus((e.currentTarget as HTMLSelectElement).value as CveStatus)}>
          <option value="accepted">Accept</option>
          <option value="ignored">Ignore</option>
        </select>
      </div>
      <div class="field">
        <label for="d-reason">Reason</label>
        <input id="d-reason" value={reason} onInput={(e) => setReason((e.currentTarget as HTMLInputElement).value)} maxLength={2000} required />
      </div>
      <div class="filter-buttons">
        <button type="submit" class="primary" disabled={action.busy}>
          Save decision
        </button>
        {cve.status !== 'open' && (
          <button
            type="button"
            disabled={action.busy}
            onClick={async () => {
              const done = await action.run(() => api.patch(`/cve/${encodeURIComponent(cve.cve_id)}`, { status: 'open' }));
              if (done !== undefined) onChange();
            }}
          >
            Reopen
          </button>
        )}
        <ConfirmButton
          label="Remove from feed"
          question={`Remove ${cve.cve_id} from the feed?`}
          onConfirm={async () => {
            const removed = await action.run(async () => {
              await api.del(`/cve/${encodeURIComponent(cve.cve_id)}`);
              return true;
            });
            if (removed) navigate('/cve');
          }}
        />
      </div>
      <ErrorBox error={action.error} />
    </form>
  );
}

export function CveDetailScreen({ cveId }: { cveId: string }) {
  const cve = useLoad(() => api.get<CveDetail>(`/cve/${encodeURIComponent(cveId)}`), [cveId]);
  return (
    <section>
      <PageTitle>{cveId}</PageTitle>
      <p>
        <Link href="/cve">← All CVEs</Link>
      </p>
      <ErrorBox error={cve.error} />
      {cve.loading && !cve.data && <Loading what="the CVE" />}
      {cve.data && (
        <>
          <p>
            <SeverityBadge severity={cve.data.severity} score={cve.data.score} /> {cve.data.summary}
          </p>
          <p class="muted">
            Advisories: {cve.data.advisories.join(', ')} · Status: <StatusBadge status={cve.data.status} reason={cve.data.reason} />
            {cve.data.reason && <span data-testid="cve-reason"> — {cve.data.reason}</span>}
          </p>
          {allowed('cveManage') && <Decision key={`${cve.data.status}:${cve.data.reason}`} cve={cve.data} onChange={cve.reload} />}
          <h2>Affected devices ({cve.data.hosts})</h2>
          <Table class="cve-devices" columns={['Device', 'Package', 'Installed', 'Fixed in']}>
            {cve.data.devices.map((d) => (
              <tr key={`${d.device_id}:${d.package}`} data-testid="cve-device-row">
                <td>
                  <Link href={`/devices/${d.device_id}`} title={d.device_id}>
                    {d.title}
                  </Link>
                </td>
                <td>{d.package}</td>
                <td>
                  <code>{d.version}</code>
                </td>
                <td>{d.fixed_version ? <code>{d.fixed_version}</code> : <span class="muted">no fix known</span>}</td>
              </tr>
            ))}
          </Table>
        </>
      )}
    </section>
  );
}

/** The device page's CVE panel: the CVEs affecting this device. */
export function DeviceCves({ deviceId }: { deviceId: string }) {
  const list = useLoad(() => api.get<ListPage<CveItem>>('/cvelist', { device_id: deviceId, items_per_page: 200 }), [deviceId]);
  if (list.error) return <ErrorBox error={list.error} />;
  if (!list.data) return <Loading what="the CVEs" />;
  if (list.data.total === 0) return <p class="muted">No CVE of the imported feed affects this device.</p>;
  return (
    <Table class="cve-table" columns={['CVE', 'Severity', 'Packages', 'Status']}>
      {list.data.items.map((c) => (
        <tr key={c.cve_id} data-testid="device-cve-row">
          <td>
            <Link href={`/cve/${encodeURIComponent(c.cve_id)}`}>{c.cve_id}</Link>
          </td>
          <td>
            <SeverityBadge severity={c.severity} score={c.score} />
          </td>
          <td>{c.packages.join(', ')}</td>
          <td>
            <StatusBadge status={c.status} reason={c.reason} />
          </td>
        </tr>
      ))}
    </Table>
  );
}
