import fs from 'node:fs/promises';
import path from 'node:path';
import nodemailer, { type Transporter } from 'nodemailer';
import type { Logger } from 'pino';
import type { Config } from '../environment.js';
import type { Store } from '../db/database.js';

export interface Mail {
  to: string;
  subject: string;
  text: string;
}

/**
 * Outgoing mail: through SMTP when SMTP_URL is set, otherwise written to `<DATA_DIR>/outbox/` as
 * .eml files (and logged without their content, which may hold codes or links).
 *
 * SMTP_URL takes nodemailer's URL options as query parameters, e.g. `smtp://host:25?ignoreTLS=true`
 * for a relay without STARTTLS, or `smtps://user:pass@host:465` for implicit TLS.
 */
export class MailService {
  private readonly transport: Transporter;

  constructor(
    private readonly config: Config,
    private readonly logger: Logger,
    /** Mail asked for inside a database transaction leaves once it commits: never for a change rolled back. */
    private readonly transactions?: Pick<Store, 'afterCommit' | 'inTransaction'>,
  ) {
    this.transport = config.smtpUrl
      ? nodemailer.createTransport({
          url: config.smtpUrl,
          // A dead relay must not hold a sign-in for minutes (nodemailer waits 2 min by default).
          connectionTimeout: 10_000,
          greetingTimeout: 10_000,
          socketTimeout: 30_000,
        } as Parameters<typeof nodemailer.createTransport>[0])
      : nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'unix' });
  }

  /**
   * Sends one mail; throws when the relay refuses it or cannot be reached. Says where it goes: to the
   * relay, or to the outbox folder when no relay is configured. Inside a transaction the mail waits
   * for the commit (a slow relay would hold the transaction) and a failure is only logged.
   */
  async send(mail: Mail): Promise<'sent' | 'outbox'> {
    const transactions = this.transactions;
    if (transactions?.inTransaction()) {
      transactions.afterCommit(() => this.sendInBackground(mail));
      return this.config.smtpUrl ? 'sent' : 'outbox';
    }
    return this.deliver(mail);
  }

  private async deliver(mail: Mail): Promise<'sent' | 'outbox'> {
    const info = await this.transport.sendMail({ from: this.config.mailFrom, ...mail });
    if (this.config.smtpUrl) {
      this.logger.info({ to: mail.to, subject: mail.subject, messageId: info.messageId }, 'mail sent');
      return 'sent';
    }
    const dir = path.join(this.config.dataDir, 'outbox');
    await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    const file = path.join(dir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${Math.random().toString(36).slice(2, 8)}.eml`);
    await fs.writeFile(file, (info as unknown as { message: Buffer }).message, { mode: 0o600 });
    this.logger.info({ to: mail.to, subject: mail.subject, file }, 'mail written to outbox (no SMTP_URL)');
    return 'outbox';
  }

  /**
   * Sends without making the caller wait, for answers that must not tell whether a mail went out
   * (password reset). Failures are logged (recipient and subject only).
   */
  sendInBackground(mail: Mail): void {
    this.deliver(mail).catch((err: Error) => {
      this.logger.error({ to: mail.to, subject: mail.subject, error: err.message }, 'mail could not be sent');
    });
  }

  close(): void {
    this.transport.close();
  }
}
