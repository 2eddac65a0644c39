import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CERT_ALGO, SshAuthority, verifyUserSignature } from './authority.js';
import { ed25519Raw, parseOpenSshPrivateKey, parsePublicKeyLine, publicKeyLine, sshString } from '../../shared/ssh-keys.js';

function memorySettings() {
  const values = new Map<string, unknown>();
  return {
    getOrCreate: async <T>(key: string, make: () => T): Promise<T> => {
      if (!values.has(key)) values.set(key, make());
      return values.get(key) as T;
    },
  };
}

const NOW = Date.parse('2026-06-01T12:00:00Z');
const user = crypto.generateKeyPairSync('ed25519');
const blobOf = (line: string) => Buffer.from(line.split(' ')[1], 'base64');

async function issued(ca: SshAuthority, validFor = 600) {
  return ca.issue(user.publicKey, { keyId: 'a@example.com', principals: ['a@example.com'], sessionId: 's-1', validBefore: NOW / 1000 + validFor, now: NOW });
}

describe('SshAuthority', () => {
  it('keeps its keys: a second load from the same settings signs and presents the same', async () => {
    const settings = memorySettings();
    const [one, two] = [await SshAuthority.load(settings), await SshAuthority.load(settings)];
    expect(two.hostPublicKey).toBe(one.hostPublicKey);
    expect(two.caPublicKey).toBe(one.caPublicKey);
    expect(two.verify(CERT_ALGO, blobOf(await issued(one)), NOW)).toMatchObject({ keyId: 'a@example.com', sessionId: 's-1', principals: ['a@example.com'] });
  });

  it('reads back the user key it certified', async () => {
    const ca = await SshAuthority.load(memorySettings());
    const cert = ca.verify(CERT_ALGO, blobOf(await issued(ca)), NOW);
    expect('key' in cert && ed25519Raw(cert.key).equals(ed25519Raw(user.publicKey))).toBe(true);
  });

  it('refuses another CA, a changed byte, a plain key, expired, not yet valid and truncated certificates', async () => {
    const ca = await SshAuthority.load(memorySettings());
    const other = await SshAuthority.load(memorySettings());
    const blob = blobOf(await issued(ca));
    expect(ca.verify(CERT_ALGO, blobOf(await issued(other)), NOW)).toMatchObject({ refused: 'unknown_ca' });
    const changed = Buffer.from(blob);
    // The key id's last byte (inside the signed part): the signature no longer verifies.
    const at = changed.indexOf(Buffer.from('a@example.com')) + 12;
    changed[at] ^= 1;
    expect(ca.verify(CERT_ALGO, changed, NOW)).toMatchObject({ refused: 'bad_signature' });
    expect(ca.verify('ssh-ed25519', blob, NOW)).toMatchObject({ refused: 'not_a_certificate' });
    expect(ca.verify(CERT_ALGO, blob, NOW + 601_000)).toMatchObject({ refused: 'expired' });
    expect(ca.verify(CERT_ALGO, blob, NOW - 3600_000)).toMatchObject({ refused: 'not_yet_valid' });
    expect(ca.verify(CERT_ALGO, blob.subarray(0, blob.length - 10), NOW)).toMatchObject({ refused: 'malformed' });
    expect(ca.verify(CERT_ALGO, Buffer.concat([blob, Buffer.from([0])]), NOW)).toMatchObject({ refused: 'malformed' });
  });

  it("checks the client's signature against the certified key only", () => {
    const data = Buffer.from('session data');
    const signature = Buffer.concat([sshString('ssh-ed25519'), sshString(crypto.sign(null, data, user.privateKey))]);
    expect(verifyUserSignature(user.publicKey, data, signature)).toBe(true);
    expect(verifyUserSignature(crypto.generateKeyPairSync('ed25519').publicKey, data, signature)).toBe(false);
    expect(verifyUserSignature(user.publicKey, Buffer.from('other data'), signature)).toBe(false);
  });
});

describe('OpenSSH key formats', () => {
  it('round-trips a public key line and refuses other key types or trailing bytes', () => {
    const line = publicKeyLine(user.publicKey, 'me');
    expect(ed25519Raw(parsePublicKeyLine(line)!).equals(ed25519Raw(user.publicKey))).toBe(true);
    expect(parsePublicKeyLine('ssh-rsa AAAAB3NzaC1yc2E= x')).toBeUndefined();
    const blob = Buffer.from(line.split(' ')[1], 'base64');
    expect(parsePublicKeyLine(`ssh-ed25519 ${Buffer.concat([blob, Buffer.from([1])]).toString('base64')}`)).toBeUndefined();
  });

  it('writes a private key file that reads back as the same key', async () => {
    const { openSshPrivateKey } = await import('../../shared/ssh-keys.js');
    const back = parseOpenSshPrivateKey(openSshPrivateKey(user.privateKey, 'c'));
    expect(back.export({ format: 'jwk' })).toEqual(user.privateKey.export({ format: 'jwk' }));
  });
});
