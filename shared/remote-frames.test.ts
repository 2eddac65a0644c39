import { describe, expect, it } from 'vitest';
import {
  endedMessage,
  MAX_END_REASON,
  MAX_ENDER_EMAIL,
  MAX_ENDER_NAME,
  MAX_TERMINAL_DIMENSION,
  parseClientFrame,
  parseServerFrame,
  serverFrameOf,
} from './remote-frames.js';

describe('client frames (what the broker accepts)', () => {
  it('accepts resize, ack and eof, keeping only the fields of the contract', () => {
    expect(parseClientFrame('{"type":"resize","cols":132,"rows":43,"extra":1}')).toEqual({ kind: 'frame', frame: { type: 'resize', cols: 132, rows: 43 } });
    expect(parseClientFrame('{"type":"ack","bytes":4096}')).toEqual({ kind: 'frame', frame: { type: 'ack', bytes: 4096 } });
    expect(parseClientFrame('{"type":"eof"}')).toEqual({ kind: 'frame', frame: { type: 'eof' } });
  });

  it.each([
    ['not JSON', 'resize 80 24', undefined],
    ['a JSON array', '[1,2]', undefined],
    ['JSON null', 'null', undefined],
    ['no type', '{"cols":80}', undefined],
    ['a type that is not a string', '{"type":7}', undefined],
    ['cols as a string', '{"type":"resize","cols":"80","rows":24}', 'cols'],
    ['zero cols', '{"type":"resize","cols":0,"rows":24}', 'cols'],
    ['fractional rows', '{"type":"resize","cols":80,"rows":24.5}', 'rows'],
    ['rows over the limit', `{"type":"resize","cols":80,"rows":${MAX_TERMINAL_DIMENSION + 1}}`, 'rows'],
    ['rows missing', '{"type":"resize","cols":80}', 'rows'],
    ['ack of zero bytes', '{"type":"ack","bytes":0}', 'bytes'],
    ['ack of negative bytes', '{"type":"ack","bytes":-5}', 'bytes'],
    ['ack of NaN-like bytes', '{"type":"ack","bytes":"lots"}', 'bytes'],
    ['ack beyond safe integers', '{"type":"ack","bytes":1e300}', 'bytes'],
  ])('rejects %s', (_what, text, field) => {
    const parsed = parseClientFrame(text);
    expect(parsed.kind).toBe('invalid');
    if (parsed.kind === 'invalid') {
      expect(parsed.message.length).toBeGreaterThan(10);
      expect(parsed.field).toBe(field);
    }
  });

  it('reports a frame of an unknown type as unknown (newer clients may send more), not as invalid', () => {
    expect(parseClientFrame('{"type":"paste","text":"x"}')).toEqual({ kind: 'unknown', type: 'paste' });
  });

  it('does not take server frames from a client', () => {
    expect(parseClientFrame('{"type":"exit","code":0,"signal":null}').kind).toBe('unknown');
  });
});

