/**
 * Registered SSH public keys (/api/v2/ssh/keys, /api/v2/user/{id}/ssh-keys): each user manages
 * their own, an administrator with users:manage anyone's; only sound Ed25519, ECDSA and RSA ≥ 2048
 * keys, bounded in size and number, one fingerprint per key across users; every add and removal audited.
 */
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_SSH_KEYS_PER_USER } from '../../broker/ssh/keys.js';
import { fingerprintOf, publicKeyLine, sshString } from '../../shared/ssh-keys.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

const ed25519 = (comment = '') => publicKeyLine(crypto.generateKeyPairSync('ed25519').publicKey, comment);
const b64 = (v: string | undefined) => Buffer.from(v ?? '', 'base64url');
/** An SSH mpint: big-endian, a leading zero when the high bit is set. */
const mpint = (b: Buffer) => sshString(b[0] & 0x80 ? Buffer.concat([Buffer.alloc(1), b]) : b);

function rsa(bits: number): string {
  const jwk = crypto.generateKeyPairSync('rsa', { modulusLength: bits }).publicKey.export({ format: 'jwk' });
  return `ssh-rsa ${Buffer.concat([sshString('ssh-rsa'), mpint(b64(jwk.e)), mpint(b64(jwk.n))]).toString('base64')} rsa-key`;
}

function ecdsa(): string {
  const jwk = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ format: 'jwk' });
  const point = Buffer.concat([Buffer.from([4]), b64(jwk.x), b64(jwk.y)]);
  return `ecdsa-sha2-nistp256 ${Buffer.concat([sshString('ecdsa-sha2-nistp256'), sshString('nistp256'), sshString(point)]).toString('base64')}`;
}

const add = (token: string, body: object) => t.api('POST', '/api/v2/ssh/keys', { token, body });

