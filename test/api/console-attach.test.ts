/**
 * A console outlives its owner's dropped connection for a grace period and is re-attached by the
 * same user; others may watch it read-only. Hostile peers: another user re-attaching, a watcher
 * typing, a watcher that never reads.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { connectRemote, type RecordedSession } from '../support/remote-ws.js';

let t: TestBroker;
let quick: TestBroker; // a grace period of one second
const fakes = new FakeAgents();
const quickFakes = new FakeAgents();
let device: string;
let quickDevice: string;
const agents: FakeAgent[] = [];

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator });
  quick = await startTestBroker({ locator: quickFakes.locator, env: { CONSOLE_DETACH_GRACE_SECONDS: '1' } });
  device = await t.addDevice({ tags: ['lab'], name: 'lab-one' });
  quickDevice = await quick.addDevice({ tags: ['lab'], name: 'quick-one' });
  agents.push(await fakes.attach(device, t.dataDir), await quickFakes.attach(quickDevice, quick.dataDir));
});

afterAll(async () => {
  for (const a of agents.reverse()) await a.close();
  await quick?.close();
  await t?.close();
});

const CONNECT = { permission: 'remote-access:connect', resources: ['tag:lab'] };
const MANAGE = { permission: 'remote-access:manage', resources: ['tag:lab'] };

type Listed = { id: string; user: { email: string }; attached?: boolean; watchers?: { user: { id: string; email: string } }[]; can_watch?: boolean };

async function listed(broker: TestBroker, token: string, id: string): Promise<Listed | undefined> {
  const r = await broker.api('GET', '/api/v2/remote/sessions', { token });
  expect(r.status).toBe(200);
  return (r.body.items as Listed[]).find((s) => s.id === id);
}

async function audit(broker: TestBroker, event: string): Promise<any[]> {
  const r = await broker.api('GET', `/api/v2/commitlist?event=${event}&items_per_page=100`, { token: broker.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

/** Opens a console and runs a first command; resolves with its session id. */
async function open(broker: TestBroker, token: string, on: string): Promise<{ s: RecordedSession; id: string }> {
  const s = connectRemote(broker.url, 'console', { device_id: on, cols: 100, rows: 30 }, token);
  const ready = await s.frame('ready');
  expect(ready).toMatchObject({ type: 'ready', mode: 'control', session: expect.any(String) });
  s.ws.send(Buffer.from('echo "first-$((40+2))"\n'));
  await s.output('first-42');
  return { s, id: ready.session };
}

/** Cuts the connection without a close frame, as a network blip or a killed tab. */
function drop(s: RecordedSession): void {
  s.ws.terminate();
}

