/** Checks both file stores (the folder tree and the database) apply the same way, with the same refusals. */
import { DomainError, invalid } from '../errors.js';
import { formatPath, MAX_PATH_BYTES, parseName, parseStorePath, STAGING_DIR, type StorePath } from './paths.js';

export const pathError = (field: string, message: string, error = 'invalid_path') => invalid(`${field}: ${message}`, { field }, error);

/** A target path the store would write: within the length limit, and not the staging folder (reserved by the directory store, kept out of both). */
export function checkTarget(segments: string[], field: string): void {
  if (Buffer.byteLength(formatPath(segments), 'utf8') > MAX_PATH_BYTES)
    throw pathError(field, `the resulting path would be longer than ${MAX_PATH_BYTES} bytes.`);
  if (segments[0] === STAGING_DIR) throw pathError(field, `"${STAGING_DIR}" is reserved by the file store.`);
}

/**
 * What a rename (`name`) or move (`newPath`; ending in "/" keeps the name) asks for, checked the same
 * way by both stores: the source, the target, the field a refusal names, and whether nothing moves.
 */
export function moveTarget(input: string, change: { name?: string; newPath?: string }): { source: StorePath; target: string[]; field: string; same: boolean } {
  const source = parseStorePath(input, 'path');
  if (source.segments.length === 0) throw pathError('path', 'the top of the file store cannot be renamed or moved.');
  const hasName = change.name !== undefined && change.name !== '';
  const hasNewPath = change.newPath !== undefined && change.newPath !== '';
  if (hasName === hasNewPath) throw invalid('Send either name (rename in place) or newPath (move), not both and not neither.', { field: 'name' });
  let target: string[];
  let field: string;
  if (hasName) {
    field = 'name';
    target = [...source.segments.slice(0, -1), parseName(change.name, 'name')];
  } else {
    field = 'newPath';
    const dest = parseStorePath(change.newPath, 'newPath');
    target = dest.folder ? [...dest.segments, source.segments[source.segments.length - 1]] : dest.segments;
    if (target.length === 0) throw pathError('newPath', 'the top of the file store is not a name to move to.');
  }
  checkTarget(target, field);
  const same = target.length === source.segments.length && target.every((s, i) => s === source.segments[i]);
  const inside = target.length > source.segments.length && source.segments.every((s, i) => s === target[i]);
  if (inside) throw pathError(field, 'a folder cannot be moved into itself.');
  return { source, target, field, same };
}
export const quotaExceeded = (quota: number, used: number, size: number) =>
  new DomainError(
    'too_large',
    'quota_exceeded',
    `The file store quota of ${quota} bytes would be exceeded: ${used} bytes are in use and the file has ${size}. Delete files first.`,
    {
      quota_bytes: quota,
      used_bytes: used,
    },
  );
