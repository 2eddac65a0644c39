/**
 * The Configure area's bundle forms, described as data: qbee's field names, a short help per field,
 * and the checks a form runs before a change is staged (the broker and the agent check again). Pure
 * functions, so they are tested without a browser: reading and writing nested values, validation,
 * the broker's metadata stripped from what a form edits, and a line diff of two configurations.
 */

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

export type FieldSpec =
  | { kind: 'bool'; key: string; label: string; help?: string }
  | {
      kind: 'text';
      key: string;
      label: string;
      help?: string;
      required?: boolean;
      absolute?: boolean;
      placeholder?: string;
      fileStore?: boolean;
      fromInventory?: 'users' | 'ports';
    }
  | { kind: 'secret'; key: string; label: string; help?: string; required?: boolean }
  | { kind: 'number'; key: string; label: string; help?: string; min: number; max: number; required?: boolean }
  | { kind: 'select'; key: string; label: string; help?: string; options: string[] }
  | { kind: 'strings'; key: string; label: string; help?: string; pattern?: RegExp; patternHelp?: string }
  | { kind: 'list'; key: string; label: string; help?: string; itemLabel: string; fields: FieldSpec[] }
  | { kind: 'object'; key: string; label: string; help?: string; fields: FieldSpec[] };

const keyValues = (label: string, help: string, secret = false): FieldSpec => ({
  kind: 'list',
  key: label === 'Secrets' ? 'secrets' : 'parameters',
  label,
  help,
  itemLabel: secret ? 'secret' : 'parameter',
  fields: [
    { kind: 'text', key: 'key', label: 'Key', required: true },
    secret ? { kind: 'secret', key: 'value', label: 'Value', required: true } : { kind: 'text', key: 'value', label: 'Value' },
  ],
});

const HOST = /^[A-Za-z0-9]([A-Za-z0-9.:-]{0,252})$/;

const chain = (name: string): FieldSpec => ({
  kind: 'object',
  key: name,
  label: `Chain ${name}`,
  fields: [
    { kind: 'select', key: 'policy', label: 'Policy', options: ['ACCEPT', 'DROP'], help: 'What happens to packets no rule matches.' },
    {
      kind: 'list',
      key: 'rules',
      label: 'Rules',
      itemLabel: 'rule',
      fields: [
        { kind: 'text', key: 'srcIp', label: 'Source IP', placeholder: 'any', help: 'An IPv4 address or network (10.0.0.0/8), or empty for any.' },
        {
          kind: 'text',
          key: 'dstPort',
          label: 'Destination port',
          placeholder: 'any',
          help: 'A port, a range from:to, or empty for any.',
          fromInventory: 'ports',
        },
        { kind: 'select', key: 'proto', label: 'Protocol', options: ['tcp', 'udp', 'icmp'] },
        { kind: 'select', key: 'target', label: 'Target', options: ['ACCEPT', 'DROP', 'REJECT'] },
      ],
    },
  ],
});

