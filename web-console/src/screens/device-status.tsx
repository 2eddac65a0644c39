/** A device's online state and last contact, as the device list, the table and the device page show them. */
import { useEffect, useState } from 'preact/hooks';
import { formatTime } from '../ui.js';

export function isOnline(node: { status?: string; connected?: boolean }): boolean {
  return node.connected === true || node.status === 'online' || node.status === 'connected';
}

export function StatusDot({ online, label }: { online: boolean; label?: string }) {
  const text = label ?? (online ? 'online' : 'offline');
  return (
    <span class={`status ${online ? 'online' : 'offline'}`}>
      <span class="dot" aria-hidden="true" />
      {text}
    </span>
  );
}

/** While the devices page is open and shown, the tree is read again this often: "heard … ago" of online devices comes from it. */
export const HEARD_REFRESH_MS = 30_000;

/** One timer for every "heard … ago" on the page, however many devices are shown. */
const tickers = new Set<(now: number) => void>();
let tickTimer: ReturnType<typeof setInterval> | undefined;

function useSecondTick(): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    tickers.add(setNow);
    tickTimer ??= setInterval(() => {
      const t = Date.now();
      tickers.forEach((tick) => tick(t));
    }, 1000);
    return () => {
      tickers.delete(setNow);
      if (tickers.size === 0) {
        clearInterval(tickTimer);
        tickTimer = undefined;
      }
    };
  }, []);
  return now;
}

/** "5 s ago", "3 min ago", "2 h ago", "4 days ago". */
export function agoText(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s ago`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ago`;
  return `${Math.floor(h / 24)} days ago`;
}

function HeardAgo({ at }: { at: number }) {
  const now = useSecondTick();
  const iso = new Date(at).toISOString();
  return (
    <span class="heard muted small" title={`Last heartbeat ${formatTime(iso)}`} data-at={iso}>
      heard {agoText(now - at)}
    </span>
  );
}

/**
 * The last contact of a device: for an online one its last heartbeat, counting up ("heard 5 s
 * ago"; the broker tells it from memory, see GET /grouptree), for an offline one when it was last seen.
 * `at` is in milliseconds.
 */
export function LastContact({ online, at, prefix = true }: { online: boolean; at: number | null; prefix?: boolean }) {
  if (at === null) return prefix ? null : <span class="muted small">never</span>;
  if (online) return <HeardAgo at={at} />;
  const iso = new Date(at).toISOString();
  return (
    <span class="seen muted small" data-at={iso}>
      {prefix ? 'seen ' : ''}
      {formatTime(iso)}
    </span>
  );
}
