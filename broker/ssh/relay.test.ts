import { EventEmitter } from 'node:events';
import type { ServerChannel } from 'ssh2';
import { describe, expect, it } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import { SshRelay } from './relay.js';

/** The agent's side as the relay uses it: data from the device, credit as pause/resume. */
class FakeChannel extends EventEmitter {
  destroyed = false;
  writableEnded = false;
  private paused = false;
  control(): void {}
  isPaused(): boolean {
    return this.paused;
  }
  pause(): void {
    this.paused = true;
  }
  resume(): void {
    this.paused = false;
  }
  write(): boolean {
    return true;
  }
  destroy(): void {
    this.destroyed = true;
  }
}

/** The SSH client's channel: what was written to it, and whether it takes more. */
class FakeStream extends EventEmitter {
  destroyed = false;
  writableEnded = false;
  full = false;
  written: Buffer[] = [];
  write(chunk: Buffer): boolean {
    this.written.push(chunk);
    return !this.full;
  }
  isPaused(): boolean {
    return false;
  }
  pause(): void {}
  resume(): void {}
  text(): string {
    return Buffer.concat(this.written).toString();
  }
}

describe('SshRelay', () => {
  it("writes a console's output to the client before recording it, and records what the client no longer takes", () => {
    const channel = new FakeChannel();
    const stream = new FakeStream();
    const events: string[] = [];
    const recorder = { output: (chunk: Buffer) => events.push(`o:${chunk.toString()}:${stream.text().length}`) };
    const relay = new SshRelay(stream as unknown as ServerChannel, channel as unknown as Channel, { kind: 'console', size: { cols: 80, rows: 24 }, recorder });
    relay.start();
    channel.emit('data', Buffer.from('a'));
    stream.full = true;
    channel.emit('data', Buffer.from('b'));
    expect(channel.isPaused()).toBe(true);
    expect(events).toEqual(['o:a:1', 'o:b:2']);
    stream.writableEnded = true; // the client's side is ending: nothing more is written, all is still recorded
    channel.emit('data', Buffer.from('c'));
    expect(events).toEqual(['o:a:1', 'o:b:2', 'o:c:2']);
  });

  it("passes a command's input and output at once when no RAW_MARKER is to come (the agent ran the line itself), and waits for it otherwise", () => {
    const run = (marker: boolean | undefined) => {
      const channel = new FakeChannel();
      const stream = new FakeStream();
      let paused = false;
      stream.pause = () => void (paused = true);
      stream.resume = () => void (paused = false);
      stream.isPaused = () => paused;
      const relay = new SshRelay(stream as unknown as ServerChannel, channel as unknown as Channel, {
        kind: 'console',
        raw: true,
        ...(marker === undefined ? {} : { marker }),
      });
      relay.start();
      channel.emit('data', Buffer.from('out-1'));
      return { stream, paused: () => paused };
    };
    const direct = run(false);
    expect(direct.paused()).toBe(false);
    expect(direct.stream.text()).toBe('out-1');
    // RAW_SCRIPT's marker still awaited where the agent runs the script (an older agent): output held, input paused.
    for (const marker of [true, undefined]) {
      const scripted = run(marker);
      expect(scripted.paused()).toBe(true);
      expect(scripted.stream.text()).toBe('');
    }
  });
});
