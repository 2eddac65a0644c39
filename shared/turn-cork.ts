/**
 * Writes of one turn of the event loop, sent together. A socket written piece by piece (a frame's
 * header and payload, ssh2's packets, the pieces of a channel's frames) makes a write(2) per piece
 * and wakes its peer for each. Corked from the first write of a turn until that turn's callbacks
 * and promise jobs are done (process.nextTick), the pieces leave in one writev; a lone keystroke
 * still leaves in the turn that made it, with no delay. Nothing is held across turns: what the
 * socket buffers is what it would have buffered uncorked.
 */

/** What corkForTurn needs of a socket (a net.Socket, any Writable). */
export interface Corkable {
  cork(): void;
  uncork(): void;
  readonly destroyed: boolean;
}

/**
 * Returns `hold`: call it before (or as) writing to `socket`. The first call in a turn corks the
 * socket and uncorks it once when the turn is done; later calls in the same turn do nothing. A
 * destroyed socket is neither corked nor uncorked. (SocketHold's `turn`, for a socket held no longer.)
 */
export function corkForTurn(socket: Corkable): () => void {
  const hold = new SocketHold(socket);
  return () => hold.turn();
}

/**
 * A socket held corked for the writes of one turn, or of one iteration of the event loop. `turn()`
 * holds it until this turn is done (corkForTurn). `iteration()`, for writes that no one waits on
 * byte by byte, holds it until the event loop's check phase (setImmediate), so that what other
 * sockets' events in the same poll add (the closes of several sessions, each read from a socket of
 * its own, each in a turn of its own) leaves in the same write. A `turn()` while the socket is held
 * for the iteration ends the hold with that turn: a keystroke never waits for the rest of the poll.
 * A destroyed socket is neither corked nor uncorked.
 */
export class SocketHold {
  /** Which hold the socket is corked for (once, whatever the number of calls), if any. */
  private held: 'turn' | 'iteration' | undefined;
  /** Bumped at each release: a release scheduled for an earlier hold does nothing. */
  private generation = 0;

  constructor(private readonly socket: Corkable) {}

  turn(): void {
    if (this.held === 'turn' || this.socket.destroyed) return;
    if (this.held === undefined) this.socket.cork();
    this.held = 'turn';
    process.nextTick(release, this, this.generation);
  }

  iteration(): void {
    if (this.held !== undefined || this.socket.destroyed) return;
    this.socket.cork();
    this.held = 'iteration';
    setImmediate(release, this, this.generation);
  }

  /** @internal the hold of `generation` is over. */
  release(generation: number): void {
    if (generation !== this.generation || this.held === undefined) return;
    this.held = undefined;
    this.generation += 1;
    if (!this.socket.destroyed) this.socket.uncork();
  }
}

function release(hold: SocketHold, generation: number): void {
  hold.release(generation);
}
