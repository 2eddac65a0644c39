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
 * A key as the broker stores it (publicKeyPem: canonical PEM of the DER SPKI), parsed from its DER
 * bytes, with the device id hashed over those same bytes: what a handshake needs, without the PEM
 * parse and the re-encoding deviceIdOf does (half the cost). A key stored in any other form gives
 * another id, so it is refused rather than let in. Throws like parseDevicePublicKey.
 */
export function parseStoredDeviceKey(pem: string): { key: KeyObject; deviceId: string } {
  const body = PEM_PUBLIC_KEY.exec(pem)?.[1];
  if (!body) throw new Error('is not a PEM public key');
  const der = Buffer.from(body, 'base64');
  let key: KeyObject;
  try {
    key = crypto.createPublicKey({ key: der, format: 'der', type: 'spki' });
  } catch {
    throw new Error('is not a PEM public key');
  }
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== DEVICE_KEY_CURVE) {
    throw new Error('must be an EC P-256 (prime256v1) public key');
  }
  return { key, deviceId: crypto.createHash('sha256').update(der).digest('hex') };
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
