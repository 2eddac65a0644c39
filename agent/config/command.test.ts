import { describe, expect, it } from 'vitest';
import { hasExecutable, OUTPUT_TAIL_BYTES, runCommand } from './command.js';
import { ParameterError, renderTemplate, resolveCommand, resolveParameters, resolvePath, resolveTemplateValue } from './template.js';

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

  it('resolves $(key) from parameters; an unknown key is an error naming it, never left as written', () => {
    expect(resolveParameters('$(user)@$(host) $(open', { user: 'bob', host: 'h1' })).toBe('bob@h1 $(open');
    expect(() => resolveParameters('$(user)@$(nope) $(other) $(nope)', { user: 'bob' })).toThrow(
      'unknown parameters $(nope), $(other): no parameter, secret or device attribute has this key',
    );
    try {
      resolveCommand('echo $(location)', {});
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ParameterError);
      expect((err as ParameterError).keys).toEqual(['location']);
    }
    // shell syntax that is not key-shaped stays, and what is inside it is still looked at
    expect(resolveCommand('kill "$(cat "$f")" $(echo $(x))', { x: '1' }).script).toBe('kill "$(cat "$f")" $(echo "${FLEET_PARAM_1}")');
    // a value is inserted once: a value holding $(key) is not resolved again
    expect(resolveParameters('$(a)', { a: '$(b)', b: 'no' })).toBe('$(b)');
  });

  it('refuses a value holding a control character in a name or path, and a ".." segment in a path', () => {
    expect(() => resolveParameters('user-$(team)', { team: 'ops\nroot' })).toThrow('parameter $(team) holds a control character');
    expect(() => resolveParameters('$(n)', { n: 'a\u0000b' })).toThrow('holds a control character');
    expect(() => resolvePath('/etc/app/$(name).conf', { name: '../../sudoers.d/x' })).toThrow('parameter $(name) holds a ".." path segment');
    expect(resolvePath('$(base)/app.conf', { base: '/opt/app' })).toBe('/opt/app/app.conf');
    // template values (a certificate) keep their lines
    expect(resolveTemplateValue('$(cert)', { cert: 'line 1\nline 2' })).toBe('line 1\nline 2');
  });

  it('passes a command its values through the environment, quoted for where they stand', () => {
    const { script, env } = resolveCommand(`echo $(a) "in $(a)" 'in $(b)' $(a)`, { a: "x'; id", b: 'y"z' });
    expect(script).toBe(`echo "\${FLEET_PARAM_1}" "in \${FLEET_PARAM_1}" 'in '"\${FLEET_PARAM_2}"'' "\${FLEET_PARAM_1}"`);
    expect(env).toEqual({ FLEET_PARAM_1: "x'; id", FLEET_PARAM_2: 'y"z' });
    expect(() => resolveCommand('echo $(a)', { a: 'a\u0000b' })).toThrow('holds a NUL character');
  });

  it('runs hostile values through sh as data', async () => {
    const values = ['; id', "'; id; '", '"; id; "', '$(id)', '`id`', 'a\nid', '*', '-n', ' spaced  out '];
    for (const value of values) {
      const { script, env: vars } = resolveCommand(`printf '[%s]' $(v) "$(v)" '$(v)'`, { v: value });
      const r = await runCommand(['sh', '-c', script], env, new AbortController().signal, { env: vars });
      expect(r.stdout, JSON.stringify(value)).toBe(`[${value}]`.repeat(3));
    }
  });
});
