#!/usr/bin/env node
// The `fleet` command in the repository: the build (dist/cli/fleet.mjs, `npm run build:cli`) while
// none of the sources it was built from is newer, else the TypeScript CLI (cli/main.ts) through tsx.
import fs from 'node:fs';

const root = new URL('../', import.meta.url);
const built = new URL('dist/cli/fleet.mjs', root);

function fresh() {
  try {
    const at = fs.statSync(built).mtimeMs;
    const inputs = JSON.parse(fs.readFileSync(new URL('dist/cli/fleet.inputs.json', root), 'utf8'));
    return Array.isArray(inputs) && inputs.length > 0 && inputs.every((file) => fs.statSync(new URL(file, root)).mtimeMs <= at);
  } catch {
    return false;
  }
}

if (fresh()) {
  await import(built.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import('../cli/main.ts');
}
