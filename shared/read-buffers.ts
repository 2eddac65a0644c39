import type { Socket } from 'node:net';

/**
 * Reused read buffers for one socket read with `onread` (the agent's tunnel target, `fleet connect`'s
 * local connection). Node's own reads are a fresh 64 KiB buffer each, whose garbage collection was a
 * large share of both processes' CPU on a bulk stream. A buffer is its reader's from the read that
 * fills it until the reader's consumer is done with it (its bytes framed and flushed, or copied), then
 * it is reused; the reader pauses while its consumer is full, so few are ever out at once.
 */

/**
 * The first reads of a socket are this size. Most tunnels carry little each way (a request, a
 * handshake, an answer): a 256 KiB buffer allocated for each at connect was a third of the agent's
 * time in garbage collection when sessions were opened and closed in a loop.
 */
export const FIRST_READ_SIZE = 16 * 1024;
/**
 * The first read that fills its buffer shows a bulk stream, read in buffers of this size from then
 * on: a fast peer is read in a quarter of Node's system calls, and sent in a quarter of the frames.
 */
export const BULK_READ_SIZE = 256 * 1024;
/** Buffers kept for reuse once their consumer is done with them. */
const READ_POOL = 4;
/**
 * Spares kept once the socket has had no read for this long: one (besides the buffer the socket
 * holds for its next read). A burst fills the pool (four 256 KiB buffers), which an idle connection
 * then held for its whole life; a connection that reads again rebuilds it from its first reads.
 */
export const IDLE_TRIM_MS = 2000;

/**
 * First-size buffers left by sockets that closed (ReadBuffers `closed`), for the first reads of the
 * next ones. Each tunnel the agent opens takes a 16 KiB buffer for its first read at connect, read
 * into or not; opened and closed by the thousand, these were the agent's largest allocation per
 * session, outside the JavaScript heap, and their growth is what started its mark-compact
 * collections. At most SHARED_FIRST_READS are kept (1 MiB, whatever a peer opens and closes: no more than
 * the tunnels that held them at once), and none once no socket took one for IDLE_TRIM_MS.
 */
export const SHARED_FIRST_READS = 64;

/**
 * Buffers kept for reuse and dropped once idle: `trimWhenIdle` runs `trimIdle` once `uses` has not
 * moved for IDLE_TRIM_MS (one timer at a time, not holding the process), and looks again while
 * `worthTrimming` says there is something to drop. A base class, not a helper object: one per socket,
 * and a tunnel opened and closed by the thousand allocates nothing more for it.
 */
abstract class IdleTrimmed {
  private trimTimer?: NodeJS.Timeout;
  /** A count that moves with every use of the buffers. */
  protected abstract uses(): number;
  protected abstract trimIdle(): void;
  protected abstract worthTrimming(): boolean;

  protected trimWhenIdle(): void {
    if (this.trimTimer) return;
    const seen = this.uses();
    this.trimTimer = setTimeout(() => {
      this.trimTimer = undefined;
      if (this.uses() === seen) this.trimIdle();
      else if (this.worthTrimming()) this.trimWhenIdle();
    }, IDLE_TRIM_MS);
    this.trimTimer.unref();
  }

  protected cancelTrim(): void {
    clearTimeout(this.trimTimer);
    this.trimTimer = undefined;
  }
}

class FirstReadPool extends IdleTrimmed {
  private readonly free: Buffer[] = [];
  private taken = 0;

  /** Buffers kept now (for the tests). */
  get size(): number {
    return this.free.length;
  }

  take(): Buffer | undefined {
    this.taken++;
    return this.free.pop();
  }

  /** `buf` is no one's: no socket reads into it and no write holds a view of it. */
  put(buf: Buffer): void {
    if (buf.length !== FIRST_READ_SIZE || this.free.length >= SHARED_FIRST_READS) return;
    this.free.push(buf);
    this.trimWhenIdle();
  }

