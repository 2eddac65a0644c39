/**
 * Live events (GET /api/v2/events, server-sent events): devices going online and offline, and
 * pending hosts appearing, approved and rejected. One connection serves every screen that
 * listens (the navigation's pending count, the dashboard, the device list, the pending hosts), so a
 * page holds one stream however many parts of it listen. EventSource cannot send the bearer
 * token, so each connection uses a fresh single-use ticket; for the same reason the browser's own
 * reconnect (which would reuse a spent ticket) is replaced by ours, and `onGap` tells the screens
 * to reload what they may have missed while disconnected.
 */
import { useEffect, useRef } from 'preact/hooks';
import type { DeviceEvent, PendingHostEvent } from '../../shared/api-types.js';
import { api, apiUrl, ensureFreshToken } from './api.js';

/** The stream's events (GET /events), declared once for the broker and the console. */
export type { DeviceEvent, PendingHostEvent };

type ConsoleEvent = DeviceEvent | PendingHostEvent;

const EVENT_NAMES: ConsoleEvent['event'][] = ['device.online', 'device.offline', 'pending.added', 'pending.approved', 'pending.removed'];

const RETRY_MS = 5000;

interface Subscriber {
  onEvent: (e: ConsoleEvent) => void;
  onGap: () => void;
}

/** The one connection of this page, open while someone listens. */
const shared = {
  subscribers: new Set<Subscriber>(),
  source: null as EventSource | null,
  retry: undefined as ReturnType<typeof setTimeout> | undefined,
  /** Bumped on every stop: a connect still waiting for its ticket then knows it is stale. */
  generation: 0,
  connectedBefore: false,
};

async function connect(generation: number): Promise<void> {
  let source: EventSource;
  try {
    await ensureFreshToken();
    const { ticket } = await api.post<{ ticket: string }>('/remote/ticket', {});
    if (generation !== shared.generation) return;
    source = new EventSource(apiUrl('/events', { ticket }));
  } catch {
    if (generation === shared.generation) shared.retry = setTimeout(() => void connect(generation), RETRY_MS);
    return;
  }
  shared.source = source;
  const deliver = (m: MessageEvent<string>) => {
    let e: ConsoleEvent;
    try {
      e = JSON.parse(m.data) as ConsoleEvent;
    } catch {
      return; // Not an event of ours: ignored.
    }
    for (const s of [...shared.subscribers]) s.onEvent(e);
  };
  for (const name of EVENT_NAMES) source.addEventListener(name, deliver);
  source.onopen = () => {
    if (shared.connectedBefore) for (const s of [...shared.subscribers]) s.onGap();
    shared.connectedBefore = true;
  };
  source.onerror = () => {
    source.close();
    if (shared.source === source) shared.source = null;
    if (generation === shared.generation) shared.retry = setTimeout(() => void connect(generation), RETRY_MS);
  };
}

function subscribe(s: Subscriber): () => void {
  shared.subscribers.add(s);
  if (shared.subscribers.size === 1 && typeof EventSource !== 'undefined') void connect(shared.generation);
  return () => {
    shared.subscribers.delete(s);
    if (shared.subscribers.size > 0) return;
    shared.generation += 1;
    clearTimeout(shared.retry);
    shared.source?.close();
    shared.source = null;
    shared.connectedBefore = false;
  };
}

function useEvents<E extends ConsoleEvent>(enabled: boolean, wanted: (e: ConsoleEvent) => e is E, onEvent: (e: E) => void, onGap: () => void): void {
  const handlers = useRef({ onEvent, onGap });
  handlers.current = { onEvent, onGap };
  useEffect(() => {
    if (!enabled) return;
    return subscribe({
      onEvent: (e) => {
        if (wanted(e)) handlers.current.onEvent(e);
      },
      onGap: () => handlers.current.onGap(),
    });
  }, [enabled]);
}

const isDeviceEvent = (e: ConsoleEvent): e is DeviceEvent => e.event === 'device.online' || e.event === 'device.offline';
const isPendingEvent = (e: ConsoleEvent): e is PendingHostEvent => e.event.startsWith('pending.');

/** Devices going online and offline (needs device:read). */
export function useDeviceEvents(enabled: boolean, onEvent: (e: DeviceEvent) => void, onGap: () => void): void {
  useEvents(enabled, isDeviceEvent, onEvent, onGap);
}

/** Pending hosts appearing, approved and rejected (needs device:approve, as the pending list does). */
export function usePendingEvents(enabled: boolean, onEvent: (e: PendingHostEvent) => void, onGap: () => void): void {
  useEvents(enabled, isPendingEvent, onEvent, onGap);
}
