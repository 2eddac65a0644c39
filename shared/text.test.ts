import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { escapeForTerminal, hasLoneSurrogate, multiLine, replaceLoneSurrogates, singleLine } from './text.js';

describe('shared text rules', () => {
  it('refuses C0, DEL and C1 control characters in one-line names', () => {
    const name = singleLine(z.string().max(20));
    expect(name.safeParse('edge-1 (lab) ✓').success).toBe(true);
    for (const bad of ['a\u001b[2Jb', 'nul\u0000', 'tab\there', 'line\nbreak', 'del\u007f', 'csi\u009b31m', 'c1\u0085']) {
      expect(name.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
    }
    expect(name.safeParse('x'.repeat(21)).success).toBe(false);
  });

  it('allows tab and newline, and nothing else, in multi-line text', () => {
    const text = multiLine();
    expect(text.safeParse('first line\n\tsecond').success).toBe(true);
    for (const bad of ['\u001b]0;title\u0007', 'cr\r', 'nul\u0000', 'csi\u009b']) expect(text.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
  });

  it('refuses bidirectional formatting characters in names and in multi-line text alike', () => {
    const name = singleLine();
    const text = multiLine();
    for (const bad of ['evil\u202egnp.exe', 'a\u202ab', 'a\u202db', 'iso\u2066x\u2069', 'x\u2068', 'lrm\u200e', 'rlm\u200f', 'alm\u061c']) {
      expect(name.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
      expect(text.safeParse(bad).success, JSON.stringify(bad)).toBe(false);
      expect(name.safeParse(bad).error?.issues[0]?.message).toMatch(/bidirectional formatting characters/);
    }
    // letters of right-to-left scripts are text, not formatting
    expect(name.safeParse('מכשיר 1 جهاز').success).toBe(true);
    expect(text.safeParse('שורה\nسطر').success).toBe(true);
  });

  it('escapes control and reordering characters for a terminal, leaving other text as it is', () => {
    expect(escapeForTerminal('\u001b[31mred\u001b[0m')).toBe('\\x1b[31mred\\x1b[0m');
    expect(escapeForTerminal('a\u0000b\r\n\t\u009b\u007f')).toBe('a\\x00b\\r\\n\\t\\x9b\\x7f');
    expect(escapeForTerminal('evil\u202egnp.exe')).toBe('evil\\u202egnp.exe');
    expect(escapeForTerminal('alm\u061c')).toBe('alm\\u061c');
    expect(escapeForTerminal('Gerät Ünïcode ✓')).toBe('Gerät Ünïcode ✓');
  });

  it('finds and replaces lone UTF-16 surrogates, leaving pairs whole, the same on every call', () => {
    for (const lone of ['\ud800', 'a\udfffb', '\udc00\ud83d']) {
      // Twice: a pattern's state from one call never changes the next answer.
      expect(hasLoneSurrogate(lone), JSON.stringify(lone)).toBe(true);
      expect(hasLoneSurrogate(lone), JSON.stringify(lone)).toBe(true);
    }
    expect(hasLoneSurrogate('emoji 😀 Gerät')).toBe(false);
    expect(replaceLoneSurrogates('a\ud800b\udc00c')).toBe('a\ufffdb\ufffdc');
    expect(replaceLoneSurrogates('\udc00\ud83d😀')).toBe('\ufffd\ufffd😀');
    expect(replaceLoneSurrogates('😀 ok')).toBe('😀 ok');
    expect(Buffer.from(replaceLoneSurrogates('x\ud800')).toString()).toBe('x\ufffd'); // what UTF-8 keeps
  });
});