  /** Drops every buffer kept (for the tests). */
  clear(): void {
    this.free.length = 0;
    this.cancelTrim();
  }

  protected uses(): number {
    return this.taken;
  }

  /** No socket took one for IDLE_TRIM_MS: none kept. */
  protected trimIdle(): void {
    this.free.length = 0;
  }

  protected worthTrimming(): boolean {
    return this.free.length > 0;
  }
}

/** The process's pool of first read buffers (see FirstReadPool). */
export const sharedFirstReads = new FirstReadPool();

export class ReadBuffers extends IdleTrimmed {
  private readonly free: Buffer[] = [];
  private size = FIRST_READ_SIZE;
  /** Buffers handed out so far: a read calls `next` for the buffer of the one after it. */
  private handedOut = 0;
  /** The buffer last handed out: the one the socket reads into next. */
  private current?: Buffer;
  private done = false;

  /** The buffer of the next read (the `onread` option's `buffer`). */
  readonly next = (): Buffer => {
    this.handedOut++;
    const buf = this.free.pop() ?? (this.size === FIRST_READ_SIZE ? sharedFirstReads.take() : undefined) ?? Buffer.allocUnsafeSlow(this.size);
    this.current = buf;
    return buf;
  };

  /** `socket` reads into these buffers: once it closes, they are `closed`. */
  closeWith(socket: Pick<Socket, 'on'>): void {
    socket.on('close', () => this.closed());
  }

  /**
   * The socket closed (its 'close' event: its handle reads no more): the buffer it held for its next
   * read, and the spares, go to the process's pool of first read buffers if of that size. A buffer
   * given back after this (a write flushed late) is left to the garbage collector.
   */
  closed(): void {
    if (this.done) return;
    this.done = true;
    if (this.current) sharedFirstReads.put(this.current);
    for (const buf of this.free) sharedFirstReads.put(buf);
    this.current = undefined;
    this.free.length = 0;
  }

  /** Buffers kept for reuse now (for the tests). */
  get spares(): number {
    return this.free.length;
  }

  /** A read of `n` bytes into `buf`: one that filled it moves the socket to bulk-size reads. */
  read(n: number, buf: Buffer): void {
    if (n < buf.length || this.size === BULK_READ_SIZE) return;
    this.size = BULK_READ_SIZE;
    this.free.length = 0;
  }

  /** `buf` may be read into again (a small buffer after the move to bulk reads is dropped). */
  give(buf: Buffer): void {
    if (this.done) return;
    if (buf.length === this.size && this.free.length < READ_POOL) this.free.push(buf);
    if (this.free.length > 1) this.trimWhenIdle();
  }

  protected uses(): number {
    return this.handedOut;
  }

  /** No read came for IDLE_TRIM_MS: the spares but one are dropped. */
  protected trimIdle(): void {
    this.free.length = Math.min(this.free.length, 1);
  }

  protected worthTrimming(): boolean {
    return this.free.length > 1;
  }
}

/** A net.Socket's `onread` state, which Node keeps under symbols of its own (set in every socket's constructor). */
interface OnreadSlots {
  buffer: symbol;
  callback: symbol;
  generator: symbol;
}

function onreadSlots(socket: object): OnreadSlots | undefined {
  const symbols = Object.getOwnPropertySymbols(socket);
  const find = (name: string) => symbols.find((s) => s.description === name);
  const [buffer, callback, generator] = [find('kBuffer'), find('kBufferCb'), find('kBufferGen')];
  return buffer && callback && generator ? { buffer, callback, generator } : undefined;
}

/**
 * Moves a socket already open (a WebSocket's, which ws's client opens through `http.request`, where
 * `onread` cannot be given) to reads into the buffers `buffers.next` hands out (a ReadBuffers' reused
 * ones, or fresh ones), as the `onread` option would have from the start: each read goes to `onRead`
 * (return false to stop reading until the socket is resumed), no longer to 'data'; 'end' and the rest
 * are as before. Answers false, changing nothing, when the socket is not as this expects (TLS, no
 * handle, or already reading into a buffer of its own).
 */
