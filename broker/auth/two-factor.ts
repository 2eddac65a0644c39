import type { SecondFactorProvider, TwoFactorState } from '../../shared/api-types.js';

/** Settings key of the account-wide policy, value `{"enabled": bool}`; absent means off. */
export const TWO_FACTOR_POLICY_KEY = 'two_factor_policy';

export interface TwoFactorPolicy {
  enabled: boolean;
}

/** `users.two_factor`: null follows the account policy, 0/1 overrides it for this user. */
export function secondFactorApplies(override: number | null, policyEnabled: boolean): boolean {
  return override === null ? policyEnabled : override === 1;
}

export function providersOf(user: { totp_secret: string | null }): SecondFactorProvider[] {
  return user.totp_secret ? ['email', 'google'] : ['email'];
}

export function twoFactorState(user: { two_factor: number | null; totp_secret: string | null }, policyEnabled: boolean): TwoFactorState {
  return { enabled: secondFactorApplies(user.two_factor, policyEnabled), providers: providersOf(user) };
}
