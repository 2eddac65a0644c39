/**
 * qbee's two kinds of placeholders: `$(key)` in bundle values (usernames, paths, commands,
 * template parameter values) resolved from the parameters bundle and the device's attributes, and
 * `{{ key }}` in template files rendered with the file set's parameters.
 *
 * A substituted value is data, never code. In a shell command it is not pasted into the script at
 * all: each `$(key)` becomes a reference to an environment variable that holds the value, so the
 * shell expands it once and never reads it as syntax (see resolveCommand). Elsewhere (names, paths,
 * package names) a value holding a control character is refused, and each use checks its own
 * grammar. A `$(key)` whose key is unknown fails the bundle (or the item) with an error naming it:
 * it is never left as written, since `sh` would run it as a command substitution.
 */
import os from 'node:os';
import { CONTROL_CHARACTERS } from '../../shared/text.js';

/** A `$(key)` that cannot be resolved, or a value that may not be used where it is asked for. */
export class ParameterError extends Error {
  constructor(
    message: string,
    /** the keys concerned */
    readonly keys: string[],
  ) {
    super(message);
    this.name = 'ParameterError';
  }
}

/** Values the agent knows itself, as qbee names them. */
function systemParameter(key: string): string | undefined {
  if (key === 'sys.host') return os.hostname();
  if (key === 'sys.arch') return os.arch();
  if (key === 'sys.os') return os.platform();
  return undefined;
}

function lookup(key: string, params: Record<string, string>): string | undefined {
  return Object.prototype.hasOwnProperty.call(params, key) ? params[key] : systemParameter(key);
}

/**
 * What reads as a parameter key when nothing by that name exists: no white space, quotes,
 * parentheses, `$`, backquote or backslash. `$(cat "$f")` is shell syntax the configuration wrote
 * and stays as it is; `$(location)` with no such parameter is an error, never a command to run.
 */
const KEY_SHAPED = /^[^\s'"`$\\()]+$/;

type Piece = { text: string } | { key: string; value: string };

/** Splits a value into text and resolved `$(key)`s; throws ParameterError for an unknown key. */
function pieces(value: string, params: Record<string, string>): Piece[] {
  const out: Piece[] = [];
  const unknown: string[] = [];
  let text = '';
  let i = 0;
  while (i < value.length) {
    const open = value.indexOf('$(', i);
    if (open < 0) break;
    const close = value.indexOf(')', open + 2);
    if (close < 0) break;
    text += value.slice(i, open);
    const key = value.slice(open + 2, close);
    const known = key.includes('(') ? undefined : lookup(key, params);
    if (known !== undefined) {
      if (text) out.push({ text });
      text = '';
      out.push({ key, value: known });
      i = close + 1;
    } else if (key !== '' && KEY_SHAPED.test(key)) {
      if (!unknown.includes(key)) unknown.push(key);
      i = close + 1;
    } else {
      // shell syntax, not a placeholder: kept, and what follows `$(` is looked at again
      text += '$(';
      i = open + 2;
    }
  }
  text += value.slice(i);
  if (text) out.push({ text });
  if (unknown.length > 0) {
    const list = unknown.map((k) => `$(${k})`).join(', ');
    throw new ParameterError(`unknown parameter${unknown.length > 1 ? 's' : ''} ${list}: no parameter, secret or device attribute has this key`, unknown);
  }
  return out;
}

/**
 * A value that is not a shell command (a user name, a path, a package name, an image): every
 * `$(key)` replaced by its value. Throws ParameterError for an unknown key, and for a value holding
 * a control character (a newline would start another line of whatever file the value ends up in).
 */
export function resolveParameters(value: string, params: Record<string, string>): string {
  return pieces(value, params)
    .map((p) => {
      if ('text' in p) return p.text;
      if (CONTROL_CHARACTERS.test(p.value))
        throw new ParameterError(`parameter $(${p.key}) holds a control character (a newline, NUL, …): not used here`, [p.key]);
      return p.value;
    })
    .join('');
}

/**
 * A device path with `$(key)`s (a destination, a configuration file's location): as resolveParameters,
 * and no value may hold a `..` segment, so a value cannot lead the path out of where the configuration
 * put it.
 */
export function resolvePath(value: string, params: Record<string, string>): string {
  for (const p of pieces(value, params)) {
    if ('key' in p && p.value.split('/').includes('..'))
      throw new ParameterError(`parameter $(${p.key}) holds a ".." path segment: not used in a path`, [p.key]);
  }
  return resolveParameters(value, params);
}

/**
 * A template parameter's value (the `{key, value}` pairs of a file set or a software item), whose
 * `$(key)`s resolve to parameters of the configuration: multi-line values (a certificate, a key)
 * are kept. Device attributes never hold a control character (the engine drops those that do).
 * Throws ParameterError for an unknown key.
 */
export function resolveTemplateValue(value: string, params: Record<string, string>): string {
  return pieces(value, params)
    .map((p) => ('text' in p ? p.text : p.value))
    .join('');
}

/** Prefix of the environment variables that carry a command's substituted values. */
export const COMMAND_PARAMETER_PREFIX = 'FLEET_PARAM_';

/**
 * A shell command (`sh -c`) with its `$(key)`s: each becomes a reference to an environment
 * variable holding the value, quoted for where it stands — `"${FLEET_PARAM_1}"` outside quotes
 * (one word, never split or globbed), `${FLEET_PARAM_1}` inside double quotes, and `'"${…}"'`
 * inside single quotes. The value itself never appears in the script, so no quote, `;`, `$(…)`,
 * backquote or newline in it is ever read as shell syntax, whatever the quoting around it. Throws
 * ParameterError for an unknown key and for a value holding NUL (which no environment can carry).
 */
export function resolveCommand(command: string, params: Record<string, string>): { script: string; env: Record<string, string> } {
  const env: Record<string, string> = {};
  const names = new Map<string, string>();
  let script = '';
  let quote: "'" | '"' | null = null;
  for (const p of pieces(command, params)) {
    if ('text' in p) {
      script += p.text;
      quote = quoteAfter(p.text, quote);
      continue;
    }
    if (p.value.includes('\0')) throw new ParameterError(`parameter $(${p.key}) holds a NUL character: not used in a command`, [p.key]);
    let name = names.get(p.key);
    if (!name) {
      name = `${COMMAND_PARAMETER_PREFIX}${names.size + 1}`;
      names.set(p.key, name);
      env[name] = p.value;
    }
    script += quote === '"' ? `\${${name}}` : quote === "'" ? `'"\${${name}}"'` : `"\${${name}}"`;
  }
  return { script, env };
}

/**
 * The quoting in force after `text`, starting in `quote`: single quotes end only at the next `'`,
 * double quotes at an unescaped `"`, a backslash outside single quotes escapes one character.
 * (Comments and here-documents are not followed: a wrong guess changes how a value is quoted,
 * never whether it is read as code, since the value is not in the script.)
 */
function quoteAfter(text: string, quote: "'" | '"' | null): "'" | '"' | null {
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quote === "'") {
      if (c === "'") quote = null;
    } else if (c === '\\') i++;
    else if (quote === '"') {
      if (c === '"') quote = null;
    } else if (c === "'" || c === '"') quote = c;
  }
  return quote;
}

/**
 * Renders `{{ key }}` tags (spaces inside the braces ignored) with `params`; a tag with an unknown
 * key, or a `{{` without its `}}` on the same line, is copied unchanged (as qbee does). Line ends
 * are kept. A value is inserted once: nothing in it is read as a tag.
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
