/**
 * A real SMTP listener for tests, on 127.0.0.1 and an ephemeral port, that keeps every message it
 * receives (parsed: recipients, subject, plain text). Start a broker that mails to it with
 * `startTestBroker({ env: { SMTP_URL: smtp.url } })`.
 */
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMail {
  /** envelope recipients */
  to: string[];
  from: string;
  subject: string;
  /** the text/plain body, decoded, with \n line ends */
  text: string;
  raw: string;
}

export interface TestSmtp {
  /** `smtp://127.0.0.1:<port>` for SMTP_URL */
  url: string;
  port: number;
  /** every message received, in order */
  messages: ReceivedMail[];
  /**
   * The oldest message to `to` (and matching `subject`, when given) not yet taken by an earlier
   * call; waits for it to arrive. Each message is handed out once.
   */
  next(to: string, options?: { subject?: RegExp; timeoutMs?: number }): Promise<ReceivedMail>;
  /** Messages to `to` not yet taken by `next`. */
  pending(to: string): ReceivedMail[];
  close(): Promise<void>;
}

/** Decodes RFC 2047 encoded words (`=?UTF-8?B?...?=`, `=?UTF-8?Q?...?=`) in a header value. */
function decodeHeader(value: string): string {
  return value.replace(/\?=\s+=\?/g, '?==?').replace(/=\?([^?]+)\?([BbQq])\?([^?]*)\?=/g, (_m, _charset: string, enc: string, data: string) =>
    enc.toUpperCase() === 'B'
      ? Buffer.from(data, 'base64').toString('utf8')
      : Buffer.from(
          data.replace(/_/g, ' ').replace(/=([0-9A-Fa-f]{2})/g, (_x, h: string) => String.fromCharCode(parseInt(h, 16))),
          'latin1',
        ).toString('utf8'),
  );
}

function decodeQuotedPrintable(body: string): string {
  const bytes = body.replace(/=\r?\n/g, '').replace(/=([0-9A-Fa-f]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)));
  return Buffer.from(bytes, 'latin1').toString('utf8');
}

interface Part {
  headers: Map<string, string>;
  body: string;
}

function splitPart(raw: string): Part {
  const text = raw.replace(/\r\n/g, '\n');
  const end = text.indexOf('\n\n');
  const head = end < 0 ? text : text.slice(0, end);
  const body = end < 0 ? '' : text.slice(end + 2);
  const headers = new Map<string, string>();
  for (const line of head.replace(/\n[ \t]+/g, ' ').split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  return { headers, body };
}

/** The text/plain content of a message (descending into multipart bodies). */
function plainText(part: Part): string {
  const type = part.headers.get('content-type') ?? 'text/plain';
  const boundary = /boundary="?([^";]+)"?/i.exec(type)?.[1];
  if (/^multipart\//i.test(type) && boundary) {
    const pieces = part.body.split(`--${boundary}`).slice(1, -1);
    for (const piece of pieces) {
      const sub = splitPart(piece.replace(/^\n/, ''));
      const found = plainText(sub);
      if (found) return found;
    }
    return '';
  }
  if (!/^text\/plain/i.test(type)) return '';
  const encoding = (part.headers.get('content-transfer-encoding') ?? '7bit').toLowerCase();
  if (encoding === 'quoted-printable') return decodeQuotedPrintable(part.body);
  if (encoding === 'base64') return Buffer.from(part.body.replace(/\s+/g, ''), 'base64').toString('utf8');
  return part.body;
}

export function parseMail(raw: string, envelope: { from: string; to: string[] }): ReceivedMail {
  const top = splitPart(raw);
  return { ...envelope, subject: decodeHeader(top.headers.get('subject') ?? ''), text: plainText(top), raw };
}

export async function startTestSmtp(): Promise<TestSmtp> {
  const messages: ReceivedMail[] = [];
  const taken = new Set<ReceivedMail>();
  const waiters = new Set<() => void>();

  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', callback);
      stream.on('end', () => {
        const envelope = {
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address.toLowerCase()),
        };
        messages.push(parseMail(Buffer.concat(chunks).toString('utf8'), envelope));
        for (const wake of [...waiters]) wake();
        callback();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.server.address() as AddressInfo).port;

  const matches = (m: ReceivedMail, to: string, subject?: RegExp) => !taken.has(m) && m.to.includes(to.toLowerCase()) && (!subject || subject.test(m.subject));

  return {
    url: `smtp://127.0.0.1:${port}`,
    port,
    messages,
    pending: (to) => messages.filter((m) => matches(m, to)),
    next(to, { subject, timeoutMs = 10_000 } = {}) {
      return new Promise<ReceivedMail>((resolve, reject) => {
        const look = () => {
          const found = messages.find((m) => matches(m, to, subject));
          if (!found) return false;
          taken.add(found);
          waiters.delete(look);
          clearTimeout(timer);
          resolve(found);
          return true;
        };
        const timer = setTimeout(() => {
          waiters.delete(look);
          reject(
            new Error(
              `no mail to ${to}${subject ? ` matching ${subject}` : ''} within ${timeoutMs} ms (received: ${messages.map((m) => `${m.to.join(',')}: ${m.subject}`).join('; ') || 'none'})`,
            ),
          );
        }, timeoutMs);
        if (!look()) waiters.add(look);
      });
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
