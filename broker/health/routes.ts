import { z } from 'zod';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import type { HealthService } from './service.js';

const checks = z.object({ database: z.enum(['ok', 'failed']), cluster: z.enum(['ok', 'failed', 'off']) });

/** What the health route uses. */
export interface HealthRouteDeps {
  health: HealthService;
}

export const healthRoutes: RouteSpec<HealthRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/health',
    tag: 'health',
    summary: 'Whether this broker is ready for traffic (load balancer health check)',
    description:
      'No authentication, nothing secret: for a load balancer or an orchestrator. 200 `{ok: true, broker_id, reasons: [], checks}` ' +
      'when the broker takes traffic. 503 `not_ready` (with `Retry-After`) while it shuts down (`draining`, from the first ' +
      'moment of a SIGTERM), when its database does not answer `select 1` within 2 s (`database`), or, with CLUSTER_SECRET, ' +
      'before it has joined the cluster or while its LISTEN connection is lost (`cluster`). `broker_id` is BROKER_ID in a cluster, else null.',
    access: 'public',
    audit: false,
    response: z.object({ ok: z.literal(true), broker_id: z.string().nullable(), reasons: z.array(z.string()), checks }),
    handler: async ({ deps, setHeader }) => {
      setHeader('Cache-Control', 'no-store');
      const report = await deps.health.check();
      if (report.ok) return report;
      setHeader('Retry-After', '5');
      return Reply.json(503, {
        code: 503,
        error: 'not_ready',
        message: `This broker does not take traffic now (${report.reasons.join(', ')}).`,
        ...report,
      });
    },
  }),
];
