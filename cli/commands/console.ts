import type { ApiClient } from '../api.js';
import { resolveDevice } from '../devices.js';
import { CliError } from '../errors.js';
import { RemoteSession, type ServerFrame } from '../remote.js';

/**
 * `fleet console <device>`: a shell on the device in this terminal (raw mode), resized with the
 * window, ending with the remote exit status. Output is acknowledged once written to stdout, so
 * a flood on the device waits for this terminal instead of filling the broker.
 */
export async function consoleCommand(client: ApiClient, deviceArg: string, options: { user?: string } = {}): Promise<number> {
  const device = await resolveDevice(client, deviceArg);
  const stdout = process.stdout;
  const stdin = process.stdin;
  const session = await RemoteSession.open(client, 'console', {
    device_id: device.id,
    cols: stdout.columns || 80,
    rows: stdout.rows || 24,
    // The broker checks the name against the grant; the agent runs the shell as that user.
    ...(options.user !== undefined ? { user: options.user } : {}),
  });

  const raw = stdin.isTTY;
  const restore = () => {
    if (raw && stdin.isTTY) stdin.setRawMode(false);
    stdin.pause();
  };
  const onResize = () => session.control({ type: 'resize', cols: stdout.columns || 80, rows: stdout.rows || 24 });

  return new Promise<number>((resolve, reject) => {
    let exit: { code: number | null; signal: number | null } | undefined;
    session.on('data', (data: Buffer) => {
      stdout.write(data, () => session.control({ type: 'ack', bytes: data.length }));
    });
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
