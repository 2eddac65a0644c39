import type { NextFunction, Request, Response } from 'express';
import { hasLoneSurrogate, replaceLoneSurrogates } from '../../shared/text.js';
import { badRequest } from './errors.js';

/** Depth walked at most: express.json's 1 MB bound keeps bodies small, this keeps the walk's stack so too. */
const MAX_DEPTH = 64;

/**
 * The path (`a.b.2`) of the first key or string in `value` that holds a lone UTF-16 surrogate, or
 * undefined when there is none. JSON's `\ud800` escape makes one; UTF-8 cannot hold it, so both
 * databases would store U+FFFD in its place and what was checked or hashed would not be what is kept.
 */
export function loneSurrogateAt(value: unknown, path: string[] = []): string | undefined {
  if (typeof value === 'string') return hasLoneSurrogate(value) ? path.join('.') || 'body' : undefined;
  if (value === null || typeof value !== 'object' || path.length >= MAX_DEPTH) return undefined;
  for (const [key, child] of Object.entries(value)) {
    if (hasLoneSurrogate(key)) return [...path, replaceLoneSurrogates(key)].join('.');
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
