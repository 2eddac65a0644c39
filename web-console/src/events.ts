/**
 * Live device events (GET /api/v2/events, server-sent events). EventSource cannot send the bearer
 * token, so each connection uses a fresh single-use ticket; for the same reason the browser's own
 * reconnect (which would reuse a spent ticket) is replaced by ours, and `onGap` tells the screen
 * to reload what it may have missed while disconnected.
 */
import { useEffect, useRef } from 'preact/hooks';
import { api, apiUrl, ensureFreshToken } from './api.js';

export interface DeviceEvent {
  event: 'device.online' | 'device.offline';
  device_id: string;
  at: string;
}

const RETRY_MS = 5000;

export function useDeviceEvents(enabled: boolean, onEvent: (e: DeviceEvent) => void, onGap: () => void): void {
  const handlers = useRef({ onEvent, onGap });
  handlers.current = { onEvent, onGap };
  useEffect(() => {
    if (!enabled || typeof EventSource === 'undefined') return;
    let source: EventSource | null = null;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    let connectedBefore = false;

    const connect = async () => {
      try {
        await ensureFreshToken();
        const { ticket } = await api.post<{ ticket: string }>('/remote/ticket', {});
        if (stopped) return;
        source = new EventSource(apiUrl('/events', { ticket }));
      } catch {
        if (!stopped) retry = setTimeout(() => void connect(), RETRY_MS);
        return;
      }
      const deliver = (m: MessageEvent<string>) => {
        try {
          handlers.current.onEvent(JSON.parse(m.data) as DeviceEvent);
        } catch {
          // Not an event of ours: ignored.
        }
      };
      source.addEventListener('device.online', deliver);
      source.addEventListener('device.offline', deliver);
      source.onopen = () => {
        if (connectedBefore) handlers.current.onGap();
        connectedBefore = true;
      };
      source.onerror = () => {
        source?.close();
        source = null;
        if (!stopped) retry = setTimeout(() => void connect(), RETRY_MS);
      };
    };
    void connect();
    return () => {
      stopped = true;
      clearTimeout(retry);
      source?.close();
    };
  }, [enabled]);
}
