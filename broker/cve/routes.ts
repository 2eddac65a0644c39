import { z } from 'zod';
import type { CveDetail, CveFeedState, CveItem, CveScoreStats } from '../../shared/api-types.js';
import { deviceId } from '../devices/schema.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_SEARCH_LENGTH } from '../http/search.js';
import { multiLine } from '../../shared/text.js';
import { SEVERITY_LEVELS } from './cvss.js';
import { MAX_IMPORT_UPLOAD_BYTES, type CveService } from './service.js';

const TAG = 'cve';

const severity = z.enum(SEVERITY_LEVELS);
const status = z.enum(['open', 'accepted', 'ignored']);
const cveParams = z.object({
  cve_id: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9._:+-]+$/, 'a CVE id (CVE-2024-1234) or an OSV id')
    .describe('CVE id (e.g. CVE-2024-6387), or the OSV id of an advisory that names no CVE'),
});

const SCOPE =
  'Host lists and counts cover the devices the caller’s device:read resources match (cve:read accepts no resources), ' +
  'and none without device:read: nothing is inferred from a permission’s absence.';

const summary = z.object({
  cve_id: z.string(),
  score: z.number().nullable().describe('CVSS base score (v3 computed from the vector; v2 when only that is given); null when the feed gives none'),
  severity: severity.describe('From the score (CVSS v3 ratings), else the advisory’s own severity word; `unknown` without either'),
  summary: z.string(),
  advisories: z.array(z.string()).describe('OSV ids of the advisories naming this CVE (DSA-…, DLA-…, ALSA-…, …)'),
  packages: z.array(z.string()).describe('Installed packages it affects on the counted devices'),
  hosts: z.number().int().describe('Devices affected'),
  status: status.describe('`accepted` or `ignored` once decided (PATCH /cve/{cve_id}); else `open`'),
  reason: z.string(),
  published: z.string().nullable(),
}) satisfies z.ZodType<CveItem>;

const statusRecord = z.object({
  cve_id: z.string(),
  status,
  reason: z.string(),
  user_id: z.string().nullable(),
  updated_at: z.string().nullable(),
});

const importResult = z.object({
  files: z.number().int(),
  advisories: z.number().int().describe('Advisories of OS packages imported (added or replaced by id)'),
  cves: z.number().int().describe('CVE ids they name'),
  skipped: z.number().int().describe('Advisories left out: withdrawn, or about no OS distribution (npm, PyPI, …)'),
  errors: z.array(z.object({ file: z.string(), error: z.string() })),
  matches: z.number().int().describe('(device, CVE, package) findings after matching the whole fleet again'),
  devices_affected: z.number().int(),
});

/** What the CVE routes use. */
export interface CveRouteDeps {
  cve: CveService;
}

