import type { Principal } from '../access/principal.js';
import type { AuthService } from '../auth/service.js';
import { conflict, invalid } from '../errors.js';
import { parsePublicKeyLine } from '../../shared/ssh-keys.js';
import { MAX_CERT_SECONDS, type SshAuthority } from './authority.js';
import type { SshGateway } from './gateway.js';
import type { SshKeys } from './keys.js';

/** What `fleet login` writes: the certificate, and what the client needs to trust the gateway. */
export interface IssuedCertificate {
  certificate: string;
  key_id: string;
  principals: string[];
  valid_before: string;
  host_key: string;
  ca_public_key: string;
  ssh_port: number;
}

/**
 * The SSH domain's use cases: certificates for signed-in users (the gateway itself is SshGateway).
 * A certificate lives as long as the sign-in session it was issued in, at most MAX_CERT_SECONDS,
 * and names that session: ending the session (sign-out, password change, a disabled user) ends it.
 */
export class SshService {
  constructor(
    readonly authority: SshAuthority,
    readonly gateway: SshGateway,
    private readonly auth: Pick<AuthService, 'sessionExpiry'>,
    /** the users' registered public keys (keys.ts) */
    readonly keys: SshKeys,
  ) {}

  async issueCertificate(principal: Principal, publicKey: string, now = Date.now()): Promise<IssuedCertificate> {
    const port = this.gateway.port;
    if (port === undefined) throw conflict('ssh_not_enabled', 'The SSH gateway is off on this broker (set SSH_PORT to turn it on).');
    const key = parsePublicKeyLine(publicKey);
    if (!key) throw invalid('body.public_key: an Ed25519 public key line (ssh-ed25519 AAAA…) is expected', { field: 'public_key' });
    const sessionEnd = Math.floor(Date.parse(await this.auth.sessionExpiry(principal.sessionId)) / 1000);
    const validBefore = Math.min(sessionEnd, Math.floor(now / 1000) + MAX_CERT_SECONDS);
    const email = principal.user.email;
    const certificate = this.authority.issue(key, { keyId: email, principals: [email], sessionId: principal.sessionId, validBefore, now });
    return {
      certificate,
      key_id: email,
      principals: [email],
      valid_before: new Date(validBefore * 1000).toISOString(),
      host_key: this.authority.hostPublicKey,
      ca_public_key: this.authority.caPublicKey,
      ssh_port: port,
    };
  }
}
