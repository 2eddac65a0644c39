// Kept whole (about 450 lines): every REST call of remote access (tickets, live sessions, recordings, access, reload, files, port presets) in one table, read with its permissions together.
import { z } from 'zod';

import type { LiveSessionItem, Portmap, RemoteCapabilities } from '../../shared/api-types.js';
import { pipeline } from 'node:stream/promises';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import type { ExtraOperation } from '../http/openapi.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { CONSOLE_UNACKED_MAX } from './relay.js';
import { CONSOLE_HISTORY_BYTES, MAX_WATCHERS, WATCHER_MAX_UNREAD } from './console-relay.js';
import { deviceId, devicePath, host, port, proto } from './schemas.js';
import { MAX_LIST_BYTES, MAX_LIST_ENTRIES } from '../../shared/protocol.js';
import { REMOTE_WS_PATHS } from '../http/api-paths.js';
import { TICKET_TTL_SECONDS } from './tickets.js';
import { MAX_END_REASON } from '../../shared/remote-frames.js';
import { singleLine } from '../../shared/text.js';
import { subjectRecords } from '../audit/subjects.js';
import type { Db } from '../db/database.js';
import type { RemoteService } from './service.js';

const deviceParams = z.object({ device_id: deviceId });

const portmapRecord = z.object({
  id: z.string(),
  target: z.string().describe('Devices the preset applies to: `*`, `tag:<tag>` or `node:<node id>` (a group or a device).'),
  name: z.string(),
  proto: proto,
  port: z.number(),
  dst: z.string().describe('Destination host as seen from the device.'),
}) satisfies z.ZodType<Portmap>;

const remoteSession = z.object({
  id: z.string(),
  user: z.object({ id: z.string(), email: z.string() }),
  device: z.object({ id: z.string(), name: z.string() }),
  kind: z.enum(['console', 'tunnel', 'copy', 'reload']),
  source: z.enum(['api', 'web', 'cli', 'ssh', 'qbee']),
  ip: z.string(),
  started_at: z.string(),
  bytes_in: z.number(),
  bytes_out: z.number(),
  can_end: z.boolean().describe('The caller may end it (their own session, or `remote-access:manage` on its device): for showing an End button.'),
  attached: z
    .boolean()
    .optional()
    .describe("Console only: false while its owner's connection is gone and it waits (CONSOLE_DETACH_GRACE_SECONDS) for a re-attach."),
  watchers: z
    .array(z.object({ user: z.object({ id: z.string(), email: z.string() }), since: z.string() }))
    .optional()
    .describe('Console only: who watches it read-only, since when.'),
  can_watch: z
    .boolean()
    .optional()
    .describe(
      'Console only: the caller may watch it (a grant to open that console on the device, and the session is theirs or on a device their `remote-access:manage` covers): for showing a Watch button. Always false for a console held by another broker (watched and re-attached through that broker only).',
    ),
  can_attach: z
    .boolean()
    .optional()
    .describe(
      "Console only: the caller may re-attach to it (see the console WebSocket's `attach`): their own console, from any sign-in session, held by this broker. Another user's console is never offered (and refused with `not_your_session`).",
    ),
  broker: z
    .string()
    .optional()
    .describe(
      "Several brokers (CLUSTER_SECRET): the BROKER_ID holding the session. Sessions of other brokers are read from the database: their bytes and watchers are as of that broker's last heartbeat (CLUSTER_HEARTBEAT_MS).",
    ),
}) satisfies z.ZodType<LiveSessionItem>;

const recordingRecord = z.object({
  id: z.string().describe('The session id: play it with GET /remote/recordings/{session_id}.'),
  audit_id: z.number(),
  session_id: z.string().nullable().describe("The sign-in session of the console's audit entry."),
  user: z.object({ id: z.string(), email: z.string() }),
  device: z.object({ id: z.string(), name: z.string() }),
  started_at: z.string(),
  ended_at: z.string().nullable(),
  duration_ms: z.number().nullable(),
  command: z.array(z.string()).optional().describe('The command run instead of a shell, if any.'),
});

