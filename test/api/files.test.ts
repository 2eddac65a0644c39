import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type ApiAnswer, type TestBroker } from '../support/broker.js';

const STAGING = '.fleet-staging';

let t: TestBroker;
let storeDir: string;

beforeAll(async () => {
  t = await startTestBroker();
  storeDir = path.join(t.dataDir, 'files');
});
afterAll(async () => {
  await t?.close();
});

const sha256 = (data: Buffer | string) => crypto.createHash('sha256').update(data).digest('hex');

function uploadForm(folder: string | undefined, name: string, content: Buffer | string, extra: Record<string, string> = {}): FormData {
  const form = new FormData();
  if (folder !== undefined) form.append('path', folder);
  for (const [k, v] of Object.entries(extra)) form.append(k, v);
  form.append('file', new Blob([typeof content === 'string' ? content : new Uint8Array(content)]), name);
  return form;
}

function upload(broker: TestBroker, folder: string, name: string, content: Buffer | string, options: { replace?: boolean; token?: string } = {}) {
  const extra: Record<string, string> = options.replace === undefined ? {} : { replace: String(options.replace) };
  return broker.api('POST', '/api/v2/file', { token: options.token ?? broker.adminToken, body: uploadForm(folder, name, content, extra) });
}

async function download(broker: TestBroker, query: string, token = broker.adminToken) {
  const res = await fetch(`${broker.url}/api/v2/file?${query}`, { headers: { authorization: `Bearer ${token}` } });
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, body, json: () => JSON.parse(body.toString('utf8')) };
}

const q = (p: string) => `path=${encodeURIComponent(p)}`;
const list = (p: string, extra = '', token = t.adminToken) => t.api('GET', `/api/v2/files?${q(p)}${extra}`, { token });
const stats = async (broker = t) => (await broker.api('GET', '/api/v2/file/stats', { token: broker.adminToken })).body;

/** Everything on disk under the store, staging folder included, as relative paths. */
function onDisk(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const rel = `${prefix}/${e.name}`;
    out.push(e.isDirectory() ? `${rel}/` : rel);
    if (e.isDirectory() && !e.isSymbolicLink()) out.push(...onDisk(path.join(dir, e.name), rel));
  }
  return out.sort();
}

function expectPathRefused(r: ApiAnswer, field = 'path') {
  expect(r.status).toBe(400);
  expect(r.body).toMatchObject({ code: 400, field });
  expect(typeof r.body.message).toBe('string');
}

/** The router removes its temporary upload file just after answering; wait (bounded) until it has. */
async function tmpEmpties(broker: TestBroker): Promise<string[]> {
  const dir = path.join(broker.dataDir, 'tmp');
  for (let i = 0; i < 100; i++) {
    const left = fs.existsSync(dir) ? fs.readdirSync(dir) : [];
    if (left.length === 0) return left;
    await new Promise((r) => setTimeout(r, 20));
  }
  return fs.readdirSync(dir);
}

