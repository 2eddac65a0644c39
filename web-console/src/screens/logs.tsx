/**
 * The Logs: agent reports (configuration runs, watchers, the agent's own events) newest first,
 * filtered by severity, device or group, text and read state; filters live in the URL. Marking read
 * needs reports:acknowledge (the spec's "Logs, Mark as read").
 */
import { useState } from 'preact/hooks';
import type { GroupTree, ListPage, ReportItem } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { allowed } from '../areas.js';
import { Link, navigate, useLocation, withQuery, QueryPager } from '../router.js';
import { labelOf, nodeChoices, resolveNode } from '../node-names.js';
import { ErrorBox, formatTime, Loading, NodeNameField, PageTitle, Table, useAction, useLoad } from '../ui.js';

const PAGE = 50;
const FILTERS = ['severity', 'node_id', 'search', 'read', 'commit_id'] as const;
type Filters = Record<(typeof FILTERS)[number], string>;

/** The base64 log as text (UTF-8, invalid bytes replaced). */
function logText(log: string): string {
  try {
    const bytes = Uint8Array.from(atob(log), (c) => c.charCodeAt(0));
    return new TextDecoder().decode(bytes);
  } catch {
    return '';
  }
}

export function LogsScreen() {
  const { query } = useLocation();
  const applied = Object.fromEntries(FILTERS.map((f) => [f, query.get(f) ?? ''])) as Filters;
  const offset = Number(query.get('offset') ?? 0) || 0;
  const [draft, setDraft] = useState<Filters>(applied);
  const action = useAction();
  const mayMark = allowed('logsMarkRead');

  const reports = useLoad(
    () =>
      api.get<ListPage<ReportItem>>('/reportlist', {
        severity: applied.severity || undefined,
        node_id: applied.node_id.trim() || undefined,
        search: applied.search.trim() || undefined,
        read: applied.read || undefined,
        commit_id: applied.commit_id || undefined,
        offset,
        items_per_page: PAGE,
      }),
    [JSON.stringify([applied, offset])],
  );

  const tree = useLoad(
    () => (allowed('devices') ? api.get<GroupTree>('/grouptree', { _format: 'json' }).catch(() => undefined) : Promise.resolve(undefined)),
    [],
  );
  const nodes = nodeChoices(tree.data, ['device', 'group']);
  /** The device-or-group filter as typed; null until edited (then the URL's node, by name once known). */
  const [nodeText, setNodeText] = useState<string | null>(null);
  const [nodeProblem, setNodeProblem] = useState<string | undefined>();

  const apply = (e: Event) => {
    e.preventDefault();
    const node = nodeText === null ? { id: applied.node_id || undefined } : resolveNode(nodeText, nodes, 'device or group');
    if ('problem' in node) {
      setNodeProblem(node.problem);
      return;
    }
    setNodeProblem(undefined);
    navigate(withQuery('/logs', { ...draft, node_id: node.id ?? '' }));
    setNodeText(null); // the field shows the applied node by name
  };
  const set = (name: keyof Filters) => (e: Event) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value });
  const mark = async (body: Record<string, unknown>) => {
    await action.run(() => api.patch('/reportmarkread', body));
    reports.reload();
  };

  const items = reports.data?.items ?? [];
  const total = reports.data?.total ?? 0;
  const unreadShown = items.filter((r) => !r.read).map((r) => r.id);

  return (
    <section>
      <PageTitle
        actions={
          mayMark && (
            <>
              <button type="button" disabled={action.busy || unreadShown.length === 0} onClick={() => mark({ ids: unreadShown })}>
                Mark shown as read
              </button>{' '}
              <button type="button" disabled={action.busy} onClick={() => mark({ all: true })}>
                Mark all as read
              </button>
            </>
          )
        }
      >
        Logs
      </PageTitle>
      {applied.commit_id && (
        <p class="muted" data-testid="logs-commit">
          Reports of configuration commit <code title={applied.commit_id}>{applied.commit_id.slice(0, 8)}</code>.{' '}
          <Link href={withQuery('/logs', { ...applied, commit_id: '' })}>All reports</Link>
        </p>
      )}
      <form class="filters" onSubmit={apply} aria-label="Log filters">
        <div class="field">
          <label for="l-severity">Severity</label>
          <select id="l-severity" value={draft.severity} onChange={set('severity')}>
            <option value="">Any</option>
            <option value="CRIT">Critical</option>
            <option value="ERR,CRIT">Errors and worse</option>
            <option value="WARN,ERR,CRIT">Warnings and worse</option>
            <option value="INFO">Info</option>
          </select>
        </div>
        <NodeNameField
          id="l-node"
          label="Device or group"
          value={nodeText ?? labelOf(applied.node_id, nodes)}
          choices={nodes}
          problem={nodeProblem}
          onInput={(text) => {
            setNodeText(text);
            setNodeProblem(undefined);
          }}
        />
        <div class="field">
          <label for="l-search">Text</label>
          <input id="l-search" value={draft.search} onInput={set('search')} placeholder="text, bundle or label" />
        </div>
        <div class="field">
          <label for="l-read">Show</label>
          <select id="l-read" value={draft.read} onChange={set('read')}>
            <option value="">All</option>
            <option value="false">Unread</option>
            <option value="true">Read</option>
          </select>
        </div>
        <div class="filter-buttons">
          <button type="submit" class="primary">
            Filter
          </button>
          <button
            type="button"
            onClick={() => {
              setDraft(Object.fromEntries(FILTERS.map((f) => [f, ''])) as Filters);
              setNodeText(null);
              setNodeProblem(undefined);
              navigate('/logs');
            }}
          >
            Clear
          </button>
        </div>
      </form>
      <ErrorBox error={action.error ?? reports.error} />
      {reports.loading && !reports.data && <Loading what="the logs" />}
      {reports.data && (
        <>
          <p class="muted" role="status">
            {total === 0 ? 'No reports match.' : `Reports ${offset + 1}–${Math.min(offset + PAGE, total)} of ${total}`}
          </p>
          <Table class="logs-table" columns={['Time', 'Severity', 'Device', 'Bundle', 'Text', 'Commit', ...(mayMark ? [''] : [])]}>
            {items.map((r) => (
              <tr key={r.id} class={r.read ? 'read' : 'unread'} data-testid="report-row">
                <td>{formatTime(r.ts)}</td>
                <td>
                  <span class={`badge sev-${r.sev.toLowerCase()}`}>{r.sev}</span>
                </td>
                <td>
                  <Link href={`/devices/${r.node_id}`} title={r.node_id}>
                    {r.title}
                  </Link>
                </td>
                <td>
                  <code>{r.bundle}</code>
                </td>
                <td>
                  {r.read ? r.text : <strong>{r.text}</strong>}
                  {r.log && (
                    <details>
                      <summary>log</summary>
                      <pre>{logText(r.log)}</pre>
                    </details>
                  )}
                </td>
                <td>{r.commit_id && <code title={r.commit_id}>{r.commit_id.slice(0, 8)}</code>}</td>
                {mayMark && (
                  <td>
                    <button type="button" class="link-button" disabled={action.busy} onClick={() => mark({ ids: [r.id], read: r.read ? false : undefined })}>
                      {r.read ? 'Mark unread' : 'Mark read'}
                    </button>
                  </td>
                )}
              </tr>
            ))}
          </Table>
          <QueryPager path="/logs" query={applied} offset={offset} page={PAGE} total={total} labels={['Newer', 'Older']} />
        </>
      )}
    </section>
  );
}
