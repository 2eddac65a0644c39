import { describe, expect, it } from 'vitest';
import {
  compilePolicies,
  consoleGrants,
  evaluate,
  MAX_RESOURCE_LENGTH,
  MAX_RESOURCES_PER_POLICY,
  normalizeDevicePath,
  parseResource,
  pathWithin,
  ResourceSyntaxError,
  validatePolicies,
  type DeviceScope,
  type Policy,
  type RemoteRequest,
} from './resources.js';

const CONNECT = 'remote-access:connect';

/** A device as the broker's scope lookup describes it: own node id first, then its groups up to the root. */
function device(id: string, groups: string[] = ['unassigned_group', 'root'], tags: string[] = []): DeviceScope {
  return { deviceId: id, nodeIds: [id, ...groups], tags };
}

function decide(policies: Policy[], permission: string, dev?: DeviceScope, request?: RemoteRequest) {
  return evaluate(compilePolicies(policies), permission, dev, request);
}

function connect(resources: string[], dev: DeviceScope, request?: RemoteRequest) {
  return decide([{ permission: CONNECT, resources }], CONNECT, dev, request).allowed;
}

function syntaxError(resource: string): ResourceSyntaxError {
  try {
    parseResource(resource);
  } catch (err) {
    if (err instanceof ResourceSyntaxError) return err;
    throw err;
  }
  throw new Error(`"${resource}" was accepted`);
}

const tunnel = (proto: 'tcp' | 'udp', port: number, dst = 'localhost'): RemoteRequest => ({ action: 'tunnel', proto, port, dst });
const copy = (direction: 'upload' | 'download', path: string): RemoteRequest => ({ action: 'copy', direction, path });

