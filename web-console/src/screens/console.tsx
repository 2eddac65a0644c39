/**
 * The remote console: a full-window xterm.js terminal on the console WebSocket.
 * Output is acknowledged once xterm has rendered it (the broker keeps at most 1 MiB un-acked),
 * so a flood of output cannot freeze the tab; the terminal follows the window's size.
 */
import '@xterm/xterm/css/xterm.css';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { AttributesRecord, ListPage, LiveSessionItem } from '../../../shared/api-types.js';
import { api, ApiFailure, messageOf, remoteSocketUrl } from '../api.js';
import { Link, navigate } from '../router.js';
import { addTab, attachTab, closeTab, loadTabs, MAX_TABS, saveTabs, setSession, showDevice, type ConsoleTabs } from '../console-tabs.js';
import { AccessDenied, ErrorBox, Loading } from '../ui.js';
import { BAR_KEYS, isTouchScreen, withCtrl } from '../keybar.js';
import { loadRemoteAccess } from './device.js';
import { bindTerminalInput, openConsoleLink, openTerminal, type Status } from './console-link.js';

interface TerminalProps {
  /** control: the user's own console (typing, resizing); watch: someone's console, read-only */
  mode: 'control' | 'watch';
  deviceId: string;
  name: string;
  users?: string[];
  /** control: the session to re-attach to (after a reload); watch: the session watched */
  session?: string;
  /** hidden tabs keep their session and their screen */
  active: boolean;
  /** control: the session the console runs on, or undefined once it is over */
  onSession?: (session: string | undefined) => void;
  /** watch: whose console it is */
  owner?: string;
}

