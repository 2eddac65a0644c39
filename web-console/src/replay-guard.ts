/**
 * Keeps the terminal's own answers out of the shell while kept output is replayed.
 *
 * A re-attach (or a watcher joining) starts with the console's recent output. That output holds
 * the queries programs sent earlier (device attributes, colours, cursor position: vi and top ask
 * them), and xterm.js answers each through `onData`, exactly like keystrokes. Those answers were
 * given long ago; sent again they land at the prompt (`2RR0;276;0c…rgb:ffff/ffff/ffff`) or as
 * commands inside vi. So while replayed bytes are parsed — from `write` until its callback says
 * they are — whatever the terminal emits is dropped; only what the person types reaches the device.
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

  /** Passes what the terminal emits to `send`, unless replayed output is being parsed. */
  filter(send: (data: string) => void): (data: string) => void {
    return (data) => {
      if (!this.replaying) send(data);
    };
  }

  /** Forgets a replay that will never finish (the terminal was reset or disposed). */
  clear(): void {
    this.pending = 0;
  }
}
