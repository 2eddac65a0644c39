/**
 * The device's package manager as the package bundles see it: apt (with dpkg), dpkg alone (local package
 * files only), rpm with dnf or yum, or opkg — whichever is present. Everything acts on the context's root:
 * on a device that is `/`; elsewhere apt and dpkg are pointed at the root's own database and files.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { BundleContext, CommandResult } from '../bundle.js';

export interface InstalledPackage {
  name: string;
  version: string;
  architecture: string;
}

export interface PackageManager {
  readonly kind: 'apt' | 'dpkg' | 'rpm' | 'opkg';
  /** suffix of its package files (`.deb`, `.rpm`, `.ipk`) */
  readonly fileSuffix: string;
  /** false when it can only install package files (dpkg alone) */
  readonly hasRepositories: boolean;
  listInstalled(): Promise<Map<string, InstalledPackage>>;
  /** refreshes the package index (when the manager keeps one) */
  refresh(): Promise<CommandResult | null>;
  /** installed packages with a newer candidate: name → candidate version */
  upgradable(): Promise<Map<string, string>>;
  /** installs a package from the repositories; empty version means the newest */
  install(name: string, version: string): Promise<CommandResult>;
  installFile(file: string): Promise<CommandResult>;
  upgradeAll(): Promise<CommandResult>;
  /** name, version and architecture of a package file */
  readFile(file: string): Promise<InstalledPackage>;
}

const LONG = 30 * 60_000;

function failed(result: CommandResult): Error {
  return new Error((result.stderr.trim() || result.stdout.trim() || `exit code ${String(result.code)}`).split('\n').slice(-3).join(' '));
}

/** apt's configuration pointing it (and the dpkg it runs) at a root other than `/`. */
async function aptConfigForRoot(ctx: BundleContext): Promise<Record<string, string>> {
  if (path.resolve(ctx.root) === '/') return {};
  const root = path.resolve(ctx.root);
  const file = path.join(ctx.stateDir, 'apt-root.conf');
  await mkdir(ctx.stateDir, { recursive: true });
  const lines = [
    `Dir "${root}/";`,
    'Dir::Bin::dpkg "/usr/bin/dpkg";',
    'Dir::Bin::Methods "/usr/lib/apt/methods/";',
    'Dir::Bin::Solvers "/usr/lib/apt/solvers/";',
    'Dir::Bin::Planners "/usr/lib/apt/planners/";',
    'APT::Sandbox::User "root";',
    `DPkg::Options { "--root=${root}"; "--force-not-root"; "--force-bad-path"; };`,
  ];
  await writeFile(file, `${lines.join('\n')}\n`);
  return { APT_CONFIG: file };
}

function dpkgRootArgs(ctx: BundleContext): string[] {
  const root = path.resolve(ctx.root);
  return root === '/' ? [] : [`--root=${root}`, '--force-not-root', '--force-bad-path'];
}

function dpkgAdminArgs(ctx: BundleContext): string[] {
  const root = path.resolve(ctx.root);
  return root === '/' ? [] : [`--admindir=${path.join(root, 'var/lib/dpkg')}`];
}

async function listDpkg(ctx: BundleContext): Promise<Map<string, InstalledPackage>> {
  const result = await ctx.run(['dpkg-query', ...dpkgAdminArgs(ctx), '-W', '-f', '${Package}\\t${Version}\\t${Architecture}\\t${db:Status-Status}\\n']);
  if (result.code !== 0) throw failed(result);
  const installed = new Map<string, InstalledPackage>();
  for (const line of result.stdout.split('\n')) {
    const [name, version, architecture, status] = line.split('\t');
    if (name && version && status === 'installed') installed.set(name, { name, version, architecture: architecture ?? '' });
  }
  return installed;
}

async function readDeb(ctx: BundleContext, file: string): Promise<InstalledPackage> {
  const result = await ctx.run(['dpkg-deb', '--show', '--showformat=${Package}\\t${Version}\\t${Architecture}', file]);
  if (result.code !== 0) throw failed(result);
  const [name, version, architecture] = result.stdout.trim().split('\t');
  if (!name) throw new Error(`not a package file: ${path.basename(file)}`);
  return { name, version: version ?? '', architecture: architecture ?? '' };
}

function dpkgManager(ctx: BundleContext): PackageManager {
  const unsupported = async (): Promise<CommandResult> => ({ code: 1, stdout: '', stderr: 'dpkg alone cannot install from repositories (apt-get is missing)' });
  return {
    kind: 'dpkg',
    fileSuffix: '.deb',
    hasRepositories: false,
    listInstalled: () => listDpkg(ctx),
    refresh: async () => null,
    upgradable: async () => new Map(),
    install: unsupported,
    installFile: (file) => ctx.run(['dpkg', ...dpkgRootArgs(ctx), '-i', file], { timeoutMs: LONG }),
    upgradeAll: unsupported,
    readFile: (file) => readDeb(ctx, file),
  };
}

