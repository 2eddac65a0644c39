/**
 * OpenSSH key formats for Ed25519, spoken by the broker (its SSH certificate authority and host
 * key) and the CLI (which makes the user's key pair locally and sends only the public half):
 * the SSH wire encoding (RFC 4251 strings), `ssh-ed25519 AAAA…` public key lines, and the
 * unencrypted `openssh-key-v1` private key file that `ssh` reads.
 */
import crypto, { type KeyObject } from 'node:crypto';

export const ED25519 = 'ssh-ed25519';

/** An RFC 4251 `string`: a uint32 length, then the bytes. */
export function sshString(value: Buffer | string): Buffer {
  const bytes = typeof value === 'string' ? Buffer.from(value) : value;
  const length = Buffer.allocUnsafe(4);
  length.writeUInt32BE(bytes.length, 0);
  return Buffer.concat([length, bytes]);
}

export function sshUint32(value: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(value, 0);
  return b;
}

export function sshUint64(value: bigint): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64BE(value, 0);
  return b;
}

/** Reads the SSH wire encoding; every read past the end throws, so a short blob never half-parses. */
export class SshReader {
  private pos = 0;
  constructor(private readonly buf: Buffer) {}

  get offset(): number {
    return this.pos;
  }

  get done(): boolean {
    return this.pos === this.buf.length;
  }

  private take(n: number): Buffer {
    if (n < 0 || this.pos + n > this.buf.length) throw new Error('truncated SSH data');
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  uint32(): number {
    return this.take(4).readUInt32BE(0);
  }

  uint64(): bigint {
    return this.take(8).readBigUInt64BE(0);
  }

  bytes(): Buffer {
    return this.take(this.uint32());
  }

  text(): string {
    return this.bytes().toString('utf8');
  }
}

/** The raw 32 bytes of an Ed25519 public key. */
export function ed25519Raw(key: KeyObject): Buffer {
  const jwk = key.export({ format: 'jwk' }) as { x?: string };
  if (key.asymmetricKeyType !== 'ed25519' || !jwk.x) throw new Error('not an Ed25519 key');
  return Buffer.from(jwk.x, 'base64url');
}

/** The public key as SSH encodes it (`string "ssh-ed25519" string key`). */
export function ed25519Blob(key: KeyObject): Buffer {
  return Buffer.concat([sshString(ED25519), sshString(ed25519Raw(key))]);
}

/** A public KeyObject from the 32 raw bytes. */
export function ed25519PublicKey(raw: Buffer): KeyObject {
  if (raw.length !== 32) throw new Error('an Ed25519 public key is 32 bytes');
  return crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}

/** `ssh-ed25519 AAAA… comment`, as in authorized_keys and .pub files. */
export function publicKeyLine(key: KeyObject, comment = ''): string {
  return `${ED25519} ${ed25519Blob(key).toString('base64')}${comment ? ` ${comment}` : ''}`;
}

/**
 * The Ed25519 public key of a `ssh-ed25519 AAAA… [comment]` line; undefined for anything else
 * (another key type, a blob whose inner type disagrees, trailing bytes).
 */
export function parsePublicKeyLine(line: string): KeyObject | undefined {
  const m = /^ssh-ed25519 ([A-Za-z0-9+/]+={0,2})(?: [^\r\n]*)?$/.exec(line.trim());
  if (!m) return undefined;
  try {
    const r = new SshReader(Buffer.from(m[1], 'base64'));
    if (r.text() !== ED25519) return undefined;
    const raw = r.bytes();
    return r.done ? ed25519PublicKey(raw) : undefined;
  } catch {
    return undefined;
  }
}

/** The SHA-256 fingerprint as `ssh-keygen -l` prints it. */
export function fingerprintOf(blob: Buffer): string {
  return `SHA256:${crypto.createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/**
 * An unencrypted OpenSSH private key file (`-----BEGIN OPENSSH PRIVATE KEY-----`) of an Ed25519
 * key: what `ssh -i` and ssh2's `hostKeys` read.
 */
export function openSshPrivateKey(privateKey: KeyObject, comment = ''): string {
  const jwk = privateKey.export({ format: 'jwk' }) as { d?: string; x?: string };
  if (privateKey.asymmetricKeyType !== 'ed25519' || !jwk.d || !jwk.x) throw new Error('not an Ed25519 private key');
  const seed = Buffer.from(jwk.d, 'base64url');
  const pub = Buffer.from(jwk.x, 'base64url');
  const publicBlob = Buffer.concat([sshString(ED25519), sshString(pub)]);
  const check = crypto.randomBytes(4);
  let secret = Buffer.concat([check, check, sshString(ED25519), sshString(pub), sshString(Buffer.concat([seed, pub])), sshString(comment)]);
  // Padded to the cipher's block size (8 for "none") with 1, 2, 3, …
  const pad = (8 - (secret.length % 8)) % 8;
  secret = Buffer.concat([secret, Buffer.from(Array.from({ length: pad }, (_, i) => i + 1))]);
  const body = Buffer.concat([
    Buffer.from('openssh-key-v1\0'),
    sshString('none'),
    sshString('none'),
    sshString(''),
    sshUint32(1),
    sshString(publicBlob),
    sshString(secret),
  ]);
  const lines = body.toString('base64').match(/.{1,70}/g) ?? [];
  return `-----BEGIN OPENSSH PRIVATE KEY-----\n${lines.join('\n')}\n-----END OPENSSH PRIVATE KEY-----\n`;
}

/** The Ed25519 private key of an unencrypted OpenSSH private key file (as written above). */
export function parseOpenSshPrivateKey(text: string): KeyObject {
  const m = /-----BEGIN OPENSSH PRIVATE KEY-----([\s\S]+?)-----END OPENSSH PRIVATE KEY-----/.exec(text);
  if (!m) throw new Error('not an OpenSSH private key');
  const body = Buffer.from(m[1].replace(/\s+/g, ''), 'base64');
  const magic = 'openssh-key-v1\0';
  if (body.subarray(0, magic.length).toString('latin1') !== magic) throw new Error('not an OpenSSH private key');
  const r = new SshReader(body.subarray(magic.length));
  if (r.text() !== 'none' || r.text() !== 'none') throw new Error('encrypted OpenSSH private keys are not read here');
  r.bytes();
  if (r.uint32() !== 1) throw new Error('one key per file');
  r.bytes();
  const s = new SshReader(r.bytes());
  if (s.uint32() !== s.uint32()) throw new Error('corrupt OpenSSH private key');
  if (s.text() !== ED25519) throw new Error('not an Ed25519 key');
  s.bytes();
  const seed = s.bytes().subarray(0, 32);
  const prefix = Buffer.from('302e020100300506032b657004220420', 'hex');
  return crypto.createPrivateKey({ key: Buffer.concat([prefix, seed]), format: 'der', type: 'pkcs8' });
}
