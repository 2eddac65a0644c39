import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { Caller, Prepared } from '../remote/sessions.js';
import { MAX_WAITING_READS } from './sftp-file.js';
import { SFTP_READ_MAX } from './sftp-flow.js';
import { SFTP_MAX_HANDLES, SFTP_STATUS, SftpBridge, type SftpStream } from './sftp.js';

/** ssh2's SFTP stream as the bridge sees it: requests are events, answers are recorded. */
class FakeSftp extends EventEmitter {
  readonly answers: { reqid: number; kind: string; value: unknown }[] = [];
  handle(reqid: number, handle: Buffer) {
    this.answers.push({ reqid, kind: 'handle', value: handle });
  }
  status(reqid: number, code: number, message?: string) {
    this.answers.push({ reqid, kind: 'status', value: { code, message } });
  }
  data(reqid: number, data: Buffer) {
    this.answers.push({ reqid, kind: 'data', value: data });
  }
  name(reqid: number, names: unknown[]) {
    this.answers.push({ reqid, kind: 'name', value: names });
  }
  attrs(reqid: number, attrs: unknown) {
    this.answers.push({ reqid, kind: 'attrs', value: attrs });
  }
  end() {}
  destroy() {}
  async answer(reqid: number) {
    await expect.poll(() => this.answers.find((a) => a.reqid === reqid)).toBeTruthy();
    return this.answers.find((a) => a.reqid === reqid)!;
  }
}

function bridge(info: Record<string, unknown>) {
  const sftp = new FakeSftp();
  const opened: unknown[] = [];
  const finished: { reason: string; result?: string }[] = [];
  const sessions = {
    authorizeAndOpen: async (_c: Caller, _k: string, _d: string, request: unknown, params: unknown): Promise<Prepared> => {
      opened.push({ request, params });
      return { ok: true, channel: { destroy() {} }, relayOptions: { kind: 'copy', info }, auditId: 1, startedAt: Date.now() } as unknown as Prepared;
    },
    adopt: () => {},
    finish: async (_a: number, _s: number, end: { reason: string; result?: string }) => void finished.push(end),
  };
  new SftpBridge(sftp as unknown as SftpStream, {} as Caller, 'dev', sessions as never).start();
  return { sftp, opened, finished };
}

const entry = (name: string, type = 'file', size = 1) => ({ name, type, size, mtime: '2026-01-02T03:04:05.000Z' });

