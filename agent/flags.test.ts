import { describe, expect, it } from 'vitest';
import { EXIT_USAGE, parseCommandLine } from './flags.js';

const flags = (...args: string[]) => {
  const parsed = parseCommandLine(args);
  if (!('flags' in parsed)) throw new Error(`not parsed: ${parsed.stderr ?? parsed.stdout}`);
  return parsed.flags;
};
const refused = (...args: string[]) => {
  const parsed = parseCommandLine(args);
  if ('flags' in parsed) throw new Error(`parsed: ${JSON.stringify(parsed.flags)}`);
  expect(parsed.exit).toBe(EXIT_USAGE);
  return parsed.stderr ?? '';
};

describe('agent command line', () => {
  it('takes every documented option, with a value after it or after =, and the switches', () => {
    expect(
      flags(
        '--broker',
        'https://b.example.com',
        '--bootstrap-key=k1',
        '--bootstrap-key-file',
        'key.txt',
        '--state-dir',
        '/var/lib/x',
        '--ca-file',
        'ca.pem',
        '--insecure-http',
        '--config',
        'c.json',
        '--exit-on-reload',
        '--log-level',
        'debug',
        '--retry-min-ms',
        '50',
        '--retry-max-ms=400',
        '--inventory-interval-ms',
        '1000',
        '--metrics-interval-ms',
        '2000',
        '--metrics-flush-ms',
        '3000',
        '--update-deadline-ms',
        '4000',
        '--metrics-queue-max',
        '500',
      ),
    ).toEqual({
      broker: 'https://b.example.com',
      bootstrapKey: 'k1',
      bootstrapKeyFile: 'key.txt',
      stateDir: '/var/lib/x',
      caFile: 'ca.pem',
      insecureHttp: true,
      config: 'c.json',
      exitOnReload: true,
      logLevel: 'debug',
      retryMinMs: '50',
      retryMaxMs: '400',
      inventoryIntervalMs: '1000',
      metricsIntervalMs: '2000',
      metricsFlushMs: '3000',
      updateDeadlineMs: '4000',
      metricsQueueMax: '500',
    });
    expect(flags()).toEqual({});
  });

  it('takes a value that starts with a dash as the value, an empty value as empty, and the last of a repeated option', () => {
    expect(flags('--bootstrap-key', '-k-', '--state-dir', '--x')).toEqual({ bootstrapKey: '-k-', stateDir: '--x' });
    expect(flags('--broker=', '--broker', 'a', '--broker', 'b')).toEqual({ broker: 'b' });
    expect(flags('--broker=')).toEqual({ broker: '' });
    expect(flags('--insecure-http', '--insecure-http')).toEqual({ insecureHttp: true });
  });

  it('refuses an unknown option, an argument, a switch with a value and an option without its value', () => {
    expect(refused('--bogus')).toContain("unknown option '--bogus'");
    expect(refused('-x')).toContain("unknown option '-x'");
    expect(refused('-broker', 'x')).toContain('unknown option');
    expect(refused('--ver')).toContain("unknown option '--ver'");
    expect(refused('--constructor', 'x')).toContain('unknown option');
    expect(refused('--__proto__', 'x')).toContain('unknown option');
    expect(refused('extra')).toContain('too many arguments');
    expect(refused('--', '--broker', 'x')).toContain('too many arguments');
    expect(refused('--exit-on-reload=1')).toContain("'--exit-on-reload' takes no value");
    expect(refused('--broker')).toContain("option '--broker <url>' argument missing");
    expect(refused('--help=1')).toContain('takes no value');
  });

  it('prints the documented options for -h and --help, and no hidden one', () => {
    for (const arg of ['-h', '--help']) {
      const parsed = parseCommandLine(['--broker', 'x', arg]);
      expect(parsed).toMatchObject({ exit: 0 });
      const text = 'stdout' in parsed ? (parsed.stdout ?? '') : '';
      for (const name of [
        '--broker <url>',
        '--bootstrap-key <key>',
        '--bootstrap-key-file <file>',
        '--state-dir <dir>',
        '--ca-file <pem>',
        '--insecure-http',
        '--config <file.json>',
        '--exit-on-reload',
        '--log-level <level>',
        '--metrics-interval-ms <ms>',
        '--metrics-flush-ms <ms>',
        '--metrics-queue-max <n>',
      ])
        expect(text).toContain(name);
      expect(text).not.toContain('--retry-min-ms');
      expect(text).not.toContain('--update-deadline-ms');
    }
  });
});
