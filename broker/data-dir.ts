import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';

/**
 * DATA_DIR holds the database (with the JWT secret and bootstrap keys), the file store, mail with
 * sign-in links and the local agent's private key: only the broker's user may read it.
 */
export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/** Creates `dir` (and missing parents) 0700; an existing one readable by group or others is tightened. */
export function ensurePrivateDir(dir: string, logger?: Pick<Logger, 'warn'>): void {
  fs.mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  tighten(dir, PRIVATE_DIR_MODE, logger);
}

/** Makes an existing file or folder private (0600 / 0700) when group or others have any access to it. */
export function tighten(file: string, mode: number, logger?: Pick<Logger, 'warn'>): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch {
    return; // absent: nothing to tighten
  }
  if (st.isSymbolicLink() || (st.mode & 0o077) === 0) return;
  fs.chmodSync(file, mode);
  logger?.warn({ path: file, was: (st.mode & 0o777).toString(8), now: mode.toString(8) }, 'group or others could access a broker data path; tightened');
}

/** Creates `file` empty with mode 0600 unless it exists, and tightens it when it does. */
export function ensurePrivateFile(file: string, logger?: Pick<Logger, 'warn'>): void {
  fs.closeSync(fs.openSync(file, 'a', PRIVATE_FILE_MODE));
  tighten(file, PRIVATE_FILE_MODE, logger);
}

/** Where uploads are received before the file store stages them; emptied at start. */
export function uploadTmpDir(dataDir: string): string {
  return path.join(dataDir, 'tmp');
}

/**
 * Empties DATA_DIR/tmp at start, whichever file store is used: what is there are bodies of uploads
 * a crash or a kill interrupted, never part of any store. Left private (0700) and empty.
 */
export async function emptyUploadTmpDir(dataDir: string, logger?: Pick<Logger, 'warn'>): Promise<void> {
  const dir = uploadTmpDir(dataDir);
  await fs.promises.rm(dir, { recursive: true, force: true });
  ensurePrivateDir(dir, logger);
}
