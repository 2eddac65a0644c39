import { describe, expect, it } from 'vitest';
import { ReplayGuard } from './replay-guard.js';

/**
 * A terminal as xterm.js behaves: writes are parsed later, in order, and the answers to the
 * queries they hold are emitted through the same data path as keystrokes.
 */
function fakeTerminal() {
  const queue: { data: string; parsed: () => void }[] = [];
  const listeners: ((data: string) => void)[] = [];
  const emit = (data: string) => listeners.forEach((l) => l(data));
  return {
    onData: (l: (data: string) => void) => listeners.push(l),
    write: (data: string, parsed: () => void) => queue.push({ data, parsed }),
    /** The user types. */
    type: emit,
    /** Parses the next write: a device-attributes query is answered, as xterm.js does. */
    parseNext() {
      const next = queue.shift();
      if (!next) return;
      if (next.data.includes('\x1b[>c')) emit('\x1b[>0;276;0c');
      if (next.data.includes('\x1b]10;?\x07')) emit('\x1b]10;rgb:ffff/ffff/ffff\x1b\\');
      next.parsed();
    },
  };
}

describe('the replay guard', () => {
  it("keeps the terminal's answers to replayed queries from the device, and lets live ones and typing through", () => {
    const term = fakeTerminal();
    const guard = new ReplayGuard();
    const sent: string[] = [];
    term.onData(guard.filter((d) => sent.push(d)));
    let rendered = 0;

    // vi's start, kept by the broker and replayed on re-attach: the query is answered but dropped.
    guard.replay(term.write, 'prompt$ vi notes\r\n\x1b[>c\x1b]10;?\x07~\r\n~', () => (rendered += 1));
    expect(guard.replaying).toBe(true);
    term.parseNext();
    expect(sent).toEqual([]);
    expect(rendered).toBe(1);
    expect(guard.replaying).toBe(false);

    // Afterwards the person types, and a program started now gets its answer.
    term.type(':q!\r');
    term.write('\x1b[>c', () => undefined);
    term.parseNext();
    expect(sent).toEqual([':q!\r', '\x1b[>0;276;0c']);
  });

  it('holds input back until every overlapping replay is parsed, and counts each callback once', () => {
    const term = fakeTerminal();
    const guard = new ReplayGuard();
    const sent: string[] = [];
    term.onData(guard.filter((d) => sent.push(d)));
    let twice: () => void = () => undefined;
    guard.replay((data: string, parsed) => {
      twice = parsed;
      term.write(data, parsed);
    }, '\x1b[>c');
    guard.replay(term.write, '\x1b[>c');
    term.parseNext();
    twice(); // a callback run again does not end the other replay early
    expect(guard.replaying).toBe(true);
    term.parseNext();
    expect(guard.replaying).toBe(false);
    expect(sent).toEqual([]);
    guard.replay(term.write, 'x');
    guard.clear();
    expect(guard.replaying).toBe(false);
  });
});
