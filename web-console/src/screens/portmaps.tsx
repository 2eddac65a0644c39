/**
 * Tunnels: the port presets (portmaps) that apply to a device, each with the exact
 * `fleet connect` command to copy — naming the device as the CLI resolves it, with a local port
 * that is likely free — and how to install the CLI from this broker. Holders of
 * remote-access:manage add and change presets.
 */
import { useState } from 'preact/hooks';
import type { GroupTree, Portmap } from '../../../shared/api-types.js';
import { cliDeviceArgument, namedDevices } from '../../../shared/device-names.js';
import { api, ApiFailure, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { CopyButton, ErrorBox, Field, Loading, useAction, useLoad } from '../ui.js';

/**
 * Ports a workstation often has in use already: its own SSH, web, databases (MySQL, PostgreSQL,
 * Redis, MongoDB, Elasticsearch), brokers (MQTT, AMQP), VNC, RDP, development servers, and 5000/7000
 * (AirPlay on macOS).
 */
const COMMONLY_TAKEN = new Set([
  22, 80, 443, 1883, 3000, 3306, 3389, 5000, 5173, 5432, 5672, 5900, 6379, 7000, 8000, 8080, 8443, 8888, 9000, 9090, 9200, 27017,
]);

/**
 * The local port to suggest for a device port: the same number when an unprivileged user can open it
 * and it is not commonly taken, else 10000 + port (10022 for SSH, 18080 for 8080).
 */
export function suggestedLocalPort(port: number): number {
  return port > 1023 && !COMMONLY_TAKEN.has(port) ? port : 10000 + port;
}

/** The CLI command that opens this tunnel (`/udp` marks a UDP target); `device` as cliDeviceArgument gives it. */
export function connectCommand(device: string, pm: Pick<Portmap, 'proto' | 'port' | 'dst'>, localPort: number): string {
  const host = pm.dst.includes(':') ? `[${pm.dst}]` : pm.dst; // IPv6 in brackets
  return `fleet connect ${device} -t ${localPort}:${host}:${pm.port}${pm.proto === 'udp' ? '/udp' : ''}`;
}

/** The one command that installs the `fleet` CLI from this broker (served at /install-cli.sh). */
export function installCliCommand(origin: string): string {
  return `curl -fsSL ${origin.replace(/\/+$/, '')}/install-cli.sh | sh`;
}

function InstallCli() {
  const command = installCliCommand(window.location.origin);
  return (
    <div class="install-cli">
      <p class="command-row muted">
        Install the CLI:{' '}
        <code class="command" data-testid="install-cli-command">
          {command}
        </code>
        <CopyButton text={command} label="Copy command" />
      </p>
      <p class="muted">
        It needs Node.js 20 or later, installs into ~/.local (add <code>| sh -s -- --prefix DIR</code> for another place) and checks what it downloads against
        this broker. Then <code>fleet login --url {window.location.origin}</code>.{' '}
        <a href="/install-cli.sh" target="_blank" rel="noopener" data-testid="install-cli-script">
          Read the script
        </a>
      </p>
    </div>
  );
}

function PortmapRow({ device, pm, onEdit }: { device: string; pm: Portmap; onEdit?: () => void }) {
  const [localPort, setLocalPort] = useState(suggestedLocalPort(pm.port));
  const command = connectCommand(device, pm, localPort);
  return (
    <li class="portmap">
      <div class="portmap-head">
        <strong>{pm.name}</strong>
        <span class="muted">
          {pm.proto.toUpperCase()} {pm.dst}:{pm.port} · applies to <code>{pm.target}</code>
        </span>
        {onEdit && (
          <button type="button" class="link-button" onClick={onEdit}>
            Edit
          </button>
        )}
      </div>
      <div class="command-row">
        <label>
          Local port{' '}
          <input
            type="number"
            min={1}
            max={65535}
            value={localPort}
            class="narrow"
            onInput={(e) => setLocalPort(Number(e.currentTarget.value) || suggestedLocalPort(pm.port))}
          />
        </label>
        <code class="command" data-testid="connect-command">
          {command}
        </code>
        <CopyButton text={command} label="Copy command" />
      </div>
      <p class="muted" data-testid="connect-then">
        Then connect to localhost:{localPort}
        {pm.proto === 'udp' ? ' (UDP)' : ''}.
      </p>
    </li>
  );
}

type Draft = Omit<Portmap, 'id' | 'port'> & { id?: string; port: string };

function PortmapForm({ initial, onDone, onCancel }: { initial: Draft; onDone: () => void; onCancel: () => void }) {
  const [draft, setDraft] = useState<Draft>(initial);
  const action = useAction();
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};
  const set = (name: keyof Draft) => (e: Event) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value });
  const save = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      const body = { target: draft.target, name: draft.name, proto: draft.proto, port: Number(draft.port), dst: draft.dst };
      if (draft.id) await api.patch('/service-connect/portmap', { id: draft.id, ...body });
      else await api.post('/service-connect/portmap', body);
      onDone();
    });
  };
  return (
    <form class="inline-form boxed" onSubmit={save} aria-label={draft.id ? 'Edit port preset' : 'New port preset'}>
      <Field label="Name" name="pm-name" required value={draft.name} onInput={set('name')} error={errors.name} />
      <Field label="Applies to (*, tag:…, node:…)" name="pm-target" required value={draft.target} onInput={set('target')} error={errors.target} />
      <div class="field">
        <label for="pm-proto">Protocol</label>
        <select id="pm-proto" value={draft.proto} onChange={set('proto')}>
          <option value="tcp">TCP</option>
          <option value="udp">UDP</option>
        </select>
      </div>
      <Field
        label="Port on the device side"
        name="pm-port"
        type="number"
        min={1}
        max={65535}
        required
        value={draft.port}
        onInput={set('port')}
        error={errors.port}
      />
      <Field label="Destination host" name="pm-dst" required value={draft.dst} onInput={set('dst')} error={errors.dst} />
      <button type="submit" class="primary" disabled={action.busy}>
        Save preset
      </button>
      <button type="button" onClick={onCancel}>
        Cancel
      </button>
      <ErrorBox error={action.error} title="The preset was not saved" />
    </form>
  );
}

