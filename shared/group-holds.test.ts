import { describe, expect, it } from 'vitest';
import { holdsSentence } from './group-holds.js';

describe('holdsSentence', () => {
  it('counts devices and groups, singular and plural, leaving out what is not there', () => {
    expect(holdsSentence({ devices: 3, groups: 1 })).toBe('holds 3 devices and 1 group');
    expect(holdsSentence({ devices: 1, groups: 0 })).toBe('holds 1 device');
    expect(holdsSentence({ devices: 0, groups: 2 })).toBe('holds 2 groups');
    expect(holdsSentence({ devices: 0, groups: 0 })).toBe('holds nothing');
  });
});
