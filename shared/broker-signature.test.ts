import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  brokerKeyFingerprint,
  brokerKeyPem,
  BrokerTrustError,
  parseBrokerPublicKey,
  signBrokerMessage,
  signWelcome,
  verifyBrokerMessage,
  verifyWelcome,
} from './broker-signature.js';
import type { ControlMessage } from './protocol.js';

const broker = crypto.generateKeyPairSync('ed25519');
const other = crypto.generateKeyPairSync('ed25519');
const DEVICE_A = 'a'.repeat(64);
const DEVICE_B = 'b'.repeat(64);
const NONCE = crypto.randomBytes(32).toString('base64url');

const config: ControlMessage = {
  t: 'config',
  config: {
    commit_id: 'c1',
    bundles: ['file_distribution'],
    bundle_data: { file_distribution: { files: [{ templates: [{ source: '/x', destination: '/etc/x', sha256: '00' }] }] } },
  },
  attributes: { site: 'north' },
};

/** What travels: the message as JSON, parsed again by the agent. */
const wire = <T>(msg: T): T => JSON.parse(JSON.stringify(msg)) as T;
const expected = { deviceId: DEVICE_A, nonce: NONCE, afterSeq: 0 };

describe('broker message signatures', () => {
  const signed = wire(signBrokerMessage(broker.privateKey, config, { device_id: DEVICE_A, nonce: NONCE, seq: 1, ts: 1_700_000_000_000 }));

  it('verifies a message signed for this device and connection, whatever the key order on the wire', () => {
    expect(verifyBrokerMessage(broker.publicKey, signed, expected)).toEqual({ ok: true, seq: 1 });
    const reordered = {
      sig: signed.sig,
      attributes: { site: 'north' },
      config: { bundle_data: config.config.bundle_data, bundles: ['file_distribution'], commit_id: 'c1' },
      t: 'config',
    };
    expect(verifyBrokerMessage(broker.publicKey, reordered, expected)).toEqual({ ok: true, seq: 1 });
  });

  it('refuses a tampered payload, anywhere in it', () => {
    const tampered = wire(signed);
    (tampered.config.bundle_data.file_distribution as { files: { templates: { sha256: string }[] }[] }).files[0].templates[0].sha256 = 'ff';
    expect(verifyBrokerMessage(broker.publicKey, tampered, expected)).toEqual({ ok: false, error: BrokerTrustError.badSignature });
    const added = { ...wire(signed), attributes: { site: 'north', extra: '1' } };
    expect(verifyBrokerMessage(broker.publicKey, added, expected)).toEqual({ ok: false, error: BrokerTrustError.badSignature });
    const renumbered = wire(signed);
    renumbered.sig!.seq = 7;
    expect(verifyBrokerMessage(broker.publicKey, renumbered, expected)).toEqual({ ok: false, error: BrokerTrustError.badSignature });
  });

  it('refuses a message signed for another device', () => {
    const forB = wire(signBrokerMessage(broker.privateKey, config, { device_id: DEVICE_B, nonce: NONCE, seq: 1, ts: 1 }));
    expect(verifyBrokerMessage(broker.publicKey, forB, expected)).toEqual({ ok: false, error: BrokerTrustError.otherDevice });
    // Relabelling it for A breaks the signature.
    const relabelled = wire(forB);
    relabelled.sig!.device_id = DEVICE_A;
    expect(verifyBrokerMessage(broker.publicKey, relabelled, expected)).toEqual({ ok: false, error: BrokerTrustError.badSignature });
  });

  it('refuses a replay: from an earlier connection, or an old sequence number on this one', () => {
    expect(verifyBrokerMessage(broker.publicKey, signed, { ...expected, nonce: crypto.randomBytes(32).toString('base64url') })).toEqual({
      ok: false,
      error: BrokerTrustError.otherConnection,
    });
    expect(verifyBrokerMessage(broker.publicKey, signed, { ...expected, afterSeq: 1 })).toEqual({ ok: false, error: BrokerTrustError.replayed });
  });

  it('refuses another broker key, and a message without a signature', () => {
    const forged = wire(signBrokerMessage(other.privateKey, config, { device_id: DEVICE_A, nonce: NONCE, seq: 1, ts: 1 }));
    expect(verifyBrokerMessage(broker.publicKey, forged, expected)).toEqual({ ok: false, error: BrokerTrustError.badSignature });
    expect(verifyBrokerMessage(broker.publicKey, config, expected)).toEqual({ ok: false, error: BrokerTrustError.unsigned });
    expect(verifyBrokerMessage(broker.publicKey, { ...config, sig: { signature: 'x' } }, expected)).toEqual({ ok: false, error: BrokerTrustError.unsigned });
  });
});

describe('the welcome proof', () => {
  const fields = { device_id: DEVICE_A, agent_nonce: NONCE, challenge: 'c' };
  const signature = signWelcome(broker.privateKey, fields);

  it('verifies with the broker key for this device and connection only', () => {
    expect(verifyWelcome(broker.publicKey, fields, signature)).toBe(true);
    expect(verifyWelcome(other.publicKey, fields, signature)).toBe(false);
    expect(verifyWelcome(broker.publicKey, { ...fields, device_id: DEVICE_B }, signature)).toBe(false);
    expect(verifyWelcome(broker.publicKey, { ...fields, agent_nonce: 'another' }, signature)).toBe(false);
    expect(verifyWelcome(broker.publicKey, fields, undefined)).toBe(false);
    expect(verifyWelcome(broker.publicKey, fields, '')).toBe(false);
  });

  it('tells a welcome from an "unknown device" refusal', () => {
    const refusal = signWelcome(broker.privateKey, { ...fields, outcome: 'unknown_device' });
    expect(verifyWelcome(broker.publicKey, { ...fields, outcome: 'unknown_device' }, refusal)).toBe(true);
    expect(verifyWelcome(broker.publicKey, fields, refusal)).toBe(false);
    expect(verifyWelcome(broker.publicKey, { ...fields, outcome: 'unknown_device' }, signature)).toBe(false);
  });
});

describe('broker public keys', () => {
  it('parse as Ed25519 PEM only', () => {
    const pem = brokerKeyPem(broker.publicKey);
    expect(brokerKeyFingerprint(parseBrokerPublicKey(pem))).toBe(brokerKeyFingerprint(broker.publicKey));
    expect(() => parseBrokerPublicKey('nope')).toThrow(/PEM/);
    expect(() => parseBrokerPublicKey(42)).toThrow(/PEM/);
    const ec = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    expect(() => parseBrokerPublicKey(ec.publicKey.export({ type: 'spki', format: 'pem' }).toString())).toThrow(/Ed25519/);
  });
});
