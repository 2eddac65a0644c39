/**
 * Console recordings as asciicast v2: a JSON header line, then one event a line,
 * `[seconds, "o", text]` (output), `[seconds, "r", "COLSxROWS"]` (resize), `[seconds, "m", text]`
 * (a marker: a gap in the recording). Read by `fleet play` and the web console's player alike.
 */
export type CastEvent = [number, string, string];

export interface CastHeader {
  version: 2;
  width: number;
  height: number;
  timestamp?: number;
  title?: string;
}

export class CastError extends Error {}

/** The header and the events in order; a last line cut short (a recording still being written) is left out. */
export function parseCast(text: string): { header: CastHeader; events: CastEvent[] } {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length === 0) throw new CastError('The recording is empty.');
  let header: Partial<CastHeader> & { version?: unknown };
  try {
    header = JSON.parse(lines[0]) as typeof header;
  } catch {
    throw new CastError('The recording is not an asciicast file.');
  }
  if (header.version !== 2) throw new CastError('The recording is not asciicast version 2.');
  const events: CastEvent[] = [];
  for (const line of lines.slice(1)) {
    try {
      const e = JSON.parse(line) as unknown;
      if (Array.isArray(e) && typeof e[0] === 'number' && typeof e[1] === 'string' && typeof e[2] === 'string') events.push(e as CastEvent);
    } catch {
      // cut short: what came before still plays
    }
  }
  return {
    header: { version: 2, width: Number(header.width) || 80, height: Number(header.height) || 24, timestamp: header.timestamp, title: header.title },
    events,
  };
}

/** The terminal size a resize event names, or undefined when it names none. */
export function castSize(data: string): { cols: number; rows: number } | undefined {
  const m = /^(\d{1,4})x(\d{1,4})$/.exec(data);
  return m ? { cols: Number(m[1]), rows: Number(m[2]) } : undefined;
}

/** How long the recording runs, in seconds. */
export function castDuration(events: CastEvent[]): number {
  return events.length ? events[events.length - 1][0] : 0;
}
