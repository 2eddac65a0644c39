/**
 * Keeps the terminal's own answers out of the shell while kept output is replayed.
 *
 * A re-attach (or a watcher joining) starts with the console's recent output. That output holds
 * the queries programs sent earlier (device attributes, colours, cursor position: vi and top ask
 * them), and xterm.js answers each through `onData`, exactly like keystrokes. Those answers were
 * given long ago; sent again they land at the prompt (`2RR0;276;0c…rgb:ffff/ffff/ffff`) or as
 * commands inside vi. So while replayed bytes are parsed — from `write` until its callback says
 * they are — what the terminal emits by itself is dropped; what the person types passes (the
 * console link holds it until the replay is written, then sends it).
 */
export class ReplayGuard {
  private pending = 0;

  /** True while replayed output is being parsed: terminal data is not the person's then. */
  get replaying(): boolean {
    return this.pending > 0;
  }

  /**
   * Writes replayed bytes through `write` (xterm's `term.write(data, callback)`), holding input
   * back until they are parsed; `done` runs after that, as `write`'s own callback would.
   */
  replay<T>(write: (data: T, parsed: () => void) => void, data: T, done?: () => void): void {
    this.pending += 1;
    let over = false;
    write(data, () => {
      if (over) return;
      over = true;
      this.pending -= 1;
      done?.();
    });
  }

  /**
   * Passes what the terminal emits to `send`, unless replayed output is being parsed and it is
   * not the person's (`typed` says whether the data at hand was typed, pasted or keyed in).
   */
  filter(send: (data: string) => void, typed: () => boolean = () => false): (data: string) => void {
    return (data) => {
      if (!this.replaying || typed()) send(data);
    };
  }

  /** Forgets a replay that will never finish (the terminal was reset or disposed). */
  clear(): void {
    this.pending = 0;
  }
}
