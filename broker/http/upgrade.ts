import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';

export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer, url: URL) => void;

/** WebSocket upgrades by path: the agent channel, remote-access sessions. */
export class UpgradeRouter {
  private readonly handlers = new Map<string, UpgradeHandler>();
  private readonly prefixes: [string, UpgradeHandler][] = [];

  constructor(private readonly logger: Logger) {}

  register(path: string, handler: UpgradeHandler): void {
    this.handlers.set(path, handler);
  }

  /** For endpoints whose path carries a parameter (qbee's `/device/<id>`): every path under `prefix`. */
  registerPrefix(prefix: string, handler: UpgradeHandler): void {
    this.prefixes.push([prefix, handler]);
  }

  handle(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://broker.invalid');
    const handler = this.handlers.get(url.pathname) ?? this.prefixes.find(([prefix]) => url.pathname.startsWith(prefix))?.[1];
    if (!handler) {
      socket.end(
        'HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{"code":404,"error":"not_found","message":"No WebSocket endpoint at this path."}',
      );
      return;
    }
    try {
      handler(req, socket, head, url);
    } catch (err) {
      this.logger.error({ err, path: url.pathname }, 'upgrade failed');
      socket.destroy();
    }
  }
}
