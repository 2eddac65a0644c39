/**
 * Browsing a device's files within the user's copy grant: list a folder (GET /remote/files, which
 * the device checks against the grant without following symlinks out of it), open folders,
 * download a file, upload by the file input or by dropping files, with progress. Every step is a
 * copy the broker decides and audits; nothing here grants anything.
 */
import { useEffect, useState } from 'preact/hooks';
import type { DirectoryEntry, DirectoryListing } from '../../../shared/api-types.js';
import { normalizeDevicePath } from '../../../shared/resources.js';
import { api, saveBlob } from '../api.js';
import { copyFromDevice, copyToDevice } from '../remote.js';
import { ErrorBox, formatBytes, formatTime, Loading, Notice } from '../ui.js';
import { TransferProgressBar, useTransfer } from '../use-transfer.js';

function join(dir: string, name: string): string {
  return dir.endsWith('/') ? `${dir}${name}` : `${dir}/${name}`;
}

function parent(dir: string): string {
  const parts = dir.split('/').filter(Boolean);
  parts.pop();
  return `/${parts.join('/')}`;
}

/** The folders from the root down to `dir`, each with the path it opens. */
function crumbs(dir: string): { name: string; path: string }[] {
  const parts = dir.split('/').filter(Boolean);
  return [{ name: '/', path: '/' }, ...parts.map((name, i) => ({ name, path: `/${parts.slice(0, i + 1).join('/')}` }))];
}

const TYPE_LABEL: Record<DirectoryEntry['type'], string> = { dir: 'Folder', file: 'File', symlink: 'Link', other: 'Other' };

