/**
 * The agent's log: one JSON object a line on stderr, in pino's format (`level` as pino's number,
 * `time` in ms, `pid`, `hostname`, `name`, the child's bindings, the fields, `msg`), so that what
 * reads the agent's logs reads them as before. It is not pino because pino's code, and the
 * transports and worker threads it loads at start, were a good part of what an idle agent keeps in
 * memory (docs/performance.md, "The agent idle: third round"); the agent needs only this much of it:
 * the level methods with (fields, message) or (message), `child`, `level` and `flush`.
 *
 * Writes are synchronous (as with pino.destination(2)): a line is out before the process exits. A
 * key named bootstrapKey or bootstrap_key, in the fields or one level below, is written as
 * "[redacted]"; an Error is written as its type, message and stack.
 */
import fs from 'node:fs';
import os from 'node:os';
import type { Logger } from 'pino';

/** pino's level numbers. */
export const LEVELS: Record<string, number> = { fatal: 60, error: 50, warn: 40, info: 30, debug: 20, trace: 10, silent: Infinity };
const METHODS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;
const SECRET = new Set(['bootstrapKey', 'bootstrap_key']);
export const REDACTED = '[redacted]';
/** How long a line waits for a full pipe (EAGAIN) before it is dropped: the agent never blocks longer on its log. */
const WRITE_RETRIES = 100;
const RETRY_MS = 10;

export interface LogOptions {
  name: string;
  level: string;
  /** where lines go; fd 2 (stderr) by default */
  fd?: number;
}

type LogMethod = (fieldsOrMessage?: unknown, message?: string) => void;

function serialiseError(err: Error): Record<string, unknown> {
  const out: Record<string, unknown> = { type: err.constructor?.name ?? 'Error', message: err.message, stack: err.stack };
  for (const [key, value] of Object.entries(err)) if (!(key in out)) out[key] = value;
  return out;
}

/** The fields as written: secrets redacted (at the top and one level below), errors serialised. */
function clean(fields: Record<string, unknown>, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (SECRET.has(key)) out[key] = REDACTED;
    else if (value instanceof Error) out[key] = serialiseError(value);
    else if (depth === 0 && value && typeof value === 'object' && !Array.isArray(value)) out[key] = clean(value as Record<string, unknown>, 1);
    else out[key] = value;
  }
  return out;
}

function writeAll(fd: number, line: string): void {
  let buffer = Buffer.from(line, 'utf8');
  let retries = 0;
  while (buffer.length > 0) {
    try {
      buffer = buffer.subarray(fs.writeSync(fd, buffer));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN' || ++retries > WRITE_RETRIES) return;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, RETRY_MS);
    }
  }
}

function stringify(record: Record<string, unknown>): string {
  try {
    return JSON.stringify(record, (_key, value: unknown) => (typeof value === 'bigint' ? value.toString() : value));
  } catch {
    // A field that cannot be written (a cycle): the line keeps its message.
    return JSON.stringify({
      level: record.level,
      time: record.time,
      pid: record.pid,
      hostname: record.hostname,
      name: record.name,
      msg: record.msg,
      logError: 'fields not serialisable',
    });
  }
}

class AgentLog {
  private threshold: number;
  private levelName: string;
  declare fatal: LogMethod;
  declare error: LogMethod;
  declare warn: LogMethod;
  declare info: LogMethod;
  declare debug: LogMethod;
  declare trace: LogMethod;

  constructor(
    private readonly fd: number,
    /** the start of each line: level, time and pid come first, then these */
    private readonly base: Record<string, unknown>,
    level: string,
  ) {
    this.levelName = level;
    this.threshold = AgentLog.threshold(level);
    for (const method of METHODS) {
      const n = LEVELS[method];
      this[method] = (fieldsOrMessage?: unknown, message?: string) => {
        if (n >= this.threshold) this.write(n, fieldsOrMessage, message);
      };
    }
  }

  private static threshold(level: string): number {
    const n = Object.hasOwn(LEVELS, level) ? LEVELS[level] : undefined;
    if (n === undefined) throw new Error(`unknown log level ${JSON.stringify(level)}`);
    return n;
  }

  get level(): string {
    return this.levelName;
  }

  set level(level: string) {
    this.threshold = AgentLog.threshold(level);
    this.levelName = level;
  }

  /** A logger whose lines carry these fields too; it starts at this one's level and keeps its own, as pino's children do. */
  child(bindings: Record<string, unknown>): AgentLog {
    return new AgentLog(this.fd, { ...this.base, ...clean(bindings) }, this.levelName);
  }

  /** Lines are written synchronously: nothing waits. */
  flush(): void {}

  private write(level: number, fieldsOrMessage: unknown, message: string | undefined): void {
    let fields: Record<string, unknown> = {};
    let msg = message;
    if (fieldsOrMessage instanceof Error) {
      fields = { err: serialiseError(fieldsOrMessage) };
      msg ??= fieldsOrMessage.message;
    } else if (fieldsOrMessage && typeof fieldsOrMessage === 'object') fields = clean(fieldsOrMessage as Record<string, unknown>);
    else if (fieldsOrMessage !== undefined && msg === undefined) msg = String(fieldsOrMessage);
    const time = Date.now();
    const record: Record<string, unknown> = { level, time, ...this.base, ...fields, ...(msg === undefined ? {} : { msg }) };
    // A field cannot stand for the level or the time of the line.
    record.level = level;
    record.time = time;
    writeAll(this.fd, `${stringify(record)}\n`);
  }
}

/**
 * The agent's root logger. Typed as pino's Logger so that the modules that take one keep their
 * types; it implements the part of it the agent uses (see above).
 */
export function createLog(o: LogOptions): Logger {
  const base = { pid: process.pid, hostname: os.hostname(), name: o.name };
  return new AgentLog(o.fd ?? 2, base, o.level) as unknown as Logger;
}
