import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { TABLE_OWNERS } from './owners.js';

const BROKER = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const TABLES = new Set(Object.keys(TABLE_OWNERS));

/** The domain a broker source belongs to: its folder under broker/, or its own name at the top. */
function domainOf(file: string): string {
  return path.relative(BROKER, file).split(path.sep)[0];
}

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return full === path.join(BROKER, 'db', 'migrations') ? [] : sources(full);
    return e.name.endsWith('.ts') && !e.name.endsWith('.test.ts') ? [full] : [];
  });
}

/** Tables a source writes SQL on: Kysely's table arguments, and names in raw `sql` fragments. */
export function tablesIn(text: string): { tables: Set<string>; dynamic: number } {
  const tables = new Set<string>();
  const call =
    /\.(?:selectFrom|insertInto|replaceInto|updateTable|deleteFrom|mergeInto|innerJoin|leftJoin|rightJoin|fullJoin)\(\s*(\[?)\s*(['"`]?)([A-Za-z_]\w*)/g;
  let dynamic = 0;
  for (const m of text.matchAll(call)) {
    if (m[2]) {
      if (TABLES.has(m[3])) tables.add(m[3]);
    } else dynamic += 1;
    if (m[1])
      for (const lit of text.slice(m.index, text.indexOf(']', m.index)).matchAll(/['"]([a-z_]+)(?: as \w+)?['"]/g)) if (TABLES.has(lit[1])) tables.add(lit[1]);
  }
  for (const m of text.matchAll(/\bsql`([^`]*)`/g)) {
    for (const t of m[1].matchAll(/\b(?:from|join|update|into)\s+"?([a-z_]+)/gi)) if (TABLES.has(t[1])) tables.add(t[1]);
    for (const t of m[1].matchAll(/\b([a-z_]+)\.[a-z_]+\b/g)) if (TABLES.has(t[1])) tables.add(t[1]);
  }
  return { tables, dynamic };
}

describe('table owners', () => {
  it('finds tables in queries, joins and raw fragments, and counts a table it cannot name', () => {
    const { tables, dynamic } = tablesIn(
      "db.selectFrom('devices as d').innerJoin('nodes', 'nodes.id', 'd.node_id'); sql`lower(users.fname)`; db.deleteFrom(table); db.selectFrom(['inventory as i'])",
    );
    expect([...tables].sort()).toEqual(['devices', 'inventory', 'nodes', 'users']);
    expect(dynamic).toBe(1);
  });

  it('every table has one owner, and only its owner writes SQL on it', () => {
    const strays: string[] = [];
    for (const file of sources(BROKER)) {
      const domain = domainOf(file);
      const { tables, dynamic } = tablesIn(fs.readFileSync(file, 'utf8'));
      for (const table of tables) {
        const owner = TABLE_OWNERS[table as keyof typeof TABLE_OWNERS];
        if (owner !== domain && domain !== 'db') strays.push(`${path.relative(BROKER, file)}: ${table} (owned by ${owner})`);
      }
      // A table named by a variable is checked by nobody: only the database layer itself may do that.
      if (dynamic > 0 && domain !== 'db') strays.push(`${path.relative(BROKER, file)}: a table named by a variable`);
    }
    expect(strays.sort()).toEqual([]);
  });
});
