import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { migrations } from './index.js';

const dir = path.dirname(fileURLToPath(import.meta.url));
const files = fs
  .readdirSync(dir)
  .filter((f) => /^\d{4}-.*\.ts$/.test(f) && !f.endsWith('.test.ts'))
  .sort();

describe('migrations', () => {
  it('are one file each, named as recorded in the database, in order', () => {
    for (const dialect of ['sqlite', 'postgres'] as const) {
      const names = Object.keys(migrations(dialect));
      expect(names).toEqual([...names].sort());
      expect(names).toEqual(files.map((f) => f.replace(/\.ts$/, '').replace(/-/g, '_')));
    }
  });

  it('import nothing from the domains, so a later change to domain code cannot change an old migration', () => {
    for (const file of files) {
      const text = fs.readFileSync(path.join(dir, file), 'utf8');
      const imported = [...text.matchAll(/^import .* from '([^']+)';$/gm)].map((m) => m[1]);
      for (const spec of imported) expect([file, spec]).toEqual([file, expect.stringMatching(/^(kysely|node:crypto|\.\.\/dialect\.js)$/)]);
    }
  });
});
