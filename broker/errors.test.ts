import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DomainError, ERROR_KINDS, isRefusal, rateLimited, unavailable } from './errors.js';

const ROOT = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const HTTP_ERRORS = path.join(ROOT, 'broker', 'http', 'errors.ts');
const SKIPPED = new Set(['node_modules', 'dist', 'artifacts']);

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (SKIPPED.has(e.name) || e.name.startsWith('.')) return [];
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sources(full);
    return /\.tsx?$/.test(e.name) ? [full] : [];
  });
}

/** The files a source imports (static, dynamic, re-exports), resolved from its own folder. */
export function importsOf(file: string, text: string): string[] {
  const specifiers = [...text.matchAll(/\b(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+)['"]/g)].map((m) => m[1]);
  return specifiers.map((s) => path.resolve(path.dirname(file), s.replace(/\.js$/, '.ts')));
}

/** HTTP's own errors are for HTTP's own modules: broker/http/ and the route modules (routes.ts, auth/profile-routes.ts). */
function mayImportHttpErrors(file: string): boolean {
  const rel = path.relative(ROOT, file).split(path.sep);
  return (rel[0] === 'broker' && rel[1] === 'http') || /(^|-)routes\.ts$/.test(rel[rel.length - 1]);
}

describe('domain errors', () => {
  it('finds imports of a module written every way', () => {
    const file = path.join(ROOT, 'broker', 'x', 'service.ts');
    const text =
      "import { badRequest } from '../http/errors.js';\nexport { ApiError } from \"../http/errors.js\";\nawait import('../http/errors.js');\nimport x from 'zod';";
    expect(importsOf(file, text)).toEqual([HTTP_ERRORS, HTTP_ERRORS, HTTP_ERRORS]);
    expect(mayImportHttpErrors(file)).toBe(false);
    expect(mayImportHttpErrors(path.join(ROOT, 'broker', 'auth', 'profile-routes.ts'))).toBe(true);
  });

  it('only broker/http/ and route modules import http/errors.ts: services, sockets and tests throw DomainError', () => {
    const strays = ['agent', 'bench', 'broker', 'cli', 'shared', 'test', 'web-console']
      .flatMap((dir) => (fs.existsSync(path.join(ROOT, dir)) ? sources(path.join(ROOT, dir)) : []))
      .filter((file) => !mayImportHttpErrors(file) && importsOf(file, fs.readFileSync(file, 'utf8')).includes(HTTP_ERRORS))
      .map((file) => path.relative(ROOT, file));
    expect(strays).toEqual([]);
  });

  it('a refusal is the caller refused; the broker or a service it needs failing is not', () => {
    const kinds = ERROR_KINDS.filter((kind) => isRefusal(new DomainError(kind, 'x', 'x')));
    expect(kinds).toEqual(['invalid', 'unauthenticated', 'forbidden', 'not_found', 'conflict', 'too_large', 'rate_limited']);
    expect(isRefusal(Object.assign(new Error('x'), { kind: 'invalid' }))).toBe(false);
    expect(isRefusal(unavailable('mail_failed', 'x'))).toBe(false);
  });

  it('a rephrased error keeps its kind, code and when to try again', () => {
    const err = rateLimited('too_many_tickets', 'Too many.', 60, { scope: 'all' });
    const told = err.rephrased('changes[0]: Too many.');
    expect([told.kind, told.code, told.message, told.details, told.extras]).toEqual([
      'rate_limited',
      'too_many_tickets',
      'changes[0]: Too many.',
      { scope: 'all' },
      { retryAfterSeconds: 60 },
    ]);
  });
});
