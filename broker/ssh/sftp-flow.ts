/**
 * What the sftp bridge needs of ssh2's SFTP server beyond its public methods, kept in this one
 * place (ssh2 1.x): the `limits@openssh.com` extension (the VERSION that announces it and its
 * answer), the SSH channel's flow both ways (does the client's window hold an answer, is ssh2
 * holding answers it had no room for, and when does the window open again; holding the client's
 * window while an upload's device channel is full), and a READ's answer written straight into
 * ssh2's SSH packets.
 */
import { createRequire } from 'node:module';
import type { SftpStream } from './sftp-answers.js';

/**
 * Largest READ answered whole and largest WRITE taken, told to the client by `limits@openssh.com`
 * (OpenSSH's sftp-server tells the same): OpenSSH's sftp and scp then read and write in pieces of
 * this size instead of 32 KiB, eight times fewer requests, answers and status round trips per MB.
 */
export const SFTP_READ_MAX = 255 * 1024;
export const SFTP_WRITE_MAX = 255 * 1024;
/** Largest SFTP packet taken (ssh2's own bound on what it parses). */
const SFTP_PACKET_MAX = 256 * 1024;
/** ssh2's window for what the client sends on a channel, and the point below which it is topped up. */
const CHANNEL_WINDOW = 2 * 1024 * 1024;

const FXP_VERSION = 2;
const FXP_DATA = 103;
const FXP_EXTENDED_REPLY = 201;
/** SSH_MSG_CHANNEL_DATA (RFC 4254). */
const MSG_CHANNEL_DATA = 94;
/** SFTP DATA's head: length, type, request id, data length. */
const DATA_HEAD = 4 + 1 + 4 + 4;
const LIMITS = 'limits@openssh.com';

/** ssh2's packet writer of a connection: a packet's buffer with room for its head, and the packet made whole (compressed, when that was agreed). */
interface Ssh2PacketWriter {
  allocStart: number;
  alloc(payloadLength: number): Buffer;
  finalize(packet: Buffer): Buffer;
}

/** The internals of ssh2's SFTP stream (and of its connection) used here. */
interface Ssh2Sftp {
  outgoing: { id: number; state: string; window: number; packetSize: number };
  incoming: { window: number };
  _buffer: Buffer[];
  _chunkcb?: () => void;
  _protocol: {
    channelData(id: number, data: Buffer): void;
    channelWindowAdjust(id: number, amount: number): void;
    _packetRW?: { write?: Ssh2PacketWriter };
  };
  push(data: Buffer | null): unknown;
}

const ssh2 = (sftp: SftpStream) => sftp as unknown as Ssh2Sftp;

/** ssh2's own packet sender (encrypts, or queues while keys are being exchanged), as its channelData uses it. */
const sendPacket = (() => {
  try {
    const utils = createRequire(import.meta.url)('ssh2/lib/protocol/utils.js') as { sendPacket?: (protocol: unknown, packet: Buffer) => void };
    return typeof utils.sendPacket === 'function' ? utils.sendPacket : undefined;
  } catch {
    return undefined;
  }
})();

/** SSH string: uint32 length, then the bytes. */
function sshString(text: string): Buffer {
  const bytes = Buffer.from(text);
  const out = Buffer.alloc(4 + bytes.length);
  out.writeUInt32BE(bytes.length);
  bytes.copy(out, 4);
  return out;
}

/** VERSION 3 announcing `limits@openssh.com` (ssh2's own announces no extension). */
export function versionPacket(): Buffer {
  const body = Buffer.concat([Buffer.from([FXP_VERSION, 0, 0, 0, 3]), sshString(LIMITS), sshString('1')]);
  const out = Buffer.alloc(4 + body.length);
  out.writeUInt32BE(body.length);
  body.copy(out, 4);
  return out;
}

/** EXTENDED_REPLY to `limits@openssh.com`: packet, read and write lengths, open handles (0: not told). */
export function limitsPacket(reqid: number): Buffer {
  const out = Buffer.alloc(4 + 1 + 4 + 4 * 8);
  out.writeUInt32BE(out.length - 4);
  out[4] = FXP_EXTENDED_REPLY;
  out.writeUInt32BE(reqid >>> 0, 5);
  out.writeBigUInt64BE(BigInt(SFTP_PACKET_MAX), 9);
  out.writeBigUInt64BE(BigInt(SFTP_READ_MAX), 17);
  out.writeBigUInt64BE(BigInt(SFTP_WRITE_MAX), 25);
  // The open-file limit is not told: OpenSSH would take it as its number of requests in flight.
  out.writeBigUInt64BE(0n, 33);
  return out;
}

