/**
 * The firewall bundle against real iptables, inside a network namespace this test creates (`unshare -n`
 * as root, `unshare -rn` — a user namespace too — otherwise): the machine's own rules are never touched.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, runCommand, type SoftwareTestContext } from '../test-support/test-context.js';
import { firewallBundle } from './firewall.js';

let holder: ChildProcess;
let wrap: string[];
let t: SoftwareTestContext;

async function nsRules(table = 'filter'): Promise<string[]> {
  const result = await runCommand([...wrap, 'iptables', '-t', table, '-S']);
  expect(result.code).toBe(0);
  return result.stdout.trim().split('\n');
}

async function apply(data: unknown): Promise<void> {
  await firewallBundle.apply(firewallBundle.parse(data), t.ctx);
}

beforeAll(async () => {
  const asRoot = process.getuid?.() === 0;
  // `unshare` execs sleep, so the child's pid is the namespace holder's
  holder = spawn('unshare', asRoot ? ['-n', 'sleep', '3600'] : ['-rn', 'sleep', '3600'], { stdio: 'ignore' });
  const pid = String(holder.pid);
  wrap = asRoot ? ['nsenter', '-t', pid, '-n'] : ['nsenter', '-t', pid, '-U', '-n', '--preserve-credentials'];
  // wait until the holder is inside its own namespace
  for (;;) {
    const ns = await runCommand(['readlink', `/proc/${pid}/ns/net`]);
    const own = await runCommand(['readlink', '/proc/self/ns/net']);
    if (ns.code === 0 && ns.stdout.trim() !== own.stdout.trim()) break;
    await new Promise((r) => setTimeout(r, 20));
  }
});

afterAll(() => {
  holder.kill('SIGKILL');
});

beforeEach(async () => {
  // every test starts from an empty namespace firewall
  for (const table of ['filter', 'nat']) {
    await runCommand([...wrap, 'iptables', '-t', table, '-F']);
    for (const chain of table === 'filter' ? ['INPUT', 'FORWARD', 'OUTPUT'] : ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING']) {
      await runCommand([...wrap, 'iptables', '-t', table, '-P', chain, 'ACCEPT']);
    }
  }
  t = await createSoftwareTestContext({ wrap });
});

afterEach(async () => {
  await t.cleanup();
});

const config = {
  tables: {
    filter: {
      INPUT: {
        policy: 'DROP',
        rules: [
          { srcIp: '192.168.1.1', dstPort: '80', proto: 'tcp', target: 'ACCEPT' },
          { srcIp: '10.1.2.3/8', dstPort: '1000:2000', proto: 'udp', target: 'REJECT' },
          { srcIp: 'any', dstPort: 'any', proto: 'icmp', target: 'ACCEPT' },
        ],
      },
    },
    nat: { PREROUTING: { policy: 'ACCEPT', rules: [{ srcIp: '', dstPort: '53', proto: 'udp', target: 'ACCEPT' }] } },
  },
};

describe('firewall with iptables in a test network namespace', () => {
  it('loads the rules, policy last; they are in place; a second run changes nothing', async () => {
    const hostBefore = await runCommand(['iptables', '-S']);
    await apply(config);
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['WARN', 'Current firewall rules of filter INPUT are not in compliance.'],
      ['INFO', 'Load of new iptables rules succeeded for table filter.'],
      ['WARN', 'Current firewall rules of nat PREROUTING are not in compliance.'],
      ['INFO', 'Load of new iptables rules succeeded for table nat.'],
    ]);
    expect(await nsRules()).toEqual([
      '-P INPUT DROP',
      '-P FORWARD ACCEPT',
      '-P OUTPUT ACCEPT',
      '-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
      '-A INPUT -i lo -j ACCEPT',
      '-A INPUT -s 192.168.1.1/32 -p tcp -m tcp --dport 80 -j ACCEPT',
      '-A INPUT -s 10.0.0.0/8 -p udp -m udp --dport 1000:2000 -j REJECT --reject-with icmp-port-unreachable',
      '-A INPUT -p icmp -m icmp --icmp-type any -j ACCEPT',
    ]);
    expect(await nsRules('nat')).toContain('-A PREROUTING -p udp -m udp --dport 53 -j ACCEPT');
    const policyAt = t.commands.findIndex((argv) => argv.includes('-P') && argv.includes('INPUT'));
    const lastRuleAt = t.commands.findLastIndex((argv) => argv.includes('-A') && argv.includes('INPUT'));
    expect(policyAt).toBeGreaterThan(lastRuleAt);

    t.clear();
    await apply(config);
    expect(t.reports).toEqual([]);
    expect(t.commands.every((argv) => argv.includes('-S'))).toBe(true);
    // the machine's own firewall is untouched
    expect((await runCommand(['iptables', '-S'])).stdout).toBe(hostBefore.stdout);
  });

  it('repairs drift: a rule added by hand is removed on the next run', async () => {
    await apply(config);
    await runCommand([...wrap, 'iptables', '-A', 'INPUT', '-p', 'tcp', '-m', 'tcp', '--dport', '22', '-j', 'ACCEPT']);
    t.clear();
    await apply(config);
    expect(t.reports.map((r) => r.severity)).toEqual(['WARN', 'INFO']);
    expect(t.reports[0]!.log).toMatch(/--dport 22/);
    expect((await nsRules()).some((line) => line.includes('--dport 22'))).toBe(false);
  });

  it('reports what iptables refused, and stops there', async () => {
    await apply({
      tables: {
        nat: { PREROUTING: { policy: 'DROP', rules: [] } },
        filter: { OUTPUT: { policy: 'ACCEPT', rules: [{ proto: 'tcp', dstPort: '443', target: 'ACCEPT' }] } },
      },
    });
    const err = t.reports.find((r) => r.severity === 'ERR');
    expect(err?.text).toBe('Firewall configuration failed: iptables -t nat -P PREROUTING DROP.');
    expect(err?.log).toMatch(/not intended for filtering/);
    expect(await nsRules('nat')).toContain('-P PREROUTING ACCEPT');
  });
});

describe('firewall errors', () => {
  it('reports clearly when iptables is missing, and runs nothing', async () => {
    const empty = await mkdtemp(path.join(tmpdir(), 'no-tools-'));
    const bare = await createSoftwareTestContext({ path: empty });
    try {
      await firewallBundle.apply(firewallBundle.parse(config), bare.ctx);
      expect(bare.reports.map((r) => [r.severity, r.text])).toEqual([
        ['ERR', 'Firewall configuration failed: iptables is not installed on this device. Nothing applied.'],
      ]);
      expect(bare.commands).toEqual([]);
    } finally {
      await bare.cleanup();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('rejects malformed data with the field that is wrong', () => {
    const withRule = (r: object): unknown => ({ tables: { filter: { INPUT: { policy: 'DROP', rules: [r] } } } });
    expect(() => firewallBundle.parse(withRule({ srcIp: '1.2.3.4; rm -rf /', proto: 'tcp', target: 'ACCEPT' }))).toThrow(/srcIp/);
    expect(() => firewallBundle.parse(withRule({ dstPort: '70000', proto: 'tcp', target: 'ACCEPT' }))).toThrow(/dstPort/);
    expect(() => firewallBundle.parse(withRule({ dstPort: '22', proto: 'icmp', target: 'ACCEPT' }))).toThrow(/icmp rules take no dstPort/);
    expect(() => firewallBundle.parse(withRule({ proto: 'sctp', target: 'ACCEPT' }))).toThrow(/proto/);
    expect(() => firewallBundle.parse({ tables: { filter: { PREROUTING: { policy: 'ACCEPT' } } } })).toThrow(
      /tables\.filter\.PREROUTING: chain must be one of/,
    );
    expect(() => firewallBundle.parse({ tables: { raw: {} } })).toThrow(/tables/);
  });
});
