import { describe, expect, it } from 'vitest';
import { checkItem, ItemRate } from './items.js';

describe('ItemRate', () => {
  it('lets `limit` payloads of a device through per window, others apart', () => {
    const rate = new ItemRate(3, 1000);
    expect([1, 2, 3, 4].map(() => rate.take('a', 0))).toEqual([true, true, true, false]);
    expect(rate.take('b', 10)).toBe(true);
    expect(rate.take('a', 999)).toBe(false);
    expect(rate.take('a', 1000)).toBe(true);
  });
});

describe('checkItem', () => {
  const digest = 'a'.repeat(64);
  it('accepts a known type that fits its schema, stripping unknown fields', () => {
    const r = checkItem({ type: 'groups', digest, data: { items: [{ group: 'g', gid: 1, members: [], x: 1 }], y: 2 } });
    expect(r).toMatchObject({ ok: true, type: 'groups', data: { items: [{ group: 'g', gid: 1, members: [] }] } });
    expect(r.ok && r.json).toBe('{"items":[{"group":"g","gid":1,"members":[]}]}');
  });

  it('refuses unknown types, bad digests and misfits, naming why', () => {
    expect(checkItem({ type: '__proto__', digest, data: {} })).toEqual({ ok: false, reason: 'unknown item type' });
    expect(checkItem({ type: 'groups', digest: 'A'.repeat(64), data: { items: [] } })).toMatchObject({ ok: false });
    expect(checkItem({ type: 'groups', digest, data: { items: [{ group: '', gid: 1, members: [] }] } })).toMatchObject({
      ok: false,
      reason: expect.stringContaining('items.0.group'),
    });
  });
});
