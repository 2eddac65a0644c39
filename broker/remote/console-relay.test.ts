import { describe, expect, it } from 'vitest';
import { OutputHistory } from './console-relay.js';

describe('OutputHistory', () => {
  it('keeps everything until full, in order', () => {
    const h = new OutputHistory(16);
    h.push(Buffer.from('abc'));
    h.push(Buffer.from('defg'));
    expect(h.contents().toString()).toBe('abcdefg');
    expect(h.size).toBe(7);
  });

  it('keeps only the latest bytes once it wraps, starting after a line break', () => {
    const h = new OutputHistory(8);
    h.push(Buffer.from('0123456'));
    h.push(Buffer.from('7\n9AB'));
    // the ring holds "456 7\n9AB" minus the oldest: "4567\n9AB"; the replay starts after the line break
    expect(h.size).toBe(8);
    expect(h.contents().toString()).toBe('9AB');
  });

  it('takes a chunk larger than itself by keeping its tail', () => {
    const h = new OutputHistory(4);
    h.push(Buffer.from('xy'));
    h.push(Buffer.from('abcdefgh'));
    expect(h.contents().toString()).toBe('efgh');
    h.push(Buffer.from('i'));
    expect(h.contents().toString()).toBe('fghi');
  });
});