function aptManager(ctx: BundleContext): PackageManager {
  const apt = async (args: string[]): Promise<CommandResult> =>
    ctx.run(['apt-get', ...args], {
      timeoutMs: LONG,
      env: { DEBIAN_FRONTEND: 'noninteractive', ...(await aptConfigForRoot(ctx)) },
    });
  const keepConfig = ['-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold'];
  return {
    kind: 'apt',
    fileSuffix: '.deb',
    hasRepositories: true,
    listInstalled: () => listDpkg(ctx),
    refresh: () => apt(['update', '-q']),
    async upgradable() {
      const result = await apt(['-s', '-q', 'dist-upgrade']);
      if (result.code !== 0) throw failed(result);
      const upgrades = new Map<string, string>();
      for (const match of result.stdout.matchAll(/^Inst (\S+) \[[^\]]*\] \((\S+)/gm)) upgrades.set(match[1]!, match[2]!);
      return upgrades;
    },
    install: (name, version) => apt(['install', '-y', '-q', ...keepConfig, version ? `${name}=${version}` : name]),
    installFile: (file) => apt(['install', '-y', '-q', ...keepConfig, path.resolve(file)]),
    upgradeAll: () => apt(['dist-upgrade', '-y', '-q', ...keepConfig]),
    readFile: (file) => readDeb(ctx, file),
  };
}

function rpmManager(ctx: BundleContext, frontend: 'dnf' | 'yum'): PackageManager {
  const run = (args: string[]): Promise<CommandResult> => ctx.run([frontend, ...args], { timeoutMs: LONG });
  return {
    kind: 'rpm',
    fileSuffix: '.rpm',
    hasRepositories: true,
    async listInstalled() {
      const result = await ctx.run(['rpm', '-qa', '--queryformat', '%{NAME}\\t%{VERSION}-%{RELEASE}\\t%{ARCH}\\n']);
      if (result.code !== 0) throw failed(result);
      const installed = new Map<string, InstalledPackage>();
      for (const line of result.stdout.split('\n')) {
        const [name, version, architecture] = line.split('\t');
        if (name && version) installed.set(name, { name, version, architecture: architecture ?? '' });
      }
      return installed;
    },
    refresh: () => run(['-q', 'makecache']),
    async upgradable() {
      const result = await run(['-q', 'check-update']);
      // check-update exits 100 when updates exist, 0 when none
      if (result.code !== 0 && result.code !== 100) throw failed(result);
      const upgrades = new Map<string, string>();
      for (const line of result.stdout.split('\n')) {
        const [nameArch, version] = line.trim().split(/\s+/);
        if (nameArch && version && nameArch.includes('.')) upgrades.set(nameArch.slice(0, nameArch.lastIndexOf('.')), version);
      }
      return upgrades;
    },
    install: (name, version) => run(['-y', 'install', version ? `${name}-${version}` : name]),
    installFile: (file) => run(['-y', 'install', path.resolve(file)]),
    upgradeAll: () => run(['-y', 'upgrade']),
    async readFile(file) {
      const result = await ctx.run(['rpm', '-qp', '--queryformat', '%{NAME}\\t%{VERSION}-%{RELEASE}\\t%{ARCH}', file]);
      if (result.code !== 0) throw failed(result);
      const [name, version, architecture] = result.stdout.trim().split('\t');
      if (!name) throw new Error(`not a package file: ${path.basename(file)}`);
      return { name, version: version ?? '', architecture: architecture ?? '' };
    },
  };
}

function opkgManager(ctx: BundleContext): PackageManager {
  const run = (args: string[]): Promise<CommandResult> => ctx.run(['opkg', ...args], { timeoutMs: LONG });
  const parseList = (text: string): Map<string, string> => {
    const map = new Map<string, string>();
    for (const line of text.split('\n')) {
      const parts = line.split(' - ');
      if (parts.length >= 2 && parts[0] && parts[1]) map.set(parts[0].trim(), (parts[parts.length - 1] ?? '').trim());
    }
    return map;
  };
  return {
    kind: 'opkg',
    fileSuffix: '.ipk',
    hasRepositories: true,
    async listInstalled() {
      const result = await run(['list-installed']);
      if (result.code !== 0) throw failed(result);
      const installed = new Map<string, InstalledPackage>();
      for (const line of result.stdout.split('\n')) {
        const [name, version] = line.split(' - ');
        if (name && version) installed.set(name.trim(), { name: name.trim(), version: version.trim(), architecture: '' });
      }
      return installed;
    },
    refresh: () => run(['update']),
    async upgradable() {
      const result = await run(['list-upgradable']);
      if (result.code !== 0) throw failed(result);
      return parseList(result.stdout);
    },
    install: (name, version) => run(['install', version ? `${name}=${version}` : name]),
    installFile: (file) => run(['install', path.resolve(file)]),
    async upgradeAll() {
      const names = [...(await this.upgradable()).keys()];
      if (names.length === 0) return { code: 0, stdout: '', stderr: '' };
      return run(['upgrade', ...names]);
    },
    async readFile(file) {
      const result = await run(['info', path.resolve(file)]);
      if (result.code !== 0) throw failed(result);
      const field = (name: string): string => new RegExp(`^${name}: (.*)$`, 'm').exec(result.stdout)?.[1]?.trim() ?? '';
      if (!field('Package')) throw new Error(`not a package file: ${path.basename(file)}`);
      return { name: field('Package'), version: field('Version'), architecture: field('Architecture') };
    },
  };
}

/** The package manager present on the device, or null when there is none the bundles know. */
export async function detectPackageManager(ctx: BundleContext): Promise<PackageManager | null> {
  if (await ctx.has('dpkg')) return (await ctx.has('apt-get')) ? aptManager(ctx) : dpkgManager(ctx);
  if (await ctx.has('rpm')) {
    if (await ctx.has('dnf')) return rpmManager(ctx, 'dnf');
    if (await ctx.has('yum')) return rpmManager(ctx, 'yum');
  }
  if (await ctx.has('opkg')) return opkgManager(ctx);
  return null;
}