describe('file store: upload and download', () => {
  it('round-trips a binary file with its checksum, streamed as an attachment', async () => {
    const content = crypto.randomBytes(300_000);
    const up = await upload(t, '/roundtrip/', 'blob.bin', content);
    expect(up.status).toBe(200);
    expect(up.body).toEqual({ file: 'blob.bin', path: '/roundtrip/' });

    const down = await download(t, q('/roundtrip/blob.bin'));
    expect(down.status).toBe(200);
    expect(down.headers.get('content-length')).toBe(String(content.length));
    expect(down.headers.get('content-type')).toBe('application/octet-stream');
    expect(down.headers.get('content-disposition')).toMatch(/^attachment; filename="blob\.bin"/);
    expect(sha256(down.body)).toBe(sha256(content));

    const listed = await list('/roundtrip/');
    expect(listed.body.items[0]).toMatchObject({
      name: 'blob.bin',
      path: '/roundtrip/blob.bin',
      type: 'file',
      is_dir: false,
      size: content.length,
      sha256: sha256(content),
      digest: sha256(content),
    });
    const meta = await t.api('GET', `/api/v2/file/metadata?${q('/roundtrip/blob.bin')}`, { token: t.adminToken });
    expect(meta.body.sha256).toBe(sha256(content));
  });

  it('keeps an empty file and a UTF-8 name (stored NFC) intact', async () => {
    expect((await upload(t, '/names/', 'empty.txt', '')).status).toBe(200);
    const decomposed = 'cafe\u0301 \u00fcber \u2603.txt';
    const r = await upload(t, '/names/', decomposed, 'unicode');
    expect(r.status).toBe(200);
    expect(r.body.file).toBe(decomposed.normalize('NFC'));
    // Either spelling of the name reaches the same file.
    for (const spelling of [decomposed, decomposed.normalize('NFC')]) {
      const down = await download(t, q(`/names/${spelling}`));
      expect(down.body.toString()).toBe('unicode');
      expect(down.headers.get('content-disposition')).toContain(`filename*=UTF-8''${encodeURIComponent(decomposed.normalize('NFC'))}`);
    }
    const empty = await download(t, q('/names/empty.txt'));
    expect(empty.status).toBe(200);
    expect(empty.body.length).toBe(0);
  });

  it('refuses an existing file without replace (409) and overwrites it with replace=true', async () => {
    expect((await upload(t, '/replace/', 'app.conf', 'one')).status).toBe(200);
    const again = await upload(t, '/replace/', 'app.conf', 'two');
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ code: 409, error: 'file_exists' });
    const explicitNo = await upload(t, '/replace/', 'app.conf', 'two', { replace: false });
    expect(explicitNo.status).toBe(409);
    expect((await download(t, q('/replace/app.conf'))).body.toString()).toBe('one');

    const replaced = await upload(t, '/replace/', 'app.conf', 'three!', { replace: true });
    expect(replaced.status).toBe(200);
    expect((await download(t, q('/replace/app.conf'))).body.toString()).toBe('three!');
    const listed = await list('/replace/');
    expect(listed.body.items.map((i: { name: string; size: number }) => [i.name, i.size])).toEqual([['app.conf', 6]]);
  });

  it('creates missing folders on the way, and never replaces a folder with a file', async () => {
    expect((await upload(t, '/deep/a/b/c/', 'x.txt', 'x')).status).toBe(200);
    const meta = await t.api('GET', `/api/v2/file/metadata?${q('/deep/a/b')}`, { token: t.adminToken });
    expect(meta.body).toMatchObject({ type: 'dir', is_dir: true, path: '/deep/a/b' });
    const onFolder = await upload(t, '/deep/a/', 'b', 'not a folder', { replace: true });
    expect(onFolder.status).toBe(409);
    expect(onFolder.body.error).toBe('file_exists');
    // A file where a folder is needed.
    const through = await upload(t, '/deep/a/b/c/x.txt/', 'y.txt', 'y');
    expectPathRefused(through);
  });

  it('validates the form: folder "/"-rooted, file part required, replace is true/false', async () => {
    expectPathRefused(await upload(t, 'nofolder', 'x.txt', 'x'));
    // The folder's trailing "/" is optional: qbee-cli sends path.Clean'd folders ("/newdir").
    const bare = await upload(t, '/nofolder', 'x.txt', 'x');
    expect(bare.status, JSON.stringify(bare.body)).toBe(200);
    expect(bare.body).toEqual({ file: 'x.txt', path: '/nofolder/' });
    const noFile = new FormData();
    noFile.append('path', '/x/');
    const missing = await t.api('POST', '/api/v2/file', { token: t.adminToken, body: noFile });
    expect(missing.status).toBe(400);
    expect(missing.body.field).toBe('file');
    const noPath = await t.api('POST', '/api/v2/file', { token: t.adminToken, body: uploadForm(undefined, 'x.txt', 'x') });
    expect(noPath.status).toBe(400);
    expect(noPath.body.field).toBe('path');
    const badReplace = await t.api('POST', '/api/v2/file', { token: t.adminToken, body: uploadForm('/x/', 'x.txt', 'x', { replace: 'yes' }) });
    expect(badReplace.status).toBe(400);
    expect(badReplace.body.field).toBe('replace');
    const json = await t.api('POST', '/api/v2/file', { token: t.adminToken, body: { path: '/x/' } });
    expect(json.status).toBe(400);
    const longName = await upload(t, '/x/', 'n'.repeat(256), 'x');
    expectPathRefused(longName, 'file');
  });

  it('answers 404 for a missing file and 400 for a folder', async () => {
    const missing = await download(t, q('/no/such/file'));
    expect(missing.status).toBe(404);
    expect(missing.json()).toMatchObject({ code: 404, error: 'not_found' });
    await upload(t, '/dl-folder/', 'f', 'f');
    const folder = await download(t, q('/dl-folder'));
    expect(folder.status).toBe(400);
    expect(folder.json().field).toBe('path');
    const noPath = await t.api('GET', '/api/v2/file', { token: t.adminToken });
    expect(noPath.status).toBe(400);
    expect(noPath.body.field).toBe('path');
  });
});