describe('server frames (what the CLI and the web console accept)', () => {
  it('accepts every frame of the contract', () => {
    expect(serverFrameOf('{"type":"ready"}')).toEqual({ type: 'ready' });
    expect(serverFrameOf('{"type":"eof"}')).toEqual({ type: 'eof' });
    expect(serverFrameOf('{"type":"ready","session":"abc-1","mode":"watch","detach_grace":60,"reattached":true,"extra":1}')).toEqual({
      type: 'ready',
      session: 'abc-1',
      mode: 'watch',
      detach_grace: 60,
      reattached: true,
    });
    expect(serverFrameOf('{"type":"watchers","watchers":[{"id":"u1","email":"a@example.com","fname":"x"}]}')).toEqual({
      type: 'watchers',
      watchers: [{ id: 'u1', email: 'a@example.com' }],
    });
    expect(serverFrameOf('{"type":"watchers","watchers":[{"id":1}]}')).toBeUndefined();
    expect(serverFrameOf('{"type":"watchers","watchers":"all"}')).toBeUndefined();
    expect(serverFrameOf('{"type":"exit","code":3,"signal":null}')).toEqual({ type: 'exit', code: 3, signal: null });
    expect(serverFrameOf('{"type":"exit","code":null,"signal":9}')).toEqual({ type: 'exit', code: null, signal: 9 });
    expect(serverFrameOf('{"type":"meta","size":10,"mode":420}')).toEqual({ type: 'meta', size: 10, mode: 420 });
    expect(serverFrameOf('{"type":"result","ok":true,"bytes":10,"sha256":"ab"}')).toEqual({ type: 'result', ok: true, bytes: 10, sha256: 'ab' });
    expect(serverFrameOf('{"type":"error","code":403,"error":"forbidden","message":"No.","field":"path"}')).toEqual({
      type: 'error',
      code: 403,
      error: 'forbidden',
      message: 'No.',
      field: 'path',
    });
  });

  it.each([
    ['not JSON', '{"type":"ready"'],
    ['exit with a string code', '{"type":"exit","code":"0","signal":null}'],
    ['exit without a signal', '{"type":"exit","code":0}'],
    ['meta with a negative size', '{"type":"meta","size":-1,"mode":420}'],
    ['meta without a mode', '{"type":"meta","size":1}'],
    ['result with ok as a string', '{"type":"result","ok":"yes","bytes":1,"sha256":"ab"}'],
    ['result without a checksum', '{"type":"result","ok":true,"bytes":1}'],
    ['error without a message', '{"type":"error","code":403,"error":"forbidden"}'],
    ['error with a null code', '{"type":"error","code":null,"error":"x","message":"y"}'],
  ])('rejects %s', (_what, text) => {
    expect(parseServerFrame(text).kind).toBe('invalid');
    expect(serverFrameOf(text)).toBeUndefined();
  });

  it('lets an error frame carry details but never change its type', () => {
    expect(serverFrameOf('{"type":"error","code":400,"error":"x","message":"y","bytes":5}')).toMatchObject({ type: 'error', bytes: 5 });
  });

  it('ignores a frame of an unknown type', () => {
    expect(parseServerFrame('{"type":"progress","n":1}')).toEqual({ kind: 'unknown', type: 'progress' });
    expect(serverFrameOf('{"type":"progress","n":1}')).toBeUndefined();
  });
});

describe('who ended a session', () => {
  const ended = { type: 'error', code: 403, error: 'session_ended', message: 'm' };

  it('reads ended_by and reason, and says who ended it and why', () => {
    const parsed = parseServerFrame(JSON.stringify({ ...ended, ended_by: { email: 'alice@example.com', name: 'Alice Ops' }, reason: 'maintenance' }));
    expect(parsed).toEqual({
      kind: 'frame',
      frame: { ...ended, ended_by: { email: 'alice@example.com', name: 'Alice Ops' }, reason: 'maintenance' },
    });
    if (parsed.kind !== 'frame' || parsed.frame.type !== 'error') throw new Error('not an error frame');
    expect(endedMessage(parsed.frame)).toBe('Ended by Alice Ops <alice@example.com> (maintenance).');
    expect(endedMessage({ ...ended, type: 'error', ended_by: { email: 'bob@example.com', name: '' } })).toBe('Ended by bob@example.com.');
    expect(endedMessage({ type: 'error', code: 403, error: 'access_withdrawn', message: 'm', reason: 'no grant covers the device' })).toBe(
      'Your access was withdrawn (no grant covers the device).',
    );
    expect(endedMessage({ type: 'error', code: 403, error: 'forbidden', message: 'm' })).toBeUndefined();
  });

  it('names the field when ended_by or reason is malformed or oversized', () => {
    for (const [extra, field] of [
      [{ ended_by: 'alice' }, 'ended_by'],
      [{ ended_by: { email: 'a@b' } }, 'ended_by'],
      [{ ended_by: { email: 'a'.repeat(MAX_ENDER_EMAIL + 1), name: '' } }, 'ended_by'],
      [{ ended_by: { email: 'a@b', name: 'n'.repeat(MAX_ENDER_NAME + 1) } }, 'ended_by'],
      [{ ended_by: ['a@b'] }, 'ended_by'],
      [{ reason: 7 }, 'reason'],
      [{ reason: 'r'.repeat(MAX_END_REASON + 1) }, 'reason'],
    ] as const) {
      const parsed = parseServerFrame(JSON.stringify({ ...ended, ...extra }));
      expect(parsed).toMatchObject({ kind: 'invalid', field });
    }
  });
});
