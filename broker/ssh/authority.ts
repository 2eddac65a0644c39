/**
 * The SSH certificate authority and host key of the gateway. Both are Ed25519 keys made at the
 * first start and kept in the database's settings, like the JWT secret and the broker signing key:
 * every broker on one database signs with the same CA and presents the same host key, so a user's
 * known_hosts line and certificate work through any of them. Never logged, never served (only
 * their public halves).
 *
 * User certificates follow OpenSSH's PROTOCOL.certkeys (`ssh-ed25519-cert-v01@openssh.com`): the
 * key id names the user (their email), the only principal is that email, and the extension
 * `session@fleet` carries the sign-in session behind the certificate, which the gateway checks on
 * every connection (a revoked session or a disabled user ends the certificate at once).
 */
import crypto, { type KeyObject } from 'node:crypto';
import type { SettingsStore } from '../settings.js';
import {
  ED25519,
  ed25519Blob,
  ed25519Raw,
  ed25519PublicKey,
  openSshPrivateKey,
  publicKeyLine,
  sshString,
  sshUint32,
  sshUint64,
  SshReader,
} from '../../shared/ssh-keys.js';

export const SSH_CA_SETTING = 'ssh_ca_key';
export const SSH_HOST_KEY_SETTING = 'ssh_host_key';
export const CERT_ALGO = 'ssh-ed25519-cert-v01@openssh.com';
/** The extension carrying the sign-in session id. */
export const SESSION_EXTENSION = 'session@fleet';
/** A certificate lives as long as its sign-in session, and never longer than this. */
export const MAX_CERT_SECONDS = 12 * 3600;
/** Clock skew allowed on a certificate's start. */
const BACKDATE_SECONDS = 60;
const USER_CERT = 1;

/** What the gateway reads from a certificate it signed. */
export interface UserCertificate {
  keyId: string;
  principals: string[];
  sessionId: string;
  serial: bigint;
  validBefore: number;
  /** The user's own key, which signed the connection. */
  key: KeyObject;
}

/** Why a certificate is refused: a code for code, the sentence for people (and the audit). */
export type CertificateRefusal = { refused: 'not_a_certificate' | 'unknown_ca' | 'bad_signature' | 'expired' | 'not_yet_valid' | 'malformed'; reason: string };

async function loadKey(settings: Pick<SettingsStore, 'getOrCreate'>, name: string): Promise<KeyObject> {
  const pem = await settings.getOrCreate<string>(name, () =>
    crypto.generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  );
  const key = crypto.createPrivateKey({ key: pem, format: 'pem' });
  if (key.asymmetricKeyType !== 'ed25519') throw new Error(`the setting ${name} is not an Ed25519 private key`);
  return key;
}

export class SshAuthority {
  private readonly caBlob: Buffer;
  /** `ssh-ed25519 AAAA…` of the CA. */
  readonly caPublicKey: string;
  /** `ssh-ed25519 AAAA…` of the gateway's host key (what known_hosts lists). */
  readonly hostPublicKey: string;
  /** The host key as ssh2's server reads it. */
  readonly hostKeyFile: string;

  private constructor(
    private readonly ca: KeyObject,
    host: KeyObject,
  ) {
    const caPublic = crypto.createPublicKey(ca);
    this.caBlob = ed25519Blob(caPublic);
    this.caPublicKey = publicKeyLine(caPublic);
    this.hostPublicKey = publicKeyLine(crypto.createPublicKey(host));
    this.hostKeyFile = openSshPrivateKey(host);
  }

  static async load(settings: Pick<SettingsStore, 'getOrCreate'>): Promise<SshAuthority> {
    return new SshAuthority(await loadKey(settings, SSH_CA_SETTING), await loadKey(settings, SSH_HOST_KEY_SETTING));
  }

  /** A user certificate line (`ssh-ed25519-cert-v01@openssh.com AAAA… <key id>`) for the user's public key. */
  issue(userKey: KeyObject, fields: { keyId: string; principals: string[]; sessionId: string; validBefore: number; now?: number }): string {
    const now = Math.floor((fields.now ?? Date.now()) / 1000);
    const list = (entries: [string, string][]) =>
      Buffer.concat(
        entries
          .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
          .flatMap(([name, data]) => [sshString(name), sshString(data === '' ? Buffer.alloc(0) : sshString(data))]),
      );
    const body = Buffer.concat([
      sshString(CERT_ALGO),
      sshString(crypto.randomBytes(32)),
      sshString(ed25519Raw(userKey)),
      sshUint64(crypto.randomBytes(8).readBigUInt64BE(0)),
      sshUint32(USER_CERT),
      sshString(fields.keyId),
      sshString(Buffer.concat(fields.principals.map((p) => sshString(p)))),
      sshUint64(BigInt(now - BACKDATE_SECONDS)),
      sshUint64(BigInt(fields.validBefore)),
      sshString(Buffer.alloc(0)),
      sshString(
        list([
          ['permit-port-forwarding', ''],
          ['permit-pty', ''],
          [SESSION_EXTENSION, fields.sessionId],
        ]),
      ),
      sshString(Buffer.alloc(0)),
      sshString(this.caBlob),
    ]);
    const signature = Buffer.concat([sshString(ED25519), sshString(crypto.sign(null, body, this.ca))]);
    const cert = Buffer.concat([body, sshString(signature)]);
    return `${CERT_ALGO} ${cert.toString('base64')} ${fields.keyId}`;
  }

