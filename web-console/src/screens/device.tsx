/**
 * One device: status, attributes, inventory and the remote-access actions the caller may try
 * (GET /remote/access/{id} decides which buttons appear).
 */
import { Fragment } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import type {
  AttributesRecord,
  DeviceStatus,
  InventoryRecord,
  LiveSessionItem,
  NodeView,
  RemoteCapabilities,
  ReportCounts,
} from '../../../shared/api-types.js';
import { api, ApiFailure, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { Link, navigate, withQuery } from '../router.js';
import { bytesText, inventoryRows } from '../inventory-format.js';
import { ConfirmButton, ErrorBox, formatTime, Loading, Notice, PageTitle, Table, Tags, useAction, useLoad } from '../ui.js';
import { LEGACY_FIELDS } from './attributes.js';
import { DeviceConfiguration } from './configure.js';
import { LastContact, StatusDot } from './devices.js';
import { InventoryTabs } from './inventory-tabs.js';
import { DeviceCves } from './cve.js';
import { Portmaps } from './portmaps.js';
import { remoteSummary } from './remote-summary.js';
import { reattachPath } from './sessions.js';
import { FileTransfer } from './transfer.js';
import { FileBrowser } from './file-browser.js';
import { WebAppLauncher } from './web-apps.js';

/** Remote-access rights, or null when the broker does not offer remote access (yet). */
export async function loadRemoteAccess(deviceId: string): Promise<RemoteCapabilities | null> {
  try {
    return await api.get<RemoteCapabilities>(`/remote/access/${encodeURIComponent(deviceId)}`);
  } catch (err) {
    // The broker answers 404 unknown_call for an endpoint it does not have.
    if (err instanceof ApiFailure && (err.status === 501 || (err.status === 404 && err.error === 'unknown_call'))) return null;
    throw err;
  }
}

function Inventory({ deviceId }: { deviceId: string }) {
  const inv = useLoad(() => api.get<InventoryRecord>(`/inventory/${encodeURIComponent(deviceId)}`), [deviceId]);
  if (inv.loading && !inv.data) return <Loading what="inventory" />;
  if (inv.error instanceof ApiFailure && inv.error.status === 404) return <p class="muted">{inv.error.message}</p>;
  if (inv.error) return <ErrorBox error={inv.error} />;
  const r = inv.data;
  if (!r) return null;
  // Named rows with units and dates (inventory-format.ts), never raw keys and epoch numbers.
  const rows = inventoryRows(r);
  return (
    <div class="inventory">
      <dl class="kv" data-testid="inventory-summary">
        {rows.map(([k, v]) => (
          <Fragment key={k}>
            <dt>{k}</dt>
            <dd>{v}</dd>
          </Fragment>
        ))}
      </dl>
      {r.disks && r.disks.length > 0 && (
        <Table caption="Disks" columns={['Mount', 'Type', 'Size', 'Free']}>
          {r.disks.map((d) => (
            <tr key={d.mount}>
              <td>{d.mount}</td>
              <td>{d.fstype ?? ''}</td>
              <td>{bytesText(d.size)}</td>
              <td>{bytesText(d.free)}</td>
            </tr>
          ))}
        </Table>
      )}
      {r.network && r.network.length > 0 && (
        <Table caption="Network interfaces" columns={['Interface', 'MAC', 'Addresses']}>
          {r.network.map((n) => (
            <tr key={n.name}>
              <td>{n.name}</td>
              <td>
                <code>{n.mac}</code>
              </td>
              <td>{n.addresses.map((a) => a.cidr ?? a.address).join(', ')}</td>
            </tr>
          ))}
        </Table>
      )}
    </div>
  );
}

/** The device's unread reports by severity (reports:read), each linking into the Logs. */
function DeviceReports({ deviceId }: { deviceId: string }) {
  const summary = useLoad(() => api.get<ReportCounts>(`/reportsummary/${encodeURIComponent(deviceId)}`), [deviceId]);
  if (summary.error) return <ErrorBox error={summary.error} />;
  if (!summary.data) return <Loading what="reports" />;
  const s = summary.data;
  return (
    <div data-testid="device-reports">
      <p>
        {s.unread} unread of {s.total} report{s.total === 1 ? '' : 's'}
        {s.last_ts ? <span class="muted">, the latest {formatTime(new Date(s.last_ts * 1000).toISOString())}</span> : null}.
      </p>
      <div class="stat-row">
        {(['CRIT', 'ERR', 'WARN', 'INFO'] as const).map((sev) => (
          <Link key={sev} href={withQuery('/logs', { node_id: deviceId, severity: sev, read: 'false' })} class={`stat sev-${sev.toLowerCase()}`}>
            <strong>{s.unread_severity[sev]}</strong> {sev}
          </Link>
        ))}
      </div>
      <Link href={withQuery('/logs', { node_id: deviceId })}>All reports of this device</Link>
    </div>
  );
}

function RemoteActions({ deviceId, access }: { deviceId: string; access: RemoteCapabilities }) {
  const reload = useAction();
  const [notice, setNotice] = useState('');
  const summary = remoteSummary(access, allowed('remoteConsole'));
  if (!summary) return <p class="muted">Your roles allow no remote access to this device.</p>;
  return (
    <div>
      {summary.offline && (
        <p class="muted" data-testid="offline-hint">
          {summary.offline}
        </p>
      )}
      {summary.may.length > 0 && (
        <ul class="plain" data-testid="remote-may">
          {summary.may.map((m) => (
            <li key={m.href}>
              <a href={m.href}>{m.text}</a>
            </li>
          ))}
        </ul>
      )}
      <div class="button-row" hidden={!access.console && !access.reload}>
        {access.console &&
          (access.connected ? (
            <Link href={`/console/${deviceId}`} class="button primary" data-testid="open-console">
              Open console
            </Link>
          ) : (
            <button type="button" class="primary" disabled title="The device is offline." data-testid="open-console">
              Open console
            </button>
          ))}
        {access.reload && (
          <ConfirmButton
            label={reload.busy ? 'Reloading…' : 'Reload agent'}
            class=""
            disabled={reload.busy || !access.connected}
            question="Reload the agent? Every open console, tunnel and transfer on this device ends, for every user."
            confirmLabel="Yes, reload"
            onConfirm={() =>
              void reload.run(async () => {
                setNotice('');
                await api.post(`/remote/reload/${encodeURIComponent(deviceId)}`, {}, { source: 'web' });
                setNotice('The agent is reloading.');
              })
            }
          />
        )}
      </div>
      {access.console && <OwnConsoles deviceId={deviceId} />}
      {summary.mayNot && (
        <p class="muted small" data-testid="remote-may-not">
          {summary.mayNot}
        </p>
      )}
      <ErrorBox error={reload.error} title="Reload failed" />
      {notice && <Notice>{notice}</Notice>}
    </div>
  );
}

/** The user's own consoles running on this device (opened in any tab or browser), to re-attach to. */
function OwnConsoles({ deviceId }: { deviceId: string }) {
  const sessions = useLoad(async () => itemsOf<LiveSessionItem>(await api.get('/remote/sessions')), [deviceId]);
  const mine = (sessions.data ?? []).filter((s) => s.kind === 'console' && s.can_attach && s.device.id === deviceId);
  if (mine.length === 0) return null;
  return (
    <ul class="plain small" data-testid="own-consoles">
      {mine.map((s) => (
        <li key={s.id}>
          Your console since {formatTime(s.started_at)}
          {s.attached === false ? ' (detached: its shell still runs)' : ' (open in another window)'}{' '}
          <Link href={reattachPath(s)} class="button small primary" data-testid="reattach-console">
            Re-attach
          </Link>
        </li>
      ))}
    </ul>
  );
}

/** How often the device page reads the status again (a single row; the tree page reads less often). */
const STATUS_REFRESH_MS = 15_000;

export function DeviceScreen({ deviceId }: { deviceId: string }) {
  const attrs = useLoad(() => api.get<AttributesRecord>(`/deviceattribute/${encodeURIComponent(deviceId)}`), [deviceId]);
  const node = useLoad(() => api.get<NodeView>(`/node/${encodeURIComponent(deviceId)}`).catch(() => null), [deviceId]);
  const status = useLoad(() => api.get<DeviceStatus>(`/device/${encodeURIComponent(deviceId)}/status`).catch(() => null), [deviceId]);
  const access = useLoad(() => loadRemoteAccess(deviceId), [deviceId]);
  const remove = useAction();
  // Status and last heartbeat, read again while the page is shown ("heard … ago" counts up in between).
  useEffect(() => {
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') status.reload();
    }, STATUS_REFRESH_MS);
    return () => clearInterval(timer);
  }, [deviceId]);

  const name = attrs.data?.device_name || node.data?.title || deviceId.slice(0, 12);
  const online = Boolean(status.data?.connected ?? access.data?.connected);
  // device:manage restricted to other groups: its controls are not offered here (the broker's hint on GET /node).
  const manageable = allowed('updateAttributes') && !node.loading && node.data?.can_manage !== false;

  if (attrs.error && !attrs.data) {
    return (
      <section>
        <PageTitle>Device</PageTitle>
        <ErrorBox error={attrs.error} />
        <Link href="/devices">Back to devices</Link>
      </section>
    );
  }

  return (
    <section>
      <PageTitle
        actions={
          <>
            <button
              type="button"
              onClick={() => {
                attrs.reload();
                status.reload();
                access.reload();
              }}
            >
              Refresh
            </button>
            {manageable && (
              <ConfirmButton
                label="Remove device"
                question="Remove this device? Its connection is cut and its key revoked."
                onConfirm={async () => {
                  // The spec's "Devices, Update attributes and Delete" (device:manage): DELETE /inventory/{id}.
                  const ok = await remove.run(() => api.del(`/inventory/${encodeURIComponent(deviceId)}`).then(() => true));
                  if (ok) navigate('/devices');
                }}
              />
            )}
          </>
        }
      >
        {name}
      </PageTitle>
      <ErrorBox error={remove.error} title="The device was not removed" />
      <p class="device-meta">
        <StatusDot online={online} label={status.data || access.data ? (online ? 'online' : 'offline') : 'status unknown'} />
        <code title="Device id">{deviceId}</code>
        <Tags tags={node.data?.effective_tags ?? node.data?.tags} />
        {node.data?.path && node.data.path.length > 1 && (
          <span class="muted small">
            in{' '}
            {node.data.path
              .slice(0, -1)
              .map((p) => `${p.title} (${p.node_id})`)
              .join(' › ')}
          </span>
        )}
        {status.data?.last_seen && <LastContact online={online} at={Date.parse(status.data.last_seen)} />}
      </p>

      <div class="panels">
        <section class="panel" aria-labelledby="h-remote">
          <h2 id="h-remote">Remote access</h2>
          <ErrorBox error={access.error} />
          {access.loading && !access.data && <Loading />}
          {access.data === null && <p class="muted">Remote access is not available on this broker yet.</p>}
          {access.data && <RemoteActions deviceId={deviceId} access={access.data} />}
        </section>

        <section class="panel" aria-labelledby="h-attrs">
          <div class="panel-head">
            <h2 id="h-attrs">Attributes</h2>
            {manageable && (
              <Link href={`/devices/${deviceId}/attributes`} class="button">
                Edit attributes
              </Link>
            )}
          </div>
          {attrs.loading && !attrs.data && <Loading />}
          {attrs.data && (
            <dl class="kv">
              {LEGACY_FIELDS.map((f) => (
                <Fragment key={f.name}>
                  <dt>{f.label}</dt>
                  <dd>{attrs.data?.[f.name] || <span class="muted">—</span>}</dd>
                </Fragment>
              ))}
              {Object.entries(attrs.data.custom ?? {}).map(([k, v]) => (
                <Fragment key={`custom-${k}`}>
                  <dt>
                    <code>{k}</code>
                  </dt>
                  <dd>{v}</dd>
                </Fragment>
              ))}
            </dl>
          )}
        </section>

        {allowed('deviceMetrics') && (
          <section class="panel wide" aria-labelledby="h-metrics">
            <div class="panel-head">
              <h2 id="h-metrics">Metrics</h2>
              {allowed('analysis') && <Link href={`/analysis?device=${encodeURIComponent(deviceId)}`}>Open in Analysis</Link>}
            </div>
            <LazyDeviceMetrics deviceId={deviceId} />
          </section>
        )}

        {access.data?.copy && access.data.connected && !(access.data.copy_paths && access.data.copy_paths.length === 0) && (
          <section class="panel wide" aria-labelledby="h-files">
            <h2 id="h-files">Files on the device</h2>
            <FileBrowser deviceId={deviceId} roots={access.data.copy_paths} />
          </section>
        )}

        {access.data?.copy && (
          <section class="panel" aria-labelledby="h-transfer">
            <h2 id="h-transfer">File transfer</h2>
            <FileTransfer deviceId={deviceId} />
          </section>
        )}

        {access.data?.tunnel && allowed('remoteConsole') && (
          <section class="panel" aria-labelledby="h-tunnels">
            <h2 id="h-tunnels">Tunnels</h2>
            <Portmaps deviceId={deviceId} />
            <h3>Web UI in the browser</h3>
            <WebAppLauncher deviceId={deviceId} />
          </section>
        )}

        {allowed('deviceReports') && (
          <section class="panel" aria-labelledby="h-reports">
            <h2 id="h-reports">Reports</h2>
            <DeviceReports deviceId={deviceId} />
          </section>
        )}

        {allowed('showConfiguration') && (
          <section class="panel wide" aria-labelledby="h-config">
            <h2 id="h-config">Configuration</h2>
            <DeviceConfiguration deviceId={deviceId} />
          </section>
        )}

        {allowed('inventory') && (
          <section class="panel wide" aria-labelledby="h-inventory">
            <h2 id="h-inventory">Inventory</h2>
            <Inventory deviceId={deviceId} />
            <InventoryTabs deviceId={deviceId} />
          </section>
        )}

        {allowed('cve') && (
          <section class="panel wide" aria-labelledby="h-cve">
            <h2 id="h-cve">CVEs</h2>
            <DeviceCves deviceId={deviceId} />
          </section>
        )}
      </div>
    </section>
  );
}

type AnalysisModule = typeof import('./analysis.js');

/** The Metrics panel loads with the Analysis module (and its charting library) on first use. */
function LazyDeviceMetrics({ deviceId }: { deviceId: string }) {
  const [mod, setMod] = useState<AnalysisModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./analysis.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="The metrics could not be loaded" />;
  if (!mod) return <Loading what="the metrics" />;
  return <mod.DeviceMetricsPanel deviceId={deviceId} />;
}