const target = z.string().min(1).max(200).describe('`*`, `tag:<tag>` or `node:<node id>` (a group or a device); no action suffix.');
const presetName = singleLine(z.string().trim().min(1).max(64)).describe('Shown on the connect button, e.g. "SSH".');

const capabilities = z.object({
  device_id: z.string(),
  connected: z.boolean().describe('The device agent is connected now.'),
  console: z.boolean(),
  console_users: z
    .array(z.string())
    .optional()
    .describe('Present when every console grant on the device names users (`console(user=...)`): the console must be opened with `user=` one of these.'),
  tunnel: z.boolean(),
  tunnel_allowed: z
    .boolean()
    .optional()
    .describe('Present when the query names a tunnel (`port`, with `proto` and `dst`): whether a tunnel to it is allowed, decided as opening it would be.'),
  copy: z.boolean(),
  copy_paths: z
    .array(z.string())
    .optional()
    .describe(
      'Present when every grant reading files on the device (`copy` with `direction=download` or no direction) names directories: where a file browser may look (GET /remote/files/{device_id}).',
    ),
  reload: z.boolean(),
}) satisfies z.ZodType<RemoteCapabilities>;

const AUDITED =
  'Every attempt, allowed or denied, is written to the audit trail (GET /commitlist, event `remote.<action>.start|denied`) before anything starts; if that write fails the attempt is refused (500 `audit_failed`).';

/** What the remote-access routes use; `db` is read by the port presets' audit subjects. */
export interface RemoteRouteDeps {
  remote: RemoteService;
  db: Db;
}

