import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { deviceIdOf, keyFingerprint, parseDevicePublicKey, parseStoredDeviceKey, publicKeyPem, signChallenge, verifyChallenge } from './device-key.js';

describe('device keys', () => {
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });

  it('derives the device id as the sha256 of the DER public key, 64 lowercase hex', () => {
    const id = deviceIdOf(publicKey);
    expect(id).toMatch(/^[0-9a-f]{64}$/);
    const der = publicKey.export({ type: 'spki', format: 'der' });
    expect(id).toBe(crypto.createHash('sha256').update(der).digest('hex'));
    expect(deviceIdOf(parseDevicePublicKey(publicKeyPem(publicKey)))).toBe(id);
    expect(keyFingerprint(publicKey)).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
  });

  it('verifies a signature over the nonce and refuses another nonce, another key or garbage', () => {
    const signature = signChallenge(privateKey, 'nonce-1');
    expect(verifyChallenge(publicKey, 'nonce-1', signature)).toBe(true);
    expect(verifyChallenge(publicKey, 'nonce-2', signature)).toBe(false);
    const other = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    expect(verifyChallenge(other.publicKey, 'nonce-1', signature)).toBe(false);
    expect(verifyChallenge(publicKey, 'nonce-1', 'bm90IGEgc2lnbmF0dXJl')).toBe(false);
    expect(verifyChallenge(publicKey, 'nonce-1', '')).toBe(false);
  });

  it('accepts only EC P-256 public keys', () => {
    expect(() => parseDevicePublicKey('not a key')).toThrow(/PEM/);
    const rsa = crypto.generateKeyPairSync('rsa', { modulusLength: 1024 });
    expect(() => parseDevicePublicKey(publicKeyPem(rsa.publicKey))).toThrow(/P-256/);
    const p384 = crypto.generateKeyPairSync('ec', { namedCurve: 'secp384r1' });
    expect(() => parseDevicePublicKey(publicKeyPem(p384.publicKey))).toThrow(/P-256/);
  });

  it('parses a stored key from its DER with the same device id, and refuses other keys and forms', () => {
    const stored = parseStoredDeviceKey(publicKeyPem(publicKey));
    expect(stored.deviceId).toBe(deviceIdOf(publicKey));
    expect(verifyChallenge(stored.key, 'nonce-3', signChallenge(privateKey, 'nonce-3'))).toBe(true);
    expect(() => parseStoredDeviceKey('not a key')).toThrow(/PEM/);
    expect(() => parseStoredDeviceKey('-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n')).toThrow(/PEM/);
    const p384 = crypto.generateKeyPairSync('ec', { namedCurve: 'secp384r1' });
    expect(() => parseStoredDeviceKey(publicKeyPem(p384.publicKey))).toThrow(/P-256/);
  });

  it('refuses a stored P-256 key whose point is not on the curve', () => {
    const der = publicKey.export({ type: 'spki', format: 'der' });
    const pemOf = (bytes: Buffer) => `-----BEGIN PUBLIC KEY-----\n${bytes.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END PUBLIC KEY-----\n`;
    const offCurve = Buffer.from(der);
    offCurve[offCurve.length - 1] ^= 1;
    expect(() => parseStoredDeviceKey(pemOf(offCurve))).toThrow(/PEM/);
    // Another key's signature does not pass with this one.
    const other = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    expect(verifyChallenge(parseStoredDeviceKey(pemOf(der)).key, 'n', signChallenge(other.privateKey, 'n'))).toBe(false);
  });
});