export const cveRoutes: RouteSpec<CveRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/cvelist',
    tag: TAG,
    summary: 'List CVEs affecting the devices',
    description:
      'The CVEs of the imported feed that affect at least one counted device (`include_unaffected=true`: all of the feed), each with its score, severity, ' +
      'summary, affected packages, host count and decision. `search`: part of the CVE id, summary, package or advisory id; `severity`: comma-separated ' +
      '(`critical,high`); `status`: open, accepted or ignored; `device_id`: one device’s CVEs (the device page). Sorted by `sort_field` ' +
      '(score, hosts, severity, published, cve_id; default score, highest first). ' +
      SCOPE,
    access: 'cve:read',
    query: z
      .object({
        search: z.string().max(MAX_SEARCH_LENGTH).optional(),
        severity: z
          .string()
          .max(128)
          .transform((s, ctx) => {
            const list = s.split(',').map((v) => v.trim().toLowerCase());
            const bad = list.find((v) => !(SEVERITY_LEVELS as readonly string[]).includes(v));
            if (bad !== undefined) {
              ctx.addIssue({ code: 'custom', message: `unknown severity "${bad}": use ${SEVERITY_LEVELS.join(', ')} (comma-separated)` });
              return z.NEVER;
            }
            return list as Array<(typeof SEVERITY_LEVELS)[number]>;
          })
          .optional(),
        status: status.optional(),
        device_id: deviceId.optional(),
        include_unaffected: z
          .enum(['true', 'false'])
          .transform((v) => v === 'true')
          .optional(),
        sort_field: z.enum(['score', 'hosts', 'cve_id', 'published', 'severity']).optional(),
        sort_direction: z.enum(['asc', 'desc']).optional(),
        ...pagingQuery.shape,
      })
      .strict(),
    response: listPage(summary),
    handler: async ({ query, principal, deps }) => deps.cve.list(principal, query),
  }),
  defineRoute({
    method: 'get',
    path: '/cve/{cve_id}',
    tag: TAG,
    summary: 'One CVE and the devices it affects',
    description: `The CVE as in /cvelist, its decision, and per affected device: the package, the installed version and the fixed version (null when the feed knows no fix). 404 when the feed has no such CVE. ${SCOPE}`,
    access: 'cve:read',
    params: cveParams,
    response: summary.extend({
      status_updated_at: z.string().nullable(),
      status_user_id: z.string().nullable(),
      devices: z.array(
        z.object({
          device_id: z.string(),
          node_id: z.string(),
          title: z.string(),
          package: z.string(),
          version: z.string(),
          fixed_version: z.string().nullable(),
          advisory_id: z.string(),
        }),
      ),
    }) satisfies z.ZodType<CveDetail>,
    handler: async ({ params, principal, deps }) => deps.cve.get(principal, params.cve_id),
  }),
  defineRoute({
    method: 'get',
    path: '/cvescorestats',
    tag: TAG,
    summary: 'CVEs affecting the devices, counted by severity',
    description: `How many CVEs affect at least one counted device, per severity; ignored CVEs are left out of those counts and counted in \`ignored\`. ${SCOPE}`,
    access: 'cve:read',
    response: z.object({
      critical: z.number().int(),
      high: z.number().int(),
      medium: z.number().int(),
      low: z.number().int(),
      none: z.number().int(),
      unknown: z.number().int(),
      total: z.number().int(),
      accepted: z.number().int(),
      ignored: z.number().int(),
    }) satisfies z.ZodType<CveScoreStats>,
    handler: async ({ principal, deps }) => deps.cve.scoreStats(principal),
  }),
  defineRoute({
    method: 'get',
    path: '/cvefeed',
    tag: TAG,
    summary: 'The imported vulnerability feed: whether there is one, and its age',
    description:
      '`imported`: false until a feed was imported (POST /cve/import or `npm start -- cve-import`); until then no CVE can match, so an empty /cvelist ' +
      'means "no feed", not "no vulnerability". `imported_at`: the last import; `feed_date`: the newest modification (else publication) date an ' +
      "advisory of the feed gives, the feed's own age; `advisories`: how many it holds.",
    access: 'cve:read',
    response: z.object({
      imported: z.boolean(),
      advisories: z.number().int(),
      imported_at: z.string().nullable(),
      feed_date: z.string().nullable(),
    }) satisfies z.ZodType<CveFeedState>,
    handler: async ({ deps }) => deps.cve.feed(),
  }),
  defineRoute({
    method: 'get',
    path: '/cve_hosts_max_count',
    tag: TAG,
    summary: 'The most devices one CVE affects',
    description: `\`count\`: the highest host count of any CVE (for scaling a host-count filter), with that CVE's id (null when none affects a device). ${SCOPE}`,
    access: 'cve:read',
    response: z.object({ count: z.number().int(), cve_id: z.string().nullable() }),
    handler: async ({ principal, deps }) => deps.cve.hostsMaxCount(principal),
  }),
  defineRoute({
    method: 'patch',
    path: '/cve/{cve_id}',
    tag: TAG,
    summary: 'Accept or ignore a CVE, with a reason',
    description:
      '`{"status": "accepted" | "ignored", "reason": "..."}` records the decision (the reason is required); `{"status": "open"}` withdraws it. ' +
      'Audited with the decision before and after. 404 when the feed has no such CVE.',
    access: 'cve:manage',
    params: cveParams,
    body: z.object({
      status,
      reason: multiLine(z.string().max(2000, 'at most 2000 characters')).optional(),
    }),
    response: statusRecord,
    audit: 'cve.status',
    subject: async ({ params }, deps) => deps.cve.statusOf(params.cve_id),
    handler: async ({ params, body, principal, deps }) => deps.cve.setStatus(principal, params.cve_id, body),
  }),
  defineRoute({
    method: 'delete',
    path: '/cve/{cve_id}',
    tag: TAG,
    summary: 'Remove a CVE from the feed',
    description:
      'Removes the CVE, its findings and its decision; an advisory naming only this CVE goes with it. Importing a feed that names it again brings it back. ' +
      'Audited. 404 when the feed has no such CVE.',
    access: 'cve:manage',
    params: cveParams,
    audit: 'cve.delete',
    handler: async ({ params, deps }) => {
      await deps.cve.remove(params.cve_id);
      return undefined;
    },
  }),
  defineRoute({
    method: 'get',
    path: '/cve/status/cves',
    tag: TAG,
    summary: 'The accepted and ignored CVEs',
    description:
      'Every decision (newest first) with its reason, who made it and when, and the CVE’s severity and summary; `status` narrows to accepted or ignored.',
    access: 'cve:manage',
    query: z.object({ status: z.enum(['accepted', 'ignored']).optional(), ...pagingQuery.shape }).strict(),
    response: listPage(
      statusRecord.extend({
        status: z.enum(['accepted', 'ignored']),
        user_id: z.string(),
        updated_at: z.string(),
        user_email: z.string().nullable(),
        severity,
        score: z.number().nullable(),
        summary: z.string(),
      }),
    ),
    handler: async ({ query, deps }) => deps.cve.statuses(query),
  }),
  defineRoute({
    method: 'post',
    path: '/cve/import',
    tag: TAG,
    summary: 'Import a vulnerability feed (OSV JSON)',
    description:
      'multipart/form-data with `file`: one OSV advisory, or a JSON array of them, as the OSV database exports them per ecosystem (Debian:12, Ubuntu:22.04:LTS, ' +
      'Alpine:v3.18, Rocky Linux:9, …). Advisories are added or replaced by their OSV id; those about no OS distribution are skipped; then every device is ' +
      `matched again. All or nothing: a file that is not JSON or holds a malformed advisory → 400 \`invalid_feed\` naming it, nothing changed. At most ${MAX_IMPORT_UPLOAD_BYTES / 1024 / 1024} MiB ` +
      '(and FILE_MAX_BYTES) → else 413; a folder or a larger feed is imported with `npm start -- cve-import <file or folder>`. No network access is used. Audited.',
    access: 'cve:manage',
    upload: { field: 'file' },
    body: z.object({}).passthrough(),
    response: importResult,
    audit: 'cve.import',
    handler: async ({ file, deps }) => deps.cve.importUpload(file),
  }),
];