describe('parseResource: every form of the resource table', () => {
  it('entities: *, tag:<tag>, node:<node_id>', () => {
    expect(parseResource('*')).toEqual({ source: '*', entity: { kind: 'all' } });
    expect(parseResource('tag:prod')).toEqual({ source: 'tag:prod', entity: { kind: 'tag', tag: 'prod' } });
    expect(parseResource('tag:eu-west_1.a')).toMatchObject({ entity: { kind: 'tag', tag: 'eu-west_1.a' } });
    expect(parseResource('node:group-17')).toEqual({ source: 'node:group-17', entity: { kind: 'node', nodeId: 'group-17' } });
    // Tags as qbee writes them (^[a-z0-9:-]{3,64}$): the entity's kind ends at the first colon.
    expect(parseResource('tag:terraform:acctest:a1')).toEqual({ source: 'tag:terraform:acctest:a1', entity: { kind: 'tag', tag: 'terraform:acctest:a1' } });
    expect(parseResource('tag:a:b/console').entity).toEqual({ kind: 'tag', tag: 'a:b' });
    expect(parseResource('tag:-lead').entity).toEqual({ kind: 'tag', tag: '-lead' });
    expect(parseResource('tag:::x').entity).toEqual({ kind: 'tag', tag: '::x' });
    expect(parseResource(`tag:${'a:'.repeat(32)}`).entity).toEqual({ kind: 'tag', tag: 'a:'.repeat(32) });
    const hexId = 'a'.repeat(64);
    expect(parseResource(`node:${hexId}`)).toMatchObject({ entity: { kind: 'node', nodeId: hexId } });
  });

  it('console and reload take no options', () => {
    expect(parseResource('tag:lab/console')).toEqual({
      source: 'tag:lab/console',
      entity: { kind: 'tag', tag: 'lab' },
      action: { name: 'console', options: {} },
    });
    expect(parseResource('*/reload').action).toEqual({ name: 'reload', options: {} });
    expect(parseResource('node:g1/console').action?.name).toBe('console');
  });

  it('tunnel: no options, proto, port lists and ranges, dst lists', () => {
    expect(parseResource('*/tunnel').action).toEqual({ name: 'tunnel', options: {} });
    expect(parseResource('*/tunnel(proto=tcp)').action?.options).toEqual({ proto: ['tcp'] });
    expect(parseResource('*/tunnel(proto=tcp,udp)').action?.options).toEqual({ proto: ['tcp', 'udp'] });
    expect(parseResource('*/tunnel(port=22,80)').action?.options).toEqual({
      port: [
        { lo: 22, hi: 22 },
        { lo: 80, hi: 80 },
      ],
    });
    expect(parseResource('*/tunnel(port=8000-8100,1,65535)').action?.options.port).toEqual([
      { lo: 8000, hi: 8100 },
      { lo: 1, hi: 1 },
      { lo: 65535, hi: 65535 },
    ]);
    expect(parseResource('*/tunnel(dst=localhost,10.0.0.5,Printer.LAN,[fe80::1])').action?.options.dst).toEqual([
      'localhost',
      '10.0.0.5',
      'printer.lan',
      'fe80::1',
    ]);
    expect(parseResource('tag:prod/tunnel(proto=udp;port=53;dst=*)').action?.options).toEqual({ proto: ['udp'], port: [{ lo: 53, hi: 53 }], dst: ['*'] });
    // Options come in any order.
    expect(parseResource('*/tunnel(dst=db;port=5432;proto=tcp)').action?.options).toEqual({ dst: ['db'], port: [{ lo: 5432, hi: 5432 }], proto: ['tcp'] });
  });

  it('copy: direction and path lists; paths are normalised', () => {
    expect(parseResource('*/copy').action).toEqual({ name: 'copy', options: {} });
    expect(parseResource('tag:x/copy(direction=upload)').action?.options).toEqual({ direction: ['upload'] });
    expect(parseResource('tag:x/copy(direction=upload,download)').action?.options).toEqual({ direction: ['upload', 'download'] });
    expect(parseResource('*/copy(path=/var/log,/tmp/)').action?.options).toEqual({ path: ['/var/log', '/tmp'] });
    expect(parseResource('*/copy(path=//srv//data/)').action?.options.path).toEqual(['/srv/data']);
    expect(parseResource('*/copy(path=/)').action?.options.path).toEqual(['/']);
    expect(parseResource('node:g/copy(direction=download;path=/var/log)').action?.options).toEqual({ direction: ['download'], path: ['/var/log'] });
  });

  it.each([
    ['', /is empty/],
    ['**', /must be "\*", "tag:<tag>" or "node:<node_id>"/],
    ['all', /must be "\*"/],
    ['TAG:prod', /must be "\*"/],
    ['tag:', /not a valid tag/],
    ['tag:-a', /not a valid tag/],
    ['tag:-Lead', /not a valid tag/],
    ['tag:_ab', /not a valid tag/],
    [`tag:${'a:'.repeat(32)}b`, /not a valid tag/],
    ['tag:a/b/console', /not an action/],
    ['node:', /not a valid node id/],
    ['node:a.b', /not a valid node id/],
    ['*/', /not an action/],
    ['*/console/', /not an action/],
    ['*/Console', /not an action/],
    ['*/shell', /unknown action "shell"/],
    ['*/tunnel(proto=sctp)', /not tcp or udp/],
    ['*/tunnel(proto=TCP)', /not tcp or udp/],
    ['*/tunnel(port=0)', /outside 1-65535/],
    ['*/tunnel(port=65536)', /outside 1-65535/],
    ['*/tunnel(port=100-10)', /outside 1-65535 or an empty range/],
    ['*/tunnel(port=ssh)', /not a port or a range/],
    ['*/tunnel(port=-1)', /not a port or a range/],
    ['*/tunnel(port=1-2-3)', /not a port or a range/],
    ['*/tunnel(dst=-bad)', /not a host name or IP address/],
    ['*/tunnel(dst=*.example.com)', /not a host name or IP address/],
    ['*/tunnel(dst=a_b$c)', /not a host name or IP address/],
    ['*/copy(direction=both)', /not upload or download/],
    ['*/copy(path=relative/dir)', /not an absolute path/],
    ['*/tunnel(proto=tcp;proto=udp)', /given twice/],
    ['*/tunnel(port)', /not of the form key=value/],
    ['*/tunnel(=22)', /not of the form key=value/],
  ])('rejects %j', (resource, reason) => {
    const err = syntaxError(resource);
    expect(err.resource).toBe(resource);
    expect(err.message).toMatch(reason);
  });
});

