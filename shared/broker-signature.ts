/**
 * The broker's identity as an agent checks it. The broker holds one long-lived Ed25519 key (every
 * broker on the same database shares it); an agent pins its public key at enrolment and from then on:
 * - at every connection, the broker proves the key by signing the welcome over the agent's nonce of
 *   this connection (so an old welcome cannot be replayed) and the broker's challenge;
 * - every message that changes the device (`config`, `agent_update`) carries `sig`: an Ed25519
 *   signature over the canonical JSON of the whole message, with the device id, the connection's
 *   agent nonce, a sequence number rising within the connection and the broker's time. A message
 *   for another device, from another connection, replayed within one, or altered is refused.
 * Both sides use these functions, so they cannot drift apart.
 */
import crypto, { type KeyObject } from 'node:crypto';
import { canonicalJson } from './canonical-json.js';

/** The broker messages an agent acts on only with a valid signature. */
export const BROKER_SIGNED_TYPES: readonly string[] = ['config', 'agent_update'];

/** An agent's nonce for one connection: 16 to 64 bytes, base64url. */
export const AGENT_NONCE_PATTERN = /^[A-Za-z0-9_-]{22,86}$/;

/** The `sig` of a signed broker message. */
export interface BrokerSignature {
  /** the device the message is for */
  device_id: string;
  /** the agent's nonce of this connection (its auth message) */
  nonce: string;
  /** 1 for the first signed message of a connection, then rising */
  seq: number;
  /** broker time, Unix milliseconds */
  ts: number;
  /** Ed25519 over MESSAGE_CONTEXT and the canonical JSON of these fields and the message, base64 */
  signature: string;
}

/** Why an agent refused a broker message or welcome; code branches on these. */
export const BrokerTrustError = {
  /** the message carries no signature (or a malformed one) */
  unsigned: 'unsigned',
  /** the signature does not verify with the pinned key: altered, or another broker's */
  badSignature: 'bad_signature',
  /** signed for another device */
  otherDevice: 'other_device',
  /** signed for another connection (an old message replayed) */
  otherConnection: 'other_connection',
  /** a sequence number not above the last one accepted on this connection */
  replayed: 'replayed',
} as const;
export type BrokerTrustError = (typeof BrokerTrustError)[keyof typeof BrokerTrustError];

const MESSAGE_CONTEXT = 'fleet-broker-message-v1\n';
const WELCOME_CONTEXT = 'fleet-broker-welcome-v1\n';
const PEM_PUBLIC_KEY = /^-----BEGIN PUBLIC KEY-----\r?\n[A-Za-z0-9+/=\r\n]+-----END PUBLIC KEY-----\r?\n?$/;

