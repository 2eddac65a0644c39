/**
 * The file store's records as its routes answer them: zod schemas the broker declares as `response`
 * (validation in tests, the OpenAPI document), and their types for the console and the CLI, which
 * import the types only (`import type`), so no zod reaches the browser bundle.
 */
import { z } from 'zod';

/** An entry of the file store: GET /files lists them; uploads, moves and renames answer one. */
export const fileEntry = z.object({
  name: z.string(),
  path: z.string().describe('"/"-rooted path of the entry (folders without a trailing "/")'),
  type: z.enum(['file', 'dir']),
  is_dir: z.boolean(),
  size: z.number().int().describe('bytes; 0 for folders'),
  mtime: z.string().describe('last change, ISO 8601'),
  created: z.number().int().describe('creation time, Unix seconds'),
  extension: z.string(),
  mime: z.string(),
  sha256: z.string().optional().describe('hex SHA-256 of the content (files)'),
  digest: z.string().optional().describe('same as sha256 (the name qbee clients read)'),
});
export type FileEntry = z.infer<typeof fileEntry>;
