/**
 * qbee's `file_distribution`: sets of files from the broker's file store placed on the device.
 * A file with `is_template` is rendered with `{{key}}` from the file set's `parameters` (their
 * values may use `$(key)`), the parameters bundle and the device's attributes. A set runs only when
 * its `pre_condition` (a shell command) exits 0; its `command` runs after any of its files changed.
 * A file already as it should be is left alone (and, with the `digest` the broker puts in the
 * configuration, not even fetched), so a second run changes nothing. Files are streamed from the
 * broker straight into the new file beside the destination (never held in memory whole); the
 * destination is reached and replaced as fsutil describes (no redirection by another user).
 */
import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Bundle, BundleContext } from '../bundle.js';
import { MAX_FILE_BYTES } from '../files.js';
import { readCapped, sha256In, writeAtomicIn } from '../device-files.js';
import { openParent, openSubdirectory, replaceable, sha256 } from '../fsutil.js';
import { fetchInto, reportCommand, requireTools, shell, withLabel } from '../helpers.js';
import { flag, keyValues, list, object, text } from '../parse.js';
import { ParameterError, renderTemplate, resolvePath, resolveTemplateValue } from '../template.js';

export interface DistributedFile {
  source: string;
  destination: string;
  is_template: boolean;
  /** sha256 of the file store's copy, when the configuration carries it */
  digest?: string;
}

export interface FileSet {
  label: string;
  templates: DistributedFile[];
  parameters: { key: string; value: string }[];
  command: string;
  pre_condition: string;
}

export interface FileDistributionData {
  files: FileSet[];
}

/** Largest template rendered in memory. */
const MAX_TEMPLATE_BYTES = 20 * 1024 * 1024;

export const fileDistributionBundle: Bundle<FileDistributionData> = {
  name: 'file_distribution',
  parse(data) {
    const o = object(data, 'file_distribution');
    return {
      files: list(o, 'files', 'file_distribution', 200).map((entry, i) => {
        const what = `file_distribution.files[${i}]`;
        const set = object(entry, what);
        return {
          label: text(set, 'label', what, { max: 256 }),
          templates: list(set, 'templates', what, 200).map((f, j) => {
            const fw = `${what}.templates[${j}]`;
            const file = object(f, fw);
            const digest = text(file, 'digest', fw, { max: 64 }).toLowerCase();
            if (digest && !/^[0-9a-f]{64}$/.test(digest)) throw new Error(`${fw}.digest must be a sha256 in hex`);
            return {
              source: text(file, 'source', fw, { required: true, max: 1024 }),
              destination: text(file, 'destination', fw, { required: true, max: 1024 }),
              is_template: flag(file, 'is_template', fw),
              ...(digest ? { digest } : {}),
            };
          }),
          parameters: keyValues(set, 'parameters', what),
          command: text(set, 'command', what, { max: 16384 }),
          pre_condition: text(set, 'pre_condition', what, { max: 16384 }),
        };
      }),
    };
  },
  async apply(data, ctx) {
    const needsShell = data.files.some((s) => s.command || s.pre_condition);
    if (needsShell && !(await requireTools(ctx, ['sh'], 'file distribution (its commands need a shell)'))) return;
    for (const set of data.files) {
      if (ctx.signal.aborted) return;
      try {
        if (set.pre_condition) {
          const pre = await shell(ctx, set.pre_condition);
          if (pre.code !== 0) continue; // qbee: a set whose pre-condition fails is skipped
        }
        const params: Record<string, string> = { ...ctx.parameters };
        for (const p of set.parameters) params[p.key] = resolveTemplateValue(p.value, ctx.parameters);
        let changed = false;
        for (const file of set.templates) {
          if (await placeFile(ctx, set.label, file, params)) changed = true;
        }
        if (changed && set.command) {
          const result = await shell(ctx, set.command);
          reportCommand(ctx, result, withLabel(set.label, 'Successfully executed after command'), withLabel(set.label, 'After command failed'));
        }
      } catch (err) {
        // an unknown $(key) in the pre-condition, a parameter or the command: the set is not applied
        if (!(err instanceof ParameterError)) throw err;
        ctx.report('ERR', withLabel(set.label, `File set not applied: ${err.message}.`));
      }
    }
  },
};

