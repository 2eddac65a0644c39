/**
 * Text that people type and other people's terminals show: names, titles, descriptions. One rule
 * for every schema (broker routes, agent reports) and one escape for every client that prints
 * remote-controlled text on a terminal (the CLI).
 */
import { z } from 'zod';

/** C0 controls (NUL, ESC, CR, …), DEL and C1 controls (CSI U+009B among them): never in a name. */
export const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;
/** The same but tab and newline, which multi-line text (descriptions, custom values) may hold. */
export const CONTROL_CHARACTERS_BUT_TAB_NEWLINE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;

export const NO_CONTROL_MESSAGE = 'must not contain control characters';
export const NO_CONTROL_MULTILINE_MESSAGE = 'must not contain control characters other than tab and newline';

/** A one-line name, title or key: refuses C0, DEL and C1 control characters. */
export function singleLine(schema: z.ZodString = z.string()): z.ZodString {
  return schema.refine((v) => !CONTROL_CHARACTERS.test(v), NO_CONTROL_MESSAGE);
}

/** Free text over several lines: tab and newline allowed, every other control character refused. */
export function multiLine(schema: z.ZodString = z.string()): z.ZodString {
  return schema.refine((v) => !CONTROL_CHARACTERS_BUT_TAB_NEWLINE.test(v), NO_CONTROL_MULTILINE_MESSAGE);
}

// Control characters, and the bidirectional overrides and isolates that reorder what a terminal shows.
const UNSAFE_ON_TERMINAL = /[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

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
