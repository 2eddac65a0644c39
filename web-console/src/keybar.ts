/**
 * The console's key bar for touch screens: the keys a phone keyboard lacks, as the bytes a
 * terminal sends for them. Ctrl is a sticky modifier: it applies to the next key, from the bar or
 * from the on-screen keyboard, then lets go.
 */
export interface BarKey {
  id: string;
  label: string;
  /** what it sends; arrows depend on the terminal's cursor-key mode */
  bytes: (applicationCursor: boolean) => string;
  title: string;
}

const arrow = (final: string) => (applicationCursor: boolean) => (applicationCursor ? `\x1bO${final}` : `\x1b[${final}`);

export const BAR_KEYS: readonly BarKey[] = [
  { id: 'esc', label: 'Esc', bytes: () => '\x1b', title: 'Escape' },
  { id: 'tab', label: 'Tab', bytes: () => '\t', title: 'Tab' },
  { id: 'ctrl-c', label: '^C', bytes: () => '\x03', title: 'Ctrl-C: interrupt' },
  { id: 'left', label: '←', bytes: arrow('D'), title: 'Left' },
  { id: 'up', label: '↑', bytes: arrow('A'), title: 'Up' },
  { id: 'down', label: '↓', bytes: arrow('B'), title: 'Down' },
  { id: 'right', label: '→', bytes: arrow('C'), title: 'Right' },
];

/**
 * What Ctrl plus `data` sends: a letter or one of @[\]^_ becomes its control code (Ctrl-A is
 * 0x01), space is NUL, ? is DEL; anything else (an arrow, a word) goes unchanged.
 */
export function withCtrl(data: string): string {
  if (data.length !== 1) return data;
  const c = data.toUpperCase().charCodeAt(0);
  if (c >= 0x40 && c <= 0x5f) return String.fromCharCode(c & 0x1f);
  if (data === ' ') return '\x00';
  if (data === '?') return '\x7f';
  return data;
}

/** Whether the key bar is shown: on touch screens, where there is no Esc, Tab, Ctrl or arrows. */
export function isTouchScreen(): boolean {
  return typeof window !== 'undefined' && (window.matchMedia?.('(pointer: coarse)').matches || navigator.maxTouchPoints > 0);
}
