/**
 * Test fixture for the package bundles: tiny .deb packages built with `dpkg-deb --build`, a local apt
 * repository of them (a flat `Packages` index, `file:` source, trusted), and a root directory holding its
 * own dpkg database and apt state — so apt and dpkg install into that root, never into the machine.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, writeFile, readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import { runCommand } from './test-context.js';

export interface DebSpec {
  name: string;
  version: string;
  architecture?: string;
  /** device path → content */
  files: Record<string, string>;
}

/** Builds `<name>_<version>_<arch>.deb` in outDir; returns its path. */
export async function buildDeb(workDir: string, outDir: string, spec: DebSpec): Promise<string> {
  const architecture = spec.architecture ?? 'all';
  const tree = path.join(workDir, `${spec.name}-${spec.version}`);
  await mkdir(path.join(tree, 'DEBIAN'), { recursive: true });
  await writeFile(
    path.join(tree, 'DEBIAN/control'),
    [
      `Package: ${spec.name}`,
      `Version: ${spec.version}`,
      `Architecture: ${architecture}`,
      'Maintainer: Test <test@example.com>',
      'Description: test package',
      '',
    ].join('\n'),
  );
  for (const [devicePath, content] of Object.entries(spec.files)) {
    const target = path.join(tree, devicePath);
    await mkdir(path.dirname(target), { recursive: true });
    await writeFile(target, content);
  }
  await mkdir(outDir, { recursive: true });
  const deb = path.join(outDir, `${spec.name}_${spec.version}_${architecture}.deb`);
  const result = await runCommand(['dpkg-deb', '--root-owner-group', '--build', tree, deb]);
  if (result.code !== 0) throw new Error(`dpkg-deb failed: ${result.stderr}`);
  return deb;
}

/** Writes the repository's flat `Packages` index over every .deb in repoDir. */
export async function indexRepository(repoDir: string): Promise<void> {
  const entries: string[] = [];
  for (const name of (await readdir(repoDir)).filter((n) => n.endsWith('.deb')).sort()) {
    const file = path.join(repoDir, name);
    const fields = await runCommand(['dpkg-deb', '-f', file]);
    if (fields.code !== 0) throw new Error(`dpkg-deb -f failed: ${fields.stderr}`);
    const sha256 = createHash('sha256')
      .update(await readFile(file))
      .digest('hex');
    entries.push(`${fields.stdout.trim()}\nFilename: ./${name}\nSize: ${(await stat(file)).size}\nSHA256: ${sha256}\n`);
  }
  await writeFile(path.join(repoDir, 'Packages'), entries.join('\n'));
}

/** Makes root a target apt and dpkg can install into, with repoDir as its only source. */
export async function prepareDebRoot(root: string, repoDir: string): Promise<void> {
  for (const dir of [
    'var/lib/dpkg/info',
    'var/lib/dpkg/updates',
    'var/lib/dpkg/triggers',
    'var/lib/apt/lists/partial',
    'var/cache/apt/archives/partial',
    'var/log/apt',
    'etc/apt/apt.conf.d',
    'etc/apt/preferences.d',
    'etc/apt/sources.list.d',
  ]) {
    await mkdir(path.join(root, dir), { recursive: true });
  }
  await writeFile(path.join(root, 'var/lib/dpkg/status'), '');
  await mkdir(repoDir, { recursive: true });
  await writeFile(path.join(root, 'etc/apt/sources.list'), `deb [trusted=yes] file:${repoDir} ./\n`);
}

/** Package → version of what the root's dpkg database says is installed. */
export async function installedInRoot(root: string): Promise<Record<string, string>> {
  const result = await runCommand([
    'dpkg-query',
    `--admindir=${path.join(root, 'var/lib/dpkg')}`,
    '-W',
    '-f',
    '${Package}\\t${Version}\\t${db:Status-Status}\\n',
  ]);
  const installed: Record<string, string> = {};
  for (const line of result.stdout.split('\n')) {
    const [name, version, status] = line.split('\t');
    if (name && version && status === 'installed') installed[name] = version;
  }
  return installed;
}
