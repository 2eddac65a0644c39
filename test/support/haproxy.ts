/** deploy/haproxy.cfg for tests: its `"${NAME-default}"` environment placeholders filled in. */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const HAPROXY_CFG = path.join(ROOT, 'deploy', 'haproxy.cfg');

/** The config with each placeholder replaced by `values[NAME]`, or by its default when not given. */
export function renderHaproxyConfig(values: Record<string, string>): string {
  const template = fs.readFileSync(HAPROXY_CFG, 'utf8');
  return template.replace(/"\$\{([A-Z0-9_]+)-([^}"]*)\}"/g, (_m, name: string, fallback: string) => values[name] ?? fallback);
}

/** Debian installs it in /usr/sbin, which is not on every user's PATH. */
export const HAPROXY_BIN = fs.existsSync('/usr/sbin/haproxy') ? '/usr/sbin/haproxy' : 'haproxy';

/** A port nobody listens on now (for a server the test starts next). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface RunningHaproxy {
  /** http://127.0.0.1:<port> it listens on */
  url: string;
  process: ChildProcess;
  /** everything it printed (health check state changes among it) */
  log: string[];
  stop(): Promise<void>;
}

/**
 * deploy/haproxy.cfg rendered into `dir` in front of up to three `host:port` servers (a missing third
 * is a port nobody listens on), checked with `haproxy -c`, then run in the foreground.
 */
export async function startHaproxy(dir: string, servers: string[], values: Record<string, string> = {}): Promise<RunningHaproxy> {
  const port = await freePort();
  const cfg = path.join(dir, 'haproxy.cfg');
  fs.writeFileSync(
    cfg,
    renderHaproxyConfig({
      FLEET_BIND: `127.0.0.1:${port}`,
      FLEET_BROKER1: servers[0],
      FLEET_BROKER2: servers[1] ?? servers[0],
      FLEET_BROKER3: servers[2] ?? `127.0.0.1:${await freePort()}`,
      FLEET_CHECK_INTER: '300ms',
      FLEET_MAXCONN: '2000',
      ...values,
    }),
  );
  const checked = spawnSync(HAPROXY_BIN, ['-c', '-f', cfg], { encoding: 'utf8' });
  if (checked.status !== 0) throw new Error(`haproxy -c refused the configuration: ${checked.stderr}${checked.stdout}`);
  const child = spawn(HAPROXY_BIN, ['-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
  const log: string[] = [];
  child.stdout?.on('data', (d) => log.push(String(d)));
  child.stderr?.on('data', (d) => log.push(String(d)));
  return {
    url: `http://127.0.0.1:${port}`,
    process: child,
    log,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
