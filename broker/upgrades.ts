/**
 * The WebSocket entry points of the broker, beside the REST route table (routes.ts, which also
 * holds the event stream): each declares its path, credential (broker/auth/credentials.ts), who
 * may open it and the audit event of its attempts, and goes through one pipeline
 * (UpgradeRouter.handle in http/upgrade.ts). SSH is the other way in (ssh/gateway.ts).
 */
import { AGENT_WS_PATH, type RemoteKind } from '../shared/protocol.js';
import { QBEE_DEVICE_PATH_PREFIX } from '../shared/qbee.js';
import { PEER_WS_PATH, REMOTE_WS_PATHS } from './http/api-paths.js';
import { defineUpgrade, type UpgradeSpec } from './http/upgrade.js';
import type { Services } from './services.js';

/** What the upgrade handlers reach: one service each. */
export type UpgradeDeps = Pick<Services, 'agents' | 'cluster' | 'qbee' | 'remote'>;

function remoteUpgrade(kind: RemoteKind, summary: string): UpgradeSpec<UpgradeDeps> {
  return defineUpgrade<UpgradeDeps>({
    path: REMOTE_WS_PATHS[kind],
    summary,
    credential: 'bearer-or-ticket',
    // Decided per attempt against the device and the request (access/remote.ts), audited before anything starts.
    access: 'remote-access:connect',
    audit: `remote.${kind}`,
    admit: ({ remote }, attempt) => remote.sessions.admit(attempt),
    refused: ({ remote }, attempt, err) => remote.sessions.refused(kind, attempt, err),
    open: ({ remote }, attempt, caller) => remote.sessions.connect(kind, attempt, caller as NonNullable<typeof caller>),
  });
}

export function upgradeTable(): UpgradeSpec<UpgradeDeps>[] {
  return [
    defineUpgrade<UpgradeDeps>({
      path: AGENT_WS_PATH,
      summary: "A device's agent: its signed challenge, then the multiplexed channel",
      credential: 'agent-key',
      access: 'enrolled-device',
      audit: false,
      open: ({ agents }, { req, socket, head }) => agents.upgrade(req, socket, head),
    }),
    defineUpgrade<UpgradeDeps>({
      path: PEER_WS_PATH,
      summary: "Another broker's link (several brokers on one database)",
      credential: 'peer-hmac',
      access: 'cluster-peer',
      audit: false,
      enabled: ({ cluster }) => cluster !== undefined,
      open: ({ cluster }, { req, socket, head }) => cluster?.acceptPeer(req, socket, head),
    }),
    remoteUpgrade('console', 'A console on a device (or `?attach=`/`?watch=` a live one)'),
    remoteUpgrade('tunnel', 'A TCP tunnel to a port on or near a device'),
    remoteUpgrade('copy', 'A file or directory copied to or from a device'),
    defineUpgrade<UpgradeDeps>({
      path: QBEE_DEVICE_PATH_PREFIX,
      prefix: true,
      summary: "qbee's native remote-access transport (qbee-cli's connect, terminal, copy): `qbee-v1` at /device/<id>",
      credential: 'token',
      // Each stream is decided as the broker's own remote access (console, tunnel, copy, reload).
      access: 'remote-access:connect',
      audit: 'remote.qbee',
      admit: ({ qbee }, attempt) => qbee.admit(attempt),
      refused: ({ qbee }, attempt, err) => qbee.refused(attempt, err),
      open: ({ qbee }, attempt, caller) => qbee.connect(attempt, caller as NonNullable<typeof caller>),
    }),
  ];
}
