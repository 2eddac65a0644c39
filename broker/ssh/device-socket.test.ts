import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { ServerChannel } from 'ssh2';
import { DeviceSocket } from './device-socket.js';

/** The gateway's forwarded channel as DeviceSocket uses it: writes are recorded, its window is the test's. */
class FakeChannel extends EventEmitter {
  readonly writes: Buffer[] = [];
  destroyed = false;
  full = false;
  write(data: Buffer): boolean {
    this.writes.push(Buffer.from(data));
    return !this.full;
  }
  end() {}
  close() {
    this.destroyed = true;
  }
  pause() {}
  resume() {}
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('DeviceSocket', () => {
  it('sends what the inner connection writes in one turn as one write, so the outer packets are full', async () => {
    const channel = new FakeChannel();
    const socket = new DeviceSocket(channel as unknown as ServerChannel, '127.0.0.1');
    // ssh2 writes a packet of 32 KiB of data and then the rest of the SFTP answer, each on its own.
    const packets = [Buffer.alloc(32_800, 1), Buffer.alloc(60, 2), Buffer.alloc(32_800, 3)];
    for (const p of packets) socket.write(p);
    await turn();
    expect(channel.writes).toHaveLength(1);
    expect(channel.writes[0].equals(Buffer.concat(packets))).toBe(true);
    socket.write(Buffer.from('later'));
    await turn();
    expect(channel.writes.map(String).at(-1)).toBe('later');
  });

  it('sends what was written in the turn the inner connection is destroyed in, before closing the channel', async () => {
    const channel = new FakeChannel();
    const socket = new DeviceSocket(channel as unknown as ServerChannel, '127.0.0.1');
    // The last packets of a command (its output, exit status, close), then the connection's end, all in one turn.
    socket.write(Buffer.from('via-rsa\n'));
    socket.write(Buffer.from('exit-status'));
    socket.destroy();
    await turn();
    expect(Buffer.concat(channel.writes).toString()).toBe('via-rsa\nexit-status');
    expect(channel.destroyed).toBe(true);
  });

  it('waits for the channel to drain when the client does not read: nothing more reaches the channel meanwhile', async () => {
    const channel = new FakeChannel();
    const socket = new DeviceSocket(channel as unknown as ServerChannel, '127.0.0.1');
    channel.full = true;
    socket.write(Buffer.alloc(1000));
    await turn();
    for (let i = 0; i < 50; i++) {
      socket.write(Buffer.alloc(1000));
      await turn();
    }
    expect(channel.writes).toHaveLength(1);
    // The write the channel has not taken yet, and the 50 held behind it.
    expect(socket.writableLength).toBe(51_000);
    channel.full = false;
    channel.emit('drain');
    await turn();
    expect(channel.writes).toHaveLength(2);
    expect(channel.writes[1].length).toBe(50_000);
    expect(socket.writableLength).toBe(0);
  });
});
