import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLog, REDACTED } from './log.js';

const open: { dir: string; fd: number }[] = [];
function sink() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-log-'));
  const file = path.join(dir, 'log');
  const fd = fs.openSync(file, 'w');
  open.push({ dir, fd });
  return {
    fd,
    lines: () =>
      fs
        .readFileSync(file, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}
afterEach(() => {
  for (const { dir, fd } of open.splice(0)) {
    fs.closeSync(fd);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

describe('agent log', () => {
  it("writes one JSON line per call in pino's format, fields and message", () => {
    const s = sink();
    const log = createLog({ name: 'fleet-agent', level: 'info', fd: s.fd });
    log.info({ version: '1.2.3' }, 'fleet agent starting');
    log.warn('a message alone');
    log.child({ deviceId: 'd1' }).error({ code: 4000 }, 'lost');
    const [a, b, c] = s.lines();
    expect(Object.keys(a)).toEqual(['level', 'time', 'pid', 'hostname', 'name', 'version', 'msg']);
    expect(a).toMatchObject({ level: 30, pid: process.pid, hostname: os.hostname(), name: 'fleet-agent', version: '1.2.3', msg: 'fleet agent starting' });
    expect(typeof a.time).toBe('number');
    expect(b).toMatchObject({ level: 40, msg: 'a message alone' });
    expect(c).toMatchObject({ level: 50, name: 'fleet-agent', deviceId: 'd1', code: 4000, msg: 'lost' });
  });

  it('writes only the levels at or above its own; a child starts at its parent level and keeps its own', () => {
    const s = sink();
    const log = createLog({ name: 'a', level: 'warn', fd: s.fd });
    const child = log.child({ module: 'x' });
    log.info('dropped');
    log.error('kept 1');
    log.level = 'debug';
    expect(log.level).toBe('debug');
    log.debug('kept 2');
    child.debug('dropped too');
    log.child({}).debug('kept 3');
    log.level = 'silent';
    log.fatal('dropped at silent');
    expect(s.lines().map((l) => l.msg)).toEqual(['kept 1', 'kept 2', 'kept 3']);
    expect(() => (log.level = 'loud')).toThrow(/unknown log level/);
  });

  it('never writes a bootstrap key, in the fields, one level below, or in a child binding', () => {
    const s = sink();
    const log = createLog({ name: 'a', level: 'info', fd: s.fd });
    log.info({ bootstrapKey: 'secret-1', config: { bootstrap_key: 'secret-2', broker: 'b' } }, 'start');
    log.child({ bootstrap_key: 'secret-3' }).info({ bootstrapKey: 'secret-4' }, 'child');
    const text = s.lines();
    expect(JSON.stringify(text)).not.toMatch(/secret/);
    expect(text[0]).toMatchObject({ bootstrapKey: REDACTED, config: { bootstrap_key: REDACTED, broker: 'b' } });
    expect(text[1]).toMatchObject({ bootstrap_key: REDACTED, bootstrapKey: REDACTED });
  });

  it('writes an error as type, message and stack; a field cannot replace the level; a cycle or a bigint does not throw', () => {
    const s = sink();
    const log = createLog({ name: 'a', level: 'info', fd: s.fd });
    log.fatal({ err: new TypeError('boom') }, 'agent failed');
    log.error(new RangeError('alone'));
    log.info({ level: 'forged', time: 'forged' }, 'fields');
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    log.info({ cycle }, 'cycle');
    log.info({ n: 10n }, 'bigint');
    const [a, b, c, d, e] = s.lines();
    expect(a).toMatchObject({ level: 60, err: { type: 'TypeError', message: 'boom' }, msg: 'agent failed' });
    expect(String((a.err as { stack: string }).stack)).toContain('TypeError: boom');
    expect(b).toMatchObject({ level: 50, err: { type: 'RangeError', message: 'alone' }, msg: 'alone' });
    expect(c.level).toBe(30);
    expect(typeof c.time).toBe('number');
    expect(d).toMatchObject({ level: 30, msg: 'cycle', logError: 'fields not serialisable' });
    expect(e).toMatchObject({ n: '10', msg: 'bigint' });
  });
});
