import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { BROKER_KEY_FILE, KEY_FILE, StateDir } from './identity.js';

const dirs: string[] = [];
function tmp(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'agent-state-'));
  dirs.push(d);
  return path.join(d, 'state');
}
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

describe('agent state directory', () => {
  it('makes an EC P-256 key pair on first start, private (0700 dir, 0600 key), and keeps it', () => {
    const dir = tmp();
    const s = new StateDir(dir);
    const first = s.identity();
    expect(first.deviceId).toMatch(/^[0-9a-f]{64}$/);
    expect(first.deviceId).toBe(
      crypto
        .createHash('sha256')
        .update(first.publicKey.export({ type: 'spki', format: 'der' }))
        .digest('hex'),
    );
    expect(first.privateKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
    expect(fs.statSync(path.join(dir, KEY_FILE)).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dir)).toEqual([KEY_FILE]); // no temporary files left
    expect(new StateDir(dir).identity().deviceId).toBe(first.deviceId);
  });

  it('keeps enrolment state per key, and a retired key makes way for a new one', () => {
    const s = new StateDir(tmp());
    const id = s.identity();
    expect(s.readState(id.deviceId)).toEqual({ device_id: id.deviceId });
    s.writeState({ device_id: id.deviceId, enrolled: 'pending' });
    expect(s.readState(id.deviceId).enrolled).toBe('pending');
    expect(fs.statSync(s.stateFile).mode & 0o777).toBe(0o600);
    s.retireKey();
    const next = s.identity();
    expect(next.deviceId).not.toBe(id.deviceId);
    expect(s.readState(next.deviceId)).toEqual({ device_id: next.deviceId });
    expect(fs.readdirSync(s.dir).some((f) => f.startsWith(`${KEY_FILE}.revoked-`))).toBe(true);
  });

  it('tightens a state directory open to others', () => {
    const dir = tmp();
    fs.mkdirSync(dir, { mode: 0o755 });
    fs.chmodSync(dir, 0o755);
    new StateDir(dir).identity();
    expect(fs.statSync(dir).mode & 0o777).toBe(0o700);
  });

  it('pins the broker key beside the device key (0600), keeps it across a retired device key, and never takes a damaged pin for none', () => {
    const dir = tmp();
    const s = new StateDir(dir);
    s.identity();
    expect(s.brokerKey()).toBeUndefined();
    const { publicKey } = crypto.generateKeyPairSync('ed25519');
    s.pinBrokerKey(publicKey);
    expect((fs.statSync(path.join(dir, BROKER_KEY_FILE)).mode & 0o777).toString(8)).toBe('600');
    expect(s.brokerKey()?.equals(publicKey)).toBe(true);
    s.retireKey();
    expect(new StateDir(dir).brokerKey()?.equals(publicKey)).toBe(true);
    fs.writeFileSync(path.join(dir, BROKER_KEY_FILE), 'garbage');
    expect(() => s.brokerKey()).toThrow(/remove it/);
  });
});
