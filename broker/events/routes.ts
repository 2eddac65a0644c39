/**
 * GET /api/v2/events: the device event stream over server-sent events. It is a long-lived
 * response, not a request/answer call, so it is mounted beside the route table and documented
 * like the WebSocket endpoints. EventSource cannot send headers: the console authenticates with
 * a single-use `?ticket=` from POST /api/v2/remote/ticket; other clients send a bearer token.
 */
import type { RequestHandler } from 'express';
import type { AuthService } from '../auth/service.js';
import type { ExtraOperation } from '../http/openapi.js';
import { ApiError, forbidden, unauthorized } from '../http/errors.js';
import { API_PREFIX, EVENTS_PATH } from '../http/api-paths.js';
import { KEEPALIVE_MS, MAX_BUFFERED_BYTES, MAX_LISTENERS_PER_USER, mayListen, type DeviceEventStream, type Listener } from './stream.js';

export interface EventsDeps {
  events: DeviceEventStream;
  auth: Pick<AuthService, 'authenticate'>;
  redeemTicket: (ticket: string) => Promise<string | undefined>;
}

export function eventsHandler({ events, auth, redeemTicket }: EventsDeps): RequestHandler {
  return async (req, res, next) => {
    try {
      const ticket = typeof req.query.ticket === 'string' ? req.query.ticket : undefined;
      let token: string;
      let principal;
      if (ticket) {
        const held = await redeemTicket(ticket);
        if (!held) throw unauthorized('The ticket is unknown, used or expired; get a new one with POST /api/v2/remote/ticket.', 'invalid_ticket');
        token = held;
        // As for remote WebSockets: the ticket was issued with a valid token a minute ago at most.
        principal = await auth.authenticate(token, { allowExpired: true });
      } else {
        const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
        if (!m) throw unauthorized('Sign in first: send Authorization: Bearer <token>, or ?ticket= from POST /api/v2/remote/ticket.');
        token = m[1];
        principal = await auth.authenticate(token);
      }
      if (!mayListen(principal)) {
        throw forbidden('Needs device:read (device events) or device:approve (pending hosts): the stream tells about nothing else.');
      }
      const listener: Listener = {
        principal,
        sink: {
          write: (chunk) => void res.write(chunk),
          buffered: () => res.writableLength,
          close: () => res.destroy(),
        },
        recheck: () => auth.authenticate(token, { allowExpired: true }),
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
    } catch (err) {
      next(err);
    }
  };
}

export const eventsDocs: ExtraOperation[] = [
  {
    method: 'get',
    path: `${API_PREFIX}${EVENTS_PATH}`,
    operation: {
      operationId: 'deviceEvents',
      summary: 'Live device events (server-sent events)',
      description:
        'A `text/event-stream` of `device.online` and `device.offline` events, each with data `{"event","device_id","at"}` (`at`: ISO 8601), ' +
        'for the devices the caller may read (device:read, decided per event). Only agents connected to this broker are reported. ' +
        'To holders of device:approve (who may list GET /pendinghost): `pending.added`, `pending.approved` and `pending.removed` (rejected), each with data ' +
        '`{"event","device_id","hostname","at"}`, as hosts enrol with a manual key and are approved or rejected through this broker (reload GET /pendinghost for the list). ' +
        `A comment line every ${KEEPALIVE_MS / 1000} s keeps the stream open; the session is re-checked then and a revoked one ends the stream. ` +
        `A client that leaves more than ${MAX_BUFFERED_BYTES / 1024} KiB unread is dropped (reconnect and reload the tree). At most ${MAX_LISTENERS_PER_USER} streams per user (429). ` +
        'Authenticate with `Authorization: Bearer` or, from a browser EventSource, a single-use `?ticket=` from POST /api/v2/remote/ticket.',
      tags: ['devices'],
      'x-permission': 'device:read or device:approve',
      parameters: [
        { name: 'ticket', in: 'query', required: false, description: 'Single-use ticket from POST /api/v2/remote/ticket.', schema: { type: 'string' } },
      ],
      responses: {
        '200': { description: 'The event stream.', content: { 'text/event-stream': { schema: { type: 'string' } } } },
        '401': { description: 'No or bad token, or a spent ticket.' },
        '403': { description: 'Neither device:read nor device:approve.' },
        '429': { description: 'Too many open streams of this user.' },
      },
    },
  },
];
