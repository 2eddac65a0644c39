import { Channel, DEFAULT_WINDOW, type ChannelHost, type FramePayload } from '../../shared/mux-channel.js';
import { BULK_FRAME } from '../../shared/mux-scheduler.js';
import type { TunnelParams } from '../../shared/protocol.js';

const bytesOf = (f: FramePayload) => (Buffer.isBuffer(f) ? f : Buffer.concat(f));

/**
 * A tunnel channel whose mux is the test: each frame's payload is recorded as the buffers it came in
 * (`frames`: views, not copies, for checks of where the bytes lie) and as a copy of its bytes when it
 * was sent (`sent`: what the device would get, whatever the writer does with its buffers later).
 * Frames are sent only when `pump` is called. Each frame is reported flushed at once, or, with
 * `holdFlushes`, only when `flush` is called (a socket to the device that does not drain): at that
 * point its views must still hold the bytes that were sent, else `overwritten` counts it (a writer
 * that reused a buffer before its write was done).
 */
export function recordingChannel(options: { messageMode?: boolean; holdFlushes?: boolean } = {}) {
  const frames: FramePayload[] = [];
  const sent: Buffer[] = [];
  const held: (() => void)[] = [];
  let overwritten = 0;
  let waiting: Channel | undefined;
  const host: ChannelHost = {
    send: () => {},
    sendData: (_ch, payload, flushed) => {
      const copy = Buffer.from(bytesOf(payload));
      frames.push(payload);
      sent.push(copy);
      const done = () => {
        if (!bytesOf(payload).equals(copy)) overwritten++;
        flushed?.();
      };
      if (options.holdFlushes) held.push(done);
      else done();
    },
    schedule: (c) => (waiting = c),
    forget: () => {},
  };
  const params: TunnelParams = { proto: options.messageMode ? 'udp' : 'tcp', port: 1, dst: '127.0.0.1' };
  const channel = new Channel(host, 1, 'tunnel', params, DEFAULT_WINDOW, options.messageMode ?? false);
  const pump = (maxFrame = BULK_FRAME) => {
    while (waiting && waiting.sendFrame(maxFrame) > 0);
  };
  /** Reports the held frames flushed (all, or the first `count`), in order. */
  const flush = (count = held.length) => {
    for (const done of held.splice(0, count)) done();
  };
  return {
    channel,
    frames,
    sent,
    pump,
    flush,
    bytes: bytesOf,
    /** Frames whose views no longer held their bytes when reported flushed. */
    overwritten: () => overwritten,
    /** Frames sent but not yet reported flushed. */
    unflushed: () => held.length,
  };
}
