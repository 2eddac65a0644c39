/**
 * The audit trail: remote-access attempts (allowed and denied) and changes made through the API,
 * each read as a sentence (its JSON one click away), newest first, filtered by device, user, action, result and time. Filters live in the URL.
 */
import { useState } from 'preact/hooks';
import type { AuditEntry, AuditVerification, GroupTree, GroupTreeNode, ListPage, UserRecord } from '../../../shared/api-types.js';
import { auditSentence } from '../../../shared/audit-sentences.js';
import { api, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { can, getSession } from '../session.js';
import { Link, navigate, useLocation, withQuery, QueryPager } from '../router.js';
import { labelOf, nodeChoices, resolveNode } from '../node-names.js';
import { ErrorBox, FilterFold, formatBytes, formatTime, Loading, NodeNameField, PageTitle, Table, useLoad } from '../ui.js';

const PAGE = 50;
const FILTERS = ['kind', 'device_id', 'user_id', 'action', 'result', 'from', 'to'] as const;
type Filters = Record<(typeof FILTERS)[number], string>;

/** `datetime-local` value (local time) → ISO-8601 UTC, as the API takes it. */
function toIso(local: string): string | undefined {
  if (!local) return undefined;
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

function duration(ms: number | null): string {
  if (ms === null || ms === undefined) return '';
  if (ms < 1000) return `${ms} ms`;
  const s = Math.round(ms / 1000);
  return s < 120 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** Node id → name, from the group tree (devices and groups the user may read; removed ones are absent). */
function nodeNames(tree: GroupTree): Map<string, string> {
  const names = new Map<string, string>();
  const walk = (node: GroupTreeNode) => {
    if (node.title) names.set(node.node_id, node.title);
    node.nodes?.forEach(walk);
  };
  walk(tree.tree);
  return names;
}

/** The recording a console's start entry links (its session id), if any. */
function recordingOf(e: AuditEntry): string | undefined {
  const recording = (e.options as { recording?: unknown } | null)?.recording;
  return e.event === 'remote.console.start' && typeof recording === 'string' ? recording : undefined;
}

/**
 * Whether to offer a recording: audit:read alone does not read one. Its owner may, and a manager
 * of remote access (the broker checks the device and answers 403 otherwise).
 */
function mayPlay(e: AuditEntry): boolean {
  return e.user_id === getSession().profile?.user_id || can('remote-access:manage');
}

/** An event code that wraps only at its dots (`remote.console.start`), never inside a word. */
function EventName({ event }: { event: string }) {
  const parts = event.split('.');
  return (
    <code class="event-name">
      {parts.map((part, i) => (
        <span key={i}>
          {part}
          {i < parts.length - 1 && (
            <>
              .<wbr />
            </>
          )}
        </span>
      ))}
    </code>
  );
}

export function AuditScreen() {
  const { query } = useLocation();
  const applied = Object.fromEntries(FILTERS.map((f) => [f, query.get(f) ?? ''])) as Filters;
  const offset = Number(query.get('offset') ?? 0) || 0;
  const [draft, setDraft] = useState<Filters>(applied);
  /** Phones: the filters fold away until asked for. */
  const [filtersOpen, setFiltersOpen] = useState(false);
  const key = JSON.stringify([applied, offset]);

  const entries = useLoad(
    () =>
      api.get<ListPage<AuditEntry>>('/commitlist', {
        device_id: applied.device_id.trim() || undefined,
        user_id: applied.user_id || undefined,
        action: applied.action.trim() || undefined,
        result: applied.result || undefined,
        event: applied.kind === 'remote' ? 'remote.' : undefined,
        from: toIso(applied.from),
        to: toIso(applied.to),
        offset,
        items_per_page: PAGE,
      }),
    [key],
  );
  const tree = useLoad(
    () => (allowed('devices') ? api.get<GroupTree>('/grouptree', { _format: 'json' }).catch(() => undefined) : Promise.resolve(undefined)),
    [],
  );
  const names = { data: tree.data ? nodeNames(tree.data) : undefined };
  const nameOf = (id: string) => names.data?.get(id);
  const devices = nodeChoices(tree.data, ['device']);
  /** The device filter as typed; null until edited (then the URL's device, by name once known). */
  const [deviceText, setDeviceText] = useState<string | null>(null);
  const [deviceProblem, setDeviceProblem] = useState<string | undefined>();
  const users = useLoad(
    () => (allowed('users') ? api.get('/userlist', { items_per_page: 1000 }).then((a) => itemsOf<UserRecord>(a)) : Promise.resolve([])),
    [],
  );

  const apply = (e: Event) => {
    e.preventDefault();
    const device = deviceText === null ? { id: applied.device_id || undefined } : resolveNode(deviceText, devices, 'device');
    if ('problem' in device) {
      setDeviceProblem(device.problem);
      return;
    }
    setDeviceProblem(undefined);
    setFiltersOpen(false); // on a phone, the entries come back into view
    navigate(withQuery('/audit', { ...draft, device_id: device.id ?? '' }));
    setDeviceText(null); // the field shows the applied device by name
  };
  const set = (name: keyof Filters) => (e: Event) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value });

  const [chain, setChain] = useState<{ checking: boolean; answer?: AuditVerification; error?: unknown }>({ checking: false });
  const verify = () => {
    setChain({ checking: true });
    api.get<AuditVerification>('/audit/verify').then(
      (answer) => setChain({ checking: false, answer }),
      (error: unknown) => setChain({ checking: false, error }),
    );
  };

  const items = entries.data?.items ?? [];
  const total = entries.data?.total ?? 0;

  return (
    <section>
      <PageTitle>Audit</PageTitle>
      <FilterFold controls="audit-filters" active={FILTERS.filter((f) => applied[f]).length} open={filtersOpen} onToggle={() => setFiltersOpen(!filtersOpen)} />
      <form id="audit-filters" class={`filters${filtersOpen ? '' : ' folded'}`} onSubmit={apply} aria-label="Audit filters">
        <div class="field fold">
          <label for="a-kind">Entries</label>
          <select id="a-kind" value={draft.kind} onChange={set('kind')}>
            <option value="">All</option>
            <option value="remote">Remote access</option>
          </select>
        </div>
        <NodeNameField
          id="a-device"
          class="fold"
          label="Device"
          value={deviceText ?? labelOf(applied.device_id, devices)}
          choices={devices}
          problem={deviceProblem}
          onInput={(text) => {
            setDeviceText(text);
            setDeviceProblem(undefined);
          }}
        />
        <div class="field fold">
          <label for="a-user">User</label>
          {users.data && users.data.length > 0 ? (
            <select id="a-user" value={draft.user_id} onChange={set('user_id')}>
              <option value="">Anyone</option>
              {users.data.map((u) => (
                <option key={u.user_id} value={u.user_id}>
                  {u.email}
                </option>
              ))}
            </select>
          ) : (
            <input id="a-user" value={draft.user_id} onInput={set('user_id')} placeholder="user id" />
          )}
        </div>
        <div class="field fold">
          <label for="a-action">Action</label>
          <input id="a-action" list="a-actions" value={draft.action} onInput={set('action')} placeholder="console, tunnel, copy, reload…" />
          <datalist id="a-actions">
            {['console', 'tunnel', 'copy', 'reload'].map((a) => (
              <option key={a} value={a} />
            ))}
          </datalist>
        </div>
        <div class="field fold">
          <label for="a-result">Result</label>
          <select id="a-result" value={draft.result} onChange={set('result')}>
            <option value="">Any</option>
            <option value="allowed">allowed</option>
            <option value="denied">denied</option>
            <option value="ok">ok</option>
            <option value="error">error</option>
            <option value="ended">ended</option>
          </select>
        </div>
        <div class="field fold">
          <label for="a-from">From</label>
          <input id="a-from" type="datetime-local" value={draft.from} onInput={set('from')} />
        </div>
        <div class="field fold">
          <label for="a-to">To</label>
          <input id="a-to" type="datetime-local" value={draft.to} onInput={set('to')} />
        </div>
        <div class="filter-buttons fold">
          <button type="submit" class="primary">
            Filter
          </button>
          <button
            type="button"
            onClick={() => {
              setDraft(Object.fromEntries(FILTERS.map((f) => [f, ''])) as Filters);
              setDeviceText(null);
              setDeviceProblem(undefined);
              navigate('/audit');
            }}
          >
            Clear
          </button>
        </div>
      </form>

      <div class="chain">
        <button type="button" onClick={verify} disabled={chain.checking}>
          Verify chain
        </button>{' '}
        <span role="status" aria-label="Chain">
          {chain.checking && 'Checking every entry…'}
          {chain.answer?.ok && `Chain intact: ${chain.answer.entries} entries.`}
          {chain.answer && !chain.answer.ok && `Chain broken at entry ${chain.answer.first_bad?.id}: it was edited, or the entry before it deleted.`}
        </span>
      </div>
      <ErrorBox error={chain.error ?? entries.error} />
      {entries.loading && !entries.data && <Loading what="the audit trail" />}
      {entries.data && (
        <>
          <p class="muted" role="status">
            {total === 0 ? 'No entries match.' : `Entries ${offset + 1}–${Math.min(offset + PAGE, total)} of ${total}`}
          </p>
          <Table
            class="audit-table"
            columns={['Time', 'User', 'Device', 'What', 'Event', 'Action', 'Result', 'Reason', 'Source', 'Duration', 'Bytes in / out']}
          >
            {items.map((e) => (
              <tr key={e.id} class={`result-${e.result}`}>
                <td>{formatTime(e.ts)}</td>
                <td>{e.user_email ?? e.user_id ?? ''}</td>
                <td>
                  {e.device_id && (
                    <Link href={`/devices/${e.device_id}`} title={e.device_id} class="audit-device">
                      {names.data?.get(e.device_id) ?? <code>{e.device_id.slice(0, 12)}</code>}
                    </Link>
                  )}
                </td>
                <td class="audit-what">
                  <span data-testid="audit-sentence">{auditSentence(e, nameOf)}</span>
                  <details>
                    <summary>JSON</summary>
                    <pre>{JSON.stringify({ event: e.event, action: e.action, options: e.options }, null, 2)}</pre>
                  </details>
                </td>
                <td>
                  <EventName event={e.event} />
                </td>
                <td>
                  {e.action}
                  {e.event === 'config.commit' && allowed('auditReports') && (
                    <>
                      {' '}
                      <Link href={withQuery('/logs', { commit_id: e.sha })} data-testid="audit-show-reports">
                        Show reports
                      </Link>
                    </>
                  )}
                  {recordingOf(e) && mayPlay(e) && (
                    <>
                      {' '}
                      <Link href={`/recordings/${recordingOf(e)}`} data-testid="audit-play">
                        Play
                      </Link>
                    </>
                  )}
                </td>
                <td>
                  <span class={`badge ${e.result}`}>{e.result}</span>
                  {/* A session allowed, then refused or failed on the device: its end says so on the same line. */}
                  {e.end_result && e.end_result !== 'ended' && (
                    <>
                      {' → '}
                      <span class={`badge ${e.end_result}`} data-testid="audit-end-result">
                        {e.end_result}
                      </span>
                    </>
                  )}
                </td>
                <td>{[e.reason, e.end_result && e.end_result !== 'ended' ? e.end_reason : null].filter(Boolean).join('; ')}</td>
                <td>
                  {e.source ?? ''}
                  {e.source_ip ? ` ${e.source_ip}` : ''}
                </td>
                <td>{duration(e.duration_ms)}</td>
                <td>{e.bytes_in !== null || e.bytes_out !== null ? `${formatBytes(e.bytes_in ?? 0)} / ${formatBytes(e.bytes_out ?? 0)}` : ''}</td>
              </tr>
            ))}
          </Table>
          <QueryPager path="/audit" query={applied} offset={offset} page={PAGE} total={total} labels={['Newer', 'Older']} />
        </>
      )}
    </section>
  );
}