/** The bundles with a form; the others are edited as JSON (validated). */
export const BUNDLE_FORMS: Record<string, { help: string; fields: FieldSpec[] }> = {
  settings: {
    help: 'How the agent runs: how often it applies the configuration again, and what it reports.',
    fields: [
      {
        kind: 'number',
        key: 'agentinterval',
        label: 'Agent interval (minutes)',
        min: 1,
        max: 1440,
        required: true,
        help: 'How often the agent applies its configuration again to repair drift.',
      },
      { kind: 'bool', key: 'reports', label: 'Send reports', help: 'Off: runs are acknowledged without their reports (the Logs stay empty).' },
      { kind: 'bool', key: 'metrics', label: 'Collect metrics' },
      { kind: 'bool', key: 'remoteconsole', label: 'Remote console' },
      { kind: 'bool', key: 'software_inventory', label: 'Software inventory' },
      { kind: 'bool', key: 'process_inventory', label: 'Process inventory' },
    ],
  },
  parameters: {
    help: 'Values used as $(key) in other bundles and {{key}} in templates. Secret values are never shown again once saved.',
    fields: [
      keyValues('Parameters', 'Key-value pairs available to every bundle of the entity and below.'),
      keyValues('Secrets', 'Like parameters, but the value is write-only: leave it masked to keep the stored one.', true),
    ],
  },
  file_distribution: {
    help: 'Files from the file store written on the device; templates are rendered with {{key}} from the parameters and the device attributes.',
    fields: [
      {
        kind: 'list',
        key: 'files',
        label: 'File sets',
        itemLabel: 'file set',
        fields: [
          { kind: 'text', key: 'label', label: 'Label', help: 'Shown in the reports.' },
          {
            kind: 'list',
            key: 'templates',
            label: 'Files',
            itemLabel: 'file',
            fields: [
              {
                kind: 'text',
                key: 'source',
                label: 'Source (file store path)',
                required: true,
                absolute: true,
                placeholder: '/templates/app.conf',
                fileStore: true,
              },
              { kind: 'text', key: 'destination', label: 'Destination on the device', required: true, absolute: true, placeholder: '/etc/app.conf' },
              { kind: 'bool', key: 'is_template', label: 'Render as a template', help: '{{key}} placeholders are replaced; unknown ones are kept.' },
            ],
          },
          {
            kind: 'list',
            key: 'parameters',
            label: 'Template parameters',
            itemLabel: 'parameter',
            help: 'Values may use $(key) of the parameters bundle.',
            fields: [
              { kind: 'text', key: 'key', label: 'Key', required: true },
              { kind: 'text', key: 'value', label: 'Value' },
            ],
          },
          { kind: 'text', key: 'command', label: 'Command after a change', help: 'A shell command run when a file of this set changed.' },
          { kind: 'text', key: 'pre_condition', label: 'Pre-condition', help: 'A shell command: the set is applied only when it succeeds.' },
        ],
      },
    ],
  },
  users: {
    help: 'Local users added or removed.',
    fields: [
      {
        kind: 'list',
        key: 'items',
        label: 'Users',
        itemLabel: 'user',
        fields: [
          { kind: 'text', key: 'username', label: 'User name', required: true, fromInventory: 'users' },
          { kind: 'select', key: 'action', label: 'Action', options: ['add', 'remove'] },
        ],
      },
    ],
  },
  sshkeys: {
    help: 'Exactly these keys in each user’s ~/.ssh/authorized_keys.',
    fields: [
      {
        kind: 'list',
        key: 'users',
        label: 'Users',
        itemLabel: 'user',
        fields: [
          { kind: 'text', key: 'username', label: 'User name', required: true, fromInventory: 'users' },
          {
            kind: 'strings',
            key: 'userkeys',
            label: 'Public keys (one per line)',
            pattern: /^(ssh-|ecdsa-|sk-)\S+ \S+/,
            patternHelp: 'a public key: type, key and an optional comment',
          },
        ],
      },
    ],
  },
  package_management: {
    help: 'Packages kept installed (apt/dpkg, rpm or opkg, as present on the device).',
    fields: [
      { kind: 'text', key: 'pre_condition', label: 'Pre-condition', help: 'A shell command: packages are managed only when it succeeds.' },
      { kind: 'select', key: 'reboot_mode', label: 'Reboot', options: ['never', 'always'], help: 'always: reboot after packages changed.' },
      { kind: 'bool', key: 'full_upgrade', label: 'Full upgrade', help: 'Upgrade every package instead of the listed ones.' },
      {
        kind: 'list',
        key: 'items',
        label: 'Packages',
        itemLabel: 'package',
        fields: [
          { kind: 'text', key: 'name', label: 'Name', required: true },
          { kind: 'text', key: 'version', label: 'Version', placeholder: 'latest', help: 'Empty or "latest": the newest available.' },
        ],
      },
    ],
  },
  proc_watch: {
    help: 'Processes kept running (Present) or stopped (Absent) by a command.',
    fields: [
      {
        kind: 'list',
        key: 'processes',
        label: 'Processes',
        itemLabel: 'process',
        fields: [
          {
            kind: 'text',
            key: 'name',
            label: 'Name',
            required: true,
            help: 'The process name, executable or argv[0] (file name or path), as pidof shows it; arguments do not count.',
          },
          { kind: 'select', key: 'policy', label: 'Policy', options: ['Present', 'Absent'] },
          { kind: 'text', key: 'command', label: 'Command', required: true, help: 'Starts (in the background) or stops it.' },
        ],
      },
    ],
  },
  ntp: {
    help: 'Time servers for chrony or systemd-timesyncd.',
    fields: [{ kind: 'strings', key: 'servers', label: 'Servers (one per line)', pattern: HOST, patternHelp: 'a host name or address' }],
  },
  firewall: {
    help: 'iptables filter rules of the INPUT chain (other tables and chains: use JSON).',
    fields: [{ kind: 'object', key: 'tables', label: 'Tables', fields: [{ kind: 'object', key: 'filter', label: 'Table filter', fields: [chain('INPUT')] }] }],
  },
};

/** Fields the broker sets, or that the Configure area edits beside the form (extend). */
const META = ['bundle_commit_id', 'inherited', 'inherits', 'inherited_from', 'extend', 'reset_to_group'];

