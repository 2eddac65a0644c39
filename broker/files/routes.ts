import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { fileEntry } from '../../shared/api-types/files.js';
import { badRequest } from '../http/errors.js';
import { pagingQuery } from '../http/paging.js';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import type { FileStore } from './store.js';

const TAG = 'files';

const PATH_RULES =
  'Paths are "/"-rooted inside the file store ("/configs/app.conf"). Refused with 400 naming the field: "." and ".." segments, ' +
  'backslashes, NUL and control characters, names over 255 bytes, paths over 4096 bytes, and any path that goes through a ' +
  'symbolic link. Names are stored NFC-normalised; nothing is percent-decoded beyond the query string itself, so "%2e%2e" is an ordinary name.';

const boolText = z.enum(['true', 'false']);
const truthy = (v: boolean | 'true' | 'false' | undefined) => v === true || v === 'true';

const removeFields = {
  path: z.string().optional().describe('the file or folder to delete'),
  recursive: z.union([z.boolean(), boolText]).optional().describe('delete a folder with everything in it (default false: only empty folders)'),
};

/** What the file routes use. */
export interface FilesRouteDeps {
  files: FileStore;
}

export const filesRoutes: RouteSpec<FilesRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/file',
    tag: TAG,
    summary: 'Upload a file into a folder of the file store',
    description:
      'multipart/form-data with `path` (the folder, with or without its trailing "/"), `file` (the content; the last part of its filename is the stored name) and optional ' +
      '`replace` ("true" overwrites an existing file). Missing folders on the way are created, like `mkdir -p`. An existing file ' +
      'without replace=true → 409 `file_exists`; a file larger than FILE_MAX_BYTES → 413 `too_large`; an upload that would take the store past ' +
      'FILE_QUOTA_BYTES → 413 `quota_exceeded`. The upload is written to a hidden staging folder, synced to disk and renamed into place: ' +
      `a failed or interrupted upload leaves nothing behind. ${PATH_RULES}`,
    access: 'files:manage',
    upload: { field: 'file' },
    body: z.object({
      path: z.string().describe('folder to upload into, e.g. "/configs/" or "/configs" (qbee-cli sends it without the trailing "/")'),
      replace: boolText.optional().describe('"true" to overwrite an existing file'),
    }),
    response: z.object({ file: z.string().describe('stored file name'), path: z.string().describe('folder it is in') }),
    audit: 'files.upload',
    handler: async ({ body, file, deps }) => {
      if (!file) throw badRequest('file: send the content as a multipart part named "file".', { field: 'file' });
      return deps.files.upload(body.path, file, truthy(body.replace));
    },
  }),
  defineRoute({
    method: 'get',
    path: '/file',
    tag: TAG,
    summary: 'Download a file from the file store',
    description: `Streams the content as application/octet-stream with Content-Disposition: attachment and Content-Length. ${PATH_RULES}`,
    access: 'files:read',
    query: z.object({ path: z.string().describe('the file, e.g. "/configs/app.conf"') }),
    handler: async ({ query, deps }) => {
      const download = await deps.files.download(query.path);
      return Reply.raw(async (res) => {
        res.status(200);
        res.setHeader('Content-Type', 'application/octet-stream');
        res.setHeader('Content-Length', String(download.size));
        res.setHeader('Content-Disposition', contentDisposition(download.name));
        res.setHeader('Cache-Control', 'no-store');
        try {
          await pipeline(download.stream, res);
        } catch {
          // The client went away or the disk failed mid-stream: the connection is already closed.
          download.stream.destroy();
        }
      });
    },
  }),
  defineRoute({
    method: 'get',
    path: '/file/metadata',
    tag: TAG,
    summary: 'Describe one file or folder of the file store',
    description: `One entry as in GET /files, the file's sha256 always included. 404 when it does not exist. ${PATH_RULES}`,
    access: 'files:read',
    query: z.object({ path: z.string().describe('the file or folder') }),
    response: fileEntry,
    handler: async ({ query, deps }) => deps.files.metadata(query.path),
  }),
  defineRoute({
    method: 'get',
    path: '/files',
    tag: TAG,
    summary: 'List a folder of the file store',
    description:
      'Folders first, then files, ordered by `sort_field` (name, size, extension, created, mtime, path) in `sort_direction`. ' +
      '`search`: qbee\'s JSON `{"name": "...", "path": "..."}` or a plain text (part of the name). Without `path` it searches the whole store, with `path` that folder only. ' +
      '`name` and `path` are patterns of a safe subset of regular expressions — an optional `^`, literal characters (`\\` escapes a metacharacter; `.` matches only a dot), ' +
      'an optional trailing `.*`, an optional `$` — matched against the entry name (case-insensitive) and its full path (exactly): `{"path":"^/dir/.*"}` lists everything below /dir ' +
      'and nothing in /dirx. Any other syntax, or another search field, answers 400: a search is never widened. `sha256`/`digest` are given for ' +
      'files up to 64 MiB and for every file uploaded since the broker started. ' +
      PATH_RULES,
    access: 'files:read',
    query: z.object({
      path: z.string().optional().describe('folder to list (default "/")'),
      search: z.string().max(8192).optional(),
      sort_field: z.enum(['name', 'size', 'extension', 'created', 'mtime', 'path']).default('name'),
      sort_direction: z.enum(['asc', 'desc']).default('asc'),
      ...pagingQuery.shape,
    }),
    response: z.object({ items: z.array(fileEntry), total: z.number().int() }),
    handler: async ({ query, deps }) => deps.files.list(query),
  }),
  defineRoute({
    method: 'get',
    path: '/file/stats',
    tag: TAG,
    summary: 'Usage of the file store',
    description:
      '`files`, `dirs` and `bytes` in use and `quota_bytes` (FILE_QUOTA_BYTES); `count_files`, `quota` (MiB) and `used` (MiB) repeat them the way qbee clients read them.',
    access: 'files:read',
    response: z.object({
      files: z.number().int(),
      dirs: z.number().int(),
      bytes: z.number().int(),
      quota_bytes: z.number().int(),
      count_files: z.number().int(),
      quota: z.number().int(),
      used: z.number(),
    }),
    handler: async ({ deps }) => deps.files.stats(),
  }),
  defineRoute({
    method: 'post',
    path: '/file/createdir',
    tag: TAG,
    summary: 'Create a folder in the file store',
    description:
      '`{path, name}` creates the folder `name` inside `path` (missing folders above it are created too). 201 with the new folder; ' +
      `200 with it when it existed already; 409 \`file_exists\` when a file has that name. ${PATH_RULES}`,
    access: 'files:manage',
    body: z.object({
      path: z.string().describe('parent folder, e.g. "/" or "/configs/"'),
      name: z.string().describe('name of the new folder'),
    }),
    response: fileEntry,
    status: 201,
    audit: 'files.createdir',
    handler: async ({ body, deps }) => {
      const { created, entry } = await deps.files.createDir(body.path, body.name);
      return Reply.json(created ? 201 : 200, entry);
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/file',
    tag: TAG,
    summary: 'Rename or move a file or folder in the file store',
    description:
      '`{path, name}` renames in place; `{path, newPath}` moves (a `newPath` ending in "/" moves into that folder keeping the name; ' +
      'missing folders are created). Exactly one of `name` and `newPath` (an empty string counts as absent). Answers the entry at its ' +
      `new place; 409 \`file_exists\` when something is there already; 404 when \`path\` does not exist. ${PATH_RULES}`,
    access: 'files:manage',
    body: z.object({
      path: z.string().describe('the file or folder to rename or move'),
      name: z.string().optional().describe('new name, in the same folder'),
      newPath: z.string().optional().describe('new full path, or a folder ending in "/"'),
    }),
    response: fileEntry,
    audit: 'files.move',
    handler: async ({ body, deps }) => deps.files.move(body.path, { name: body.name, newPath: body.newPath }),
  }),
  defineRoute({
    method: 'delete',
    path: '/file',
    tag: TAG,
    summary: 'Delete a file or folder from the file store',
    description:
      '`path` as a query parameter, a form field (multipart or urlencoded) or in a JSON body; a path without a leading "/" is read from the top of the store ' +
      '(qbee-agent sends names that way). A folder is deleted only when empty ' +
      `(409 \`folder_not_empty\`) unless \`recursive\` is true. Answers \`{"path"}\`. ${PATH_RULES}`,
    access: 'files:manage',
    form: true,
    query: z.object(removeFields),
    body: z.object(removeFields),
    response: z.object({ path: z.string() }),
    audit: 'files.delete',
    handler: async ({ query, body, deps }) => {
      if (query.path !== undefined && body.path !== undefined && query.path !== body.path) {
        throw badRequest('path: given twice (query and body) with different values; send it once.', { field: 'path' });
      }
      const target = body.path ?? query.path;
      if (target === undefined) throw badRequest('path: name the file or folder to delete (query, form field or JSON body).', { field: 'path' });
      // qbee-agent's client names files without the leading "/": they are at the top of the store.
      const rooted = target.startsWith('/') ? target : `/${target}`;
      return deps.files.remove(rooted, truthy(body.recursive ?? query.recursive));
    },
  }),
];

/** `attachment` with an ASCII fallback name and the exact UTF-8 name (RFC 6266 / RFC 5987). */
export function contentDisposition(name: string): string {
  const fallback = name.replace(/[^\x20-\x7e]/g, '_').replace(/["\\]/g, '_');
  const exact = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${fallback}"; filename*=UTF-8''${exact}`;
}
