/**
 * qbee's `software_management`: per item, a package (by name from the repositories, or a package file of
 * the file store when the name ends in the manager's suffix, e.g. `.deb`), configuration files rendered
 * from templates of the file store with the item's parameters, and a restart of the service when the
 * package or a configuration file changed.
 */
import { constants, open, rm } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { Bundle, BundleContext } from '../bundle.js';
import { isExecutable } from '../command.js';
import { readCapped, sha256In, writeAtomicIn } from '../device-files.js';
import { openParent, replaceable, sha256 } from '../fsutil.js';
import { detectPackageManager, type InstalledPackage, type PackageManager } from './package-managers.js';
import { PACKAGE_TOKEN } from './package-management.js';
import {
  outputTail,
  parseBundleData,
  preConditionHolds,
  renderTemplate,
  resolveParameters,
  resolveTemplateValue,
  underRoot,
  failureReason,
} from './software-support.js';
import { resolvePath } from '../template.js';

const configFile = z.object({
  config_template: z.string().min(1).max(1024),
  config_location: z
    .string()
    .min(2)
    .max(1024)
    .refine((p) => p.startsWith('/') || p.startsWith('$('), 'must be an absolute path'),
});

const item = z.object({
  package: z.string().min(1).max(1024),
  service_name: z.string().max(256).optional().default(''),
  pre_condition: z.string().max(4096).optional().default(''),
  config_files: z.array(configFile).max(100).optional().default([]),
  parameters: z
    .array(z.object({ key: z.string().min(1).max(256), value: z.string().max(65536) }))
    .max(1000)
    .optional()
    .default([]),
});

const schema = z.looseObject({ items: z.array(item).max(200).optional().default([]) });

export type SoftwareManagementData = z.infer<typeof schema>;
type SoftwareItem = z.infer<typeof item>;

/** Largest configuration template rendered. */
const MAX_TEMPLATE_BYTES = 20 * 1024 * 1024;

const SERVICE_NAME = /^[A-Za-z0-9][A-Za-z0-9@._:-]*$/;

export const softwareManagementBundle: Bundle<SoftwareManagementData> = {
  name: 'software_management',
  parse: (data) => parseBundleData('software_management', schema, data),
  async apply(data, ctx) {
    if (data.items.length === 0) return;
    const manager = await detectPackageManager(ctx);
    if (!manager) {
      ctx.report('ERR', 'No supported package manager found (apt/dpkg, rpm with dnf or yum, opkg): nothing applied.');
      return;
    }
    for (const entry of data.items) {
      if (ctx.signal.aborted) return;
      if (!(await applyItem(entry, manager, ctx))) return;
    }
  },
};

/** One item; false when it failed (qbee stops the bundle there). */
async function applyItem(entry: SoftwareItem, manager: PackageManager, ctx: BundleContext): Promise<boolean> {
  if (!(await preConditionHolds(ctx, entry.pre_condition))) return true;
  const pkg = resolveParameters(entry.package, ctx.parameters).trim();
  const installed = pkg.endsWith(manager.fileSuffix) ? await installFromFile(pkg, manager, ctx) : await installFromRepository(pkg, manager, ctx);
  if (!installed) return false;
  let restart = installed.changed;

  const values: Record<string, string> = { ...ctx.parameters };
  for (const { key, value } of entry.parameters) values[key] = resolveTemplateValue(value, ctx.parameters);
  for (const file of entry.config_files) {
    const written = await writeConfigFile(file, values, ctx);
    if (written === null) return false;
    restart ||= written;
  }

  if (restart) {
    const serviceName = resolveParameters(entry.service_name, ctx.parameters).trim() || installed.name;
    await restartService(serviceName, ctx);
  }
  return true;
}

async function installFromRepository(name: string, manager: PackageManager, ctx: BundleContext): Promise<{ name: string; changed: boolean } | null> {
  if (!PACKAGE_TOKEN.test(name)) {
    ctx.report('ERR', `Invalid package name '${name}'.`);
    return null;
  }
  if (!manager.hasRepositories) {
    ctx.report('ERR', `Package manager ${manager.kind} cannot install '${name}' from repositories.`);
    return null;
  }
  try {
    if ((await manager.listInstalled()).has(name)) return { name, changed: false };
  } catch (err) {
    ctx.report('ERR', `Cannot list installed packages (${manager.kind}).`, (err as Error).message);
    return null;
  }
  const refreshed = await manager.refresh();
  if (refreshed && refreshed.code !== 0) {
    ctx.report('ERR', `Refreshing the ${manager.kind} package index failed.`, outputTail(refreshed));
    return null;
  }
  const result = await manager.install(name, '');
  if (result.code !== 0) {
    ctx.report('ERR', `Unable to install '${name}'.`, outputTail(result));
    return null;
  }
  ctx.report('INFO', `Successfully installed '${name}'.`, outputTail(result));
  return { name, changed: true };
}

