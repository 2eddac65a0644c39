/**
 * A console client's acknowledgements of the output it has shown (the `ack` frame of
 * remote-frames.ts), one frame per CONSOLE_ACK_EVERY bytes shown instead of one per output frame.
 * The broker pauses a console once CONSOLE_UNACKED_MAX (1 MiB) is un-acknowledged; a client that
 * acknowledges every 64 KiB keeps the broker's count far below that, so output never waits on an
 * acknowledgement held back, and a typed keystroke's echo costs no frame back (nor a timer) at all.
 * A client that stops showing output stops acknowledging it, and the broker stops the device's
 * output at 1 MiB as before.
 */

/** Output shown and not yet acknowledged, at most, before one `ack` frame says so: 1/16 of the broker's bound. */
export const CONSOLE_ACK_EVERY = 64 * 1024;

export class ConsoleAcks {
  private shownBytes = 0;

  constructor(
    private readonly sendAck: (bytes: number) => void,
    private readonly every = CONSOLE_ACK_EVERY,
  ) {}

  /** Bytes not acknowledged yet (less than `every`). */
  get pending(): number {
    return this.shownBytes;
  }

  /** `bytes` of output were shown: acknowledged once CONSOLE_ACK_EVERY of them add up. */
  shown(bytes: number): void {
    this.shownBytes += bytes;
    if (this.shownBytes < this.every) return;
    const n = this.shownBytes;
    this.shownBytes = 0;
    this.sendAck(n);
  }

  /** A new connection (a re-attach): the broker counts its output afresh. */
  reset(): void {
    this.shownBytes = 0;
  }
}