/**
 * The flow of one sftp session's SSH channel. `canAnswer`: the client's window has room for a READ's
 * whole answer and ssh2 holds none it had no room for (`backlogged`); else the READ is not answered
 * yet (its data stays at the device, see SftpFile) and `onWindow` hears the window open.
 * `answerData`: the answer, copied once into SSH packets. `hold`/`release`: while any holder holds,
 * the client's window is not topped up, so a client that sends WRITEs faster than the device takes
 * them is stopped by SSH itself once its window is spent.
 */
export class SftpFlow {
  private readonly holders = new Set<object>();
  private readonly listeners: (() => void)[] = [];
  private limitsAnnounced = false;
  /** The window the client opened the channel with: an answer larger than it is never waited for. */
  private initialWindow = 0;
  /** An answer waits for the client's window (canAnswer): its opening is to be heard. */
  private awaitingWindow = false;

  constructor(private readonly sftp: SftpStream) {}

  /** Installs the hooks; call before the client's INIT can arrive (right after the subsystem is accepted). */
  start(): void {
    const raw = ssh2(this.sftp);
    if (!raw._protocol || !raw.outgoing || !Array.isArray(raw._buffer)) return; // not ssh2's stream (tests): flow as plain events
    this.initialWindow = raw.outgoing.window;
    this.announceLimits(raw);
    // ssh2 calls the stream's _chunkcb when the client's window opens while _waitWindow is set: it
    // sets both when it runs out of window with answers left (its drain of them), and this sets
    // _waitWindow when an answer waits for more window than there is (canAnswer).
    let chunkcb: (() => void) | undefined;
    const opened = () => this.windowOpened();
    Object.defineProperty(raw, '_chunkcb', {
      configurable: true,
      get: () =>
        (chunkcb || this.awaitingWindow) &&
        function (this: unknown) {
          chunkcb?.call(this);
          opened();
        },
      set: (fn: (() => void) | undefined) => (chunkcb = fn),
    });
    // While held, ssh2 is told the stream is full: it then stops topping up the client's window.
    const push = raw.push.bind(raw);
    raw.push = (data) => {
      const taken = push(data);
      return this.holders.size > 0 && data !== null ? false : taken;
    };
  }

  get backlogged(): boolean {
    const raw = ssh2(this.sftp);
    return Array.isArray(raw._buffer) && raw._buffer.length > 0;
  }

