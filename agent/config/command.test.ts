import { describe, expect, it } from 'vitest';
import { hasExecutable, OUTPUT_TAIL_BYTES, runCommand } from './command.js';
import { renderTemplate, resolveParameters } from './template.js';

const env = { PATH: '/usr/bin:/bin' };

describe('runCommand', () => {
  it('runs argv without a shell: metacharacters are plain arguments', async () => {
    const r = await runCommand(['echo', '$(id)', ';', 'rm', '-rf', '/'], env, new AbortController().signal);
    expect(r).toEqual({ code: 0, stdout: '$(id) ; rm -rf /\n', stderr: '' });
  });

  it('keeps only the tail of a flood of output', async () => {
    const r = await runCommand(['sh', '-c', 'head -c 1000000 /dev/zero | tr "\\0" a; echo END'], env, new AbortController().signal);
    expect(r.code).toBe(0);
    expect(r.stdout.length).toBeLessThanOrEqual(OUTPUT_TAIL_BYTES + 3);
    expect(r.stdout.startsWith('[…]')).toBe(true);
    expect(r.stdout.endsWith('aEND\n')).toBe(true);
  });

  it('kills a command that outlives its time, with what it started, and says so', async () => {
    const r = await runCommand(['sh', '-c', 'sleep 30 & sleep 30'], env, new AbortController().signal, { timeoutMs: 200 });
    expect(r.code).toBeNull();
    expect(r.stderr).toContain('sh: timed out after 0 s');
  });

  it('answers a program that does not exist, and stops when the run is aborted', async () => {
    expect(await runCommand(['no-such-program-xyz'], env, new AbortController().signal)).toEqual({
      code: null,
      stdout: '',
      stderr: 'no-such-program-xyz: command not found',
    });
    const controller = new AbortController();
    const running = runCommand(['sleep', '30'], env, controller.signal);
    controller.abort();
    expect((await running).stderr).toContain('the configuration run was stopped');
  });

  it('finds executables on the PATH given', async () => {
    expect(await hasExecutable('sh', env.PATH)).toBe(true);
    expect(await hasExecutable('sh', '/nonexistent')).toBe(false);
    expect(await hasExecutable('/bin/sh', '')).toBe(true);
  });
});

describe('placeholders', () => {
  it('renders {{key}} as qbee does: spaces trimmed, unknown tags and unclosed braces kept, line ends kept', () => {
    expect(renderTemplate('a={{a}} b={{ b }}\r\nc={{c}}\n{{a}', { a: '1', b: '2' })).toBe('a=1 b=2\r\nc={{c}}\n{{a}');
    expect(renderTemplate('x={{ a }} {{ a\n}}', { a: 'v' })).toBe('x=v {{ a\n}}');
  });

  it('resolves $(key) from parameters, leaves unknown ones', () => {
    expect(resolveParameters('$(user)@$(host) $(nope) $(open', { user: 'bob', host: 'h1' })).toBe('bob@h1 $(nope) $(open');
  });
});
