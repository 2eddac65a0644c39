/**
 * ssh2 writes each SSH packet to its socket as it makes it: a 255 KiB sftp answer, or a 128 KiB
 * frame from the device, is eight (four) packets of 32 KiB, and each was its own write(2) and its
 * own wake-up of the client. Here the socket is corked from the first write of a turn of the event
 * loop until that turn's callbacks and promise jobs are done (process.nextTick, as the mux does
 * towards the agent): the packets of one turn leave in one writev, and a lone keystroke's packet
 * still leaves in the turn that made it, with no delay. Nothing is held across turns: what the
 * socket buffers is what it would have buffered uncorked.
 */
import type { Writable } from 'node:stream';

/** Makes `socket`'s writes of one turn leave together (see above); returns it. */
export function coalesceWrites<T extends Writable>(socket: T): T {
  const write = socket.write;
  let corked = false;
  const uncork = () => {
    corked = false;
    socket.uncork();
  };
  socket.write = function (this: T, ...args: Parameters<T['write']>): boolean {
    if (!corked && !socket.destroyed) {
      corked = true;
      socket.cork();
      process.nextTick(uncork);
    }
    return (write as (...a: Parameters<T['write']>) => boolean).apply(this, args);
  } as T['write'];
  return socket;
}
