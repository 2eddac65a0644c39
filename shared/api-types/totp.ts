/**
 * Setting up an authenticator app: the zod schema POST /profile/totp declares as its `response`, and
 * its type for the console (imported as a type only, so no zod reaches the browser bundle).
 */
import { z } from 'zod';

/** POST /profile/totp: a new secret to scan, in effect once POST /profile/totp/confirm proves a code of the app. */
export const totpEnrolment = z.object({
  secret: z.string().describe('base32'),
  otpauth_url: z.string(),
  qr_data_url: z.string().describe('data:image/png;base64,...'),
});
export type TotpEnrolment = z.infer<typeof totpEnrolment>;
