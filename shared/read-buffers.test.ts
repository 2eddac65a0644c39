import net, { type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BULK_READ_SIZE, FIRST_READ_SIZE, IDLE_TRIM_MS, LeasedReads, ReadBuffers, ReadLease, SHARED_FIRST_READS, sharedFirstReads } from './read-buffers.js';

describe('ReadBuffers', () => {
  it('start small, and move to bulk-size reads at the first read that fills one', () => {
    const buffers = new ReadBuffers();
    const first = buffers.next();
    expect(first.length).toBe(FIRST_READ_SIZE);
    // A short read: the socket stays on small buffers, and reuses them.
    buffers.read(100, first);
    buffers.give(first);
    expect(buffers.next()).toBe(first);
    // A read that filled its buffer: bulk size from now on, and the small buffer is not kept.
    buffers.read(FIRST_READ_SIZE, first);
    buffers.give(first);
    const bulk = buffers.next();
    expect(bulk.length).toBe(BULK_READ_SIZE);
    expect(bulk).not.toBe(first);
    buffers.give(bulk);
    expect(buffers.next()).toBe(bulk);
  });

  it('keeps at most four buffers for reuse, however many are given back', () => {
    const buffers = new ReadBuffers();
    const out = Array.from({ length: 10 }, () => buffers.next());
    for (const buf of out) buffers.give(buf);
    const reused = Array.from({ length: 10 }, () => buffers.next()).filter((buf) => out.includes(buf));
    expect(reused.length).toBe(4);
  });

  it('a small buffer given back while bulk reads are out is dropped, not handed out again', () => {
    const buffers = new ReadBuffers();
    const small = buffers.next();
    const other = buffers.next();
    buffers.read(FIRST_READ_SIZE, small);
    buffers.give(other);
    expect(buffers.next().length).toBe(BULK_READ_SIZE);
  });

  it('a lease gives its buffer back once the read and every view are done, and never after a failed write', () => {
    const buffers = new ReadBuffers();
    const buf = buffers.next();
    const lease = new ReadLease(buf, buffers);
    const first = lease.hold();
    const second = lease.hold();
    lease.release();
    first();
    first(); // a second call counts once
    expect(buffers.next()).not.toBe(buf);
    second();
    expect(buffers.next()).toBe(buf);

    const failed = new ReadLease(buf, buffers);
    const view = failed.hold();
    failed.release();
    view(new Error('write EPIPE'));
    expect(buffers.next()).not.toBe(buf);
  });

  describe('after a burst', () => {
    afterEach(() => vi.useRealTimers());

    it('keeps one spare once the socket has read nothing for a while, and all four while it reads', () => {
      vi.useFakeTimers();
      const buffers = new ReadBuffers();
      const bulk = () => {
        const buf = buffers.next();
        buffers.read(buf.length, buf);
        return buf;
      };
      bulk(); // the first full read moves to bulk reads
      // A burst: four bulk buffers out at once, then all given back.
      const out = [bulk(), bulk(), bulk(), bulk()];
      for (const buf of out) buffers.give(buf);
      expect(buffers.spares).toBe(4);
      // Reads go on: nothing is dropped.
      for (let i = 0; i < 3; i++) {
        vi.advanceTimersByTime(IDLE_TRIM_MS / 2);
        buffers.give(bulk());
      }
      expect(buffers.spares).toBe(4);
      // Idle: one spare is kept, and it is reused.
      vi.advanceTimersByTime(IDLE_TRIM_MS * 2);
      expect(buffers.spares).toBe(1);
      expect(out).toContain(buffers.next());
      expect(vi.getTimerCount()).toBe(0);
    });
  });
});