async function audit(event: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?event=${event}&items_per_page=100`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

describe('registered SSH keys', () => {
  it('registers Ed25519, ECDSA and RSA 2048 keys for the caller, lists them, and audits each add', async () => {
    const token = await t.tokenWith([]);
    const line = ed25519('laptop');
    const r = await add(token, { public_key: line });
    expect(r.status).toBe(201);
    const blob = Buffer.from(line.split(' ')[1], 'base64');
    expect(r.body).toMatchObject({
      type: 'ssh-ed25519',
      public_key: line.split(' ').slice(0, 2).join(' '),
      comment: 'laptop',
      fingerprint: fingerprintOf(blob),
    });
    expect((await add(token, { public_key: ecdsa(), comment: 'yubikey' })).status).toBe(201);
    expect((await add(token, { public_key: rsa(2048) })).body).toMatchObject({ type: 'ssh-rsa', comment: 'rsa-key' });
    const listed = await t.api('GET', '/api/v2/ssh/keys', { token });
    expect(listed.status).toBe(200);
    expect(listed.body.items.map((k: any) => k.type).sort()).toEqual(['ecdsa-sha2-nistp256', 'ssh-ed25519', 'ssh-rsa']);
    const entries = await audit('ssh.key.add');
    expect(entries.some((e) => JSON.stringify(e).includes(r.body.fingerprint))).toBe(true);
  });

  it('refuses weak, unknown, malformed, mismatched and oversized keys, and comments with control characters', async () => {
    const token = await t.tokenWith([]);
    const good = ed25519();
    const ed = good.split(' ')[1];
    const rsaBlob = rsa(2048).split(' ')[1];
    for (const public_key of [
      rsa(1024),
      `ssh-dss ${ed}`,
      'ssh-ed25519 not-base64!!',
      'ssh-ed25519 AAAA',
      `ssh-ed25519 ${rsaBlob}`,
      `ssh-ed25519-cert-v01@openssh.com ${ed}`,
      `ssh-ed25519 ${ed}${'A'.repeat(4096)}`,
      `ssh-ed25519 ${Buffer.concat([Buffer.from(ed, 'base64'), Buffer.from('trailing')]).toString('base64')}`,
      `ssh-ed25519 ${ed} ${'x'.repeat(300)}`,
    ]) {
      const r = await add(token, { public_key });
      expect(r.status, public_key.slice(0, 60)).toBe(400);
      expect(r.body.code).toBe(400);
    }
    expect((await add(token, { public_key: good, comment: 'evil\nline' })).status).toBe(400);
    expect((await t.api('GET', '/api/v2/ssh/keys', { token })).body.items).toEqual([]);
  });

  it('refuses a fingerprint registered already, by the caller or anyone else (409)', async () => {
    const [a, b] = [await t.tokenWith([]), await t.tokenWith([])];
    const line = ed25519();
    expect((await add(a, { public_key: line })).status).toBe(201);
    const again = await add(a, { public_key: `${line} other comment` });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('ssh_key_exists');
    expect((await add(b, { public_key: line })).status).toBe(409);
    expect((await t.api('GET', '/api/v2/ssh/keys', { token: b })).body.items).toEqual([]);
  });

  it(`bounds the keys of one user at ${MAX_SSH_KEYS_PER_USER}`, async () => {
    const token = await t.tokenWith([]);
    for (let i = 0; i < MAX_SSH_KEYS_PER_USER; i++) expect((await add(token, { public_key: ed25519() })).status).toBe(201);
    const over = await add(token, { public_key: ed25519() });
    expect(over.status).toBe(409);
    expect(over.body.error).toBe('ssh_keys_exhausted');
  });

  it("cannot remove or see another user's key; removes its own, audited", async () => {
    const alice = await t.userWith([]);
    const bob = await t.userWith([]);
    const bobs = (await add(bob.token, { public_key: ed25519() })).body;
    expect((await t.api('DELETE', `/api/v2/ssh/keys/${bobs.key_id}`, { token: alice.token })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/user/${bob.id}/ssh-keys`, { token: alice.token })).status).toBe(403);
    expect((await t.api('DELETE', `/api/v2/user/${bob.id}/ssh-keys/${bobs.key_id}`, { token: alice.token })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/ssh/keys', { token: bob.token })).body.items).toHaveLength(1);
    expect((await t.api('DELETE', `/api/v2/ssh/keys/${bobs.key_id}`, { token: bob.token })).status).toBe(204);
    expect((await t.api('GET', '/api/v2/ssh/keys', { token: bob.token })).body.items).toEqual([]);
    expect((await t.api('DELETE', `/api/v2/ssh/keys/${bobs.key_id}`, { token: bob.token })).status).toBe(404);
    const removed = await audit('ssh.key.remove');
    expect(removed.some((e) => JSON.stringify(e).includes(bobs.fingerprint))).toBe(true);
  });

  it("lets an administrator with users:manage list and remove a user's keys, not a key of someone else through them", async () => {
    const admin = await t.userWith([{ permission: 'users:manage' }, { permission: 'users:read' }]);
    const carol = await t.userWith([]);
    const dave = await t.userWith([]);
    const carols = (await add(carol.token, { public_key: ed25519('c') })).body;
    const daves = (await add(dave.token, { public_key: ed25519('d') })).body;
    const listed = await t.api('GET', `/api/v2/user/${carol.id}/ssh-keys`, { token: admin.token });
    expect(listed.status).toBe(200);
    expect(listed.body.items.map((k: any) => k.key_id)).toEqual([carols.key_id]);
    // Dave's key through Carol's path: not found, and still there.
    expect((await t.api('DELETE', `/api/v2/user/${carol.id}/ssh-keys/${daves.key_id}`, { token: admin.token })).status).toBe(404);
    expect((await t.api('GET', '/api/v2/ssh/keys', { token: dave.token })).body.items).toHaveLength(1);
    expect((await t.api('DELETE', `/api/v2/user/${carol.id}/ssh-keys/${carols.key_id}`, { token: admin.token })).status).toBe(204);
    expect((await t.api('GET', '/api/v2/ssh/keys', { token: carol.token })).body.items).toEqual([]);
    const removed = await audit('ssh.key.remove');
    const entry = removed.find((e) => JSON.stringify(e).includes(carols.fingerprint));
    expect(entry).toBeDefined();
  });
});
