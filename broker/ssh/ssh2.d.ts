/** The part of ssh2's server API the gateway uses (the package ships no types of its own). */
declare module 'ssh2' {
  import type { EventEmitter } from 'node:events';
  import type { AddressInfo } from 'node:net';
  import type { Duplex, Writable } from 'node:stream';

  /** A session's stream, or a direct-tcpip channel's (which has no stderr or exit status). */
  export interface ServerChannel extends Duplex {
    stderr: Writable;
    exit(code: number): void;
    close(): void;
  }

  export interface AuthContext extends EventEmitter {
    username: string;
    method: 'none' | 'password' | 'publickey' | 'keyboard-interactive' | 'hostbased';
    key?: { algo: string; data: Buffer };
    signature?: Buffer;
    blob?: Buffer;
    /** the hash of an RSA signature (rsa-sha2-256: sha256) */
    hashAlgo?: string;
    accept(): void;
    reject(methodsLeft?: string[], isPartial?: boolean): void;
  }

  export type Accept<T = void> = () => T;
  export type Reject = () => void;

  export interface PtyInfo {
    cols: number;
    rows: number;
    term: string;
  }

  export interface Session extends EventEmitter {
    on(event: 'pty', listener: (accept: Accept | undefined, reject: Reject | undefined, info: PtyInfo) => void): this;
    on(event: 'window-change', listener: (accept: Accept | undefined, reject: Reject | undefined, info: PtyInfo) => void): this;
    on(event: 'shell', listener: (accept: Accept<ServerChannel>, reject: Reject) => void): this;
    on(event: 'exec', listener: (accept: Accept<ServerChannel>, reject: Reject, info: { command: string }) => void): this;
    on(event: 'subsystem', listener: (accept: Accept<ServerChannel>, reject: Reject, info: { name: string }) => void): this;
    on(event: string, listener: (...args: never[]) => void): this;
  }

  export interface TcpipInfo {
    destIP: string;
    destPort: number;
    srcIP: string;
    srcPort: number;
  }

  export interface Connection extends EventEmitter {
    on(event: 'authentication', listener: (ctx: AuthContext) => void): this;
    on(event: 'ready' | 'close' | 'end', listener: () => void): this;
    on(event: 'error', listener: (err: Error) => void): this;
    on(event: 'session', listener: (accept: Accept<Session>, reject: Reject) => void): this;
    on(event: 'tcpip', listener: (accept: Accept<ServerChannel>, reject: Reject, info: TcpipInfo) => void): this;
    on(event: 'request', listener: (accept: Accept | undefined, reject: Reject | undefined, name: string, info: unknown) => void): this;
    end(): this;
  }

  export interface ClientInfo {
    ip: string;
    port: number;
  }

  export class Server extends EventEmitter {
    constructor(config: { hostKeys: (string | Buffer)[]; ident?: string; banner?: string }, listener?: (client: Connection, info: ClientInfo) => void);
    listen(port: number, host: string, callback?: () => void): this;
    close(callback?: () => void): this;
    address(): AddressInfo | string | null;
    injectSocket(socket: Duplex): void;
    maxConnections: number;
  }

  /** A key ssh2 parsed (`utils.parseKey`): what a client signs in with. */
  export interface ParsedKey {
    type: string;
    comment: string;
    getPublicSSH(): Buffer;
    getPublicPEM(): string;
    /** true when the signature is the key's over data; false or an Error otherwise */
    verify(data: Buffer, signature: Buffer, hashAlgo?: string): boolean | Error;
  }

  /** A client channel: `exec`'s stream, or a `forwardOut` one. */
  export interface ClientChannel extends Duplex {
    stderr: Duplex;
    close(): void;
  }

  /** The part of ssh2's client the benchmarks use. */
  export class Client extends EventEmitter {
    connect(config: {
      host?: string;
      port?: number;
      sock?: Duplex;
      username: string;
      privateKey?: string | Buffer;
      authHandler?: { type: 'publickey'; username: string; key: ParsedKey }[];
      hostVerifier?: () => boolean;
      readyTimeout?: number;
    }): this;
    exec(command: string, callback: (err: Error | undefined, channel: ClientChannel) => void): boolean;
    forwardOut(srcIP: string, srcPort: number, dstIP: string, dstPort: number, callback: (err: Error | undefined, channel: ClientChannel) => void): boolean;
    end(): this;
  }

  /** ssh2 is CommonJS: Node's ESM loader offers it as the default export only. */
  const ssh2: { Server: typeof Server; Client: typeof Client; utils: { parseKey(data: string | Buffer): ParsedKey | Error } };
  export default ssh2;
}
