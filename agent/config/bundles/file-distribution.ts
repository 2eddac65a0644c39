/**
 * qbee's `file_distribution`: sets of files from the broker's file store placed on the device.
 * A file with `is_template` is rendered with `{{key}}` from the file set's `parameters` (their
 * values may use `$(key)`), the parameters bundle and the device's attributes. A set runs only when
 * its `pre_condition` (a shell command) exits 0; its `command` runs after any of its files changed.
 * A file already as it should be is left alone (and, with the `digest` of the configuration, not
 * even fetched), so a second run changes nothing.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Bundle, BundleContext } from '../bundle.js';
import { makeDirectories, sha256, sha256OfFile, underRoot, writeFileAtomic } from '../fsutil.js';
import { reportCommand, requireTools, shell, withLabel } from '../helpers.js';
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
    let target = underRoot(ctx.root, destination);
    const existing = await fs.lstat(target).catch(() => undefined);
    if (existing?.isDirectory()) target = path.join(target, path.posix.basename(source));
    if (!file.is_template && file.digest && (await sha256OfFile(target)) === file.digest) return false;
    const content = await sourceBytes(ctx, source, file);
    const out = file.is_template ? Buffer.from(renderTemplate(content.toString('utf8'), params)) : content;
    if ((await sha256OfFile(target)) === sha256(out)) return false;
    await makeDirectories(ctx.root, path.dirname(target));
    await writeFileAtomic(target, out, { mode: 0o640 });
    ctx.report('INFO', withLabel(label, `Successfully ${file.is_template ? 'rendered template file' : 'downloaded file'} ${source} to ${destination}`));
    return true;
  } catch (err) {
    ctx.report('ERR', withLabel(label, `Unable to ${verb} ${source} to ${destination}: ${(err as Error).message}`));
    return false;
  }
}

/**
 * The file store's bytes of `source`. Templates are cached in the state directory by digest, so a
 * run whose configuration carries the digest renders without asking the broker again.
 */
async function sourceBytes(ctx: BundleContext, source: string, file: DistributedFile): Promise<Buffer> {
  const cache = path.join(ctx.stateDir, 'file_distribution', `${sha256(source)}.src`);
  if (file.digest) {
    const cached = await fs.readFile(cache).catch(() => undefined);
    if (cached && sha256(cached) === file.digest) return cached;
  }
  const temp = await ctx.fetchFile(source);
  try {
    const stat = await fs.stat(temp);
    if (file.is_template && stat.size > MAX_TEMPLATE_BYTES) throw new Error(`template larger than ${MAX_TEMPLATE_BYTES} bytes`);
    const bytes = await fs.readFile(temp);
    if (file.digest && sha256(bytes) !== file.digest) throw new Error(`the file store's ${source} does not match the digest in the configuration`);
    if (file.is_template) {
      await fs.mkdir(path.dirname(cache), { recursive: true, mode: 0o700 });
      await fs.writeFile(cache, bytes, { mode: 0o600 });
    }
    return bytes;
  } finally {
    await fs.rm(temp, { force: true });
  }
}
