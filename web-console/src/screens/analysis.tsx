/**
 * Analysis (the spec's area: analysis:read and device:read): metrics over time for a group
 * (hourly aggregates over its devices from POST /analysis, and the top 10 devices by CPU, memory
 * and disk in the last 24 h) or for one device (its series from GET /device/{id}/metrics).
 * The choice lives in the URL: `?node=<group>&device=<id>&range=1h|24h|7d|30d&res=auto|raw|hour`.
 * This module and uPlot load on first use.
 */
import { Fragment } from 'preact';
import type { AnalysisAnswer, AnalysisItem, GroupTree, GroupTreeNode, MetricsSummary, SeriesAnswer } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { GROUP_CHARTS, RANGES, deviceCharts, formatValue, groupChart, rangeSeconds, withSpan, type ChartData, type Resolution } from '../metrics-charts.js';
import { Link, navigate, useLocation, withQuery } from '../router.js';
import { TimeChart } from '../time-chart.js';
import { ErrorBox, formatBytes, formatTime, Loading, PageTitle, Table, useLoad } from '../ui.js';

export type ResolutionChoice = 'auto' | 'raw' | 'hour';

const now = () => Math.floor(Date.now() / 1000);

/**
 * A device's samples over the last `seconds`. Auto: raw samples for a range up to a day (hourly when
 * there are more than the broker answers raw), hourly beyond.
 */
export async function loadDeviceSeries(deviceId: string, seconds: number, choice: ResolutionChoice): Promise<SeriesAnswer> {
  const from = now() - seconds;
  const ask = (resolution: Resolution) => api.get<SeriesAnswer>(`/device/${encodeURIComponent(deviceId)}/metrics`, { from, resolution });
  if (choice !== 'auto') return ask(choice);
  if (seconds > 86400) return ask('hour');
  try {
    return await ask('raw');
  } catch (err) {
    if (err instanceof ApiFailure && err.error === 'too_many_points') return ask('hour');
    throw err;
  }
}

/** A device's charts; used by the Analysis screen and the device page. */
export function DeviceCharts({ deviceId, seconds, choice, height }: { deviceId: string; seconds: number; choice: ResolutionChoice; height?: number }) {
  const series = useLoad(() => loadDeviceSeries(deviceId, seconds, choice), [deviceId, seconds, choice]);
  if (series.error) return <ErrorBox error={series.error} title="The metrics could not be loaded" />;
  if (!series.data) return <Loading what="the metrics" />;
  const charts = withSpan(deviceCharts(series.data.items, series.data.resolution), series.data.from, series.data.to);
  return (
    <div>
      <p class="muted small" data-testid="resolution">
        {series.data.resolution === 'raw' ? 'Every sample' : 'Hourly averages'} · {series.data.total} values
      </p>
      {charts.length === 0 ? <p class="muted">This device sent no metrics in this range.</p> : <Charts charts={charts} height={height} />}
    </div>
  );
}

function Charts({ charts, height }: { charts: ChartData[]; height?: number }) {
  return (
    <div class="charts">
      {charts.map((c) => (
        <TimeChart key={c.key} chart={c} height={height} />
      ))}
    </div>
  );
}

/** The group charts: every series of GROUP_CHARTS as one hourly analysis over the node's devices. */
function GroupCharts({ nodeId, seconds }: { nodeId: string; seconds: number }) {
  const loaded = useLoad(async () => {
    const to = now();
    const from = to - seconds;
    const charts = await Promise.all(
      GROUP_CHARTS.map(async (def) =>
        groupChart(
          def,
          await Promise.all(
            def.series.map((s) =>
              api
                .post<AnalysisAnswer>('/analysis', {
                  metric: s.metric,
                  aggregate: s.aggregate,
                  node_id: nodeId || undefined,
                  from,
                  group_by: 'hour',
                  order: 'asc',
                  limit: 1000,
                })
                .then((a) => a.items),
            ),
          ),
        ),
      ),
    );
    return withSpan(
      charts.filter((c): c is ChartData => c !== null),
      from,
      to,
    );
  }, [nodeId, seconds]);
  if (loaded.error) return <ErrorBox error={loaded.error} title="The analysis could not be loaded" />;
  if (!loaded.data) return <Loading what="the analysis" />;
  const charts = loaded.data.filter((c): c is ChartData => c !== null);
  if (charts.length === 0) return <p class="muted">No device here sent metrics in this range.</p>;
  return <Charts charts={charts} />;
}

const TOP = [
  { key: 'cpu', title: 'CPU (user)', metric: 'cpu.user', unit: 'percent' as const },
  { key: 'memory', title: 'Memory used', metric: 'memory.memutil', unit: 'percent' as const },
  { key: 'disk', title: 'Disk used (fullest filesystem)', metric: 'filesystem.use', unit: 'percent' as const, aggregate: 'max' as const },
];

