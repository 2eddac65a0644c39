import { describe, expect, it } from 'vitest';
import { HEAP_GROWING_PERCENT, heapGrowingFlag } from './heap.js';

describe('heap growth', () => {
  it('limits the growth between full collections unless node was given its own', () => {
    expect(heapGrowingFlag([])).toBe(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
    expect(heapGrowingFlag(['--enable-source-maps'], '--max-old-space-size=4096')).toBe(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
    expect(heapGrowingFlag(['--heap-growing-percent=20'])).toBeUndefined();
    expect(heapGrowingFlag(['--heap_growing_percent=20'])).toBeUndefined();
    expect(heapGrowingFlag([], '--enable-source-maps --heap-growing-percent=10')).toBeUndefined();
  });
});
