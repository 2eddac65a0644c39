/**
 * A device's identity is its EC P-256 key pair: the device id is the SHA-256 of the public key
 * (DER SubjectPublicKeyInfo) in lowercase hex, and the agent proves it holds the private key by
 * signing the broker's nonce (ECDSA with SHA-256, DER signature, base64). The agent and the broker
 * both use these functions, so the two sides cannot drift apart.
 */
import crypto, { type KeyObject } from 'node:crypto';
import { AUTH_SIGNING_PREFIX } from './protocol.js';

export const DEVICE_KEY_CURVE = 'prime256v1';

/** Parses a PEM public key and checks it is EC P-256; throws an Error saying what is wrong. */
export function parseDevicePublicKey(pem: string): KeyObject {
  let key: KeyObject;
  try {
    key = crypto.createPublicKey({ key: pem, format: 'pem' });
  } catch {
    throw new Error('is not a PEM public key');
  }
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== DEVICE_KEY_CURVE) {
    throw new Error('must be an EC P-256 (prime256v1) public key');
  }
  return key;
}

const PEM_PUBLIC_KEY = /^-----BEGIN PUBLIC KEY-----\r?\n([A-Za-z0-9+/=\r\n]+)-----END PUBLIC KEY-----\r?\n?$/;

/**
 * The first 27 bytes of every DER SPKI of an EC P-256 key with its point uncompressed (91 bytes in
 * all): SEQUENCE, the algorithm (id-ecPublicKey, prime256v1), the BIT STRING, the 0x04 of the point.
 */
const P256_SPKI_PREFIX = Buffer.from('3059301306072a8648ce3d020106082a8648ce3d03010703420004', 'hex');
const P256_SPKI_BYTES = 91;

/** A P-256 public key from its DER SPKI, or undefined when the DER is not the uncompressed P-256 form. */
function p256FromSpki(der: Buffer): KeyObject | undefined {
  if (der.length !== P256_SPKI_BYTES || !der.subarray(0, P256_SPKI_PREFIX.length).equals(P256_SPKI_PREFIX)) return undefined;
  const x = der.subarray(P256_SPKI_PREFIX.length, P256_SPKI_PREFIX.length + 32).toString('base64url');
  const y = der.subarray(P256_SPKI_PREFIX.length + 32).toString('base64url');
  try {
    // OpenSSL checks the point is on the curve; a point that is not is refused as a bad key.
    return crypto.createPublicKey({ key: { kty: 'EC', crv: 'P-256', x, y }, format: 'jwk' });
  } catch {
    throw new Error('is not a PEM public key');
  }
}

/**
 * A key as the broker stores it (publicKeyPem: canonical PEM of the DER SPKI), parsed from its DER
 * bytes, with the device id hashed over those same bytes: what a handshake needs, without the PEM
 * parse and the re-encoding deviceIdOf does (half the cost). A key stored in any other form gives
 * another id, so it is refused rather than let in. Throws like parseDevicePublicKey.
 *
 * The usual form (P-256, point uncompressed) is recognised by its fixed DER prefix and its point
 * imported as such: a third of the cost of OpenSSL's generic decoder and the curve's lookup, paid at
 * every agent's handshake (a reconnect storm runs one per device). Any other DER takes the generic
 * path, with the same outcome as before.
 */
export function parseStoredDeviceKey(pem: string): { key: KeyObject; deviceId: string } {
  const body = PEM_PUBLIC_KEY.exec(pem)?.[1];
  if (!body) throw new Error('is not a PEM public key');
  const der = Buffer.from(body, 'base64');
  const deviceId = crypto.createHash('sha256').update(der).digest('hex');
  const fast = p256FromSpki(der);
  if (fast) return { key: fast, deviceId };
  let key: KeyObject;
  try {
    key = crypto.createPublicKey({ key: der, format: 'der', type: 'spki' });
  } catch {
    throw new Error('is not a PEM public key');
  }
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== DEVICE_KEY_CURVE) {
    throw new Error('must be an EC P-256 (prime256v1) public key');
  }
  return { key, deviceId };
}

/** The device id of a public key: sha256 of its DER SPKI, 64 lowercase hex. */
export function deviceIdOf(publicKey: KeyObject): string {
  return crypto
    .createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex');
}

/** The canonical PEM (SPKI) of a public key, as the broker stores it. */
export function publicKeyPem(publicKey: KeyObject): string {
  return publicKey.export({ type: 'spki', format: 'pem' }).toString();
}

/** An OpenSSH-style fingerprint of a public key for people to compare: `SHA256:<base64>`. */
export function keyFingerprint(publicKey: KeyObject): string {
  const digest = crypto
    .createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('base64');
  return `SHA256:${digest.replace(/=+$/, '')}`;
}

/** What the agent signs to answer the broker's challenge. */
function signedMessage(nonce: string): Buffer {
  return Buffer.from(AUTH_SIGNING_PREFIX + nonce, 'utf8');
}

export function signChallenge(privateKey: KeyObject, nonce: string): string {
  return crypto.sign('sha256', signedMessage(nonce), privateKey).toString('base64');
}

/** True when `signature` (base64 DER ECDSA) over the challenge was made with the key of `publicKey`. */
export function verifyChallenge(publicKey: KeyObject, nonce: string, signature: string): boolean {
  if (typeof signature !== 'string' || signature.length === 0 || signature.length > 512) return false;
  try {
    return crypto.verify('sha256', signedMessage(nonce), publicKey, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}
