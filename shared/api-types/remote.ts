/**
 * Remote-access records as GET routes answer them: what the caller may try on a device, its
 * directories, recordings, the SSH gateway setup, and live sessions. Types only (see ../api-types.ts).
 */

/** GET /remote/files/{device_id}: a directory on the device, as its agent listed it. */
export type { DirectoryEntry, DirectoryListing } from '../protocol.js';

/** GET /remote/access/{device_id}: what the caller may try on a device, for showing buttons. */
export interface RemoteCapabilities {
  device_id: string;
  /** the device agent is connected now */
  connected: boolean;
  console: boolean;
  /** present when every console grant names its users (`console(user=...)`): a console must run as one of these */
  console_users?: string[];
  tunnel: boolean;
  /** present when asked about one tunnel (?port=&proto=&dst=): whether it is allowed */
  tunnel_allowed?: boolean;
  copy: boolean;
  /** present when every grant reading files on the device names directories (`copy(path=...)`): where a file browser may look */
  copy_paths?: string[];
  reload: boolean;
}

/** One recorded console in `GET /remote/recordings` (its owner's, or any on a device the caller manages). */
export interface RecordingListItem {
  id: string;
  audit_id: number;
  session_id: string | null;
  user: { id: string; email: string };
  device: { id: string; name: string };
  started_at: string;
  ended_at: string | null;
  duration_ms: number | null;
  command?: string[];
}

/** GET /ssh/config: how to reach the SSH gateway with OpenSSH; only `enabled` when SSH_PORT is off. */
export interface SshClientSetup {
  enabled: boolean;
  url?: string;
  host?: string;
  port?: number;
  profile?: string;
  known_hosts?: string;
  ssh_config?: string;
}

/** A remote session's kind, and the kind of client that opened it. */
export type RemoteSessionKind = 'console' | 'tunnel' | 'copy' | 'reload';
export type RemoteSessionSource = 'api' | 'web' | 'cli' | 'ssh' | 'qbee';

/** A live remote session in GET /remote/sessions. */
export interface LiveSessionItem {
  id: string;
  user: { id: string; email: string };
  device: { id: string; name: string };
  kind: RemoteSessionKind;
  source: RemoteSessionSource;
  ip: string;
  started_at: string;
  /** client to device, so far */
  bytes_in: number;
  /** device to client, so far */
  bytes_out: number;
  /** the caller may end it */
  can_end: boolean;
  /** consoles only: false while the owner's connection is gone and it waits for a re-attach */
  attached?: boolean;
  /** consoles only: who watches it read-only, since when */
  watchers?: { user: { id: string; email: string }; since: string }[];
  /** consoles only: the caller may watch it */
  can_watch?: boolean;
  /** consoles only: the caller may re-attach to it (their own console) */
  can_attach?: boolean;
  /** several brokers: the BROKER_ID holding the session */
  broker?: string;
}

/** A port preset (a named tunnel target) in GET /service-connect/portmap. */
export interface Portmap {
  id: string;
  /** the devices it applies to: `*`, `tag:<tag>` or `node:<node id>` (a group or a device) */
  target: string;
  name: string;
  proto: 'tcp' | 'udp';
  port: number;
  /** destination host as seen from the device */
  dst: string;
}
