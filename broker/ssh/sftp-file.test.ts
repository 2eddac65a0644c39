import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import { SFTP_STATUS, type Attrs, type SftpStream } from './sftp-answers.js';
import { SftpFile } from './sftp-file.js';

/** A download's agent channel as SftpFile uses it: data and end come from the test. */
class FakeChannel extends EventEmitter {
  destroyed = false;
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

function download(size: number) {
  const answers: { reqid: number; data?: Buffer; status?: number }[] = [];
  const sftp = {
    data: (reqid: number, data: Buffer) => answers.push({ reqid, data: Buffer.from(data) }),
    status: (reqid: number, status: number) => answers.push({ reqid, status }),
  } as unknown as SftpStream;
  const channel = new FakeChannel();
  const attrs: Attrs = { mode: 0o100644, size, uid: 0, gid: 0, atime: 0, mtime: 0 };
  const file = new SftpFile(false, channel as unknown as Channel, attrs, sftp);
  return { file, channel, answers };
}

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
