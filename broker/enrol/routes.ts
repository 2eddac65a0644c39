import { z } from 'zod';
import type { BootstrapKeyEntry, PendingHostItem } from '../../shared/api-types.js';
import { AGENT_ENROL_PATH, AGENT_WS_PATH, AgentClose, AUTH_SIGNING_PREFIX, PROTOCOL_VERSION } from '../../shared/protocol.js';
import { NODE_ID_PATTERN } from '../../shared/resources.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import type { ExtraOperation } from '../http/openapi.js';
import { badRequest } from '../http/errors.js';
import { pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { API_PREFIX } from '../http/api-paths.js';
import type { BootstrapKeyRecord, PendingHost, EnrolService } from './service.js';
import { singleLine } from '../../shared/text.js';
import { subjectRecords } from '../audit/subjects.js';
import type { BrokerKey } from '../agents/broker-key.js';
import type { AccessService } from '../access/access.js';
import type { Db } from '../db/database.js';

const keyRef = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9_-]+$/, 'is not a bootstrap key or key id')
  .describe('The bootstrap key itself, or its `key_id`.');
const groupId = z.string().regex(NODE_ID_PATTERN, 'is not a group node id').describe('Node id of the group enrolled devices go to.');
const autoAccept = z.boolean().describe('true: devices enrolling with this key are approved at once; false: they wait in the pending hosts.');
const label = singleLine(z.string().trim().max(100)).describe(
  'What people call the key, to tell keys apart ("" for none). An extra field qbee clients ignore.',
);
const expiresAt = z.iso
  .datetime({ offset: true })
  .nullable()
  .describe(
    'ISO 8601 time ahead of now after which the key enrols nothing (enrolment answers 403 `bootstrap_key_expired`); null: it never expires. An extra field qbee clients ignore.',
  );
const keyExtras = {
  label: z.string().describe('What people call the key ("" for none).'),
  expires_at: z.string().nullable().describe('ISO 8601 expiry; null: never expires.'),
  expired: z.boolean().describe('true once `expires_at` has passed (by the broker clock): the key enrols nothing.'),
};
const nodeId = z.string().regex(DEVICE_ID_PATTERN, 'must be a device id: 64 lowercase hexadecimal characters').describe('The device id (node id of a device).');

const keyRecord = z.object({
  key: z
    .string()
    .optional()
    .describe('The bootstrap key an agent is started with (`--bootstrap-key`). Shown only to holders of bootstrap-keys:manage; readers see `key_id`.'),
  key_id: z.string().describe('A public name of the key (the start of its SHA-256), for lists and logs.'),
  group_id: z.string(),
  auto_accept: z.boolean(),
  created_at: z.string().describe('ISO 8601'),
  ...keyExtras,
});

/** The entries of a key map: the record, with `key` (the secret) only for bootstrap-keys:manage holders. */
const keyMap = z.record(
  z.string(),
  z.object({
    group_id: z.string(),
    auto_accept: z.boolean(),
    key_id: z.string(),
    created_at: z.string().describe('ISO 8601'),
    ...keyExtras,
    key: z.string().optional().describe('The key itself: given to bootstrap-keys:manage holders only.'),
    devices: z
      .number()
      .int()
      .optional()
      .describe('GET /bootstrapkeylist only: devices enrolled with the key, pending and approved (an extra field qbee clients ignore)'),
  }) satisfies z.ZodType<BootstrapKeyEntry>,
);

const KEY_SECRET_RULE =
  'Holders of bootstrap-keys:manage get the map keyed by the key itself (what an agent is started with); readers without it get it keyed by `key_id`, the secret left out.';

