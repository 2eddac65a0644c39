/**
 * The runner of a copy to or from a device, shared by the Files tab's browser and its
 * transfer forms: one transfer at a time, its progress with a Cancel button, and its outcome
 * (a notice, or the error).
 */
import { useRef, useState } from 'preact/hooks';
import { ProgressBar } from './ui.js';

export interface TransferProgress {
  label: string;
  done: number;
  total: number;
}

/** Runs the copy; `report` shows its progress, `signal` aborts it. Answers the sentence to show when done. */
export type TransferAction = (signal: AbortSignal, report: (done: number, total: number) => void) => Promise<string>;

export interface Transfer {
  /** The transfer running now, null when none. */
  progress: TransferProgress | null;
  busy: boolean;
  notice: string;
  setNotice: (notice: string) => void;
  error: unknown;
  setError: (error: unknown) => void;
  /** Runs one transfer: clears the notice and the error, then shows the outcome. Answers whether it succeeded. */
  run: (label: string, action: TransferAction) => Promise<boolean>;
  cancel: () => void;
}

export function useTransfer(): Transfer {
  const [progress, setProgress] = useState<TransferProgress | null>(null);
  const [notice, setNotice] = useState('');
  const [error, setError] = useState<unknown>();
  const abort = useRef<AbortController | null>(null);

  async function run(label: string, action: TransferAction): Promise<boolean> {
    setError(undefined);
    setNotice('');
    setProgress({ label, done: 0, total: 0 });
    let running = true;
    const report = (done: number, total: number) => running && setProgress({ label, done, total });
    abort.current = new AbortController();
    try {
      setNotice(await action(abort.current.signal, report));
      return true;
    } catch (err) {
      setError(err);
      return false;
    } finally {
      running = false;
      setProgress(null);
      abort.current = null;
    }
  }

  return { progress, busy: progress !== null, notice, setNotice, error, setError, run, cancel: () => abort.current?.abort() };
}

/** The running transfer's label, bar and Cancel button; nothing when none runs. */
export function TransferProgressBar({ transfer, testId }: { transfer: Transfer; testId?: string }) {
  const { progress } = transfer;
  if (!progress) return null;
  return (
    <div class="transfer-progress" data-testid={testId}>
      <span>{progress.label}</span>
      <ProgressBar value={progress.done} total={progress.total} label={progress.label} />
      <button type="button" onClick={transfer.cancel}>
        Cancel
      </button>
    </div>
  );
}
