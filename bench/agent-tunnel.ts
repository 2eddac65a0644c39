/**
 * The agent's half of a tunnel alone (`npm run bench -- agent-tunnel`): the CPU of an agent-side
 * process per MB carried from its broker link to a TCP target, against a bare Node relay doing the
 * least a process can to move the same bytes, alternated twice in the same run.
 *  - agent: a child process with the agent's Mux on a WebSocket to this process (plain TCP, as the
 *    benches' agents run) and `openTcpTunnel` to a sink here; this process's Mux opens the channel
 *    and writes 32 KiB pieces, as ssh2 hands the gateway a forwarding's data, which the channel
 *    sends as 128 KiB frames.
 *  - bare pipe: a child process that connects to a source and to the same sink and pipes one into the
 *    other (Node's 64 KiB reads, a write each), no WebSocket, no mux, no credit.
 * Each child's CPU (process.cpuUsage, every thread) runs from the channel's open (the source's connect)
 * to the stream's end, with its minor page faults and voluntary context switches per MB; the sink
 * and the sender are this process, outside the figures. BENCH_AGENT_TUNNEL_MIB sets the bytes of
 * each run (default 1024 MiB).
 */
import { fork } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import WebSocket, { WebSocketServer } from 'ws';
import { openTcpTunnel } from '../agent/sessions/tunnel.js';
import { Mux, type Channel } from '../shared/mux.js';
import type { TunnelParams } from '../shared/protocol.js';
import { FROM_AGENT, FROM_BROKER } from '../shared/wire.js';

const MIB = Number(process.env.BENCH_AGENT_TUNNEL_MIB ?? 1024);
const SELF = fileURLToPath(import.meta.url);
const WINDOW = 1024 * 1024;
type Way = 'agent' | 'bare';

/** What a child reports: its CPU, faults and voluntary context switches over the transfer. */
interface Usage {
  cpuMs: number;
  faults: number;
  switches: number;
}

/** A child's usage from `start` on, sent to the parent; the child exits once it is sent. */
function report(start: { cpu: NodeJS.CpuUsage; res: NodeJS.ResourceUsage }): void {
  const cpu = process.cpuUsage(start.cpu);
  const res = process.resourceUsage();
  const usage: Usage = {
    cpuMs: (cpu.user + cpu.system) / 1000,
    faults: res.minorPageFault - start.res.minorPageFault,
    switches: res.voluntaryContextSwitches - start.res.voluntaryContextSwitches,
  };
  process.send?.(usage, () => process.exit(0));
}

const mark = () => ({ cpu: process.cpuUsage(), res: process.resourceUsage() });

/** The child: the agent's link and tunnel, or the bare pipe. */
async function child(way: Way, a: string, b: string): Promise<void> {
  if (way === 'bare') {
    const out = net.connect({ port: Number(b), host: '127.0.0.1', noDelay: true });
    await new Promise((r) => out.once('connect', r));
    const start = mark();
    const source = net.connect({ port: Number(a), host: '127.0.0.1', noDelay: true });
    source.once('end', () => report(start));
    source.pipe(out);
    return;
  }
  const ws = new WebSocket(`ws://127.0.0.1:${a}`, { perMessageDeflate: false });
  // In the 'open' listener itself: the broker's open may come in the read that completes the handshake.
  ws.once('open', () => {
    new Mux(ws, {
      receives: FROM_BROKER,
      window: WINDOW,
      leaseReads: true,
      onOpen: (channel: Channel) => {
        const start = mark();
        channel.once('end', () => report(start));
        return openTcpTunnel(channel, channel.params as TunnelParams, { stateDir: os.tmpdir(), log: () => {} });
      },
    });
  });
}

/** A sink here that resolves once `total` bytes arrived. */
async function sink(total: number): Promise<{ port: number; all: Promise<void>; close: () => void }> {
  let got = 0;
  let done!: () => void;
  const all = new Promise<void>((resolve) => (done = resolve));
  const server = net.createServer((s) => s.on('data', (d: Buffer) => ((got += d.length) >= total ? done() : undefined)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as net.AddressInfo).port, all, close: () => server.close() };
}

/** Writes `total` bytes in `piece`-sized writes, waiting for drain, then ends. */
function pump(out: { write(b: Buffer): boolean; once(e: 'drain', f: () => void): unknown; end(): unknown }, total: number, piece: number): void {
  const chunk = Buffer.alloc(piece, 7);
  let sent = 0;
  const next = () => {
    while (sent < total) {
      sent += piece;
      // A fresh buffer each, as ssh2's decrypted packets are: the channel frames the pieces where they lie.
      if (!out.write(Buffer.from(chunk))) return void out.once('drain', next);
    }
    out.end();
  };
  next();
}

async function run(way: Way): Promise<Usage & { mbps: number }> {
  const total = MIB * 1024 * 1024;
  const target = await sink(total);
  const t0 = process.hrtime.bigint();
  let usage: Promise<Usage>;
  let close: () => void;
  if (way === 'bare') {
    const source = net.createServer((s) => pump(s, total, 128 * 1024));
    await new Promise<void>((resolve) => source.listen(0, '127.0.0.1', resolve));
    const proc = fork(SELF, ['child', way, String((source.address() as net.AddressInfo).port), String(target.port)], { execArgv: process.execArgv });
    usage = new Promise((resolve) => proc.once('message', resolve));
    close = () => source.close();
  } else {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
    await new Promise((r) => wss.once('listening', r));
    const proc = fork(SELF, ['child', way, String((wss.address() as net.AddressInfo).port)], { execArgv: process.execArgv });
    usage = new Promise((resolve) => proc.once('message', resolve));
    const ws = await new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
    const mux = new Mux(ws, { receives: FROM_AGENT, window: WINDOW });
    const { channel } = await mux.open('tunnel', { proto: 'tcp', port: target.port, dst: '127.0.0.1' });
    pump(channel, total, 32 * 1024);
    close = () => {
      ws.terminate();
      wss.close();
    };
  }
  await target.all;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const figures = await usage;
  close();
  target.close();
  return { ...figures, mbps: MIB / seconds };
}

export async function benchAgentTunnel(log: (line: string) => void): Promise<void> {
  log(`agent tunnel: ${MIB} MiB from the broker link to a target, the agent's process against a bare Node pipe, alternated twice`);
  for (let round = 1; round <= 2; round++)
    for (const way of ['bare', 'agent'] as const) {
      const r = await run(way);
      log(
        `  ${way === 'agent' ? 'agent (link, mux, tunnel)' : 'bare pipe'} (round ${round}): ${r.mbps.toFixed(0)} MiB/s; per MiB: CPU ${(r.cpuMs / MIB).toFixed(2)} ms, ${(r.faults / MIB).toFixed(1)} page faults, ${(r.switches / MIB).toFixed(1)} context switches (load average ${os.loadavg()[0].toFixed(1)})`,
      );
    }
}

if (process.argv[2] === 'child') void child(process.argv[3] as Way, process.argv[4], process.argv[5]);