/** The top 10 devices below the node by CPU, memory and disk over the last 24 h. */
function TopDevices({ nodeId, link }: { nodeId: string; link: (deviceId: string) => string }) {
  const top = useLoad(
    () =>
      Promise.all(
        TOP.map((t) =>
          api
            .post<AnalysisAnswer>('/analysis', {
              metric: t.metric,
              aggregate: t.aggregate ?? 'avg',
              node_id: nodeId || undefined,
              group_by: 'device',
              limit: 10,
            })
            .then((a) => a.items),
        ),
      ),
    [nodeId],
  );
  if (top.error) return <ErrorBox error={top.error} />;
  if (!top.data) return <Loading what="the top devices" />;
  const rows = Array.from({ length: Math.max(0, ...top.data.map((l) => l.length)) }, (_, i) => i);
  if (rows.length === 0) return <p class="muted">No device here sent metrics in the last 24 hours.</p>;
  const cell = (items: AnalysisItem[], i: number, unit: 'percent') => {
    const item = items[i];
    if (!item?.device_id) return <td />;
    return (
      <td>
        <Link href={link(item.device_id)} title={item.device_id}>
          {item.title || item.device_id.slice(0, 12)}
        </Link>{' '}
        <span class="metric-value">{formatValue(item.value, unit)}</span>
      </td>
    );
  };
  return (
    <Table class="top-table" caption="Top 10 devices in the last 24 hours" columns={['#', ...TOP.map((t) => t.title)]}>
      {rows.map((i) => (
        <tr key={i} data-testid="top-row">
          <td>{i + 1}</td>
          {TOP.map((t, k) => cell(top.data![k], i, t.unit))}
        </tr>
      ))}
    </Table>
  );
}

interface Choice {
  node: string;
  device: string;
  range: string;
  res: ResolutionChoice;
}

function flatten(
  node: GroupTreeNode,
  depth: number,
  groups: { id: string; title: string; depth: number }[],
  devices: Map<string, GroupTreeNode[]>,
  above: string[],
) {
  if (node.type === 'device') {
    for (const g of above) devices.get(g)?.push(node);
    return;
  }
  groups.push({ id: node.node_id, title: node.title, depth });
  devices.set(node.node_id, []);
  for (const child of node.nodes ?? []) flatten(child, depth + 1, groups, devices, [...above, node.node_id]);
}

