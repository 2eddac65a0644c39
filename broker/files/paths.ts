import { DomainError } from '../errors.js';
import { BIDI_CHARACTERS, CONTROL_CHARACTERS } from '../../shared/text.js';

/**
 * The grammar of file-store paths. Every path the API accepts is a "/"-rooted virtual path
 * ("/configs/app.conf"); it is checked here, once, before anything touches the disk. Nothing is
 * decoded again after the query string's single decoding, so "%2e%2e" is an ordinary name.
 */

/** Longest path, in UTF-8 bytes (Linux PATH_MAX). */
export const MAX_PATH_BYTES = 4096;
/** Longest single name, in UTF-8 bytes (Linux NAME_MAX). */
export const MAX_NAME_BYTES = 255;
/** The hidden folder at the top of the store where uploads are staged; it is never addressable. */
export const STAGING_DIR = '.fleet-staging';

export interface StorePath {
  /** Names from the top of the store down, NFC-normalised; empty for the store's root. */
  segments: string[];
  /** The input ended in "/": the caller means a folder. */
  folder: boolean;
}

/** "/a/b" for a path; "/" for the root. */
export function formatPath(segments: readonly string[], folder = false): string {
  if (segments.length === 0) return '/';
  return `/${segments.join('/')}${folder ? '/' : ''}`;
}

const invalid = (field: string, message: string): DomainError => new DomainError('invalid', 'invalid_path', `${field}: ${message}`, { field });

// C0 and C1 control characters and DEL: never part of a name an operator means to type.
const CONTROL = CONTROL_CHARACTERS;

/**
 * Checks one name (a single path segment) and returns it NFC-normalised. Refused: empty names,
 * "." and "..", names that a compatibility normalisation turns into those or into a separator
 * ("．．", "‥", "／"), backslashes, control characters and names over 255 bytes.
 */
export function parseName(input: unknown, field = 'name'): string {
  if (typeof input !== 'string') throw invalid(field, 'a name is required.');
  if (CONTROL.test(input)) throw invalid(field, 'control characters (including NUL) are not allowed in names.');
  if (BIDI_CHARACTERS.test(input)) throw invalid(field, 'bidirectional formatting characters (U+202E and the like) are not allowed in names.');
  if (input.includes('\\')) throw invalid(field, 'backslashes are not allowed in names.');
  if (input.includes('/')) throw invalid(field, 'a name cannot contain "/".');
  const name = input.normalize('NFC');
  if (name === '') throw invalid(field, 'a name cannot be empty.');
  const compat = name.normalize('NFKC');
  if (name === '.' || name === '..' || compat === '.' || compat === '..') throw invalid(field, '"." and ".." are not allowed as names.');
  if (compat.includes('/') || compat.includes('\\')) throw invalid(field, `"${name}" reads as a path separator and is not allowed.`);
  if (Buffer.byteLength(name, 'utf8') > MAX_NAME_BYTES) throw invalid(field, `a name may be at most ${MAX_NAME_BYTES} bytes long.`);
  return name;
}

/**
 * Parses a "/"-rooted store path. Duplicate slashes collapse; "." and ".." segments, backslashes,
 * control characters, overlong names or paths and the staging folder's name are refused with
 * 400 naming `field`.
 */
export function parseStorePath(input: unknown, field = 'path'): StorePath {
  if (typeof input !== 'string' || input === '') throw invalid(field, 'a path is required.');
  if (Buffer.byteLength(input, 'utf8') > MAX_PATH_BYTES) throw invalid(field, `a path may be at most ${MAX_PATH_BYTES} bytes long.`);
  if (CONTROL.test(input)) throw invalid(field, 'control characters (including NUL) are not allowed in paths.');
  if (BIDI_CHARACTERS.test(input)) throw invalid(field, 'bidirectional formatting characters (U+202E and the like) are not allowed in paths.');
  if (input.includes('\\')) throw invalid(field, 'backslashes are not allowed in paths; separate folders with "/".');
  if (!input.startsWith('/')) throw invalid(field, 'a path starts with "/" (the top of the file store), e.g. "/configs/app.conf".');
  const segments = input
    .split('/')
    .filter((s) => s !== '')
    .map((s) => parseName(s, field));
  if (segments[0] === STAGING_DIR) throw invalid(field, `"${STAGING_DIR}" is reserved by the file store.`);
  const folder = input.endsWith('/');
  if (Buffer.byteLength(formatPath(segments, folder), 'utf8') > MAX_PATH_BYTES) throw invalid(field, `a path may be at most ${MAX_PATH_BYTES} bytes long.`);
  return { segments, folder };
}
