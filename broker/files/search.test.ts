import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import { matchesPattern, parsePathPattern } from './search.js';

const matcher = (pattern: string) => {
  const p = parsePathPattern(pattern, 'path');
  return (value: string) => matchesPattern(p, value);
};

describe('file search patterns', () => {
  it('reads qbee-cli’s folder pattern as "below this folder", never a sibling with the same start', () => {
    const below = matcher('^/dir/.*');
    expect(below('/dir/a.txt')).toBe(true);
    expect(below('/dir/sub/b.txt')).toBe(true);
    expect(below('/dir')).toBe(false);
    expect(below('/dirx/a.txt')).toBe(false);
    expect(below('/other/dir/a.txt')).toBe(false);
    expect(matcher('^/.*')('/anything/at/all')).toBe(true);
  });

  it('takes a dot literally: a subset of what the regular expression matches, never more', () => {
    const dotted = matcher('^/my.dir/.*');
    expect(dotted('/my.dir/x')).toBe(true);
    expect(dotted('/myXdir/x')).toBe(false);
    expect(matcher('^/a\\+b/.*')('/a+b/c')).toBe(true);
  });

  it('anchors as asked', () => {
    expect(matcher('^/a/b$')('/a/b')).toBe(true);
    expect(matcher('^/a/b$')('/a/bc')).toBe(false);
    expect(matcher('conf$')('/x/app.conf')).toBe(true);
    expect(matcher('conf$')('/x/app.conf.bak')).toBe(false);
    expect(matcher('app')('/x/my-app.conf')).toBe(true);
  });

  it.each([
    ['a quantifier', '^/dir/a+'],
    ['a class', '^/dir/[a-z]'],
    ['a group', '^/(a|b)/'],
    ['alternation', '^/a|^/b'],
    ['".*" in the middle', '^/dir/.*/secret'],
    ['a character-class escape', '^/dir/\\d'],
    ['a trailing backslash', '^/dir\\'],
    ['a nested-quantifier bomb', '^(a+)+$'],
  ])('refuses %s with 400 naming the filter', (_what, pattern) => {
    let err: unknown;
    try {
      parsePathPattern(pattern, 'path');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DomainError);
    expect((err as DomainError).kind).toBe('invalid');
    expect((err as DomainError).details).toMatchObject({ field: 'search', filter: 'path' });
  });

  it('bounds the pattern length', () => {
    expect(() => parsePathPattern(`^/${'a'.repeat(9000)}`, 'path')).toThrow(DomainError);
    // A long but legal pattern is plain string work.
    expect(matcher(`^/${'a'.repeat(4000)}/.*`)(`/${'a'.repeat(4000)}/x`)).toBe(true);
  });
});