export function AnalysisScreen() {
  const { query } = useLocation();
  const choice: Choice = {
    node: query.get('node') ?? '',
    device: query.get('device') ?? '',
    range: RANGES.some((r) => r.key === query.get('range')) ? query.get('range')! : '24h',
    res: (['raw', 'hour'] as const).find((r) => r === query.get('res')) ?? 'auto',
  };
  const seconds = rangeSeconds(choice.range);
  const tree = useLoad(() => api.get<GroupTree>('/grouptree', { _format: 'json' }), []);
  const go = (next: Partial<Choice>) => {
    const c = { ...choice, ...next };
    navigate(
      withQuery('/analysis', { node: c.node, device: c.device, range: c.range === '24h' ? undefined : c.range, res: c.res === 'auto' ? undefined : c.res }),
    );
  };

  const groups: { id: string; title: string; depth: number }[] = [];
  const devicesBelow = new Map<string, GroupTreeNode[]>();
  if (tree.data) flatten(tree.data.tree, 0, groups, devicesBelow, []);
  const rootId = groups[0]?.id ?? '';
  const node = choice.node && devicesBelow.has(choice.node) ? choice.node : rootId;
  const deviceOptions = (devicesBelow.get(node) ?? []).slice().sort((a, b) => a.title.localeCompare(b.title));
  const device =
    deviceOptions.find((d) => d.node_id === choice.device) ?? (choice.device ? { node_id: choice.device, title: choice.device.slice(0, 12) } : null);
  const groupTitle = groups.find((g) => g.id === node)?.title ?? 'All devices';

  return (
    <section>
      <PageTitle>Analysis</PageTitle>
      <form class="filters analysis-controls" aria-label="What to show" onSubmit={(e) => e.preventDefault()}>
        <div class="field">
          <label for="a-group">Group</label>
          <select id="a-group" value={node} onChange={(e) => go({ node: e.currentTarget.value === rootId ? '' : e.currentTarget.value, device: '' })}>
            {groups.map((g) => (
              <option key={g.id} value={g.id}>
                {'\u2003'.repeat(g.depth)}
                {g.depth === 0 ? 'All devices' : g.title}
              </option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="a-device">Device</label>
          <select id="a-device" value={device?.node_id ?? ''} onChange={(e) => go({ device: e.currentTarget.value })}>
            <option value="">Every device of the group</option>
            {device && !deviceOptions.includes(device as GroupTreeNode) && <option value={device.node_id}>{device.title}</option>}
            {deviceOptions.map((d) => (
              <option key={d.node_id} value={d.node_id}>
                {d.title}
              </option>
            ))}
          </select>
        </div>
        <div class="field">
          <label for="a-range">Time range</label>
          <select id="a-range" value={choice.range} onChange={(e) => go({ range: e.currentTarget.value })}>
            {RANGES.map((r) => (
              <option key={r.key} value={r.key}>
                Last {r.label}
              </option>
            ))}
          </select>
        </div>
        {device && (
          <div class="field">
            <label for="a-res">Resolution</label>
            <select id="a-res" value={choice.res} onChange={(e) => go({ res: e.currentTarget.value as ResolutionChoice })}>
              <option value="auto">Automatic</option>
              <option value="raw">Every sample</option>
              <option value="hour">Hourly averages</option>
            </select>
          </div>
        )}
      </form>
      <ErrorBox error={tree.error} />
      {tree.loading && !tree.data && <Loading what="the groups" />}
      {tree.data &&
        (device ? (
          <section aria-labelledby="h-device-metrics">
            <div class="panel-head">
              <h2 id="h-device-metrics">{device.title}</h2>
              <span>
                <Link href={`/devices/${device.node_id}`}>Device page</Link> ·{' '}
                <Link href={withQuery('/analysis', { node: node === rootId ? undefined : node, range: choice.range === '24h' ? undefined : choice.range })}>
                  Back to {groupTitle}
                </Link>
              </span>
            </div>
            <DeviceCharts deviceId={device.node_id} seconds={seconds} choice={choice.res} />
          </section>
        ) : (
          <>
            <section class="panel" aria-labelledby="h-top">
              <h2 id="h-top">Top 10 in the last 24 hours: {groupTitle}</h2>
              <TopDevices
                nodeId={node === rootId ? '' : node}
                link={(id) => withQuery('/analysis', { node: node === rootId ? undefined : node, device: id })}
              />
            </section>
            <section aria-labelledby="h-group-charts">
              <h2 id="h-group-charts" class="charts-head">
                {groupTitle}: hourly, over its devices
              </h2>
              <GroupCharts nodeId={node === rootId ? '' : node} seconds={seconds} />
            </section>
          </>
        ))}
    </section>
  );
}

/** The device page's Metrics panel (metrics:read): the newest values and the last 24 hours. */
export function DeviceMetricsPanel({ deviceId }: { deviceId: string }) {
  const latest = useLoad(() => api.get<MetricsSummary>(`/device/${encodeURIComponent(deviceId)}/metrics/latest`), [deviceId]);
  const l = latest.data;
  const reported = l ? Math.max(l.cpu.reported, l.memory.reported, l.load.reported, l.filesystem.reported) : 0;
  const values: [string, string][] = l
    ? [
        ...(l.cpu.reported
          ? ([
              [
                'CPU',
                `${formatValue(l.cpu.user, 'percent')} user, ${formatValue(l.cpu.system, 'percent')} system, ${formatValue(l.cpu.io, 'percent')} I/O wait`,
              ],
            ] as [string, string][])
          : []),
        ...(l.memory.reported
          ? ([
              [
                'Memory',
                `${formatValue(l.memory.used, 'percent')} used (${formatBytes(l.memory.available * 1024)} available), swap ${formatValue(l.memory.swap_used, 'percent')}`,
              ],
            ] as [string, string][])
          : []),
        ...(l.load.reported
          ? ([['Load', [l.load['1min'], l.load['5min'], l.load['15min']].map((v) => formatValue(v, 'load')).join(' · ')]] as [string, string][])
          : []),
        ...l.filesystem.mounts.map(
          (m) => [`Disk ${m.path}`, `${formatValue(m.used, 'percent')} used, ${formatBytes(m.available * 1024)} free`] as [string, string],
        ),
      ]
    : [];
  return (
    <div class="device-metrics">
      <ErrorBox error={latest.error} />
      {latest.loading && !l && <Loading what="the latest metrics" />}
      {l && reported === 0 && <p class="muted">No metrics from this device in the last hour.</p>}
      {values.length > 0 && (
        <dl class="kv" data-testid="latest-metrics">
          {values.map(([k, v]) => (
            <Fragment key={k}>
              <dt>{k}</dt>
              <dd>{v}</dd>
            </Fragment>
          ))}
          <dt>Reported</dt>
          <dd>{formatTime(reported)}</dd>
        </dl>
      )}
      <h3 class="small-head">Last 24 hours</h3>
      <DeviceCharts deviceId={deviceId} seconds={86400} choice="auto" height={140} />
    </div>
  );
}
