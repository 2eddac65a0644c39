/**
 * The console's terminal and its WebSocket, apart from the screen that shows them: the xterm.js
 * terminal with its copy/paste keys (`openTerminal`), the connection with its acknowledgements
 * (one per 64 KiB rendered, shared/console-acks.ts),
 * replay on re-attach and re-attaching after a dropped connection (`openConsoleLink`), and the
 * terminal's input wired to that connection (`bindTerminalInput`).
 */
import { FitAddon } from '@xterm/addon-fit';
import { Terminal, type IDisposable } from '@xterm/xterm';
import { ConsoleAcks } from '../../../shared/console-acks.js';
import { encodeFrame, endedMessage, serverFrameOf, type ClientFrame } from '../../../shared/remote-frames.js';
import { escapeForTerminal } from '../../../shared/text.js';
import { ApiFailure, messageOf, remoteSocketUrl } from '../api.js';
import { ReplayGuard } from '../replay-guard.js';

export type Status =
  | { kind: 'connecting' }
  | { kind: 'open' }
  | { kind: 'reconnecting'; message: string }
  | { kind: 'ended'; message: string }
  | { kind: 'closed'; message: string }
  | { kind: 'denied'; message: string }
  | { kind: 'failed'; message: string };

/** A dropped connection is re-attached this many times, a little later each time, before giving up. */
const MAX_REATTACHES = 8;
/**
 * What is typed while the link is not ready for it (connecting, re-attaching, a replay being
 * written) is held and sent, in order, once it is; past this many bytes the rest is refused, and
 * the terminal says how much was not sent.
 */
export const HELD_INPUT_LIMIT = 64 * 1024;

function exitMessage(msg: { code?: number | null; signal?: number | string | null }): string {
  const parts = [`exit code ${msg.code ?? 'unknown'}`];
  if (msg.signal !== null && msg.signal !== undefined) parts.push(`signal ${msg.signal}`);
  return `Session ended (${parts.join(', ')}).`;
}

/** A close that says the connection dropped (network, reload of the broker's proxy), not that the session is over. */
function droppedConnection(code: number): boolean {
  return code === 1001 || code === 1006 || code === 1011 || code === 1012 || code === 1013;
}

