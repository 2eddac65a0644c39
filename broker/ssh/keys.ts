/**
 * SSH public keys users register for the SSH gateway (table ssh_keys, owned here): what a key line
 * must be to be registered (Ed25519, ECDSA, or RSA of at least 2048 bits; bounded in size and in
 * number per user; one fingerprint names one user), and the store the REST calls and the gateway
 * use. The gateway accepts a registered key only when SSH_USER_KEYS is on (docs/ssh.md).
 */
import crypto from 'node:crypto';
import ssh2, { type ParsedKey } from 'ssh2';
import type { Db } from '../db/database.js';
import { conflict, invalid, notFound } from '../errors.js';
import { fingerprintOf } from '../../shared/ssh-keys.js';

/** Keys one user may register. */
export const MAX_SSH_KEYS_PER_USER = 20;
/** Longest key line accepted (an RSA key of 16384 bits is about 2,800 characters). */
export const MAX_SSH_KEY_LINE = 4096;
/** Longest comment kept. */
export const MAX_SSH_KEY_COMMENT = 200;
/** Smallest RSA modulus accepted. */
export const MIN_RSA_BITS = 2048;
const MAX_RSA_BITS = 16384;
const LINE = /^(ssh-ed25519|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|ssh-rsa) ([A-Za-z0-9+/]+={0,2})(?:[ \t]+([^\r\n]*))?$/;

// A registered key as the API answers it: declared once, with its schema, for the broker and the console.
import type { SshKeyRecord } from '../../shared/api-types/ssh-keys.js';
export type { SshKeyRecord };

/** A key line checked: its canonical form (type and blob, no comment), blob, fingerprint and comment. */
export interface CheckedKey {
  type: string;
  line: string;
  blob: Buffer;
  fingerprint: string;
  comment: string;
}

/** The key of a stored line, as ssh2 reads it (to check a client's signature with). */
export function parsedKey(line: string): ParsedKey | undefined {
  const parsed = ssh2.utils.parseKey(line);
  return parsed instanceof Error || Array.isArray(parsed) ? undefined : parsed;
}

/**
 * Checks an OpenSSH public key line (`ssh-ed25519 AAAA… comment`): one of the accepted types, its
 * blob naming the same type, an RSA modulus of at least MIN_RSA_BITS. Throws 400 otherwise.
 */
export function checkKeyLine(raw: string, comment?: string): CheckedKey {
  const refuse = (why: string) => invalid(`body.public_key: ${why}`, { field: 'public_key' });
  if (raw.length > MAX_SSH_KEY_LINE) throw refuse(`at most ${MAX_SSH_KEY_LINE} characters`);
  const m = LINE.exec(raw.trim());
  if (!m) throw refuse('an OpenSSH public key line is expected: ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa, then the key in base64');
  const [, type, base64, lineComment] = m;
  const blob = Buffer.from(base64, 'base64');
  const key = parsedKey(`${type} ${base64}`);
  if (!key || key.type !== type || !key.getPublicSSH().equals(blob)) throw refuse(`the key data is not a ${type} key`);
  if (type === 'ssh-rsa') {
    let bits = 0;
    try {
      bits = crypto.createPublicKey(key.getPublicPEM()).asymmetricKeyDetails?.modulusLength ?? 0;
    } catch {
      throw refuse('the key data is not an RSA key');
    }
    if (bits < MIN_RSA_BITS || bits > MAX_RSA_BITS) throw refuse(`an RSA key must have ${MIN_RSA_BITS} to ${MAX_RSA_BITS} bits (this one has ${bits})`);
  }
  const text = (comment ?? lineComment ?? '').trim();
  if (text.length > MAX_SSH_KEY_COMMENT || /[\u0000-\u001f\u007f]/.test(text))
    throw invalid(`comment: at most ${MAX_SSH_KEY_COMMENT} characters, no control characters`, { field: 'comment' });
  return { type, line: `${type} ${blob.toString('base64')}`, blob, fingerprint: fingerprintOf(blob), comment: text };
}

