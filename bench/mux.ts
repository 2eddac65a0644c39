/**
 * What the channel multiplexer costs a keystroke (`npm run bench -- mux`): both ends of a link in one
 * process over a loopback WebSocket, one byte written on the broker's end of a console channel and
 * echoed by the device's end, one round trip after another; against the same round trips over a bare
 * `ws` pair in the same process (one message each way, no channel, credit or scheduling), taken in
 * alternate rounds. Printed as CPU per round trip (`process.cpuUsage`, both ends and the loopback's
 * system time), which the remote bench's keystroke row cannot resolve to a microsecond: there the
 * processes' CPU swings by tens of microseconds from run to run.
 */
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import type { Channel } from '../shared/mux.js';
import { muxPair } from '../test/support/mux-pair.js';

const ROUND_TRIPS = Number(process.env.BENCH_MUX_ROUNDTRIPS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_MUX_ROUNDS ?? 3);

/** An echo path: `send` writes one byte, `onEcho` hears each echo, `close` tears the path down. */
interface EchoPath {
  send(key: Buffer): void;
  onEcho(listener: () => void): void;
  close(): void;
}

/** CPU microseconds per one-byte round trip over `path`, `n` one after another (after 500 unmeasured). */
async function cpuPerRoundTrip(n: number, path: EchoPath): Promise<number> {
  let echoed: () => void = () => {};
  path.onEcho(() => echoed());
  const key = Buffer.from('k');
  const roundTrip = () => new Promise<void>((resolve) => ((echoed = resolve), path.send(key)));
  try {
    for (let i = 0; i < Math.min(500, n); i++) await roundTrip(); // first-run work out of the figure
    const start = process.cpuUsage();
    for (let i = 0; i < n; i++) await roundTrip();
    const used = process.cpuUsage(start);
    return (used.user + used.system) / n;
  } finally {
    path.close();
  }
}

/** A bare ws pair: the server end echoes each message. */
async function bareEcho(): Promise<EchoPath> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  wss.on('connection', (ws) => ws.on('message', (data, isBinary) => ws.send(data as Buffer, { binary: isBinary })));
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false });
  await new Promise((r) => client.once('open', r));
  return {
    send: (key) => client.send(key),
    onEcho: (listener) => client.on('message', listener),
    close: () => (client.terminate(), wss.close()),
  };
}

/** A console channel of a broker/device mux pair: the device's end echoes each read. */
async function muxEcho(): Promise<EchoPath> {
  const pair = await muxPair(async (device: Channel) => {
    device.on('data', (chunk: Buffer) => device.write(chunk));
  }, 1024 * 1024);
  const { channel } = await pair.broker.open('console', { cols: 80, rows: 24 });
  return {
    send: (key) => channel.write(key),
    onEcho: (listener) => channel.on('data', listener),
    close: () => (channel.destroy(), pair.close()),
  };
}

export async function benchMux(log: (line: string) => void): Promise<void> {
  log(`mux: ${ROUND_TRIPS} one-byte echo round trips per round, both ends in this process, bare ws and mux alternated, ${ROUNDS} rounds`);
  const bare: number[] = [];
  const mux: number[] = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const load = (await import('node:os')).loadavg()[0].toFixed(1);
    bare.push(await cpuPerRoundTrip(ROUND_TRIPS, await bareEcho()));
    mux.push(await cpuPerRoundTrip(ROUND_TRIPS, await muxEcho()));
    log(`  round ${round} (load ${load}): bare ws ${bare.at(-1)!.toFixed(1)} µs, mux console channel ${mux.at(-1)!.toFixed(1)} µs of CPU per round trip`);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const b = median(bare);
  const m = median(mux);
  log(
    `  mux / bare ws, CPU per round trip (medians): ${(m / b).toFixed(2)} (+${(m - b).toFixed(1)} µs: the channels, credit and scheduling of two writes and two reads)`,
  );
}
