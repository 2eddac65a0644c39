import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import { SFTP_STATUS, type Attrs, type SftpStream } from './sftp-answers.js';
import { MAX_WAITING_READS, READ_AHEAD, SftpFile, type FileFlow } from './sftp-file.js';
import { SFTP_READ_MAX, SftpFlow } from './sftp-flow.js';

/** A download's agent channel as SftpFile uses it: data and end come from the test. */
class FakeChannel extends EventEmitter {
  destroyed = false;
  /** upload: what write() answers (false: the device's channel is full), and what was written */
  full = false;
  written: Buffer[] = [];
  write(data: Buffer) {
    this.written.push(data);
    return !this.full;
  }
  errored: Error | null = null;
  writableEnded = false;
  paused = false;
  end() {
    this.writableEnded = true;
  }
  pause() {
    this.paused = true;
  }
  resume() {
    this.paused = false;
  }
  isPaused() {
    return this.paused;
  }
  destroy() {
    this.destroyed = true;
  }
}

/** The SSH channel's flow as a test sets it: `backlogged` while the client's window is spent; holds recorded. */
class FakeFlow implements FileFlow {
  backlogged = false;
  canAnswer() {
    return !this.backlogged;
  }
  readonly holders = new Set<object>();
  hold(holder: object) {
    this.holders.add(holder);
  }
  release(holder: object) {
    this.holders.delete(holder);
  }
  /** answers taken straight into SSH packets (SftpFlow.answerData): none unless `direct` */
  direct = false;
  readonly sentDirect: { reqid: number; parts: readonly Buffer[]; length: number }[] = [];
  answerData(reqid: number, parts: readonly Buffer[], length: number) {
    if (this.direct) this.sentDirect.push({ reqid, parts, length });
    return this.direct;
  }
}

function open(writing: boolean, size: number) {
  const answers: { reqid: number; data?: Buffer; status?: number }[] = [];
  const sftp = {
    data: (reqid: number, data: Buffer) => answers.push({ reqid, data: Buffer.from(data) }),
    status: (reqid: number, status: number) => answers.push({ reqid, status }),
  } as unknown as SftpStream;
  const channel = new FakeChannel();
  const flow = new FakeFlow();
  const attrs: Attrs = { mode: 0o100644, size, uid: 0, gid: 0, atime: 0, mtime: 0 };
  const file = new SftpFile(writing, channel as unknown as Channel, attrs, sftp, flow);
  return { file, channel, answers, flow };
}

const download = (size: number) => open(false, size);

/** Reads `content` as OpenSSH's sftp does (READs of `readSize`, `inFlight` ahead) while the device sends it in `chunkSize` pieces. */
function copy(content: Buffer, chunkSize: number, readSize: number, inFlight: number): Buffer {
  const { file, channel, answers } = download(content.length);
  let reqid = 0;
  let asked = 0;
  const ask = () => {
    while (reqid - answers.length < inFlight && asked < content.length + readSize) {
      file.read(++reqid, asked, readSize);
      asked += readSize;
    }
  };
  ask();
  for (let at = 0; at < content.length; at += chunkSize) {
    channel.emit('data', content.subarray(at, at + chunkSize));
    ask();
  }
  channel.emit('end');
  ask();
  const sorted = [...answers].sort((a, b) => a.reqid - b.reqid);
  expect(sorted.at(-1)?.status).toBe(SFTP_STATUS.eof);
  return Buffer.concat(sorted.flatMap((a) => (a.data ? [a.data] : [])));
}

