/**
 * What the broker sends an agent as parameters from a device's custom attributes: one-line values
 * only, even from a row stored before the API refused others (or edited by hand).
 */
import { describe, expect, it } from 'vitest';
import { parameterAttributes } from './rendering.js';

describe('custom attributes sent as parameters', () => {
  it('leaves out a value or key holding a newline, a control or a bidi character, and names it', () => {
    const { attributes, dropped } = parameterAttributes({
      location: 'berlin; id > /x/INJECTED; echo',
      svc: 'app\nALL ALL=(ALL) NOPASSWD: ALL',
      cr: 'a\rb',
      nul: 'a\u0000b',
      tab: 'a\tb',
      bidi: 'a\u202eb',
      'key\nline': 'v',
      city: 'Zürich',
    });
    expect(attributes).toEqual({ location: 'berlin; id > /x/INJECTED; echo', city: 'Zürich' });
    expect(dropped).toEqual(['svc', 'cr', 'nul', 'tab', 'bidi', 'key\nline']);
  });
});
