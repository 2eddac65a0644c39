import { z } from 'zod';
import { MAX_TERMINAL_DIMENSION } from '../../shared/remote-frames.js';
import { LOGIN_USER_PATTERN, parseResource } from '../../shared/resources.js';

/** A device id: the SHA-256 of the device key, 64 lowercase hex. */
export const deviceId = z
  .string()
  .regex(/^[0-9a-f]{64}$/, 'must be a device id: 64 lowercase hexadecimal characters')
  .describe('The device id (64 lowercase hex).');

/** Whether `dst` can be named in a tunnel grant: the same grammar the evaluator reads. */
export function isTunnelHost(dst: string): boolean {
  try {
    parseResource(`*/tunnel(dst=${dst})`);
    return dst !== '*' && !dst.includes(',') && !dst.includes(';') && !dst.includes(')');
  } catch {
    return false;
  }
}

export const host = z.string().min(1).max(253).refine(isTunnelHost, 'must be a host name or an IP address').describe('Host as seen from the device.');
export const port = z.coerce.number().int().min(1).max(65535).describe('TCP or UDP port, 1-65535.');
export const proto = z.enum(['tcp', 'udp']);

const source = z
  .enum(['cli', 'api', 'web'])
  .optional()
  .describe('Client kind for the audit trail: `cli`, `api` (default) or `web`. Ticket connections are recorded as `web`.');
const ticket = z
  .string()
  .max(200)
  .optional()
  .describe('Single-use ticket from POST /api/v2/remote/ticket, for clients that cannot send the Authorization header.');
const dimension = (fallback: number) => z.coerce.number().int().min(1).max(MAX_TERMINAL_DIMENSION).default(fallback);

/** Bounds of a console's command, whichever way it comes in (this API, or qbee's terminal message). */
const MAX_COMMAND_ARGS = 256;
const MAX_COMMAND_BYTES = 16 * 1024;

/** What is wrong with a console command given as argv (undefined when nothing is): one rule for every way in. */
export function consoleCommandProblem(argv: unknown): string | undefined {
  if (!Array.isArray(argv)) return 'must be a JSON array of strings, e.g. ["uptime"]';
  if (argv.length === 0 || argv.length > MAX_COMMAND_ARGS || !argv.every((a) => typeof a === 'string')) return `must be 1 to ${MAX_COMMAND_ARGS} strings`;
  if (argv[0] === '' || argv.some((a: string) => a.includes('\0'))) return 'must name a program and contain no NUL';
  if (argv.reduce((n: number, a: string) => n + Buffer.byteLength(a), 0) > MAX_COMMAND_BYTES) return `may be at most ${MAX_COMMAND_BYTES} bytes`;
  return undefined;
}

/** A command to run instead of the login shell: a JSON array of strings, its argv. */
const consoleCommand = z
  .string()
  .max(4 * MAX_COMMAND_BYTES)
  .transform((text, ctx) => {
    let argv: unknown;
    try {
      argv = JSON.parse(text);
    } catch {
      argv = undefined;
    }
    const problem = consoleCommandProblem(argv);
    if (problem) {
      ctx.addIssue({ code: 'custom', message: problem });
      return z.NEVER;
    }
    return argv as string[];
  })
  .describe(
    'A command to run instead of the interactive login shell, as a JSON array of strings (its argv, e.g. `["systemctl","status","nginx"]`): run by the login shell as `exec "$@"`, never parsed as shell text, still in a terminal. Audited with the session; the session ends with its exit status. An agent that cannot run commands refuses the session (502) rather than open a shell.',
  );

export const consoleQuery = z.object({
  device_id: deviceId,
  cols: dimension(80).describe('Terminal width in columns (1-1000, default 80).'),
  rows: dimension(24).describe('Terminal height in rows (1-1000, default 24).'),
  user: z
    .string()
    .regex(LOGIN_USER_PATTERN, 'must be a user name: lower-case letters, digits, "_", "-", starting with a letter or "_", at most 32')
    .optional()
    .describe(
      "The local user the shell runs as. Without it, the agent's own user — which a grant naming users (`console(user=...)`) never allows: name one of its users.",
    ),
  command: consoleCommand.optional(),
  source,
  ticket,
});

export const tunnelQuery = z.object({
  device_id: deviceId,
  proto: proto.default('tcp').describe('tcp (default) or udp: one binary frame is one datagram.'),
  port,
  dst: host.default('localhost').describe('Destination host as seen from the device (default localhost).'),
  source,
  ticket,
});

/** An absolute path on the device, as a copy or a listing names it. */
export const devicePath = z
  .string()
  .min(1)
  .max(4096)
  .regex(/^\//, 'must be an absolute path')
  .refine((p) => !p.includes('\0') && !p.includes('\\'), 'must not contain NUL or backslash');

export const copyQuery = z.object({
  device_id: deviceId,
  direction: z.enum(['upload', 'download']).describe('upload: to the device; download: from it.'),
  path: devicePath.describe('Absolute path of the file on the device.'),
  size: z.coerce.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional().describe('upload: the byte count the device must receive.'),
  sha256: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hexadecimal characters')
    .transform((s) => s.toLowerCase())
    .optional()
    .describe('upload: the SHA-256 the device must receive; checked before the file replaces the target.'),
  format: z
    .enum(['file', 'tar.gz'])
    .default('file')
    .describe(
      "`file` (default): the bytes of one regular file. `tar.gz`: a gzip'd tar of a file or a directory tree (a download archives the path; an upload extracts into it, an existing directory receiving the top entry). size and sha256 apply to `file` only.",
    ),
  mode: z
    .string()
    .regex(/^0?[0-7]{3}$/, 'must be octal permissions from 000 to 0777 (no set-id or sticky bits)')
    .transform((m) => parseInt(m, 8))
    .optional()
    .describe('upload (`file`): the permissions of a file created by it, e.g. 0644, exactly (whatever the umask); a file replaced keeps its own.'),
  source,
  ticket,
});

export type ConsoleQuery = z.infer<typeof consoleQuery>;
export type TunnelQuery = z.infer<typeof tunnelQuery>;
export type CopyQuery = z.infer<typeof copyQuery>;

const liveSessionId = z.string().regex(/^[0-9a-f-]{1,64}$/, "must be a session id (from the console's ready frame, or GET /api/v2/remote/sessions)");

/** Re-attaching to a console (`attach`, its owner) or watching one (`watch`, read-only): exactly one of them. */
export const consoleJoinQuery = z
  .object({
    attach: liveSessionId.optional().describe('Re-attach to your own console after a dropped connection.'),
    watch: liveSessionId.optional().describe("Watch a live console read-only (yours or, with remote-access:manage, another user's)."),
    device_id: deviceId.optional(),
    cols: dimension(80),
    rows: dimension(24),
    source,
    ticket,
  })
  .refine((q) => (q.attach === undefined) !== (q.watch === undefined), { message: 'give either attach or watch, not both', path: ['attach'] });