describe('SftpFile reads', () => {
  const content = crypto.randomBytes(300_000);

  it('hands out the bytes in order whether the device sends more or less than a READ asks', () => {
    for (const chunkSize of [1000, 32_768, 50_000, 64 * 1024, 300_000]) {
      for (const readSize of [32_768, 7000]) {
        expect(copy(content, chunkSize, readSize, 64).equals(content), `chunks of ${chunkSize}, reads of ${readSize}`).toBe(true);
      }
    }
  });

  it('holds at most its read-ahead from the device: the channel is paused beyond it and resumed as READs take it', () => {
    const { file, channel } = download(8 * 1024 * 1024);
    for (let i = 0; i < 16 && !channel.paused; i++) channel.emit('data', crypto.randomBytes(128 * 1024));
    expect(channel.paused).toBe(true);
    for (let i = 0; i < 16; i++) file.read(i + 1, i * 32_768, 32_768);
    expect(channel.paused).toBe(false);
  });
});

describe('SftpFile reads, one copy', () => {
  it("hands a READ spanning two of the device's frames to the SSH channel as views of those frames, never joined into a copy", () => {
    const frames = [crypto.randomBytes(128 * 1024), crypto.randomBytes(128 * 1024), crypto.randomBytes(128 * 1024)];
    const { file, channel, answers, flow } = download(3 * 128 * 1024);
    flow.direct = true;
    file.read(1, 0, SFTP_READ_MAX);
    file.read(2, SFTP_READ_MAX, SFTP_READ_MAX);
    for (const frame of frames) channel.emit('data', frame);
    channel.emit('end');
    expect(answers).toEqual([]);
    expect(flow.sentDirect.map((a) => [a.reqid, a.length])).toEqual([
      [1, SFTP_READ_MAX],
      [2, 3 * 128 * 1024 - SFTP_READ_MAX],
    ]);
    // The first READ: all of the first frame and the head of the second, each the frame's own memory.
    const [a, b] = flow.sentDirect[0].parts;
    expect(a.buffer).toBe(frames[0].buffer);
    expect(a.byteOffset).toBe(frames[0].byteOffset);
    expect(b.buffer).toBe(frames[1].buffer);
    expect(Buffer.concat(flow.sentDirect.flatMap((d) => d.parts)).equals(Buffer.concat(frames))).toBe(true);
  });
});

describe('SftpFile reads, bounded', () => {
  it('answers no READ while the client has no window for it: the data stays at the read-ahead, then goes out in order', () => {
    const content = crypto.randomBytes(4 * READ_AHEAD);
    const { file, channel, answers, flow } = download(content.length);
    flow.backlogged = true;
    for (let i = 0; i < 64; i++) file.read(i + 1, i * SFTP_READ_MAX, SFTP_READ_MAX);
    let sent = 0;
    while (!channel.paused && sent < content.length) {
      channel.emit('data', content.subarray(sent, sent + 128 * 1024));
      sent += 128 * 1024;
    }
    expect(answers).toHaveLength(0);
    expect(channel.paused).toBe(true);
    expect(sent).toBeLessThanOrEqual(READ_AHEAD + 128 * 1024);
    flow.backlogged = false;
    file.resume();
    expect(answers.map((a) => a.reqid)).toEqual(answers.map((_, i) => i + 1));
    expect(Buffer.concat(answers.map((a) => a.data!)).equals(content.subarray(0, answers.length * SFTP_READ_MAX))).toBe(true);
    expect(channel.paused).toBe(false);
  });

  it('answers a READ of any length with at most the size the client was told, the rest read next', () => {
    const content = crypto.randomBytes(SFTP_READ_MAX + 1000);
    const { file, channel, answers } = download(content.length);
    file.read(1, 0, 0xffffffff);
    channel.emit('data', content);
    expect(answers[0].data).toHaveLength(SFTP_READ_MAX);
    file.read(2, SFTP_READ_MAX, 0xffffffff);
    channel.emit('end');
    expect(answers[1].data!.equals(content.subarray(SFTP_READ_MAX))).toBe(true);
    file.read(3, content.length, 32_768);
    expect(answers[2].status).toBe(SFTP_STATUS.eof);
  });

  it('fails READs past the number that may wait, and still answers those that wait', () => {
    const content = crypto.randomBytes(64 * 1024);
    const { file, channel, answers } = download(10 * 1024 * 1024);
    for (let i = 0; i < MAX_WAITING_READS + 50; i++) file.read(i + 1, i * 512, 512);
    const refused = answers.filter((a) => a.status === SFTP_STATUS.failure);
    expect(refused).toHaveLength(50);
    expect(refused[0].reqid).toBe(MAX_WAITING_READS + 1);
    channel.emit('data', content);
    channel.emit('end');
    const data = answers.filter((a) => a.data);
    expect(Buffer.concat(data.map((a) => a.data!)).equals(content.subarray(0, MAX_WAITING_READS * 512))).toBe(true);
  });

  it('a file shorter than one READ: its bytes, then the end for the READs beyond it', () => {
    const content = crypto.randomBytes(1234);
    const { file, channel, answers } = download(content.length);
    for (let i = 0; i < 4; i++) file.read(i + 1, i * SFTP_READ_MAX, SFTP_READ_MAX);
    channel.emit('data', content.subarray(0, 1000));
    expect(answers).toHaveLength(0);
    channel.emit('data', content.subarray(1000));
    channel.emit('end');
    expect(answers[0]).toMatchObject({ reqid: 1 });
    expect(answers[0].data!.equals(content)).toBe(true);
    expect(answers.slice(1).map((a) => a.status)).toEqual([SFTP_STATUS.eof, SFTP_STATUS.eof, SFTP_STATUS.eof]);
  });
});

