import type { NextFunction, Request, Response } from 'express';
import { badRequest } from './errors.js';

/** A surrogate that is not half of a pair (with the `u` flag a pair is one code point, which this does not match). */
export const LONE_SURROGATE = /\p{Cs}/u;

/** Depth walked at most: express.json's 1 MB bound keeps bodies small, this keeps the walk's stack so too. */
const MAX_DEPTH = 64;

/**
 * The path (`a.b.2`) of the first key or string in `value` that holds a lone UTF-16 surrogate, or
 * undefined when there is none. JSON's `\ud800` escape makes one; UTF-8 cannot hold it, so both
 * databases would store U+FFFD in its place and what was checked or hashed would not be what is kept.
 */
export function loneSurrogateAt(value: unknown, path: string[] = []): string | undefined {
  if (typeof value === 'string') return LONE_SURROGATE.test(value) ? path.join('.') || 'body' : undefined;
  if (value === null || typeof value !== 'object' || path.length >= MAX_DEPTH) return undefined;
  for (const [key, child] of Object.entries(value)) {
    if (LONE_SURROGATE.test(key)) return [...path, key.replace(/\p{Cs}/gu, '\ufffd')].join('.');
    const found = loneSurrogateAt(child, [...path, key]);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** After express.json: a JSON body holding a lone surrogate is refused (400, CONTRACT.md) before any route reads it. */
export function refuseLoneSurrogates(req: Request, _res: Response, next: NextFunction): void {
  const field = loneSurrogateAt(req.body);
  if (field === undefined) return next();
  next(badRequest(`${field}: holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair); send valid Unicode text.`, { field }));
}