function keysAsMap(keys: BootstrapKeyRecord[], withSecret: boolean): z.infer<typeof keyMap> {
  const out: z.infer<typeof keyMap> = {};
  for (const k of keys) {
    const entry = {
      group_id: k.group_id,
      auto_accept: k.auto_accept,
      key_id: k.key_id,
      created_at: k.created_at,
      label: k.label,
      expires_at: k.expires_at,
      expired: k.expired,
      ...(k.devices === undefined ? {} : { devices: k.devices }),
    };
    if (withSecret) out[k.key] = { ...entry, key: k.key };
    else out[k.key_id] = entry;
  }
  return out;
}

const pendingHost = z.object({
  node_id: z.string().describe('The device id: SHA-256 of its public key.'),
  hostname: z.string(),
  created_at: z.string().describe('First enrolment, ISO 8601'),
  last_ip: z.string().nullable(),
  last_seen: z.string().nullable().describe('Last enrolment or connection attempt, ISO 8601'),
  public_key_fingerprint: z.string().describe('`SHA256:<base64>` of the public key, to compare with the agent log before approving.'),
  group_id: z.string().describe('Where the device goes when approved: its bootstrap key group.'),
  bootstrap_key_id: z.string().nullable(),
  pub_key_digest: z.string().describe('Same as `node_id` (qbee).'),
  approved: z.boolean().describe('Always false here (qbee).'),
  remoteaddress: z.string().describe('Address of the last enrolment, "" if unknown (qbee).'),
  timestamp: z.number().int().describe('First enrolment, Unix seconds (qbee).'),
  host: z.string(),
  fqhost: z.string(),
  uqhost: z.string(),
}) satisfies z.ZodType<PendingHostItem>;

/** A pending host in both vocabularies: this broker's fields and those of qbee's PendingDevice. */
function qbeePendingHost(h: PendingHost): PendingHostItem {
  const uqhost = h.hostname.split('.')[0];
  return {
    ...h,
    pub_key_digest: h.node_id,
    approved: false,
    remoteaddress: h.last_ip ?? '',
    timestamp: Math.floor(Date.parse(h.created_at) / 1000),
    host: h.hostname,
    fqhost: h.hostname,
    uqhost,
  };
}

const TAG_KEYS = 'bootstrap-keys';
const TAG_ENROL = 'enrolment';

/**
 * What the enrolment routes use: the service, the broker key an enrolling agent pins, who may read
 * bootstrap secrets, and `db` for the audit subjects.
 */
export interface EnrolRouteDeps {
  enrol: EnrolService;
  brokerKey: Pick<BrokerKey, 'publicKeyPem'>;
  access: Pick<AccessService, 'canReadBootstrapSecrets'>;
  db: Db;
}

