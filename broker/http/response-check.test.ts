import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import { z } from 'zod';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Services } from '../services.js';
import { checkResponsesFromEnv } from './response-check.js';
import { defineRoute, mountRoute, Reply, type RouteSpec } from './route.js';
import { errorHandler, mountRoutes, type PipelineDeps } from './router.js';

/** A small route table whose declared answers the handlers keep or break. */
const routes: RouteSpec<undefined>[] = [
  defineRoute({
    method: 'get',
    path: '/kept',
    summary: 'answers what it declares',
    tag: 'test',
    access: 'public',
    response: z.object({ name: z.string(), count: z.number() }),
    handler: async () => ({ name: 'a', count: 1 }),
  }),
  defineRoute({
    method: 'get',
    path: '/broken',
    summary: 'declares a number, answers a string',
    tag: 'test',
    access: 'public',
    response: z.object({ items: z.array(z.object({ count: z.number() })) }),
    handler: async () => ({ items: [{ count: 'one' }] }),
  }),
  defineRoute({
    method: 'get',
    path: '/broken-reply',
    summary: 'a Reply with a 2xx status is checked too',
    tag: 'test',
    access: 'public',
    response: z.object({ id: z.string() }),
    handler: async () => Reply.json(201, { other: 1 }),
  }),
  defineRoute({
    method: 'get',
    path: '/refusal',
    summary: 'a non-2xx Reply is not the declared answer',
    tag: 'test',
    access: 'public',
    response: z.object({ id: z.string() }),
    handler: async () => Reply.json(409, { code: 409, error: 'conflict', message: 'no' }),
  }),
];

let server: Server | undefined;
afterEach(() => {
  server?.close();
  server = undefined;
});

async function serve(checkResponses: boolean | undefined) {
  const logger = { error: vi.fn(), warn: vi.fn(), info: vi.fn(), debug: vi.fn() };
  const services = { logger } as unknown as Services;
  const pipeline = { logger } as unknown as PipelineDeps;
  const app = express();
  const router = express.Router();
  mountRoutes(
    router,
    routes.map((r) => mountRoute(r, undefined)),
    pipeline,
    checkResponses === undefined ? {} : { checkResponses },
  );
  app.use(router);
  app.use(errorHandler(services));
  server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server?.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const get = async (path: string) => {
    const res = await fetch(`${base}${path}`);
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  return { get, logger };
}

describe('declared response check (test-only)', () => {
  it('answers 500 response_mismatch naming the route and the first issue, and logs it', async () => {
    const { get, logger } = await serve(true);
    const r = await get('/broken');
    expect(r.status).toBe(500);
    expect(r.body).toMatchObject({ code: 500, error: 'response_mismatch' });
    expect(r.body.message).toContain('GET /api/v2/broken');
    expect(r.body.message).toContain('items.0.count');
    expect(logger.error).toHaveBeenCalledWith(expect.objectContaining({ route: 'GET /api/v2/broken' }), expect.any(String));
  });

  it('checks a 2xx Reply, lets a matching answer and a refusal through', async () => {
    const { get } = await serve(true);
    expect((await get('/broken-reply')).body).toMatchObject({ code: 500, error: 'response_mismatch' });
    expect(await get('/kept')).toEqual({ status: 200, body: { name: 'a', count: 1 } });
    expect(await get('/refusal')).toMatchObject({ status: 409, body: { error: 'conflict' } });
  });

  it('checks nothing with the switch off', async () => {
    const { get, logger } = await serve(false);
    expect(await get('/broken')).toEqual({ status: 200, body: { items: [{ count: 'one' }] } });
    expect(await get('/broken-reply')).toEqual({ status: 201, body: { other: 1 } });
    expect(logger.error).not.toHaveBeenCalled();
  });

  it('is off by default: only FLEET_CHECK_RESPONSES=1 turns it on', () => {
    expect(checkResponsesFromEnv({})).toBe(false);
    expect(checkResponsesFromEnv({ FLEET_CHECK_RESPONSES: '0' })).toBe(false);
    expect(checkResponsesFromEnv({ FLEET_CHECK_RESPONSES: 'true' })).toBe(false);
    expect(checkResponsesFromEnv({ FLEET_CHECK_RESPONSES: '1' })).toBe(true);
  });
});
