import { z } from 'zod';
import { pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';

export const auditQuery = z.object({
  device_id: z.string().max(64).optional(),
  user_id: z.string().max(64).optional(),
  action: z.string().max(64).optional(),
  result: z.enum(['allowed', 'denied', 'ok', 'error']).optional(),
  event: z.string().max(64).optional(),
  from: z.iso.datetime().optional(),
  to: z.iso.datetime().optional(),
  ...pagingQuery.shape,
});

export const auditRoutes: RouteSpec[] = [
  defineRoute({
    method: 'get',
    path: '/commitlist',
    tag: 'audit',
    summary: 'Audit trail: remote-access attempts and changes made through the API',
    description:
      'Newest first. Remote-access entries carry event (remote.<action>.start|denied), result (allowed|denied), reason, options, source and, once ended, ended_at, duration_ms, bytes_in, bytes_out.',
    access: 'audit:read',
    query: auditQuery,
    handler: async ({ query, services }) => services.audit.list(query),
  }),
];
