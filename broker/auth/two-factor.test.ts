import { describe, expect, it } from 'vitest';
import { secondFactorApplies, twoFactorState } from './two-factor.js';

describe('second-factor policy', () => {
  it('follows the account policy without an override; the override wins both ways', () => {
    expect(secondFactorApplies(null, false)).toBe(false);
    expect(secondFactorApplies(null, true)).toBe(true);
    expect(secondFactorApplies(0, true)).toBe(false);
    expect(secondFactorApplies(1, false)).toBe(true);
  });

  it('offers email always and google once an authenticator app is confirmed', () => {
    expect(twoFactorState({ two_factor: null, totp_secret: null }, false)).toEqual({ enabled: false, providers: ['email'] });
    expect(twoFactorState({ two_factor: 1, totp_secret: 'JBSWY3DPEHPK3PXP' }, false)).toEqual({ enabled: true, providers: ['email', 'google'] });
  });
});
