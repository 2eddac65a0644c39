/**
 * A raw client for the remote-access WebSocket endpoints, recording every frame, for tests that
 * check the wire format itself (remote-api.md).
 */
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
