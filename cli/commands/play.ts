import { escapeForTerminal } from '../../shared/text.js';
import type { ApiClient } from '../api.js';
import { CliError } from '../errors.js';

export interface PlayOptions {
  speed?: string;
  /** false with --no-wait: everything at once */
  wait?: boolean;
  /** write the recorded bytes as they are even when stdout is not a terminal */
  raw?: boolean;
}

type CastEvent = [number, string, string];

/** Parses an asciicast v2 recording: its header and its events, in order. */
export function parseCast(text: string): { header: { width?: number; height?: number }; events: CastEvent[] } {
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  if (lines.length === 0) throw new CliError('The recording is empty.');
  let header: { version?: unknown; width?: number; height?: number };
  try {
    header = JSON.parse(lines[0]) as typeof header;
  } catch {
    throw new CliError('The recording is not an asciicast file.');
  }
  if (header.version !== 2) throw new CliError('The recording is not asciicast version 2.');
  const events: CastEvent[] = [];
  for (const line of lines.slice(1)) {
    try {
      const e = JSON.parse(line) as unknown;
      if (Array.isArray(e) && typeof e[0] === 'number' && typeof e[1] === 'string' && typeof e[2] === 'string') events.push(e as CastEvent);
    } catch {
      // A line cut short (the broker stopped mid-write): what came before still plays.
    }
  }
  return { header, events };
}

/**
 * What goes to stdout for recorded output. The bytes are the recorded terminal's own output
 * (colours, cursor moves, a title): a player writes them raw to a terminal, as the session's
 * terminal received them. To a file or a pipe they are escaped (\x1b…) unless --raw, so that a
 * later `cat` of the file does not act on them unseen.
 */
export function forStdout(data: string, toTerminal: boolean): string {
  if (toTerminal) return data;
  return data
    .replace(/\r\n/g, '\n')
    .split('\n')
    .map((line) => escapeForTerminal(line))
    .join('\n');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `fleet play <session>`: fetches a console recording and replays it with its timing. */
export async function playCommand(client: ApiClient, sessionId: string, options: PlayOptions): Promise<number> {
  const speed = Number(options.speed ?? '1');
  if (!Number.isFinite(speed) || speed < 0.1 || speed > 100) throw new CliError('--speed must be a number from 0.1 to 100.');
  if (!/^[0-9a-f-]{36}$/i.test(sessionId)) throw new CliError('Give the session id of the recording (as in the audit log or "fleet sessions").');
  const text = await client.text(`/remote/recordings/${sessionId}`);
  const { events } = parseCast(text);
  const toTerminal = options.raw === true || process.stdout.isTTY === true;
  let clock = 0;
  for (const [time, type, data] of events) {
    if (options.wait !== false && time > clock) await sleep(((time - clock) * 1000) / speed);
    clock = Math.max(clock, time);
    if (type === 'o') {
      if (!process.stdout.write(forStdout(data, toTerminal))) await new Promise((r) => process.stdout.once('drain', r));
    } else if (type === 'm') {
      process.stderr.write(`\n[${escapeForTerminal(data)}]\n`);
    }
  }
  if (toTerminal) process.stdout.write('\r\n');
  return 0;
}
