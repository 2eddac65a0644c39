/**
 * Where the broker's entry points live: the REST prefix and the paths of the WebSocket endpoints
 * and the event stream. A leaf: it imports nothing, so every domain may name a path without
 * reaching into the router.
 */

export const API_PREFIX = '/api/v2';

/** The device event stream (server-sent events), under API_PREFIX. */
export const EVENTS_PATH = '/events';

/** Remote-access WebSockets, one per kind of session. */
export const REMOTE_WS_PATHS = {
  console: `${API_PREFIX}/remote/console`,
  tunnel: `${API_PREFIX}/remote/tunnel`,
  copy: `${API_PREFIX}/remote/copy`,
} as const;

/** Where brokers open their links to each other (never reached by users or agents: it needs CLUSTER_SECRET). */
export const PEER_WS_PATH = `${API_PREFIX}/cluster/peer`;

/** Express path for an OpenAPI-style path: `/a/{b}` → `/a/:b`. */
export function expressPath(openapiPath: string): string {
  return openapiPath.replace(/\{([^}]+)\}/g, ':$1');
}
