/**
 * The agent's state directory: its EC P-256 key pair (made on first start), what it knows of its
 * enrolment, and the broker's public key pinned at enrolment (or, for a device enrolled before
 * brokers signed, at its first connection after: trust on first use). The private key never leaves this directory (mode 0700, key file 0600, written
 * atomically so a crash never leaves half a key).
 */
import crypto, { type KeyObject } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { brokerKeyPem, parseBrokerPublicKey } from '../shared/broker-signature.js';
import { deviceIdOf, keyFingerprint, publicKeyPem } from '../shared/device-key.js';
import { isoTime } from './iso-time.js';

export const KEY_FILE = 'device-key.pem';
export const STATE_FILE = 'agent-state.json';
/** The broker's public signing key (PEM, Ed25519), pinned at enrolment: 0600 like the device key. */
export const BROKER_KEY_FILE = 'broker-key.pem';

export interface Identity {
  deviceId: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
  publicKeyPem: string;
  fingerprint: string;
}

export interface EnrolmentState {
  /** The device id this state is about: a new key pair starts afresh. */
  device_id: string;
  /** The broker it enrolled with. */
  broker?: string;
  /** Set once the broker accepted the enrolment. */
  enrolled?: 'pending' | 'approved';
  /** Set when the broker removed or rejected this key: it is never used again. */
  revoked?: { reason: string; at: string };
}

/** Writes a file atomically: a temporary file in the same directory, flushed, then renamed over. */
export function writeFileAtomic(file: string, data: string, mode: number): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`);
  const fd = fs.openSync(tmp, 'wx', mode);
  try {
    fs.writeSync(fd, data);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  try {
    fs.renameSync(tmp, file);
  } catch (err) {
    fs.rmSync(tmp, { force: true });
    throw err;
  }
}

function identityOf(privateKey: KeyObject): Identity {
  const publicKey = crypto.createPublicKey(privateKey);
  return { deviceId: deviceIdOf(publicKey), privateKey, publicKey, publicKeyPem: publicKeyPem(publicKey), fingerprint: keyFingerprint(publicKey) };
}

export class StateDir {
  constructor(readonly dir: string) {}

  get keyFile(): string {
    return path.join(this.dir, KEY_FILE);
  }

  get stateFile(): string {
    return path.join(this.dir, STATE_FILE);
  }

  get brokerKeyFile(): string {
    return path.join(this.dir, BROKER_KEY_FILE);
  }

  /**
   * The pinned broker key; undefined when none is pinned yet. A file that is not an Ed25519 public
   * key throws: a damaged pin is never taken as "none" (that would trust the next broker met).
   */
  brokerKey(): KeyObject | undefined {
    let pem: string;
    try {
      pem = fs.readFileSync(this.brokerKeyFile, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
    try {
      return parseBrokerPublicKey(pem);
    } catch (err) {
      throw new Error(`${this.brokerKeyFile} ${(err as Error).message}: remove it to pin the broker's key again at the next enrolment`);
    }
  }

  /** Pins the broker's key (0600, atomically). */
  pinBrokerKey(key: KeyObject): void {
    this.ensure();
    writeFileAtomic(this.brokerKeyFile, brokerKeyPem(key), 0o600);
  }

  /** Creates the directory (0700) when missing; tightens it when it is open to others. */
  ensure(): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const mode = fs.statSync(this.dir).mode & 0o777;
    if (mode & 0o077) fs.chmodSync(this.dir, 0o700);
  }

  /** The key pair, made on first use. */
  identity(): Identity {
    this.ensure();
    if (fs.existsSync(this.keyFile)) {
      const mode = fs.statSync(this.keyFile).mode & 0o777;
      if (mode & 0o077) fs.chmodSync(this.keyFile, 0o600);
      return identityOf(crypto.createPrivateKey({ key: fs.readFileSync(this.keyFile), format: 'pem' }));
    }
    const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
    try {
      // 'wx' semantics through link: a second agent racing on the same directory keeps the first key.
      const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
      const tmp = `${this.keyFile}.${process.pid}.new`;
      writeFileAtomic(tmp, pem, 0o600);
      try {
        fs.linkSync(tmp, this.keyFile);
      } finally {
        fs.rmSync(tmp, { force: true });
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      return this.identity();
    }
    return identityOf(privateKey);
  }

  /** Sets a revoked key aside (kept for inspection) so the next start makes a new key pair. */
  retireKey(): void {
    if (!fs.existsSync(this.keyFile)) return;
    const stamp = isoTime().replace(/[:.]/g, '-');
    fs.renameSync(this.keyFile, path.join(this.dir, `${KEY_FILE}.revoked-${stamp}`));
    fs.rmSync(this.stateFile, { force: true });
  }

  /** The enrolment state of `deviceId`; a state file about another key counts as none. */
  readState(deviceId: string): EnrolmentState {
    try {
      const parsed = JSON.parse(fs.readFileSync(this.stateFile, 'utf8')) as EnrolmentState;
      if (parsed && parsed.device_id === deviceId) return parsed;
    } catch {
      // missing or unreadable: start afresh
    }
    return { device_id: deviceId };
  }

  writeState(state: EnrolmentState): void {
    this.ensure();
    writeFileAtomic(this.stateFile, `${JSON.stringify(state, null, 2)}\n`, 0o600);
  }
}
