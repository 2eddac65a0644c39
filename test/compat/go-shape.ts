/**
 * Would this JSON decode into a Go struct under encoding/json? A shape mirrors the client's type:
 * a string field takes a string, an int64 an integral number, a bool a boolean, a slice an array,
 * a map or a struct an object. As in Go: a missing field is fine, `null` leaves any field at its
 * zero value, and fields the struct does not name are ignored.
 */
import { expect } from 'vitest';

export type GoShape =
  | 'string'
  | 'int'
  | 'uint8'
  | 'uint64'
  | 'float'
  | 'bool'
  | 'any'
  /** qbee-cli types.Timestamp: an integer, or a string holding one (or "") */
  | 'timestamp'
  | { slice: GoShape }
  | { map: GoShape }
  | { struct: Record<string, GoShape> };

function problems(value: unknown, shape: GoShape, at: string, out: string[]): void {
  if (value === null || shape === 'any') return;
  const fail = (want: string) => out.push(`${at}: want ${want}, got ${JSON.stringify(value)?.slice(0, 80)}`);
  if (typeof shape === 'string') {
    switch (shape) {
      case 'string':
        if (typeof value !== 'string') fail('string');
        return;
      case 'bool':
        if (typeof value !== 'boolean') fail('bool');
        return;
      case 'float':
        if (typeof value !== 'number') fail('number');
        return;
      case 'int':
        if (typeof value !== 'number' || !Number.isInteger(value)) fail('integer');
        return;
      case 'uint64':
        if (typeof value !== 'number' || !Number.isInteger(value) || value < 0) fail('integer ≥ 0');
        return;
      case 'uint8':
        if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 255) fail('integer 0..255');
        return;
      case 'timestamp':
        if (typeof value === 'number' ? !Number.isInteger(value) : typeof value !== 'string' || (value !== '' && !/^-?\d+$/.test(value))) fail('Unix seconds');
        return;
    }
  }
  if ('slice' in shape) {
    if (!Array.isArray(value)) return void fail('array');
    value.forEach((v, i) => problems(v, shape.slice, `${at}[${i}]`, out));
    return;
  }
  if (typeof value !== 'object' || Array.isArray(value)) return void fail('object');
  const record = value as Record<string, unknown>;
  if ('map' in shape) {
    for (const [k, v] of Object.entries(record)) problems(v, shape.map, `${at}.${k}`, out);
    return;
  }
  for (const [field, fieldShape] of Object.entries(shape.struct)) {
    if (field in record) problems(record[field], fieldShape, `${at}.${field}`, out);
  }
}

/** Fails the test with every field that would not decode. */
export function expectDecodes(value: unknown, shape: GoShape): void {
  const out: string[] = [];
  problems(value, shape, '$', out);
  expect(out).toEqual([]);
}

// ---- qbee-cli's types (package client), field by field --------------------------------------------

export const DeviceAttributes: GoShape = {
  struct: {
    device_name: 'string',
    description: 'string',
    country: 'string',
    city: 'string',
    zip: 'string',
    address: 'string',
    latitude: 'string',
    longitude: 'string',
    updated_auto: 'timestamp',
    updated_user: 'timestamp',
  },
};

export const SystemInfo: GoShape = {
  struct: {
    class: 'string',
    os: 'string',
    ostype: 'string',
    version: 'string',
    arch: 'string',
    long_arch: 'string',
    release: 'string',
    flavor: 'string',
    boot_time: 'string',
    cpus: 'string',
    cpu_sn: 'string',
    cpu_rev: 'string',
    cpu_hw: 'string',
    host: 'string',
    fqhost: 'string',
    uqhost: 'string',
    interface: 'string',
    hardware_mac: { map: 'string' },
    interface_flags: { map: 'string' },
    ip_addresses: 'string',
    ipv4_first: 'string',
    ipv4: { map: 'string' },
    remoteaddr: 'string',
    last_policy_update: 'timestamp',
    last_config_update: 'timestamp',
    last_config_commit_id: 'string',
    vpn_idx: 'string',
    cf_version: 'string',
    tpm_enabled: 'bool',
  },
};

