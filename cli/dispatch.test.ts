import { describe, expect, it } from 'vitest';
import { devicesFastPath } from './dispatch.js';
import { program } from './program.js';

/** The options commander hands `fleet devices` for this line, or the exit code it stops with. */
async function commanderReads(args: string[]): Promise<{ options?: unknown; exit?: number }> {
  const cli = program((work) => void work.catch(() => undefined));
  cli.exitOverride().configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
  let options: unknown;
  cli.commands.find((c) => c.name() === 'devices')?.action((o) => void (options = o));
  try {
    await cli.parseAsync(['node', 'fleet', ...args]);
  } catch (err) {
    return { exit: (err as { exitCode: number }).exitCode };
  }
  return { options };
}

describe('the fleet devices hot path', () => {
  const plain = [
    ['devices'],
    ['devices', '--json'],
    ['devices', '--online'],
    ['devices', '--offline', '--online'],
    ['devices', '-o', 'wide'],
    ['devices', '-owide'],
    ['devices', '-o=json'],
    ['devices', '--output', 'json', '--output=table'],
    ['devices', '-o', 'bogus'],
    ['devices', '--name', 'pi'],
    ['devices', '--name=pi', '--name', 'kitchen'],
    ['devices', '--tag', 'a', '--tag=b', '--tag', 'a=b'],
    ['devices', '--group', 'site/lab', '--json', '--tag', 'x'],
    ['devices', '--name', 'devices'],
    ['devices', '--group=a=b'],
  ];

  it('reads the usual lines exactly as commander does', async () => {
    for (const args of plain) {
      const fast = devicesFastPath(args);
      expect(fast, args.join(' ')).toBeDefined();
      expect(fast, args.join(' ')).toEqual((await commanderReads(args)).options);
    }
  });

  it('leaves help, errors and anything unusual to commander', () => {
    const others = [
      [],
      ['--help'],
      ['--version'],
      ['devices', '--help'],
      ['devices', '-h'],
      ['devices', 'extra'],
      ['devices', '--bogus'],
      ['devices', '--name'],
      ['devices', '--name='],
      ['devices', '--name', '--online'],
      ['devices', '-o'],
      ['devices', '--json=1'],
      ['devices', '--'],
      ['devices', '-x'],
      ['devices', 'constructor'],
      ['devices', '__proto__', 'x'],
      ['--json', 'devices'],
      ['device'],
      ['console', 'pi'],
    ];
    for (const args of others) expect(devicesFastPath(args), args.join(' ')).toBeUndefined();
  });
});