describe('SftpBridge directories', () => {
  it('opens a directory as a list decided as a download of it, hands names out in pieces, then the end', async () => {
    const entries = Array.from({ length: 230 }, (_, i) => entry(`f${i}`));
    const { sftp, opened, finished } = bridge({ path: '/srv', entries, truncated: false });
    sftp.emit('OPENDIR', 1, '/srv/');
    const open = await sftp.answer(1);
    expect(open.kind).toBe('handle');
    expect(opened[0]).toEqual({ request: { action: 'copy', direction: 'download', path: '/srv' }, params: { direction: 'list', path: '/srv' } });
    expect(finished[0]).toMatchObject({ reason: expect.stringMatching(/listed 230 entries/) });
    let names = 0;
    for (let reqid = 2; ; reqid++) {
      sftp.emit('READDIR', reqid, open.value);
      const got = await sftp.answer(reqid);
      if (got.kind === 'status') {
        expect(got.value).toMatchObject({ code: SFTP_STATUS.eof });
        break;
      }
      names += (got.value as unknown[]).length;
    }
    expect(names).toBe(230);
    // A stat of a listed entry answers from the listing: no further open.
    sftp.emit('STAT', 50, '/srv/f7');
    expect((await sftp.answer(50)).value).toMatchObject({ size: 1, mtime: Date.parse('2026-01-02T03:04:05Z') / 1000 });
    expect(opened).toHaveLength(1);
  });

  it('ends a cut listing in a failure, and a symlink is a link to lstat but asks the device for stat', async () => {
    const { sftp, opened } = bridge({ path: '/srv', entries: [entry('link', 'symlink', 0)], truncated: true });
    sftp.emit('OPENDIR', 1, '/srv');
    const open = await sftp.answer(1);
    sftp.emit('READDIR', 2, open.value);
    const [link] = (await sftp.answer(2)).value as { attrs: { mode: number }; longname: string }[];
    expect(link.attrs.mode & 0o170000).toBe(0o120000);
    expect(link.longname).toMatch(/^l/);
    sftp.emit('READDIR', 3, open.value);
    expect((await sftp.answer(3)).value).toMatchObject({ code: SFTP_STATUS.failure, message: expect.stringMatching(/more entries/) });
    sftp.emit('LSTAT', 4, '/srv/link');
    expect(((await sftp.answer(4)).value as { mode: number }).mode & 0o170000).toBe(0o120000);
    sftp.emit('STAT', 5, '/srv/link');
    await sftp.answer(5);
    expect(opened).toHaveLength(2);
  });

  it('refuses a malformed listing from the device, audited as an error', async () => {
    const { sftp, finished } = bridge({ path: '/srv', entries: [{ name: 'x/../../y', type: 'weird' }], truncated: false });
    sftp.emit('OPENDIR', 1, '/srv');
    expect((await sftp.answer(1)).value).toMatchObject({ code: SFTP_STATUS.failure, message: expect.stringMatching(/malformed/) });
    expect(finished[0]).toMatchObject({ result: 'error' });
  });

  it('bounds open directories with open files, and makes a directory as an upload decision', async () => {
    const { sftp, opened } = bridge({ path: '/srv', entries: [], truncated: false });
    for (let i = 0; i < SFTP_MAX_HANDLES; i++) {
      sftp.emit('OPENDIR', i + 1, '/srv');
      expect((await sftp.answer(i + 1)).kind).toBe('handle');
    }
    sftp.emit('OPENDIR', 100, '/srv');
    expect((await sftp.answer(100)).value).toMatchObject({ code: SFTP_STATUS.failure, message: expect.stringMatching(/at most/) });
    sftp.emit('MKDIR', 101, '/srv/new', { mode: 0o40750 });
    expect((await sftp.answer(101)).value).toMatchObject({ code: SFTP_STATUS.ok });
    expect(opened.at(-1)).toEqual({
      request: { action: 'copy', direction: 'upload', path: '/srv/new' },
      params: { direction: 'mkdir', path: '/srv/new', mode: 0o750 },
    });
  });
});

describe('SftpBridge rm, rmdir and rename', () => {
  it('maps each onto its copy direction, decided as an upload of the path (a rename of its source, the target passed on), answered ok', async () => {
    const { sftp, opened, finished } = bridge({ path: '/srv/a/x' });
    sftp.emit('REMOVE', 1, '/srv/a/x');
    sftp.emit('RMDIR', 2, '/srv/a/d/');
    sftp.emit('RENAME', 3, '/srv/a/old', 'rel/new');
    for (const reqid of [1, 2, 3]) expect((await sftp.answer(reqid)).value).toMatchObject({ code: SFTP_STATUS.ok });
    expect(opened).toEqual([
      { request: { action: 'copy', direction: 'upload', path: '/srv/a/x' }, params: { direction: 'remove', path: '/srv/a/x' } },
      { request: { action: 'copy', direction: 'upload', path: '/srv/a/d' }, params: { direction: 'rmdir', path: '/srv/a/d' } },
      { request: { action: 'copy', direction: 'upload', path: '/srv/a/old' }, params: { direction: 'rename', path: '/srv/a/old', to: '/rel/new' } },
    ]);
    expect(finished.map((f) => f.reason)).toEqual(['removed (sftp)', 'directory removed (sftp)', 'renamed to /rel/new (sftp)']);
  });

  it('answers a refusal as permission denied, and still refuses readlink and symlink', async () => {
    const sftp = new FakeSftp();
    const sessions = {
      authorizeAndOpen: async (): Promise<Prepared> =>
        ({
          ok: false,
          frame: { type: 'error', code: 403, error: 'forbidden', message: 'Not allowed: outside', refusal: 'path_outside_grant' },
        }) as unknown as Prepared,
      adopt: () => {},
      finish: async () => {},
    };
    new SftpBridge(sftp as unknown as SftpStream, {} as Caller, 'dev', sessions as never).start();
    sftp.emit('RENAME', 1, '/srv/a/x', '/srv/b/x');
    expect((await sftp.answer(1)).value).toMatchObject({ code: SFTP_STATUS.permissionDenied });
    sftp.emit('SYMLINK', 2, '/srv/a/l', '/etc/shadow');
    expect((await sftp.answer(2)).value).toMatchObject({ code: SFTP_STATUS.opUnsupported });
  });

  it('opens its copies without a checksum (sftp never reads one, so the device hashes nothing)', async () => {
    const { sftp, opened } = bridge({ size: 5, mode: 0o644 });
    sftp.emit('STAT', 1, '/srv/file');
    expect((await sftp.answer(1)).kind).toBe('attrs');
    expect(opened[0]).toEqual({
      request: { action: 'copy', direction: 'download', path: '/srv/file' },
      params: { direction: 'download', path: '/srv/file', checksum: false },
    });
  });

  it("decides a rename's target at the broker too: refused and audited there, the device never asked", async () => {
    const sftp = new FakeSftp();
    const opened: unknown[] = [];
    const refused: { options: Record<string, unknown>; reason: string }[] = [];
    const decided: unknown[] = [];
    const sessions = {
      authorizeAndOpen: async (...args: unknown[]) => void opened.push(args),
      adopt: () => {},
      finish: async () => {},
    };
    new SftpBridge(sftp as unknown as SftpStream, {} as Caller, 'dev', sessions as never, {
      decide: async (request) => (decided.push(request), { allowed: false, reason: 'no grant allows copy (upload) /srv/b/x' }),
      refuse: async (options, reason) => void refused.push({ options, reason }),
    }).start();
    sftp.emit('RENAME', 1, '/srv/a/x', '/srv/b/x');
    expect((await sftp.answer(1)).value).toMatchObject({ code: SFTP_STATUS.permissionDenied });
    expect(decided).toEqual([{ action: 'copy', direction: 'upload', path: '/srv/b/x' }]);
    expect(refused[0].options).toMatchObject({ op: 'rename', path: '/srv/a/x', to: '/srv/b/x' });
    expect(refused[0].reason).toMatch(/target/);
    expect(opened).toEqual([]);
  });
});