/** BootstrapKeyResponse: map[string]BootstrapKey (ID has no json tag: the key "ID"). */
export const BootstrapKeyResponse: GoShape = { map: { struct: { ID: 'string', group_id: 'string', auto_accept: 'bool' } } };

export const PendingDevices: GoShape = {
  slice: {
    struct: {
      pub_key_digest: 'string',
      approved: 'bool',
      approved_timestamp: 'int',
      cert: 'string',
      group_id: 'string',
      remoteaddress: 'string',
      timestamp: 'int',
      host: 'string',
      fqhost: 'string',
      uqhost: 'string',
      device_name: 'string',
      hardware_mac: { map: 'string' },
      ip_default: 'string',
      ipv4: { map: 'string' },
      pub_key: { slice: 'string' },
    },
  },
};

const groupTreeNodeFields: Record<string, GoShape> = {
  id: 'string',
  node_id: 'string',
  title: 'string',
  type: 'string',
  tags: { slice: 'string' },
  pub_key_digest: 'string',
  device_commit_sha: 'string',
  status: 'string',
  config_propagated: 'bool',
  agentinterval: 'int',
  last_reported: 'int',
  attributes: DeviceAttributes,
};

/** GroupTreeNode is recursive: `nodes` checked to a fixed depth, deeper levels by the same fields. */
function groupTreeNode(depth: number): GoShape {
  return { struct: { ...groupTreeNodeFields, nodes: { slice: depth > 0 ? groupTreeNode(depth - 1) : { struct: groupTreeNodeFields } } } };
}

export const GroupTree: GoShape = { struct: { total_devices: 'int', tree: groupTreeNode(8) } };

export const GroupNodes: GoShape = {
  slice: {
    struct: {
      node_id: 'string',
      parent_id: 'string',
      tags: { slice: 'string' },
      type: 'string',
      title: 'string',
      ancestors: { slice: 'string' },
      updated: 'int',
    },
  },
};

export const InventoryListResponse: GoShape = {
  struct: {
    total: 'int',
    items: {
      slice: {
        struct: {
          node_id: 'string',
          pub_key_digest: 'string',
          uuid: 'string',
          system: SystemInfo,
          last_reported_time: 'int',
          exp_soft: 'int',
          exp_hard: 'int',
          ancestors: { slice: 'string' },
          ancestors_titles: { slice: 'string' },
          attributes: DeviceAttributes,
          title: 'string',
          agentinterval: 'string',
          status: 'string',
          tags: { slice: 'string' },
        },
      },
    },
  },
};

export const DeviceInventory: GoShape = {
  struct: {
    pub_key_digest: 'string',
    system: SystemInfo,
    settings: { struct: {} },
    config_propagated: 'bool',
    last_reported: 'timestamp',
    exp_soft: 'timestamp',
    exp_hard: 'timestamp',
    device_commit_sha: 'string',
    attributes: DeviceAttributes,
    tags: { slice: 'string' },
    status: 'string',
    pushed_config: { struct: {} },
  },
};

export const FilesListResponse: GoShape = {
  struct: {
    total: 'int',
    items: {
      slice: {
        struct: {
          name: 'string',
          extension: 'string',
          mime: 'string',
          size: 'int',
          created: 'int',
          is_dir: 'bool',
          path: 'string',
          digest: 'string',
          user: { struct: { user_id: 'string' } },
        },
      },
    },
  },
};

export const FileStats: GoShape = { struct: { count_files: 'int', quota: 'int', used: 'float' } };

export const DeviceStatus: GoShape = { struct: { uuid: 'string', remote_access: 'bool', edge: 'string', edge_version: 'uint8' } };

/** metrics.go MetricsSummary. */
export const MetricsSummary: GoShape = {
  struct: {
    filesystem: { struct: { reported: 'int', mounts: { slice: { struct: { path: 'string', used: 'int', available: 'int' } } } } },
    cpu: { struct: { reported: 'int', user: 'float', system: 'float', io: 'float' } },
    load: { struct: { reported: 'int', '1min': 'float', '5min': 'float', '15min': 'float' } },
    memory: { struct: { reported: 'int', free: 'int', util: 'int', swap: 'int' } },
  },
};

export const LoginResponse: GoShape = { struct: { token: 'string' } };

