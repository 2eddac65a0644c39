/** Checks on the data the broker sends for a bundle: each throws an Error saying which field is wrong. */

export type Json = Record<string, unknown>;

export function object(value: unknown, what: string): Json {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error(`${what} must be an object`);
  return value as Json;
}

export function list(o: Json, key: string, what: string, max = 1000): unknown[] {
  const value = o[key];
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new Error(`${what}.${key} must be a list`);
  if (value.length > max) throw new Error(`${what}.${key} has more than ${max} entries`);
  return value;
}

export function text(o: Json, key: string, what: string, opts: { required?: boolean; max?: number } = {}): string {
  const value = o[key];
  if (value === undefined || value === null || value === '') {
    if (opts.required) throw new Error(`${what}.${key} is required`);
    return '';
  }
  if (typeof value !== 'string') throw new Error(`${what}.${key} must be a string`);
  if (value.length > (opts.max ?? 4096)) throw new Error(`${what}.${key} is longer than ${opts.max ?? 4096} characters`);
  if (value.includes('\0')) throw new Error(`${what}.${key} contains a NUL character`);
  return value;
}

export function flag(o: Json, key: string, what: string): boolean {
  const value = o[key];
  if (value === undefined || value === null) return false;
  if (typeof value !== 'boolean') throw new Error(`${what}.${key} must be true or false`);
  return value;
}

/** A login name as useradd accepts it (a `$(parameter)` is resolved before this check). */
export const USERNAME = /^[a-z_][a-z0-9_.-]{0,31}\$?$/i;

/** qbee's key/value pairs (`parameters`, `secrets`, a file set's `parameters`). */
export function keyValues(o: Json, key: string, what: string): { key: string; value: string }[] {
  return list(o, key, what).map((entry, i) => {
    const e = object(entry, `${what}.${key}[${i}]`);
    return { key: text(e, 'key', `${what}.${key}[${i}]`, { required: true, max: 256 }), value: text(e, 'value', `${what}.${key}[${i}]`, { max: 65536 }) };
  });
}
