/**
 * qbee's native remote-access transport ("qbee-v1"), as its clients (qbee-cli) speak it to an edge:
 * an HTTP request to `/device/<id>` upgraded with `Upgrade: websocket`,
 * `Sec-WebSocket-Protocol: qbee-v1` and the user's token as the raw `Authorization` value, then an
 * smux v2 session (shared/smux.ts) on the bare connection, no WebSocket framing. The client opens one
 * stream per operation; each stream starts with one message, answered by OK (with an optional
 * payload) or ERROR (a sentence), after which the stream carries the operation's bytes.
 *
 * Message: TYPE(1) | LENGTH(2, big-endian) | PAYLOAD(LENGTH).
 */
import type { Readable } from 'node:stream';

export const QBEE_PROTOCOL = 'qbee-v1';
export const QBEE_DEVICE_PATH_PREFIX = '/device/';
export const QBEE_MAX_PAYLOAD = 0xffff;

export const QbeeMessage = {
  ok: 0x01,
  error: 0x02,
  goAway: 0x03,
  /** payload `host:port` */
  tcpTunnel: 0x10,
  /** payload `suggested-local-port:host:port`; then datagrams as PORT(2) | LENGTH(2) | DATA, big-endian */
  udpTunnel: 0x11,
  /**
   * payload JSON `{"sid":"","type":0,"cols":n,"rows":n}`, with `"command":"…","command_args":[…]` to run
   * a command instead of the login shell; OK carries the session id for resizes
   */
  pty: 0x12,
  /** payload JSON `{"sid":"<from the PTY OK>","type":0,"cols":n,"rows":n}` on a stream of its own */
  ptyCommand: 0x13,
  /** restart the agent's work loop; empty payload */
  reload: 0x14,
  /** a command without a terminal */
  command: 0x15,
  /**
   * payload JSON `{"direction":0|1,"path":"/abs"}`, 0 download, 1 upload; then a gzip'd tar. 0x20 is
   * qbee's MessageTypeFile (go.qbee.io/transport); 0x16, what this broker spoke first, is still taken.
   */
  file: 0x20,
  fileLegacy: 0x16,
} as const;

export const PTY_RESIZE = 0;
export const FILE_DOWNLOAD = 0;
export const FILE_UPLOAD = 1;

export function encodeQbeeMessage(type: number, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  if (body.length > QBEE_MAX_PAYLOAD) throw new Error(`payload too large: ${body.length} bytes`);
  const header = Buffer.allocUnsafe(3);
  header.writeUInt8(type, 0);
  header.writeUInt16BE(body.length, 1);
  return Buffer.concat([header, body]);
}

/**
 * Reads one message from the start of a stream and leaves what follows it unread. At most one
 * message (64 KiB) is held. Rejects if the stream ends first or nothing complete arrives in time.
 * The stream is left paused: pipe it, or resume it once its 'data' listeners are on.
 */
export function readQbeeMessage(stream: Readable, timeoutMs = 15_000): Promise<{ type: number; payload: Buffer }> {
  return new Promise((resolve, reject) => {
    let held: Buffer = Buffer.alloc(0);
    const finish = (error?: Error, result?: { type: number; payload: Buffer }) => {
      clearTimeout(timer);
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('close', onEnd);
      stream.pause();
      if (error) reject(error);
      else resolve(result!);
    };
    const onEnd = () => finish(new Error('stream ended before a complete message'));
    const onData = (chunk: Buffer) => {
      held = held.length ? Buffer.concat([held, chunk]) : chunk;
      if (held.length < 3) return;
      const length = held.readUInt16BE(1);
      if (held.length < 3 + length) return;
      const rest = held.subarray(3 + length);
      finish(undefined, { type: held.readUInt8(0), payload: Buffer.from(held.subarray(3, 3 + length)) });
      if (rest.length) stream.unshift(rest);
    };
    const timer = setTimeout(() => finish(new Error('no message in time')), timeoutMs);
    timer.unref();
    stream.on('data', onData);
    stream.once('end', onEnd);
    stream.once('close', onEnd);
    stream.resume();
  });
}

/** `host:port` or `[v6]:port`, as Go's net.JoinHostPort writes it. */
export function splitHostPort(text: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
  if (!m) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1] ?? m[2], port };
}
