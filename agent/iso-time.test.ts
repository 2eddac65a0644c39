import { afterEach, expect, it, vi } from 'vitest';
import { isoTime } from './iso-time.js';

afterEach(() => vi.restoreAllMocks());

const YEAR_0 = -62167219200000; // 0000-01-01T00:00:00.000Z
const YEAR_10000 = 253402300800000; // +010000-01-01T00:00:00.000Z
const MAX = 8.64e15; // the last time a Date holds

it("writes what Date's toISOString writes, from year 0 to 9999 and at the edges", () => {
  const times = [0, -1, 1, Date.now(), YEAR_0, YEAR_0 + 1, YEAR_10000 - 1, 951782400000 /* 2000-02-29 */, 1.5, -0.5];
  // A fixed walk over the whole range, every field with one and two digits, leap days included.
  for (let t = YEAR_0, step = 86_400_000 * 367 + 3_723_456; t < YEAR_10000; t += step) times.push(t);
  for (const t of times) expect(isoTime(t), String(t)).toBe(new Date(t).toISOString());
});

it('leaves years outside 0-9999 to toISOString (a sign and six digits)', () => {
  for (const t of [YEAR_0 - 1, YEAR_10000, MAX, -MAX]) expect(isoTime(t)).toBe(new Date(t).toISOString());
  expect(isoTime(YEAR_10000)).toBe('+010000-01-01T00:00:00.000Z');
  expect(isoTime(YEAR_0 - 1)).toBe('-000001-12-31T23:59:59.999Z');
});

it('throws RangeError for an invalid time, as toISOString does', () => {
  for (const t of [Number.NaN, MAX + 1, Number.POSITIVE_INFINITY]) expect(() => isoTime(t)).toThrow(RangeError);
});

it('stamps the current time by default without calling toISOString', () => {
  const toISOString = vi.spyOn(Date.prototype, 'toISOString');
  const before = Date.now();
  const stamp = Date.parse(isoTime());
  expect(stamp).toBeGreaterThanOrEqual(before);
  expect(stamp).toBeLessThanOrEqual(Date.now());
  expect(toISOString).not.toHaveBeenCalled();
});
