import { CastError, parseCast as parseRecording } from '../../shared/asciicast.js';
import { escapeForTerminal } from '../../shared/text.js';
import type { ApiClient } from '../api.js';
import { CliError } from '../errors.js';
import { resolveRecording } from './recordings.js';

export interface PlayOptions {
  speed?: string;
  /** false with --no-wait: everything at once */
  wait?: boolean;
  /** write the recorded bytes as they are even when stdout is not a terminal */
  raw?: boolean;
}

/** The recording, or a CliError saying why it is not one. */
export function parseCast(text: string): ReturnType<typeof parseRecording> {
  try {
    return parseRecording(text);
  } catch (err) {
    if (err instanceof CastError) throw new CliError(err.message);
    throw err;
  }
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
  const recording = await resolveRecording(client, sessionId);
  const text = await client.text(`/remote/recordings/${recording}`);
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