type Row = { id: string; user_id: string; public_key: string; fingerprint: string; comment: string; created_at: string };

function record(row: Row): SshKeyRecord {
  return {
    key_id: row.id,
    user_id: row.user_id,
    public_key: row.public_key,
    type: row.public_key.split(' ')[0],
    fingerprint: row.fingerprint,
    comment: row.comment,
    created_at: row.created_at,
  };
}

/** The ssh_keys table: the users' registered keys. */
export class SshKeys {
  constructor(private readonly db: Db) {}

  /** A user's keys, oldest first. */
  async list(userId: string): Promise<SshKeyRecord[]> {
    const rows = await this.db.selectFrom('ssh_keys').selectAll().where('user_id', '=', userId).orderBy('created_at').orderBy('id').execute();
    return rows.map(record);
  }

  /** One key of a user; 404 for a key of anyone else (whose keys exist is not told). */
  async get(userId: string, keyId: string): Promise<SshKeyRecord> {
    const key = await this.find(userId, keyId);
    if (!key) throw notFound(`SSH key ${keyId}`);
    return key;
  }

  /** One key of a user, or undefined (what an audit entry of its removal shows). */
  async find(userId: string, keyId: string): Promise<SshKeyRecord | undefined> {
    const row = await this.db.selectFrom('ssh_keys').selectAll().where('id', '=', keyId).where('user_id', '=', userId).executeTakeFirst();
    return row ? record(row) : undefined;
  }

  /** Registers a key for a user: 409 when its fingerprint is registered already, or the user has MAX_SSH_KEYS_PER_USER. */
  async add(userId: string, line: string, comment?: string, now = new Date()): Promise<SshKeyRecord> {
    const key = checkKeyLine(line, comment);
    const taken = await this.db.selectFrom('ssh_keys').select('id').where('fingerprint', '=', key.fingerprint).executeTakeFirst();
    const exists = () => conflict('ssh_key_exists', `The key ${key.fingerprint} is registered already.`, { field: 'public_key' });
    if (taken) throw exists();
    const { count } = await this.db
      .selectFrom('ssh_keys')
      .select((eb) => eb.fn.countAll<number>().as('count'))
      .where('user_id', '=', userId)
      .executeTakeFirstOrThrow();
    if (Number(count) >= MAX_SSH_KEYS_PER_USER)
      throw conflict('ssh_keys_exhausted', `At most ${MAX_SSH_KEYS_PER_USER} SSH keys per user: remove one first.`, { max: MAX_SSH_KEYS_PER_USER });
    const row: Row = {
      id: crypto.randomUUID(),
      user_id: userId,
      public_key: key.line,
      fingerprint: key.fingerprint,
      comment: key.comment,
      created_at: now.toISOString(),
    };
    try {
      await this.db.insertInto('ssh_keys').values(row).execute();
    } catch (err) {
      if (/unique|duplicate key/i.test((err as Error).message)) throw exists();
      throw err;
    }
    return record(row);
  }

  /** Removes one key of a user (404 for a key of anyone else). */
  async remove(userId: string, keyId: string): Promise<void> {
    const gone = await this.db.deleteFrom('ssh_keys').where('id', '=', keyId).where('user_id', '=', userId).executeTakeFirst();
    if (Number(gone.numDeletedRows) === 0) throw notFound(`SSH key ${keyId}`);
  }

  /** The key with this fingerprint, whoever registered it (the gateway's look-up). */
  async byFingerprint(fingerprint: string): Promise<SshKeyRecord | undefined> {
    const row = await this.db.selectFrom('ssh_keys').selectAll().where('fingerprint', '=', fingerprint).executeTakeFirst();
    return row ? record(row) : undefined;
  }

  /** Which of these keys are still registered (one query for every key login the gateway re-checks). */
  async existing(keyIds: string[]): Promise<Set<string>> {
    if (keyIds.length === 0) return new Set();
    const rows = await this.db.selectFrom('ssh_keys').select('id').where('id', 'in', keyIds).execute();
    return new Set(rows.map((r) => r.id));
  }
}
