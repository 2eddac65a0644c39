/** deploy/haproxy.cfg for tests: its `"${NAME-default}"` environment placeholders filled in. */
import fs from 'node:fs';
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
