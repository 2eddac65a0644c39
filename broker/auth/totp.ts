import { Secret, TOTP } from 'otpauth';
import QRCode from 'qrcode';

/** RFC 6238 as authenticator apps expect it: SHA-1, 6 digits, 30 s steps. */
const PERIOD = 30;
const DIGITS = 6;
/** Codes of the previous and next step are accepted too (clock drift, typing time). */
const WINDOW = 1;
const ISSUER = 'Fleet';

function totpOf(secretBase32: string, account = ''): TOTP {
  return new TOTP({ issuer: ISSUER, label: account, algorithm: 'SHA1', digits: DIGITS, period: PERIOD, secret: Secret.fromBase32(secretBase32) });
}

/** A new random secret (160 bits, the size RFC 4226 recommends), base32 as apps show it. */
export function newTotpSecret(): string {
  return new Secret({ size: 20 }).base32;
}

export interface TotpEnrolment {
  secret: string;
  otpauth_url: string;
  /** PNG data URL of the otpauth URL, for scanning with an authenticator app */
  qr_data_url: string;
}

export async function totpEnrolment(secretBase32: string, account: string): Promise<TotpEnrolment> {
  const url = totpOf(secretBase32, account).toString();
  return { secret: secretBase32, otpauth_url: url, qr_data_url: await QRCode.toDataURL(url, { errorCorrectionLevel: 'M', margin: 2, width: 240 }) };
}

/**
 * The time step a code belongs to, when it is valid now (±1 step), else null. Callers refuse a
 * step at or below the last accepted one, so a code cannot be replayed within its window.
 */
export function totpStep(secretBase32: string, code: string, now = Date.now()): number | null {
  if (!/^\d{6}$/.test(code)) return null;
  const totp = totpOf(secretBase32);
  const delta = totp.validate({ token: code, timestamp: now, window: WINDOW });
  return delta === null ? null : totp.counter({ timestamp: now }) + delta;
}
