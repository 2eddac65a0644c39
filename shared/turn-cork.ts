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
 * destroyed socket is neither corked nor uncorked.
 */
export function corkForTurn(socket: Corkable): () => void {
  let corked = false;
  const uncork = () => {
    corked = false;
    if (!socket.destroyed) socket.uncork();
  };
  return () => {
    if (corked || socket.destroyed) return;
    corked = true;
    socket.cork();
    process.nextTick(uncork);
  };
}
