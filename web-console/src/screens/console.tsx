/**
 * The remote console: a full-window xterm.js terminal on the console WebSocket.
 * Output is acknowledged once xterm has rendered it (the broker keeps at most 1 MiB un-acked),
 * so a flood of output cannot freeze the tab; the terminal follows the window's size.
 */
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { AttributesRecord } from '../../../shared/api-types.js';
import { encodeFrame, serverFrameOf, type ClientFrame } from '../../../shared/remote-frames.js';
import { api, ApiFailure, messageOf, remoteSocketUrl } from '../api.js';
import { Link } from '../router.js';
import { AccessDenied, ErrorBox, Loading } from '../ui.js';
import { BAR_KEYS, isTouchScreen, withCtrl } from '../keybar.js';
import { loadRemoteAccess } from './device.js';

type Status =
  | { kind: 'connecting' }
  | { kind: 'open' }
  | { kind: 'ended'; message: string }
  | { kind: 'closed'; message: string }
  | { kind: 'denied'; message: string }
  | { kind: 'failed'; message: string };

/** Acks are sent per 64 KiB rendered, or 20 ms after the last render, whichever comes first. */
const ACK_EVERY = 64 * 1024;
const ACK_DELAY_MS = 20;

function exitMessage(msg: { code?: number | null; signal?: number | string | null }): string {
  const parts = [`exit code ${msg.code ?? 'unknown'}`];
  if (msg.signal !== null && msg.signal !== undefined) parts.push(`signal ${msg.signal}`);
  return `Session ended (${parts.join(', ')}).`;
}

