/**
 * The broker's long-lived signing key (Ed25519): agents pin its public key at enrolment and accept
 * configurations and update announcements only when signed with it (shared/broker-signature.ts).
 * Made at the first start and kept in the database's settings, like the JWT secret, so every broker
 * on the same database signs with the same key; never logged, never served (only its public half).
 */
import crypto, { type KeyObject } from 'node:crypto';
import { brokerKeyFingerprint, brokerKeyPem, signBrokerMessage, signWelcome, type BrokerSignature, type WelcomeFields } from '../../shared/broker-signature.js';
import type { ControlMessage } from '../../shared/protocol.js';
import type { SettingsStore } from '../settings.js';

/** The settings entry holding the private key (PKCS#8 PEM). */
export const BROKER_KEY_SETTING = 'broker_signing_key';

export class BrokerKey {
  readonly publicKey: KeyObject;
  /** The public key as agents receive it (PEM SPKI). */
  readonly publicKeyPem: string;
  readonly fingerprint: string;

  private constructor(private readonly privateKey: KeyObject) {
    this.publicKey = crypto.createPublicKey(privateKey);
    this.publicKeyPem = brokerKeyPem(this.publicKey);
    this.fingerprint = brokerKeyFingerprint(this.publicKey);
  }

  /** The key of this database, made by the first broker that needs it (first writer wins). */
  static async load(settings: Pick<SettingsStore, 'getOrCreate'>): Promise<BrokerKey> {
    const pem = await settings.getOrCreate<string>(BROKER_KEY_SETTING, () =>
      crypto.generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
    );
    const key = crypto.createPrivateKey({ key: pem, format: 'pem' });
    if (key.asymmetricKeyType !== 'ed25519') throw new Error(`the setting ${BROKER_KEY_SETTING} is not an Ed25519 private key`);
    return new BrokerKey(key);
  }

  /** A message for one device's connection, with its signature. */
  sign<M extends ControlMessage>(msg: M, fields: Omit<BrokerSignature, 'signature'>): M & { sig: BrokerSignature } {
    return signBrokerMessage(this.privateKey, msg, fields);
  }

  /** The welcome's proof of this key. */
  signWelcome(fields: WelcomeFields): string {
    return signWelcome(this.privateKey, fields);
  }
}
