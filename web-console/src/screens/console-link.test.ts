import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Terminal } from '@xterm/xterm';

vi.mock('../api.js', () => ({
  ApiFailure: class ApiFailure extends Error {},
  messageOf: (err: unknown) => String(err),
  remoteSocketUrl: () => Promise.resolve('ws://broker.test/api/v2/remote/console'),
}));

const { HELD_INPUT_LIMIT, bindTerminalInput, openConsoleLink } = await import('./console-link.js');
const { CONSOLE_ACK_EVERY } = await import('../../../shared/console-acks.js');

/** A browser WebSocket as the link uses it: the test opens it, delivers frames and closes it. */
class FakeSocket {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSING = 2;
  static readonly CLOSED = 3;
  static all: FakeSocket[] = [];
  readyState = FakeSocket.CONNECTING;
  binaryType = 'blob';
  /** what the link sent as bytes (input), decoded */
  input: string[] = [];
  /** what the link sent as text (its JSON frames: resize, ack) */
  text: string[] = [];
  onopen: (() => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onerror: (() => void) | null = null;
  onclose: ((e: { code: number; reason: string }) => void) | null = null;
  constructor(readonly url: string) {
    FakeSocket.all.push(this);
  }
  send(data: string | Uint8Array): void {
    if (this.readyState !== FakeSocket.OPEN) throw new Error('sent on a socket that is not open');
    if (typeof data !== 'string') this.input.push(new TextDecoder().decode(data));
    else this.text.push(data);
  }
  close(code = 1000, reason = ''): void {
    this.drop(code, reason);
  }
  open(): void {
    this.readyState = FakeSocket.OPEN;
    this.onopen?.();
  }
  frame(msg: object): void {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
  bytes(text: string): void {
    this.onmessage?.({ data: new TextEncoder().encode(text).buffer });
  }
  drop(code: number, reason = ''): void {
    if (this.readyState === FakeSocket.CLOSED) return;
    this.readyState = FakeSocket.CLOSED;
    this.onclose?.({ code, reason });
  }
}

/**
 * A terminal as xterm.js behaves: writes are parsed later, in order; the answers to the queries
 * they hold are emitted as data outside any DOM event, what the person types inside a key event.
 */
function fakeTerminal() {
  const pending: { data: string; parsed?: () => void }[] = [];
  const data: ((d: string) => void)[] = [];
  const shown: string[] = [];
  const term = {
    cols: 80,
    rows: 24,
    options: {} as Record<string, unknown>,
    write(d: string | Uint8Array, parsed?: () => void) {
      pending.push({ data: typeof d === 'string' ? d : new TextDecoder().decode(d), parsed });
    },
    reset: () => shown.splice(0),
    focus: () => undefined,
    onData: (l: (d: string) => void) => (data.push(l), { dispose: () => undefined }),
    onBinary: () => ({ dispose: () => undefined }),
    onResize: () => ({ dispose: () => undefined }),
  };
  return {
    term: term as unknown as Terminal,
    shown,
    /** Parses every pending write, answering a device-attributes query as xterm.js does. */
    parse() {
      while (pending.length) {
        const next = pending.shift()!;
        shown.push(next.data);
        if (next.data.includes('\x1b[>c')) data.forEach((l) => l('\x1b[>0;276;0c'));
        next.parsed?.();
      }
    },
    /** The person types, in a key event of the page. */
    type(text: string) {
      vi.stubGlobal('event', { type: 'keydown' });
      try {
        data.forEach((l) => l(text));
      } finally {
        vi.stubGlobal('event', undefined);
      }
    },
  };
}

function setUp() {
  const t = fakeTerminal();
  const statuses: string[] = [];
  const link = openConsoleLink({
    term: t.term,
    watching: false,
    deviceId: 'dev-1',
    user: undefined,
    watched: undefined,
    sessionRef: { current: undefined },
    onSession: () => undefined,
    onStatus: (s) => statuses.push(s.kind),
    onWatchers: () => undefined,
  });
  bindTerminalInput(t.term, link, (d) => link.sendInput(d));
  link.start();
  return { ...t, link, statuses };
}

/** The socket the link has opened by now (it first asks the broker for a ticket). */
async function nextSocket(index: number): Promise<FakeSocket> {
  await vi.waitFor(() => expect(FakeSocket.all.length).toBeGreaterThan(index));
  return FakeSocket.all[index]!;
}

beforeEach(() => {
  FakeSocket.all = [];
  vi.stubGlobal('WebSocket', FakeSocket);
});

afterEach(() => {
  vi.useRealTimers();
  vi.unstubAllGlobals();
});

describe('the console link: input typed before it is ready', () => {
  it('holds keys typed while the console connects and sends them, in order, once it is ready', async () => {
    const c = setUp();
    c.type('ec'); // before the socket exists
    const ws = await nextSocket(0);
    c.type('ho '); // connecting
    ws.open();
    c.type('hi'); // open, before the broker's ready frame
    expect(ws.input).toEqual([]);
    ws.frame({ type: 'ready', session: 's1', mode: 'control' });
    expect(ws.input).toEqual(['ec', 'ho ', 'hi']);
    c.type('\r');
    expect(ws.input).toEqual(['ec', 'ho ', 'hi', '\r']);
  });

  it("holds keys typed while re-attaching and during the replay, sends them after it, and drops the terminal's answers to the replay", async () => {
    const c = setUp();
    const first = await nextSocket(0);
    first.open();
    first.frame({ type: 'ready', session: 's1', mode: 'control' });
    vi.useFakeTimers();
    first.drop(1006);
    expect(c.statuses.at(-1)).toBe('reconnecting');
    c.type('ls');
    await vi.advanceTimersByTimeAsync(500);
    vi.useRealTimers();
    const second = await nextSocket(1);
    second.open();
    second.frame({ type: 'ready', session: 's1', mode: 'control', reattached: true });
    second.bytes('prompt$ vi\r\n\x1b[>c~');
    second.frame({ type: 'watchers', watchers: [] });
    c.type(' -l'); // typed while the replay is still being parsed
    expect(second.input).toEqual([]);
    c.parse(); // the replay's query is answered, and the answer dropped
    expect(second.input).toEqual(['ls', ' -l']);
    expect(first.input).toEqual([]);
  });

  it('sends what was held after a re-attach that kept no output, once the broker says the replay is over', async () => {
    const c = setUp();
    const first = await nextSocket(0);
    first.open();
    first.frame({ type: 'ready', session: 's1', mode: 'control' });
    vi.useFakeTimers();
    first.drop(1001);
    c.type('pwd\r');
    await vi.advanceTimersByTimeAsync(500);
    vi.useRealTimers();
    const second = await nextSocket(1);
    second.open();
    second.frame({ type: 'ready', session: 's1', mode: 'control', reattached: true });
    expect(second.input).toEqual([]);
    second.frame({ type: 'watchers', watchers: [] });
    expect(second.input).toEqual(['pwd\r']);
    // Live output afterwards is not a replay: its queries are answered to the device.
    second.bytes('\x1b[>c');
    c.parse();
    expect(second.input).toEqual(['pwd\r', '\x1b[>0;276;0c']);
  });

  it('holds at most the limit, refuses the rest and says so in the terminal', async () => {
    const c = setUp();
    const ws = await nextSocket(0);
    const chunk = 'x'.repeat(1024);
    for (let i = 0; i < HELD_INPUT_LIMIT / 1024 + 6; i += 1) c.type(chunk);
    ws.open();
    ws.frame({ type: 'ready', session: 's1', mode: 'control' });
    expect(ws.input.join('').length).toBe(HELD_INPUT_LIMIT);
    c.parse();
    expect(c.shown.join('')).toContain('6144 bytes typed while connecting were not sent: at most 64 KiB is held.');
    c.type('y'); // and typing goes on afterwards
    expect(ws.input.at(-1)).toBe('y');
  });

  it('says in the terminal that held keys were not sent when the console cannot be opened', async () => {
    const c = setUp();
    const ws = await nextSocket(0);
    c.type('abc');
    ws.open();
    ws.drop(4403, 'no console for you');
    expect(c.statuses.at(-1)).toBe('denied');
    c.parse();
    expect(c.shown.join('')).toContain('3 bytes typed while connecting were not sent.');
    expect(ws.input).toEqual([]);
  });
});

describe('the console link: acknowledgements', () => {
  it('sends nothing back for echoes, however long after, and one ack per CONSOLE_ACK_EVERY rendered', async () => {
    const c = setUp();
    const ws = await nextSocket(0);
    ws.open();
    ws.frame({ type: 'ready', session: 's1', mode: 'control' });
    vi.useFakeTimers();
    const acks = () => ws.text.map((t) => JSON.parse(t) as { type: string; bytes?: number }).filter((f) => f.type === 'ack');
    for (let i = 0; i < 200; i += 1) {
      c.type('a');
      ws.bytes('a'); // the echo
      c.parse();
      vi.advanceTimersByTime(100);
    }
    // 200 keystrokes echoed and rendered: no frame but the keystrokes went back (the code before sent an ack 20 ms after each).
    expect(acks()).toEqual([]);
    expect(ws.input.length).toBe(200);
    // A flood is acknowledged as it is rendered, well before the broker's 1 MiB bound.
    const screen = 'x'.repeat(16 * 1024);
    for (let i = 0; i < 8; i += 1) ws.bytes(screen);
    c.parse();
    const sent = acks();
    expect(sent.length).toBe(2);
    expect(sent.reduce((sum, f) => sum + (f.bytes ?? 0), 0)).toBeGreaterThanOrEqual(2 * CONSOLE_ACK_EVERY - 200);
    expect(sent.every((f) => (f.bytes ?? 0) >= CONSOLE_ACK_EVERY)).toBe(true);
  });
});
