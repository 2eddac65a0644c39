/**
 * qbee's two kinds of placeholders: `$(key)` in bundle values (usernames, paths, commands,
 * template parameter values) resolved from the parameters bundle, and `{{ key }}` in template
 * files rendered with the file set's parameters. An unknown key is left as written.
 */
import os from 'node:os';

/** Values the agent knows itself, as qbee names them. */
function systemParameter(key: string): string | undefined {
  if (key === 'sys.host') return os.hostname();
  if (key === 'sys.arch') return os.arch();
  if (key === 'sys.os') return os.platform();
  return undefined;
}

/** Replaces every `$(key)` whose key is known; unknown and unclosed ones stay as they are. */
export function resolveParameters(value: string, params: Record<string, string>): string {
  let out = '';
  let i = 0;
  while (i < value.length) {
    const open = value.indexOf('$(', i);
    if (open < 0) break;
    const close = value.indexOf(')', open + 2);
    if (close < 0) break;
    out += value.slice(i, open);
    const key = value.slice(open + 2, close);
    const known = Object.prototype.hasOwnProperty.call(params, key) ? params[key] : systemParameter(key);
    out += known ?? value.slice(open, close + 1);
    i = close + 1;
  }
  return out + value.slice(i);
}

/**
 * Renders `{{ key }}` tags (spaces inside the braces ignored) with `params`; a tag with an unknown
 * key, or a `{{` without its `}}` on the same line, is copied unchanged. Line ends are kept.
 */
export function renderTemplate(text: string, params: Record<string, string>): string {
  return text
    .split(/(?<=\n)/)
    .map((line) => renderLine(line, params))
    .join('');
}

function renderLine(line: string, params: Record<string, string>): string {
  let out = '';
  let rest = line;
  for (;;) {
    const open = rest.indexOf('{{');
    if (open < 0) return out + rest;
    out += rest.slice(0, open);
    rest = rest.slice(open);
    const close = rest.indexOf('}}');
    if (close < 0) return out + rest;
    const key = rest.slice(2, close).trim();
    out += Object.prototype.hasOwnProperty.call(params, key) ? params[key] : rest.slice(0, close + 2);
    rest = rest.slice(close + 2);
  }
}