describe('parseResource: hostile input', () => {
  it('overlong resources, tags and node ids', () => {
    expect(syntaxError(`tag:${'a'.repeat(MAX_RESOURCE_LENGTH)}`).message).toMatch(/longer than 1024/);
    expect(syntaxError(`tag:${'a'.repeat(65)}`).message).toMatch(/not a valid tag/);
    expect(parseResource(`tag:${'a'.repeat(64)}`).entity).toEqual({ kind: 'tag', tag: 'a'.repeat(64) });
    expect(syntaxError(`node:${'a'.repeat(65)}`).message).toMatch(/not a valid node id/);
    const longPorts = `*/tunnel(port=${Array.from({ length: 300 }, (_, i) => i + 1).join(',')})`;
    expect(longPorts.length).toBeGreaterThan(MAX_RESOURCE_LENGTH);
    expect(syntaxError(longPorts).message).toMatch(/longer than/);
    // The message quotes at most 80 characters of the input.
    expect(syntaxError('x'.repeat(1000)).message.length).toBeLessThan(300);
  });

  it.each([
    ['Cyrillic а in a tag', 'tag:prоd'],
    ['Greek ο in an action', '*/cοnsole'],
    ['full-width asterisk', '＊'],
    ['full-width slash', '*／console'],
    ['Cyrillic in a node id', 'node:grоup'],
    ['fraction slash', 'tag:x⁄console'],
    ['zero-width space in a tag', 'tag:prod\u200b'],
    ['right-to-left override in an action', '*/\u202econsole'],
  ])('unicode look-alikes are refused: %s', (_label, resource) => {
    expect(() => parseResource(resource)).toThrow(ResourceSyntaxError);
  });

  it.each([' *', '* ', 'tag: prod', 'tag:prod\t', '*/console\n', '*/tunnel(port=22; proto=tcp)', 'tag:\u00a0x', '*\u2028', 'tag:a\u3000', '\ufefftag:a'])(
    'white space anywhere is refused: %j',
    (resource) => {
      expect(syntaxError(resource).message).toMatch(/white space/);
    },
  );

  it.each([
    ['a second resource after ;', 'tag:x;*'],
    ['a second resource after ,', 'tag:x,*'],
    ['closing the options early', '*/tunnel(port=22);*'],
    ['options after the close', '*/tunnel(port=22)(port=1-65535)'],
    ['a second action after the close', 'tag:x/copy(path=/tmp)/console'],
    ['a parenthesis in a tag', 'tag:x)/console'],
    ['nested parentheses', '*/tunnel((port=1))'],
    ['an unclosed option list', '*/tunnel(port=22'],
    ['an option after a stray ;', '*/tunnel(port=22;)'],
    ['an option smuggled into a value', '*/tunnel(port=22,proto=udp)'],
    ['a parenthesis in a path', '*/copy(path=/srv)/x)'],
    ['a path closing early', '*/copy(path=/a))'],
  ])('; and ) injection is refused: %s', (_label, resource) => {
    expect(() => parseResource(resource)).toThrow(ResourceSyntaxError);
  });

  it.each(['*\u0000', 'tag:prod\u0000', '*/console\u0000', '*/tunnel(port=22\u0000)', '*/copy(path=/tmp\u0000/x)', '\u0000'])(
    'NUL is refused: %j',
    (resource) => {
      const err = syntaxError(resource);
      // Messages never carry the raw control character.
      expect(err.message).not.toContain('\u0000');
    },
  );

  it('control and invisible characters are escaped in messages', () => {
    expect(syntaxError('tag:\u0007bell').message).toContain('\\u0007');
    expect(syntaxError('tag:a\u202eb').message).toContain('\\u202e');
  });

  it('empty option lists and empty values are refused', () => {
    expect(syntaxError('*/tunnel()').message).toMatch(/empty option list/);
    expect(syntaxError('*/copy()').message).toMatch(/empty option list/);
    expect(syntaxError('*/tunnel(port=)').message).toMatch(/empty value/);
    expect(syntaxError('*/tunnel(port=22,)').message).toMatch(/empty value/);
    expect(syntaxError('*/tunnel(port=,22)').message).toMatch(/empty value/);
    expect(syntaxError('*/copy(path=)').message).toMatch(/empty value/);
    expect(syntaxError('*/tunnel(;)').message).toMatch(/key=value/);
  });

  it('options on reload are refused; console takes only user', () => {
    expect(syntaxError('*/console()').message).toMatch(/empty option list/);
    expect(syntaxError('*/console(port=22)').message).toMatch(/unknown option "port" for console \(allowed: user\)/);
    expect(syntaxError('tag:x/reload(force=true)').message).toMatch(/reload takes no options/);
  });

  it('console user lists users the console may run as', () => {
    expect(parseResource('*/console(user=operator)').action).toEqual({ name: 'console', options: { user: ['operator'] } });
    expect(parseResource('tag:lab/console(user=operator,deploy,_svc,a-b9)').action?.options.user).toEqual(['operator', 'deploy', '_svc', 'a-b9']);
    expect(parseResource(`*/console(user=${'a'.repeat(32)})`).action?.options.user).toEqual(['a'.repeat(32)]);
  });

  it.each([
    ['upper case', 'Operator'],
    ['a leading digit', '1op'],
    ['a leading dash (an option to su or login)', '-root'],
    ['longer than 32', 'a'.repeat(33)],
    ['a dot', 'op.er'],
    ['a dollar', 'op$'],
    ['a slash', 'op/x'],
    ['a colon (passwd field separator)', 'op:x'],
    ['non-ASCII', 'opé'],
    ['a zero-width space', 'op\u200b'],
  ])('console user with %s is refused', (_why, user) => {
    expect(syntaxError(`*/console(user=${user})`).message).toMatch(/console option user: .* is not a user name/);
  });

  it('console user: empty values and a repeated key are refused', () => {
    expect(syntaxError('*/console(user=)').message).toMatch(/empty value/);
    expect(syntaxError('*/console(user=a,)').message).toMatch(/empty value/);
    expect(syntaxError('*/console(user=a;user=b)').message).toMatch(/given twice/);
  });

  it('unknown options are refused, including ones valid for another action', () => {
    expect(syntaxError('*/tunnel(host=db)').message).toMatch(/unknown option "host" for tunnel \(allowed: proto, port, dst\)/);
    expect(syntaxError('*/tunnel(path=/tmp)').message).toMatch(/unknown option "path" for tunnel/);
    expect(syntaxError('*/copy(port=22)').message).toMatch(/unknown option "port" for copy \(allowed: direction, path\)/);
    expect(syntaxError('*/copy(__proto__=x)').message).toMatch(/unknown option "__proto__"/);
    expect(syntaxError('*/constructor').message).toMatch(/unknown action/);
  });

  it.each(['/tmp/..', '/tmp/../etc', '/..', '/var/./log', '/srv/data/..', '/a/b/../../..'])('"." and ".." in a copy path grant are refused: %s', (p) => {
    expect(syntaxError(`*/copy(path=${p})`).message).toMatch(/"\." or "\.\." segments/);
  });

  it.each([
    ['a backslash', '/tmp\\x'],
    ['a C1 control character', '/tmp/\u0085x'],
    ['DEL', '/tmp/\u007f'],
    ['a zero-width space', '/tmp/\u200b'],
    ['a right-to-left override', '/srv/\u202eatad'],
    ['a word joiner', '/srv\u2060'],
  ])('copy path grants with %s are refused', (_label, p) => {
    expect(syntaxError(`*/copy(path=${p})`).message).toMatch(/control or invisible characters, a backslash or a parenthesis/);
  });
});

