/**
 * Reading an OSV feed from files: a feed file or a folder of `.json` files from disk, bounded in
 * size and count, each parsed into advisories; a malformed file is reported and skipped. Storing and
 * matching what was read is the service's job (service.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseDocument, type Advisory } from './osv.js';

/** The largest feed file read (one upload, or one file of a folder). */
export const MAX_FEED_FILE_BYTES = 256 * 1024 * 1024;
/** Files one folder import reads at most. */
export const MAX_FEED_FILES = 500_000;

/** A feed file that could not be read as OSV, and why. */
export interface FeedFileError {
  file: string;
  error: string;
}

/** Parses feed files (each an advisory or an array); a malformed file is reported in `errors` and skipped. */
export function readFeedFiles(files: Array<{ name: string; json: string }>): { advisories: Advisory[]; skipped: number; errors: FeedFileError[] } {
  const advisories: Advisory[] = [];
  const errors: FeedFileError[] = [];
  let skipped = 0;
  for (const f of files) {
    const r = parseDocument(f.json);
    if (!r.ok) errors.push({ file: f.name, error: r.error });
    else {
      advisories.push(...r.advisories);
      skipped += r.skipped;
    }
  }
  return { advisories, skipped, errors };
}

/** Reads a feed file or a folder of `.json` files (below it too) from disk, bounded. */
export function readFeedPath(target: string): Array<{ name: string; json: string }> {
  const stat = fs.statSync(target);
  const files: string[] = [];
  if (stat.isDirectory()) {
    const walk = (dir: string) => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const full = path.join(dir, entry.name);
        if (entry.isDirectory()) walk(full);
        else if (entry.isFile() && entry.name.toLowerCase().endsWith('.json')) {
          if (files.length >= MAX_FEED_FILES) throw new Error(`more than ${MAX_FEED_FILES} .json files below ${target}`);
          files.push(full);
        }
      }
    };
    walk(target);
    files.sort();
  } else files.push(target);
  return files.map((f) => {
    const size = fs.statSync(f).size;
    if (size > MAX_FEED_FILE_BYTES) throw new Error(`${f} is ${size} bytes, over the ${MAX_FEED_FILE_BYTES} a feed file may be`);
    return { name: stat.isDirectory() ? path.relative(target, f) : path.basename(f), json: fs.readFileSync(f, 'utf8') };
  });
}
