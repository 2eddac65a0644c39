/**
 * ssh2 writes each SSH packet to its socket as it makes it: a 255 KiB sftp answer, or a 128 KiB
 * frame from the device, is eight (four) packets of 32 KiB, and each was its own write(2) and its
 * own wake-up of the client. Here the socket is corked for the turn of its first write
 * (shared/turn-cork.ts, as the mux does towards the agent): the packets of one turn leave in one
 * writev, and a lone keystroke's packet still leaves in the turn that made it, with no delay.
 */
import type { Writable } from 'node:stream';
import { corkForTurn } from '../../shared/turn-cork.js';

/** Makes `socket`'s writes of one turn leave together (see above); returns it. */
export function coalesceWrites<T extends Writable>(socket: T): T {
  const write = socket.write;
  const hold = corkForTurn(socket);
  socket.write = function (this: T, ...args: Parameters<T['write']>): boolean {
    hold();
    return (write as (...a: Parameters<T['write']>) => boolean).apply(this, args);
  } as T['write'];
  return socket;
}