describe('console detach and re-attach', () => {
  it('keeps a dropped console for its owner, who re-attaches and gets its recent output, then live output; audited as one session', async () => {
    const owner = await t.userWith([CONNECT]);
    const { s, id } = await open(t, owner.token, device);
    // Output that comes while nobody is attached is kept for the re-attach.
    s.ws.send(Buffer.from('sleep 0.3; echo "while-away-$((3*3))"\n'));
    drop(s);
    await expect.poll(async () => (await listed(t, owner.token, id))?.attached).toBe(false);

    const back = connectRemote(t.url, 'console', { attach: id, cols: 90, rows: 20 }, owner.token);
    expect(await back.frame('ready')).toMatchObject({ type: 'ready', session: id, mode: 'control', reattached: true, detach_grace: 60 });
    await back.output('while-away-9');
    expect(back.bytes().toString()).toContain('first-42'); // the recent output, from before the drop
    expect((await listed(t, owner.token, id))?.attached).toBe(true);
    back.ws.send(Buffer.from('echo "size-$(stty size | tr " " x)"\n'));
    await back.output('size-20x90'); // the re-attach's size reached the pty

    back.ws.send(Buffer.from('exit 0\n'));
    expect(await back.frame('exit')).toEqual({ type: 'exit', code: 0, signal: null });
    expect((await back.closed).code).toBe(1000);

    // One start, one attach pointing at it, one end.
    const starts = (await audit(t, 'remote.console.start')).filter((e) => e.options.recording === id);
    expect(starts).toHaveLength(1);
    const attaches = (await audit(t, 'remote.console.attach')).filter((e) => e.ref_id === starts[0].id);
    expect(attaches).toHaveLength(1);
    expect(attaches[0]).toMatchObject({ result: 'allowed', user_email: owner.email });
    await expect.poll(async () => (await audit(t, 'remote.console.end')).filter((e) => e.ref_id === starts[0].id).map((e) => e.reason)).toEqual(['exit 0']);
  });

  it('ends a console that is not re-attached within the grace period, with a clear reason, and its recording closed', async () => {
    const owner = await quick.userWith([CONNECT]);
    const { s, id } = await open(quick, owner.token, quickDevice);
    drop(s);
    await expect.poll(async () => listed(quick, owner.token, id), { timeout: 10_000 }).toBeUndefined();
    const start = (await audit(quick, 'remote.console.start')).find((e) => e.options.recording === id);
    // The end entry is written by the audit writer's next group, which may commit just after the list forgets the session.
    await expect
      .poll(async () => (await audit(quick, 'remote.console.end')).find((e) => e.ref_id === start.id)?.reason, { timeout: 10_000 })
      .toBe('detached: not re-attached within 1 s');
    const cast = await quick.api('GET', `/api/v2/remote/recordings/${id}`, { token: quick.adminToken });
    expect(cast.status).toBe(200);
    expect(String(cast.body)).toContain('first-42');

    // Too late: the session is gone.
    const late = connectRemote(quick.url, 'console', { attach: id }, owner.token);
    expect(await late.frame('error')).toMatchObject({ code: 404, error: 'session_not_found' });
    expect((await late.closed).code).toBe(4404);
  });

  it("never lets another user re-attach someone else's console, whatever their roles; the owner's runs on", async () => {
    const owner = await t.userWith([CONNECT]);
    const other = await t.userWith([CONNECT, MANAGE]);
    const { s, id } = await open(t, owner.token, device);
    drop(s);
    await expect.poll(async () => (await listed(t, owner.token, id))?.attached).toBe(false);

    for (const token of [other.token, t.adminToken]) {
      const stolen = connectRemote(t.url, 'console', { attach: id }, token);
      expect(await stolen.frame('error')).toMatchObject({ code: 403, error: 'not_your_session' });
      expect((await stolen.closed).code).toBe(4403);
      expect(stolen.bytes().length).toBe(0);
    }
    // Malformed and unknown ids are refused too.
    const both = connectRemote(t.url, 'console', { attach: id, watch: id }, other.token);
    expect(await both.frame('error')).toMatchObject({ code: 400, error: 'invalid_request' });
    const bad = connectRemote(t.url, 'console', { attach: '../../etc' }, owner.token);
    expect((await bad.closed).code).toBe(4400);
    const unknown = connectRemote(t.url, 'console', { attach: '00000000-0000-4000-8000-000000000000' }, owner.token);
    expect((await unknown.closed).code).toBe(4404);
    const anonymous = connectRemote(t.url, 'console', { attach: id });
    expect((await anonymous.closed).code).toBe(4401);

    const denied = (await audit(t, 'remote.console.attach')).filter((e) => e.options.session === id && e.result === 'denied');
    const stolen = denied.filter((e) => e.reason.startsWith('not_your_session'));
    expect(stolen.map((e) => e.user_email).sort()).toEqual([other.email, 'admin@example.com'].sort());
    expect(denied.some((e) => e.user_email === null && e.reason.startsWith('unauthorized'))).toBe(true);

    // The owner still gets it back.
    const back = connectRemote(t.url, 'console', { attach: id }, owner.token);
    await back.ready;
    back.ws.send(Buffer.from('echo "mine-$((1+1))"\n'));
    await back.output('mine-2');
    back.ws.close(1000);
    await back.closed;
  });

  it('lets its owner re-attach from another sign-in session (another browser), listed as can_attach for them only', async () => {
    const owner = await t.userWith([CONNECT]);
    const other = await t.userWith([CONNECT, MANAGE]);
    const { s, id } = await open(t, owner.token, device);
    drop(s);
    await expect.poll(async () => (await listed(t, owner.token, id))?.attached).toBe(false);

    // A second sign-in of the same user: another token, another sign-in session.
    const elsewhere = await t.login(owner.email, owner.password);
    expect(elsewhere).not.toBe(owner.token);
    expect(await listed(t, elsewhere, id)).toMatchObject({ can_attach: true, can_end: true });
    // Others may see (and end, with remote-access:manage) it, but are never offered a re-attach, and are refused one.
    expect(await listed(t, other.token, id)).toMatchObject({ can_attach: false, can_end: true });
    expect(await listed(t, t.adminToken, id)).toMatchObject({ can_attach: false });
    const stolen = connectRemote(t.url, 'console', { attach: id }, other.token);
    expect(await stolen.frame('error')).toMatchObject({ code: 403, error: 'not_your_session' });
    expect((await stolen.closed).code).toBe(4403);
    expect(stolen.bytes().length).toBe(0);

    const back = connectRemote(t.url, 'console', { attach: id }, elsewhere);
    expect(await back.frame('ready')).toMatchObject({ session: id, reattached: true });
    await back.output('first-42');
    back.ws.send(Buffer.from('echo "from-elsewhere-$((5*5))"\n'));
    await back.output('from-elsewhere-25');
    expect((await listed(t, owner.token, id))?.attached).toBe(true);
    back.ws.close(1000);
    await back.closed;
  });

  it('lets the owner take a console over from a connection that is still open', async () => {
    const owner = await t.userWith([CONNECT]);
    const { s, id } = await open(t, owner.token, device);
    const second = connectRemote(t.url, 'console', { attach: id }, owner.token);
    await second.ready;
    expect(await s.frame('error')).toMatchObject({ code: 409, error: 'session_taken_over' });
    expect((await s.closed).code).toBe(4409);
    second.ws.send(Buffer.from('echo "taken-$((2+3))"\n'));
    await second.output('taken-5');
    second.ws.close(1000);
    await second.closed;
    await expect.poll(async () => listed(t, owner.token, id)).toBeUndefined();
  });
});

