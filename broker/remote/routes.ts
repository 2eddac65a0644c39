import type { RouteSpec } from '../http/route.js';
import type { ExtraOperation } from '../http/openapi.js';

export const remoteRoutes: RouteSpec[] = [];

/** WebSocket endpoints and other operations documented outside the route table. */
export const remoteDocs: ExtraOperation[] = [];