describe('normalizeDevicePath and pathWithin', () => {
  it.each([
    ['/', '/'],
    ['//', '/'],
    ['/tmp/', '/tmp'],
    ['/tmp//a///b', '/tmp/a/b'],
    ['/tmp/./a', '/tmp/a'],
    ['/tmp/a/../b', '/tmp/b'],
    ['/../../etc/passwd', '/etc/passwd'],
    ['/tmp/a/..', '/tmp'],
    ['/tmp/%2e%2e/x', '/tmp/%2e%2e/x'],
  ])('%s → %s', (input, expected) => {
    expect(normalizeDevicePath(input)).toBe(expected);
  });

  it.each(['', 'tmp/a', './a', '../etc', '/tmp/\u0000', '/tmp\\a'])('refuses %j', (input) => {
    expect(normalizeDevicePath(input)).toBeNull();
  });

  it('compares whole path segments, never string prefixes', () => {
    expect(pathWithin('/tmp/a', '/tmp/a')).toBe(true);
    expect(pathWithin('/tmp/a', '/tmp/a/b/c')).toBe(true);
    expect(pathWithin('/tmp/a', '/tmp/ab')).toBe(false);
    expect(pathWithin('/tmp/a', '/tmp/a.bak')).toBe(false);
    expect(pathWithin('/tmp/a', '/tmp')).toBe(false);
    expect(pathWithin('/', '/anything/at/all')).toBe(true);
  });
});

