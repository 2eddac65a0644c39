/** The file store: browse folders, upload with progress, download, delete, new folder. */
import { useRef, useState } from 'preact/hooks';
import type { FileEntry, ListPage } from '../../../shared/api-types.js';
import { api, ApiFailure, downloadFile, itemsOf, uploadForm } from '../api.js';
import { allowed } from '../areas.js';
import { Link, navigate, useLocation, withQuery } from '../router.js';
import { ConfirmButton, ErrorBox, formatBytes, formatTime, Loading, Notice, PageTitle, ProgressBar, Table, useAction, useLoad } from '../ui.js';

const PAGE = 1000;

interface Entry {
  name: string;
  path: string;
  dir: boolean;
  size?: number;
  time?: string;
}

/** Folder path with a trailing slash, as the API takes it. */
function folder(path: string): string {
  const p = path.startsWith('/') ? path : `/${path}`;
  return p.endsWith('/') ? p : `${p}/`;
}

/** GET /files's entries as the screen lists them: folders first, each by name. */
export function entriesOf(answer: unknown): Entry[] {
  return itemsOf<FileEntry>(answer)
    .map((e) => {
      const dir = e.is_dir || e.type === 'dir';
      const path = e.path.startsWith('/') ? e.path : `/${e.path}`;
      return { name: e.name, path: dir ? folder(path) : path.replace(/\/$/, ''), dir, size: e.size, time: e.mtime };
    })
    .sort((a, b) => Number(b.dir) - Number(a.dir) || a.name.localeCompare(b.name));
}

/** Drawn, not a glyph: the default fonts of many systems have no folder emoji (it shows as a box). */
function FolderIcon() {
  return (
    <svg class="folder-icon" viewBox="0 0 16 16" width="16" height="16" aria-hidden="true" focusable="false">
      <path d="M1.5 3.5a1 1 0 0 1 1-1h3.6l1.5 1.5h5.9a1 1 0 0 1 1 1v7.5a1 1 0 0 1-1 1h-11a1 1 0 0 1-1-1z" fill="currentColor" />
    </svg>
  );
}

function Breadcrumbs({ cwd }: { cwd: string }) {
  const parts = cwd.split('/').filter(Boolean);
  return (
    <nav aria-label="Folder" class="breadcrumbs">
      <Link href="/files">Files</Link>
      {parts.map((p, i) => {
        const href = withQuery('/files', { path: `/${parts.slice(0, i + 1).join('/')}/` });
        return (
          <span key={href}>
            {' / '}
            {i === parts.length - 1 ? <span aria-current="page">{p}</span> : <Link href={href}>{p}</Link>}
          </span>
        );
      })}
    </nav>
  );
}

