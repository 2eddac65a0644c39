import type { ListPage, RecordingListItem as Recording } from '../../shared/api-types.js';
import type { ApiClient } from '../api.js';
import { formatTable, humanDuration, resolveDevice, shortIds } from '../devices.js';
import { CliError } from '../errors.js';
import { outputFormat } from './devices.js';

/** Every recording the caller may play (newest first), of one device or of all. */
async function listRecordings(client: ApiClient, deviceId?: string): Promise<Recording[]> {
  const all: Recording[] = [];
  for (let offset = 0; ; offset += 1000) {
    const query = new URLSearchParams({ offset: String(offset), items_per_page: '1000', ...(deviceId ? { device_id: deviceId } : {}) });
    const page = await client.call<ListPage<Recording>>('GET', `/remote/recordings?${query}`);
    all.push(...page.items);
    if (page.items.length === 0 || all.length >= page.total) return all;
  }
}

const when = (iso: string) => iso.replace('T', ' ').replace(/:\d\d(\.\d+)?Z$/, 'Z');

/** `fleet recordings [device]`: the console recordings you may play: session id, user, device, start, duration. */
export async function recordingsCommand(client: ApiClient, deviceArg: string | undefined, options: { json?: boolean; output?: string }): Promise<number> {
  const format = outputFormat(options);
  const device = deviceArg ? await resolveDevice(client, deviceArg) : undefined;
  const recordings = await listRecordings(client, device?.id);
  if (format === 'json') {
    process.stdout.write(`${JSON.stringify(recordings, null, 2)}\n`);
    return 0;
  }
  if (recordings.length === 0) {
    process.stderr.write('No recordings you may play.\n');
    return 0;
  }
  const short = shortIds(recordings.map((r) => r.id));
  const rows = [
    ['SESSION', 'USER', 'DEVICE', 'START', 'DURATION'],
    ...recordings.map((r) => [
      format === 'wide' ? r.id : (short.get(r.id) ?? r.id),
      r.user.email,
      r.device.name || r.device.id.slice(0, 12),
      when(r.started_at),
      r.duration_ms === null ? 'running' : humanDuration(r.duration_ms / 1000),
    ]),
  ];
  process.stdout.write(`${formatTable(rows)}\n`);
  return 0;
}

const SESSION_ID = /^[0-9a-f-]{36}$/i;

/**
 * The recording a user names: its session id (or a unique prefix of 4 or more), the console's
 * audit entry id, or the sign-in session id of that entry when it holds one console only.
 */
export async function resolveRecording(client: ApiClient, given: string): Promise<string> {
  const wanted = given.toLowerCase();
  const recordings = await listRecordings(client);
  const exact = recordings.filter((r) => r.id === wanted);
  if (exact.length === 1) return exact[0].id;
  const found = recordings.filter((r) => (wanted.length >= 4 && r.id.startsWith(wanted)) || r.session_id === wanted || String(r.audit_id) === wanted);
  if (found.length === 1) return found[0].id;
  if (found.length > 1) {
    const short = shortIds(recordings.map((r) => r.id));
    throw new CliError(`"${given}" names ${found.length} recordings (${found.map((r) => short.get(r.id)).join(', ')}); give the session id.`);
  }
  if (SESSION_ID.test(wanted)) return wanted; // not listed: the broker says whether it has one
  throw new CliError(`No recording "${given}" among those you may play; list them with "fleet recordings".`);
}
