import pino, { type Logger } from 'pino';

/** Structured logs. Authorization headers, cookies, passwords and codes never reach them. */
export function createLogger(level: string): Logger {
  return pino({
    level,
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', '*.password', '*.code', '*.token', '*.secret', 'password', 'token', 'code'],
      censor: '[redacted]',
    },
  });
}
