/** Small building blocks shared by the screens. */
import type { ComponentChildren, LooseInputHTMLAttributes } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiFailure, messageOf } from './api.js';
import type { NodeChoice } from './node-names.js';

/** Loads data for a screen; `reload()` fetches again. Errors are kept for display, never thrown. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): { data?: T; error?: unknown; loading: boolean; reload: () => void } {
  const [result, setResult] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let live = true;
    setResult((r) => ({ ...r, loading: true }));
    load().then(
      (data) => live && setResult({ data, loading: false }),
      (error: unknown) => live && setResult({ error, loading: false }),
    );
    return () => {
      live = false;
    };
    // The caller's `deps` decide when to load again (as with useEffect); `round` is bumped by reload().
  }, [...deps, round]);
  const reload = useCallback(() => setRound((n) => n + 1), []);
  return { ...result, reload };
}

/** Runs an action, remembering whether it is busy and what went wrong. */
export function useAction(): {
  busy: boolean;
  error: unknown;
  run: <T>(action: () => Promise<T>) => Promise<T | undefined>;
  clear: () => void;
} {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const run = useCallback(async <T,>(action: () => Promise<T>) => {
    setBusy(true);
    setError(undefined);
    try {
      return await action();
    } catch (err) {
      setError(err);
      return undefined;
    } finally {
      setBusy(false);
    }
  }, []);
  return { busy, error, run, clear: () => setError(undefined) };
}

/** A failed call, with the API's message. A 403 reads "Access denied". */
export function ErrorBox({ error, title }: { error: unknown; title?: string }) {
  if (error === undefined || error === null) return null;
  const denied = error instanceof ApiFailure && error.status === 403;
  const heading = denied ? 'Access denied' : (title ?? (error instanceof ApiFailure && error.status === 404 ? 'Not found' : 'Something went wrong'));
  return (
    <div class="error-box" role="alert">
      <strong>{heading}</strong>
      <p>{messageOf(error)}</p>
    </div>
  );
}

export function AccessDenied({ message }: { message?: string }) {
  return (
    <div class="error-box" role="alert">
      <strong>Access denied</strong>
      <p>{message ?? 'Your roles do not allow this. Ask an administrator if you need it.'}</p>
    </div>
  );
}

/** How long a success notice stays before it goes by itself. */
export const NOTICE_MS = 8000;

/**
 * A success notice that does not outstay its news: `say(text)` shows it, and it goes after
 * NOTICE_MS, or when `say('')` is called as the next action starts.
 */
export function useNotice(): [string, (text: string) => void] {
  const [notice, setNotice] = useState('');
  const timer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  useEffect(() => () => clearTimeout(timer.current), []);
  const say = useCallback((text: string) => {
    clearTimeout(timer.current);
    setNotice(text);
    if (text) timer.current = setTimeout(() => setNotice(''), NOTICE_MS);
  }, []);
  return [notice, say];
}

export function Notice({ children }: { children: ComponentChildren }) {
  return (
    <p class="notice" role="status">
      {children}
    </p>
  );
}

export function Loading({ what }: { what?: string }) {
  return (
    <p class="loading" role="status" aria-live="polite">
      Loading{what ? ` ${what}` : ''}…
    </p>
  );
}

type InputProps = Omit<LooseInputHTMLAttributes<HTMLInputElement>, 'name'> & { label: string; error?: string; hint?: string; name: string };

/** A labelled input with its error from the API's answer shown beside it. */
export function Field({ label, error, hint, name, ...input }: InputProps) {
  const id = `f-${name}`;
  return (
    <div class={`field${error ? ' has-error' : ''}`}>
      <label for={id}>{label}</label>
      <input
        id={id}
        name={name}
        aria-invalid={error ? 'true' : undefined}
        aria-describedby={error ? `${id}-error` : hint ? `${id}-hint` : undefined}
        {...(input as Record<string, unknown>)}
      />
      {hint && !error && (
        <small id={`${id}-hint`} class="hint">
          {hint}
        </small>
      )}
      {error && (
        <small id={`${id}-error`} class="field-error" role="alert">
          {error}
        </small>
      )}
    </div>
  );
}

/** A button that asks again before doing something irreversible. */
export function ConfirmButton({
  label,
  question,
  confirmLabel,
  onConfirm,
  disabled,
  class: className,
  extra,
}: {
  label: string;
  question: string;
  confirmLabel?: string;
  onConfirm: () => void | Promise<void>;
  disabled?: boolean;
  class?: string;
  /** shown with the question (a reason field, say) */
  extra?: ComponentChildren;
}) {
  const [asking, setAsking] = useState(false);
  const yes = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (asking) yes.current?.focus();
  }, [asking]);
  if (!asking) {
    return (
      <button type="button" class={className ?? 'danger'} disabled={disabled} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  }
  return (
    <span class="confirm" role="group" aria-label={question}>
      <span>{question}</span>
      {extra}
      <button
        ref={yes}
        type="button"
        class="danger"
        onClick={async () => {
          setAsking(false);
          await onConfirm();
        }}
      >
        {confirmLabel ?? `Yes, ${label.toLowerCase()}`}
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

/**
 * On phones a filter form folds: its `.fold` fields hide behind this button, which says how many
 * filters are set. Wider screens show every field and no button (styles.css).
 */
export function FilterFold({ controls, active, open, onToggle }: { controls: string; active: number; open: boolean; onToggle: () => void }) {
  return (
    <button type="button" class="filters-toggle" aria-controls={controls} aria-expanded={open} onClick={onToggle}>
      {open ? 'Hide filters' : 'Filters'}
      {active > 0 ? ` (${active} set)` : ''}
    </button>
  );
}

/** Copies text to the clipboard; falls back to selecting it where the clipboard API is absent. */
export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text);
          setDone(true);
        } catch {
          const area = document.createElement('textarea');
          area.value = text;
          document.body.append(area);
          area.select();
          document.execCommand('copy');
          area.remove();
          setDone(true);
        }
        setTimeout(() => setDone(false), 1500);
      }}
    >
      {done ? 'Copied' : label}
    </button>
  );
}