/** The terminal, fitted to its element and focused; Ctrl+Shift+C copies, Ctrl+V is left to the browser's paste. */
export function openTerminal(element: HTMLElement, watching: boolean): { term: Terminal; refit: () => void } {
  const term = new Terminal({
    cursorBlink: !watching,
    disableStdin: watching,
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
  attachClipboardKeys(term);
  return { term, refit };
}

/**
 * Copy with Ctrl+Shift+C (plain Ctrl+C is the terminal's interrupt). Paste with Ctrl+V or
 * Ctrl+Shift+V: the key is left to the browser, whose paste event xterm turns into input, so
 * the text arrives once, and no ^V reaches the device (the tty would then take the next Enter
 * as a literal ^M).
 */
function attachClipboardKeys(term: Terminal): void {
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
}

export interface ConsoleLinkOptions {
  term: Terminal;
  watching: boolean;
  deviceId: string;
  /** the login user a new console runs as */
  user: string | undefined;
  /** watch: the session watched */
  watched: string | undefined;
  /** the session to re-attach to: read on each connect, set from the broker's ready frame, cleared when it is over */
  sessionRef: { current: string | undefined };
  /** control: the session the console runs on, or undefined once it is over */
  onSession: (session: string | undefined) => void;
  onStatus: (status: Status) => void;
  onWatchers: (watchers: { id: string; email: string }[]) => void;
}

export interface ConsoleLink {
  /** the terminal's answers to a replay's queries never reach the device */
  guard: ReplayGuard;
  start: () => void;
  /** Sends what was typed, or holds it until the link is ready (see HELD_INPUT_LIMIT). */
  sendInput: (data: string) => void;
  sendBinary: (data: string) => void;
  resize: (cols: number, rows: number) => void;
  /** Closing the tab or leaving the console ends the session (a reload does not come here). */
  dispose: () => void;
}

/** The console WebSocket of one terminal: connection, acknowledgements, replay, re-attaching. */
export function openConsoleLink(o: ConsoleLinkOptions): ConsoleLink {
  const { term, watching, deviceId, user, sessionRef } = o;
  let ws: WebSocket | null = null;
  let disposed = false;
  let finished = false;
  let retryTimer: ReturnType<typeof setTimeout> | undefined;
  let reattaches = 0;
  let readyOnce = false;
  // The first output after a re-attach's (or a watch's) ready frame is the kept output, replayed:
  // what the terminal answers to the queries in it must not reach the device (replay-guard.ts).
  let replayNext = false;
  const guard = new ReplayGuard();
  const encoder = new TextEncoder();
  // Input typed before the broker's ready frame, during a re-attach, or while a replay is being
  // written waits here; `holding` is true until then (and again from each connect).
  let holding = true;
  let held: Uint8Array[] = [];
  let heldBytes = 0;
  let refusedBytes = 0;

  const notice = (text: string) => term.write(`\r\n\x1b[1;33m[${text}]\x1b[0m\r\n`);
  const sendOrHold = (bytes: Uint8Array) => {
    if (watching || finished || disposed) return;
    if (!holding && ws?.readyState === WebSocket.OPEN) {
      ws.send(bytes);
      return;
    }
    if (heldBytes + bytes.byteLength > HELD_INPUT_LIMIT) {
      refusedBytes += bytes.byteLength;
      return;
    }
    held.push(bytes);
    heldBytes += bytes.byteLength;
  };
  /** The link is ready for input: what was held goes first, and what was refused is said. */
  const release = () => {
    if (!holding || finished || ws?.readyState !== WebSocket.OPEN) return;
    holding = false;
    for (const bytes of held) ws.send(bytes);
    held = [];
    heldBytes = 0;
    if (refusedBytes > 0) {
      notice(`${refusedBytes} bytes typed while connecting were not sent: at most ${HELD_INPUT_LIMIT / 1024} KiB is held.`);
      refusedBytes = 0;
    }
  };

  const sendJson = (msg: ClientFrame) => {
    if (ws?.readyState === WebSocket.OPEN) ws.send(encodeFrame(msg));
  };
  // One ack per 64 KiB rendered (shared/console-acks.ts): an echo costs no frame back and no timer.
  const acks = new ConsoleAcks((bytes) => sendJson({ type: 'ack', bytes }));
  const rendered = (bytes: number) => {
    if (!watching) acks.shown(bytes); // a watcher's pace never holds the console
  };
  const forget = () => {
    sessionRef.current = undefined;
    if (!watching) o.onSession(undefined);
  };
  const finish = (next: Status) => {
    if (finished) return;
    finished = true;
    const unsent = heldBytes + refusedBytes;
    held = [];
    heldBytes = refusedBytes = 0;
    if (unsent > 0 && !disposed) notice(`${unsent} bytes typed while connecting were not sent.`);
    term.options.disableStdin = true;
    term.options.cursorBlink = false;
    o.onStatus(next);
  };

  const connect = async (): Promise<void> => {
    holding = true;
    const size = { cols: term.cols, rows: term.rows };
    const attachTo = sessionRef.current;
    let url: string;
    try {
      const query = watching
        ? { watch: o.watched, ...size }
        : attachTo
          ? { attach: attachTo, ...size }
          : { device_id: deviceId, ...size, ...(user ? { user } : {}) };
      url = await remoteSocketUrl('console', query);
    } catch (err) {
      if (disposed) return;
      const denied = err instanceof ApiFailure && err.status === 403;
      if (!denied && attachTo && reattaches > 0 && reattaches < MAX_REATTACHES) return retry();
      finish(denied ? { kind: 'denied', message: messageOf(err) } : { kind: 'failed', message: messageOf(err) });
      return;
    }
    if (disposed) return;
    let expired = false;
    const socket = new WebSocket(url);
    ws = socket;
    acks.reset(); // the broker counts a new connection's output afresh
    socket.binaryType = 'arraybuffer';
    socket.onopen = () => {
      if (!watching) sendJson({ type: 'resize', cols: term.cols, rows: term.rows });
    };
    socket.onmessage = (e) => {
      if (e.data instanceof ArrayBuffer) {
        const bytes = new Uint8Array(e.data);
        if (replayNext) {
          replayNext = false;
          guard.replay(
            (data: Uint8Array, parsed) => term.write(data, parsed),
            bytes,
            () => {
              rendered(bytes.byteLength);
              if (ws === socket) release();
            },
          );
        } else term.write(bytes, () => rendered(bytes.byteLength));
        return;
      }
      const msg = serverFrameOf(String(e.data));
      if (!msg) return; // unknown to this version, or malformed
      if (msg.type === 'ready') {
        // A re-attach replays the console's recent output: it replaces what is shown.
        if (msg.reattached || (watching && readyOnce)) term.reset();
        replayNext = !!msg.reattached || watching;
        readyOnce = true;
        reattaches = 0;
        if (!watching && msg.session) {
          sessionRef.current = msg.session;
          o.onSession(msg.session);
        }
        o.onStatus({ kind: 'open' });
        term.focus();
        // A re-attach's replay (if it kept any output) follows at once: input waits for it to be written.
        if (!replayNext) release();
      } else if (msg.type === 'watchers') {
        // The broker sends the watchers after the replay: none came, so there was nothing kept.
        if (!watching && readyOnce && replayNext) {
          replayNext = false;
          if (!guard.replaying) release();
        }
        o.onWatchers(msg.watchers);
      } else if (msg.type === 'exit') {
        const message = exitMessage(msg);
        term.write(`\r\n\x1b[1;33m[${message}]\x1b[0m\r\n`);
        forget();
        finish({ kind: 'ended', message });
      } else if (msg.type === 'error') {
        if (msg.error === 'session_not_found' && attachTo && !watching) {
          expired = true;
          return;
        }
        // Ended by an operator, or a grant withdrawn: say who and why, not "Access denied".
        const ended = endedMessage(msg);
        if (ended) {
          term.write(`\r\n\x1b[1;33m[${escapeForTerminal(ended)}]\x1b[0m\r\n`);
          forget();
          finish({ kind: 'ended', message: ended });
          return;
        }
        const message = msg.message || 'The console could not be opened.';
        forget();
        finish(msg.code === 403 ? { kind: 'denied', message } : { kind: 'failed', message });
      }
    };
    socket.onerror = () => undefined; // the close event says why
    socket.onclose = (e) => {
      if (disposed || finished || ws !== socket) return;
      holding = true;
      o.onWatchers([]);
      if (expired) {
        forget();
        if (!readyOnce) {
          // Reopened (a reload) after its session had ended: a new console takes its place.
          term.write('\x1b[1;33m[The previous session had ended; a new one is opened.]\x1b[0m\r\n');
          void connect();
        } else {
          finish({ kind: 'closed', message: 'The session ended while the connection was down (it was not re-attached in time).' });
        }
        return;
      }
      if (!watching && sessionRef.current && droppedConnection(e.code) && reattaches < MAX_REATTACHES) return retry();
      if (e.code === 4409) finish({ kind: 'closed', message: 'This console was re-attached from another window.' });
      else if (e.code === 4403) finish({ kind: 'denied', message: e.reason || 'Your roles do not allow a console on this device.' });
      else finish({ kind: 'closed', message: `The connection closed${e.reason ? `: ${e.reason}` : ''} (code ${e.code}).` });
    };
  };
  const retry = () => {
    reattaches += 1;
    o.onStatus({ kind: 'reconnecting', message: 'Connection lost: re-attaching…' });
    retryTimer = setTimeout(() => void connect(), Math.min(500 * reattaches, 5000));
  };

  return {
    guard,
    start: () => void connect(),
    sendInput: (data) => sendOrHold(encoder.encode(data)),
    sendBinary: (data) => sendOrHold(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)),
    resize: (cols, rows) => {
      if (!watching) sendJson({ type: 'resize', cols, rows });
    },
    dispose: () => {
      disposed = true;
      clearTimeout(retryTimer);
      ws?.close(1000, 'closed by the user');
    },
  };
}

/** The events through which a person gives the terminal input: keys, typing, pastes, IME, the mouse. */
const PERSON_EVENT = /^(key|input|beforeinput|paste|composition|mouse|pointer|wheel|touch)/;

/**
 * Whether the terminal's data at hand comes from the person: xterm.js turns keys, input, pastes
 * and mouse reports into data while it handles their DOM event; it answers queries while it
 * parses output, in a timer or in the socket's message event (never one of those).
 */
export function typedByPerson(): boolean {
  const event = (globalThis as { event?: Event }).event;
  return event !== undefined && PERSON_EVENT.test(event.type);
}

/**
 * The terminal's keystrokes, pastes and size, to the console. While a replay is written the
 * terminal's own answers are dropped, and what the person types is held by the link until then.
 */
export function bindTerminalInput(term: Terminal, link: ConsoleLink, typed: (data: string) => void): IDisposable[] {
  return [
    term.onData(link.guard.filter(typed, typedByPerson)),
    term.onBinary((data) => {
      if (link.guard.replaying && !typedByPerson()) return;
      link.sendBinary(data);
    }),
    term.onResize(({ cols, rows }) => link.resize(cols, rows)),
  ];
}