export const remoteRoutes: RouteSpec<RemoteRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/remote/ticket',
    tag: 'remote',
    summary: 'Get a single-use ticket for a remote-access WebSocket',
    description: `For clients that cannot set the Authorization header on a WebSocket (browsers): pass it as \`?ticket=\` to the console, tunnel or copy endpoint. Valid once, for ${TICKET_TTL_SECONDS} s, and bound to the caller's sign-in session (signing out or being disabled voids it). Authorization happens when the WebSocket connects, not here. Body: \`{}\`.`,
    access: 'authenticated',
    audit: false,
    body: z.object({}),
    response: z.object({ ticket: z.string(), expires_in: z.number().describe('seconds') }),
    handler: async ({ principal, bearer, deps }) => deps.remote.issueTicket(principal, bearer as string),
  }),
  defineRoute({
    method: 'get',
    path: '/remote/sessions',
    tag: 'remote',
    summary: 'List live remote sessions (console, tunnel, copy)',
    description:
      "The sessions running now on this broker and, with several brokers, on every live broker of the cluster (`broker` names the one holding each), newest first: the caller's own, and those on devices their `remote-access:manage` covers (a `*` grant, as the Administrator's, covers every device); others are left out. `bytes_in` is client to device, `bytes_out` device to client, so far. `source` is the client kind (api, web, cli, ssh, qbee). Consoles also carry `attached` (false while their owner's connection is gone and they wait to be re-attached), `watchers` (who watches them read-only, since when), `can_watch` (the caller may watch: see the console WebSocket's `watch`) and `can_attach` (the caller's own console: they may re-attach to it from any sign-in session). `{items:[{id,user:{id,email},device:{id,name},kind,source,ip,started_at,bytes_in,bytes_out,can_end,attached?,watchers?,can_watch?,can_attach?}], total}`.",
    access: 'authenticated',
    response: listPage(remoteSession),
    handler: async ({ principal, deps }) => deps.remote.listSessions(principal),
  }),
  defineRoute({
    method: 'delete',
    path: '/remote/sessions/{id}',
    tag: 'remote',
    summary: 'End a live remote session',
    description:
      'The caller\'s own session, or any session on a device their `remote-access:manage` covers (403 otherwise; 404 for an unknown or ended session). Optional body `{"reason": "..."}` (one line, at most ' +
      MAX_END_REASON +
      ' characters). The client gets the error frame `session_ended` with `ended_by: {email, name}` and the `reason`, and close 4403 (the console shows "Ended by … (reason)"); the session\'s end entry in the audit trail (`remote.<action>.end`) says who ended it and why. A session held by another broker is ended by that broker (asked through the database\'s NOTIFY), with the same frame and audit. Answers 204 once the session is over (or after 5 s of waiting for another broker).',
    access: 'authenticated',
    audit: false,
    transaction: false,
    params: z.object({ id: z.string().min(1).max(64) }),
    body: z
      .object({
        reason: singleLine(z.string().trim().max(MAX_END_REASON, `at most ${MAX_END_REASON} characters`))
          .optional()
          .describe('Why: shown to the session’s user and kept in the audit trail'),
      })
      .strict(),
    handler: async ({ params, body, principal, deps }) => {
      await deps.remote.endSession(principal, params.id, body.reason || undefined);
      return undefined;
    },
  }),
  defineRoute({
    method: 'get',
    path: '/remote/recordings',
    tag: 'remote',
    summary: 'List console recordings',
    description:
      "The console recordings the caller may play (see GET /remote/recordings/{session_id}: their own, and those on devices their `remote-access:manage` covers), newest first; with `device_id`, that device's only. Recordings removed after RECORDING_RETENTION_DAYS are left out. `id` is the session id to play; `audit_id` the console's `remote.console.start` audit entry and `session_id` that entry's sign-in session. `duration_ms` and `ended_at` are null while the console runs. `{items:[{id,audit_id,session_id,user:{id,email},device:{id,name},started_at,ended_at,duration_ms,command?}], total}`.",
    access: 'authenticated',
    query: z.object({
      device_id: deviceId.optional(),
      ...pagingQuery.shape,
    }),
    response: listPage(recordingRecord),
    handler: async ({ query, principal, deps }) => deps.remote.listRecordings(principal, query),
  }),
  defineRoute({
    method: 'get',
    path: '/remote/recordings/{session_id}',
    tag: 'remote',
    summary: "A console session's recording (asciicast v2)",
    description:
      'The recording of a console session, named by its session id (the `recording` option of its `remote.console.start` audit entry; also the `id` of GET /remote/sessions). `application/x-asciicast`: a JSON header line `{version:2,width,height,timestamp,title}`, then one JSON array a line: `[seconds, "o", text]` for terminal output, `[seconds, "r", "COLSxROWS"]` for a resize, `[seconds, "m", "gap: n bytes not recorded"]` where output came faster than the disk took it. Keystrokes are not recorded. Written while the session runs; kept RECORDING_RETENTION_DAYS days. 404 when there is none. ' +
      "Served to the console's owner and to whoever holds `remote-access:manage` on its device (403 otherwise, audit:read is not enough); every read, and every refused one, is an audit entry `recording.read`.",
    access: 'authenticated',
    transaction: false,
    params: z.object({ session_id: z.string().min(1).max(64) }),
    handler: async ({ params, principal, deps, ip }) => {
      const cast = await deps.remote.recording(principal, params.session_id, ip);
      return Reply.raw(async (res) => {
        res.status(200);
        res.setHeader('Content-Type', 'application/x-asciicast');
        res.setHeader('Content-Length', String(cast.size));
        res.setHeader('Content-Disposition', `attachment; filename="${params.session_id}.cast"`);
        res.setHeader('Cache-Control', 'no-store');
        try {
          await pipeline(cast.stream, res);
        } catch {
          cast.stream.destroy();
        }
      });
    },
  }),
  defineRoute({
    method: 'get',
    path: '/remote/access/{device_id}',
    tag: 'remote',
    summary: 'What the caller may try on a device (console, tunnel, copy, reload)',
    description:
      'For showing or hiding buttons: each flag says some `remote-access:connect` grant on this device allows that action, whatever its options (a tunnel grant may still be limited to some ports). `connected` says whether the device agent is online. With `port` (and `proto`, `dst`), `tunnel_allowed` says whether a tunnel to that port and host is allowed, so a client can refuse before it listens (`fleet connect`). The session itself is decided, with its options, when it is opened.',
    access: 'device:read',
    device: ({ params }) => params.device_id,
    params: deviceParams,
    query: z.object({
      proto: proto.default('tcp').describe('With `port`: tcp (default) or udp.'),
      port: port.optional().describe('Ask about a tunnel to this port (1-65535).'),
      dst: host.default('localhost').describe('With `port`: the destination host as seen from the device (default localhost).'),
    }),
    response: capabilities,
    handler: async ({ params, query, principal, deps }) =>
      deps.remote.capabilities(
        principal,
        params.device_id,
        query.port === undefined ? undefined : { action: 'tunnel', proto: query.proto, port: query.port, dst: query.dst },
      ),
  }),
  defineRoute({
    method: 'post',
    path: '/remote/reload/{device_id}',
    tag: 'remote',
    summary: "Reload a device's agent",
    description: `Restarts the agent's work loop on the device and answers once the agent acknowledged: 200 \`{"ok":true,"device_id"}\`. Needs \`remote-access:connect\` on the device with the \`reload\` action (or no action), decided at the call. ${AUDITED} (A caller holding no remote-access grant on the device at all is refused by the route's permission check, and audited as denied too.) 403 when no grant allows it, 404 \`not_found\` for an unknown device, 404 \`device_not_connected\` when its agent is offline, 502 \`reload_failed\` when the agent does not acknowledge. Body: \`{}\` or none.`,
    access: 'remote-access:connect',
    device: ({ params }) => params.device_id,
    audit: false,
    auditDenied: { event: 'remote.reload', action: 'reload' },
    params: deviceParams,
    query: z.object({ source: z.enum(['api', 'cli', 'web']).default('api').describe('Client kind, for the audit trail.') }),
    body: z.object({}),
    response: z.object({ ok: z.literal(true), device_id: z.string() }),
    handler: async ({ params, query, principal, deps, ip }) => deps.remote.reload(principal, params.device_id, ip, query.source),
  }),
  defineRoute({
    method: 'get',
    path: '/remote/files/{device_id}',
    tag: 'remote',
    summary: 'List a directory on a device (the file browser)',
    description: `The entries of a directory on the device, through the copy channel: decided as a copy download of that directory (\`remote-access:connect\` with \`copy\`, its \`direction\` and \`path\` options), no new permission. ${AUDITED} The entry is \`remote.copy\` with \`op: "list"\`; its end records the answer's bytes. The device checks the directory again after resolving symlinks, within the grant's directories, and lists it without following any symlink in it: a symlink is an entry of type \`symlink\`, and opening it is a listing or a copy of its own, checked again (403 \`forbidden\` with \`refusal\` \`symlink_escape\` when it leads outside). \`{path, entries:[{name, type: file|dir|symlink|other, size, mtime}], truncated}\`: \`path\` is the directory as the device resolved it; folders first, then by name; at most ${MAX_LIST_ENTRIES} entries and ${MAX_LIST_BYTES / 1024} KiB, \`truncated\` true when more were left out. 404 \`device_not_connected\` when its agent is offline; 502 \`device_refused\` with \`refusal\` \`not_found\`, \`not_a_directory\` or \`unsupported\` (an agent too old to list).`,
    access: 'remote-access:connect',
    device: ({ params }) => params.device_id,
    audit: false,
    auditDenied: { event: 'remote.copy', action: 'copy' },
    transaction: false,
    params: deviceParams,
    query: z.object({
      path: devicePath.default('/').describe('Absolute path of the directory on the device (default `/`).'),
      source: z.enum(['api', 'cli', 'web']).default('api').describe('Client kind, for the audit trail.'),
    }),
    response: z.object({
      path: z.string(),
      entries: z.array(
        z.object({
          name: z.string(),
          type: z.enum(['file', 'dir', 'symlink', 'other']).describe('As lstat sees it: a symlink is never followed.'),
          size: z.number().describe('Bytes (regular files; 0 for the others).'),
          mtime: z.string().describe('Last modification (ISO 8601).'),
        }),
      ),
      truncated: z.boolean().describe('More entries were in the directory than the answer holds.'),
    }),
    handler: async ({ params, query, principal, deps, ip }) => deps.remote.listDirectory(principal, params.device_id, query.path, ip, query.source),
  }),
  defineRoute({
    method: 'get',
    path: '/device/{device_id}/run-agent',
    tag: 'remote',
    summary: "Run a device's agent now (qbee-cli run-agent)",
    description: `The call qbee-cli makes for \`run-agent\`: the agent runs its configuration now, keeping its connection and every remote session (POST /remote/reload/{device_id} restarts it instead), with the same authorization (\`remote-access:connect\` with the \`reload\` action, or no action) and audit. ${AUDITED} Answers 200 \`{"ok":true,"device_id"}\`; 404 \`device_not_connected\` when its agent is offline.`,
    access: 'remote-access:connect',
    device: ({ params }) => params.device_id,
    audit: false,
    auditDenied: { event: 'remote.reload', action: 'reload' },
    params: deviceParams,
    response: z.object({ ok: z.literal(true), device_id: z.string() }),
    handler: async ({ params, principal, deps, ip }) => deps.remote.reload(principal, params.device_id, ip, 'api', 'run'),
  }),
  defineRoute({
    method: 'get',
    path: '/service-connect/portmap',
    tag: 'remote',
    summary: 'List port presets (named tunnel targets)',
    description:
      "With `device_id`: the presets that apply to that device (target `*`, one of its tags, its own node or a group above it); the caller needs `remote-access:connect` or `device:read` on the device (403 otherwise, 404 for an unknown device). Without: the presets for `*` and those whose target the caller's grant of `remote-access:connect`, `device:read` or `remote-access:manage` covers (see POST), for holders of one of these; an empty list for anyone else. `{items:[{id,target,name,proto,port,dst}], total}`.",
    access: 'authenticated',
    query: z.object({
      device_id: deviceId.optional(),
      ...pagingQuery.shape,
    }),
    response: listPage(portmapRecord),
    handler: async ({ query, principal, deps }) => deps.remote.listPortmaps(principal, query),
  }),
  defineRoute({
    method: 'post',
    path: '/service-connect/portmap',
    tag: 'remote',
    summary: 'Create a port preset',
    description:
      "A named tunnel target (e.g. SSH, tcp 22 to localhost) offered by the CLI and the web console as a one-step connect on the devices `target` names. A preset grants nothing: connecting is still decided by `remote-access:connect`. The caller's `remote-access:manage` resources must cover the target (403 otherwise): `*` only by `*`; `tag:x` by `*` or `tag:x`; `node:n` by `*`, a `node:` at or above n, or a tag n carries or inherits. Answers 201 with the record.",
    access: 'remote-access:manage',
    audit: 'portmap.create',
    subject: (_input, s, answer) => subjectRecords.portmap(s.db, (answer as { id?: string } | undefined)?.id),
    status: 201,
    targets: async ({ body }, deps) => deps.remote.portmapTargets({ target: body.target }),
    body: z.object({ target, name: presetName, proto: proto.default('tcp'), port, dst: host.default('localhost') }),
    response: portmapRecord,
    handler: async ({ body, principal, deps }) => deps.remote.createPortmap(principal, body),
  }),
  defineRoute({
    method: 'patch',
    path: '/service-connect/portmap',
    tag: 'remote',
    summary: 'Change a port preset',
    description:
      "Changes the given fields of the preset named by `id` (the path has no id, as in the specification). The caller's `remote-access:manage` resources must cover both its current and its new target (403 otherwise). Answers 200 with the record; 404 for an unknown id.",
    access: 'remote-access:manage',
    audit: 'portmap.update',
    targets: async ({ body }, deps) => deps.remote.portmapTargets({ id: body.id, target: body.target }),
    subject: ({ body }, s) => subjectRecords.portmap(s.db, body.id),
    body: z
      .object({
        id: z.string().min(1).max(64),
        target: target.optional(),
        name: presetName.optional(),
        proto: proto.optional(),
        port: port.optional(),
        dst: host.optional(),
      })
      .refine((b) => Object.keys(b).some((k) => k !== 'id' && (b as Record<string, unknown>)[k] !== undefined), {
        message: 'send at least one field to change',
      }),
    response: portmapRecord,
    handler: async ({ body, deps }) => {
      const { id, ...patch } = body;
      return deps.remote.updatePortmap(id, Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)));
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/service-connect/portmap/{id}',
    tag: 'remote',
    summary: 'Delete a port preset',
    description: "The caller's `remote-access:manage` resources must cover the preset's target (403 otherwise). Answers 204; 404 for an unknown id.",
    access: 'remote-access:manage',
    audit: 'portmap.delete',
    targets: async ({ params }, deps) => deps.remote.portmapTargets({ id: params.id }),
    subject: ({ params }, s) => subjectRecords.portmap(s.db, params.id),
    params: z.object({ id: z.string().min(1).max(64) }),
    handler: async ({ params, deps }) => {
      await deps.remote.deletePortmap(params.id);
      return undefined;
    },
  }),
];