export function moveReadsIntoBuffers(socket: Socket, buffers: Pick<ReadBuffers, 'next'>, onRead: (n: number, buf: Buffer) => boolean): boolean {
  const handle = (socket as unknown as { _handle?: { useUserBuffer?: (buf: Buffer) => void } | null })._handle;
  const slots = onreadSlots(socket);
  // A TLS socket's handle reads ciphertext for its own decryption: only a plain TCP socket is moved.
  if ((socket as { encrypted?: boolean }).encrypted || !handle || typeof handle.useUserBuffer !== 'function' || !slots) return false;
  const state = socket as unknown as Record<symbol, unknown>;
  if (state[slots.buffer] !== null) return false;
  const first = buffers.next();
  state[slots.buffer] = first;
  state[slots.callback] = onRead;
  state[slots.generator] = buffers.next;
  handle.useUserBuffer(first);
  return true;
}

/**
 * A plain TCP socket's reads into reused buffers, each still emitted as 'data' (so a WebSocket's
 * reader, its frame tap and its pause when full work as before). A listener that hands a view of the
 * read on takes `hold()` in that turn and calls what it answers once the view is no longer used (its
 * write flushed); the buffer is read into again only when every view of it is done. What goes to ws
 * itself must be copied first (ws-tap.ts `reusedReads`), as ws keeps the parts of a message.
 */
export class LeasedReads {
  readonly buffers = new ReadBuffers();
  private lease?: ReadLease;

  constructor(private readonly socket: Socket) {}

  /** Whether the socket's reads could be moved: TLS sockets keep Node's (their reads are ciphertext to decrypt). */
  static movable(socket: Socket | undefined): socket is Socket {
    return socket !== undefined && !(socket as { encrypted?: boolean }).encrypted;
  }

  /**
   * Moves the socket's reads into the buffers (see moveReadsIntoBuffers); false if it could not.
   * Once the socket closes, its first-size buffers go to the process's pool (ReadBuffers `closed`):
   * the broker takes one for every user's session, the CLI for every session.
   */
  start(): boolean {
    if (!moveReadsIntoBuffers(this.socket, this.buffers, this.onRead)) return false;
    this.buffers.closeWith(this.socket);
    return true;
  }

  /** Within a 'data' listener: a release for a view of this read (undefined for Node's own reads). */
  hold(): ((error?: unknown) => void) | undefined {
    return this.lease?.hold();
  }

  /** Within a 'data' listener: whether the read is in a reused buffer (a view kept past the turn must be held or copied). */
  get reused(): boolean {
    return this.lease !== undefined;
  }

  private readonly onRead = (n: number, buf: Buffer): boolean => {
    this.buffers.read(n, buf);
    const read = (this.lease = new ReadLease(buf, this.buffers));
    this.socket.emit('data', buf.subarray(0, n));
    this.lease = undefined;
    read.release();
    return this.socket.readableFlowing !== false;
  };
}

/**
 * One read's buffer while views of it are out: it goes back to its pool once the read is done
 * with and every view handed on was released (its write flushed), never before.
 */
export class ReadLease {
  private refs = 1;

  constructor(
    private readonly buf: Buffer,
    private readonly buffers: ReadBuffers,
  ) {}

  /**
   * A release for one view handed on, to call as its write's callback; calling it again does nothing.
   * Called with an error (the write failed: the socket may still hold the view), the buffer is never
   * read into again: it is left to the garbage collector.
   */
  hold(): (error?: unknown) => void {
    this.refs++;
    let released = false;
    return (error?: unknown) => {
      if (released) return;
      released = true;
      if (!error) this.release();
    };
  }

  /** The read itself is done with the buffer (called once, after the read was handed on). */
  release(): void {
    if (--this.refs === 0) this.buffers.give(this.buf);
  }
}
