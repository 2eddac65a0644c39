import { describe, expect, it } from 'vitest';
import { BoundedMap } from './bounded-map.js';

describe('BoundedMap', () => {
  it('drops the oldest key when a new one comes to a full map', () => {
    const m = new BoundedMap<string, number>(3);
    for (const [i, k] of ['a', 'b', 'c', 'd'].entries()) m.set(k, i);
    expect([...m.keys()]).toEqual(['b', 'c', 'd']);
  });

  it('replaces a key it holds without dropping another', () => {
    const m = new BoundedMap<string, number>(2);
    m.set('a', 1).set('b', 2).set('a', 3);
    expect([...m.entries()]).toEqual([
      ['a', 3],
      ['b', 2],
    ]);
  });

  it('touch makes a key the newest, so the least recently used goes first', () => {
    const m = new BoundedMap<string, number>(2);
    m.set('a', 1).set('b', 2);
    expect(m.touch('a')).toBe(1);
    m.set('c', 3);
    expect([...m.keys()]).toEqual(['a', 'c']);
    expect(m.touch('zz')).toBeUndefined();
    expect(m.size).toBe(2);
  });

  it('holds a key whose value is undefined, and touch keeps it', () => {
    const m = new BoundedMap<string, undefined>(2);
    m.set('a', undefined).set('b', undefined);
    m.touch('a');
    m.set('c', undefined);
    expect([...m.keys()]).toEqual(['a', 'c']);
  });

  it('a flood of new keys never grows it past its bound', () => {
    const m = new BoundedMap<number, number>(100);
    for (let i = 0; i < 100_000; i++) m.set(i, i);
    expect(m.size).toBe(100);
    expect(m.has(99_999)).toBe(true);
    expect(m.has(99_899)).toBe(false);
  });

  it('refuses a bound below one', () => {
    expect(() => new BoundedMap(0)).toThrow(RangeError);
    expect(() => new BoundedMap(1.5)).toThrow(RangeError);
  });
});
