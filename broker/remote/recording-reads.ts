/**
 * Reading console recordings back: one recording for its owner or whoever may manage remote access
 * on its device (every read, and every refused one, audited), and the list of those the caller may
 * play. Whose a recording is comes from its console's start entry (broker/audit/remote-queries.ts).
 */
import fs from 'node:fs';
import type { Logger } from 'pino';
import type { RecordingListItem } from '../../shared/api-types.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import { consoleEnds, recordedConsoleStarts, recordingOwner, type RecordedConsoleStart } from '../audit/remote-queries.js';
import type { AuditService } from '../audit/service.js';
import type { Db } from '../db/database.js';
import { nodeTitles } from '../devices/directory.js';
import type { Config } from '../environment.js';
import { forbidden, notFound } from '../errors.js';
import { recordingPath } from './recordings.js';

/** The newest recorded consoles a recordings listing looks at, at most. */
const RECORDINGS_SCAN = 5000;

/** What reading recordings uses. */
export interface RecordingReadsDeps {
  config: Pick<Config, 'dataDir'>;
  logger: Logger;
  db: Db;
  access: Pick<AccessService, 'maySeeRemoteSession'>;
  audit: Pick<AuditService, 'recordChange'>;
}

/**
 * A console's recording (asciicast v2) by its session id, 404 when there is none; for its owner or whoever may manage remote access on its device
 * (`remote-access:manage` there, as for the live session): the console's start entry, whose
 * `recording` option names it, says whose and where. A recording whose start entry is gone
 * (audit retention) is served to a `*` grant of remote-access:manage only. Every read, and every
 * refused one, is an audit entry (`recording.read`); a read that cannot be audited is refused.
 */
export async function readRecording(
  deps: RecordingReadsDeps,
  principal: Principal,
  sessionId: string,
  ip: string,
): Promise<{ stream: fs.ReadStream; size: number }> {
  const file = recordingPath(deps.config.dataDir, sessionId);
  const missing = notFound(`Recording of session ${sessionId}`);
  if (!file) throw missing;
  let handle: fs.promises.FileHandle;
  try {
    handle = await fs.promises.open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  } catch {
    throw missing;
  }
  try {
    // The session id is a UUID (recordingPath checked it): nothing in it is a LIKE wildcard.
    const start = await recordingOwner(deps.db, sessionId);
    const owner = start?.user_id ?? '';
    const deviceId = start?.device_id ?? '';
    const allowed = owner === principal.user.id || (await deps.access.maySeeRemoteSession(principal, { userId: owner, deviceId }));
    const entry = {
      event: 'recording.read',
      user: principal.user,
      action: 'GET /api/v2/remote/recordings/{session_id}',
      ...(deviceId ? { deviceId } : {}),
      options: { session_id: sessionId, owner: owner || null },
      ip,
      sessionId: principal.sessionId,
    };
    if (!allowed) {
      const reason = "a console's recording is for its owner and for remote-access:manage on its device";
      await deps.audit.recordChange({ ...entry, result: 'denied', reason: `forbidden: ${reason}` }).catch((err) => {
        deps.logger.error({ err }, 'refused recording read not audited');
      });
      throw forbidden(`Not allowed: ${reason}.`, { permission: 'remote-access:manage', ...(deviceId ? { device_id: deviceId } : {}) });
    }
    await deps.audit.recordChange(entry);
    const { size } = await handle.stat();
    return { stream: handle.createReadStream(), size };
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/**
 * The console recordings the caller may play (their own, and those on devices their
 * remote-access:manage covers, as for reading one), newest first, from the consoles' audit
 * entries: at most the RECORDINGS_SCAN newest recorded consoles are looked at.
 */
export async function listRecordings(
  deps: RecordingReadsDeps,
  principal: Principal,
  query: { device_id?: string; offset: number; items_per_page: number },
): Promise<{ items: RecordingListItem[]; total: number }> {
  const rows = await recordedConsoleStarts(deps.db, { deviceId: query.device_id, limit: RECORDINGS_SCAN });
  const allowed = new Map<string, boolean>();
  const visible: RecordedConsoleStart[] = [];
  const recordingOf = new Map<number, string>();
  for (const row of rows) {
    let recording: unknown;
    try {
      recording = (JSON.parse(row.options) as { recording?: unknown }).recording;
    } catch {
      continue;
    }
    const file = typeof recording === 'string' ? recordingPath(deps.config.dataDir, recording) : undefined;
    if (
      !file ||
      !(await fs.promises.access(file).then(
        () => true,
        () => false,
      ))
    )
      continue; // removed after RECORDING_RETENTION_DAYS, or never written
    const owner = row.user_id ?? '';
    const deviceId = row.device_id ?? '';
    const key = `${owner} ${deviceId}`;
    if (!allowed.has(key)) allowed.set(key, owner === principal.user.id || (await deps.access.maySeeRemoteSession(principal, { userId: owner, deviceId })));
    if (!allowed.get(key)) continue;
    visible.push(row);
    recordingOf.set(Number(row.id), recording as string);
  }
  const page = visible.slice(query.offset, query.offset + query.items_per_page);
  const ends = await consoleEnds(
    deps.db,
    page.map((r) => Number(r.id)),
  );
  const names = await nodeTitles(deps.db, [...new Set(page.map((r) => r.device_id ?? ''))]);
  const items = page.map((r) => {
    const end = ends.get(Number(r.id));
    const command = (JSON.parse(r.options) as { command?: unknown }).command;
    return {
      id: recordingOf.get(Number(r.id)) as string,
      audit_id: Number(r.id),
      session_id: r.session_id,
      user: { id: r.user_id ?? '', email: r.user_email ?? '' },
      device: { id: r.device_id ?? '', name: names.get(r.device_id ?? '') ?? '' },
      started_at: r.ts,
      ended_at: end?.ts ?? null,
      duration_ms: end?.duration_ms ?? null,
      ...(Array.isArray(command) ? { command: command.map(String) } : {}),
    };
  });
  return { items, total: visible.length };
}
