/**
 * qbee's `firewall`: iptables tables (`filter`, `nat`) → chains → a policy and rules (`srcIp`, `dstPort`,
 * `proto`, `target`). Each configured chain is compared with what `iptables -S` shows; a chain that
 * differs is flushed and loaded again, the policy last (so a DROP policy never cuts the agent off midway).
 * The filter table's INPUT chain always starts by accepting established traffic and loopback, as qbee's does.
 */
import { z } from 'zod';
import type { Bundle, BundleContext } from '../bundle.js';
import { outputTail, parseBundleData } from './software-support.js';

const CHAINS_OF_TABLE = {
  filter: ['INPUT', 'FORWARD', 'OUTPUT'],
  nat: ['PREROUTING', 'INPUT', 'OUTPUT', 'POSTROUTING'],
} as const;

const IPV4_CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/;
const PORT = /^(\d{1,5})(?::(\d{1,5}))?$/;

function validIpv4(text: string): boolean {
  const m = IPV4_CIDR.exec(text);
  if (!m) return false;
  return m.slice(1, 5).every((o) => Number(o) <= 255) && (m[5] === undefined || Number(m[5]) <= 32);
}

function validPort(text: string): boolean {
  const m = PORT.exec(text);
  if (!m) return false;
  const ports = [m[1], m[2]].filter((p): p is string => p !== undefined).map(Number);
  return ports.every((p) => p >= 1 && p <= 65535) && (ports.length === 1 || ports[0]! <= ports[1]!);
}

const isAny = (value: string): boolean => value === '' || value.toLowerCase() === 'any';

const rule = z
  .object({
    srcIp: z
      .string()
      .max(64)
      .optional()
      .default('')
      .refine((v) => isAny(v.trim()) || validIpv4(v.trim()), 'must be an IPv4 address or network, or "any"'),
    dstPort: z
      .string()
      .max(16)
      .optional()
      .default('')
      .refine((v) => isAny(v.trim()) || validPort(v.trim()), 'must be a port (1-65535), a range "from:to", or "any"'),
    proto: z.enum(['tcp', 'udp', 'icmp']),
    target: z.enum(['ACCEPT', 'DROP', 'REJECT']),
  })
  .refine((r) => r.proto !== 'icmp' || isAny(r.dstPort.trim()), { message: 'icmp rules take no dstPort', path: ['dstPort'] });

const chain = z.object({
  policy: z.enum(['ACCEPT', 'DROP']).optional().default('ACCEPT'),
  rules: z.array(rule).max(500).optional().default([]),
});

const schema = z
  .looseObject({
    tables: z
      .partialRecord(z.enum(['filter', 'nat']), z.record(z.string(), chain))
      .optional()
      .default({}),
  })
  .superRefine((data, issue) => {
    for (const [table, chains] of Object.entries(data.tables)) {
      const allowed: readonly string[] = CHAINS_OF_TABLE[table as keyof typeof CHAINS_OF_TABLE];
      for (const name of Object.keys(chains ?? {})) {
        if (!allowed.includes(name)) issue.addIssue({ code: 'custom', path: ['tables', table, name], message: `chain must be one of ${allowed.join(', ')}` });
      }
    }
  });

export type FirewallData = z.infer<typeof schema>;
type FirewallChain = z.infer<typeof chain>;
type FirewallRule = z.infer<typeof rule>;

/** The network iptables prints for a source: host bits cleared, `/32` for a single address. */
function canonicalSource(text: string): string {
  const m = IPV4_CIDR.exec(text)!;
  const prefix = m[5] === undefined ? 32 : Number(m[5]);
  const value = m.slice(1, 5).reduce((acc, o) => acc * 256 + Number(o), 0);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  const network = (value & mask) >>> 0;
  return `${[24, 16, 8, 0].map((shift) => (network >>> shift) & 255).join('.')}/${prefix}`;
}

/** One rule as `iptables -S` prints it (and as it is loaded). */
export function renderRule(chainName: string, r: FirewallRule): string[] {
  const words = ['-A', chainName];
  if (!isAny(r.srcIp.trim())) words.push('-s', canonicalSource(r.srcIp.trim()));
  if (r.proto === 'icmp') words.push('-p', 'icmp', '-m', 'icmp', '--icmp-type', 'any');
  else words.push('-p', r.proto, '-m', r.proto);
  if (!isAny(r.dstPort.trim())) words.push('--dport', r.dstPort.trim());
  words.push('-j', r.target);
  if (r.target === 'REJECT') words.push('--reject-with', 'icmp-port-unreachable');
  return words;
}

/** The chain's rules, policy first: what `iptables -t <table> -S <chain>` shows when it is in place. */
export function renderChain(table: string, chainName: string, c: FirewallChain): string[][] {
  const rules: string[][] = [];
  if (table === 'filter' && chainName === 'INPUT') {
    rules.push(['-A', 'INPUT', '-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'ACCEPT']);
    rules.push(['-A', 'INPUT', '-i', 'lo', '-j', 'ACCEPT']);
  }
  for (const r of c.rules) rules.push(renderRule(chainName, r));
  return [['-P', chainName, c.policy], ...rules];
}

export const firewallBundle: Bundle<FirewallData> = {
  name: 'firewall',
  parse: (data) => parseBundleData('firewall', schema, data),
  async apply(data, ctx) {
    const tables = Object.entries(data.tables).sort(([a], [b]) => a.localeCompare(b));
    if (tables.length === 0) return;
    if (!(await ctx.has('iptables'))) {
      ctx.report('ERR', 'Firewall configuration failed: iptables is not installed on this device. Nothing applied.');
      return;
    }
    for (const [table, chains] of tables) {
      let loaded = false;
      for (const [chainName, c] of Object.entries(chains ?? {}).sort(([a], [b]) => a.localeCompare(b))) {
        const outcome = await applyChain(ctx, table, chainName, c);
        if (outcome === 'failed') return;
        loaded ||= outcome === 'loaded';
      }
      if (loaded) ctx.report('INFO', `Load of new iptables rules succeeded for table ${table}.`);
    }
  },
};

async function applyChain(ctx: BundleContext, table: string, chainName: string, c: FirewallChain): Promise<'same' | 'loaded' | 'failed'> {
  const listed = await ctx.run(['iptables', '-w', '-t', table, '-S', chainName]);
  if (listed.code !== 0) {
    ctx.report('ERR', `Firewall configuration failed: cannot list ${table} ${chainName}.`, outputTail(listed));
    return 'failed';
  }
  const expected = renderChain(table, chainName, c);
  const current = listed.stdout
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  if (current.join('\n') === expected.map((words) => words.join(' ')).join('\n')) return 'same';

  ctx.report('WARN', `Current firewall rules of ${table} ${chainName} are not in compliance.`, current.join('\n'));
  const [policy, ...rules] = expected;
  for (const argv of [['-F', chainName], ...rules, policy!]) {
    const result = await ctx.run(['iptables', '-w', '-t', table, ...argv]);
    if (result.code !== 0) {
      ctx.report('ERR', `Firewall configuration failed: iptables -t ${table} ${argv.join(' ')}.`, outputTail(result));
      return 'failed';
    }
  }
  return 'loaded';
}