export function Portmaps({ deviceId }: { deviceId: string }) {
  const list = useLoad(() => api.get('/service-connect/portmap', { device_id: deviceId }).then((a) => itemsOf<Portmap>(a)), [deviceId]);
  // The CLI resolves a name among the devices of the caller's group tree: the console asks the same.
  const tree = useLoad(() => api.get<GroupTree>('/grouptree'), []);
  const named = tree.data ? cliDeviceArgument(deviceId, namedDevices(tree.data)) : { arg: deviceId };
  const [editing, setEditing] = useState<Draft | null>(null);
  const manage = allowed('remoteManage');
  const done = () => {
    setEditing(null);
    list.reload();
  };
  return (
    <div>
      <ErrorBox error={list.error} />
      {list.loading && !list.data && <Loading what="port presets" />}
      {list.data && list.data.length === 0 && <p class="muted">No port presets apply to this device.</p>}
      {list.data && list.data.length > 0 && (
        <ul class="portmaps">
          {list.data.map((pm) => (
            <PortmapRow key={pm.id} device={named.arg} pm={pm} onEdit={manage ? () => setEditing({ ...pm, port: String(pm.port) }) : undefined} />
          ))}
        </ul>
      )}
      {list.data && list.data.length > 0 && named.reason && (
        <p class="muted" data-testid="connect-by-id">
          The command names the device by its id: {named.reason}.
        </p>
      )}
      {manage && !editing && (
        <button type="button" onClick={() => setEditing({ target: `node:${deviceId}`, name: '', proto: 'tcp', port: '22', dst: 'localhost' })}>
          Add port preset
        </button>
      )}
      {editing && <PortmapForm key={editing.id ?? 'new'} initial={editing} onDone={done} onCancel={() => setEditing(null)} />}
      <InstallCli />
    </div>
  );
}
