import { describe, expect, it } from 'vitest';
import { BAR_KEYS, withCtrl } from './keybar.js';

const key = (id: string) => BAR_KEYS.find((k) => k.id === id)!;

describe('the console key bar', () => {
  it('sends the bytes a terminal sends for each key', () => {
    expect(key('esc').bytes(false)).toBe('\x1b');
    expect(key('tab').bytes(false)).toBe('\t');
    expect(key('ctrl-c').bytes(false)).toBe('\x03');
    expect(['up', 'down', 'right', 'left'].map((id) => key(id).bytes(false))).toEqual(['\x1b[A', '\x1b[B', '\x1b[C', '\x1b[D']);
    // Full-screen programs (vi, less) switch the cursor keys to application mode.
    expect(['up', 'down', 'right', 'left'].map((id) => key(id).bytes(true))).toEqual(['\x1bOA', '\x1bOB', '\x1bOC', '\x1bOD']);
  });

  it('Ctrl turns the next key into its control code', () => {
    expect(withCtrl('c')).toBe('\x03');
    expect(withCtrl('C')).toBe('\x03');
    expect(withCtrl('d')).toBe('\x04');
    expect(withCtrl('a')).toBe('\x01');
    expect(withCtrl('[')).toBe('\x1b');
    expect(withCtrl('_')).toBe('\x1f');
    expect(withCtrl(' ')).toBe('\x00');
    expect(withCtrl('?')).toBe('\x7f');
    expect(withCtrl('1')).toBe('1');
    expect(withCtrl('\x1b[A')).toBe('\x1b[A');
    expect(withCtrl('ls')).toBe('ls');
  });
});
