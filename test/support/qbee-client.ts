/**
 * A qbee remote-access client as qbee-cli behaves (from the public description of qbee's transport):
 * GET /device/<id> with `Connection: upgrade`, `Upgrade: websocket`, `Sec-WebSocket-Protocol:
 * qbee-v1` and the bare token as `Authorization`; after `101`, an smux v2 client session on the
 * connection; one stream per operation, opened with a message and answered with OK or ERROR.
 */
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { encodeQbeeMessage, FILE_DOWNLOAD, FILE_UPLOAD, PTY_RESIZE, QBEE_PROTOCOL, QbeeMessage, readQbeeMessage } from '../../shared/qbee.js';
import { SmuxSession, type SmuxStream } from '../../shared/smux.js';

export class QbeeRemoteError extends Error {}

export interface QbeeClient {
  session: SmuxSession;
  /** the upgraded connection, to watch the raw smux frames */
  socket: Socket;
  /** Opens a stream with a message; resolves with the stream and the OK payload, rejects with the ERROR sentence. */
  open(type: number, payload?: Buffer | string): Promise<{ stream: SmuxStream; payload: Buffer }>;
  tcpTunnel(hostPort: string): Promise<SmuxStream>;
  terminal(cols: number, rows: number): Promise<{ stream: SmuxStream; sid: string }>;
  resize(sid: string, cols: number, rows: number): Promise<void>;
  reload(): Promise<void>;
  /** The gzip'd tar the device sends for `path` (asked with qbee's MessageTypeFile 0x20 unless told). */
  download(path: string, type?: number): Promise<Buffer>;
  /** Sends a gzip'd tar to extract at `path`; resolves on the device's OK. */
  upload(path: string, archive: Buffer, type?: number): Promise<void>;
  close(): void;
}

/** The HTTP status and body of a refused upgrade. */
export class QbeeUpgradeRefused extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`upgrade refused with ${status}: ${body}`);
  }
}

export function collect(stream: SmuxStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    stream.on('data', (d: Buffer) => parts.push(d));
    stream.once('end', () => resolve(Buffer.concat(parts)));
    stream.once('close', () => resolve(Buffer.concat(parts)));
    stream.once('error', reject);
    stream.resume();
  });
}

/**
 * As qbee-cli's getConnectClient (connect.go): GetDeviceStatus, refuse an edge version other than 1,
 * then `https://<edge>/device/<uuid>`, the certificate checked unless the edge starts with
 * `edge:` or `localhost:` (InsecureSkipVerify). `ca` stands in for the system's trust store.
 */
export async function connectQbeeEdge(apiBase: string, deviceId: string, token: string, options: { ca?: Buffer } = {}): Promise<QbeeClient> {
  const status = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const url = new URL(`/api/v2/device/${deviceId}/status`, apiBase);
    const req = (url.protocol === 'https:' ? https : http).request(url, { headers: { Authorization: `Bearer ${token}` }, ca: options.ca }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
  if (status.status !== 200) throw new Error(`status answered ${status.status}: ${status.body}`);
  const device = JSON.parse(status.body) as { uuid: string; remote_access: boolean; edge?: string; edge_version?: number };
  if (!device.remote_access) throw new Error(`remote access is not available for device ${deviceId}`);
  if (device.edge_version !== 1) throw new Error(`unsupported edge version ${device.edge_version ?? 0}`);
  const edge = device.edge ?? '';
  const insecure = edge.startsWith('edge:') || edge.startsWith('localhost:');
  return connectQbee(`https://${edge}`, device.uuid, token, insecure ? { rejectUnauthorized: false } : { ca: options.ca });
}

export async function connectQbee(brokerUrl: string, deviceId: string, token: string, tlsOptions: https.RequestOptions = {}): Promise<QbeeClient> {
  const url = new URL(`/device/${deviceId}`, brokerUrl);
  const { socket, head } = await new Promise<{ socket: Socket; head: Buffer }>((resolve, reject) => {
    const req = (url.protocol === 'https:' ? https : http).request(url, {
      ...tlsOptions,
      method: 'GET',
      headers: { Connection: 'upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Protocol': QBEE_PROTOCOL, Authorization: token },
    });
    req.on('upgrade', (res, socket, head) => {
      if (res.headers['sec-websocket-protocol'] !== QBEE_PROTOCOL) return reject(new Error('no qbee-v1 in the answer'));
      resolve({ socket, head });
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => reject(new QbeeUpgradeRefused(res.statusCode ?? 0, body)));
    });
    req.on('error', reject);
    req.end();
  });
  const session = new SmuxSession(socket, { side: 'client' });
  session.feed(head);

  const open = async (type: number, payload: Buffer | string = Buffer.alloc(0)) => {
    const stream = session.openStream();
    stream.write(encodeQbeeMessage(type, payload));
    const answer = await readQbeeMessage(stream);
    if (answer.type === QbeeMessage.error) {
      stream.destroy();
      throw new QbeeRemoteError(answer.payload.toString());
    }
    if (answer.type !== QbeeMessage.ok) throw new Error(`unexpected answer ${answer.type}`);
    return { stream, payload: answer.payload };
  };

  return {
    session,
    socket,
    open,
    tcpTunnel: async (hostPort) => (await open(QbeeMessage.tcpTunnel, hostPort)).stream,
    terminal: async (cols, rows) => {
      const { stream, payload } = await open(QbeeMessage.pty, JSON.stringify({ sid: '', type: PTY_RESIZE, cols, rows }));
      return { stream, sid: payload.toString() };
    },
    resize: async (sid, cols, rows) => {
      const { stream } = await open(QbeeMessage.ptyCommand, JSON.stringify({ sid, type: PTY_RESIZE, cols, rows }));
      stream.destroy();
    },
    reload: async () => {
      const { stream } = await open(QbeeMessage.reload);
      stream.destroy();
    },
    download: async (path, type = QbeeMessage.file) => {
      const { stream } = await open(type, JSON.stringify({ direction: FILE_DOWNLOAD, path }));
      return collect(stream);
    },
    upload: async (path, archive, type = QbeeMessage.file) => {
      const { stream } = await open(type, JSON.stringify({ direction: FILE_UPLOAD, path }));
      stream.write(archive);
      const answer = await readQbeeMessage(stream, 60_000);
      stream.destroy();
      if (answer.type !== QbeeMessage.ok) throw new QbeeRemoteError(answer.payload.toString());
    },
    close: () => session.close('client done'),
  };
}
