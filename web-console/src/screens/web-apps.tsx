/**
 * Opens a device's local web UI (router page, Node-RED, Grafana) in a new tab, on the origin the
 * broker gives it (`<device>-<port>.<APPS_HOST>`), never this one: the broker answers a one-time
 * link, the new tab trades it there for a cookie of that origin. Decided as a tunnel to the port.
 */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorBox, Field } from '../ui.js';

export function WebAppLauncher({ deviceId }: { deviceId: string }) {
  const [port, setPort] = useState('80');
  const [path, setPath] = useState('/');
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const portNumber = Number(port);
  const valid = Number.isInteger(portNumber) && portNumber >= 1 && portNumber <= 65535 && path.startsWith('/');

  const open = async (e: Event) => {
    e.preventDefault();
    if (!valid) return;
    setError(undefined);
    setBusy(true);
    // Opened at the click (a pop-up blocker allows that), pointed at the link once the broker answers.
    const tab = window.open('', '_blank');
    try {
      const { url } = await api.post<{ url: string }>(`/remote/apps/${encodeURIComponent(deviceId)}`, { port: portNumber, path });
      if (tab) {
        // The device's page must not reach back to this window (it could navigate it elsewhere).
        tab.opener = null;
        tab.location.href = url;
      } else window.location.assign(url);
    } catch (err) {
      tab?.close();
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <form class="inline-form web-app" onSubmit={(e) => void open(e)} aria-label="Open a web UI of the device">
      <Field label="Web UI port" name="app-port" inputMode="numeric" value={port} onInput={(e) => setPort(e.currentTarget.value)} size={6} />
      <Field label="Path" name="app-path" value={path} onInput={(e) => setPath(e.currentTarget.value)} size={12} />
      <button type="submit" disabled={busy || !valid}>
        Open web UI
      </button>
      <ErrorBox error={error} title="The web UI could not be opened" />
    </form>
  );
}
