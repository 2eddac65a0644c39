import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import { z } from 'zod';
import { afterEach, describe, expect, it } from 'vitest';
import { Principal } from '../access/principal.js';
import { defineRoute, mountRoute, type RouteSpec } from './route.js';
import { mountRoutes, type PipelineDeps } from './router.js';

/** A domain's deps as a routes module declares them: here one small record of calls. */
interface NotesDeps {
  notes: { add(text: string): { id: string; text: string }; get(id: string): { id: string; text: string } | undefined; targets(): string[] };
}

const notesRoutes: RouteSpec<NotesDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/notes',
    summary: 'add a note',
    tag: 'notes',
    access: 'remote-access:manage',
    audit: 'note.create',
    body: z.object({ text: z.string() }),
    targets: async (_input, deps) => deps.notes.targets(),
    subject: async (_input, deps, answer) => deps.notes.get((answer as { id?: string } | undefined)?.id ?? ''),
    handler: async ({ body, deps }) => deps.notes.add(body.text),
  }),
];

// A handler reaches only what its routes module declares: tsc refuses the rest.
export const refused: RouteSpec<NotesDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/refused',
    summary: 'reaches past its deps',
    tag: 'notes',
    access: 'authenticated',
    // @ts-expect-error `users` is not among the notes routes' deps
    handler: async ({ deps }) => deps.users,
  }),
];
// @ts-expect-error a route is mounted only with the deps it was declared for
mountRoute(notesRoutes[0], { users: {} });

let server: Server | undefined;
afterEach(() => {
  server?.close();
  server = undefined;
});

/** The pipeline's own deps, each a fake that records what it was asked. */
function fakePipeline() {
  const seen: string[] = [];
  const principal = new Principal({ id: 'u1', email: 'u1@example.com', fname: 'U', lname: '1' }, 's1', [{ permission: 'remote-access:manage', resources: [] }]);
  const pipeline: PipelineDeps = {
    authenticator: { authenticate: async () => ({ principal, token: 't', viaTicket: false }) },
    access: {
      require: async (_p, permission) => void seen.push(`require ${permission}`),
      requireTarget: async (_p, permission, target) => void seen.push(`target ${permission} ${target}`),
    },
    audit: {
      recordChange: async (entry) => void seen.push(`audit ${entry.event} ${JSON.stringify(entry.options)}`),
      recordRemoteStart: async () => seen.push('remote start'),
    },
    store: { transaction: async (work) => (seen.push('transaction'), work(undefined as never)) },
    epoch: { bump: () => void seen.push('bump') },
    logger: { error: () => void seen.push('logged') },
    config: { dataDir: '/nonexistent', fileMaxBytes: 1 },
  };
  return { pipeline, seen };
}

describe('request pipeline', () => {
  it("hands a route's handler, targets and subject the deps it was mounted with, and runs its own steps on the pipeline's deps", async () => {
    const stored = new Map<string, { id: string; text: string }>();
    const notes: NotesDeps = {
      notes: {
        add: (text) => {
          const note = { id: `n${stored.size + 1}`, text };
          stored.set(note.id, note);
          return note;
        },
        get: (id) => stored.get(id),
        targets: () => ['tag:office'],
      },
    };
    const { pipeline, seen } = fakePipeline();
    const app = express();
    app.use(express.json());
    const router = express.Router();
    mountRoutes(
      router,
      notesRoutes.map((r) => mountRoute(r, notes)),
      pipeline,
      { checkResponses: false },
    );
    app.use(router);
    server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server?.once('listening', resolve));
    const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/notes`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer t' },
      body: JSON.stringify({ text: 'hello' }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: 'n1', text: 'hello' });
    expect(seen).toEqual([
      'require remote-access:manage',
      'target remote-access:manage tag:office',
      'transaction',
      `audit note.create ${JSON.stringify({ params: {}, before: null, after: { id: 'n1', text: 'hello' } })}`,
      'bump',
    ]);
  });
});
