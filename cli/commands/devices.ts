import type { ApiClient } from '../api.js';
import { formatTable, listDevices, resolveDevice } from '../devices.js';
import { escapeForTerminal } from '../../shared/text.js';

/** `fleet devices`: the devices the caller may see, as a table (or JSON). */
export async function devicesCommand(client: ApiClient, options: { json?: boolean }): Promise<number> {
  const devices = await listDevices(client);
  if (options.json) {
    process.stdout.write(`${JSON.stringify(devices, null, 2)}\n`);
    return 0;
  }
  if (devices.length === 0) {
    process.stderr.write('No devices you may see.\n');
    return 0;
  }
  const rows = [['ID', 'NAME', 'STATUS', 'GROUP', 'TAGS'], ...devices.map((d) => [d.id, d.name, d.status || '-', d.group, d.tags.join(',') || '-'])];
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