function TerminalView({ mode, deviceId, name, users, session, active, onSession, owner }: TerminalProps) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState<Status>({ kind: 'connecting' });
  const [round, setRound] = useState(0);
  // A grant naming users needs one named: the first listed, unless the user picks another.
  const [user, setUser] = useState<string | undefined>(users?.[0]);
  const [watchers, setWatchers] = useState<{ id: string; email: string }[]>([]);
  const [touch] = useState(isTouchScreen);
  const [ctrl, setCtrl] = useState(false);
  const ctrlRef = useRef(false);
  const sendRef = useRef<(data: string) => void>(() => undefined);
  const cursorModeRef = useRef<() => boolean>(() => false);
  const showRef = useRef<() => void>(() => undefined);
  // The session to re-attach to: from the tab (a reload), then from the broker's ready frame.
  const sessionRef = useRef<string | undefined>(session);
  // The login user that session runs as: picking another user opens a new session, never re-attaches.
  const sessionUser = useRef(user);
  const onSessionRef = useRef(onSession);
  onSessionRef.current = onSession;
  const watching = mode === 'watch';
  const setSticky = (on: boolean) => {
    ctrlRef.current = on;
    setCtrl(on);
  };

  useEffect(() => {
    const element = host.current;
    if (!element) return;
    setStatus({ kind: 'connecting' });
    if (sessionUser.current !== user) {
      sessionRef.current = undefined;
      sessionUser.current = user;
    }
    const { term, refit } = openTerminal(element, watching);
    showRef.current = () => {
      refit();
      term.focus();
    };
    const link = openConsoleLink({
      term,
      watching,
      deviceId,
      user,
      watched: session,
      sessionRef,
      onSession: (id) => onSessionRef.current?.(id),
      onStatus: setStatus,
      onWatchers: setWatchers,
    });
    // The key bar's sticky Ctrl applies to the next key typed on the on-screen keyboard too.
    const typed = (data: string) => {
      if (ctrlRef.current) {
        setSticky(false);
        link.sendInput(withCtrl(data));
      } else link.sendInput(data);
    };
    sendRef.current = typed;
    cursorModeRef.current = () => term.modes.applicationCursorKeysMode;
    const inputs = bindTerminalInput(term, link, typed);
    const observer = new ResizeObserver(refit);
    observer.observe(element);
    link.start();

    return () => {
      link.dispose();
      observer.disconnect();
      inputs.forEach((d) => d.dispose());
      term.dispose();
    };
  }, [deviceId, round, user, session && watching ? session : undefined]);

  useEffect(() => {
    if (active) showRef.current();
  }, [active]);

  const over = status.kind === 'ended' || status.kind === 'closed' || status.kind === 'failed' || status.kind === 'denied';
  const label =
    status.kind === 'connecting'
      ? 'Connecting…'
      : status.kind === 'open'
        ? watching
          ? 'Watching (read-only)'
          : 'Connected'
        : status.kind === 'denied'
          ? 'Access denied'
          : status.message;

  return (
    <div class={`console-panel${active ? '' : ' inactive'}`} data-testid={watching ? 'watch-panel' : 'console-panel'}>
      <header class="console-bar">
        <Link href={`/devices/${deviceId}`} class="button small">
          ← Device
        </Link>
        <strong class="console-title" title={deviceId}>
          {watching && owner ? `${owner} on ${name}` : name}
        </strong>
        <span class={`console-status ${status.kind}`} role="status" aria-live="polite" data-testid="console-status">
          {label}
        </span>
        {!watching && users && users.length > 1 ? (
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
          !watching &&
          user && (
            <span class="small" data-testid="console-user">
              as {user}
            </span>
          )
        )}
        {watchers.length > 0 && (
          <span class="console-watchers small" data-testid="console-watchers" title="These users see this console, read-only">
            Watched by {watchers.map((w) => w.email).join(', ')}
          </span>
        )}
        {!watching && <span class="muted small hide-narrow">Copy: Ctrl+Shift+C · Paste: Ctrl+V or Ctrl+Shift+V</span>}
        {over && (
          <button
            type="button"
            class="small primary"
            onClick={() => {
              sessionRef.current = watching ? session : undefined;
              setRound((n) => n + 1);
            }}
          >
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
      {touch && !watching && (
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
 * The open consoles as tabs: each keeps its session and its screen while another is shown. The
 * tabs and their sessions are kept for a reload (sessionStorage), which re-attaches to them;
 * leaving the console screen closes them all.
 */
function ConsoleTabsView({ device, attach }: { device: { deviceId: string; name: string; users?: string[] }; attach?: string }) {
  // `?attach=<session>` (Re-attach on the Sessions screen or the device page, from any tab or
  // browser the owner is signed in on): a tab that re-attaches to that session.
  const [state, setState] = useState<ConsoleTabs>(() => (attach ? attachTab(loadTabs(), device, attach) : showDevice(loadTabs(), device)));
  const stateRef = useRef(state);
  const update = (change: (s: ConsoleTabs) => ConsoleTabs) => {
    stateRef.current = change(stateRef.current);
    saveTabs(stateRef.current);
    setState(stateRef.current);
  };
  useEffect(() => {
    saveTabs(stateRef.current);
    // The tab keeps the session (sessionStorage): a reload must not re-attach through the address again.
    if (attach) navigate(`/console/${device.deviceId}`, { replace: true });
    // Leaving the console ends its sessions (each terminal closes its own): nothing to re-attach.
    return () => saveTabs({ tabs: [] });
  }, []);
  useEffect(() => {
    if (state.tabs.length === 0) navigate(`/devices/${device.deviceId}`);
  }, [state.tabs.length]);
  const active = state.tabs.find((t) => t.key === state.active);
  return (
    <div class="console-screen">
      <div class="console-tabs" role="tablist" aria-label="Open consoles">
        {state.tabs.map((tab, i) => (
          <span key={tab.key} class={`console-tab${tab.key === state.active ? ' active' : ''}`}>
            <button
              type="button"
              role="tab"
              aria-selected={tab.key === state.active}
              data-testid="console-tab"
              onClick={() => update((s) => ({ ...s, active: tab.key }))}
            >
              {i + 1}. {tab.name}
            </button>
            <button
              type="button"
              class="close"
              aria-label={`Close console ${i + 1}`}
              title="Close (ends this session)"
              onClick={() => update((s) => closeTab(s, tab.key))}
            >
              ×
            </button>
          </span>
        ))}
        {state.tabs.length < MAX_TABS && active && (
          <button
            type="button"
            class="console-new-tab"
            data-testid="console-new-tab"
            title={`Another console on ${active.name}`}
            onClick={() => update((s) => addTab(s, { deviceId: active.deviceId, name: active.name, users: active.users }))}
          >
            + New console
          </button>
        )}
      </div>
      {state.tabs.map((tab) => (
        <TerminalView
          key={tab.key}
          mode="control"
          deviceId={tab.deviceId}
          name={tab.name}
          users={tab.users}
          session={tab.session}
          active={tab.key === state.active}
          onSession={(session) => update((s) => setSession(s, tab.key, session))}
        />
      ))}
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
  const [attach] = useState(() => new URLSearchParams(location.search).get('attach') || undefined);
  const [state, setState] = useState<
    { kind: 'checking' } | { kind: 'ready'; name: string; users?: string[] } | { kind: 'denied'; message?: string } | { kind: 'error'; error: unknown }
  >({
    kind: 'checking',
  });

  useEffect(() => {
    document.title = 'Console · Fleet console';
    let live = true;
    void (async () => {
      // The device's name is asked beside the access check, not after it: one round trip less.
      const attributes = api.get<AttributesRecord>(`/deviceattribute/${encodeURIComponent(deviceId)}`).catch(() => null);
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
        const attrs = await attributes;
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

  if (state.kind === 'ready') return <ConsoleTabsView device={{ deviceId, name: state.name, users: state.users }} attach={attach} />;
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

/**
 * Watching someone's live console, read-only (GET /remote/sessions offers it as `can_watch`):
 * the broker sends its recent output, then live output; nothing typed here reaches the device.
 */
export function WatchScreen({ sessionId }: { sessionId: string }) {
  const [state, setState] = useState<{ kind: 'checking' } | { kind: 'ready'; session?: LiveSessionItem } | { kind: 'error'; error: unknown }>({
    kind: 'checking',
  });
  useEffect(() => {
    document.title = 'Watching a console · Fleet console';
    let live = true;
    api
      .get<ListPage<LiveSessionItem>>('/remote/sessions')
      .then((r) => live && setState({ kind: 'ready', session: r.items.find((s) => s.id === sessionId) }))
      .catch((error: unknown) => live && setState({ kind: 'error', error }));
    return () => {
      live = false;
    };
  }, [sessionId]);
  if (state.kind === 'ready') {
    const s = state.session;
    return (
      <div class="console-screen">
        <TerminalView
          mode="watch"
          session={sessionId}
          deviceId={s?.device.id ?? ''}
          name={s?.device.name || s?.device.id.slice(0, 12) || 'a device'}
          owner={s?.user.email}
          active
        />
      </div>
    );
  }
  return (
    <div class="console-page">
      <p>
        <Link href="/sessions">← Back to the sessions</Link>
      </p>
      {state.kind === 'checking' && <Loading what="the session" />}
      {state.kind === 'error' && <ErrorBox error={state.error} />}
    </div>
  );
}