describe('watching a console', () => {
  it('shows the console read-only to a permitted watcher; the owner sees who watches; ending it ends the watcher', async () => {
    const owner = await t.userWith([CONNECT]);
    const watcher = await t.userWith([CONNECT, MANAGE]);
    const connectOnly = await t.userWith([CONNECT]);
    const { s, id } = await open(t, owner.token, device);

    // Seeing is not enough: a connect-only user may not watch another's console.
    const refused = connectRemote(t.url, 'console', { watch: id }, connectOnly.token);
    expect(await refused.frame('error')).toMatchObject({ code: 403, error: 'forbidden' });
    expect((await refused.closed).code).toBe(4403);

    expect((await listed(t, watcher.token, id))?.can_watch).toBe(true);
    const w = connectRemote(t.url, 'console', { watch: id, cols: 40, rows: 10 }, watcher.token);
    expect(await w.frame('ready')).toMatchObject({ type: 'ready', session: id, mode: 'watch' });
    await w.output('first-42'); // the recent output
    await expect.poll(() => s.frames.filter((f) => f.type === 'watchers').at(-1)?.watchers).toEqual([{ id: watcher.id, email: watcher.email }]);
    expect((await listed(t, owner.token, id))?.watchers?.map((x) => x.user.email)).toEqual([watcher.email]);

    // Nothing the watcher sends reaches the device: keys and resizes are dropped.
    w.ws.send(Buffer.from('echo "from-watcher-$((5*5))"\n'));
    w.ws.send(JSON.stringify({ type: 'resize', cols: 33, rows: 7 }));
    w.ws.send('not json'); // answered with an error frame: the broker has read what came before
    await w.frame('error');
    s.ws.send(Buffer.from('echo "owner-size-$(stty size | tr " " x)"\n'));
    await s.output('owner-size-30x100');
    await w.output('owner-size-30x100'); // the watcher sees live output
    expect(s.bytes().toString()).not.toContain('from-watcher-25');

    const joins = (await audit(t, 'remote.console.watch')).filter((e) => e.options.session === id);
    expect(joins.map((e) => [e.user_email, e.result]).sort()).toEqual(
      [
        [connectOnly.email, 'denied'],
        [watcher.email, 'allowed'],
      ].sort(),
    );

    // An operator ends the session: the watcher's view ends with it.
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${id}`, { token: t.adminToken })).status).toBe(204);
    expect((await s.closed).code).toBe(4403);
    expect((await w.closed).code).toBe(4403);
    expect(w.frames.find((f) => f.error === 'session_ended')).toBeDefined();
  });

  it("ends the watchers with the owner's shell, and they see its exit", async () => {
    const owner = await t.userWith([CONNECT]);
    const watcher = await t.userWith([CONNECT, MANAGE]);
    const { s, id } = await open(t, owner.token, device);
    const w = connectRemote(t.url, 'console', { watch: id }, watcher.token);
    await w.ready;
    s.ws.send(Buffer.from('exit 4\n'));
    expect(await w.frame('exit')).toEqual({ type: 'exit', code: 4, signal: null });
    expect((await w.closed).code).toBe(1000);
    expect((await s.closed).code).toBe(1000);
    await expect.poll(async () => listed(t, owner.token, id)).toBeUndefined();
  });

  it('cuts off a watcher that does not read, and the owner gets all of its output', async () => {
    const owner = await t.userWith([CONNECT]);
    const watcher = await t.userWith([CONNECT, MANAGE]);
    const { s, id } = await open(t, owner.token, device);
    const w = connectRemote(t.url, 'console', { watch: id }, watcher.token);
    await w.ready;
    await expect.poll(() => s.frames.filter((f) => f.type === 'watchers').at(-1)?.watchers.length).toBe(1);
    // The watcher stops reading its socket: what the broker sends it piles up.
    (w.ws as unknown as { _socket: { pause(): void } })._socket.pause();

    // The owner reads and acknowledges a 32 MiB flood; its tail says it all came.
    const total = 32 * 1024 * 1024;
    let received = 0;
    let tail = '';
    const done = new Promise<void>((resolve) => {
      s.ws.on('message', (data: Buffer, isBinary: boolean) => {
        if (!isBinary) return;
        received += data.length;
        tail = (tail + data.toString('latin1')).slice(-200);
        if (s.ws.readyState === WebSocket.OPEN) s.ws.send(JSON.stringify({ type: 'ack', bytes: data.length }));
        if (tail.includes('flood-done-7')) resolve();
      });
    });
    s.ws.send(Buffer.from(`head -c ${total} /dev/zero | tr '\\0' 'x'; echo; echo "flood-done-$((3+4))"\n`));
    await done;
    expect(received).toBeGreaterThan(total);
    await expect.poll(() => s.frames.filter((f) => f.type === 'watchers').at(-1)?.watchers).toEqual([]);
    expect((await listed(t, owner.token, id))?.watchers).toEqual([]);
    s.ws.close(1000);
    await s.closed;
  }, 60_000);
});