export function ProgressBar({ value, total, label }: { value: number; total: number; label: string }) {
  const percent = total > 0 ? Math.min(100, Math.round((value / total) * 100)) : 0;
  return (
    <div class="progress">
      <progress max={total || 1} value={value} aria-label={label} />
      <span>
        {formatBytes(value)}
        {total > 0 ? ` / ${formatBytes(total)} (${percent}%)` : ''}
      </span>
    </div>
  );
}

export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

/** An ISO 8601 time or Unix seconds, in the reader's locale. */
export function formatTime(iso: string | number | null | undefined): string {
  if (iso === null || iso === undefined || iso === '') return '';
  const d = typeof iso === 'number' ? new Date(iso * 1000) : new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

export function PageTitle({ children, actions }: { children: ComponentChildren; actions?: ComponentChildren }) {
  useEffect(() => {
    if (typeof children === 'string') document.title = `${children} · Fleet console`;
  }, [children]);
  return (
    <div class="page-title">
      <h1 tabIndex={-1}>{children}</h1>
      {actions && <div class="actions">{actions}</div>}
    </div>
  );
}

export function Tags({ tags }: { tags: string[] | undefined }) {
  if (!tags?.length) return null;
  return (
    <span class="tags">
      {tags.map((t) => (
        <span class="tag" key={t}>
          {t}
        </span>
      ))}
    </span>
  );
}

/**
 * A table that scrolls sideways on a narrow screen. `columns` are the heads (`false` leaves one
 * out, e.g. Actions for a reader); `children` are the rows; `footer` goes below the table.
 */
export function Table({
  columns,
  caption,
  class: className,
  footer,
  children,
}: {
  columns: (string | false)[];
  /** for screen readers only */
  caption?: string;
  class?: string;
  footer?: ComponentChildren;
  children: ComponentChildren;
}) {
  return (
    <div class="table-wrap">
      <table class={className}>
        {caption && <caption class="visually-hidden">{caption}</caption>}
        <thead>
          <tr>
            {columns.map(
              (column) =>
                column && (
                  <th scope="col" key={column}>
                    {column}
                  </th>
                ),
            )}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
      {footer}
    </div>
  );
}

/**
 * A list loaded with useLoad, as a Table with a row per item: "Loading …" until the first answer
 * (nothing when it failed: the screen shows the error), and the `empty` sentence for no items
 * when there is one (else an empty table).
 */
export function ListTable<T>({
  items,
  loading,
  what,
  empty,
  columns,
  row,
}: {
  items: T[] | undefined;
  loading: boolean;
  /** what is loading, e.g. "users" */
  what: string;
  empty?: string;
  columns: (string | false)[];
  row: (item: T) => ComponentChildren;
}) {
  if (!items) return loading ? <Loading what={what} /> : null;
  if (items.length === 0 && empty) return <p>{empty}</p>;
  return <Table columns={columns}>{items.map(row)}</Table>;
}

/**
 * A filter field that takes a device (or group) by name, suggesting the names the caller may see
 * (node-names.ts resolves what was typed); `problem` is why the typed text names nothing.
 */
export function NodeNameField({
  id,
  label,
  value,
  choices,
  problem,
  onInput,
  class: className,
}: {
  id: string;
  label: string;
  value: string;
  choices: readonly NodeChoice[];
  problem?: string;
  onInput: (text: string) => void;
  class?: string;
}) {
  return (
    <div class={`field${className ? ` ${className}` : ''}${problem ? ' has-error' : ''}`}>
      <label for={id}>{label}</label>
      <input
        id={id}
        list={`${id}-names`}
        value={value}
        autocomplete="off"
        placeholder={choices.length > 0 ? 'name' : 'id'}
        aria-invalid={problem ? 'true' : undefined}
        aria-describedby={problem ? `${id}-error` : undefined}
        onInput={(e) => onInput(e.currentTarget.value)}
      />
      <datalist id={`${id}-names`}>
        {choices.map((c) => (
          <option key={c.id} value={c.label}>
            {c.type}
          </option>
        ))}
      </datalist>
      {problem && (
        <small id={`${id}-error`} class="field-error" role="alert">
          {problem}
        </small>
      )}
    </div>
  );
}
