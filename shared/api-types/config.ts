/**
 * Configuration records as the configuration routes answer them: the zod schemas the broker declares
 * as `response` (validation in tests, the OpenAPI document) and their types for the console, which
 * imports types only (`import type`), so no zod reaches the browser bundle. A bundle's configuration
 * stays open (`unknown`): its fields are qbee's, checked per bundle when a change is staged.
 */
import { z } from 'zod';

/** Who made a change or a commit (qbee's UserBaseInfo). */
const configUser = z.object({ user_id: z.string(), fname: z.string(), lname: z.string() });

/** qbee's Change: one bundle of one entity, staged (`new`) or committed. */
export const configChange = z
  .object({
    id: z.string(),
    sha: z.string(),
    status: z.enum(['new', 'committed']),
    type: z.literal('config'),
    content: z.object({ node_id: z.string().optional(), tag: z.string().optional(), formtype: z.string(), extend: z.boolean(), config: z.unknown() }),
    created: z.number().int().describe('Unix seconds'),
    updated: z.number().int().describe('Unix seconds'),
    user_id: z.string(),
    user_name: z.string(),
    user: configUser,
    commit_sha: z.string().optional(),
  })
  .describe(
    "qbee's Change: credential fields (parameters' secrets, container registry passwords, password hashes) are answered as references (`secret-ref:…`), never in clear; a reference is bound to its entity, field and stored version, so equal values give unrelated references",
  );
export type ConfigChange = z.infer<typeof configChange>;

/** qbee's Commit (POST /commit) and CommitExtended (GET /commit/{sha}). */
export const configCommit = z.object({
  sha: z.string().describe('The sha of the commit: the sha of its entry in the audit trail (GET /commitlist)'),
  message: z.string(),
  type: z.literal('config'),
  labels: z.array(z.string()),
  changes: z.array(z.unknown()).describe('POST: the shas of the changes; GET: the changes'),
  user_id: z.string(),
  user: configUser,
  created: z.number().int(),
  updated: z.number().int(),
});
export type ConfigCommit = z.infer<typeof configCommit>;

/** GET /config and /configpreview: the rendered configuration of a node or tag. */
export const entityConfig = z.object({
  status: z.literal('success'),
  config: z.object({
    id: z.string(),
    type: z.enum(['node', 'tag']),
    commit_id: z.string().describe('The most recent commit that shaped this configuration'),
    commit_created: z.number().describe('Nanoseconds since the epoch'),
    bundles: z.array(z.string()),
    bundle_data: z.record(z.string(), z.unknown()),
  }),
});
export type EntityConfig = z.infer<typeof entityConfig>;

/** An entity a rendered bundle comes from, as its `inherited_from` lists them in order (broker/config/render.ts). */
export interface ConfigSource {
  type: 'node' | 'tag';
  id: string;
  title: string;
}
