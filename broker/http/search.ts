/**
 * The `search` query parameter of qbee's list calls: a JSON object of filters (`?search={"title":"x"}`).
 * Each list declares the filters it applies as a strict schema, so a filter it cannot apply is a
 * 400 naming it, never silently dropped: a client deleting what a listing returns must not get
 * more than it asked for.
 */
import { z, type ZodObject } from 'zod';
import { invalid } from '../errors.js';

/** Longest `search` accepted, in characters. */
export const MAX_SEARCH_LENGTH = 4096;

export function parseJsonSearch<S extends ZodObject>(raw: string | undefined, schema: S): z.infer<S> {
  if (raw === undefined || raw.trim() === '') return schema.parse({});
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw invalid('search: must be a JSON object, e.g. {"title":"part of a title"}.', { field: 'search' });
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw invalid('search: must be a JSON object, e.g. {"title":"part of a title"}.', { field: 'search' });
  }
  const result = schema.strict().safeParse(parsed);
  if (!result.success) {
    const issue = result.error.issues[0];
    const keys = issue.code === 'unrecognized_keys' ? issue.keys : [];
    const where = keys.length ? keys.join(', ') : issue.path.join('.') || 'search';
    const why = keys.length ? 'is a filter this broker cannot apply; leave it out.' : issue.message;
    throw invalid(`search.${where}: ${why}`, { field: 'search', filter: keys[0] ?? issue.path.join('.') });
  }
  return result.data as z.infer<S>;
}
