import { z } from 'zod';
import { listPage, pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_SEARCH_LENGTH } from '../http/search.js';
import type { ConfigService } from '../config/service.js';
import type { AuditService } from './service.js';

export const auditQuery = z.object({
  device_id: z.string().max(64).optional(),
  user_id: z.string().max(64).optional(),
  action: z.string().max(64).optional(),
  result: z.enum(['allowed', 'denied', 'ok', 'error', 'ended']).optional(),
  event: z.string().max(64).optional(),
  from: z.iso.datetime().optional(),
  to: z.iso.datetime().optional(),
  search: z
    .string()
    .max(MAX_SEARCH_LENGTH)
    .optional()
    .describe(
      'qbee’s CommitListSearch as JSON: `commit_sha` (part of the sha), `message` (part of a configuration commit’s message), `user_id`, `committer` (part of a first or last name), ' +
        '`change_sha` (part of a change’s sha), `labels_include`, `labels_exclude`, `start_date` and `end_date` (UTC `YYYY-MM-DD hh:mm:ss`, inclusive); any other field is a 400',
    ),
  sort_field: z.enum(['created', 'user_id', 'type']).optional().describe('Default created (the order entries were written)'),
  sort_direction: z.enum(['asc', 'desc']).optional().describe('Default desc'),
  ...pagingQuery.shape,
});

const nullableString = z.string().nullable();
const nullableCount = z.number().int().nullable();

/** An entry of the trail (shared AuditEntry), in qbee's CommitExtended shape besides its own fields. */
const auditEntry = z
  .object({
    id: z.number().int(),
    ts: z.string().describe('ISO 8601'),
    event: z.string().describe('e.g. remote.console.start, config.commit, user.create'),
    user_id: nullableString,
    user_email: nullableString,
    device_id: nullableString,
    action: z.string(),
    options: z.unknown(),
    result: z.enum(['allowed', 'denied', 'ok', 'error', 'ended']),
    reason: nullableString,
    source_ip: nullableString,
    source: nullableString,
    session_id: nullableString,
    ended_at: nullableString,
    end_result: nullableString.optional(),
    end_reason: nullableString.optional(),
    duration_ms: nullableCount,
    bytes_in: nullableCount,
    bytes_out: nullableCount,
    ref_id: nullableCount,
    sha: z.string().describe('The chain sha; a configuration commit’s sha'),
    message: z.string().describe('A sentence; a configuration commit’s message'),
    type: z.string().describe('The kind of event: the first part of `event`'),
    created: z.number().int().describe('Unix seconds'),
    updated: z.number().int().describe('= created'),
    labels: z.array(z.string()).describe('Always empty'),
    changes: z.array(z.unknown()).describe('A configuration commit’s changes as qbee’s Change objects (see GET /commit/{sha}); empty for other entries'),
  })
  .loose();

/** What the audit routes use: the trail, and the configuration's commit history it shows. */
export interface AuditRouteDeps {
  audit: AuditService;
  configuration: Pick<ConfigService, 'commitChanges'>;
}

export const auditRoutes: RouteSpec<AuditRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/commitlist',
    tag: 'audit',
    summary: 'Audit trail: remote-access attempts and changes made through the API',
    description:
      'Newest first. Every entry carries qbee commit fields: `sha` (SHA-256 chaining it to the entry before, see GET /audit/verify), `message` (a sentence), `type` (the event kind) and `created` (Unix seconds), besides event, user_id, user_email, device_id, action, options, result (allowed|denied|ok|error|ended), reason, source_ip and source. ' +
      "Remote-access attempts are `remote.<action>.start|denied`; a session's end is its own entry `remote.<action>.end` (ref_id = the start entry, result ended|denied|error, duration_ms, bytes_in, bytes_out), and the start entry is listed with ended_at, end_result, end_reason, duration_ms, bytes_in and bytes_out joined from it " +
      '(so an allowed copy the device then refused shows as such on its start entry). ' +
      "A console's owner re-attaching after a dropped connection is `remote.console.attach`, someone watching it read-only `remote.console.watch` (ref_id = the start entry, result allowed|denied). " +
      'Changes carry options `{params, before, after}`: the fields that changed, secrets `[redacted]`. Refused or failed calls are entries with result denied (401, 403) or error and the reason. ' +
      "Every entry reads as qbee's CommitExtended (qbee-cli's CommitsList): `labels` (always empty), `changes` and `updated` (= created); a configuration commit (`config.commit`) " +
      'carries its message and its changes as qbee’s Change objects (as GET /commit/{sha}: those on entities outside the caller’s configuration:read are left out), every other entry an empty list.',
    access: 'audit:read',
    query: auditQuery,
    response: listPage(auditEntry),
    handler: async ({ query, deps, principal }) => {
      const page = await deps.audit.list(query);
      const commits = page.items.filter((e) => e.event === 'config.commit').map((e) => e.sha);
      const changes = await deps.configuration.commitChanges(principal, commits);
      return {
        ...page,
        items: page.items.map((e) => ({
          ...e,
          labels: e.labels ?? [],
          changes: e.event === 'config.commit' ? (changes.get(e.sha) ?? []) : [],
          updated: e.created,
        })),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/audit/verify',
    tag: 'audit',
    summary: 'Verify the audit chain',
    description:
      "Walks the audit trail from its first entry and recomputes each `sha` from the previous one and the entry's content. Answers `{ok, entries}`, and `first_bad: {id, sha, expected}` naming the first entry that does not match (an edited entry, or the one after a deleted entry). " +
      'With a retention (AUDIT_RETENTION_DAYS) the oldest entries are deleted behind a checkpoint entry (`audit.checkpoint`, options `{deleted_through, deleted_through_sha, deleted, cutoff}`): the walk starts from the newest one, the first entry kept chaining to the sha it records, and the answer names it as `checkpoint: {id, deleted_through}`.',
    access: 'audit:read',
    response: z.object({
      ok: z.boolean(),
      entries: z.number().int(),
      first_bad: z.object({ id: z.number().int(), sha: z.string(), expected: z.string() }).optional(),
      checkpoint: z.object({ id: z.number().int(), deleted_through: z.number().int() }).optional(),
    }),
    handler: async ({ deps }) => deps.audit.verify(),
  }),
];
