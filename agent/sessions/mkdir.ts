/**
 * Making one directory (sftp's mkdir, so `scp -r` and `put -r` to the device): a copy channel with
 * direction `mkdir`, answered in the open's info. The agent runs as root and a local user may have
 * planted symlinks, so the parent is resolved and the new directory checked against the grant's
 * roots as an upload's file is, then checked again as the kernel names the parent actually opened,
 * and the directory is made through that open descriptor: mkdir never follows a symlink in the last
 * component (a planted one is "exists"), and the permissions are set on the new directory opened
 * without following links, never through its name.
 */
import { constants as C } from 'node:fs';
import fs from 'node:fs/promises';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { CopyParams } from '../../shared/protocol.js';
import type { SessionContext } from './context.js';
import { DIR_FLAGS, holdEntry, reason } from './held-entry.js';

/**
 * Makes the directory `requested` (its parent must exist) within the `allowed` roots (anywhere when
 * absent), with exactly `mode` (0 to 0o777, 0o755 when absent) whatever the umask. Answers the
 * directory as the kernel names it.
 */
export async function makeDirectory(requested: string, mode = 0o755, allowed?: string[]): Promise<string> {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o777)
    throw new AgentRefusal('invalid_request', 'The announced mode is not permissions from 0 to 0777 (set-id and sticky bits are not set).');
  const parent = await holdEntry(requested, allowed, 'Directories can only be made');
  try {
    const made = parent.entry;
    try {
      await fs.mkdir(made, 0o700);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new AgentRefusal('exists', `${requested} already exists on the device.`);
      throw new AgentRefusal('io_error', `Cannot make ${requested} on the device: ${reason(err)}.`);
    }
    let handle: fs.FileHandle | undefined;
    try {
      handle = await fs.open(made, DIR_FLAGS | C.O_NOFOLLOW);
      await handle.chmod(mode);
    } catch (err) {
      throw new AgentRefusal('io_error', `Made ${requested} on the device but could not set its permissions: ${reason(err)}.`);
    } finally {
      await handle?.close().catch(() => {});
    }
    return parent.real;
  } finally {
    await parent.close();
  }
}

/** Serves a `mkdir` channel: the directory made goes in the open's answer; the channel then only waits for the broker's end. */
export async function openMkdir(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  const made = await makeDirectory(params.path, params.mode, params.allowed);
  ctx.log('directory made', { ch: channel.id, path: made });
  channel.once('end', () => channel.end());
  channel.resume();
  return { path: made };
}
