import { describe, expect, it } from 'vitest';
import { boundedOptions, MAX_CHANGE_OPTIONS_BYTES, MAX_OPTIONS_BYTES } from './service.js';

describe('boundedOptions', () => {
  it('keeps small options as they are', () => {
    expect(boundedOptions({ params: { id: 'x' } })).toBe('{"params":{"id":"x"}}');
    expect(boundedOptions(undefined)).toBe('{}');
  });

  it('cuts large options to the limit, marked, with their size and start', () => {
    const options = { body: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, 'v'.repeat(200)])) };
    const stored = boundedOptions(options);
    expect(Buffer.byteLength(stored)).toBeLessThanOrEqual(MAX_OPTIONS_BYTES);
    const parsed = JSON.parse(stored);
    expect(parsed).toMatchObject({ cut: true, bytes: Buffer.byteLength(JSON.stringify(options)) });
    expect(JSON.stringify(options).startsWith(parsed.start)).toBe(true);
  });

  it('stays within the limit when escaping grows the kept text (quotes, backslashes, control characters)', () => {
    for (const filler of ['"', '\\', '\u0001', 'é', '😀']) {
      const stored = boundedOptions({ body: Array.from({ length: 50 }, () => filler.repeat(200)) });
      expect(Buffer.byteLength(stored)).toBeLessThanOrEqual(MAX_OPTIONS_BYTES);
      expect(JSON.parse(stored).cut).toBe(true);
    }
  });

  it('gives a successful change more room', () => {
    const options = { before: { policies: 'p'.repeat(10_000) }, after: { policies: 'q'.repeat(10_000) } };
    expect(boundedOptions(options, MAX_CHANGE_OPTIONS_BYTES)).toBe(JSON.stringify(options));
    expect(JSON.parse(boundedOptions(options)).cut).toBe(true);
  });
});
