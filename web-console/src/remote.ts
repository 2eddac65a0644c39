/**
 * File transfer to and from a device over the copy WebSocket (see the remote-access API):
 * upload sends binary frames then `{"type":"eof"}`; download receives `meta`, binary frames and
 * `result`. Both respect the socket's buffer so a large file never sits in memory twice.
 */
import { encodeFrame, serverFrameOf } from '../../shared/remote-frames.js';
import { ApiFailure, remoteSocketUrl } from './api.js';

export interface CopyResult {
  ok: boolean;
  bytes: number;
  sha256?: string;
}

const CHUNK = 64 * 1024;
const HIGH_WATER = 1024 * 1024;

/** A refusal or failure reported on a remote-access socket, in the API's error shape. */
export function socketFailure(msg: { code?: number; error?: string; message?: string }): ApiFailure {
  return new ApiFailure(msg.code ?? 0, msg.error ?? 'remote_error', msg.message ?? 'The device refused the request.');
}

/** Close codes that carry a meaning for the user. */
export function closeFailure(code: number, reason: string): ApiFailure {
  if (code === 4403) return new ApiFailure(403, 'forbidden', reason || 'Access denied.');
  if (code === 4404) return new ApiFailure(404, 'not_found', reason || 'The device was not found.');
  return new ApiFailure(0, 'connection_closed', `The connection closed before the transfer finished${reason ? `: ${reason}` : ''} (code ${code}).`);
}

async function sha256Hex(file: Blob): Promise<string | undefined> {
  // Hashing needs the whole file in memory; only for files of a sensible size.
  if (!globalThis.crypto?.subtle || file.size > 256 * 1024 * 1024) return undefined;
  const digest = await crypto.subtle.digest('SHA-256', await file.arrayBuffer());
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Uploads a file to `path` on the device; `onProgress(sent, total)` as bytes leave the browser. */
export async function copyToDevice(
  deviceId: string,
  file: File,
  path: string,
  onProgress: (sent: number, total: number) => void,
  signal?: AbortSignal,
): Promise<CopyResult> {
  const sha256 = await sha256Hex(file);
  const url = await remoteSocketUrl('copy', { device_id: deviceId, direction: 'upload', path, size: file.size, sha256 });
  return new Promise<CopyResult>((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    let settled = false;
    let offset = 0;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      fn();
    };
    // Timers of the pump may fire after the end: progress is reported only while running.
    const report = (sent: number) => {
      if (!settled) onProgress(Math.max(0, sent), file.size);
    };
    const pump = async () => {
      while (!settled && offset < file.size) {
        if (ws.readyState !== WebSocket.OPEN) return;
        if (ws.bufferedAmount > HIGH_WATER) {
          report(offset - ws.bufferedAmount);
          setTimeout(() => void pump(), 25);
          return;
        }
        const chunk = await file.slice(offset, offset + CHUNK).arrayBuffer();
        ws.send(chunk);
        offset += chunk.byteLength;
      }
      if (!settled && ws.readyState === WebSocket.OPEN) {
        ws.send(encodeFrame({ type: 'eof' }));
        const waitDrain = () => {
          report(file.size - ws.bufferedAmount);
          if (ws.bufferedAmount > 0 && !settled) setTimeout(waitDrain, 50);
        };
        waitDrain();
      }
    };
    ws.onopen = () => void pump();
    ws.onmessage = (e) => {
      if (typeof e.data !== 'string') return;
      const msg = serverFrameOf(e.data);
      if (msg?.type === 'result') {
        settle(() => {
          if (msg.ok === false) reject(new ApiFailure(0, 'copy_failed', 'The device could not write the file.'));
          else if (sha256 && msg.sha256 && msg.sha256 !== sha256)
            reject(new ApiFailure(0, 'checksum_mismatch', 'The file arrived damaged (checksum mismatch).'));
          else resolve(msg);
        });
        ws.close(1000);
      } else if (msg?.type === 'error') {
        settle(() => reject(socketFailure(msg)));
      }
    };
    ws.onerror = () => undefined; // the close event that follows says why
    ws.onclose = (e) => settle(() => reject(closeFailure(e.code, e.reason)));
    signal?.addEventListener('abort', () => {
      settle(() => reject(new ApiFailure(0, 'aborted', 'The transfer was cancelled.')));
      ws.close(1000, 'cancelled');
    });
  });
}

/** Downloads `path` from the device into a Blob; `onProgress(received, total)`. */
export async function copyFromDevice(
  deviceId: string,
  path: string,
  onProgress: (received: number, total: number) => void,
  signal?: AbortSignal,
): Promise<{ blob: Blob; result: CopyResult }> {
  const url = await remoteSocketUrl('copy', { device_id: deviceId, direction: 'download', path });
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.binaryType = 'arraybuffer';
    const parts: ArrayBuffer[] = [];
    let received = 0;
    let size = 0;
    let settled = false;
    const settle = (fn: () => void) => {
      if (settled) return;
      settled = true;
      fn();
    };
    ws.onmessage = (e) => {
      if (e.data instanceof ArrayBuffer) {
        parts.push(e.data);
        received += e.data.byteLength;
        onProgress(received, size);
        return;
      }
      const msg = serverFrameOf(String(e.data));
      if (msg?.type === 'meta') {
        size = msg.size;
        onProgress(received, size);
      } else if (msg?.type === 'result') {
        settle(() =>
          msg.ok === false ? reject(new ApiFailure(0, 'copy_failed', 'The device could not read the file.')) : resolve({ blob: new Blob(parts), result: msg }),
        );
        ws.close(1000);
      } else if (msg?.type === 'error') {
        settle(() => reject(socketFailure(msg)));
      }
    };
    ws.onerror = () => undefined;
    ws.onclose = (e) => settle(() => reject(closeFailure(e.code, e.reason)));
    signal?.addEventListener('abort', () => {
      settle(() => reject(new ApiFailure(0, 'aborted', 'The transfer was cancelled.')));
      ws.close(1000, 'cancelled');
    });
  });
}