describe('evaluate: entities and inheritance', () => {
  const inLab = device('d1', ['lab', 'site-1', 'root'], ['lab-tag', 'site-tag', 'own-tag']);
  const elsewhere = device('d2', ['unassigned_group', 'root'], []);

  it('* matches every device', () => {
    expect(decide([{ permission: 'device:read', resources: ['*'] }], 'device:read', elsewhere).allowed).toBe(true);
  });

  it("tag: matches the device's own tags and the tags inherited from its groups", () => {
    for (const tag of ['own-tag', 'lab-tag', 'site-tag']) {
      expect(decide([{ permission: 'device:read', resources: [`tag:${tag}`] }], 'device:read', inLab).allowed).toBe(true);
    }
    expect(decide([{ permission: 'device:read', resources: ['tag:own-tag'] }], 'device:read', elsewhere).allowed).toBe(false);
    // Tags compare exactly.
    expect(decide([{ permission: 'device:read', resources: ['tag:LAB-TAG'] }], 'device:read', inLab).allowed).toBe(false);
    // A tag with colons is one tag: neither its first part nor a longer one matches it.
    const colon = device('d3', ['root'], ['terraform:acctest:a1']);
    expect(decide([{ permission: 'device:read', resources: ['tag:terraform:acctest:a1'] }], 'device:read', colon).allowed).toBe(true);
    for (const other of ['tag:terraform', 'tag:terraform:acctest', 'tag:terraform:acctest:a1:b'])
      expect(decide([{ permission: 'device:read', resources: [other] }], 'device:read', colon).allowed).toBe(false);
  });

  it('node: matches the device itself and every device anywhere below the group', () => {
    for (const node of ['d1', 'lab', 'site-1', 'root']) {
      expect(decide([{ permission: 'device:read', resources: [`node:${node}`] }], 'device:read', inLab).allowed).toBe(true);
    }
    expect(decide([{ permission: 'device:read', resources: ['node:lab'] }], 'device:read', elsewhere).allowed).toBe(false);
    expect(decide([{ permission: 'device:read', resources: ['node:d2'] }], 'device:read', inLab).allowed).toBe(false);
  });

  it('explains a denial, with a code for code and a sentence for people', () => {
    expect(decide([], 'device:read', inLab)).toEqual({ allowed: false, code: 'no_permission', reason: 'no role grants device:read' });
    expect(decide([{ permission: 'device:read', resources: ['tag:nope'] }], 'device:read', inLab)).toEqual({
      allowed: false,
      code: 'outside_resources',
      reason: 'device is outside every resource of device:read',
    });
    expect(decide([{ permission: CONNECT, resources: ['*/console'] }], CONNECT, inLab, { action: 'reload' })).toEqual({
      allowed: false,
      code: 'action_not_granted',
      reason: `no grant of ${CONNECT} allows reload on this device`,
    });
  });

  it('tells an action not granted from an action granted with other options', () => {
    const tunnel22 = [{ permission: CONNECT, resources: ['*/tunnel(port=22)', 'tag:nope'] }];
    expect(decide(tunnel22, CONNECT, inLab, { action: 'tunnel', proto: 'tcp', port: 80, dst: 'localhost' }).code).toBe('option_not_granted');
    expect(decide(tunnel22, CONNECT, inLab, { action: 'console' }).code).toBe('action_not_granted');
    const copySrv = [{ permission: CONNECT, resources: ['*/copy(path=/srv)'] }];
    expect(decide(copySrv, CONNECT, inLab, { action: 'copy', direction: 'upload', path: '/etc/passwd' }).code).toBe('option_not_granted');
    expect(decide(copySrv, CONNECT, inLab, { action: 'copy', direction: 'upload', path: '/srv/x' }).code).toBe('allowed');
  });

  it('names the resource that granted access', () => {
    expect(decide([{ permission: 'device:read', resources: ['tag:nope', 'node:lab'] }], 'device:read', inLab)).toEqual({
      allowed: true,
      code: 'allowed',
      reason: 'granted',
      matched: 'node:lab',
    });
  });

  it('without a device, answers whether the permission is held at all', () => {
    expect(decide([{ permission: 'device:read', resources: ['tag:nope'] }], 'device:read').allowed).toBe(true);
    expect(decide([{ permission: 'device:read', resources: ['tag:nope'] }], 'device:manage').allowed).toBe(false);
  });
});

describe('evaluate: OR across resources, union across policies', () => {
  const a = device('a', ['root'], ['a']);
  const b = device('b', ['root'], ['b']);
  const c = device('c', ['root'], ['c']);

  it('several resources on one policy are OR-ed', () => {
    const policies = [{ permission: 'device:read', resources: ['tag:a', 'tag:b'] }];
    expect(decide(policies, 'device:read', a).allowed).toBe(true);
    expect(decide(policies, 'device:read', b).allowed).toBe(true);
    expect(decide(policies, 'device:read', c).allowed).toBe(false);
  });

  it('policies of several roles are a union', () => {
    const roleA: Policy[] = [{ permission: 'device:read', resources: ['tag:a'] }];
    const roleB: Policy[] = [
      { permission: 'device:read', resources: ['tag:b'] },
      { permission: 'device:manage', resources: ['tag:c'] },
    ];
    const union = [...roleA, ...roleB];
    expect(decide(union, 'device:read', a).allowed).toBe(true);
    expect(decide(union, 'device:read', b).allowed).toBe(true);
    expect(decide(union, 'device:read', c).allowed).toBe(false);
    // A grant of one permission never leaks into another.
    expect(decide(union, 'device:manage', c).allowed).toBe(true);
    expect(decide(union, 'device:manage', a).allowed).toBe(false);
  });

  it('a narrow role does not narrow a broad one', () => {
    const union: Policy[] = [
      { permission: CONNECT, resources: ['*/console'] },
      { permission: CONNECT, resources: ['tag:a'] },
    ];
    expect(decide(union, CONNECT, a, tunnel('tcp', 22)).allowed).toBe(true);
    expect(decide(union, CONNECT, b, tunnel('tcp', 22)).allowed).toBe(false);
  });

  it('omitted or empty resources mean every device', () => {
    expect(decide([{ permission: 'device:read' }], 'device:read', c).allowed).toBe(true);
    expect(decide([{ permission: 'device:read', resources: [] }], 'device:read', c).allowed).toBe(true);
    expect(compilePolicies([{ permission: 'device:read' }])[0].resources).toEqual([{ source: '*', entity: { kind: 'all' } }]);
  });

  it('resources that do not parse grant nothing (stored data is never trusted)', () => {
    const compiled = compilePolicies([{ permission: 'device:read', resources: ['tag:a', 'bogus resource', 'tag:\u0000'] }]);
    expect(compiled[0].resources.map((r) => r.source)).toEqual(['tag:a']);
    expect(evaluate(compiled, 'device:read', c).allowed).toBe(false);
  });
});