const errorFrameDoc =
  'Errors: a JSON text frame `{"type":"error","code":<http status>,"error":"<snake_case>","message"}`, then close with 4000 + that status: 4400 invalid query (with `field`), 4401 no or bad token/ticket, 4403 not allowed (also when access is withdrawn during the session: `access_withdrawn`), 4404 unknown device or device not connected (`device_not_connected`), 4500 audit write failed, 4502 refused or failed on the device.';

const wsCommon = `Authentication: \`Authorization: Bearer <token>\`, or \`?ticket=\` from POST /api/v2/remote/ticket (browsers). The WebSocket handshake completes once the attempt is decided against the caller's roles at that moment (with the action and its options), audited and set up on the device; then the server sends \`{"type":"ready"}\`. ${AUDITED} Live sessions are re-authorized every 2 s: disabling the user, signing out, deleting the device or withdrawing the grant ends them. The audit entry's end record carries duration_ms, bytes_in (client to device) and bytes_out (device to client). ${errorFrameDoc}`;

function wsParam(name: string, description: string, schema: Record<string, unknown>, required = false) {
  return { name, in: 'query', required, description, schema };
}

const common = [
  wsParam('device_id', 'The device (64 lowercase hex).', { type: 'string', pattern: '^[0-9a-f]{64}$' }, true),
  wsParam('ticket', 'Single-use ticket (instead of the Authorization header).', { type: 'string' }),
  wsParam('source', 'Client kind for the audit trail: cli, api (default) or web. Ticket sessions are recorded as web.', {
    type: 'string',
    enum: ['cli', 'api', 'web'],
  }),
];

