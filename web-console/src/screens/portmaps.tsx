/**
 * Tunnels: the port presets (portmaps) that apply to a device, each with the exact
 * `fleet connect` command to copy. Holders of remote-access:manage add and change presets.
 */
import { useState } from 'preact/hooks';
import { api, ApiFailure, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { CopyButton, ErrorBox, Field, Loading, useAction, useLoad } from '../ui.js';

export interface Portmap {
  id: string;
  target: string;
  name: string;
  proto: 'tcp' | 'udp' | string;
  port: number;
  dst: string;
}

/** A local port an unprivileged user can open: the device port when above 1023, else 10000 + port. */
export function defaultLocalPort(port: number): number {
  return port > 1023 ? port : 10000 + port;
}

/** The CLI command that opens this tunnel (`/udp` marks a UDP target). */
export function connectCommand(deviceId: string, pm: Pick<Portmap, 'proto' | 'port' | 'dst'>, localPort: number): string {
  const host = pm.dst.includes(':') ? `[${pm.dst}]` : pm.dst; // IPv6 in brackets
  return `fleet connect ${deviceId} -t ${localPort}:${host}:${pm.port}${pm.proto === 'udp' ? '/udp' : ''}`;
}

/** The one command that installs the `fleet` CLI from this broker (served at /install-cli.sh). */
export function installCliCommand(origin: string): string {
  return `curl -fsSL ${origin.replace(/\/+$/, '')}/install-cli.sh | sh`;
}

function InstallCli() {
  const command = installCliCommand(window.location.origin);
  return (
    <p class="command-row muted">
      Install the CLI:{' '}
      <code class="command" data-testid="install-cli-command">
        {command}
      </code>
      <CopyButton text={command} label="Copy command" />
    </p>
  );
}

function PortmapRow({ deviceId, pm, onEdit }: { deviceId: string; pm: Portmap; onEdit?: () => void }) {
  const [localPort, setLocalPort] = useState(defaultLocalPort(pm.port));
  const command = connectCommand(deviceId, pm, localPort);
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
            onInput={(e) => setLocalPort(Number(e.currentTarget.value) || defaultLocalPort(pm.port))}
          />
        </label>
        <code class="command" data-testid="connect-command">
          {command}
        </code>
        <CopyButton text={command} label="Copy command" />
      </div>
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
            <PortmapRow key={pm.id} deviceId={deviceId} pm={pm} onEdit={manage ? () => setEditing({ ...pm, port: String(pm.port) }) : undefined} />
          ))}
        </ul>
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
