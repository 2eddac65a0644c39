/**
 * Would this JSON decode into a Go struct under encoding/json? A shape mirrors the client's type,
 * transcribed from the client's source (never from the broker's answer): a string field takes a
 * string, an int64 an integral number, a bool a boolean, a slice an array, a map or a struct an
 * object. As in Go: `null` leaves any field at its zero value, and fields the struct does not name
 * are ignored. A missing field is fine for expectDecodes; expectDecodesStrictly also fails on every
 * field the struct names that the answer leaves out, unless the client tags it `omitempty`
 * (`{ optional: … }`): a field the client reads under a name the broker does not answer decodes
 * to a silent zero, which is the bug strict decoding catches.
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
  | { struct: Record<string, GoShape> }
  /** a field tagged `omitempty` in the client: it may be left out even under strict decoding */
  | { optional: GoShape };

const optional = (shape: GoShape): GoShape => ({ optional: shape });

function problems(value: unknown, shape: GoShape, at: string, out: string[], strict: boolean): void {
  if (typeof shape === 'object' && 'optional' in shape) return problems(value, shape.optional, at, out, strict);
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
    value.forEach((v, i) => problems(v, shape.slice, `${at}[${i}]`, out, strict));
    return;
  }
  if (typeof value !== 'object' || Array.isArray(value)) return void fail('object');
  const record = value as Record<string, unknown>;
  if ('map' in shape) {
    for (const [k, v] of Object.entries(record)) problems(v, shape.map, `${at}.${k}`, out, strict);
    return;
  }
  for (const [field, fieldShape] of Object.entries(shape.struct)) {
    if (field in record) problems(record[field], fieldShape, `${at}.${field}`, out, strict);
    else if (strict && !(typeof fieldShape === 'object' && 'optional' in fieldShape)) out.push(`${at}.${field}: missing`);
  }
}

/** Fails the test with every field that would not decode. */
export function expectDecodes(value: unknown, shape: GoShape): void {
  const out: string[] = [];
  problems(value, shape, '$', out, false);
  expect(out).toEqual([]);
}

/** As expectDecodes, and every field the Go struct names without `omitempty` must be in the answer. */
export function expectDecodesStrictly(value: unknown, shape: GoShape): void {
  const out: string[] = [];
  problems(value, shape, '$', out, true);
  expect(out).toEqual([]);
}

/** Strict decoding's own check: the broker's old memory names decode to zeros, and are caught. */
export function decodeProblems(value: unknown, shape: GoShape): string[] {
  const out: string[] = [];
  problems(value, shape, '$', out, true);
  return out;
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
    discovered_country: optional('string'),
    discovered_city: optional('string'),
    discovered_zip: optional('string'),
    discovered_address: optional('string'),
    discovered_latitude: optional('string'),
    discovered_longitude: optional('string'),
    discovered_by_post_address_latitude: optional('string'),
    discovered_by_post_address_longitude: optional('string'),
    updated_auto: optional('timestamp'),
    updated_user: optional('timestamp'),
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
      approved_timestamp: optional('int'),
      cert: optional('string'),
      group_id: optional('string'),
      remoteaddress: 'string',
      timestamp: 'int',
      host: 'string',
      fqhost: 'string',
      uqhost: 'string',
      device_name: optional('string'),
      hardware_mac: { map: 'string' },
      ip_default: 'string',
      ipv4: { map: 'string' },
      pub_key: optional({ slice: 'string' }),
    },
  },
};