describe('first read buffers shared between sockets', () => {
  afterEach(() => {
    vi.useRealTimers();
    sharedFirstReads.clear();
  });

  it('a closed socket’s buffer is the next socket’s first: sockets opened and closed one after another allocate one', () => {
    sharedFirstReads.clear();
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    let allocated = 0;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (allocated++, allocUnsafeSlow(n)));
    try {
      for (let i = 0; i < 100; i++) {
        const buffers = new ReadBuffers();
        expect(buffers.next().length).toBe(FIRST_READ_SIZE);
        buffers.closed();
      }
    } finally {
      spy.mockRestore();
    }
    // One buffer each before: 100.
    expect(allocated).toBe(1);
  });

  it('a socket moved to leased reads (a WebSocket’s) gives its buffers to the pool when it closes: sockets one after another allocate one', async () => {
    // The far end sends a few bytes and closes: each socket reads them, then its end, then closes.
    const listener = net.createServer((s) => s.end('hello'));
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    sharedFirstReads.clear();
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    let allocated = 0;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (n === FIRST_READ_SIZE && allocated++, allocUnsafeSlow(n)));
    try {
      for (let i = 0; i < 20; i++) {
        const socket = net.connect((listener.address() as AddressInfo).port, '127.0.0.1');
        await new Promise((resolve) => socket.once('connect', resolve));
        const reads = new LeasedReads(socket);
        let got = '';
        socket.on('data', (d: Buffer) => (got += d.toString()));
        expect(reads.start()).toBe(true);
        await new Promise((resolve) => socket.once('close', resolve));
        expect(got).toBe('hello');
      }
    } finally {
      spy.mockRestore();
      listener.close();
    }
    // The first socket's one (read into, given back, held for its next read); none after. Twenty sockets allocated twenty before.
    expect(allocated).toBe(1);
    expect(sharedFirstReads.size).toBe(1);
  });

  it('a leased read whose view is still held when its socket closes is never pooled', async () => {
    const listener = net.createServer((s) => s.end('hello'));
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    sharedFirstReads.clear();
    try {
      const socket = net.connect((listener.address() as AddressInfo).port, '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      const reads = new LeasedReads(socket);
      let view: Buffer | undefined;
      let release: (() => void) | undefined;
      // A write that has not flushed yet holds its view past the close.
      socket.on('data', (d: Buffer) => ((view = d), (release = reads.hold())));
      reads.start();
      await new Promise((resolve) => socket.once('close', resolve));
      expect(view?.toString()).toBe('hello');
      expect(sharedFirstReads.size).toBe(1); // only the buffer held for the next read
      release?.();
      expect(sharedFirstReads.size).toBe(1);
      expect(new ReadBuffers().next().buffer).not.toBe(view?.buffer);
    } finally {
      listener.close();
    }
  });

  it('never pools a buffer a read may still be in: only the one the socket held for its next read, and spares given back', () => {
    sharedFirstReads.clear();
    const buffers = new ReadBuffers();
    const read = buffers.next();
    buffers.read(100, read); // handed on: a write holds a view of it
    const spare = buffers.next();
    buffers.read(100, spare); // handed on too, and its write flushed: given back
    const held = buffers.next(); // the socket's next read goes here
    buffers.give(spare);
    buffers.closed();
    expect(sharedFirstReads.size).toBe(2);
    // The first write is flushed after the close: its buffer is not pooled, nor kept by the closed socket.
    buffers.give(read);
    expect(sharedFirstReads.size).toBe(2);
    expect(buffers.spares).toBe(0);
    const next = [new ReadBuffers().next(), new ReadBuffers().next(), new ReadBuffers().next()];
    expect(next).toContain(held);
    expect(next).toContain(spare);
    expect(next).not.toContain(read);
  });

  it('bulk buffers are not pooled: only first-size ones', () => {
    sharedFirstReads.clear();
    const buffers = new ReadBuffers();
    const first = buffers.next();
    buffers.read(FIRST_READ_SIZE, first); // filled: bulk reads from now on
    expect(buffers.next().length).toBe(BULK_READ_SIZE);
    buffers.closed();
    expect(sharedFirstReads.size).toBe(0);
  });

  it('a flood of sockets opened then closed leaves at most SHARED_FIRST_READS pooled, and none once idle', () => {
    vi.useFakeTimers();
    sharedFirstReads.clear();
    const sockets = Array.from({ length: 1000 }, () => new ReadBuffers());
    for (const s of sockets) s.next();
    for (const s of sockets) s.closed();
    expect(sharedFirstReads.size).toBe(SHARED_FIRST_READS);
    // Sockets still opening keep it.
    vi.advanceTimersByTime(IDLE_TRIM_MS - 1);
    new ReadBuffers().next();
    vi.advanceTimersByTime(IDLE_TRIM_MS);
    expect(sharedFirstReads.size).toBe(SHARED_FIRST_READS - 1);
    // No socket took one for IDLE_TRIM_MS: none is kept.
    vi.advanceTimersByTime(IDLE_TRIM_MS);
    expect(sharedFirstReads.size).toBe(0);
  });
});