describe('SftpFile writes, bounded', () => {
  it("holds the client's window while the device's channel is full, and answers the WRITEs in order once it drains", () => {
    const { file, channel, answers, flow } = open(true, 0);
    file.write(1, 0, Buffer.alloc(1000));
    expect(answers).toEqual([{ reqid: 1, status: SFTP_STATUS.ok }]);
    channel.full = true;
    for (let i = 1; i < 20; i++) file.write(i + 1, i * 1000, Buffer.alloc(1000));
    expect(answers).toHaveLength(1);
    expect(flow.holders.size).toBe(1);
    expect(channel.listenerCount('drain')).toBe(1);
    channel.full = false;
    channel.emit('drain');
    expect(answers.map((a) => a.reqid)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    expect(answers.every((a) => a.status === SFTP_STATUS.ok)).toBe(true);
    expect(flow.holders.size).toBe(0);
    expect(Buffer.concat(channel.written)).toHaveLength(20_000);
  });

  it('a device channel that closes while WRITEs wait fails them and lets go of the window', () => {
    const { file, channel, answers, flow } = open(true, 0);
    channel.full = true;
    file.write(1, 0, Buffer.alloc(10));
    file.write(2, 10, Buffer.alloc(10));
    channel.destroyed = true;
    channel.emit('close');
    expect(answers.map((a) => a.status)).toEqual([SFTP_STATUS.failure, SFTP_STATUS.failure]);
    expect(flow.holders.size).toBe(0);
    file.write(3, 20, Buffer.alloc(10));
    expect(answers[2]).toMatchObject({ reqid: 3, status: SFTP_STATUS.failure });
  });
});

describe('SftpFile writes to a device that failed', () => {
  it('fails the WRITEs waiting for the channel once the device answers the upload failed, and those after, letting go of the window', () => {
    const { file, channel, answers, flow } = open(true, 0);
    channel.full = true;
    file.write(1, 0, Buffer.alloc(10));
    file.write(2, 10, Buffer.alloc(10));
    expect(flow.holders.size).toBe(1);
    channel.emit('control', { type: 'result', ok: false, bytes: 10, sha256: '', error: 'The device is out of disk space.' });
    expect(answers.map((a) => [a.reqid, a.status])).toEqual([
      [1, SFTP_STATUS.failure],
      [2, SFTP_STATUS.failure],
    ]);
    expect(flow.holders.size).toBe(0);
    file.write(3, 20, Buffer.alloc(10));
    expect(answers[2]).toMatchObject({ reqid: 3, status: SFTP_STATUS.failure });
    expect(channel.written).toHaveLength(2);
  });
});

describe('SftpFile reads through SftpFlow, a client that stops opening its window', () => {
  /** What SftpFlow reads of ssh2's SFTP stream, its connection's packets captured (a fake, no encryption). */
  function ssh2Stream(window: number) {
    const packets: Buffer[] = [];
    const viaSsh2: number[] = [];
    const raw = {
      outgoing: { id: 7, state: 'open', window, packetSize: 32 * 1024 },
      incoming: { window: 2 * 1024 * 1024 },
      _buffer: [] as Buffer[],
      _waitWindow: false,
      _chunkcb: undefined as (() => void) | undefined,
      _protocol: {
        _kexinit: undefined,
        _cipher: { encrypt: (packet: Buffer) => void packets.push(packet) },
        _packetRW: { write: { allocStart: 5, alloc: (n: number) => Buffer.alloc(5 + n), finalize: (p: Buffer) => p } },
        channelData() {},
        channelWindowAdjust() {},
      },
      push: () => true,
      data: (reqid: number) => void viaSsh2.push(reqid),
      status: () => {},
    };
    /** As ssh2's CHANNEL_WINDOW_ADJUST handler does. */
    const adjust = (amount: number) => {
      raw.outgoing.window += amount;
      if (!raw._waitWindow) return;
      raw._waitWindow = false;
      raw._chunkcb?.call(raw);
    };
    return { raw, packets, viaSsh2, adjust };
  }

  it('answers nothing and holds at most the read-ahead while the window is spent, then answers whole once it opens', () => {
    const { raw, packets, viaSsh2, adjust } = ssh2Stream(2 * 1024 * 1024);
    const flow = new SftpFlow(raw as unknown as SftpStream);
    flow.start();
    const channel = new FakeChannel();
    const content = crypto.randomBytes(4 * READ_AHEAD);
    const file = new SftpFile(
      false,
      channel as unknown as Channel,
      { mode: 0o100644, size: content.length, uid: 0, gid: 0, atime: 0, mtime: 0 },
      raw as unknown as SftpStream,
      flow,
    );
    flow.onWindow(() => file.resume());
    // The client spent its window and asks for more than the device may send ahead.
    raw.outgoing.window = 100;
    for (let i = 0; i < 16; i++) file.read(i + 1, i * SFTP_READ_MAX, SFTP_READ_MAX);
    let sent = 0;
    while (!channel.paused && sent < content.length) {
      channel.emit('data', content.subarray(sent, sent + 128 * 1024));
      sent += 128 * 1024;
    }
    expect(packets).toEqual([]);
    expect(viaSsh2).toEqual([]);
    expect(channel.paused).toBe(true);
    expect(sent).toBeLessThanOrEqual(READ_AHEAD + 128 * 1024);
    // The window opens by 1 MiB: the answers that fit whole go, in SSH packets of at most 32 KiB.
    adjust(1024 * 1024);
    expect(viaSsh2).toEqual([]);
    const answered = Math.floor((1024 * 1024 + 100) / (SFTP_READ_MAX + 13));
    const payload = Buffer.concat(packets.map((p) => p.subarray(5 + 9, 5 + 9 + p.readUInt32BE(5 + 5))));
    expect(payload.length).toBe(answered * (SFTP_READ_MAX + 13));
    expect(packets.every((p) => p[5] === 94 && p.readUInt32BE(6) === 7 && p.readUInt32BE(10) <= 32 * 1024)).toBe(true);
    for (let i = 0; i < answered; i++) {
      const answer = payload.subarray(i * (SFTP_READ_MAX + 13), (i + 1) * (SFTP_READ_MAX + 13));
      expect([answer[4], answer.readUInt32BE(5), answer.readUInt32BE(9)]).toEqual([103, i + 1, SFTP_READ_MAX]);
      expect(answer.subarray(13).equals(content.subarray(i * SFTP_READ_MAX, (i + 1) * SFTP_READ_MAX))).toBe(true);
    }
  });
});
