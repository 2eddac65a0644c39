import { describe, expect, it } from 'vitest';
import { humanBytes, humanDuration, parseRemote } from './commands/cp.js';

describe('fleet cp', () => {
  it('shows sizes, speeds and time left in human units', () => {
    expect(humanBytes(512)).toBe('512 B');
    expect(humanBytes(1536)).toBe('1.5 KiB');
    expect(humanBytes(25 * 1024 * 1024)).toBe('25 MiB');
    expect(humanDuration(7)).toBe('0:07');
    expect(humanDuration(125)).toBe('2:05');
    expect(humanDuration(3 * 3600 + 61)).toBe('3:01:01');
    expect(humanDuration(Infinity)).toBe('--:--');
  });

  it('reads device paths as absolute only', () => {
    expect(parseRemote('dev:/tmp')).toEqual({ device: 'dev', path: '/tmp' });
    expect(parseRemote('./local:file')).toBeUndefined();
    expect(() => parseRemote('dev:tmp/x')).toThrow(/paths on a device are absolute: write dev:\/tmp\/x/);
  });
});
