import { Channel, DEFAULT_WINDOW, type ChannelHost, type FramePayload } from '../../shared/mux-channel.js';
import { BULK_FRAME } from '../../shared/mux-scheduler.js';
import type { TunnelParams } from '../../shared/protocol.js';

/**
 * A tunnel channel whose mux is the test: each frame's payload is recorded as the buffers it came in
 * (views, not copies) and reported flushed at once; frames are sent only when `pump` is called.
 */
export function recordingChannel(options: { messageMode?: boolean } = {}) {
  const frames: FramePayload[] = [];
  let waiting: Channel | undefined;
  const host: ChannelHost = {
    send: () => {},
    sendData: (_ch, payload, flushed) => {
      frames.push(payload);
      flushed?.();
    },
    schedule: (c) => (waiting = c),
    forget: () => {},
  };
  const params: TunnelParams = { proto: options.messageMode ? 'udp' : 'tcp', port: 1, dst: '127.0.0.1' };
  const channel = new Channel(host, 1, 'tunnel', params, DEFAULT_WINDOW, options.messageMode ?? false);
  const pump = (maxFrame = BULK_FRAME) => {
    while (waiting && waiting.sendFrame(maxFrame) > 0);
  };
  const bytes = (f: FramePayload) => (Buffer.isBuffer(f) ? f : Buffer.concat(f));
  return { channel, frames, pump, bytes };
}