/** Brings one file to its state; true when it changed. Failures are reported, not thrown. */
async function placeFile(ctx: BundleContext, label: string, file: DistributedFile, params: Record<string, string>): Promise<boolean> {
  let source = file.source;
  let destination = file.destination;
  const verb = file.is_template ? 'render template file' : 'download file';
  try {
    source = resolvePath(file.source, ctx.parameters);
    destination = resolvePath(file.destination, ctx.parameters);
    if (!destination.startsWith('/')) throw new Error(`absolute destination path required, got ${destination}`);
    if (destination.endsWith('/')) throw new Error(`destination ${destination} names a directory`);
    // the destination's directory chain is checked and held open (see fsutil): nothing below is
    // reached through a path another user could redirect
    let { dir, name } = await openParent(ctx.root, destination, { create: 0o750 });
    try {
      const existing = await fs.lstat(dir.at(name)).catch(() => undefined);
      if (existing?.isDirectory()) {
        const inner = await openSubdirectory(dir, name);
        await dir.close();
        dir = inner;
        name = path.posix.basename(source);
      }
      await replaceable(dir, name);
      const current = await sha256In(dir, name, MAX_FILE_BYTES);
      if (!file.is_template && file.digest && current === file.digest) return false;
      if (file.is_template) {
        const content = await templateBytes(ctx, source, file);
        const out = Buffer.from(renderTemplate(content.toString('utf8'), params));
        if (current === sha256(out)) return false;
        await writeAtomicIn(dir, name, out, { mode: 0o640 });
      } else {
        // streamed from the broker into the new file, its digest computed on the way
        const changed = await writeAtomicIn(
          dir,
          name,
          async (handle) => {
            const got = await fetchInto(ctx, source, handle, MAX_FILE_BYTES);
            if (file.digest && got.sha256 !== file.digest) throw new Error(`the file store's ${source} does not match the digest in the configuration`);
            return got.sha256 !== current;
          },
          { mode: 0o640 },
        );
        if (!changed) return false;
      }
    } finally {
      await dir.close();
    }
    ctx.report('INFO', withLabel(label, `Successfully ${file.is_template ? 'rendered template file' : 'downloaded file'} ${source} to ${destination}`));
    return true;
  } catch (err) {
    ctx.report('ERR', withLabel(label, `Unable to ${verb} ${source} to ${destination}: ${(err as Error).message}`));
    return false;
  }
}

/**
 * The file store's bytes of the template `source` (at most MAX_TEMPLATE_BYTES). Templates are
 * cached in the state directory by digest, so a run whose configuration carries the digest renders
 * without asking the broker again.
 */
async function templateBytes(ctx: BundleContext, source: string, file: DistributedFile): Promise<Buffer> {
  const cache = path.join(ctx.stateDir, 'file_distribution', `${sha256(source)}.src`);
  if (file.digest) {
    const cached = await readPrivate(cache).catch(() => undefined);
    if (cached && sha256(cached) === file.digest) return cached;
  }
  const temp = await ctx.fetchFile(source);
  try {
    const bytes = await readPrivate(temp);
    if (file.digest && sha256(bytes) !== file.digest) throw new Error(`the file store's ${source} does not match the digest in the configuration`);
    await fs.mkdir(path.dirname(cache), { recursive: true, mode: 0o700 });
    await fs.writeFile(cache, bytes, { mode: 0o600 });
    return bytes;
  } finally {
    await fs.rm(temp, { force: true });
  }
}

/** A file of the agent's own (state directory, downloads), read with the template cap. */
async function readPrivate(file: string): Promise<Buffer> {
  const handle = await fs.open(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    if (!(await handle.stat()).isFile()) throw new Error('not a regular file');
    return await readCapped(handle, MAX_TEMPLATE_BYTES, 'template');
  } finally {
    await handle.close();
  }
}
