import { describe, expect, it } from 'vitest';
import { applyPatch, AttributeLimitError, coordinateProblem, customKeyProblem, readAttributes, storedForm } from './attributes.js';

describe('device attributes', () => {
  it('reads every legacy field as a string and tolerates odd stored values', () => {
    expect(readAttributes('{"device_name":"a","latitude":12.5,"custom":{"k":1}}')).toEqual({
      device_name: 'a',
      description: '',
      latitude: '12.5',
      longitude: '',
      country: '',
      city: '',
      zip: '',
      address: '',
      custom: { k: '1' },
    });
    expect(readAttributes('not json').custom).toEqual({});
    expect(readAttributes(null).device_name).toBe('');
  });

  it('applies only given keys; "" clears and removes', () => {
    const current = readAttributes('{"device_name":"a","city":"Oslo","custom":{"x":"1","y":"2"}}');
    const next = applyPatch(current, { city: '', zip: '0150', latitude: 10, custom: { x: '', z: '3' } }, 100);
    expect(next).toMatchObject({ device_name: 'a', city: '', zip: '0150', latitude: '10', custom: { y: '2', z: '3' } });
    expect(storedForm(next)).toEqual({ device_name: 'a', zip: '0150', latitude: '10', custom: { y: '2', z: '3' } });
    expect(current.custom).toEqual({ x: '1', y: '2' });
  });

  it('refuses growing past the custom limit but lets a device above a lowered limit shrink or edit', () => {
    const two = readAttributes('{"custom":{"a":"1","b":"2"}}');
    expect(() => applyPatch(two, { custom: { c: '3' } }, 2)).toThrow(AttributeLimitError);
    expect(Object.keys(applyPatch(two, { custom: { a: '', c: '3' } }, 2).custom)).toEqual(['b', 'c']);
    expect(applyPatch(two, { custom: { a: 'edited' } }, 1).custom.a).toBe('edited');
  });

  it('checks coordinates as decimals within range', () => {
    for (const ok of ['0', '-90', '90', '+45.5', '.5', '89.999999', '']) expect(coordinateProblem('latitude', ok), ok).toBeUndefined();
    for (const bad of ['90.01', '-91', '1e1', 'abc', ' 1', '0x10', '-']) expect(coordinateProblem('latitude', bad), bad).toBeDefined();
    expect(coordinateProblem('longitude', 180)).toBeUndefined();
    expect(coordinateProblem('longitude', -180.5)).toBeDefined();
    expect(coordinateProblem('longitude', Number.NaN)).toBeDefined();
  });

  it('checks custom keys', () => {
    expect(customKeyProblem('site')).toBeUndefined();
    expect(customKeyProblem('k'.repeat(64))).toBeUndefined();
    expect(customKeyProblem('k'.repeat(65))).toBeDefined();
    expect(customKeyProblem('')).toBeDefined();
    expect(customKeyProblem('a\tb')).toBeDefined();
    expect(customKeyProblem('constructor')).toBeDefined();
  });
});