export function FileBrowser({ deviceId, roots }: { deviceId: string; roots: string[] | undefined }) {
  const [dir, setDir] = useState(normalizeDevicePath(roots?.[0] ?? '/') ?? '/');
  const [typed, setTyped] = useState(dir);
  const [listing, setListing] = useState<DirectoryListing | null>(null);
  const [loading, setLoading] = useState(false);
  const [round, setRound] = useState(0);
  const [dragging, setDragging] = useState(false);
  // The listing's error and the transfers' share one box.
  const runner = useTransfer();
  const { busy, error, setError, notice, setNotice, run: transfer } = runner;

  useEffect(() => {
    let live = true;
    setListing(null);
    setLoading(true);
    setError(undefined);
    api.get<DirectoryListing>(`/remote/files/${encodeURIComponent(deviceId)}`, { path: dir, source: 'web' }).then(
      (answer) => {
        if (!live) return;
        setListing(answer);
        setLoading(false);
      },
      (err: unknown) => {
        if (!live) return;
        setListing(null);
        setError(err);
        setLoading(false);
      },
    );
    return () => {
      live = false;
    };
  }, [deviceId, dir, round]);

  const open = (path: string) => {
    const clean = normalizeDevicePath(path);
    if (clean === null) return;
    setNotice('');
    setTyped(clean);
    setDir(clean);
  };

  const download = (entry: DirectoryEntry) => {
    const path = join(dir, entry.name);
    void transfer(`Downloading ${entry.name}`, async (signal, report) => {
      const { blob, result } = await copyFromDevice(deviceId, path, report, signal);
      saveBlob(blob, entry.name);
      return `Downloaded ${entry.name} (${formatBytes(result.bytes)}).`;
    });
  };

  /** Uploads the files one after the other into the folder shown, then lists it again. */
  const upload = async (files: File[]) => {
    if (busy || files.length === 0) return;
    const target = dir;
    let sent = 0;
    for (const file of files) {
      const ok = await transfer(`Uploading ${file.name}`, async (signal, report) => {
        await copyToDevice(deviceId, file, join(target, file.name), report, signal);
        return `Uploaded ${file.name} to ${target}.`;
      });
      if (!ok) break;
      sent += 1;
    }
    if (sent > 1) setNotice(`Uploaded ${sent} files to ${target}.`);
    setRound((n) => n + 1);
  };

  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragging(false);
    void upload(Array.from(e.dataTransfer?.files ?? []));
  };

  return (
    <div class="file-browser" data-testid="file-browser">
      {roots && roots.length > 1 && (
        <div class="button-row" aria-label="Folders your roles allow">
          {roots.map((root) => (
            <button type="button" key={root} onClick={() => open(root)} disabled={busy} aria-pressed={dir === root}>
              {root}
            </button>
          ))}
        </div>
      )}
      <form
        class="path-bar"
        onSubmit={(e) => {
          e.preventDefault();
          if (typed.trim().startsWith('/')) open(typed.trim());
        }}
      >
        <label for="fb-path">Folder on the device</label>
        <input id="fb-path" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} disabled={busy} spellcheck={false} autocomplete="off" />
        <button type="submit" disabled={busy || !typed.trim().startsWith('/')}>
          Open
        </button>
        <button type="button" onClick={() => open(parent(dir))} disabled={busy || dir === '/'}>
          Up
        </button>
        <button type="button" onClick={() => setRound((n) => n + 1)} disabled={busy || loading}>
          Refresh
        </button>
      </form>
      {listing && (
        <nav class="crumbs" aria-label="Current folder">
          {crumbs(dir).map((c, i, all) =>
            i === all.length - 1 ? (
              <strong key={c.path}>{c.name}</strong>
            ) : (
              <button type="button" class="link-button" key={c.path} onClick={() => open(c.path)} disabled={busy}>
                {c.name}
              </button>
            ),
          )}
        </nav>
      )}
      {listing && listing.path !== dir && (
        <p class="muted hint" data-testid="resolved-path">
          On the device this folder is {listing.path}.
        </p>
      )}

      <div
        class={`drop-zone${dragging ? ' dragging' : ''}`}
        data-testid="drop-zone"
        onDragEnter={(e) => {
          e.preventDefault();
          setDragging(true);
        }}
        onDragOver={(e) => {
          e.preventDefault();
          if (e.dataTransfer) e.dataTransfer.dropEffect = 'copy';
        }}
        onDragLeave={() => setDragging(false)}
        onDrop={onDrop}
      >
        <span>Drop files here to upload them to {dir}, or</span>
        <label class="button">
          choose files
          <input
            type="file"
            multiple
            class="visually-hidden"
            aria-label={`Upload files to ${dir}`}
            disabled={busy || !listing}
            onChange={(e) => {
              const files = Array.from(e.currentTarget.files ?? []);
              e.currentTarget.value = '';
              void upload(files);
            }}
          />
        </label>
      </div>

      <TransferProgressBar transfer={runner} testId="browser-progress" />
      <ErrorBox error={error} title="The device could not do that" />
      {notice && <Notice>{notice}</Notice>}
      {loading && !listing && <Loading what="the folder" />}

      {listing && (
        <div class="table-scroll">
          <table class="files-table" aria-label={`Files in ${dir}`}>
            <thead>
              <tr>
                <th>Name</th>
                <th class="num">Size</th>
                <th class="hide-narrow">Modified</th>
                <th>
                  <span class="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {listing.entries.length === 0 && (
                <tr>
                  <td colSpan={4} class="muted">
                    This folder is empty.
                  </td>
                </tr>
              )}
              {listing.entries.map((entry) => (
                <tr key={entry.name} data-type={entry.type}>
                  <td class="file-name">
                    {entry.type === 'dir' || entry.type === 'symlink' ? (
                      <button
                        type="button"
                        class="link-button"
                        onClick={() => open(join(dir, entry.name))}
                        disabled={busy}
                        aria-label={`Open ${entry.name}`}
                        title={entry.type === 'symlink' ? 'A link: opened as a folder if it leads to one within your grant' : 'Open folder'}
                      >
                        {entry.name}
                        {entry.type === 'dir' ? '/' : ' →'}
                      </button>
                    ) : (
                      <span>{entry.name}</span>
                    )}
                    <span class="visually-hidden"> ({TYPE_LABEL[entry.type]})</span>
                  </td>
                  <td class="num">{entry.type === 'file' ? formatBytes(entry.size) : ''}</td>
                  <td class="hide-narrow">{formatTime(entry.mtime)}</td>
                  <td>
                    {(entry.type === 'file' || entry.type === 'symlink') && (
                      <button type="button" onClick={() => download(entry)} disabled={busy} aria-label={`Download ${entry.name}`}>
                        Download
                      </button>
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {listing?.truncated && (
        <p class="muted" data-testid="listing-cut">
          This folder holds more entries than are shown here ({listing.entries.length}); type the path of a file or folder to reach the others.
        </p>
      )}
    </div>
  );
}