describe('file store: listing, folders, rename and move', () => {
  it('lists a folder with folders first, paginated, and never shows the staging folder', async () => {
    await upload(t, '/list/', 'b.txt', 'bb');
    await upload(t, '/list/', 'a.txt', 'a');
    await upload(t, '/list/', 'c.log', 'ccc');
    await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/list/', name: 'zdir' } });

    const all = await list('/list/');
    expect(all.status).toBe(200);
    expect(all.body.total).toBe(4);
    expect(all.body.items.map((i: { name: string }) => i.name)).toEqual(['zdir', 'a.txt', 'b.txt', 'c.log']);
    expect(all.body.items[0]).toMatchObject({ type: 'dir', path: '/list/zdir', size: 0 });
    expect(all.body.items[1]).toMatchObject({ type: 'file', extension: 'txt', mime: 'text/plain' });
    expect(typeof all.body.items[1].mtime).toBe('string');
    expect(Number.isNaN(Date.parse(all.body.items[1].mtime))).toBe(false);

    const page = await list('/list/', '&offset=1&items_per_page=2');
    expect(page.body.total).toBe(4);
    expect(page.body.items.map((i: { name: string }) => i.name)).toEqual(['a.txt', 'b.txt']);
    const bySize = await list('/list', '&sort_field=size&sort_direction=desc');
    expect(bySize.body.items.map((i: { name: string }) => i.name)).toEqual(['zdir', 'c.log', 'b.txt', 'a.txt']);

    const root = await t.api('GET', '/api/v2/files', { token: t.adminToken });
    expect(root.status).toBe(200);
    expect(root.body.items.map((i: { name: string }) => i.name)).not.toContain(STAGING);
    expect(root.body.items.map((i: { name: string }) => i.name)).toContain('list');
  });

  it('searches the whole store by name part (qbee search JSON)', async () => {
    await upload(t, '/search/one/', 'needle-1.txt', '1');
    await upload(t, '/search/two/', 'NEEDLE-2.txt', '2');
    const found = await t.api('GET', `/api/v2/files?search=${encodeURIComponent('{"name":"needle"}')}`, { token: t.adminToken });
    expect(found.status).toBe(200);
    expect(found.body.items.map((i: { path: string }) => i.path).sort()).toEqual(['/search/one/needle-1.txt', '/search/two/NEEDLE-2.txt']);
    // With a path, that folder only: its own entries match, those of folders below do not.
    const inFolder = await t.api('GET', `/api/v2/files?${q('/search/one/')}&search=needle`, { token: t.adminToken });
    expect(inFolder.body.items.map((i: { path: string }) => i.path)).toEqual(['/search/one/needle-1.txt']);
    const above = await t.api('GET', `/api/v2/files?${q('/search/')}&search=needle`, { token: t.adminToken });
    expect(above.body.total).toBe(0);
    const bad = await t.api('GET', `/api/v2/files?search=${encodeURIComponent('{nope')}`, { token: t.adminToken });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('search');
  });

  it('validates listing input', async () => {
    expect((await list('/no-such-folder/')).status).toBe(404);
    await upload(t, '/lf/', 'file.txt', 'x');
    expectPathRefused(await list('/lf/file.txt'));
    const tooMany = await list('/', '&items_per_page=1001');
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.field).toBe('items_per_page');
    const badSort = await list('/', '&sort_field=owner');
    expect(badSort.status).toBe(400);
    expect(badSort.body.field).toBe('sort_field');
  });

  it('creates folders: 201 new, 200 existing, 409 over a file, 400 for a bad name', async () => {
    const made = await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/mk/', name: 'sub' } });
    expect(made.status).toBe(201);
    expect(made.body).toMatchObject({ name: 'sub', path: '/mk/sub', type: 'dir' });
    const again = await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/mk', name: 'sub' } });
    expect(again.status).toBe(200);
    await upload(t, '/mk/', 'file', 'x');
    const overFile = await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/mk/', name: 'file' } });
    expect(overFile.status).toBe(409);
    expect(overFile.body.error).toBe('file_exists');
    for (const name of ['..', 'a/b', '', 'x\u0000y']) {
      expectPathRefused(await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/mk/', name } }), 'name');
    }
    expectPathRefused(await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/mk/file/', name: 'x' } }));
    const unknown = await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/mk/', name: 'y', mode: 777 } });
    expect(unknown.status).toBe(400);
  });

  it('renames in place and moves, answering the new record; 409 when the target exists', async () => {
    await upload(t, '/mv/', 'old.txt', 'payload');
    await upload(t, '/mv/', 'taken.txt', 'other');

    const renamed = await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/mv/old.txt', name: 'new.txt' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body).toMatchObject({ name: 'new.txt', path: '/mv/new.txt', type: 'file', size: 7, sha256: sha256('payload') });
    expect((await download(t, q('/mv/old.txt'))).status).toBe(404);

    const clash = await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/mv/new.txt', name: 'taken.txt' } });
    expect(clash.status).toBe(409);
    expect(clash.body.error).toBe('file_exists');

    // qbee clients send both keys, the unused one empty.
    const moved = await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/mv/new.txt', name: '', newPath: '/mv/archive/2024/kept.txt' } });
    expect(moved.status).toBe(200);
    expect(moved.body.path).toBe('/mv/archive/2024/kept.txt');
    expect((await download(t, q('/mv/archive/2024/kept.txt'))).body.toString()).toBe('payload');

    const intoFolder = await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/mv/taken.txt', newPath: '/mv/archive/' } });
    expect(intoFolder.body.path).toBe('/mv/archive/taken.txt');

    const folderMove = await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/mv/archive', newPath: '/moved-archive' } });
    expect(folderMove.status).toBe(200);
    expect(folderMove.body).toMatchObject({ type: 'dir', path: '/moved-archive' });
    expect((await download(t, q('/moved-archive/2024/kept.txt'))).status).toBe(200);
  });

  it('validates rename and move input', async () => {
    await upload(t, '/mvbad/', 'f.txt', 'x');
    const patch = (body: unknown) => t.api('PATCH', '/api/v2/file', { token: t.adminToken, body });
    expect((await patch({ path: '/mvbad/missing', name: 'x' })).status).toBe(404);
    expect((await patch({ path: '/mvbad/f.txt', name: 'a', newPath: '/b' })).body.field).toBe('name');
    expect((await patch({ path: '/mvbad/f.txt' })).status).toBe(400);
    expectPathRefused(await patch({ path: '/mvbad/f.txt', name: '../escape' }), 'name');
    expectPathRefused(await patch({ path: '/mvbad/f.txt', newPath: '/../../escape' }), 'newPath');
    expectPathRefused(await patch({ path: '/mvbad', newPath: '/mvbad/inside/' }), 'newPath');
    expectPathRefused(await patch({ path: '/', name: 'root' }));
  });
});

describe('file store: delete and stats', () => {
  it('deletes by query, JSON body, multipart form and urlencoded form', async () => {
    for (const n of ['q', 'json', 'multipart', 'urlencoded']) await upload(t, '/del/', `${n}.txt`, n);
    const byQuery = await t.api('DELETE', `/api/v2/file?${q('/del/q.txt')}`, { token: t.adminToken });
    expect(byQuery.status).toBe(200);
    expect(byQuery.body).toEqual({ path: '/del/q.txt' });
    const byJson = await t.api('DELETE', '/api/v2/file', { token: t.adminToken, body: { path: '/del/json.txt' } });
    expect(byJson.body).toEqual({ path: '/del/json.txt' });
    const form = new FormData();
    form.append('path', '/del/multipart.txt');
    const byForm = await t.api('DELETE', '/api/v2/file', { token: t.adminToken, body: form });
    expect(byForm.body).toEqual({ path: '/del/multipart.txt' });
    const byUrlencoded = await t.api('DELETE', '/api/v2/file', {
      token: t.adminToken,
      body: `path=${encodeURIComponent('/del/urlencoded.txt')}`,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(byUrlencoded.body).toEqual({ path: '/del/urlencoded.txt' });
    expect((await list('/del/')).body.total).toBe(0);
    expect(onDisk(path.join(storeDir, 'del'))).toEqual([]);
  });

  it('validates delete input', async () => {
    const none = await t.api('DELETE', '/api/v2/file', { token: t.adminToken });
    expect(none.status).toBe(400);
    expect(none.body.field).toBe('path');
    const twice = await t.api('DELETE', `/api/v2/file?${q('/a')}`, { token: t.adminToken, body: { path: '/b' } });
    expect(twice.status).toBe(400);
    const unknownField = await t.api('DELETE', '/api/v2/file', { token: t.adminToken, body: { path: '/a', force: true } });
    expect(unknownField.status).toBe(400);
    expect((await t.api('DELETE', `/api/v2/file?${q('/nothing-here')}`, { token: t.adminToken })).status).toBe(404);
    expectPathRefused(await t.api('DELETE', `/api/v2/file?${q('/')}`, { token: t.adminToken }));
  });

  it('deletes an empty folder, refuses a non-empty one (409) unless recursive, and keeps stats exact', async () => {
    const before = await stats();
    await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/', name: 'empty-dir' } });
    await upload(t, '/full-dir/sub/', 'one.bin', Buffer.alloc(1000));
    await upload(t, '/full-dir/', 'two.bin', Buffer.alloc(234));

    const grown = await stats();
    expect(grown.files).toBe(before.files + 2);
    expect(grown.dirs).toBe(before.dirs + 3);
    expect(grown.bytes).toBe(before.bytes + 1234);

    expect((await t.api('DELETE', `/api/v2/file?${q('/empty-dir')}`, { token: t.adminToken })).status).toBe(200);
    const refused = await t.api('DELETE', `/api/v2/file?${q('/full-dir')}`, { token: t.adminToken });
    expect(refused.status).toBe(409);
    expect(refused.body.error).toBe('folder_not_empty');
    const gone = await t.api('DELETE', '/api/v2/file', { token: t.adminToken, body: { path: '/full-dir/', recursive: true } });
    expect(gone.status).toBe(200);
    expect(gone.body).toEqual({ path: '/full-dir' });
    expect(fs.existsSync(path.join(storeDir, 'full-dir'))).toBe(false);

    const after = await stats();
    expect(after).toMatchObject({ files: before.files, dirs: before.dirs, bytes: before.bytes, quota_bytes: before.quota_bytes });
    expect(after.count_files).toBe(after.files);
  });

  it('stats match what is on disk', async () => {
    const s = await stats();
    const entries = onDisk(storeDir).filter((p) => !p.startsWith(`/${STAGING}/`));
    const files = entries.filter((p) => !p.endsWith('/'));
    const dirs = entries.filter((p) => p.endsWith('/') && p !== `/${STAGING}/`);
    const bytes = files.reduce((n, f) => n + fs.statSync(path.join(storeDir, f)).size, 0);
    expect(s).toMatchObject({ files: files.length, dirs: dirs.length, bytes });
  });
});

describe('file store: paths never escape', () => {
  // Reads are tried through a link to /etc itself. Changes are tried through a link to a decoy
  // folder outside the store, so that a regression can never write to or delete from /etc.
  let decoy: string;
  beforeAll(async () => {
    decoy = path.join(t.dataDir, 'outside');
    fs.mkdirSync(decoy);
    fs.writeFileSync(path.join(decoy, 'canary.txt'), 'canary');
    fs.symlinkSync(decoy, path.join(storeDir, 'decoy-link'));
    fs.symlinkSync('/etc', path.join(storeDir, 'etc-link'));
    fs.symlinkSync('/etc/hostname', path.join(storeDir, 'hostname-link'));
    fs.mkdirSync(path.join(storeDir, 'inner'), { recursive: true });
    fs.symlinkSync('../../outside', path.join(storeDir, 'inner', 'up'));
    await upload(t, '/safe/', 'ok.txt', 'ok');
  });

  it.each([
    ['dot-dot', '/../../../etc/passwd'],
    ['dot-dot inside', '/safe/../../etc/passwd'],
    ['dot segment', '/safe/./ok.txt'],
    ['backslashes', '/..\\..\\etc\\passwd'],
    ['NUL', '/safe/ok.txt\u0000.png'],
    ['control character', '/safe/\u001bok.txt'],
    ['relative path', 'etc/passwd'],
    ['URL', 'file:///etc/passwd'],
    ['Windows drive', 'C:\\Windows\\win.ini'],
    ['fullwidth dots', '/\uff0e\uff0e/\uff0e\uff0e/etc/passwd'],
    ['overlong name', `/${'a'.repeat(256)}`],
    ['overlong path', `/${Array.from({ length: 17 }, () => 'b'.repeat(250)).join('/')}`],
    ['symlink to a folder outside', '/etc-link/passwd'],
    ['symlink to a file outside', '/hostname-link'],
    ['relative symlink going up', '/inner/up/canary.txt'],
    ['staging folder', `/${STAGING}/x`],
  ])('download refuses %s with 400 naming path', async (_what, p) => {
    const r = await download(t, q(p));
    expect(r.status).toBe(400);
    expect(r.json()).toMatchObject({ code: 400, field: 'path' });
  });

  it('decodes the query once: encoded dots stay a literal name', async () => {
    // %2e%2e decodes to ".." once: refused.
    const once = await download(t, 'path=/%2e%2e/%2e%2e/etc/passwd');
    expect(once.status).toBe(400);
    // %252e%252e decodes to the literal name "%2e%2e", which does not exist.
    const twice = await download(t, 'path=/%252e%252e/%252e%252e/etc/passwd');
    expect(twice.status).toBe(404);
    const slash = await download(t, 'path=%2f..%2f..%2fetc%2fpasswd');
    expect(slash.status).toBe(400);
    // An absolute-looking path is rooted in the store.
    expect((await download(t, q('/etc/passwd'))).status).toBe(404);
    expect((await download(t, q('//etc/passwd'))).status).toBe(404);
    // And a literal "%2e%2e" is an ordinary name that can be stored and read back.
    expect((await upload(t, '/%2e%2e/', '%2e%2e', 'literal')).status).toBe(200);
    expect((await download(t, 'path=/%252e%252e/%252e%252e')).body.toString()).toBe('literal');
    expect(fs.readFileSync(path.join(storeDir, '%2e%2e', '%2e%2e'), 'utf8')).toBe('literal');
  });

  it('listing refuses the same tricks and leaves symlinks out', async () => {
    const root = await list('/');
    const names = root.body.items.map((i: { name: string }) => i.name);
    expect(names).toContain('safe');
    for (const link of ['etc-link', 'hostname-link', 'decoy-link']) expect(names).not.toContain(link);
    expectPathRefused(await list('/etc-link/'));
    expectPathRefused(await list('/inner/up/'));
    expectPathRefused(await list('/../'));
    expectPathRefused(await t.api('GET', `/api/v2/file/metadata?${q('/hostname-link')}`, { token: t.adminToken }));
  });

  it('upload, createdir, move and delete refuse the same tricks and change nothing outside', async () => {
    expectPathRefused(await upload(t, '/decoy-link/', 'planted', 'x'));
    expectPathRefused(await upload(t, '/decoy-link/', 'canary.txt', 'overwritten', { replace: true }));
    expectPathRefused(await upload(t, '/../', 'planted', 'x'));
    expectPathRefused(await upload(t, '/inner/up/', 'planted', 'x'));
    expect((await upload(t, '/safe/', '..', 'x')).status).toBe(400);
    // The hidden staging folder cannot be reached under any spelling.
    expectPathRefused(await upload(t, '/', STAGING, 'x'), 'file');
    expectPathRefused(await upload(t, `/${STAGING}/`, 'x', 'x'));
    expectPathRefused(await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/', name: STAGING } }), 'name');
    expectPathRefused(await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/safe', name: STAGING } }), 'name');
    expectPathRefused(await t.api('DELETE', `/api/v2/file?${q(`/${STAGING}`)}&recursive=true`, { token: t.adminToken }));
    expectPathRefused(await list(`/${STAGING}/`));

    expectPathRefused(await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/decoy-link/', name: 'made' } }));
    expectPathRefused(await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/../', name: 'made' } }));
    expectPathRefused(
      await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/safe/ok.txt', newPath: '/decoy-link/moved.txt' } }),
      'newPath',
    );
    expectPathRefused(await t.api('PATCH', '/api/v2/file', { token: t.adminToken, body: { path: '/decoy-link/canary.txt', name: 'renamed.txt' } }));
    expectPathRefused(await t.api('DELETE', `/api/v2/file?${q('/decoy-link/canary.txt')}`, { token: t.adminToken }));
    expectPathRefused(await t.api('DELETE', '/api/v2/file', { token: t.adminToken, body: { path: '/safe/../../outside/canary.txt' } }));

    // Removing a folder that holds a link removes the link, never what it points to.
    fs.mkdirSync(path.join(storeDir, 'holder'));
    fs.symlinkSync(decoy, path.join(storeDir, 'holder', 'link'));
    expect((await t.api('DELETE', '/api/v2/file', { token: t.adminToken, body: { path: '/holder', recursive: true } })).status).toBe(200);

    expect(fs.readdirSync(decoy)).toEqual(['canary.txt']);
    expect(fs.readFileSync(path.join(decoy, 'canary.txt'), 'utf8')).toBe('canary');
    expect(fs.readlinkSync(path.join(storeDir, 'decoy-link'))).toBe(decoy);
    expect((await download(t, q('/safe/ok.txt'))).body.toString()).toBe('ok');
  });
});

describe('file store: permissions', () => {
  it('answers 401 without a token on every files call', async () => {
    const calls: [string, string][] = [
      ['GET', '/api/v2/file?path=/x'],
      ['GET', '/api/v2/files'],
      ['GET', '/api/v2/file/stats'],
      ['GET', '/api/v2/file/metadata?path=/x'],
      ['POST', '/api/v2/file'],
      ['POST', '/api/v2/file/createdir'],
      ['PATCH', '/api/v2/file'],
      ['DELETE', '/api/v2/file?path=/x'],
    ];
    for (const [method, url] of calls) {
      const r = await t.api(method, url);
      expect(r.status, `${method} ${url}`).toBe(401);
      expect(r.body.error).toBe('unauthorized');
    }
    const anonymousUpload = await t.api('POST', '/api/v2/file', { body: uploadForm('/anon/', 'x.txt', 'x') });
    expect(anonymousUpload.status).toBe(401);
  });

  it('lets files:read read but not change (403), and refuses users without files permissions', async () => {
    await upload(t, '/perm/', 'r.txt', 'readable');
    const reader = await t.userWith([{ permission: 'files:read' }]);
    expect((await list('/perm/', '', reader.token)).status).toBe(200);
    expect((await download(t, q('/perm/r.txt'), reader.token)).body.toString()).toBe('readable');
    expect((await t.api('GET', '/api/v2/file/stats', { token: reader.token })).status).toBe(200);

    const denied = await upload(t, '/perm/', 'w.txt', 'x', { token: reader.token });
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ code: 403, error: 'forbidden', permission: 'files:manage' });
    expect((await t.api('DELETE', `/api/v2/file?${q('/perm/r.txt')}`, { token: reader.token })).status).toBe(403);
    expect((await t.api('POST', '/api/v2/file/createdir', { token: reader.token, body: { path: '/', name: 'x' } })).status).toBe(403);
    expect((await t.api('PATCH', '/api/v2/file', { token: reader.token, body: { path: '/perm/r.txt', name: 'y' } })).status).toBe(403);
    expect(fs.existsSync(path.join(storeDir, 'perm', 'w.txt'))).toBe(false);

    const stranger = await t.userWith([{ permission: 'device:read' }]);
    expect((await list('/', '', stranger.token)).status).toBe(403);
    expect((await download(t, q('/perm/r.txt'), stranger.token)).status).toBe(403);

    const writer = await t.userWith([{ permission: 'files:manage' }]);
    expect((await upload(t, '/perm/', 'w.txt', 'x', { token: writer.token })).status).toBe(200);
  });
});

describe('file store: failed uploads leave nothing behind', () => {
  it('a refused upload (409, 400, 403) leaves no file, folder or staged part', async () => {
    await upload(t, '/fail/', 'keep.txt', 'keep');
    const before = onDisk(storeDir);
    const reader = await t.userWith([{ permission: 'files:read' }]);
    expect((await upload(t, '/fail/', 'keep.txt', 'again')).status).toBe(409);
    expect((await upload(t, '/fail/new-folder/', 'x'.repeat(300), 'x')).status).toBe(400);
    expect((await upload(t, '/fail/other/', 'x.txt', 'x', { token: reader.token })).status).toBe(403);
    expect(onDisk(storeDir)).toEqual(before);
    expect(fs.readdirSync(path.join(storeDir, STAGING))).toEqual([]);
    expect(await tmpEmpties(t)).toEqual([]);
  });

  it('an upload cut off mid-stream leaves nothing behind', async () => {
    const before = onDisk(storeDir);
    const boundary = 'cutoffboundary';
    const head = Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n/cut/\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="partial.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
    );
    const url = new URL(t.url);
    await new Promise<void>((resolve) => {
      const req = http.request({
        host: url.hostname,
        port: url.port,
        method: 'POST',
        path: '/api/v2/file',
        headers: {
          authorization: `Bearer ${t.adminToken}`,
          'content-type': `multipart/form-data; boundary=${boundary}`,
          'content-length': String(head.length + 1_000_000),
        },
      });
      req.on('error', () => resolve());
      req.on('response', (res) => {
        res.resume();
        resolve();
      });
      req.write(head);
      req.write(crypto.randomBytes(200_000), () => {
        // Give the broker the chance to start writing the part, then drop the connection.
        setTimeout(() => {
          req.destroy();
          resolve();
        }, 50);
      });
    });
    expect(await tmpEmpties(t)).toEqual([]);
    expect(onDisk(storeDir)).toEqual(before);
    expect((await download(t, q('/cut/partial.bin'))).status).toBe(404);
  });
});

describe('file store: size limits and quota', () => {
  let small: TestBroker;
  beforeAll(async () => {
    small = await startTestBroker({ env: { FILE_QUOTA_BYTES: '4096', FILE_MAX_BYTES: '3000' } });
  });
  afterAll(async () => {
    await small?.close();
  });

  it('refuses a file over FILE_MAX_BYTES with 413 and keeps nothing', async () => {
    const r = await upload(small, '/big/', 'big.bin', Buffer.alloc(3001));
    expect(r.status).toBe(413);
    expect(r.body).toMatchObject({ code: 413, error: 'too_large' });
    expect((await upload(small, '/big/', 'fits.bin', Buffer.alloc(3000))).status).toBe(200);
    expect(onDisk(path.join(small.dataDir, 'files'))).toEqual(['/.fleet-staging/', '/big/', '/big/fits.bin']);
    expect(await tmpEmpties(small)).toEqual([]);
  });

  it('refuses an upload past FILE_QUOTA_BYTES with 413 quota_exceeded, and counts space freed by deletes', async () => {
    // 3000 bytes are in use from the test above.
    const over = await upload(small, '/q/', 'a.bin', Buffer.alloc(1500));
    expect(over.status).toBe(413);
    expect(over.body).toMatchObject({ code: 413, error: 'quota_exceeded', quota_bytes: 4096 });
    expect(fs.existsSync(path.join(small.dataDir, 'files', 'q'))).toBe(false);
    expect((await upload(small, '/q/', 'a.bin', Buffer.alloc(1000))).status).toBe(200);
    expect(await stats(small)).toMatchObject({ files: 2, bytes: 4000, quota_bytes: 4096 });

    // Replacing counts only the growth.
    expect((await upload(small, '/q/', 'a.bin', Buffer.alloc(1096), { replace: true })).status).toBe(200);
    expect((await upload(small, '/q/', 'a.bin', Buffer.alloc(1097), { replace: true })).status).toBe(413);

    expect((await small.api('DELETE', `/api/v2/file?${q('/big/fits.bin')}`, { token: small.adminToken })).status).toBe(200);
    expect(await stats(small)).toMatchObject({ files: 1, bytes: 1096 });
    expect((await upload(small, '/q/', 'b.bin', Buffer.alloc(2500))).status).toBe(200);
    expect((await small.api('DELETE', '/api/v2/file', { token: small.adminToken, body: { path: '/q', recursive: 'true' } })).status).toBe(200);
    expect(await stats(small)).toMatchObject({ files: 0, dirs: 1, bytes: 0 });
  });
});
