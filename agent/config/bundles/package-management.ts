/**
 * qbee's `package_management`: keeps listed packages installed (at a version, or the newest), or upgrades
 * every package (`full_upgrade`), when the `pre_condition` holds; `reboot_mode: always` asks for a reboot
 * after something changed. Silent when everything already is as configured.
 */
import { z } from 'zod';
import type { Bundle, BundleContext } from '../bundle.js';
import { detectPackageManager, type PackageManager } from './package-managers.js';
import { outputTail, parseBundleData, preConditionHolds, requestReboot, resolveParameters } from './software-support.js';

const packageItem = z.object({
  name: z.string().min(1).max(256),
  version: z.string().max(256).optional().default(''),
});

const schema = z.looseObject({
  pre_condition: z.string().max(4096).optional().default(''),
  reboot_mode: z.enum(['never', 'always']).optional().default('never'),
  full_upgrade: z.boolean().optional().default(false),
  items: z.array(packageItem).max(1000).optional().default([]),
});

export type PackageManagementData = z.infer<typeof schema>;

/** A package name or version as a package manager takes it: nothing that reads as an option. */
export const PACKAGE_TOKEN = /^[A-Za-z0-9][A-Za-z0-9.+_:~-]*$/;

export const packageManagementBundle: Bundle<PackageManagementData> = {
  name: 'package_management',
  parse: (data) => parseBundleData('package_management', schema, data),
  async apply(data, ctx) {
    if (!(await preConditionHolds(ctx, data.pre_condition))) return;
    const manager = await detectPackageManager(ctx);
    if (!manager) {
      ctx.report('ERR', 'No supported package manager found (apt/dpkg, rpm with dnf or yum, opkg): nothing applied.');
      return;
    }
    if (!manager.hasRepositories) {
      ctx.report('ERR', `Package manager ${manager.kind} cannot install from repositories: nothing applied.`);
      return;
    }
    const changed = data.full_upgrade ? await fullUpgrade(manager, ctx) : await installListed(manager, data, ctx);
    if (changed && data.reboot_mode === 'always') requestReboot(ctx, 'packages changed and reboot_mode is "always"');
  },
};

async function refresh(manager: PackageManager, ctx: BundleContext): Promise<boolean> {
  const result = await manager.refresh();
  if (result && result.code !== 0) {
    ctx.report('ERR', `Refreshing the ${manager.kind} package index failed.`, outputTail(result));
    return false;
  }
  return true;
}

async function fullUpgrade(manager: PackageManager, ctx: BundleContext): Promise<boolean> {
  if (!(await refresh(manager, ctx))) return false;
  let pending: Map<string, string>;
  try {
    pending = await manager.upgradable();
  } catch (err) {
    ctx.report('ERR', 'Full upgrade failed: cannot list upgradable packages.', (err as Error).message);
    return false;
  }
  if (pending.size === 0) return false;
  const result = await manager.upgradeAll();
  if (result.code !== 0) {
    ctx.report('ERR', 'Full upgrade failed.', outputTail(result));
    return false;
  }
  ctx.report('INFO', `Full upgrade was successful - ${pending.size} packages updated.`, outputTail(result));
  return true;
}

async function installListed(manager: PackageManager, data: PackageManagementData, ctx: BundleContext): Promise<boolean> {
  if (data.items.length === 0) return false;
  const items = data.items.map((item) => {
    const version = resolveParameters(item.version, ctx.parameters).trim();
    return { name: resolveParameters(item.name, ctx.parameters).trim(), version: version === 'latest' ? '' : version };
  });
  for (const item of items) {
    if (!PACKAGE_TOKEN.test(item.name) || (item.version && !PACKAGE_TOKEN.test(item.version))) {
      ctx.report('ERR', `Invalid package name or version '${item.name}${item.version ? `=${item.version}` : ''}': nothing applied.`);
      return false;
    }
  }
  let installed;
  try {
    installed = await manager.listInstalled();
  } catch (err) {
    ctx.report('ERR', `Cannot list installed packages (${manager.kind}).`, (err as Error).message);
    return false;
  }
  let refreshed = false;
  let upgradable: Map<string, string> | null = null;
  let changed = false;
  for (const item of items) {
    const current = installed.get(item.name);
    if (current && item.version && current.version === item.version) continue;
    if (!refreshed) {
      if (!(await refresh(manager, ctx))) return changed;
      refreshed = true;
    }
    if (current && !item.version) {
      if (!upgradable) {
        try {
          upgradable = await manager.upgradable();
        } catch (err) {
          ctx.report('ERR', 'Cannot list upgradable packages.', (err as Error).message);
          return changed;
        }
      }
      if (!upgradable.has(item.name)) continue;
    }
    const result = await manager.install(item.name, item.version);
    if (result.code !== 0) {
      ctx.report('ERR', `Unable to install package '${item.name}'.`, outputTail(result));
      return changed;
    }
    ctx.report('INFO', `Package '${item.name}' successfully installed.`, outputTail(result));
    changed = true;
  }
  return changed;
}
