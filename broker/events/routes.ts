/**
 * GET /api/v2/events: the device event stream over server-sent events. A long-lived answer, but a
 * call of the route table like any other: EventSource cannot send headers, so the console
 * authenticates with a single-use `?ticket=` from POST /api/v2/remote/ticket (`bearer-or-ticket`);
 * other clients send a bearer token.
 */
import { z } from 'zod';
import { ApiError } from '../http/errors.js';
import { EVENTS_PATH } from '../http/api-paths.js';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import { KEEPALIVE_MS, PENDING_PERMISSION, MAX_BUFFERED_BYTES, MAX_LISTENERS_PER_USER, type Listener, type DeviceEventStream } from './stream.js';
import type { AuthService } from '../auth/service.js';

/** What the event stream uses: the stream, and the authentication that re-checks a listener's token. */
export interface EventsRouteDeps {
  events: Pick<DeviceEventStream, 'add' | 'remove'>;
  auth: Pick<AuthService, 'authenticate'>;
}

export const eventsRoutes: RouteSpec<EventsRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: EVENTS_PATH,
    tag: 'devices',
    summary: 'Live device events (server-sent events)',
    description:
      'A `text/event-stream` of `device.online` and `device.offline` events, each with data `{"event","device_id","at"}` (`at`: ISO 8601), ' +
      'for the devices the caller may read (device:read, decided per event). Only agents connected to this broker are reported. ' +
      'To holders of device:approve (who may list GET /pendinghost): `pending.added`, `pending.approved` and `pending.removed` (rejected), each with data ' +
      '`{"event","device_id","hostname","at"}`, as hosts enrol with a manual key and are approved or rejected through this broker (reload GET /pendinghost for the list). ' +
      `A comment line every ${KEEPALIVE_MS / 1000} s keeps the stream open; the session is re-checked then and a revoked one ends the stream. ` +
      `A client that leaves more than ${MAX_BUFFERED_BYTES / 1024} KiB unread is dropped (reconnect and reload the tree). At most ${MAX_LISTENERS_PER_USER} streams per user (429). ` +
      'Authenticate with `Authorization: Bearer` or, from a browser EventSource, a single-use `?ticket=` from POST /api/v2/remote/ticket.',
    // The stream tells about nothing else: device events (device:read) and pending hosts (device:approve).
    access: ['device:read', PENDING_PERMISSION],
    credential: 'bearer-or-ticket',
    stream: true,
    query: z.object({
      ticket: z
        .union([z.string(), z.array(z.string())])
        .optional()
        .describe('Single-use ticket from POST /api/v2/remote/ticket.'),
    }),
    handler: async ({ principal, token, deps }) => {
      const { auth, events } = deps;
      return Reply.raw((res) => {
        const listener: Listener = {
          principal,
          sink: {
            write: (chunk) => void res.write(chunk),
            buffered: () => res.writableLength,
            close: () => res.destroy(),
          },
          recheck: () => auth.authenticate(token as string, { allowExpired: true }),
        };
        if (!events.add(listener)) {
          throw new ApiError(429, 'too_many_streams', `You already hold ${MAX_LISTENERS_PER_USER} event streams; close one first.`);
        }
        res.on('close', () => events.remove(listener));
        res.writeHead(200, {
          'content-type': 'text/event-stream; charset=utf-8',
          'cache-control': 'no-store',
          connection: 'keep-alive',
          'x-accel-buffering': 'no',
        });
        res.write('retry: 5000\n: connected\n\n');
      });
    },
  }),
];
