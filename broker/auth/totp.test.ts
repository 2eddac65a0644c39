import { Secret, TOTP } from 'otpauth';
import { describe, expect, it } from 'vitest';
import { newTotpSecret, totpEnrolment, totpStep } from './totp.js';

const codeAt = (secret: string, timestamp: number) => new TOTP({ secret: Secret.fromBase32(secret) }).generate({ timestamp });

describe('TOTP (RFC 6238)', () => {
  it('matches the RFC 6238 SHA-1 test vector', () => {
    // RFC 6238 appendix B: secret "12345678901234567890", T = 59 s → 94287082 (8 digits); 6 digits: 287082.
    const secret = new Secret({ buffer: new TextEncoder().encode('12345678901234567890').buffer as ArrayBuffer }).base32;
    expect(totpStep(secret, '287082', 59_000)).toBe(1);
  });

  it('accepts the codes of the previous, current and next step and names their step', () => {
    const secret = newTotpSecret();
    const now = 1_700_000_000_000;
    const step = Math.floor(now / 30_000);
    expect(totpStep(secret, codeAt(secret, now), now)).toBe(step);
    expect(totpStep(secret, codeAt(secret, now - 30_000), now)).toBe(step - 1);
    expect(totpStep(secret, codeAt(secret, now + 30_000), now)).toBe(step + 1);
  });

  it('refuses codes two steps away, malformed codes and codes of another secret', () => {
    const secret = newTotpSecret();
    const now = 1_700_000_000_000;
    const far = codeAt(secret, now + 60_000);
    if (far !== codeAt(secret, now) && far !== codeAt(secret, now - 30_000) && far !== codeAt(secret, now + 30_000)) {
      expect(totpStep(secret, far, now)).toBeNull();
    }
    expect(totpStep(secret, '12345', now)).toBeNull();
    expect(totpStep(secret, 'abcdef', now)).toBeNull();
    const other = newTotpSecret();
    const foreign = codeAt(other, now);
    if (![-1, 0, 1].some((d) => codeAt(secret, now + d * 30_000) === foreign)) expect(totpStep(secret, foreign, now)).toBeNull();
  });

  it('makes 160-bit secrets and an enrolment with an otpauth URL and a PNG QR code', async () => {
    const secret = newTotpSecret();
    expect(secret).toMatch(/^[A-Z2-7]{32}$/);
    expect(newTotpSecret()).not.toBe(secret);
    const e = await totpEnrolment(secret, 'ada@example.com');
    expect(e.otpauth_url).toMatch(/^otpauth:\/\/totp\/Fleet:ada%40example\.com\?/);
    expect(e.otpauth_url).toContain(`secret=${secret}`);
    expect(e.qr_data_url.startsWith('data:image/png;base64,')).toBe(true);
  });
});
