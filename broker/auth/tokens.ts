import crypto from 'node:crypto';
import jwt from 'jsonwebtoken';
import { DomainError } from '../errors.js';

export interface AccessClaims {
  sub: string; // user id
  sid: string; // session id: revoking the session revokes every token of it
  typ: 'access';
  /** expiry, seconds since the epoch (set by the signer) */
  exp: number;
}

const ISSUER = 'fleet-broker';

export class TokenSigner {
  // A KeyObject, made once: given a string, jsonwebtoken first tries to parse it as a public key on
  // every call, which costs more than the whole rest of a request.
  private readonly secret: crypto.KeyObject;

  constructor(
    secret: string,
    private readonly ttlSeconds: number,
  ) {
    this.secret = crypto.createSecretKey(Buffer.from(secret, 'utf8'));
  }

  sign(userId: string, sessionId: string): string {
    const claims: Omit<AccessClaims, 'exp'> = { sub: userId, sid: sessionId, typ: 'access' };
    return jwt.sign(claims, this.secret, {
      algorithm: 'HS256',
      expiresIn: this.ttlSeconds,
      issuer: ISSUER,
      jwtid: crypto.randomBytes(9).toString('base64url'),
    });
  }

  /** Verifies signature, expiry and shape; throws 401 token_expired or invalid_token. */
  verify(token: string, { ignoreExpiration = false } = {}): AccessClaims {
    try {
      const claims = jwt.verify(token, this.secret, { algorithms: ['HS256'], issuer: ISSUER, ignoreExpiration }) as jwt.JwtPayload;
      if (claims.typ !== 'access' || typeof claims.sub !== 'string' || typeof claims.sid !== 'string') throw new Error('shape');
      return claims as unknown as AccessClaims;
    } catch (err) {
      if (err instanceof jwt.TokenExpiredError)
        throw new DomainError('unauthenticated', 'token_expired', 'The token has expired; renew it with POST /api/v2/refresh-jwt or sign in again.');
      throw new DomainError('unauthenticated', 'invalid_token', 'The token is not valid; sign in again.');
    }
  }
}