function wsOperation(summary: string, description: string, parameters: unknown[], id: string): Record<string, unknown> {
  return {
    operationId: id,
    summary: `${summary} (WebSocket)`,
    description: `${description}\n\n${wsCommon}\n\nNeeds permission \`remote-access:connect\` on the device (resource filters and action options apply). Open it with a WebSocket client; the sandbox cannot.`,
    tags: ['remote'],
    'x-permission': 'remote-access:connect',
    'x-websocket': true,
    parameters: [...common, ...parameters],
    responses: {
      '101': { description: 'Switching protocols: the session runs over the WebSocket.' },
      '400': { description: 'Not a WebSocket handshake.' },
    },
  };
}

/** WebSocket endpoints and other operations documented outside the route table. */
export const remoteDocs: ExtraOperation[] = [
  {
    method: 'get',
    path: REMOTE_WS_PATHS.console,
    operation: wsOperation(
      'Remote console: a shell in a pty on the device',
      `Action \`console\`. Binary frames both ways are terminal bytes. Client text frames: \`{"type":"resize","cols","rows"}\`; \`{"type":"ack","bytes":n}\` once n bytes of output are rendered — the server keeps at most ${CONSOLE_UNACKED_MAX} bytes (1 MiB) un-acknowledged and then waits, which holds the shell on the device (a \`yes\` flood never fills memory). Server text frames: \`{"type":"ready","session","mode":"control","detach_grace":s}\`, \`{"type":"watchers","watchers":[{id,email}]}\` whenever who watches changes, \`{"type":"exit","code":n,"signal":n|null}\` after the last output byte, then close 1000.

**Detach and re-attach.** Closing with 1000 (or no code) ends the console. Any other drop (a reload's 1001, a lost connection) detaches it: the shell keeps running on the device for \`detach_grace\` seconds (CONSOLE_DETACH_GRACE_SECONDS, default 60), the broker keeps its latest ${CONSOLE_HISTORY_BYTES / 1024} KiB of output and then stops reading (the shell blocks). Its owner — the same user, authenticated afresh and allowed by their roles now — re-attaches with \`?attach=<session>\` instead of \`device_id\`: \`{"type":"ready",…,"reattached":true}\`, the kept output, then live output. A socket still attached is closed with \`session_taken_over\` (4409). Another user is refused (403 \`not_your_session\`), an ended session answers 404 \`session_not_found\`. Not re-attached in time, the console ends: its end entry says \`detached: not re-attached within N s\`. Each re-attach is audited as \`remote.console.attach\` (ref_id = the session's start entry); the session stays one audited session and one recording.

**Watch.** \`?watch=<session>\` shows a live console read-only: \`{"type":"ready",…,"mode":"watch"}\`, the kept output, then live output and the exit. Needs what opening that console needs (\`remote-access:connect\` for the device and its local user) and the session must be the caller's own or on a device their \`remote-access:manage\` covers (403 otherwise). Bytes, resizes and acks a watcher sends are dropped. A watcher that leaves more than ${WATCHER_MAX_UNREAD / 1024} KiB unread is cut off: it never slows the console. At most ${MAX_WATCHERS} watchers (429 \`too_many_watchers\`). Joins are audited as \`remote.console.watch\` (ref_id = the start entry); watchers are re-authorized with the session, and ending the session ends them.`,
      [
        wsParam('cols', 'Terminal width (1-1000, default 80).', { type: 'integer', minimum: 1, maximum: 1000 }),
        wsParam('rows', 'Terminal height (1-1000, default 24).', { type: 'integer', minimum: 1, maximum: 1000 }),
        wsParam('attach', 'Re-attach to your own detached (or still attached) console: its session id, instead of device_id.', { type: 'string' }),
        wsParam('watch', 'Watch a live console read-only: its session id, instead of device_id.', { type: 'string' }),
      ],
      'wsRemoteConsole',
    ),
  },
  {
    method: 'get',
    path: REMOTE_WS_PATHS.tunnel,
    operation: wsOperation(
      'Remote tunnel: one TCP connection (or UDP flow) to dst:port as seen from the device',
      'Action `tunnel` with options proto, port and dst. One WebSocket per TCP connection. Binary frames are stream bytes (UDP: one frame is one datagram). Text `{"type":"eof"}` half-closes: from the client it ends the direction to the device; from the server it says the device side has ended. The session closes with 1000 when both directions are done. Backpressure is end to end: a slow reader slows the sender.',
      [
        wsParam('proto', 'tcp (default) or udp.', { type: 'string', enum: ['tcp', 'udp'] }),
        wsParam('port', 'Destination port.', { type: 'integer', minimum: 1, maximum: 65535 }, true),
        wsParam('dst', 'Destination host as seen from the device (default localhost).', { type: 'string' }),
      ],
      'wsRemoteTunnel',
    ),
  },
  {
    method: 'get',
    path: REMOTE_WS_PATHS.copy,
    operation: wsOperation(
      'Remote file copy to or from a device path',
      'Action `copy` with options direction and path (compared after normalising; the agent re-checks after resolving symlinks on the device, within the directories of the grant). Upload (to the device): send binary frames, then `{"type":"eof"}`; the device writes a temporary file beside the target, checks `size` and `sha256` when given, flushes it and renames it over the target; the server answers `{"type":"result","ok":true,"bytes":n,"sha256":"..."}` and closes with 1000. Download: the server sends `{"type":"meta","size":n,"mode":n}`, binary frames, then the result. A failed copy answers an error frame with `copy_failed`.',
      [
        wsParam('direction', 'upload (to the device) or download (from it).', { type: 'string', enum: ['upload', 'download'] }, true),
        wsParam('path', 'Absolute path of the file on the device.', { type: 'string' }, true),
        wsParam('size', 'upload: byte count the device must receive.', { type: 'integer', minimum: 0 }),
        wsParam('sha256', 'upload: SHA-256 (hex) the device must receive.', { type: 'string', pattern: '^[0-9a-fA-F]{64}$' }),
      ],
      'wsRemoteCopy',
    ),
  },
];