const groupTreeNodeFields: Record<string, GoShape> = {
  id: 'string',
  node_id: 'string',
  title: 'string',
  type: 'string',
  tags: optional({ slice: 'string' }),
  pub_key_digest: optional('string'),
  device_commit_sha: optional('string'),
  status: optional('string'),
  config_propagated: optional('bool'),
  agentinterval: optional('int'),
  last_reported: optional('int'),
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
          ancestors_titles: optional({ slice: 'string' }),
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

export const DeviceStatus: GoShape = { struct: { uuid: 'string', remote_access: 'bool', edge: optional('string'), edge_version: optional('uint8') } };

/** metrics.go MetricsSummary. */
export const MetricsSummary: GoShape = {
  struct: {
    filesystem: { struct: { reported: 'int', mounts: { slice: { struct: { path: 'string', used: 'int', available: 'int' } } } } },
    cpu: { struct: { reported: 'int', user: 'float', system: 'float', io: 'float' } },
    load: { struct: { reported: 'int', '1min': 'float', '5min': 'float', '15min': 'float' } },
    memory: { struct: { reported: 'int', used: 'int', swap_used: 'int', available: 'int' } },
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

/**
 * node.go NodeInfo (Change.NodeInfo, omitempty). Its `nodes` (more NodeInfo), `settings` and
 * `pushed_config` are added below, once those shapes are defined.
 */
const nodeInfoFields: Record<string, GoShape> = {
  node_id: 'string',
  pub_key_digest: 'string',
  type: 'string',
  ancestors: { slice: 'string' },
  title: 'string',
  tags: optional({ slice: 'string' }),
  uuid: optional('string'),
  status: optional('string'),
  device_commit_sha: optional('string'),
  attributes: optional(DeviceAttributes),
  config_propagated: optional('bool'),
  agentinterval: optional('int'),
  last_reported: optional('int'),
  system: optional(SystemInfo),
};
const NodeInfo: GoShape = { struct: nodeInfoFields };

export const Change: GoShape = {
  struct: {
    id: optional('string'),
    content: 'any',
    sha: 'string',
    status: 'string',
    type: 'string',
    created: 'timestamp',
    updated: 'timestamp',
    user_id: 'string',
    user_name: optional('string'),
    user: optional(UserBaseInfo),
    node: optional(NodeInfo),
  },
};

const commitFields: Record<string, GoShape> = {
  sha: 'string',
  message: 'string',
  type: 'string',
  labels: { slice: 'string' },
  user_id: 'string',
  user: optional(UserBaseInfo),
  created: 'timestamp',
  updated: 'timestamp',
};

/** commit.go Commit: `changes` the shas of the changes. */
export const Commit: GoShape = { struct: { ...commitFields, changes: { slice: 'string' } } };
/** commit.go CommitExtended: Commit with `changes` shadowed by []Change. */
export const CommitExtended: GoShape = { struct: { ...commitFields, changes: { slice: Change } } };
/** commit.go CommitsList: `items` are *CommitExtended. */
export const CommitsList: GoShape = { struct: { items: { slice: CommitExtended }, total: 'int' } };

/** config/bundle.go Metadata, embedded in every bundle; `inherits` is an ordered map of node id → title. */
const metadata: Record<string, GoShape> = {
  enabled: 'bool',
  extend: optional('bool'),
  version: optional('string'),
  bundle_commit_id: optional('string'),
  inherited: optional('bool'),
  inherits: optional({ map: 'string' }),
  reset_to_group: optional('bool'),
};
const keyValue: GoShape = { slice: { struct: { key: 'string', value: 'string' } } };

/** config/settings.go Settings. */
export const Settings: GoShape = {
  struct: {
    ...metadata,
    metrics: 'bool',
    reports: 'bool',
    remoteconsole: 'bool',
    software_inventory: 'bool',
    process_inventory: 'bool',
    agentinterval: 'int',
  },
};

/** config/bundle.go BundleData: every bundle a pointer with omitempty (the bundles the tests use). */
export const BundleData: GoShape = {
  struct: {
    settings: optional(Settings),
    sshkeys: optional({ struct: { ...metadata, users: optional({ slice: { struct: { username: 'string', userkeys: { slice: 'string' } } } }) } }),
    parameters: optional({ struct: { ...metadata, parameters: optional(keyValue), secrets: optional(keyValue) } }),
    package_management: optional({
      struct: {
        ...metadata,
        pre_condition: optional('string'),
        reboot_mode: 'string',
        full_upgrade: 'bool',
        items: optional({ slice: { struct: { name: 'string', version: optional('string') } } }),
      },
    }),
    file_distribution: optional({
      struct: {
        ...metadata,
        files: optional({
          slice: {
            struct: {
              label: optional('string'),
              templates: optional({ slice: { struct: { source: optional('string'), destination: optional('string'), is_template: 'bool' } } }),
              parameters: optional({ slice: { struct: { key: optional('string'), value: optional('string') } } }),
              command: optional('string'),
              pre_condition: optional('string'),
            },
          },
        }),
      },
    }),
    connectivity_watchdog: optional({ struct: { ...metadata, threshold: 'string' } }),
  },
};

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
        bundle_data: BundleData,
      },
    },
  },
};

/** config/pushed.go Pushed. */
export const Pushed: GoShape = { struct: { commit_id: 'string', bundles: { slice: 'string' }, bundle_data: BundleData } };

Object.assign(nodeInfoFields, { nodes: optional({ slice: NodeInfo }), settings: optional(Settings), pushed_config: optional(Pushed) });

/** inventory.go DeviceInventory. */
export const DeviceInventory: GoShape = {
  struct: {
    pub_key_digest: 'string',
    system: SystemInfo,
    settings: Settings,
    config_propagated: 'bool',
    last_reported: 'timestamp',
    exp_soft: 'timestamp',
    exp_hard: 'timestamp',
    device_commit_sha: 'string',
    attributes: DeviceAttributes,
    tags: { slice: 'string' },
    status: 'string',
    pushed_config: Pushed,
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