function isInstalled(installed: Map<string, InstalledPackage>, wanted: InstalledPackage): boolean {
  const current = installed.get(wanted.name);
  if (!current) return false;
  if (!wanted.version) return true;
  return current.version === wanted.version && (!wanted.architecture || !current.architecture || current.architecture === wanted.architecture);
}

async function installFromFile(filePath: string, manager: PackageManager, ctx: BundleContext): Promise<{ name: string; changed: boolean } | null> {
  let local: string;
  try {
    local = await ctx.fetchFile(filePath);
  } catch (err) {
    ctx.report('ERR', `Unable to download '${filePath}' from the file store.`, (err as Error).message);
    return null;
  }
  try {
    let info: InstalledPackage;
    try {
      info = await manager.readFile(local);
    } catch (err) {
      ctx.report('ERR', `'${filePath}' is not a readable ${manager.fileSuffix} package.`, (err as Error).message);
      return null;
    }
    if (!info.architecture) {
      ctx.report('ERR', `Package ${info.name} reports an empty architecture.`);
      return null;
    }
    let installed: Map<string, InstalledPackage>;
    try {
      installed = await manager.listInstalled();
    } catch (err) {
      ctx.report('ERR', `Cannot list installed packages (${manager.kind}).`, (err as Error).message);
      return null;
    }
    if (isInstalled(installed, info)) return { name: info.name, changed: false };
    const result = await manager.installFile(local);
    if (result.code !== 0) {
      ctx.report('ERR', `Unable to install '${filePath}'.`, outputTail(result));
      return null;
    }
    if (!isInstalled(await manager.listInstalled(), info)) {
      ctx.report('ERR', `Unable to install '${filePath}': the package manager did not record it.`, outputTail(result));
      return null;
    }
    ctx.report('INFO', `Successfully installed '${filePath}'.`, outputTail(result));
    return { name: info.name, changed: true };
  } finally {
    await rm(local, { force: true });
  }
}

/** Writes a rendered configuration file when its content differs; null when it failed. */
async function writeConfigFile(file: z.infer<typeof configFile>, values: Record<string, string>, ctx: BundleContext): Promise<boolean | null> {
  const template = resolveParameters(file.config_template, ctx.parameters);
  const location = resolvePath(file.config_location, ctx.parameters);
  if (!location.startsWith('/')) {
    ctx.report('ERR', `Configuration file location '${location}' is not an absolute path.`);
    return null;
  }
  let local: string;
  try {
    local = await ctx.fetchFile(template);
  } catch (err) {
    ctx.report('ERR', `Unable to download template '${template}' from the file store.`, (err as Error).message);
    return null;
  }
  try {
    const rendered = renderTemplate((await readTemplate(local)).toString('utf8'), values);
    // the location's directory chain is checked and held open, the file replaced through a new
    // file made exclusively beside it, its mode and owner kept (see fsutil)
    const { dir, name } = await openParent(ctx.root, location, { create: 0o755 });
    try {
      await replaceable(dir, name);
      if ((await sha256In(dir, name)) === sha256(rendered)) return false;
      await writeAtomicIn(dir, name, rendered, { mode: 0o644 });
    } finally {
      await dir.close();
    }
    ctx.report('INFO', `Successfully rendered template file ${template} to ${location}.`);
    return true;
  } catch (err) {
    ctx.report('ERR', `Unable to write configuration file ${location}.`, (err as Error).message);
    return null;
  } finally {
    await rm(local, { force: true });
  }
}

/** The downloaded template (the agent's own temporary file), read with a cap. */
async function readTemplate(local: string): Promise<Buffer> {
  const handle = await open(local, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    if (!(await handle.stat()).isFile()) throw new Error('the downloaded template is not a regular file');
    return await readCapped(handle, MAX_TEMPLATE_BYTES, 'the template');
  } finally {
    await handle.close();
  }
}

/** systemd on a device's own root, else the root's init script; nothing when there is no such service. */
async function restartService(name: string, ctx: BundleContext): Promise<void> {
  if (!SERVICE_NAME.test(name)) {
    ctx.report('WARN', `Required restart of '${name}' cannot be performed: invalid service name.`);
    return;
  }
  let argv: string[] | null = null;
  if (path.resolve(ctx.root) === '/' && (await ctx.has('systemctl'))) {
    const known = await ctx.run(['systemctl', 'cat', '--', name]);
    if (known.code === 0) argv = ['systemctl', 'restart', '--', name];
  }
  if (!argv) {
    const script = underRoot(ctx, path.join('/etc/init.d', name));
    if (await isExecutable(script)) argv = [script, 'restart'];
  }
  if (!argv) return;
  const result = await ctx.run(argv, { timeoutMs: 5 * 60_000 });
  if (result.code !== 0) {
    ctx.report('WARN', `Required restart of '${name}' cannot be performed (${failureReason(result)}).`, outputTail(result));
    return;
  }
  ctx.report('INFO', `Restarted service '${name}'.`, outputTail(result));
}
