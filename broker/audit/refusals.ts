/**
 * Refused calls are audited one by one up to a rate; past it they are counted and summarised, so a
 * flood of refusals (no token, bad bodies, wrong passwords) cannot grow the audit trail faster than
 * `limit` entries a minute per source. A source is an address and the user the call was made as
 * (none when it could not be identified). Counts live in this broker's memory, bounded in keys.
 */

/** Refused entries written one by one per source and window; further ones are counted. */
export const REFUSALS_PER_WINDOW = 30;
export const REFUSAL_WINDOW_MS = 60_000;
/** Sources counted at once; past it, new sources share one bucket (address `*`). */
export const MAX_REFUSAL_SOURCES = 10_000;
/** Event codes named in one summary, at most (the rest are counted under `…`). */
const MAX_EVENTS = 20;

export interface RefusalSource {
  ip: string;
  user?: { id: string; email: string };
}

/** What a summary entry records: who, when, how many refusals went unrecorded, of which events. */
export interface RefusalSummary extends RefusalSource {
  from: string;
  to: string;
  count: number;
  events: Record<string, number>;
}

interface Window extends RefusalSource {
  start: number;
  written: number;
  suppressed: number;
  events: Map<string, number>;
}

export class RefusalBudget {
  private readonly windows = new Map<string, Window>();

  constructor(
    readonly limit = REFUSALS_PER_WINDOW,
    readonly windowMs = REFUSAL_WINDOW_MS,
    private readonly maxSources = MAX_REFUSAL_SOURCES,
  ) {}

  /**
   * Counts one refusal: `write` says whether it gets an entry of its own; `summaries` are the
   * windows that ended with refusals counted but not written (this source's previous one, and any
   * other ended one when room was needed), to be written now.
   */
  take(source: RefusalSource, event: string, now = Date.now()): { write: boolean; summaries: RefusalSummary[] } {
    const summaries: RefusalSummary[] = [];
    let key = keyOf(source);
    let window = this.windows.get(key);
    if (window && now - window.start >= this.windowMs) {
      const ended = summaryOf(window, now);
      if (ended) summaries.push(ended);
      this.windows.delete(key);
      window = undefined;
    }
    if (!window) {
      if (this.windows.size >= this.maxSources) summaries.push(...this.due(now));
      if (this.windows.size >= this.maxSources) {
        source = { ip: '*' };
        key = keyOf(source);
        window = this.windows.get(key);
      }
      if (!window) {
        window = { ...source, start: now, written: 0, suppressed: 0, events: new Map() };
        this.windows.set(key, window);
      }
    }
    if (window.written < this.limit) {
      window.written += 1;
      return { write: true, summaries };
    }
    window.suppressed += 1;
    const name = window.events.has(event) || window.events.size < MAX_EVENTS ? event : '…';
    window.events.set(name, (window.events.get(name) ?? 0) + 1);
    return { write: false, summaries };
  }

  /** Ends every window older than the window length: the summaries of those that counted refusals. */
  due(now = Date.now()): RefusalSummary[] {
    const out: RefusalSummary[] = [];
    for (const [key, window] of this.windows) {
      if (now - window.start < this.windowMs) continue;
      this.windows.delete(key);
      const summary = summaryOf(window, now);
      if (summary) out.push(summary);
    }
    return out;
  }

  /** Ends every window now (the broker stops): the summaries of those that counted refusals. */
  drain(now = Date.now()): RefusalSummary[] {
    const out = [...this.windows.values()].map((w) => summaryOf(w, now)).filter((s): s is RefusalSummary => s !== undefined);
    this.windows.clear();
    return out;
  }
}

function keyOf(source: RefusalSource): string {
  return `${source.ip}\n${source.user?.id ?? ''}`;
}

function summaryOf(window: Window, now: number): RefusalSummary | undefined {
  if (window.suppressed === 0) return undefined;
  return {
    ip: window.ip,
    ...(window.user ? { user: window.user } : {}),
    from: new Date(window.start).toISOString(),
    to: new Date(now).toISOString(),
    count: window.suppressed,
    events: Object.fromEntries(window.events),
  };
}
