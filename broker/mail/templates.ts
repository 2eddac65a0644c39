import type { Mail } from './service.js';

/**
 * The mails the broker sends. Plain text: they hold links and codes a person types or clicks,
 * and nothing else. Codes and links are secrets: never log a mail's text.
 */
export interface Recipient {
  email: string;
  fname: string;
}

const PRODUCT = 'Fleet';

function greeting(to: Recipient): string {
  return to.fname ? `Hello ${to.fname},` : 'Hello,';
}

/** A new user; `setPasswordLink` when they must choose a password before signing in. */
export function welcomeMail(to: Recipient, setPasswordLink?: string): Mail {
  const body = setPasswordLink
    ? [
        `an account was created for you (${to.email}).`,
        '',
        'Choose your password with this link, then sign in. The link works once and expires in 72 hours:',
        '',
        setPasswordLink,
        '',
        'When it has expired, use "Forgot password" on the sign-in page.',
      ]
    : [`an account was created for you (${to.email}). Sign in with the password you were given.`];
  return { to: to.email, subject: `Welcome to ${PRODUCT}`, text: [greeting(to), '', ...body, ''].join('\n') };
}

/** A reset link, asked for by the user ("Forgot password") or sent by an administrator. */
export function passwordResetMail(to: Recipient, link: string, requestedBy: 'user' | 'administrator' = 'user'): Mail {
  return {
    to: to.email,
    subject: `Reset your ${PRODUCT} password`,
    text: [
      greeting(to),
      '',
      `${requestedBy === 'administrator' ? 'an administrator' : 'someone (hopefully you)'} asked to reset your password. Choose a new one with this link; it works once and expires in 1 hour:`,
      '',
      link,
      '',
      'If you did not ask for this, ignore this mail: your password stays as it is.',
      '',
    ].join('\n'),
  };
}

export function signInCodeMail(to: Recipient, code: string): Mail {
  return {
    to: to.email,
    subject: `Your ${PRODUCT} sign-in code`,
    text: [
      greeting(to),
      '',
      `your sign-in code is: ${code}`,
      '',
      'It expires in 5 minutes. If you did not try to sign in, change your password: someone knows it.',
      '',
    ].join('\n'),
  };
}