export const OAuth2DeviceAuthorizationResponse: GoShape = {
  struct: {
    device_code: 'string',
    user_code: 'string',
    verification_uri: 'string',
    expires_in: 'int',
    interval: 'int',
    client_ip: 'string',
    user_agent: 'string',
  },
};

export const OAuth2TokenResponse: GoShape = { struct: { access_token: 'string', token_type: 'string', expires_in: 'int', refresh_token: 'string' } };

// ---- configuration (change.go, commit.go, config.go, config/*.go) ---------------------------------

const UserBaseInfo: GoShape = { struct: { user_id: 'string', fname: 'string', lname: 'string' } };

export const Change: GoShape = {
  struct: {
    id: 'string',
    content: 'any',
    sha: 'string',
    status: 'string',
    type: 'string',
    created: 'timestamp',
    updated: 'timestamp',
    user_id: 'string',
    user_name: 'string',
    user: UserBaseInfo,
  },
};

const commitFields: Record<string, GoShape> = {
  sha: 'string',
  message: 'string',
  type: 'string',
  labels: { slice: 'string' },
  user_id: 'string',
  user: UserBaseInfo,
  created: 'timestamp',
  updated: 'timestamp',
};

export const Commit: GoShape = { struct: { ...commitFields, changes: { slice: 'string' } } };
export const CommitExtended: GoShape = { struct: { ...commitFields, changes: { slice: Change } } };
export const CommitsList: GoShape = { struct: { items: { slice: { struct: { ...commitFields, changes: 'any' } } }, total: 'int' } };

/** config.Metadata, embedded in every bundle; `inherits` is an ordered map of node id → title. */
const metadata: Record<string, GoShape> = {
  enabled: 'bool',
  extend: 'bool',
  version: 'string',
  bundle_commit_id: 'string',
  inherited: 'bool',
  inherits: { map: 'string' },
  reset_to_group: 'bool',
};
const keyValue: GoShape = { slice: { struct: { key: 'string', value: 'string' } } };

export const ConfigResponse: GoShape = {
  struct: {
    status: 'string',
    config: {
      struct: {
        id: 'string',
        type: 'string',
        commit_id: 'string',
        commit_created: 'int',
        bundles: { slice: 'string' },
        bundle_data: {
          struct: {
            settings: {
              struct: {
                ...metadata,
                metrics: 'bool',
                reports: 'bool',
                remoteconsole: 'bool',
                software_inventory: 'bool',
                process_inventory: 'bool',
                agentinterval: 'int',
              },
            },
            parameters: { struct: { ...metadata, parameters: keyValue, secrets: keyValue } },
            package_management: {
              struct: {
                ...metadata,
                pre_condition: 'string',
                reboot_mode: 'string',
                full_upgrade: 'bool',
                items: { slice: { struct: { name: 'string', version: 'string' } } },
              },
            },
            file_distribution: {
              struct: {
                ...metadata,
                files: {
                  slice: {
                    struct: {
                      templates: { slice: { struct: { source: 'string', destination: 'string', is_template: 'bool' } } },
                      parameters: keyValue,
                      command: 'string',
                      pre_condition: 'string',
                    },
                  },
                },
              },
            },
            connectivity_watchdog: { struct: { ...metadata, threshold: 'string' } },
          },
        },
      },
    },
  },
};

/**
 * qbee-cli's DeviceInventory.IsMinimumAgentVersion (inventory.go): dotted parts compared left to
 * right, equal texts skipped, the first differing pair as integers (false when either is not one),
 * false when the agent's version has fewer parts than the required one.
 */
export function isMinimumAgentVersion(agentVersion: string, requiredVersion: string): boolean {
  const required = requiredVersion.split('.');
  const agent = agentVersion.split('.');
  for (let i = 0; i < required.length; i++) {
    if (i >= agent.length) return false;
    if (required[i] === agent[i]) continue;
    const goAtoi = (s: string) => (/^[+-]?\d+$/.test(s) ? Number(s) : NaN);
    const want = goAtoi(required[i]);
    const have = goAtoi(agent[i]);
    if (Number.isNaN(want) || Number.isNaN(have)) return false;
    return have > want;
  }
  return true;
}
