/**
 * Timestamps as ISO 8601 (UTC), for the agent's reports and state files.
 *
 * V8's `Date.prototype.toISOString` asks ICU for the local time zone (its offset and its display
 * name) although the string it returns is in UTC: the first call loads ICU's zone data and names,
 * about 1 MiB of the node binary's pages and of malloc that the agent then keeps in RSS for good
 * (docs/performance.md, "The agent idle: fourth round"). The UTC fields (`getUTCFullYear` …) need
 * no time zone.
 */

const pad = (n: number, width: number) => String(n).padStart(width, '0');

/**
 * `new Date(ms).toISOString()`, character for character, without the time-zone lookup. Years
 * outside 0–9999 (written with a sign and six digits) and invalid times (RangeError) are left to
 * toISOString itself.
 */
export function isoTime(ms: number = Date.now()): string {
  const date = new Date(ms);
  const year = date.getUTCFullYear();
  if (!(year >= 0 && year <= 9999)) return date.toISOString();
  return (
    `${pad(year, 4)}-${pad(date.getUTCMonth() + 1, 2)}-${pad(date.getUTCDate(), 2)}` +
    `T${pad(date.getUTCHours(), 2)}:${pad(date.getUTCMinutes(), 2)}:${pad(date.getUTCSeconds(), 2)}.${pad(date.getUTCMilliseconds(), 3)}Z`
  );
}
