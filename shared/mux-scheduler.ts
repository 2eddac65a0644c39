/**
 * Fair sending over one connection (mux.ts): which channel's next frame the socket gets. Each
 * channel keeps its own backlog; the scheduler hands the socket one frame at a time in round robin
 * (channels that were idle first), and never more than SEND_IN_FLIGHT_MAX un-flushed data bytes
 * sit in the WebSocket's buffer. While someone types (a small frame from a quiet channel), busy
 * channels are held to a small window for a second, so that little of theirs sits in kernel
 * buffers in front of the next keystroke.
 */
import { INTERACTIVE_HOLD_MS, MAX_FRAME, type Channel } from './mux-channel.js';

/**
 * Data bytes handed to the WebSocket and not yet flushed to the socket, at most. Whatever sits
 * there is in front of the next keystroke; the rest of each channel's backlog waits in the mux,
 * where the scheduler can still put an interactive frame first.
 */
export const SEND_IN_FLIGHT_MAX = 128 * 1024;
/** A frame at most this big from a quiet channel is interactive (keystrokes, an echo, a prompt). */
export const INTERACTIVE_FRAME_MAX = 1024;
/**
 * While someone types, a busy channel may have at most this many bytes sent and not yet credited
 * (instead of its whole window): those bytes sit in the kernel's socket buffers and the peer's, in
 * front of the next keystroke, where no scheduling can reach them any more.
 */
export const HELD_BULK_WINDOW = 128 * 1024;
/**
 * Largest data frame of a busy channel while nobody types: fewer, larger frames mean fewer system
 * calls at both ends (the agent writes each frame it reads to its target). A quiet channel's frames,
 * and every frame while someone types, stay at MAX_FRAME.
 */
export const BULK_FRAME = 128 * 1024;

function first<T>(set: Set<T>): T | undefined {
  return set.values().next().value;
}

/** What the scheduler asks of its mux. */
export interface SchedulerHost {
  /** whether the connection is gone (nothing is sent any more) */
  isClosed(): boolean;
  /** every open channel, to give held ones their turn again */
  channels(): Iterable<Channel>;
}

export class SendScheduler {
  /** Channels with a backlog, in the order they are served: idle ones first, then the busy ones. */
  private readonly newFlows = new Set<Channel>();
  private readonly oldFlows = new Set<Channel>();
  private inFlight = 0;
  private pumping = false;
  /** Until when busy channels are held to HELD_BULK_WINDOW (see holdBulk). */
  private interactiveUntil = 0;
  private holdTimer?: NodeJS.Timeout;

  constructor(private readonly host: SchedulerHost) {}

  /** A data frame was handed to the socket: counted in flight until `flushed`. */
  sent(n: number): void {
    this.inFlight += n;
  }

  /** The socket took a frame's bytes: room for the next one. */
  flushed(n: number): void {
    this.inFlight -= n;
    this.pump();
  }

  /** A channel has data to send (a write, or new credit for its backlog). */
  schedule(channel: Channel): void {
    if (this.newFlows.has(channel) || this.oldFlows.has(channel)) return;
    // A channel that was idle (a keystroke, a resize's redraw) is served before the busy ones; a
    // busy one whose next write arrives (its last one flushed) takes its turn among them.
    (channel.quiet ? this.newFlows : this.oldFlows).add(channel);
    this.pump();
  }

  /**
   * A quiet channel's lone small write (Channel.write), sent at once past the channel's Writable and
   * the rotation when nothing waits in the scheduler (no channel in the rotation, room in flight, not
   * in the middle of a turn) and the channel is not one held to HELD_BULK_WINDOW: what `pump` would
   * have sent within the same call. It holds the busy channels as the rotation's interactive frames
   * do. Returns false, having sent nothing, when the write must take its turn.
   */
  sendAtOnce(channel: Channel, chunk: Buffer): boolean {
    if (this.pumping || this.inFlight >= SEND_IN_FLIGHT_MAX || this.newFlows.size > 0 || this.oldFlows.size > 0 || this.host.isClosed()) return false;
    if (channel.uncredited >= HELD_BULK_WINDOW && this.holdingBulk()) return false;
    const sent = channel.sendCopy(chunk);
    if (sent <= INTERACTIVE_FRAME_MAX && channel.quiet) this.holdBulk();
    return true;
  }

  /** A channel is gone: it leaves the rotation. */
  forget(channel: Channel): void {
    this.newFlows.delete(channel);
    this.oldFlows.delete(channel);
  }

  /** The connection is gone: nothing waits for a turn any more. */
  stop(): void {
    this.newFlows.clear();
    this.oldFlows.clear();
    clearTimeout(this.holdTimer);
  }

  /**
   * Hands frames to the socket while it has room: one frame per turn per channel, idle-then-busy
   * channels first, then the busy ones in round robin. A channel with nothing it may send (no
   * data, or no credit) leaves the rotation until it schedules itself again.
   */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.host.isClosed() && this.inFlight < SEND_IN_FLIGHT_MAX) {
        const channel = first(this.newFlows) ?? first(this.oldFlows);
        if (!channel) return;
        this.newFlows.delete(channel);
        this.oldFlows.delete(channel);
        if (!channel.sendable) continue;
        if (channel.uncredited >= HELD_BULK_WINDOW && this.holdingBulk()) continue; // its credit, or the hold's end, brings it back
        const sent = channel.sendFrame(channel.quiet || this.holdingBulk() ? MAX_FRAME : BULK_FRAME);
        if (sent <= INTERACTIVE_FRAME_MAX && channel.quiet) this.holdBulk();
        // The write callback may have queued the channel's next chunk, which scheduled it anew.
        this.newFlows.delete(channel);
        if (channel.sendable) this.oldFlows.add(channel);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Someone types: busy channels are held to HELD_BULK_WINDOW until INTERACTIVE_HOLD_MS after the last keystroke. */
  private holdBulk(): void {
    this.interactiveUntil = Date.now() + INTERACTIVE_HOLD_MS;
    if (this.holdTimer) return;
    const release = () => {
      const left = this.interactiveUntil - Date.now();
      if (left > 0 && !this.host.isClosed()) {
        this.holdTimer = setTimeout(release, left);
        this.holdTimer.unref?.();
        return;
      }
      this.holdTimer = undefined;
      // Channels held back wait for no credit: give them their turn again.
      for (const channel of this.host.channels()) if (channel.sendable) this.schedule(channel);
    };
    this.holdTimer = setTimeout(release, INTERACTIVE_HOLD_MS);
    this.holdTimer.unref?.();
  }

  private holdingBulk(): boolean {
    return this.interactiveUntil > Date.now();
  }
}
