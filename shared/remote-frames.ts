/**
 * The remote-access WebSockets between the broker and a user's client (browser, CLI, scripts):
 * `/api/v2/remote/{console,tunnel,copy}`. Binary frames carry the session's bytes; text frames are
 * the JSON control frames below. One set of types and one parser for the broker's relay, the CLI
 * and the web console, so the three cannot drift apart.
 */

export const REMOTE_PATH = '/api/v2/remote';
export type RemoteKind = 'console' | 'tunnel' | 'copy';

/** Largest console size in either dimension (the device clamps to the same). */
export const MAX_TERMINAL_DIMENSION = 1000;

/**
 * The session is set up on the device: bytes may flow. A console says which session it is
 * (`session`: re-attach to it with `?attach=`, watch it with `?watch=`), whether this socket
 * controls it or watches it read-only (`mode`), and how long it outlives a dropped connection
 * (`detach_grace`, seconds; 0: it ends with the connection).
 */
export interface ReadyFrame {
  type: 'ready';
  session?: string;
  mode?: 'control' | 'watch';
  detach_grace?: number;
  /** true on a re-attach: the recent output that follows replaces what the client shows */
  reattached?: boolean;
}
/** Who is watching a console read-only, sent to its owner whenever that changes. */
export interface WatchersFrame {
  type: 'watchers';
  watchers: { id: string; email: string }[];
}
/** The sender's direction is finished (tunnel half-close, end of an upload). */
export interface EofFrame {
  type: 'eof';
}
/** The console's shell ended; the last frame before the close. */
export interface ExitFrame {
  type: 'exit';
  code: number | null;
  signal: number | null;
}
/** A download's size and mode, before its bytes. */
export interface MetaFrame {
  type: 'meta';
  size: number;
  mode: number;
}
/** A finished copy: what the device wrote or sent. */
export interface ResultFrame {
  type: 'result';
  ok: boolean;
  bytes: number;
  sha256: string;
}
/** Longest email, name and reason an ended session's frame carries (the broker checks the reason at its route). */
export const MAX_ENDER_EMAIL = 320;
export const MAX_ENDER_NAME = 200;
export const MAX_END_REASON = 500;

/** Who ended a session: the operator the session's user is told about. */
export interface EndedBy {
  email: string;
  /** first and last name; '' when the user has none */
  name: string;
}

/**
 * A refusal or failure, in the API's error shape; the socket then closes with 4000 + code.
 * `session_ended` carries `ended_by` (and `reason` when the operator gave one); `access_withdrawn`
 * carries `reason`, the rule that no longer grants the session.
 */
export interface ErrorFrame {
  type: 'error';
  code: number;
  error: string;
  message: string;
  ended_by?: EndedBy;
  reason?: string;
  [detail: string]: unknown;
}
/** What the broker sends. */
export type ServerFrame = ReadyFrame | WatchersFrame | EofFrame | ExitFrame | MetaFrame | ResultFrame | ErrorFrame;

/** Console only: the terminal's new size. */
export interface ResizeFrame {
  type: 'resize';
  cols: number;
  rows: number;
}
/** Console only: this many output bytes have been shown (the broker holds at most 1 MiB un-acknowledged). */
export interface AckFrame {
  type: 'ack';
  bytes: number;
}
/** What a client sends. */
export type ClientFrame = ResizeFrame | AckFrame | EofFrame;

export function errorFrame(code: number, error: string, message: string, details: Record<string, unknown> = {}): ErrorFrame {
  return { ...details, type: 'error', code, error, message };
}

/**
 * A parsed text frame: `frame` when valid; `unknown` for a well-formed frame of a type this side
 * does not know (a newer peer may send more: ignored); `invalid` with a sentence (and the field
 * at fault) otherwise.
 */
export type Parsed<F> = { kind: 'frame'; frame: F } | { kind: 'unknown'; type: string } | { kind: 'invalid'; message: string; field?: string };

type Json = Record<string, unknown>;

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isStatus = (v: unknown): v is number | null => v === null || (typeof v === 'number' && Number.isSafeInteger(v));
const isText = (v: unknown, max: number): v is string => typeof v === 'string' && v.length <= max;
const isDimension = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= MAX_TERMINAL_DIMENSION;

function parseObject(text: string): Json | { invalid: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { invalid: 'Text frames must be JSON control messages.' };
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return { invalid: 'A control message must be a JSON object.' };
  if (typeof (value as Json).type !== 'string') return { invalid: 'A control message needs a "type".' };
  return value as Json;
}

const invalid = (message: string, field?: string) => ({ kind: 'invalid' as const, message, ...(field ? { field } : {}) });

/** Parses and checks a frame from a client (the broker's side). */
export function parseClientFrame(text: string): Parsed<ClientFrame> {
  const o = parseObject(text);
  if ('invalid' in o) return invalid(o.invalid as string);
  switch (o.type) {
    case 'resize':
      if (!isDimension(o.cols)) return invalid(`resize: cols and rows must be whole numbers from 1 to ${MAX_TERMINAL_DIMENSION}.`, 'cols');
      if (!isDimension(o.rows)) return invalid(`resize: cols and rows must be whole numbers from 1 to ${MAX_TERMINAL_DIMENSION}.`, 'rows');
      return { kind: 'frame', frame: { type: 'resize', cols: o.cols, rows: o.rows } };
    case 'ack':
      if (!isCount(o.bytes) || o.bytes === 0) return invalid('ack: bytes must be a whole number above 0.', 'bytes');
      return { kind: 'frame', frame: { type: 'ack', bytes: o.bytes } };
    case 'eof':
      return { kind: 'frame', frame: { type: 'eof' } };
    default:
      return { kind: 'unknown', type: o.type as string };
  }
}

