import { describe, expect, it } from 'vitest';
import { forStdout, parseCast } from './commands/play.js';

describe('fleet play', () => {
  it('reads an asciicast v2 recording, skipping a line cut short at its end', () => {
    const { header, events } = parseCast('{"version":2,"width":80,"height":24}\n[0.1,"o","a"]\n[0.5,"r","100x30"]\n[0.7,"o","b');
    expect(header).toMatchObject({ width: 80, height: 24 });
    expect(events).toEqual([
      [0.1, 'o', 'a'],
      [0.5, 'r', '100x30'],
    ]);
    expect(() => parseCast('{"version":1}\n')).toThrow(/version 2/);
  });

  it('writes recorded control characters raw only to a terminal', () => {
    expect(forStdout('\x1b[31mred\x1b[0m\r\n', true)).toBe('\x1b[31mred\x1b[0m\r\n');
    expect(forStdout('\x1b[31mred\x1b[0m\r\n', false)).toBe('\\x1b[31mred\\x1b[0m\n');
  });
});