describe('SftpBridge, a client that floods', () => {
  it('answers READs of an open file at most 255 KiB long, fails those past the waiting bound, and refuses unknown extended requests', async () => {
    const sftp = new FakeSftp();
    const channel = Object.assign(new EventEmitter(), {
      destroyed: false,
      paused: false,
      end() {},
      pause() {
        this.paused = true;
      },
      resume() {
        this.paused = false;
      },
      isPaused() {
        return this.paused;
      },
      destroy() {
        this.destroyed = true;
      },
    });
    const sessions = {
      authorizeAndOpen: async (): Promise<Prepared> =>
        ({ ok: true, channel, relayOptions: { kind: 'copy', info: { size: 1 << 30, mode: 0o644 } }, auditId: 1, startedAt: Date.now() }) as unknown as Prepared,
      adopt: () => {},
      finish: async () => {},
    };
    new SftpBridge(sftp as unknown as SftpStream, {} as Caller, 'dev', sessions as never).start();
    sftp.emit('OPEN', 1, '/srv/big', 0x1, {});
    const handle = (await sftp.answer(1)).value as Buffer;
    const reads = MAX_WAITING_READS + 100;
    for (let i = 0; i < reads; i++) sftp.emit('READ', 10 + i, handle, i * SFTP_READ_MAX, 0xffffffff);
    const failed = sftp.answers.filter((a) => a.kind === 'status' && (a.value as { code: number }).code === SFTP_STATUS.failure);
    expect(failed.map((a) => a.reqid)).toEqual(Array.from({ length: 100 }, (_, i) => 10 + MAX_WAITING_READS + i));
    channel.emit('data', Buffer.alloc(SFTP_READ_MAX + 10, 7));
    const data = sftp.answers.filter((a) => a.kind === 'data');
    expect(data.map((a) => (a.value as Buffer).length)).toEqual([SFTP_READ_MAX]);
    // Not ssh2's stream, so no limits were announced: the extension is refused like any other.
    sftp.emit('EXTENDED', 2, 'limits@openssh.com');
    sftp.emit('EXTENDED', 3, 'copy-data');
    for (const reqid of [2, 3]) expect((await sftp.answer(reqid)).value).toMatchObject({ code: SFTP_STATUS.opUnsupported });
  });
});
