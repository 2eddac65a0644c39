/**
 * What an entry of the audit trail records of a request, and how much of it: the bounds on its text
 * and options, and the events the trail writes of its own (checkpoints, refusal summaries).
 */

/** Longest reason or address kept: what an entry records of a request is bounded. */
const MAX_TEXT = 300;

export function bounded(text: string, max = MAX_TEXT): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/**
 * Bytes of an entry's options (JSON) kept at most; longer ones are cut and marked. Refusals and
 * remote-access attempts — what a caller who is not let in can make — get a few KiB; a change that
 * succeeded (an authorized caller, fields bounded by the redaction) keeps more of its before and after.
 */
export const MAX_OPTIONS_BYTES = 4096;
export const MAX_CHANGE_OPTIONS_BYTES = 64 * 1024;

/**
 * Options as stored: their JSON, or — past `max` bytes — `{cut: true, bytes, start}`: the start of
 * that JSON as text (three quarters of `max`, less when escaping grows it) and its full size, so a
 * huge request body never makes a huge entry and a reader sees that something was left out.
 */
export function boundedOptions(options: unknown, max = MAX_OPTIONS_BYTES): string {
  const json = JSON.stringify(options ?? {});
  const bytes = Buffer.byteLength(json);
  if (bytes <= max) return json;
  const raw = Buffer.from(json);
  for (let keep = Math.floor((max * 3) / 4); ; keep = Math.floor(keep / 2)) {
    // A character cut in two at the end is dropped.
    const start = raw
      .subarray(0, keep)
      .toString('utf8')
      .replace(/\uFFFD+$/, '');
    const cut = JSON.stringify({ cut: true, bytes, start });
    if (Buffer.byteLength(cut) <= max || keep === 0) return cut;
  }
}

/** Event of a checkpoint: entries older than the retention were deleted up to `deleted_through`. */
export const CHECKPOINT_EVENT = 'audit.checkpoint';
/** Event of a summary: refusals from one source past the rate, counted instead of written. */
export const REFUSALS_EVENT = 'audit.refusals';
/** Event of a remote session's start (`remote.<action>.start`). */
export const REMOTE_START = /^remote\.[a-z]+\.start$/;
/** A SQL LIKE pattern of a remote session's end events (`remote.<action>.end`). */
export const REMOTE_END_LIKE = 'remote.%.end';