  /**
   * Reads and checks a certificate a client presents: signed by this CA, a user certificate, valid
   * now, no critical option this gateway does not enforce (OpenSSH refuses those too).
   */
  verify(algo: string, blob: Buffer, now = Date.now()): UserCertificate | CertificateRefusal {
    if (algo !== CERT_ALGO) return { refused: 'not_a_certificate', reason: `${algo} is not a certificate this gateway signs (${CERT_ALGO})` };
    let cert: UserCertificate & { signed: Buffer; signatureKey: Buffer; signature: Buffer; validAfter: bigint; type: number; critical: Buffer };
    try {
      const r = new SshReader(blob);
      if (r.text() !== CERT_ALGO) throw new Error('type');
      r.bytes(); // nonce
      const key = ed25519PublicKey(r.bytes());
      const serial = r.uint64();
      const type = r.uint32();
      const keyId = r.text();
      const principalsReader = new SshReader(r.bytes());
      const principals: string[] = [];
      while (!principalsReader.done) principals.push(principalsReader.text());
      const validAfter = r.uint64();
      const validBefore = r.uint64();
      const critical = r.bytes();
      const extReader = new SshReader(r.bytes());
      let sessionId = '';
      while (!extReader.done) {
        const name = extReader.text();
        const data = extReader.bytes();
        if (name === SESSION_EXTENSION) sessionId = new SshReader(data).text();
      }
      r.bytes(); // reserved
      const signatureKey = r.bytes();
      const signedLength = r.offset;
      const signature = r.bytes();
      if (!r.done) throw new Error('trailing bytes');
      cert = {
        keyId,
        principals,
        sessionId,
        serial,
        validBefore: Number(validBefore > BigInt(Number.MAX_SAFE_INTEGER) ? BigInt(Number.MAX_SAFE_INTEGER) : validBefore),
        key,
        signed: blob.subarray(0, signedLength),
        signatureKey,
        signature,
        validAfter,
        type,
        critical,
      };
    } catch {
      return { refused: 'malformed', reason: 'the certificate could not be read' };
    }
    if (!cert.signatureKey.equals(this.caBlob)) return { refused: 'unknown_ca', reason: 'the certificate was not signed by this fleet' };
    let signed = false;
    try {
      const s = new SshReader(cert.signature);
      signed = s.text() === ED25519 && crypto.verify(null, cert.signed, crypto.createPublicKey(this.ca), s.bytes());
    } catch {
      signed = false;
    }
    if (!signed) return { refused: 'bad_signature', reason: "the certificate's signature does not verify" };
    if (cert.type !== USER_CERT || !cert.sessionId || cert.critical.length > 0) return { refused: 'malformed', reason: 'not a user certificate of this fleet' };
    const seconds = BigInt(Math.floor(now / 1000));
    if (seconds < cert.validAfter) return { refused: 'not_yet_valid', reason: 'the certificate is not valid yet' };
    if (seconds >= BigInt(cert.validBefore)) return { refused: 'expired', reason: 'the certificate has expired; sign in again with fleet login' };
    return { keyId: cert.keyId, principals: cert.principals, sessionId: cert.sessionId, serial: cert.serial, validBefore: cert.validBefore, key: cert.key };
  }
}

/** Verifies the signature a client made with its (certified) key over the session's data. */
export function verifyUserSignature(key: KeyObject, data: Buffer, signature: Buffer): boolean {
  try {
    // The client sends `string "ssh-ed25519" string sig`; ssh2 strips the prefix only for plain keys.
    let raw = signature;
    if (signature.length !== 64) {
      const r = new SshReader(signature);
      if (r.text() !== ED25519) return false;
      raw = r.bytes();
      if (!r.done) return false;
    }
    return crypto.verify(null, data, key, raw);
  } catch {
    return false;
  }
}
