import { z } from 'zod';
import type { RoleRecord, RoleUser } from '../../shared/api-types.js';
import { badRequest } from '../http/errors.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { multiLine, singleLine } from '../../shared/text.js';
import { subjectRecords } from '../audit/subjects.js';
import { RECORDING_MODES } from '../access/recording.js';
import type { Db } from '../db/database.js';
import type { RolesService } from './service.js';

const RECORDING_HELP =
  'Console recording for sessions this role grants: `default` (recorded), `off` or `required` (a console that cannot be recorded is refused). A user with several roles: `required` wins; `off` only when every role granting them the console says `off`. Turning it down needs outranking every holder, and is refused to a holder of the role (403 `privilege_escalation`). Left out: `default` on create, unchanged on PUT.';

const roleId = z.string().min(1).max(128).describe('The role id');
const params = z.object({ role_id: roleId });

const RESOURCES_HELP =
  'Resource strings narrowing the permission to devices, OR-ed: `*`, `tag:<tag>`, `node:<node_id>` (that group and everything below it); for remote-access:connect optionally with an action: `<resource>/console`, `/reload`, `/tunnel(proto=tcp|udp;port=<p>[,<lo>-<hi>];dst=<host>[,...])`, `/copy(direction=upload|download;path=</abs/dir>[,...])`. Left out or empty: `["*"]`. Only permissions with accepts_resources (GET /permissionslist) take anything but `*`.';

const policyInput = z.strictObject({
  permission: z.string().max(100).describe('A permission name from GET /permissionslist'),
  resources: z.array(z.string().max(4096)).max(1000).optional().describe(RESOURCES_HELP),
});

const roleBody = z.object({
  name: singleLine(z.string().trim().min(1).max(100)).describe('Unique (case-insensitive)'),
  description: multiLine(z.string().max(1000)).optional(),
  policies: z.array(policyInput).max(100).describe('What the role grants; holders of several roles get the union.'),
  recording: z.enum(RECORDING_MODES).optional().describe(RECORDING_HELP),
  // Read-only fields of the record: clients that send back what they read (the qbee client does) are accepted.
  id: z.string().max(128).optional().describe('Read-only; must match the path when sent to PUT.'),
  created_at: z.unknown().optional().describe('Read-only; ignored.'),
  created_by: z.unknown().optional().describe('Read-only; ignored.'),
  updated_at: z.unknown().optional().describe('Read-only; ignored.'),
  updated_by: z.unknown().optional().describe('Read-only; ignored.'),
  used_by: z.unknown().optional().describe('Read-only; ignored.'),
  builtin: z.unknown().optional().describe('Read-only; ignored.'),
});

const roleUser = z.object({ user_id: z.string(), fname: z.string(), lname: z.string() }) satisfies z.ZodType<RoleUser>;
const roleRecord = z.object({
  id: z.string(),
  name: z.string(),
  description: z.string(),
  policies: z.array(z.object({ permission: z.string(), resources: z.array(z.string()) })),
  recording: z.enum(RECORDING_MODES).describe(RECORDING_HELP),
  builtin: z.boolean().describe('The built-in Administrator role: every permission on every device; cannot be changed or deleted.'),
  created_at: z.number().describe('Unix time, seconds'),
  created_by: z.string().nullable().describe('user_id of the creator'),
  updated_at: z.number().describe('Unix time, seconds'),
  updated_by: z.string().nullable().describe('user_id of the last editor'),
  used_by: z.array(roleUser).describe('Users holding the role'),
}) satisfies z.ZodType<RoleRecord>;

const VALIDATION =
  'Policies are checked: an unknown permission, a resource on a permission that does not accept resources, an action suffix on anything but remote-access:connect, options on console/reload, an unknown option or a malformed value answer 400 `invalid_policy` with a message naming the policy and the resource and a `problems` array `[{policy, permission, resource, message}]`. A name in use answers 409 `duplicate_role_name`.';

function fields(body: z.infer<typeof roleBody>) {
  return { name: body.name, description: body.description, policies: body.policies, recording: body.recording };
}

/** What the role routes use; `db` is read by the audit subjects. */
export interface RolesRouteDeps {
  roles: RolesService;
  db: Db;
}

export const rolesRoutes: RouteSpec<RolesRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/roleslist',
    tag: 'roles',
    summary: 'List roles',
    description: 'Roles with the users holding each, `{items, total}`; the built-in Administrator role first, then by name. `search` matches part of the name.',
    access: 'roles:read',
    query: z.object({
      search: z.string().max(200).optional(),
      ...pagingQuery.shape,
    }),
    response: listPage(roleRecord),
    handler: async ({ query, deps }) => deps.roles.list(query),
  }),
  defineRoute({
    method: 'get',
    path: '/role/{role_id}',
    tag: 'roles',
    summary: 'Read a role',
    access: 'roles:read',
    params,
    response: roleRecord,
    handler: async ({ params: p, deps }) => deps.roles.get(p.role_id),
  }),
  defineRoute({
    method: 'get',
    path: '/permissionslist',
    tag: 'roles',
    summary: 'List the permissions a role can grant',
    description: 'Every permission with what it grants and whether resource strings can narrow it to devices (`accepts_resources`).',
    access: 'roles:read',
    response: z.object({
      items: z.array(z.object({ permission: z.string(), description: z.string(), accepts_resources: z.boolean() })),
      total: z.number(),
    }),
    handler: async ({ deps }) => deps.roles.permissions(),
  }),
  defineRoute({
    method: 'post',
    path: '/role',
    tag: 'roles',
    summary: 'Create a role',
    description: `Answers 201 with the role. ${VALIDATION}`,
    access: 'roles:manage',
    status: 201,
    audit: 'role.create',
    subject: (_input, s, answer) => subjectRecords.role(s.db, (answer as { id?: string } | undefined)?.id),
    body: roleBody,
    response: roleRecord,
    handler: async ({ body, principal, deps }) => deps.roles.create(principal, fields(body)),
  }),
  defineRoute({
    method: 'put',
    path: '/role/{role_id}',
    tag: 'roles',
    summary: 'Replace a role',
    description: `Replaces name, description (empty when left out) and policies. Users holding the role get the new permissions on their next call. The built-in Administrator role answers 409 \`builtin_role\`. ${VALIDATION}`,
    access: 'roles:manage',
    audit: 'role.replace',
    subject: ({ params: p }, s) => subjectRecords.role(s.db, p.role_id),
    params,
    body: roleBody,
    response: roleRecord,
    handler: async ({ params: p, body, principal, deps }) => {
      if (body.id !== undefined && body.id !== '' && body.id !== p.role_id) throw badRequest('body.id: does not match the role in the path.', { field: 'id' });
      return deps.roles.replace(principal, p.role_id, fields(body));
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/role/{role_id}',
    tag: 'roles',
    summary: 'Delete a role',
    description:
      'Answers 204. A role assigned to users answers 409 `{"error":"role_in_use","used_by":[{user_id,fname,lname}]}`: give those users another role first. The built-in Administrator role answers 409 `builtin_role`.',
    access: 'roles:manage',
    audit: 'role.delete',
    subject: ({ params: p }, s) => subjectRecords.role(s.db, p.role_id),
    status: 204,
    params,
    handler: async ({ params: p, deps }) => {
      await deps.roles.remove(p.role_id);
      return undefined;
    },
  }),
];
