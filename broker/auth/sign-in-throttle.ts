import { tooManyAttempts, RateLimiter, type LimitStore } from './ratelimit.js';

const MINUTE = 60_000;

/** Where the account last signed in successfully, if it ever did. */
export type UsualAddressLookup = (account: string) => Promise<string | undefined>;

/**
 * Wrong passwords per account, counted so that a stranger cannot lock the owner out:
 * - per (account, address): 10 attempts in 15 minutes, a correct password clears the count. Failures
 *   from address X against account A block only A from X (and X, through the per-address limit).
 * - per account, across addresses: 100 attempts in 15 minutes bound guessing from many addresses. Past
 *   it, only the address of the account's last successful sign-in is still let through (still under
 *   its own per-(account, address) limit), so an attacker elsewhere cannot use it to lock the owner
 *   out of their usual place. No delays, only counts.
 * Counting happens before the password is checked, so parallel attempts stay within the limits.
 * The counts live in the database: every broker on it counts the same attempts.
 */
export class SignInThrottle {
  readonly perAccountAddress: RateLimiter;
  readonly perAccount: RateLimiter;

  constructor(
    store: LimitStore,
    private readonly usualAddress: UsualAddressLookup,
  ) {
    this.perAccountAddress = new RateLimiter(store, 'signin-pair', 10, 15 * MINUTE);
    this.perAccount = new RateLimiter(store, 'signin-account', 100, 15 * MINUTE);
  }

  /** Counts an attempt on `account` (normalised email) from `address`; throws 429 when refused. */
  async admit(account: string, address: string, now = Date.now()): Promise<void> {
    const pairRetry = await this.perAccountAddress.count(pairKey(account, address), now);
    if (pairRetry > 0) throw tooManyAttempts(pairRetry);
    const accountRetry = await this.perAccount.count(accountKey(account), now);
    if (accountRetry > 0 && address !== (await this.usualAddress(account))) throw tooManyAttempts(accountRetry);
  }

  /** A correct password: the pair starts afresh, and the attempt does not count against the account. */
  async succeeded(account: string, address: string, now = Date.now()): Promise<void> {
    await this.perAccountAddress.reset(pairKey(account, address));
    await this.perAccount.release(accountKey(account), now);
  }

  /** The password was set anew through a link opened from `address`: earlier failures no longer count there. */
  async cleared(account: string, address: string): Promise<void> {
    await this.perAccount.reset(accountKey(account));
    await this.perAccountAddress.reset(pairKey(account, address));
  }
}

const accountKey = (account: string) => `account:${account}`;
/** The account is an email (no newline); the separator cannot occur in it. */
const pairKey = (account: string, address: string) => `pair:${account}\n${address}`;