export function FilesScreen() {
  const { query } = useLocation();
  const cwd = folder(query.get('path') ?? '/');
  const list = useLoad(
    () => api.get<ListPage<FileEntry>>('/files', { path: cwd, items_per_page: PAGE }).then((a) => ({ entries: entriesOf(a), total: a.total ?? 0 })),
    [cwd],
  );
  const stats = useLoad(() => api.get<Record<string, unknown>>('/file/stats').catch(() => null), []);
  const write = allowed('filesWrite');
  const action = useAction();
  const [notice, setNotice] = useState('');
  const [progress, setProgress] = useState<{ name: string; sent: number; total: number } | null>(null);
  const [conflict, setConflict] = useState<File | null>(null);
  const [newFolder, setNewFolder] = useState('');
  const fileInput = useRef<HTMLInputElement>(null);
  const abort = useRef<AbortController | null>(null);

  const upload = async (file: File, replace = false) => {
    setConflict(null);
    setNotice('');
    const form = new FormData();
    form.set('path', cwd);
    if (replace) form.set('replace', 'true');
    form.set('file', file, file.name);
    abort.current = new AbortController();
    setProgress({ name: file.name, sent: 0, total: file.size });
    try {
      await action.run(async () => {
        try {
          await uploadForm('/file', form, (sent, total) => setProgress({ name: file.name, sent, total: total || file.size }), abort.current?.signal);
          setNotice(`Uploaded ${file.name}.`);
          list.reload();
          stats.reload();
        } catch (err) {
          if (err instanceof ApiFailure && err.status === 409 && !replace) setConflict(file);
          throw err;
        }
      });
    } finally {
      setProgress(null);
      abort.current = null;
    }
  };

  const uploadAll = async (files: FileList | null) => {
    for (const file of Array.from(files ?? [])) await upload(file);
    if (fileInput.current) fileInput.current.value = '';
  };

  const used = typeof stats.data?.bytes === 'number' ? stats.data.bytes : undefined;
  const quota = typeof stats.data?.quota_bytes === 'number' ? stats.data.quota_bytes : undefined;

  return (
    <section>
      <PageTitle>Files</PageTitle>
      <Breadcrumbs cwd={cwd} />
      {used !== undefined && (
        <p class="muted">
          {formatBytes(used)} used{quota ? ` of ${formatBytes(quota)}` : ''}
        </p>
      )}
      {write && (
        <div class="file-tools">
          <div class="field">
            <label for="upload-input">Upload to {cwd}</label>
            <input
              id="upload-input"
              ref={fileInput}
              type="file"
              multiple
              disabled={progress !== null}
              onChange={(e) => void uploadAll(e.currentTarget.files)}
            />
          </div>
          <form
            class="inline-form"
            onSubmit={(e) => {
              e.preventDefault();
              const name = newFolder.trim();
              if (!name) return;
              void action.run(async () => {
                await api.post('/file/createdir', { path: cwd, name });
                setNewFolder('');
                setNotice(`Folder ${name} created.`);
                list.reload();
              });
            }}
          >
            <div class="field">
              <label for="new-folder">New folder</label>
              <input id="new-folder" value={newFolder} onInput={(e) => setNewFolder(e.currentTarget.value)} placeholder="name" />
            </div>
            <button type="submit" disabled={!newFolder.trim() || action.busy}>
              Create folder
            </button>
          </form>
        </div>
      )}
      {progress && (
        <div class="transfer-progress">
          <span>Uploading {progress.name}</span>
          <ProgressBar value={progress.sent} total={progress.total} label={`Uploading ${progress.name}`} />
          <button type="button" onClick={() => abort.current?.abort()}>
            Cancel
          </button>
        </div>
      )}
      {/* A name clash is a question, not a failure: only the Replace prompt is shown for it. */}
      {!conflict && <ErrorBox error={action.error} title="The request failed" />}
      {conflict && (
        <p class="notice">
          {conflict.name} exists already.{' '}
          <button type="button" onClick={() => void upload(conflict, true)}>
            Replace it
          </button>{' '}
          <button type="button" onClick={() => setConflict(null)}>
            Keep the old one
          </button>
        </p>
      )}
      {notice && <Notice>{notice}</Notice>}
      <ErrorBox error={list.error} />
      {list.loading && !list.data && <Loading what="files" />}
      {list.data && (
        <Table
          class="files-table"
          columns={['Name', 'Size', 'Changed', 'Actions']}
          footer={
            list.data.total > list.data.entries.length && (
              <p class="muted small">
                Showing the first {list.data.entries.length} of {list.data.total} entries.
              </p>
            )
          }
        >
          {cwd !== '/' && (
            <tr>
              <td colSpan={4}>
                <Link href={withQuery('/files', { path: folder(cwd.split('/').filter(Boolean).slice(0, -1).join('/')) })}>.. (up)</Link>
              </td>
            </tr>
          )}
          {list.data.entries.length === 0 && (
            <tr>
              <td colSpan={4} class="muted">
                This folder is empty.
              </td>
            </tr>
          )}
          {list.data.entries.map((e) => (
            <tr key={e.path}>
              <td>
                {e.dir ? (
                  <Link href={withQuery('/files', { path: e.path })} class="folder-link">
                    <FolderIcon /> {e.name}/
                  </Link>
                ) : (
                  <span>{e.name}</span>
                )}
              </td>
              <td>{e.dir ? '' : formatBytes(e.size)}</td>
              <td>{formatTime(e.time)}</td>
              <td class="actions-cell">
                {!e.dir && (
                  <button type="button" onClick={() => void action.run(() => downloadFile('/file', { path: e.path }, e.name))}>
                    Download
                  </button>
                )}
                {e.dir && (
                  <button type="button" onClick={() => navigate(withQuery('/files', { path: e.path }))}>
                    Open
                  </button>
                )}
                {write && (
                  <ConfirmButton
                    label="Delete"
                    question={`Delete ${e.name}${e.dir ? ' and everything in it' : ''}?`}
                    onConfirm={() =>
                      void action.run(async () => {
                        await api.del('/file', { path: e.path, recursive: e.dir ? 'true' : undefined });
                        setNotice(`${e.name} deleted.`);
                        list.reload();
                        stats.reload();
                      })
                    }
                  />
                )}
              </td>
            </tr>
          ))}
        </Table>
      )}
    </section>
  );
}
