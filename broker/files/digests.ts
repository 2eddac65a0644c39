import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import { BoundedMap } from '../../shared/bounded-map.js';

const DIGEST_CACHE_ENTRIES = 50_000;

/** sha256 of the folder store's files by `dev:ino:size:mtimeMs`: survives renames and moves, misses after any rewrite. */
export class DigestCache {
  private readonly digests = new BoundedMap<string, string>(DIGEST_CACHE_ENTRIES);

  get(stat: fs.Stats): string | undefined {
    return this.digests.get(digestKey(stat));
  }

  /** Hashes the file at `real` (not following a link) and remembers it; undefined if it vanished or changed while read. */
  async hash(real: string, stat: fs.Stats): Promise<string | undefined> {
    let handle: fsp.FileHandle | undefined;
    try {
      handle = await fsp.open(real, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
      const sha256 = await digestOf(handle);
      const now = await handle.stat();
      if (digestKey(now) !== digestKey(stat)) return undefined; // changed while reading
      this.remember(stat, sha256);
      return sha256;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
      throw err;
    } finally {
      await handle?.close();
    }
  }

  remember(stat: fs.Stats, sha256: string): void {
    this.digests.set(digestKey(stat), sha256);
  }
}

/** Hex SHA-256 of an open file from its start; the handle stays open. */
export async function digestOf(handle: fsp.FileHandle): Promise<string> {
  const hash = crypto.createHash('sha256');
  for await (const chunk of handle.createReadStream({ autoClose: false, start: 0 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

function digestKey(stat: fs.Stats): string {
  return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}`;
}
