/**
 * A test-only step of the REST pipeline: a 2xx JSON answer of a route that declares `response` is
 * parsed with that schema, so the schema the OpenAPI document publishes is the one the broker keeps.
 * A mismatch answers 500 `response_mismatch` (and is logged) so the test that made the call fails.
 *
 * Off unless the broker starts with FLEET_CHECK_RESPONSES=1, which only the test broker sets: a
 * production broker never pays for a second parse of its answers, nor refuses one for a schema slip.
 */
import type { Logger } from 'pino';
import { ApiError } from './errors.js';
import { API_PREFIX } from './api-paths.js';
import type { RouteSpec } from './route.js';

/** The environment variable that turns the check on (tests only). */
export const CHECK_RESPONSES_ENV = 'FLEET_CHECK_RESPONSES';

/** Whether brokers mounted from now on check their answers: read once, when the routes are mounted. */
export function checkResponsesFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return env[CHECK_RESPONSES_ENV] === '1';
}

/** Throws a 500 `response_mismatch` when a 2xx JSON answer does not match the route's declared `response`. */
export function checkResponse(route: RouteSpec, status: number, body: unknown, logger: Pick<Logger, 'error'>): void {
  if (!route.response || status < 200 || status > 299 || body === undefined) return;
  const result = route.response.safeParse(body);
  if (result.success) return;
  const issue = result.error.issues[0];
  const where = issue.path.length ? issue.path.map(String).join('.') : '(root)';
  const call = `${route.method.toUpperCase()} ${route.absolute ? '' : API_PREFIX}${route.path}`;
  const message = `${call} answered outside its declared response schema at ${where}: ${issue.message}`;
  logger.error({ route: call, issues: result.error.issues.slice(0, 5) }, 'response does not match its declared schema');
  throw new ApiError(500, 'response_mismatch', message);
}
