import type { ApiClient } from '../api.js';
import { formatTable, listDevices, resolveDevice, shortIds, type DeviceRow } from '../devices.js';
import { CliError } from '../errors.js';
import { escapeForTerminal } from '../../shared/text.js';

export type OutputFormat = 'table' | 'wide' | 'json';

export interface DevicesOptions {
  /** --json: the same as -o json */
  json?: boolean;
  output?: string;
  name?: string;
  tag?: string[];
  group?: string;
  online?: boolean;
  offline?: boolean;
}

export function outputFormat(options: { json?: boolean; output?: string }): OutputFormat {
  if (options.json) return 'json';
  const format = options.output ?? 'table';
  if (format !== 'table' && format !== 'wide' && format !== 'json') throw new CliError(`-o ${format}: the output is table, wide or json.`);
  return format;
}

/** Devices in the group named so, at any depth, or under the group path given (a/b). */
function inGroup(row: DeviceRow, group: string): boolean {
  const wanted = group.replace(/^\/+|\/+$/g, '');
  if (wanted === '') return true;
  const path = row.group.replace(/^\/+/, '');
  return path === wanted || path.startsWith(`${wanted}/`) || path.split('/').includes(wanted);
}

export function filterDevices(devices: DeviceRow[], options: DevicesOptions): DeviceRow[] {
  if (options.online && options.offline) throw new CliError('--online and --offline exclude each other.');
  const name = options.name?.toLowerCase();
  return devices.filter(
    (d) =>
      (name === undefined || d.name.toLowerCase().includes(name)) &&
      (options.tag ?? []).every((tag) => d.tags.includes(tag)) &&
      (options.group === undefined || inGroup(d, options.group)) &&
      (!options.online || d.status === 'online') &&
      (!options.offline || d.status !== 'online'),
  );
}

/**
 * `fleet devices`: the devices the caller may see, filtered, as a table (short ids: the shortest
 * prefix telling them apart, at least 8), a wide table (full ids) or JSON (full ids).
 */
export async function devicesCommand(client: ApiClient, options: DevicesOptions): Promise<number> {
  const format = outputFormat(options);
  const all = await listDevices(client);
  const devices = filterDevices(all, options);
  if (format === 'json') {
    process.stdout.write(`${JSON.stringify(devices, null, 2)}\n`);
    return 0;
  }
  if (devices.length === 0) {
    process.stderr.write(all.length === 0 ? 'No devices you may see.\n' : 'No device matches.\n');
    return 0;
  }
  // Short ids are unique among all the devices the caller sees, so a filtered list names them the same way.
  const short = shortIds(all.map((d) => d.id));
  const id = (d: DeviceRow) => (format === 'wide' ? d.id : (short.get(d.id) ?? d.id));
  const rows = [['ID', 'NAME', 'STATUS', 'GROUP', 'TAGS'], ...devices.map((d) => [id(d), d.name, d.status || '-', d.group, d.tags.join(',') || '-'])];
  process.stdout.write(`${formatTable(rows)}\n`);
  return 0;
}

/** `fleet reload <device>`: restarts the device agent's work loop; answers once it acknowledged. */
export async function reloadCommand(client: ApiClient, deviceArg: string): Promise<number> {
  const device = await resolveDevice(client, deviceArg);
  await client.call('POST', `/remote/reload/${device.id}?source=cli`, {});
  process.stderr.write(`The agent of ${escapeForTerminal(device.name)} reloaded.\n`);
  return 0;
}
