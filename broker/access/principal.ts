import type { RoleRecording } from './recording.js';
import type { CompiledPolicy } from '../../shared/resources.js';

export interface PrincipalUser {
  id: string;
  email: string;
  fname: string;
  lname: string;
}

/** The signed-in user of one request, with the union of their roles' policies as of this request. */
export class Principal {
  private readonly held: Set<string>;

  constructor(
    readonly user: PrincipalUser,
    readonly sessionId: string,
    readonly policies: CompiledPolicy[],
    /** Each role's policies with its console-recording setting (broker/access/recording.ts). */
    readonly roles: RoleRecording[] = [],
  ) {
    this.held = new Set(policies.map((p) => p.permission));
  }

  /** Holds the permission on at least some devices. */
  has(permission: string): boolean {
    return this.held.has(permission);
  }

  get permissions(): string[] {
    return [...this.held].sort();
  }
}
