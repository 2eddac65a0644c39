/** File transfer to and from one device (copy WebSocket), with progress. */
import { useState } from 'preact/hooks';
import { saveBlob } from '../api.js';
import { copyFromDevice, copyToDevice } from '../remote.js';
import { ErrorBox, Field, Notice } from '../ui.js';
import { TransferProgressBar, useTransfer } from '../use-transfer.js';

function basename(path: string): string {
  return path.split('/').filter(Boolean).pop() ?? 'download';
}

export function FileTransfer({ deviceId }: { deviceId: string }) {
  const [file, setFile] = useState<File | null>(null);
  const [uploadDir, setUploadDir] = useState('/tmp/');
  const [downloadPath, setDownloadPath] = useState('');
  const transfer = useTransfer();
  const { busy, run } = transfer;

  const target = file ? (uploadDir.endsWith('/') ? `${uploadDir}${file.name}` : uploadDir) : '';

  const upload = (e: Event) => {
    e.preventDefault();
    if (!file) return;
    const path = target;
    void run(`Uploading ${file.name}`, async (signal, progress) => {
      const result = await copyToDevice(deviceId, file, path, progress, signal);
      return `Uploaded ${result.bytes} bytes to ${path}.`;
    });
  };

  const download = (e: Event) => {
    e.preventDefault();
    const path = downloadPath.trim();
    if (!path) return;
    void run(`Downloading ${path}`, async (signal, progress) => {
      const { blob, result } = await copyFromDevice(deviceId, path, progress, signal);
      saveBlob(blob, basename(path));
      return `Downloaded ${result.bytes} bytes from ${path}.`;
    });
  };

  return (
    <div class="transfer">
      <form onSubmit={upload} aria-label="Upload to device" class="inline-form">
        <div class="field">
          <label for="t-file">File to send</label>
          <input id="t-file" type="file" onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)} disabled={busy} />
        </div>
        <Field
          label="Destination on the device (folder or file path)"
          name="t-dest"
          value={uploadDir}
          onInput={(e) => setUploadDir(e.currentTarget.value)}
          hint={target ? `Will be written to ${target}` : 'A folder ending in / keeps the file name.'}
          disabled={busy}
        />
        <button type="submit" class="primary" disabled={busy || !file || !uploadDir.startsWith('/')}>
          Upload to device
        </button>
      </form>
      <form onSubmit={download} aria-label="Download from device" class="inline-form">
        <Field
          label="File to fetch from the device"
          name="t-src"
          placeholder="/var/log/syslog"
          value={downloadPath}
          onInput={(e) => setDownloadPath(e.currentTarget.value)}
          disabled={busy}
        />
        <button type="submit" disabled={busy || !downloadPath.trim().startsWith('/')}>
          Download from device
        </button>
      </form>
      <TransferProgressBar transfer={transfer} />
      <ErrorBox error={transfer.error} title="Transfer failed" />
      {transfer.notice && <Notice>{transfer.notice}</Notice>}
    </div>
  );
}
