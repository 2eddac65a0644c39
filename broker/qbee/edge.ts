/**
 * This broker as qbee's *edge*: where qbee-cli is told to go (`edge` of a device's status) and the
 * TLS it dials there. qbee-cli always dials `https://<edge>/device/<id>` and checks the certificate
 * unless the edge starts with `localhost:`, so a broker serving plain HTTP (the default start) also
 * accepts TLS on its port, with a certificate of its own (made once with the machine's `openssl`).
 */
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import type http from 'node:http';
import type { Socket } from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import type { Logger } from 'pino';
import { HEADERS_TIMEOUT_MS } from '../http/connection-limits.js';

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost']);
const HOST_HEADER = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::(\d{1,5}))?$/;

/** `host:port` with a loopback host written `localhost`, which qbee-cli connects to without checking the certificate. */
function edgeOf(hostname: string, port: string): string {
  const host = LOOPBACK.has(hostname.toLowerCase()) ? 'localhost' : hostname.toLowerCase();
  return port ? `${host}:${port}` : host;
}

/**
 * The edge qbee-cli is told to dial: the host of PUBLIC_URL (an `http://` one with its port written
 * out, 80 when implied, since qbee-cli dials https to it), else the host this request came to;
 * undefined when neither is usable.
 */
export function edgeHost(publicUrl: string | undefined, requestHost: string): string | undefined {
  if (publicUrl) {
    try {
      const url = new URL(publicUrl);
      if (!url.hostname) return undefined;
      return edgeOf(url.hostname, url.port || (url.protocol === 'http:' ? '80' : ''));
    } catch {
      return undefined;
    }
  }
  const m = HOST_HEADER.exec(requestHost);
  if (!m) return undefined;
  const port = m[1] ?? '';
  if (port && (Number(port) < 1 || Number(port) > 65535)) return undefined;
  return edgeOf(port ? requestHost.slice(0, -(port.length + 1)) : requestHost, port);
}

/** The broker's own certificate for TLS on its HTTP port: kept in `<dataDir>/edge-tls/`, made when missing or expiring. */
export async function edgeCertificate(dataDir: string): Promise<{ cert: Buffer; key: Buffer }> {
  const dir = path.join(dataDir, 'edge-tls');
  const certFile = path.join(dir, 'cert.pem');
  const keyFile = path.join(dir, 'key.pem');
  try {
    const cert = fs.readFileSync(certFile);
    const key = fs.readFileSync(keyFile);
    if (new Date(new crypto.X509Certificate(cert).validTo).getTime() > Date.now() + 86_400_000) return { cert, key };
  } catch {
    // missing or unreadable: made below
  }
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const tmp = fs.mkdtempSync(path.join(dir, 'new-'));
  try {
    await new Promise<void>((resolve, reject) =>
      execFile(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-keyout',
          path.join(tmp, 'key.pem'),
          '-out',
          path.join(tmp, 'cert.pem'),
          '-days',
          '825',
          '-subj',
          '/CN=localhost',
          '-addext',
          'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1',
        ],
        { timeout: 30_000 },
        (err) => (err ? reject(new Error(`openssl could not make the edge certificate: ${err.message}`)) : resolve()),
      ),
    );
    fs.chmodSync(path.join(tmp, 'key.pem'), 0o600);
    fs.renameSync(path.join(tmp, 'key.pem'), keyFile);
    fs.renameSync(path.join(tmp, 'cert.pem'), certFile);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  return { cert: fs.readFileSync(certFile), key: fs.readFileSync(keyFile) };
}

/**
 * Makes a plain-HTTP server also answer TLS on its port: a connection whose first byte is a TLS
 * handshake record (0x16) is decrypted with `certificate()` (asked once, on the first such
 * connection) and then served by the same server, upgrades included; any other goes to HTTP as
 * before. A connection that sends nothing, or does not complete its handshake, within the header
 * timeout is closed. Returns a function that closes the connections not yet handed to HTTP (for the
 * broker's shutdown).
 */
export function acceptTlsOnSamePort(server: http.Server, certificate: () => Promise<{ cert: Buffer; key: Buffer }>, log: Logger): () => void {
  const [serveHttp] = server.listeners('connection') as ((socket: Socket) => void)[];
  if (!serveHttp) throw new Error('the HTTP server has no connection listener');
  server.removeListener('connection', serveHttp);
  /** Connections not yet handed to HTTP: waiting for their first byte, or in their TLS handshake. */
  const pending = new Set<Socket>();
  let context: Promise<tls.SecureContext> | undefined;
  const contextOnce = () => (context ??= certificate().then((pair) => tls.createSecureContext(pair)));

  const secure = (socket: Socket, secureContext: tls.SecureContext) => {
    const encrypted = new tls.TLSSocket(socket, { isServer: true, secureContext, ALPNProtocols: ['http/1.1'] });
    let established = false;
    pending.add(encrypted);
    const timer = setTimeout(() => encrypted.destroy(), HEADERS_TIMEOUT_MS);
    timer.unref();
    encrypted.once('secure', () => {
      established = true;
      clearTimeout(timer);
      pending.delete(encrypted);
      serveHttp.call(server, encrypted);
    });
    // Before the handshake completes nothing else listens: a peer that leaves is let go at once.
    encrypted.on('error', (err: Error) => {
      if (!established) log.debug({ err: err.message }, 'TLS handshake failed');
      encrypted.destroy();
    });
    encrypted.once('end', () => {
      if (!established) encrypted.destroy();
    });
    encrypted.once('close', () => {
      clearTimeout(timer);
      pending.delete(encrypted);
      // The TCP socket under it is closed with it (the server counts it until then).
      socket.destroy();
    });
  };

  server.prependListener('connection', (socket: Socket) => {
    pending.add(socket);
    const timer = setTimeout(() => socket.destroy(), HEADERS_TIMEOUT_MS);
    timer.unref();
    socket.once('close', () => {
      clearTimeout(timer);
      pending.delete(socket);
    });
    socket.once('data', (chunk: Buffer) => {
      socket.pause();
      socket.unshift(chunk);
      if (chunk[0] !== 0x16) {
        clearTimeout(timer);
        pending.delete(socket);
        serveHttp.call(server, socket);
        process.nextTick(() => socket.resume());
        return;
      }
      contextOnce().then(
        (secureContext) => {
          clearTimeout(timer);
          pending.delete(socket);
          if (socket.destroyed) return;
          secure(socket, secureContext);
          process.nextTick(() => socket.resume());
        },
        (err: Error) => {
          context = undefined; // tried again on the next TLS connection
          log.error({ err: err.message }, 'TLS on the HTTP port is unavailable: qbee-cli cannot reach this edge (set TLS_CERT_FILE and TLS_KEY_FILE)');
          socket.destroy();
        },
      );
    });
  });
  return () => {
    for (const socket of pending) socket.destroy();
    pending.clear();
  };
}