/** Parses the broker's public key (PEM SPKI, Ed25519); throws an Error saying what is wrong. */
export function parseBrokerPublicKey(pem: unknown): KeyObject {
  if (typeof pem !== 'string' || pem.length > 1024 || !PEM_PUBLIC_KEY.test(pem)) throw new Error('is not a PEM public key');
  let key: KeyObject;
  try {
    key = crypto.createPublicKey({ key: pem, format: 'pem' });
  } catch {
    throw new Error('is not a PEM public key');
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new Error('must be an Ed25519 public key');
  return key;
}

/** The canonical PEM of a broker public key. */
export function brokerKeyPem(key: KeyObject): string {
  return key.export({ type: 'spki', format: 'pem' }).toString();
}

/** `SHA256:<base64>` of the key's DER SPKI, for people to compare. */
export function brokerKeyFingerprint(key: KeyObject): string {
  const digest = crypto
    .createHash('sha256')
    .update(key.export({ type: 'spki', format: 'der' }))
    .digest('base64');
  return `SHA256:${digest.replace(/=+$/, '')}`;
}

/** The message without its `sig`, as JSON carries it (what both sides sign and verify). */
function bodyOf(msg: object): unknown {
  const { sig: _sig, ...body } = msg as Record<string, unknown>;
  return JSON.parse(JSON.stringify(body)) as unknown;
}

function messageBytes(body: unknown, fields: Omit<BrokerSignature, 'signature'>): Buffer {
  return Buffer.from(
    MESSAGE_CONTEXT + canonicalJson({ device_id: fields.device_id, nonce: fields.nonce, seq: fields.seq, ts: fields.ts, message: body }),
    'utf8',
  );
}

/** The message with its `sig` (broker side). */
export function signBrokerMessage<M extends { t: string }>(
  privateKey: KeyObject,
  msg: M,
  fields: Omit<BrokerSignature, 'signature'>,
): M & { sig: BrokerSignature } {
  const signature = crypto.sign(null, messageBytes(bodyOf(msg), fields), privateKey).toString('base64');
  return { ...msg, sig: { ...fields, signature } };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Checks a broker message's `sig` against the pinned key, this device, this connection's nonce and
 * the last sequence number accepted on it (agent side). Answers the signed sequence number, or why not.
 */
export function verifyBrokerMessage(
  publicKey: KeyObject,
  msg: object,
  expected: { deviceId: string; nonce: string; afterSeq: number },
): { ok: true; seq: number } | { ok: false; error: BrokerTrustError } {
  const sig = (msg as { sig?: unknown }).sig;
  if (
    !isObject(sig) ||
    typeof sig.device_id !== 'string' ||
    typeof sig.nonce !== 'string' ||
    typeof sig.seq !== 'number' ||
    !Number.isSafeInteger(sig.seq) ||
    typeof sig.ts !== 'number' ||
    !Number.isSafeInteger(sig.ts) ||
    typeof sig.signature !== 'string' ||
    sig.signature.length > 200
  ) {
    return { ok: false, error: BrokerTrustError.unsigned };
  }
  const fields = { device_id: sig.device_id, nonce: sig.nonce, seq: sig.seq, ts: sig.ts };
  let valid = false;
  try {
    valid = crypto.verify(null, messageBytes(bodyOf(msg), fields), publicKey, Buffer.from(sig.signature, 'base64'));
  } catch {
    valid = false;
  }
  if (!valid) return { ok: false, error: BrokerTrustError.badSignature };
  if (sig.device_id !== expected.deviceId) return { ok: false, error: BrokerTrustError.otherDevice };
  if (sig.nonce !== expected.nonce) return { ok: false, error: BrokerTrustError.otherConnection };
  if (sig.seq <= expected.afterSeq) return { ok: false, error: BrokerTrustError.replayed };
  return { ok: true, seq: sig.seq };
}

/** What the broker's handshake proof (in the welcome, or in a refusal) covers. */
export interface WelcomeFields {
  device_id: string;
  /** the agent's nonce of this connection */
  agent_nonce: string;
  /** the broker's challenge nonce of this connection */
  challenge: string;
  /**
   * `welcome` (default): the broker lets the agent in. `unknown_device`: the broker does not know the
   * device, so the agent may enrol again: proven, so that a server without the key cannot make an
   * enrolled agent hand it its bootstrap key.
   */
  outcome?: 'welcome' | 'unknown_device';
}

function welcomeBytes(f: WelcomeFields): Buffer {
  return Buffer.from(
    WELCOME_CONTEXT + canonicalJson({ device_id: f.device_id, agent_nonce: f.agent_nonce, challenge: f.challenge, outcome: f.outcome ?? 'welcome' }),
    'utf8',
  );
}

/** The broker's proof of its key in the welcome (base64 Ed25519). */
export function signWelcome(privateKey: KeyObject, fields: WelcomeFields): string {
  return crypto.sign(null, welcomeBytes(fields), privateKey).toString('base64');
}

/** True when `signature` proves the broker holds `publicKey` for this device and connection. */
export function verifyWelcome(publicKey: KeyObject, fields: WelcomeFields, signature: unknown): boolean {
  if (typeof signature !== 'string' || signature.length === 0 || signature.length > 200) return false;
  try {
    return crypto.verify(null, welcomeBytes(fields), publicKey, Buffer.from(signature, 'base64'));
  } catch {
    return false;
  }
}
