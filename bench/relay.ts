/**
 * The broker's tunnel relay alone (`npm run bench -- relay`, or `relay upload` / `relay download`):
 * CPU of the broker's process per GB through `Relay` and a channel whose device takes everything
 * (credit at once, frames flushed in the next turn), the user's WebSocket in a child process. The
 * anchor is a bare ws server in the same process reading (upload) or sending (download) the same
 * bytes, measured in the same run. Upload: 256 KiB frames, as `fleet connect` sends them. Download:
 * 128 KiB frames handed to the channel in three pieces a turn, as the mux hands on the agent's frames.
 * BENCH_RELAY_MIB sets the bytes of each run (default 512 MiB).
 */
import { fork } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import WebSocket, { WebSocketServer } from 'ws';
import { Relay } from '../broker/remote/relay.js';
import { Channel, DEFAULT_WINDOW, type ChannelHost, type FramePayload } from '../shared/mux-channel.js';
import { BULK_FRAME } from '../shared/mux-scheduler.js';

const MIB = Number(process.env.BENCH_RELAY_MIB ?? 512);
const SELF = fileURLToPath(import.meta.url);
type Direction = 'upload' | 'download';
type Way = 'relay' | 'bare';

const sizeOf = (p: FramePayload) => (Buffer.isBuffer(p) ? p.length : p.reduce((n, b) => n + b.length, 0));

/** The user's end, in a child process: sends MIB in 256 KiB frames (upload), or reads until MIB arrived (download). */
async function child(direction: Direction, port: number): Promise<void> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}`, { perMessageDeflate: false });
  if (direction === 'download') {
    // Listening from the start: the first frames may come in the read that opens the socket.
    let got = 0;
    ws.on('message', (data: Buffer, isBinary) => {
      if (isBinary && (got += data.length) >= MIB * 1024 * 1024) ws.close();
    });
    return;
  }
  await new Promise((r) => ws.once('open', r));
  const chunk = Buffer.alloc(256 * 1024, 7);
  let left = MIB * 4;
  const pump = () => {
    while (left > 0 && ws.bufferedAmount < 1024 * 1024) {
      ws.send(chunk);
      left--;
    }
    if (left > 0) setImmediate(pump);
  };
  pump();
}

/** One run: CPU seconds of this process per GB, from the first byte to the last. */
async function run(direction: Direction, way: Way): Promise<number> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', maxPayload: 4 * 1024 * 1024, perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  const total = MIB * 1024 * 1024;
  let start: NodeJS.CpuUsage | undefined;
  let moved = 0;
  const result = new Promise<number>((resolve) => {
    const finish = () => {
      const cpu = process.cpuUsage(start);
      resolve((cpu.user + cpu.system) / 1e6 / (moved / 1e9));
    };
    wss.once('connection', (server) => {
      if (way === 'bare' && direction === 'upload') {
        server.on('message', (data: Buffer) => {
          start ??= process.cpuUsage();
          if ((moved += data.length) >= total) finish();
        });
        return;
      }
      let waiting: Channel | undefined;
      const host: ChannelHost = {
        send: () => {},
        sendData: (_ch, payload, flushed) => {
          const n = sizeOf(payload);
          start ??= process.cpuUsage();
          moved += n;
          setImmediate(() => {
            flushed?.();
            channel.onCredit(n);
          });
          if (moved >= total) finish();
        },
        schedule: (c) => {
          waiting = c;
          setImmediate(() => {
            while (waiting && waiting.sendFrame(BULK_FRAME) > 0);
          });
        },
        forget: () => {},
      };
      const channel = new Channel(host, 1, 'tunnel', { proto: 'tcp', port: 1, dst: '127.0.0.1' }, DEFAULT_WINDOW, false);
      if (way === 'relay') new Relay(server, channel, { kind: 'tunnel', info: {} }).start();
      if (direction === 'upload') return;
      // Download: 128 KiB frames, one a turn, in three pieces (the bare way sends each frame whole).
      (channel as unknown as { receiveCredit: number }).receiveCredit = Number.MAX_SAFE_INTEGER;
      const frame = Buffer.alloc(128 * 1024, 5);
      start = process.cpuUsage();
      const pump = () => {
        if (moved >= total) return;
        if (way === 'bare') {
          if (server.bufferedAmount < 512 * 1024) {
            server.send(frame);
            moved += frame.length;
          }
        } else if (!channel.isPaused() && channel.readableLength < DEFAULT_WINDOW / 2) {
          for (const [from, to] of [
            [0, 60_000],
            [60_000, 125_536],
            [125_536, frame.length],
          ])
            channel.onData(frame.subarray(from, to));
          moved += frame.length;
        }
        setImmediate(pump);
      };
      pump();
      server.once('close', finish);
    });
  });
  const user = fork(SELF, ['child', direction, String((wss.address() as AddressInfo).port)], { execArgv: process.execArgv });
  const figure = await result;
  user.kill();
  await new Promise((r) => wss.close(r));
  for (const client of wss.clients) client.terminate();
  return figure;
}

export async function benchRelay(log: (line: string) => void, part?: string): Promise<void> {
  for (const direction of ['upload', 'download'] as const) {
    if (part && part !== direction) continue;
    log(`relay ${direction}: ${MIB} MiB through the broker's relay and a bare ws server, alternated twice (load average ${os.loadavg()[0].toFixed(1)})`);
    const figures: Record<Way, number[]> = { relay: [], bare: [] };
    for (let round = 0; round < 2; round++) for (const way of ['bare', 'relay'] as const) figures[way].push(await run(direction, way));
    const show = (xs: number[]) => xs.map((x) => x.toFixed(2)).join(', ');
    log(`  CPU per GB, broker's process: relay ${show(figures.relay)} s; bare ws ${show(figures.bare)} s`);
    const ratio = figures.relay.reduce((a, b) => a + b, 0) / figures.bare.reduce((a, b) => a + b, 0);
    log(`  relay / bare ws = ${ratio.toFixed(2)} (load average ${os.loadavg()[0].toFixed(1)})`);
  }
}

if (process.argv[2] === 'child') void child(process.argv[3] as Direction, Number(process.argv[4]));
else if (process.argv[1] && process.argv[1] === SELF) {
  benchRelay((line) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`), process.argv[2]).then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
