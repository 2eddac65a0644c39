import type { Writable } from 'node:stream';
import { ConsoleAcks } from '../../shared/console-acks.js';
import type { ApiClient } from '../api.js';
import { resolveDevice } from '../devices.js';
import { CliError } from '../errors.js';
import { RemoteSession, type ServerFrame } from '../remote.js';

/**
 * `fleet console <device>`: a shell on the device in this terminal (raw mode), resized with the
 * window, ending with the remote exit status. Output is acknowledged once written to stdout, so
 * a flood on the device waits for this terminal instead of filling the broker (showOutput).
 */
export async function consoleCommand(client: ApiClient, deviceArg: string, options: { user?: string } = {}, command: string[] = []): Promise<number> {
  const device = await resolveDevice(client, deviceArg);
  const stdout = process.stdout;
  const stdin = process.stdin;
  const oneShot = command.length > 0;
  const session = await RemoteSession.open(client, 'console', {
    device_id: device.id,
    cols: stdout.columns || 80,
    rows: stdout.rows || 24,
    // The broker checks the name against the grant; the agent runs the shell as that user.
    ...(options.user !== undefined ? { user: options.user } : {}),
    // One command instead of the interactive shell: no prompt, no echo of typed input to untangle.
    ...(oneShot ? { command: JSON.stringify(command) } : {}),
  });
  // A command's output to a file or a pipe: plain text, without the terminal's escape sequences and carriage returns.
  const plain = oneShot && !stdout.isTTY ? new PlainText() : undefined;

  const raw = stdin.isTTY;
  const restore = () => {
    if (raw && stdin.isTTY) stdin.setRawMode(false);
    stdin.pause();
  };
  const onResize = () => session.control({ type: 'resize', cols: stdout.columns || 80, rows: stdout.rows || 24 });

  return new Promise<number>((resolve, reject) => {
    let exit: { code: number | null; signal: number | null } | undefined;
    showOutput(session, stdout, plain);
    session.on('frame', (frame: ServerFrame) => {
      if (frame.type === 'exit') exit = { code: frame.code, signal: frame.signal };
    });
    session.on('close', (code: number, reason: string, error?: { message: string }) => {
      process.off('SIGWINCH', onResize);
      restore();
      if (exit) return resolve(exit.code ?? (exit.signal ? 128 + exit.signal : 0));
      if (error) return reject(new CliError(error.message));
      if (code === 1000) return resolve(0);
      reject(new CliError(`The console session ended: ${reason || `connection closed (${code})`}.`));
    });

    session.on('close', () => {
      if (plain) stdout.write(plain.end());
    });
    if (oneShot && !raw) {
      // Input from a file or a pipe is not sent to a command (the terminal on the device would echo it
      // into the output): the command reads the end of input at once, as with ssh host cmd </dev/null.
      session.send(Buffer.from('\u0004'));
      process.on('SIGWINCH', onResize);
      session.start();
      return;
    }
    if (raw) stdin.setRawMode(true);
    stdin.on('data', (data: Buffer) => {
      if (!session.send(data)) {
        stdin.pause();
        session.once('drain', () => stdin.resume());
      }
    });
    // Piped input: its end is the end of input for the shell, as Ctrl-D at a prompt.
    stdin.on('end', () => session.send(Buffer.from('\u0004')));
    stdin.resume();
    process.on('SIGWINCH', onResize);
    session.start();
  });
}

/**
 * The session's output, written to `out` and acknowledged once written, in one `ack` frame per
 * CONSOLE_ACK_EVERY bytes (shared/console-acks.ts): a keystroke's echo sends nothing back.
 */
export function showOutput(session: RemoteSession, out: Writable, plain?: PlainText): void {
  const acks = new ConsoleAcks((bytes) => session.control({ type: 'ack', bytes }));
  session.on('data', (data: Buffer) => {
    out.write(plain ? plain.push(data) : data, () => acks.shown(data.length));
  });
}

/**
 * Terminal output made plain text: escape sequences (CSI, OSC, DCS and the like, and single
 * ESC-letter ones) are dropped, `\r\n` becomes `\n`, other control characters but tab and newline
 * go. A sequence cut between two reads is held until its end arrives (at most 4 KiB of it).
 */
export class PlainText {
  private held = '';
  private readonly decoder = new TextDecoder('utf-8');

  push(data: Buffer): string {
    return this.take(this.held + this.decoder.decode(data, { stream: true }), false);
  }

  end(): string {
    return this.take(this.held + this.decoder.decode(), true);
  }

  private take(text: string, last: boolean): string {
    // A trailing ESC sequence or CR that may continue in the next read waits for it.
    const open = last ? -1 : text.search(/(\x1b(\[[0-?]*[ -/]*|[\]PX^_][^\x07\x1b]*(\x1b)?|[ -/]*)?|\r)$/);
    const ready = open >= 0 && text.length - open <= 4096 ? text.slice(0, open) : text;
    this.held = text.slice(ready.length);
    return ready
      .replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, '') // CSI
      .replace(/\x1b[\]PX^_][^\x07\x1b]*(\x07|\x1b\\)/g, '') // OSC, DCS, SOS, PM, APC
      .replace(/\x1b[ -/]*[0-~]/g, '') // other escapes (charset, keypad modes)
      .replace(/\r+\n/g, '\n')
      .replace(/[\x00-\x08\x0b-\x1f\x7f]|\x9b[0-?]*[ -/]*[@-~]/g, '');
  }
}