describe('evaluate: remote-access actions', () => {
  const tagged = device('t', ['root'], ['x']);
  const plain = device('p', ['root'], []);

  it("the spec's example: */console + tag:x gives console everywhere and full access on tagged devices", () => {
    const resources = ['*/console', 'tag:x'];
    expect(connect(resources, plain, { action: 'console' })).toBe(true);
    expect(connect(resources, plain, { action: 'reload' })).toBe(false);
    expect(connect(resources, plain, tunnel('tcp', 22))).toBe(false);
    expect(connect(resources, plain, copy('download', '/etc/hosts'))).toBe(false);
    expect(connect(resources, tagged, { action: 'console' })).toBe(true);
    expect(connect(resources, tagged, { action: 'reload' })).toBe(true);
    expect(connect(resources, tagged, tunnel('udp', 5353, 'anywhere.example'))).toBe(true);
    expect(connect(resources, tagged, copy('upload', '/'))).toBe(true);
  });

  it('console and reload grant only themselves', () => {
    expect(connect(['*/console'], plain, { action: 'console' })).toBe(true);
    expect(connect(['*/console'], plain, { action: 'reload' })).toBe(false);
    expect(connect(['*/reload'], plain, { action: 'reload' })).toBe(true);
    expect(connect(['*/reload'], plain, { action: 'console' })).toBe(false);
    expect(connect(['tag:x/console'], plain, { action: 'console' })).toBe(false);
  });

  it('console user: a grant naming users allows only those users', () => {
    const asOperator = ['*/console(user=operator,deploy)'];
    expect(connect(asOperator, plain, { action: 'console', user: 'operator' })).toBe(true);
    expect(connect(asOperator, plain, { action: 'console', user: 'deploy' })).toBe(true);
    expect(connect(asOperator, plain, { action: 'console', user: 'root' })).toBe(false);
    expect(connect(asOperator, plain, { action: 'reload' })).toBe(false);
  });

  it("console user: a restricted grant never allows the agent's own user by default; the client must name one", () => {
    const d = decide([{ permission: CONNECT, resources: ['*/console(user=operator)'] }], CONNECT, plain, { action: 'console' });
    expect(d.allowed).toBe(false);
    expect(d.code).toBe('option_not_granted');
    expect(d.reason).toMatch(/allows console on this device/);
  });

  it('console user: an unrestricted console grant or a bare entity allows any user; grants add up', () => {
    expect(connect(['*/console'], plain, { action: 'console', user: 'root' })).toBe(true);
    expect(connect(['*'], plain, { action: 'console', user: 'root' })).toBe(true);
    const mixed = ['*/console(user=operator)', 'tag:x/console(user=deploy)'];
    expect(connect(mixed, tagged, { action: 'console', user: 'deploy' })).toBe(true);
    expect(connect(mixed, plain, { action: 'console', user: 'deploy' })).toBe(false);
    expect(connect(mixed, plain, { action: 'console', user: 'operator' })).toBe(true);
    const d = decide([{ permission: CONNECT, resources: mixed }], CONNECT, plain, { action: 'console', user: 'deploy' });
    expect(d.code).toBe('option_not_granted');
    expect(d.reason).toMatch(/console as deploy/);
  });

  it('tunnel without options allows any tunnel, and only tunnels', () => {
    expect(connect(['*/tunnel'], plain, tunnel('udp', 1, '10.1.2.3'))).toBe(true);
    expect(connect(['*/tunnel'], plain, { action: 'console' })).toBe(false);
  });

  it('tunnel proto', () => {
    expect(connect(['*/tunnel(proto=tcp)'], plain, tunnel('tcp', 22))).toBe(true);
    expect(connect(['*/tunnel(proto=tcp)'], plain, tunnel('udp', 22))).toBe(false);
    expect(connect(['*/tunnel(proto=tcp,udp)'], plain, tunnel('udp', 22))).toBe(true);
  });

  it('tunnel port lists and ranges', () => {
    const resources = ['*/tunnel(port=22,80,8000-8100)'];
    for (const port of [22, 80, 8000, 8050, 8100]) expect(connect(resources, plain, tunnel('tcp', port)), `port ${port}`).toBe(true);
    for (const port of [21, 23, 443, 7999, 8101, 65535]) expect(connect(resources, plain, tunnel('tcp', port)), `port ${port}`).toBe(false);
  });

  it('tunnel dst lists, case-insensitive, * for any, IPv6 with or without brackets', () => {
    const resources = ['*/tunnel(dst=localhost,10.0.0.5,DB.lan,[::1])'];
    expect(connect(resources, plain, tunnel('tcp', 5432, 'db.LAN'))).toBe(true);
    expect(connect(resources, plain, tunnel('tcp', 5432, '10.0.0.5'))).toBe(true);
    expect(connect(resources, plain, tunnel('tcp', 5432, '::1'))).toBe(true);
    expect(connect(resources, plain, tunnel('tcp', 5432, '[::1]'))).toBe(true);
    expect(connect(resources, plain, tunnel('tcp', 5432, '10.0.0.6'))).toBe(false);
    expect(connect(resources, plain, tunnel('tcp', 5432, 'db.lan.evil.example'))).toBe(false);
    expect(connect(resources, plain, tunnel('tcp', 5432, '127.0.0.1'))).toBe(false);
    expect(connect(['*/tunnel(dst=*)'], plain, tunnel('tcp', 1, 'anything.example'))).toBe(true);
  });

  it('tunnel options combine with AND', () => {
    const resources = ['*/tunnel(proto=tcp;port=22;dst=localhost)'];
    expect(connect(resources, plain, tunnel('tcp', 22, 'localhost'))).toBe(true);
    expect(connect(resources, plain, tunnel('udp', 22, 'localhost'))).toBe(false);
    expect(connect(resources, plain, tunnel('tcp', 23, 'localhost'))).toBe(false);
    expect(connect(resources, plain, tunnel('tcp', 22, 'other'))).toBe(false);
  });

  it('copy direction: upload is to the device, download from it', () => {
    expect(connect(['*/copy(direction=download)'], plain, copy('download', '/var/log/syslog'))).toBe(true);
    expect(connect(['*/copy(direction=download)'], plain, copy('upload', '/var/log/syslog'))).toBe(false);
    expect(connect(['*/copy(direction=upload,download)'], plain, copy('upload', '/x'))).toBe(true);
    expect(connect(['*/copy'], plain, copy('upload', '/x'))).toBe(true);
  });

  it('copy path grants the directory and everything below it, compared after normalising', () => {
    const resources = ['*/copy(path=/tmp/a,/var/log)'];
    for (const p of ['/tmp/a', '/tmp/a/', '/tmp/a/f.txt', '/tmp/a/b/c', '//tmp//a//x', '/tmp/./a/x', '/tmp/b/../a/x', '/var/log/syslog']) {
      expect(connect(resources, plain, copy('download', p)), p).toBe(true);
    }
  });

  it('copy path: string prefixes that are not within are refused (/tmp/a vs /tmp/ab)', () => {
    const resources = ['*/copy(path=/tmp/a)'];
    for (const p of ['/tmp/ab', '/tmp/a.bak', '/tmp/a-b/x', '/tmp', '/', '/tmpa']) {
      expect(connect(resources, plain, copy('download', p)), p).toBe(false);
    }
  });

  it('copy path: ".." in a request cannot climb out of the grant', () => {
    const resources = ['*/copy(path=/tmp/a)'];
    for (const p of ['/tmp/a/..', '/tmp/a/../ab', '/tmp/a/../../etc/passwd', '/tmp/a/b/../../../etc', '/tmp/a/./../b']) {
      expect(connect(resources, plain, copy('upload', p)), p).toBe(false);
    }
    // Climbing down again stays within.
    expect(connect(resources, plain, copy('upload', '/tmp/a/b/../c'))).toBe(true);
    // Percent-encoding is not decoded: "%2e%2e" is a file name like any other.
    expect(connect(resources, plain, copy('upload', '/tmp/a/%2e%2e/x'))).toBe(true);
    expect(connect(resources, plain, copy('upload', '/tmp/%2e%2e/a'))).toBe(false);
  });

  it('copy path: relative paths, NUL and backslashes in a request are refused', () => {
    const resources = ['*/copy(path=/tmp/a)'];
    for (const p of ['tmp/a/x', 'a/x', '', '/tmp/a/x\u0000/../../etc', '/tmp/a\\..\\..\\etc']) {
      expect(connect(resources, plain, copy('upload', p)), JSON.stringify(p)).toBe(false);
    }
    // Even a root grant refuses what is not an absolute path.
    expect(connect(['*/copy(path=/)'], plain, copy('upload', 'relative'))).toBe(false);
    expect(connect(['*/copy(path=/)'], plain, copy('upload', '/etc/shadow'))).toBe(true);
  });

  it('copy direction and path combine with AND', () => {
    const resources = ['tag:x/copy(direction=upload;path=/opt/app)'];
    expect(connect(resources, tagged, copy('upload', '/opt/app/new.bin'))).toBe(true);
    expect(connect(resources, tagged, copy('download', '/opt/app/new.bin'))).toBe(false);
    expect(connect(resources, tagged, copy('upload', '/opt/other'))).toBe(false);
    expect(connect(resources, plain, copy('upload', '/opt/app/new.bin'))).toBe(false);
  });

  it('a resource without an action grants every action with any options', () => {
    for (const request of [{ action: 'console' }, { action: 'reload' }, tunnel('udp', 9), copy('upload', '/')] as RemoteRequest[]) {
      expect(connect(['tag:x'], tagged, request), request.action).toBe(true);
      expect(connect(['tag:x'], plain, request), request.action).toBe(false);
    }
  });
});

