import { describe, expect, it } from 'vitest';
import { muxPair } from '../test/support/mux-pair.js';
import { AgentRefusal, isAccessRefusal, isAgentRefusalCode, refusalCodeOf } from './codes.js';

describe('agent refusal codes', () => {
  it('only the grant-related refusals are access refusals', () => {
    expect(isAccessRefusal('path_outside_grant')).toBe(true);
    expect(isAccessRefusal('symlink_escape')).toBe(true);
    expect(isAccessRefusal('not_found')).toBe(false);
    expect(isAccessRefusal('io_error')).toBe(false);
    expect(isAccessRefusal(undefined)).toBe(false);
  });

  it('reads a known code off an error, and ignores others (errno codes, made-up codes)', () => {
    expect(refusalCodeOf(new AgentRefusal('symlink_escape', 'any sentence at all'))).toBe('symlink_escape');
    expect(refusalCodeOf(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBeUndefined();
    expect(refusalCodeOf(Object.assign(new Error('x'), { code: 'be_admin' }))).toBeUndefined();
    expect(refusalCodeOf(new Error('Not allowed on this device: a sentence is not a code'))).toBeUndefined();
    expect(refusalCodeOf(null)).toBeUndefined();
    expect(isAgentRefusalCode('__proto__')).toBe(false);
  });
});

describe('a refusal over the mux', () => {
  it('arrives with its code whatever its sentence says', async () => {
    const { broker, close } = await muxPair(async () => {
      throw new AgentRefusal('path_outside_grant', 'A sentence reworded for people.');
    });
    try {
      const err = await broker.open('copy', { direction: 'upload', path: '/x' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AgentRefusal);
      expect(refusalCodeOf(err)).toBe('path_outside_grant');
      expect((err as Error).message).toBe('A sentence reworded for people.');
    } finally {
      close();
    }
  });

  it('a refusal without a code (or with an unknown one) stays a plain error', async () => {
    const { broker, close } = await muxPair(async () => {
      throw Object.assign(new Error('Not allowed on this device: but no code'), { code: 'made_up' });
    });
    try {
      const err = await broker.open('copy', { direction: 'upload', path: '/x' }).catch((e: unknown) => e);
      expect(err).not.toBeInstanceOf(AgentRefusal);
      expect(refusalCodeOf(err)).toBeUndefined();
    } finally {
      close();
    }
  });
});
