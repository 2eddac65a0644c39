import canonicalize from 'canonicalize';
import { describe, expect, it } from 'vitest';
import { canonicalJson } from './canonical-json.js';

describe('canonicalJson', () => {
  it('writes the RFC 8785 text (the canonicalize package) for every JSON value it hashes or signs', () => {
    const values: unknown[] = [
      null,
      true,
      0,
      -0,
      0.1,
      1e21,
      1e-7,
      -123.456,
      Number.MAX_SAFE_INTEGER,
      '',
      'plain',
      'quote " backslash \\ tab \t newline \n nul \u0000 del \u007f',
      'é ü 中文 😀 \u2028 \u2029',
      [],
      {},
      [1, 'a', null, [true, {}]],
      { b: 1, a: { d: [1, { f: 2, e: 3 }], c: null } },
      // UTF-16 code unit order, not code point order: '\ue000' sorts after '😀' (\ud83d...)
      { '\ue000': 1, '😀': 2, a: 3, A: 4, '': 5, é: 6 },
      { id: 7, ts: '2026-11-26T10:00:00.000Z', options: '{"x":1}', bytes_in: null, duration_ms: 12 },
      {
        device_id: 'a'.repeat(64),
        nonce: 'n',
        seq: 3,
        ts: 1_700_000_000_000,
        message: { t: 'config', config: { bundles: ['x'], bundle_data: { x: { enabled: true } } } },
      },
    ];
    for (const value of values) expect(canonicalJson(value)).toBe(canonicalize(value));
  });
});
