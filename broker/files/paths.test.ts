import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import { formatPath, parseName, parseStorePath, STAGING_DIR } from './paths.js';

function refusal(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('store paths', () => {
  it('parses rooted paths, collapsing duplicate slashes and remembering a trailing one', () => {
    expect(parseStorePath('/configs/app.conf')).toEqual({ segments: ['configs', 'app.conf'], folder: false });
    expect(parseStorePath('//configs///sub/')).toEqual({ segments: ['configs', 'sub'], folder: true });
    expect(parseStorePath('/')).toEqual({ segments: [], folder: true });
    expect(formatPath(['a', 'b'])).toBe('/a/b');
    expect(formatPath(['a'], true)).toBe('/a/');
    expect(formatPath([])).toBe('/');
  });

  it('keeps percent signs literally: nothing is decoded twice', () => {
    expect(parseStorePath('/%2e%2e/%2F').segments).toEqual(['%2e%2e', '%2F']);
  });

  it.each([
    ['relative', 'configs/app.conf'],
    ['empty', ''],
    ['dot-dot', '/a/../b'],
    ['leading dot-dot', '/../etc/passwd'],
    ['dot', '/a/./b'],
    ['backslash', '/a\\..\\b'],
    ['NUL', '/a\u0000b'],
    ['newline', '/a\nb'],
    ['C1 control', '/a\u0085b'],
    ['right-to-left override', '/evil\u202egnp.exe'],
    ['bidi isolate', '/a\u2066b\u2069'],
    ['fullwidth dots', '/\uff0e\uff0e/etc'],
    ['two-dot leader', '/\u2025/etc'],
    ['fullwidth slash', '/a\uff0fb'],
    ['overlong name', `/${'x'.repeat(256)}`],
    ['overlong multibyte name', `/${'é'.repeat(128)}`],
    ['overlong path', `/${Array.from({ length: 20 }, () => 'y'.repeat(250)).join('/')}`],
    ['staging folder', `/${STAGING_DIR}/x`],
  ])('refuses a %s path with 400 naming the field', (_what, input) => {
    const err = refusal(() => parseStorePath(input, 'newPath'));
    expect(err.kind).toBe('invalid');
    expect(err.details.field).toBe('newPath');
  });

  it('refuses non-strings', () => {
    expect(refusal(() => parseStorePath(undefined)).kind).toBe('invalid');
    expect(refusal(() => parseName(42)).kind).toBe('invalid');
  });

  it('normalises names to NFC', () => {
    const decomposed = 'cafe\u0301.txt';
    expect(parseName(decomposed)).toBe('caf\u00e9.txt');
    expect(parseStorePath(`/${decomposed}`).segments).toEqual(['caf\u00e9.txt']);
  });

  it('accepts names of exactly 255 bytes and ordinary dotted names', () => {
    expect(parseName('x'.repeat(255))).toHaveLength(255);
    expect(parseName('...')).toBe('...');
    expect(parseName('.hidden')).toBe('.hidden');
  });

  it('refuses a name with a slash, and . or ..', () => {
    for (const bad of ['a/b', '.', '..', '']) expect(refusal(() => parseName(bad, 'name')).details.field).toBe('name');
  });
});