export const enrolRoutes: RouteSpec<EnrolRouteDeps>[] = [
  // ---- the agent's enrolment -------------------------------------------------------------------
  defineRoute({
    method: 'post',
    path: AGENT_ENROL_PATH.slice(API_PREFIX.length),
    tag: TAG_ENROL,
    summary: 'Enrol an agent (called by the agent)',
    description:
      'The agent registers its EC P-256 public key with a bootstrap key. The device id is the SHA-256 (hex) of the DER public key. ' +
      'Idempotent for the same public key: answers the device state, `pending` until an operator approves it (POST /pendinghost), ' +
      'or `approved` (at once with an `auto_accept` key), with `broker_key`: the public key (PEM, Ed25519) the agent pins and from then on requires ' +
      'the broker to prove (welcome) and to have signed configurations and update announcements with. ' +
      'Nothing secret is returned: the agent then connects to the agent WebSocket and proves ' +
      'possession of its key by signing a challenge. An unknown bootstrap key answers 403 `unknown_bootstrap_key`, an expired one 403 `bootstrap_key_expired`; ' +
      'failed attempts are limited ' +
      'per address (429). A key that was removed or rejected answers 403 `device_revoked`.',
    access: 'public',
    audit: 'device.enrol',
    body: z.object({
      bootstrap_key: z.string().min(1).max(256).describe('A key from POST /bootstrapkey.'),
      public_key: z.string().min(1).max(4096).describe('The agent public key, PEM (SPKI), EC P-256.'),
      hostname: singleLine(z.string().trim().min(1).max(253)).describe('The host name of the device (its first title in the tree).'),
    }),
    response: z.object({
      device_id: z.string(),
      state: z.enum(['pending', 'approved']),
      broker_key: z.string().describe("The broker's public signing key (PEM SPKI, Ed25519), the same from every broker of the database."),
    }),
    handler: async ({ body, deps, ip }) => ({ ...(await deps.enrol.enrol(body, ip)), broker_key: deps.brokerKey.publicKeyPem }),
  }),

  // ---- bootstrap keys ---------------------------------------------------------------------------
  defineRoute({
    method: 'post',
    path: '/bootstrapkey',
    tag: TAG_KEYS,
    summary: 'Create a bootstrap key',
    description:
      'Makes a new random key (192 bits). Answers `{"<key>": {"group_id", "auto_accept", "label", "expires_at", "expired"}}` (qbee clients read the first two). ' +
      '`group_id` defaults to `unassigned_group` and must be an existing group; `label` names the key for people; `expires_at` (ahead of now) ends its use, ' +
      'left out or null it never expires.',
    access: 'bootstrap-keys:manage',
    audit: 'bootstrapkey.create',
    subject: async (_input, s, answer) => (answer ? subjectRecords.bootstrapKey(s.db, Object.keys(answer)[0]) : undefined),
    body: z.object({ group_id: groupId.optional(), auto_accept: autoAccept.optional(), label: label.optional(), expires_at: expiresAt.optional() }),
    response: z.record(z.string(), z.object({ group_id: z.string(), auto_accept: z.boolean(), ...keyExtras })),
    handler: async ({ body, deps, principal }) => {
      const k = await deps.enrol.createKey(body, principal.user.id);
      return { [k.key]: { group_id: k.group_id, auto_accept: k.auto_accept, label: k.label, expires_at: k.expires_at, expired: k.expired } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/bootstrapkeylist',
    tag: TAG_KEYS,
    summary: 'List bootstrap keys',
    description:
      'Keys as a map `{"<key>": {group_id, auto_accept, key_id, created_at, key}}` (the shape qbee clients decode), oldest first in the page; ' +
      'each entry also carries `label`, `expires_at`, `expired` and `devices` (devices enrolled with it). ' +
      KEY_SECRET_RULE +
      ' `offset` and `items_per_page` (default 1000) page through many keys.',
    access: 'bootstrap-keys:read',
    query: z.object({ ...pagingQuery.shape, items_per_page: z.coerce.number().int().min(1).max(1000).default(1000) }),
    response: keyMap,
    handler: async ({ query, deps, principal }) => keysAsMap((await deps.enrol.listKeys(query)).items, await deps.access.canReadBootstrapSecrets(principal)),
  }),
  defineRoute({
    method: 'get',
    path: '/bootstrapkey/{bootstrapkey_id}',
    tag: TAG_KEYS,
    summary: 'Read a bootstrap key',
    description: `The key as a one-entry map, like GET /bootstrapkeylist. ${KEY_SECRET_RULE}`,
    access: 'bootstrap-keys:read',
    params: z.object({ bootstrapkey_id: keyRef }),
    response: keyMap,
    handler: async ({ params, deps, principal }) =>
      keysAsMap([await deps.enrol.getKey(params.bootstrapkey_id)], await deps.access.canReadBootstrapSecrets(principal)),
  }),
  defineRoute({
    method: 'put',
    path: '/bootstrapkey/{bootstrap_key}',
    tag: TAG_KEYS,
    summary: 'Change a bootstrap key',
    description:
      'Changes the group, auto-accept, `label` and/or `expires_at` of a key (null: never expires; a time ahead of now extends or shortens it); ' +
      'fields left out stay. Devices enrolled already keep their place. ' +
      'The group is `group_id`, or `group` as qbee-agent sends it (both at once must agree). `ID`/`id` (qbee-cli sends the key it changes) ' +
      'is accepted when it names the key of the path; an empty `group_id`/`group` counts as absent.',
    access: 'bootstrap-keys:manage',
    audit: 'bootstrapkey.update',
    subject: ({ params }, s) => subjectRecords.bootstrapKey(s.db, params.bootstrap_key),
    params: z.object({ bootstrap_key: keyRef }),
    body: z.object({
      group_id: z.union([groupId, z.literal('')]).optional(),
      group: z
        .union([groupId, z.literal('')])
        .optional()
        .describe('Same as `group_id` (qbee-agent).'),
      auto_accept: autoAccept.optional(),
      label: label.optional(),
      expires_at: expiresAt.optional(),
      ID: z.string().max(128).optional().describe('The key being changed (qbee-cli); must match the path.'),
      id: z.string().max(128).optional().describe('Same as `ID`.'),
    }),
    response: keyRecord,
    handler: async ({ params, body, deps }) => {
      for (const field of ['ID', 'id'] as const) {
        const v = body[field];
        if (v !== undefined && v !== '' && v !== params.bootstrap_key) throw badRequest(`${field}: names another key than the path.`, { field });
      }
      const fromId = body.group_id || undefined;
      const fromGroup = body.group || undefined;
      if (fromId && fromGroup && fromId !== fromGroup) throw badRequest('group: differs from group_id; send one of them.', { field: 'group' });
      return deps.enrol.updateKey(params.bootstrap_key, {
        group_id: fromId ?? fromGroup,
        auto_accept: body.auto_accept,
        label: body.label,
        expires_at: body.expires_at,
      });
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/bootstrapkey/{bootstrap_key}',
    tag: TAG_KEYS,
    summary: 'Delete a bootstrap key',
    description: 'No device can enrol with it any more; devices enrolled with it stay. Answers 204.',
    access: 'bootstrap-keys:manage',
    audit: 'bootstrapkey.delete',
    subject: ({ params }, s) => subjectRecords.bootstrapKey(s.db, params.bootstrap_key),
    params: z.object({ bootstrap_key: keyRef }),
    handler: async ({ params, deps }) => {
      await deps.enrol.deleteKey(params.bootstrap_key);
    },
  }),

  // ---- pending hosts ----------------------------------------------------------------------------
  defineRoute({
    method: 'get',
    path: '/pendinghost',
    tag: TAG_ENROL,
    summary: 'List pending hosts',
    description:
      'Devices that enrolled and wait for approval, oldest first, as a JSON array (the shape qbee clients decode). ' +
      "Each carries qbee's fields (`pub_key_digest`, `approved`, `group_id`, `remoteaddress`, `timestamp` in Unix seconds, `host`, `fqhost`, `uqhost`) " +
      "and this broker's (`node_id`, `hostname`, `public_key_fingerprint`, ...). Compare `public_key_fingerprint` with the agent log before approving. " +
      'Approved devices are never listed, so `pendingonly` (accepted as qbee-cli sends it) changes nothing. `offset` and `items_per_page` (default 1000) page through a long queue.',
    access: 'device:approve',
    query: z.object({
      pendingonly: z.enum(['0', '1', 'true', 'false']).optional().describe('Accepted for qbee clients; only pending hosts are ever listed.'),
      ...pagingQuery.shape,
      items_per_page: z.coerce.number().int().min(1).max(1000).default(1000),
    }),
    response: z.array(pendingHost),
    handler: async ({ query, deps }) => (await deps.enrol.pendingHosts(query)).items.map(qbeePendingHost),
  }),
  defineRoute({
    method: 'post',
    path: '/pendinghost',
    tag: TAG_ENROL,
    summary: 'Approve a pending host',
    description:
      'Places the device in its bootstrap key group (`unassigned_group` when that group or key is gone); its agent is let in on its next connection attempt. ' +
      'An unknown device answers 404, one that is not pending 409 `not_pending`.',
    access: 'device:approve',
    audit: 'device.approve',
    subject: ({ body }, s) => subjectRecords.device(s.db, body.node_id),
    device: ({ body }) => body.node_id,
    body: z.object({ node_id: nodeId }),
    response: z.object({ node_id: z.string(), hostname: z.string(), state: z.literal('approved'), group_id: z.string(), approved_at: z.string() }),
    handler: async ({ body, deps }) => deps.enrol.approve(body.node_id),
  }),
  defineRoute({
    method: 'delete',
    path: '/pendinghost/{node_id}',
    tag: TAG_ENROL,
    summary: 'Reject a pending host',
    description: 'Forgets the device and refuses its key from now on (the agent is told so and stops). Answers 204.',
    access: 'device:approve',
    audit: 'device.reject',
    subject: ({ params }, s) => subjectRecords.device(s.db, params.node_id),
    device: ({ params }) => params.node_id,
    params: z.object({ node_id: nodeId }),
    handler: async ({ params, deps }) => {
      await deps.enrol.reject(params.node_id);
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/removeapprovedhost/{node_id}',
    tag: TAG_ENROL,
    summary: 'Remove an approved device',
    description:
      'Deletes the device (its node, record and inventory), cuts its live agent connection at once (with its remote sessions) and revokes its key: ' +
      'the agent cannot reconnect with it. Answers 204; 409 `not_approved` for a pending host.',
    access: 'device:approve',
    audit: 'device.remove',
    subject: ({ params }, s) => subjectRecords.device(s.db, params.node_id),
    device: ({ params }) => params.node_id,
    params: z.object({ node_id: nodeId }),
    handler: async ({ params, deps }) => {
      await deps.enrol.removeApproved(params.node_id);
    },
  }),
];

/** WebSocket endpoints and other operations documented outside the route table. */
export const enrolDocs: ExtraOperation[] = [
  {
    method: 'get',
    path: AGENT_WS_PATH,
    operation: {
      operationId: 'agentWebSocket',
      summary: 'Agent channel (WebSocket, used by the agent)',
      tags: [TAG_ENROL],
      security: [],
      description: [
        'The one outbound connection of an enrolled agent (`Upgrade: websocket`). Over `https` the agent verifies the broker certificate.',
        '',
        'Handshake (JSON text frames):',
        '1. broker → `{"t":"challenge","nonce":"<random>"}`',
        `2. agent → \`{"t":"auth","device_id","signature","version","protocol":${PROTOCOL_VERSION}}\`: \`signature\` is base64 DER ECDSA-SHA256 by the device key over \`${AUTH_SIGNING_PREFIX}<nonce>\`.`,
        '3. broker → `{"t":"welcome","device_id","heartbeat_ms"}`, or closes the socket:',
        `   - \`${AgentClose.pending}\` the device waits for approval: retry later (with backoff)`,
        `   - \`${AgentClose.unauthorized}\` unknown device or bad signature: enrol again (${AGENT_ENROL_PATH})`,
        `   - \`${AgentClose.removed}\` the device was removed or rejected: do not come back with this key`,
        `   - \`${AgentClose.replaced}\` a newer connection of the same device took over`,
        '',
        'Afterwards both sides ping every `heartbeat_ms`; a side silent for 3 intervals is cut off. The agent reports `{"t":"inventory","data"}` on connect and every 10 minutes ' +
          '(the broker asks for a fresh one with `{"t":"inventory","data":{}}`); the broker may send `{"t":"reload","id"}`, answered with `{"t":"reload_ack","id"}` before the agent restarts its work loop. ' +
          'Remote-access sessions are channels multiplexed over the same socket (binary frames `[uint32 channel][payload]` with credit flow control).',
      ].join('\n'),
      responses: {
        '101': { description: 'Switching protocols: the handshake follows.' },
        '404': { description: 'Not a WebSocket upgrade at this path.' },
      },
    },
  },
];
