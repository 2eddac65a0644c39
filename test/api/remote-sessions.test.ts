import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { connectRemote } from '../support/remote-ws.js';
import { endedMessage, serverFrameOf } from '../../shared/remote-frames.js';

let t: TestBroker;
const fakes = new FakeAgents();
let here: string; // tagged here
let elsewhere: string; // tagged elsewhere
let agents: FakeAgent[] = [];

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator });
  here = await t.addDevice({ tags: ['here'], name: 'here-one' });
  elsewhere = await t.addDevice({ tags: ['elsewhere'], name: 'elsewhere-one' });
  agents = [await fakes.attach(here, t.dataDir), await fakes.attach(elsewhere, t.dataDir)];
});

afterAll(async () => {
  for (const a of agents.reverse()) await a.close();
  await t?.close();
});

type Listed = {
  id: string;
  user: { id: string; email: string };
  device: { id: string; name: string };
  kind: string;
  source: string;
  bytes_in: number;
  bytes_out: number;
  can_end: boolean;
  can_attach?: boolean;
};

async function list(token: string): Promise<Listed[]> {
  const r = await t.api('GET', '/api/v2/remote/sessions', { token });
  expect(r.status).toBe(200);
  expect(r.body.total).toBe(r.body.items.length);
  return r.body.items;
}

async function openConsole(token: string, deviceId: string) {
  const s = connectRemote(t.url, 'console', { device_id: deviceId, source: 'cli' }, token);
  await s.ready;
  s.ws.send(Buffer.from('echo "marker-$((2*21))"\n'));
  await s.output('marker-42');
  return s;
}

describe('live remote sessions', () => {
  it("lists the caller's own sessions and those on devices their remote-access:manage covers, nobody else's", async () => {
    const operator = await t.tokenWith([{ permission: 'remote-access:manage', resources: ['tag:here'] }]);
    const connector = await t.tokenWith([{ permission: 'remote-access:connect' }]);
    const onHere = await openConsole(connector, here);
    const onElsewhere = await openConsole(connector, elsewhere);
    try {
      const byAdmin = await list(t.adminToken);
      const mine = byAdmin.filter((s) => s.device.id === here || s.device.id === elsewhere);
      expect(mine).toHaveLength(2);
      const hereEntry = mine.find((s) => s.device.id === here)!;
      expect(hereEntry).toMatchObject({ kind: 'console', source: 'cli', device: { name: 'here-one' } });
      expect(hereEntry.user.email).toMatch(/@example\.com$/);
      expect(hereEntry.bytes_out).toBeGreaterThan(0);
      expect(hereEntry.bytes_in).toBeGreaterThan(0);

      // The operator sees the session on a device under tag:here, not the one outside their grant.
      const byOperator = await list(operator);
      expect(byOperator.map((s) => s.device.id)).toEqual([here]);
      expect(byOperator[0].can_end).toBe(true);
      // The connector sees both: they are their own.
      const byConnector = await list(connector);
      expect(byConnector.map((s) => s.device.id).sort()).toEqual([here, elsewhere].sort());
      // Their own: they may end them (and re-attach to them), without remote-access:manage.
      expect(byConnector.every((s) => s.can_end && s.can_attach)).toBe(true);
      // The operator may end the user's console but never re-attach to it.
      expect(byOperator[0].can_attach).toBe(false);
      // A user with nothing sees none of them.
      expect(await list(await t.tokenWith([]))).toEqual([]);
    } finally {
      onHere.ws.close();
      onElsewhere.ws.close();
      await onHere.closed;
      await onElsewhere.closed;
    }
    await expect.poll(async () => (await list(t.adminToken)).length).toBe(0);
  });

  it("refuses to end another user's session without remote-access:manage on its device (403), and ends it with it", async () => {
    const connector = await t.tokenWith([{ permission: 'remote-access:connect' }]);
    const otherConnector = await t.tokenWith([{ permission: 'remote-access:connect' }]);
    const fencedOperator = await t.tokenWith([{ permission: 'remote-access:manage', resources: ['tag:here'] }]);
    const s = await openConsole(connector, elsewhere);
    const [session] = (await list(t.adminToken)).filter((x) => x.device.id === elsewhere);
    // Another user holding connect on the device cannot end it.
    const byOther = await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: otherConnector });
    expect(byOther.status).toBe(403);
    expect(byOther.body).toMatchObject({ code: 403, error: 'forbidden' });
    // An operator whose grant does not cover the device is refused too, and the session runs on.
    const refused = await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: fencedOperator });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ code: 403, error: 'forbidden' });
    expect((await list(t.adminToken)).map((x) => x.id)).toContain(session.id);

    // A reason that is not one bounded line is refused, and the session runs on.
    for (const reason of ['x'.repeat(501), 'two\nlines', 42]) {
      const bad = await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: t.adminToken, body: { reason } });
      expect(bad.status).toBe(400);
      expect(bad.body).toMatchObject({ code: 400, error: 'invalid_request' });
    }
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: t.adminToken, body: { why: 'x' } })).status).toBe(400);
    expect((await list(t.adminToken)).map((x) => x.id)).toContain(session.id);

    const ended = await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: t.adminToken, body: { reason: 'maintenance window' } });
    expect(ended.status).toBe(204);
    const closed = await s.closed;
    expect(closed.code).toBe(4403);
    // The frame names who ended it and why, and the shared parser reads it so.
    const frame = s.frames.find((f) => f.type === 'error');
    expect(frame).toMatchObject({ code: 403, error: 'session_ended', ended_by: { email: 'admin@example.com' }, reason: 'maintenance window' });
    const parsed = serverFrameOf(JSON.stringify(frame));
    expect(parsed?.type === 'error' && endedMessage(parsed)).toMatch(/^Ended by .*admin@example\.com.* \(maintenance window\)\.$/);
    expect((await list(t.adminToken)).map((x) => x.id)).not.toContain(session.id);
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: t.adminToken })).status).toBe(404);

    // The session's end entry names who ended it.
    await expect
      .poll(async () => {
        const r = await t.api('GET', `/api/v2/commitlist?device_id=${elsewhere}&action=console&result=allowed`, { token: t.adminToken });
        return (r.body.items as { message: string }[])[0]?.message ?? '';
      })
      .toMatch(/ended by admin@example\.com .*: maintenance window/);
  });

  it('lets a user holding only remote-access:connect end their own session', async () => {
    const connector = await t.tokenWith([{ permission: 'remote-access:connect' }]);
    const s = await openConsole(connector, elsewhere);
    const [session] = (await list(connector)).filter((x) => x.device.id === elsewhere);
    expect(session.can_end).toBe(true);
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${session.id}`, { token: connector })).status).toBe(204);
    expect((await s.closed).code).toBe(4403);
    expect((await list(t.adminToken)).map((x) => x.id)).not.toContain(session.id);
  });
});