function TerminalView({ deviceId, name, users }: { deviceId: string; name: string; users?: string[] }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState<Status>({ kind: 'connecting' });
  const [round, setRound] = useState(0);
  // A grant naming users needs one named: the first listed, unless the user picks another.
  const [user, setUser] = useState<string | undefined>(users?.[0]);
  const [touch] = useState(isTouchScreen);
  const [ctrl, setCtrl] = useState(false);
  const ctrlRef = useRef(false);
  const sendRef = useRef<(data: string) => void>(() => undefined);
  const cursorModeRef = useRef<() => boolean>(() => false);
  const setSticky = (on: boolean) => {
    ctrlRef.current = on;
    setCtrl(on);
  };

  useEffect(() => {
    const element = host.current;
    if (!element) return;
    setStatus({ kind: 'connecting' });
    const term = new Terminal({
      cursorBlink: true,
      scrollback: 5000,
      fontSize: 14,
      // Rows are cut to their cell (overflow hidden) and DejaVu Sans Mono, Debian's monospace,
      // draws "_" at the very bottom of its descent: at line height 1 a row of underscores is
      // blank and `container_info.json` reads `container info.json`. Slightly taller rows keep it.
      lineHeight: 1.2,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      theme: { background: '#111418' },
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(element);
    const refit = () => {
      try {
        fit.fit();
      } catch {
        // Not laid out yet (hidden); the next resize fits it.
      }
    };
    refit();
    term.focus();

    let ws: WebSocket | null = null;
    let disposed = false;
    let finished = false;
    let unacked = 0;
    let ackTimer: ReturnType<typeof setTimeout> | undefined;
    const encoder = new TextEncoder();

    const sendJson = (msg: ClientFrame) => {
      if (ws?.readyState === WebSocket.OPEN) ws.send(encodeFrame(msg));
    };
    const flushAck = () => {
      ackTimer = undefined;
      if (unacked > 0) sendJson({ type: 'ack', bytes: unacked });
      unacked = 0;
    };
    const rendered = (bytes: number) => {
      unacked += bytes;
      if (unacked >= ACK_EVERY) {
        clearTimeout(ackTimer);
        flushAck();
      } else {
        ackTimer ??= setTimeout(flushAck, ACK_DELAY_MS);
      }
    };
    const finish = (next: Status) => {
      if (finished) return;
      finished = true;
      term.options.disableStdin = true;
      term.options.cursorBlink = false;
      setStatus(next);
    };

    const sendInput = (data: string) => {
      if (ws?.readyState === WebSocket.OPEN && !finished) ws.send(encoder.encode(data));
    };
    // The key bar's sticky Ctrl applies to the next key typed on the on-screen keyboard too.
    const typed = (data: string) => {
      if (ctrlRef.current) {
        setSticky(false);
        sendInput(withCtrl(data));
      } else sendInput(data);
    };
    sendRef.current = typed;
    cursorModeRef.current = () => term.modes.applicationCursorKeysMode;
    const inputs = [
      term.onData(typed),
      term.onBinary((data) => {
        if (ws?.readyState === WebSocket.OPEN && !finished) ws.send(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff));
      }),
      term.onResize(({ cols, rows }) => sendJson({ type: 'resize', cols, rows })),
    ];

    // Copy with Ctrl+Shift+C (plain Ctrl+C is the terminal's interrupt). Paste with Ctrl+V or
    // Ctrl+Shift+V: the key is left to the browser, whose paste event xterm turns into input, so
    // the text arrives once, and no ^V reaches the device (the tty would then take the next Enter
    // as a literal ^M).
    term.attachCustomKeyEventHandler((e) => {
      if (!e.ctrlKey || e.altKey || e.metaKey) return true;
      if (e.code === 'KeyV') return false;
      if (e.code === 'KeyC' && e.shiftKey) {
        if (e.type === 'keydown') {
          const selection = term.getSelection();
          if (selection) void navigator.clipboard?.writeText(selection).catch(() => undefined);
        }
        return false;
      }
      return true;
    });

    const observer = new ResizeObserver(refit);
    observer.observe(element);

    void (async () => {
      let url: string;
      try {
        url = await remoteSocketUrl('console', { device_id: deviceId, cols: term.cols, rows: term.rows, ...(user ? { user } : {}) });
      } catch (err) {
        const denied = err instanceof ApiFailure && err.status === 403;
        finish(denied ? { kind: 'denied', message: messageOf(err) } : { kind: 'failed', message: messageOf(err) });
        return;
      }
      if (disposed) return;
      ws = new WebSocket(url);
      ws.binaryType = 'arraybuffer';
      ws.onopen = () => sendJson({ type: 'resize', cols: term.cols, rows: term.rows });
      ws.onmessage = (e) => {
        if (e.data instanceof ArrayBuffer) {
          const bytes = new Uint8Array(e.data);
          term.write(bytes, () => rendered(bytes.byteLength));
          return;
        }
        const msg = serverFrameOf(String(e.data));
        if (!msg) return; // unknown to this version, or malformed
        if (msg.type === 'ready') {
          setStatus((s) => (s.kind === 'connecting' ? { kind: 'open' } : s));
          term.focus();
        } else if (msg.type === 'exit') {
          const message = exitMessage(msg);
          term.write(`\r\n\x1b[1;33m[${message}]\x1b[0m\r\n`);
          finish({ kind: 'ended', message });
        } else if (msg.type === 'error') {
          const message = msg.message || 'The console could not be opened.';
          finish(msg.code === 403 ? { kind: 'denied', message } : { kind: 'failed', message });
        }
      };
      ws.onerror = () => undefined; // the close event says why
      ws.onclose = (e) => {
        flushAck();
        if (disposed) return;
        if (e.code === 4403) finish({ kind: 'denied', message: e.reason || 'Your roles do not allow a console on this device.' });
        else finish({ kind: 'closed', message: `The connection closed${e.reason ? `: ${e.reason}` : ''} (code ${e.code}).` });
      };
    })();

    return () => {
      disposed = true;
      clearTimeout(ackTimer);
      observer.disconnect();
      inputs.forEach((d) => d.dispose());
      ws?.close(1000, 'closed by the user');
      term.dispose();
    };
  }, [deviceId, round, user]);

  const over = status.kind === 'ended' || status.kind === 'closed' || status.kind === 'failed' || status.kind === 'denied';
  const label =
    status.kind === 'connecting' ? 'Connecting…' : status.kind === 'open' ? 'Connected' : status.kind === 'denied' ? 'Access denied' : status.message;

  return (
    <div class="console-screen">
      <header class="console-bar">
        <Link href={`/devices/${deviceId}`} class="button small">
          ← Device
        </Link>
        <strong class="console-title" title={deviceId}>
          {name}
        </strong>
        <span class={`console-status ${status.kind}`} role="status" aria-live="polite" data-testid="console-status">
          {label}
        </span>
        {users && users.length > 1 ? (
          <label class="small">
            as{' '}
            <select value={user} onChange={(e) => setUser((e.target as HTMLSelectElement).value)} data-testid="console-user">
              {users.map((u) => (
                <option key={u} value={u}>
                  {u}
                </option>
              ))}
            </select>
          </label>
        ) : (
          user && (
            <span class="small" data-testid="console-user">
              as {user}
            </span>
          )
        )}
        <span class="muted small hide-narrow">Copy: Ctrl+Shift+C · Paste: Ctrl+V or Ctrl+Shift+V</span>
        {over && (
          <button type="button" class="small primary" onClick={() => setRound((n) => n + 1)}>
            {status.kind === 'denied' ? 'Try again' : 'Reconnect'}
          </button>
        )}
      </header>
      {over && (
        <div class={`console-banner ${status.kind}`} role="alert">
          {status.kind === 'denied' ? (
            <>
              <strong>Access denied</strong> {status.message}
            </>
          ) : (
            status.message
          )}
        </div>
      )}
      <div class="terminal-host" ref={host} data-testid="terminal" />
      {touch && (
        // Buttons that never take the focus: the on-screen keyboard stays up while they are tapped.
        <div class="console-keybar" role="toolbar" aria-label="Terminal keys" data-testid="keybar">
          <button
            type="button"
            class={ctrl ? 'sticky on' : 'sticky'}
            aria-pressed={ctrl}
            title="Ctrl: applies to the next key"
            data-key="ctrl"
            onPointerDown={(e) => e.preventDefault()}
            onMouseDown={(e) => e.preventDefault()}
            onClick={() => setSticky(!ctrlRef.current)}
          >
            Ctrl
          </button>
          {BAR_KEYS.map((k) => (
            <button
              key={k.id}
              type="button"
              title={k.title}
              data-key={k.id}
              onPointerDown={(e) => e.preventDefault()}
              onMouseDown={(e) => e.preventDefault()}
              onClick={() => sendRef.current(k.bytes(cursorModeRef.current()))}
            >
              {k.label}
            </button>
          ))}
        </div>
      )}
    </div>
  );
}

/**
 * Asks the broker for the console even though GET /remote/access said no, so the broker decides
 * and records the denied attempt like any other (a refusal made only here would leave no trace
 * in the audit). Resolves with the broker's reason, or null when it let the console open after
 * all (the rights changed meanwhile): that probe session is closed and the terminal opens anew.
 */
async function deniedAttempt(deviceId: string): Promise<string | null> {
  const fallback = 'Your roles do not allow a console on this device.';
  let url: string;
  try {
    url = await remoteSocketUrl('console', { device_id: deviceId, cols: 80, rows: 24 });
  } catch (err) {
    return messageOf(err);
  }
  return new Promise((resolve) => {
    const ws = new WebSocket(url);
    let message = fallback;
    ws.onmessage = (e) => {
      if (typeof e.data !== 'string') return;
      try {
        const msg = JSON.parse(e.data) as { type?: string; message?: string };
        if (msg.type === 'error' && msg.message) message = msg.message;
        if (msg.type === 'ready') {
          ws.close(1000, 'reopened by the console');
          resolve(null);
        }
      } catch {
        // not a control message
      }
    };
    ws.onerror = () => undefined; // the close event says why
    ws.onclose = () => resolve(message);
  });
}

export function ConsoleScreen({ deviceId }: { deviceId: string }) {
  const [state, setState] = useState<
    { kind: 'checking' } | { kind: 'ready'; name: string; users?: string[] } | { kind: 'denied'; message?: string } | { kind: 'error'; error: unknown }
  >({
    kind: 'checking',
  });

  useEffect(() => {
    document.title = 'Console · Fleet console';
    let live = true;
    void (async () => {
      try {
        const access = await loadRemoteAccess(deviceId);
        if (!live) return;
        if (access && !access.console) {
          const refusal = await deniedAttempt(deviceId);
          if (!live) return;
          if (refusal !== null) {
            setState({ kind: 'denied', message: refusal });
            return;
          }
        }
        const attrs = await api.get<AttributesRecord>(`/deviceattribute/${encodeURIComponent(deviceId)}`).catch(() => null);
        if (live) setState({ kind: 'ready', name: attrs?.device_name || deviceId.slice(0, 12), users: access?.console_users });
      } catch (err) {
        if (!live) return;
        if (err instanceof ApiFailure && err.status === 403) setState({ kind: 'denied', message: err.message });
        else setState({ kind: 'error', error: err });
      }
    })();
    return () => {
      live = false;
    };
  }, [deviceId]);

  if (state.kind === 'ready') return <TerminalView deviceId={deviceId} name={state.name} users={state.users} />;
  return (
    <div class="console-page">
      <p>
        <Link href={`/devices/${deviceId}`}>← Back to the device</Link>
      </p>
      {state.kind === 'checking' && <Loading what="the console" />}
      {state.kind === 'denied' && <AccessDenied message={state.message} />}
      {state.kind === 'error' && <ErrorBox error={state.error} />}
    </div>
  );
}
