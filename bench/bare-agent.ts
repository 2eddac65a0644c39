/**
 * The keystroke row's floor (bench/remote.ts, part latency): an agent-like process with nothing of
 * ours on its path. `node --import tsx bench/bare-agent.ts <ws url of bench/bare-relay.ts>/agent`
 * dials the relay and keeps one connection waiting there. A connection's first message opens its pty
 * (`stty raw -echo; exec cat`, as the bench's consoles run) and has the next connection dialled; every
 * later message is written to the pty's master side at once (as agent/sessions/pty-input.ts does,
 * not through node-pty's thread-pool write), every read of the pty sent back as one message.
 * Prints `{"ready":true}` once the first connection is open.
 */
import fs from 'node:fs';
import { spawn as spawnPty, type IPty } from 'node-pty';
import WebSocket from 'ws';

const url = process.argv[2];
if (!url) throw new Error('usage: bare-agent.ts <relay url>/agent');

/** At once to the master side; what it does not take now (its input buffer full) through node-pty's queue. */
function writeNow(pty: IPty, fd: number, data: Buffer): void {
  let n = 0;
  try {
    n = fs.writeSync(fd, data);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
  }
  if (n < data.length) pty.write(data.subarray(n) as unknown as string);
}

function dial(first: boolean): void {
  const socket = new WebSocket(url, { perMessageDeflate: false, maxPayload: 64 * 1024 });
  let pty: IPty | undefined;
  let fd = -1;
  socket.on('open', () => first && console.log(JSON.stringify({ ready: true })));
  socket.on('message', (data: Buffer) => {
    if (pty) return void writeNow(pty, fd, data);
    pty = spawnPty('/bin/bash', ['-c', 'stty raw -echo; exec cat'], { name: 'xterm-256color', cols: 80, rows: 24, encoding: null });
    fd = (pty as unknown as { fd: number }).fd;
    pty.onData((d) => socket.send(d as unknown as Buffer));
    pty.onExit(() => socket.close());
    dial(false);
  });
  socket.on('close', () => pty?.kill());
  socket.on('error', () => socket.terminate());
}

dial(true);
