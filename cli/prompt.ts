import readline from 'node:readline';
import type tty from 'node:tty';
import { CliError } from './errors.js';

let lines: { next(): Promise<string | undefined> } | undefined;

/** Lines of a non-terminal stdin, one per answer (scripts pipe the password, then a code). */
function stdinLines(): { next(): Promise<string | undefined> } {
  if (lines) return lines;
  const queue: string[] = [];
  const waiting: ((line: string | undefined) => void)[] = [];
  let ended = false;
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  rl.on('line', (line) => {
    const waiter = waiting.shift();
    if (waiter) waiter(line);
    else queue.push(line);
  });
  rl.on('close', () => {
    ended = true;
    waiting.splice(0).forEach((w) => w(undefined));
  });
  lines = {
    next: () => {
      if (queue.length > 0) return Promise.resolve(queue.shift());
      if (ended) return Promise.resolve(undefined);
      return new Promise((resolve) => waiting.push(resolve));
    },
  };
  return lines;
}

/** One line of stdin (for --password-stdin, and answers when stdin is not a terminal). */
export async function readStdinLine(what: string): Promise<string> {
  const line = await stdinLines().next();
  if (line === undefined) throw new CliError(`No ${what} on stdin.`);
  return line.replace(/\r$/, '');
}

/**
 * Asks a question. On a terminal, `echo: false` hides what is typed (passwords); when stdin is
 * not a terminal, the answer is the next line of stdin.
 */
export async function prompt(question: string, options: { echo: boolean; what: string }): Promise<string> {
  process.stderr.write(question);
  if (!process.stdin.isTTY) {
    const answer = await readStdinLine(options.what).catch((err: unknown) => {
      process.stderr.write('\n');
      throw err;
    });
    if (!options.echo || !process.stderr.isTTY) process.stderr.write('\n');
    return answer.trim();
  }
  const input = process.stdin as tty.ReadStream;
  return new Promise<string>((resolve, reject) => {
    input.setRawMode(true);
    input.resume();
    let value = '';
    const done = (error?: CliError) => {
      input.off('data', onData);
      input.setRawMode(false);
      input.pause();
      process.stderr.write('\n');
      if (error) reject(error);
      else resolve(options.echo ? value.trim() : value);
    };
    const onData = (chunk: Buffer) => {
      for (const ch of chunk.toString('utf8')) {
        if (ch === '\r' || ch === '\n') return done();
        if (ch === '\u0003') return done(new CliError('Cancelled.', 130));
        if (ch === '\u0004') return value ? done() : done(new CliError(`No ${options.what} given.`));
        if (ch === '\u007f' || ch === '\b') {
          if (value && options.echo) process.stderr.write('\b \b');
          value = [...value].slice(0, -1).join('');
        } else if (ch >= ' ') {
          value += ch;
          if (options.echo) process.stderr.write(ch);
        }
      }
    };
    input.on('data', onData);
  });
}