describe('validatePolicies', () => {
  it('accepts valid policies, "*" on any permission, and omitted resources', () => {
    expect(
      validatePolicies([
        { permission: 'users:read' },
        { permission: 'users:manage', resources: ['*'] },
        { permission: 'device:read', resources: ['*', 'tag:a', 'node:g'] },
        {
          permission: CONNECT,
          resources: ['*/console', 'tag:x', 'node:g/tunnel(proto=tcp;port=22)', 'tag:y/copy(direction=download;path=/var/log)', '*/reload'],
        },
        { permission: 'reports:markread', resources: ['tag:a'] },
        { permission: 'metrics:read' },
      ]),
    ).toEqual([]);
  });

  it('a resource on a permission that does not accept resources', () => {
    expect(validatePolicies([{ permission: 'users:read', resources: ['tag:prod'] }])).toEqual([
      { policy: 0, permission: 'users:read', resource: 'tag:prod', code: 'resources_not_accepted', message: 'users:read does not accept resources; only "*"' },
    ]);
    expect(validatePolicies([{ permission: 'metrics:read', resources: ['node:g1'] }])[0].message).toMatch(/does not accept resources/);
  });

  it('an unknown permission', () => {
    expect(validatePolicies([{ permission: 'device:delete' }])).toEqual([
      { policy: 0, permission: 'device:delete', code: 'unknown_permission', message: 'unknown permission "device:delete"' },
    ]);
    expect(validatePolicies([{ permission: '__proto__' }])[0].message).toMatch(/unknown permission/);
    expect(validatePolicies([{ permission: 'users:read\u0000' }])[0].message).toBe('unknown permission "users:read\\u0000"');
  });

  it('an action suffix on anything but remote-access:connect', () => {
    for (const permission of ['device:read', 'device:manage', 'remote-access:manage', 'reports:read', 'reports:markread']) {
      expect(validatePolicies([{ permission, resources: ['tag:x/console'] }]), permission).toEqual([
        { policy: 0, permission, resource: 'tag:x/console', code: 'action_not_allowed', message: 'action suffixes are only for remote-access:connect' },
      ]);
    }
  });

  it('syntax errors name the resource', () => {
    const problems = validatePolicies([{ permission: CONNECT, resources: ['*/console(x=1)', '*/tunnel(host=a)', 'tag:ok'] }]);
    expect(problems).toEqual([
      {
        policy: 0,
        permission: CONNECT,
        resource: '*/console(x=1)',
        code: 'resource_syntax',
        message: 'resource "*/console(x=1)": unknown option "x" for console (allowed: user)',
      },
      { policy: 0, permission: CONNECT, resource: '*/tunnel(host=a)', code: 'resource_syntax', message: expect.stringContaining('unknown option "host"') },
    ]);
  });

  it('reports each problem with the index of its policy', () => {
    const problems = validatePolicies([
      { permission: 'device:read', resources: ['tag:ok'] },
      { permission: 'nope' },
      { permission: 'files:read', resources: ['tag:x'] },
      { permission: 'device:read', resources: ['*'] },
    ]);
    expect(problems.map((p) => [p.policy, p.permission])).toEqual([
      [1, 'nope'],
      [2, 'files:read'],
      [3, 'device:read'],
    ]);
    expect(problems[2].message).toMatch(/listed twice/);
    expect(problems.map((p) => p.code)).toEqual(['unknown_permission', 'resources_not_accepted', 'duplicate_permission']);
  });

  it('caps the number of resources per permission', () => {
    const resources = Array.from({ length: MAX_RESOURCES_PER_POLICY + 1 }, (_, i) => `tag:t${i}`);
    expect(validatePolicies([{ permission: 'device:read', resources }])[0]).toMatchObject({
      code: 'too_many_resources',
      message: expect.stringMatching(/at most 100 resources/),
    });
    expect(validatePolicies([{ permission: 'device:read', resources: resources.slice(1) }])).toEqual([]);
  });
});

describe('console grants: which account a console opens', () => {
  it('lists the connect resources that allow a console, with the logins each names (none: the agent’s own account)', () => {
    const grants = consoleGrants(
      compilePolicies([
        { permission: 'device:read' },
        {
          permission: 'remote-access:connect',
          resources: ['tag:lab', 'node:g1/console', 'tag:ops/console(user=ops,deploy)', 'tag:x/tunnel(port=22)', 'tag:y/reload', '*/copy(direction=download)'],
        },
      ]),
    );
    expect(grants).toEqual([
      { resource: 'tag:lab', users: [] },
      { resource: 'node:g1/console', users: [] },
      { resource: 'tag:ops/console(user=ops,deploy)', users: ['ops', 'deploy'] },
    ]);
    // No resources is every device and every action: a console as the agent's own account.
    expect(consoleGrants(compilePolicies([{ permission: 'remote-access:connect' }]))).toEqual([{ resource: '*', users: [] }]);
    expect(consoleGrants(compilePolicies([{ permission: 'remote-access:manage' }]))).toEqual([]);
  });
});