/** A bundle's configuration as a form edits it: the broker's metadata removed. */
export function editable(bundle: unknown): JsonObject {
  if (!bundle || typeof bundle !== 'object' || Array.isArray(bundle)) return {};
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(bundle as JsonObject)) if (!META.includes(k)) out[k] = v;
  return out;
}

/** A value with the defaults a form shows for fields not set (a select's first option, …). */
export function defaultFor(field: FieldSpec): Json {
  switch (field.kind) {
    case 'bool':
      return false;
    case 'number':
      return field.min;
    case 'select':
      return field.options[0];
    case 'strings':
    case 'list':
      return [];
    case 'object':
      return {};
    default:
      return '';
  }
}

export function newItem(fields: FieldSpec[]): JsonObject {
  const item: JsonObject = {};
  for (const f of fields) item[f.key] = defaultFor(f);
  return item;
}

/** Problems of a form's value, by path (`files.0.templates.1.destination`). */
export function validate(fields: FieldSpec[], value: JsonObject, at = ''): Record<string, string> {
  const errors: Record<string, string> = {};
  for (const f of fields) {
    const path = at ? `${at}.${f.key}` : f.key;
    const v = value[f.key];
    switch (f.kind) {
      case 'text':
      case 'secret': {
        const s = typeof v === 'string' ? v : '';
        if (f.required && !s.trim()) errors[path] = `${f.label} is required.`;
        else if (f.kind === 'text' && f.absolute && s && !s.startsWith('/') && !s.startsWith('$('))
          errors[path] = `${f.label} must be an absolute path (start with /).`;
        break;
      }
      case 'number': {
        if (v === undefined || v === null || v === '') {
          if (f.required) errors[path] = `${f.label} is required.`;
        } else if (typeof v !== 'number' || !Number.isInteger(v) || v < f.min || v > f.max)
          errors[path] = `${f.label} must be a whole number from ${f.min} to ${f.max}.`;
        break;
      }
      case 'select':
        if (v !== undefined && !f.options.includes(String(v))) errors[path] = `${f.label} must be one of ${f.options.join(', ')}.`;
        break;
      case 'strings': {
        const list = Array.isArray(v) ? v : [];
        list.forEach((s, i) => {
          if (typeof s !== 'string' || (f.pattern && !f.pattern.test(s)))
            errors[`${path}.${i}`] = `Line ${i + 1} of ${f.label.replace(/ \(.*\)$/, '')} is not ${f.patternHelp ?? 'valid'}.`;
        });
        const first = Object.keys(errors).find((k) => k.startsWith(`${path}.`));
        if (first) errors[path] = errors[first];
        break;
      }
      case 'list': {
        const list = Array.isArray(v) ? v : [];
        list.forEach((item, i) => Object.assign(errors, validate(f.fields, isObject(item) ? item : {}, `${path}.${i}`)));
        break;
      }
      case 'object':
        Object.assign(errors, validate(f.fields, isObject(v) ? v : {}, path));
        break;
      default:
        break;
    }
  }
  return errors;
}

export function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The JSON editor's text checked: an object, or the reason it is not. */
export function parseJsonObject(text: string): { value?: JsonObject; error?: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return { error: `Not valid JSON: ${(err as Error).message}` };
  }
  if (!isObject(parsed)) return { error: 'The configuration must be a JSON object ({ … }).' };
  return { value: parsed };
}

/** Secrets masked for display: a secret's value (a `secret-ref:` or clear text) never shows. */
export function maskSecrets(bundle: string, value: unknown): unknown {
  if (bundle !== 'parameters' || !isObject(value) || !Array.isArray(value.secrets)) return value;
  return { ...value, secrets: value.secrets.map((s) => (isObject(s) ? { ...s, value: '********' } : s)) };
}

/** Stable pretty JSON: keys sorted, so that the diff shows changes rather than reorderings. */
export function pretty(value: unknown): string {
  const sort = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sort);
    if (isObject(v))
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, sort(v[k])]),
      );
    return v;
  };
  return value === undefined ? '' : JSON.stringify(sort(value), null, 2);
}

export type DiffLine = { op: ' ' | '+' | '-'; text: string };

/** A line diff (longest common subsequence; configurations are small). */
export function lineDiff(before: string, after: string): DiffLine[] {
  const a = before ? before.split('\n') : [];
  const b = after ? after.split('\n') : [];
  const n = a.length;
  const m = b.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push({ op: ' ', text: a[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: '-', text: a[i++] });
    else out.push({ op: '+', text: b[j++] });
  }
  while (i < n) out.push({ op: '-', text: a[i++] });
  while (j < m) out.push({ op: '+', text: b[j++] });
  return out;
}
