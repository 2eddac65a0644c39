/**
 * A raw client for the remote-access WebSocket endpoints, recording every frame, for tests that
 * check the wire format itself (remote-api.md).
 */
import crypto from 'node:crypto';
import WebSocket from 'ws';

export interface RecordedSession {
  ws: WebSocket;
  /** JSON text frames from the server, in order */
  frames: any[];
  /** binary bytes from the server, concatenated */
  bytes(): Buffer;
  /** resolves with the close code and reason */
  closed: Promise<{ code: number; reason: string }>;
  /** resolves once the server sent a frame of this type */
  frame(type: string): Promise<any>;
  /** resolves once the binary output contains `text` */
  output(text: string | RegExp): Promise<string>;
  /** resolves once `ready` came (rejects on close before it) */
  ready: Promise<void>;
}

export function remoteUrl(baseUrl: string, kind: 'console' | 'tunnel' | 'copy', query: Record<string, string | number | undefined>): string {
  const url = new URL(`${baseUrl.replace(/^http/, 'ws')}/api/v2/remote/${kind}`);
  for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
  return url.toString();
}

export function connectRemote(
  baseUrl: string,
  kind: 'console' | 'tunnel' | 'copy',
  query: Record<string, string | number | undefined>,
  token?: string,
): RecordedSession {
  const ws = new WebSocket(remoteUrl(baseUrl, kind, query), token ? { headers: { authorization: `Bearer ${token}` } } : {});
  const frames: any[] = [];
  const chunks: Buffer[] = [];
  const waiters: (() => void)[] = [];
  const notify = () => waiters.splice(0).forEach((w) => w());
  const until = <T>(check: () => T | undefined): Promise<T> =>
    new Promise((resolve, reject) => {
      const attempt = () => {
        const value = check();
        if (value !== undefined) return resolve(value);
        if (ws.readyState === WebSocket.CLOSED) return reject(new Error(`closed before it came; frames: ${JSON.stringify(frames)}`));
        waiters.push(attempt);
      };
      attempt();
    });
  ws.on('message', (data, isBinary) => {
    if (isBinary) chunks.push(data as Buffer);
    else frames.push(JSON.parse(String(data)));
    notify();
  });
  ws.on('error', () => {});
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => {
      resolve({ code, reason: reason.toString() });
      notify();
    }),
  );
  const bytes = () => Buffer.concat(chunks);
  const ready = until(() => (frames.some((f) => f.type === 'ready') ? true : undefined)).then(() => undefined);
  ready.catch(() => {}); // refused sessions never get ready; tests that care await it
  return {
    ws,
    frames,
    bytes,
    closed,
    frame: (type) => until(() => frames.find((f) => f.type === type)),
    output: (text) =>
      until(() => {
        const s = bytes().toString('utf8');
        return (typeof text === 'string' ? s.includes(text) : text.test(s)) ? s : undefined;
      }),
    ready,
  };
}

/**
 * Sends `total` bytes through a ready tunnel session, in 64 KiB chunks that each differ, waiting
 * while more than 4 MiB are unsent, then `eof`. Answers the sha256 of what it sent, for the test
 * to compare with what came back.
 */
export async function sendThroughTunnel(s: RecordedSession, total: number): Promise<string> {
  const sent = crypto.createHash('sha256');
  const chunk = crypto.randomBytes(64 * 1024);
  for (let offset = 0; offset < total; offset += chunk.length) {
    chunk.writeUInt32BE(offset, 0); // every chunk differs
    sent.update(chunk);
    s.ws.send(Buffer.from(chunk));
    while (s.ws.bufferedAmount > 4 * 1024 * 1024) await new Promise((r) => setTimeout(r, 5));
  }
  s.ws.send(JSON.stringify({ type: 'eof' }));
  return sent.digest('hex');
}