  onWindow(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** Called by the tests' fake stream, and by the hook on ssh2's. */
  windowOpened(): void {
    this.awaitingWindow = false;
    for (const listener of this.listeners) listener();
  }

  /**
   * Whether a READ's answer of `length` bytes goes out now. Not while ssh2 holds answers (backlogged);
   * not while the client's window has no room for all of it: it then waits for the window to open
   * (heard through ssh2's WINDOW_ADJUST handling), to leave whole through answerData, where ssh2
   * would send what fits and buffer the rest, and every later answer behind it, in copies of its
   * own. An answer larger than the window the client opened with could never fit: it goes now,
   * through ssh2.
   */
  canAnswer(length: number): boolean {
    if (this.backlogged) return false;
    const raw = ssh2(this.sftp);
    if (!raw.outgoing || !raw._protocol) return true;
    const total = DATA_HEAD + length;
    if (raw.outgoing.window >= total || total > this.initialWindow) return true;
    this.awaitingWindow = true;
    (raw as unknown as { _waitWindow: boolean })._waitWindow = true;
    return false;
  }

  hold(holder: object): void {
    this.holders.add(holder);
  }

  /** The last holder gone: the client's window is topped up again (as ssh2 would have on its next packet). */
  release(holder: object): void {
    if (!this.holders.delete(holder) || this.holders.size > 0) return;
    const raw = ssh2(this.sftp);
    if (!raw._protocol || !raw.incoming || raw.outgoing?.state !== 'open') return;
    const amount = CHANNEL_WINDOW - raw.incoming.window;
    if (raw.incoming.window > CHANNEL_WINDOW / 2 || amount <= 0) return;
    raw.incoming.window += amount;
    raw._protocol.channelWindowAdjust(raw.outgoing.id, amount);
  }

  /**
   * Answers a READ with `parts` (`length` bytes in all, read only) as SFTP DATA, its bytes copied
   * once, straight into the SSH packets: ssh2's `data()` copies the answer whole into a buffer of
   * its own first, and the SSH packets copy it again (with a 255 KiB READ answered from two of the
   * device's 128 KiB frames, a third copy joined them). Only when the client's window has room for
   * the whole answer and ssh2 holds nothing unsent (answers stay in order); false otherwise, having
   * sent nothing (the caller then answers through ssh2).
   */
  answerData(reqid: number, parts: readonly Buffer[], length: number): boolean {
    const raw = ssh2(this.sftp);
    const writer = raw._protocol?._packetRW?.write;
    const total = DATA_HEAD + length;
    if (!sendPacket || !writer || raw.outgoing?.state !== 'open' || !Array.isArray(raw._buffer) || raw._buffer.length > 0) return false;
    if (raw.outgoing.window < total || !(raw.outgoing.packetSize > DATA_HEAD)) return false;
    if (parts.reduce((n, part) => n + part.length, 0) !== length) return false;
    const head = Buffer.allocUnsafe(DATA_HEAD);
    head.writeUInt32BE(total - 4, 0);
    head[4] = FXP_DATA;
    head.writeUInt32BE(reqid >>> 0, 5);
    head.writeUInt32BE(length, 9);
    raw.outgoing.window -= total;
    const pieces = [head, ...parts];
    let piece = 0;
    let at = 0;
    for (let left = total; left > 0;) {
      const n = Math.min(left, raw.outgoing.packetSize);
      // CHANNEL_DATA: message, recipient channel, data length, data (as ssh2's channelData lays it out).
      let p = writer.allocStart;
      const packet = writer.alloc(1 + 4 + 4 + n);
      packet[p] = MSG_CHANNEL_DATA;
      packet.writeUInt32BE(raw.outgoing.id, p + 1);
      packet.writeUInt32BE(n, p + 5);
      p += 9;
      for (let want = n; want > 0;) {
        const from = pieces[piece];
        const copied = from.copy(packet, p, at, Math.min(from.length, at + want));
        p += copied;
        want -= copied;
        at += copied;
        if (at === from.length) {
          piece += 1;
          at = 0;
        }
      }
      sendPacket(raw._protocol, writer.finalize(packet));
      left -= n;
    }
    return true;
  }

  /** Answers `limits@openssh.com` (ssh2 has no method for an EXTENDED_REPLY); false when it cannot (then the caller refuses it). */
  answerLimits(reqid: number): boolean {
    const raw = ssh2(this.sftp);
    if (!this.limitsAnnounced || raw.outgoing?.state !== 'open') return false;
    const packet = limitsPacket(reqid);
    // Sent as ssh2 would: only with the window's room and nothing of ssh2's waiting before it.
    if (raw._buffer.length > 0 || raw.outgoing.window < packet.length || packet.length > raw.outgoing.packetSize) return false;
    raw.outgoing.window -= packet.length;
    raw._protocol.channelData(raw.outgoing.id, packet);
    return true;
  }

  /**
   * ssh2 answers INIT with a VERSION of its own, announcing nothing: the first packet it sends is
   * swapped for one announcing `limits@openssh.com` (its window accounted for), then ssh2's
   * connection is written to directly again.
   */
  private announceLimits(raw: Ssh2Sftp): void {
    const protocol = raw._protocol;
    const ours = versionPacket();
    raw._protocol = new Proxy(protocol, {
      get: (target, key) => {
        if (key === 'channelData')
          return (id: number, data: Buffer) => {
            raw._protocol = protocol;
            if (data.length === 9 && data[4] === FXP_VERSION && raw.outgoing.window >= ours.length - data.length) {
              raw.outgoing.window -= ours.length - data.length;
              this.limitsAnnounced = true;
              return protocol.channelData(id, ours);
            }
            return protocol.channelData(id, data);
          };
        const value: unknown = Reflect.get(target, key);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }
}