/** Parses and checks a frame from the broker (the clients' side). */
export function parseServerFrame(text: string): Parsed<ServerFrame> {
  const o = parseObject(text);
  if ('invalid' in o) return invalid(o.invalid as string);
  switch (o.type) {
    case 'ready': {
      const frame: ReadyFrame = { type: 'ready' };
      if (typeof o.session === 'string' && o.session.length <= 64) frame.session = o.session;
      if (o.mode === 'control' || o.mode === 'watch') frame.mode = o.mode;
      if (isCount(o.detach_grace)) frame.detach_grace = o.detach_grace;
      if (o.reattached === true) frame.reattached = true;
      return { kind: 'frame', frame };
    }
    case 'watchers': {
      if (!Array.isArray(o.watchers) || o.watchers.length > 1000) return invalid('watchers: watchers must be a list.', 'watchers');
      const watchers: WatchersFrame['watchers'] = [];
      for (const w of o.watchers as unknown[]) {
        const entry = w as Json | null;
        if (!entry || typeof entry.id !== 'string' || typeof entry.email !== 'string') return invalid('watchers: each needs an id and an email.', 'watchers');
        watchers.push({ id: entry.id, email: entry.email });
      }
      return { kind: 'frame', frame: { type: 'watchers', watchers } };
    }
    case 'eof':
      return { kind: 'frame', frame: { type: 'eof' } };
    case 'exit':
      if (!isStatus(o.code)) return invalid('exit: code must be a whole number or null.', 'code');
      if (!isStatus(o.signal)) return invalid('exit: signal must be a whole number or null.', 'signal');
      return { kind: 'frame', frame: { type: 'exit', code: o.code, signal: o.signal } };
    case 'meta':
      if (!isCount(o.size)) return invalid('meta: size must be a whole number of bytes.', 'size');
      if (!isCount(o.mode)) return invalid('meta: mode must be a whole number.', 'mode');
      return { kind: 'frame', frame: { type: 'meta', size: o.size, mode: o.mode } };
    case 'result':
      if (typeof o.ok !== 'boolean') return invalid('result: ok must be true or false.', 'ok');
      if (!isCount(o.bytes)) return invalid('result: bytes must be a whole number.', 'bytes');
      if (typeof o.sha256 !== 'string') return invalid('result: sha256 must be a string.', 'sha256');
      return { kind: 'frame', frame: { type: 'result', ok: o.ok, bytes: o.bytes, sha256: o.sha256 } };
    case 'error':
      if (!isStatus(o.code) || o.code === null) return invalid('error: code must be a whole number.', 'code');
      if (typeof o.error !== 'string') return invalid('error: error must be a string.', 'error');
      if (typeof o.message !== 'string') return invalid('error: message must be a string.', 'message');
      {
        const frame: ErrorFrame = { ...o, type: 'error', code: o.code, error: o.error, message: o.message };
        delete frame.ended_by;
        delete frame.reason;
        if (o.ended_by !== undefined) {
          const by = o.ended_by as Json | null;
          if (!by || typeof by !== 'object' || Array.isArray(by) || !isText(by.email, MAX_ENDER_EMAIL) || !isText(by.name, MAX_ENDER_NAME))
            return invalid(`error: ended_by must be {email, name}, at most ${MAX_ENDER_EMAIL} and ${MAX_ENDER_NAME} characters.`, 'ended_by');
          frame.ended_by = { email: by.email, name: by.name };
        }
        if (o.reason !== undefined) {
          if (!isText(o.reason, MAX_END_REASON)) return invalid(`error: reason must be a string of at most ${MAX_END_REASON} characters.`, 'reason');
          frame.reason = o.reason;
        }
        return { kind: 'frame', frame };
      }
    default:
      return { kind: 'unknown', type: o.type as string };
  }
}

/**
 * What to tell the user whose session ended on someone else's word: "Ended by alice@example.com
 * (maintenance window)", or "Your access was withdrawn (…)"; undefined for any other error.
 */
export function endedMessage(frame: ErrorFrame): string | undefined {
  const why = frame.reason ? ` (${frame.reason})` : '';
  if (frame.error === 'access_withdrawn') return `Your access was withdrawn${why}.`;
  if (frame.error !== 'session_ended' || !frame.ended_by) return undefined;
  const who = frame.ended_by.name ? `${frame.ended_by.name} <${frame.ended_by.email}>` : frame.ended_by.email;
  return `Ended by ${who}${why}.`;
}

/** The frame, or undefined for anything a client should ignore (unknown or malformed). */
export function serverFrameOf(text: string): ServerFrame | undefined {
  const parsed = parseServerFrame(text);
  return parsed.kind === 'frame' ? parsed.frame : undefined;
}

/** The text of a frame, typed so that only frames of the contract can be sent. */
export function encodeFrame(frame: ServerFrame | ClientFrame): string {
  return JSON.stringify(frame);
}
