/**
 * The configuration bundles of qbee's BundleData (qbee-cli config/, qbee-agent app/configuration/),
 * in the order the broker lists them and the console shows them. The broker checks names against it;
 * the agent applies them in qbee's own order (agent/config/engine.ts).
 */
export const BUNDLES = [
  'settings',
  'parameters',
  'users',
  'sshkeys',
  'password',
  'ntp',
  'firewall',
  'package_management',
  'file_distribution',
  'software_management',
  'connectivity_watchdog',
  'proc_watch',
  'metrics_monitor',
  'docker_containers',
  'podman_containers',
  'rauc',
] as const;
export type BundleName = (typeof BUNDLES)[number];

/**
 * A field inside a bundle's data: names separated by dots, `[]` after a name for each item of that list
 * (`registry_auths[].password`: the password of every registry login).
 */
export type FieldPath = string;

/**
 * The ONE list of credential fields, per bundle. Every answer that shows bundle data (the broker's
 * configuration reads, changes, commits, previews, audit entries; the console's views) masks each
 * of them; the agent alone receives them in clear.
 */
export const SECRET_FIELDS: Partial<Record<BundleName, readonly FieldPath[]>> = {
  parameters: ['secrets[].value'],
  password: ['users[].passwordhash'],
  docker_containers: ['registry_auths[].password'],
  podman_containers: ['registry_auths[].password'],
};

/** The fields naming a file of the broker's file store, per bundle: the agent is sent these files. */
export const FILE_FIELDS: Partial<Record<BundleName, readonly FieldPath[]>> = {
  file_distribution: ['files[].templates[].source'],
  software_management: ['items[].config_files[].config_template'],
  docker_containers: ['items[].env_file'],
  podman_containers: ['items[].env_file'],
  rauc: ['rauc_bundle'],
};

/** One field found at a FieldPath: where (`at`: names, list items by their identifying fields), its value, and a setter. */
export interface FoundField {
  at: string;
  value: unknown;
  set(value: unknown): void;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);

/**
 * A list item named by its plain fields other than `except` (the field being looked at), so a
 * reference to one item's secret does not fit another item, whatever their order.
 */
function itemLabel(item: unknown, except: string): string {
  if (!isObj(item)) return '';
  const plain = Object.keys(item)
    .filter((k) => k !== except && ['string', 'number', 'boolean'].includes(typeof item[k]))
    .sort()
    .map((k) => [k, item[k]]);
  return JSON.stringify(plain);
}

/** Every field of `data` at `path` (see FieldPath); missing parts yield nothing. */
export function fieldsAt(data: unknown, path: FieldPath): FoundField[] {
  const parts = path.split('.');
  const out: FoundField[] = [];
  const walk = (node: unknown, i: number, at: string): void => {
    if (!isObj(node)) return;
    const part = parts[i];
    const list = part.endsWith('[]');
    const name = list ? part.slice(0, -2) : part;
    const last = i === parts.length - 1;
    if (!list) {
      if (last) {
        if (name in node) out.push({ at: `${at}.${name}`, value: node[name], set: (v) => (node[name] = v) });
      } else walk(node[name], i + 1, `${at}.${name}`);
      return;
    }
    const items = node[name];
    if (!Array.isArray(items)) return;
    const next = last ? '' : parts[i + 1].replace(/\[\]$/, '');
    items.forEach((item, j) => {
      const label = parts.length - 1 === i + 1 ? itemLabel(item, next) : itemLabel(item, '');
      if (last) out.push({ at: `${at}.${name}[${label}]`, value: item, set: (v) => (items[j] = v) });
      else walk(item, i + 1, `${at}.${name}[${label}]`);
    });
  };
  walk(data, 0, '');
  return out;
}
