/**
 * Text that people type and other people's terminals show: names, titles, descriptions. One rule
 * for every schema (broker routes, agent reports) and one escape for every client that prints
 * remote-controlled text on a terminal (the CLI).
 */
import { z } from 'zod';

/** C0 controls (NUL, ESC, CR, …), DEL and C1 controls (CSI U+009B among them): never in a name. */
export const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;
/** The same but tab and newline, which multi-line text (descriptions) may hold. */
export const CONTROL_CHARACTERS_BUT_TAB_NEWLINE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;
/**
 * Bidirectional formatting characters: the embeddings and overrides U+202A–U+202E, the isolates
 * U+2066–U+2069, the marks U+200E, U+200F and U+061C. They reorder what a screen or terminal shows
 * (`evil\u202egnp.exe` reads as `evilexe.png`), so a name, a message or an audit entry could show
 * other text than it holds. Never in text that people type for other people to read.
 */
export const BIDI_CHARACTERS = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

export const NO_CONTROL_MESSAGE = 'must not contain control characters or bidirectional formatting characters';
export const NO_CONTROL_MULTILINE_MESSAGE = 'must not contain control characters other than tab and newline, nor bidirectional formatting characters';

/** True when `text` is one line of plain text: no control character (C0, DEL, C1) and no bidi formatting character. */
export function isSingleLine(text: string): boolean {
  return !CONTROL_CHARACTERS.test(text) && !BIDI_CHARACTERS.test(text);
}

/** True when `text` is plain text over several lines: tab and newline allowed, other control and bidi characters not. */
export function isMultiLine(text: string): boolean {
  return !CONTROL_CHARACTERS_BUT_TAB_NEWLINE.test(text) && !BIDI_CHARACTERS.test(text);
}

/** A one-line name, title, key or message: refuses C0, DEL and C1 control characters and bidi formatting characters. */
export function singleLine(schema: z.ZodString = z.string()): z.ZodString {
  return schema.refine(isSingleLine, NO_CONTROL_MESSAGE);
}

/** Free text over several lines: tab and newline allowed, every other control character and bidi formatting character refused. */
export function multiLine(schema: z.ZodString = z.string()): z.ZodString {
  return schema.refine(isMultiLine, NO_CONTROL_MULTILINE_MESSAGE);
}

/** A UTF-16 surrogate that is not half of a pair (with the `u` flag a pair is one code point, which this does not match). */
const LONE_SURROGATE = /\p{Cs}/u;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'gu');

/**
 * True when `text` holds a lone UTF-16 surrogate (JSON's `\ud800` escape makes one): UTF-8 cannot
 * hold it, so it is not text that can be stored or sent as it is.
 */
export function hasLoneSurrogate(text: string): boolean {
  return LONE_SURROGATE.test(text);
}

/** `text` as UTF-8 keeps it: every lone UTF-16 surrogate becomes U+FFFD, pairs stay. */
export function replaceLoneSurrogates(text: string): string {
  return text.replace(LONE_SURROGATES, '\ufffd');
}

// Control characters, and the bidirectional overrides and isolates that reorder what a terminal shows.
const UNSAFE_ON_TERMINAL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * Text from a remote party (device names, host names, broker error messages) made safe to print on
 * a terminal: every control or reordering character becomes a visible escape (`\x1b`, `\u202e`),
 * so no escape sequence reaches the terminal and nothing hides what follows it.
 */
export function escapeForTerminal(text: string): string {
  return text.replace(UNSAFE_ON_TERMINAL, (c) => {
    if (c === '\t') return '\\t';
    if (c === '\n') return '\\n';
    if (c === '\r') return '\\r';
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
