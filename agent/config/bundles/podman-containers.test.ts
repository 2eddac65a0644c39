/**
 * podman_containers: against the real podman with its storage in a temp directory and an image the test
 * builds locally from a busybox rootfs tarball (`podman import`, no registry); and through a whole life
 * cycle with a fake podman, since whether podman can start a container depends on the machine (inside
 * some sandboxes the OCI runtime may not set limits or cgroups).
 */
import { mkdtemp, rm, mkdir, copyFile, symlink, writeFile, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, runCommand, type SoftwareTestContext } from '../test-support/test-context.js';
import { installFakeRuntime } from '../test-support/fake-container-runtime.js';
import { podmanContainersBundle } from './podman-containers.js';

async function apply(t: SoftwareTestContext, data: unknown): Promise<void> {
  await podmanContainersBundle.apply(podmanContainersBundle.parse(data), t.ctx);
}

async function findBusybox(): Promise<string> {
  for (const candidate of ['/bin/busybox', '/usr/bin/busybox']) {
    try {
      await access(candidate);
      return candidate;
    } catch {
      // next
    }
  }
  throw new Error('busybox is needed to build the test image (apt-get install busybox-static)');
}

describe('podman_containers with the real podman and a locally built image', () => {
  let work: string;
  let env: Record<string, string>;
  let t: SoftwareTestContext;
  const image = 'localhost/bundle-test:1';

  beforeEach(async () => {
    work = await mkdtemp(path.join(tmpdir(), 'podman-bundle-'));
    await writeFile(path.join(work, 'storage.conf'), `[storage]\ndriver = "vfs"\ngraphroot = "${work}/graph"\nrunroot = "${work}/run"\n`);
    // podman's run-time files, volumes and events stay in the temp directory too
    await writeFile(
      path.join(work, 'containers.conf'),
      `[engine]\ntmp_dir = "${work}/tmp"\nstatic_dir = "${work}/libpod"\nvolume_path = "${work}/volumes"\nevents_logger = "none"\n`,
    );
    env = { CONTAINERS_STORAGE_CONF: path.join(work, 'storage.conf'), CONTAINERS_CONF: path.join(work, 'containers.conf') };
    const rootfs = path.join(work, 'rootfs');
    await mkdir(path.join(rootfs, 'bin'), { recursive: true });
    await copyFile(await findBusybox(), path.join(rootfs, 'bin/busybox'));
    for (const applet of ['sh', 'sleep']) await symlink('busybox', path.join(rootfs, 'bin', applet));
    expect((await runCommand(['tar', '-C', rootfs, '-cf', path.join(work, 'rootfs.tar'), '.'])).code).toBe(0);
    const imported = await runCommand(['podman', 'import', path.join(work, 'rootfs.tar'), image], { env });
    expect(imported.stderr).not.toMatch(/Error/);
    expect(imported.code).toBe(0);
    t = await createSoftwareTestContext({ env });
  });

  afterEach(async () => {
    await runCommand(['podman', 'rm', '--all', '--force'], { env });
    await runCommand(['podman', 'rmi', '--all', '--force'], { env });
    await t.cleanup();
    await rm(work, { recursive: true, force: true });
  });

  it('runs the container it is given, or reports exactly why podman could not', async () => {
    const data = { items: [{ name: 'sleeper', image, command: '/bin/sleep 3600', docker_args: '--network none' }] };
    await apply(t, data);
    const listed = await runCommand(['podman', 'container', 'ls', '--all', '--format', '{{json .}}'], { env });
    const containers = JSON.parse(listed.stdout) as Array<{ Names: string[]; Labels: Record<string, string>; State: string; Command: string[] }>;
    // podman created it with the bundle's labels and command, whatever happened when starting it
    expect(containers).toHaveLength(1);
    expect(containers[0]!.Names).toEqual(['sleeper']);
    expect(containers[0]!.Labels['qbee-docker-id']).toBe('sleeper');
    expect(containers[0]!.Labels['qbee-docker-args-sha']).toMatch(/^[0-9a-f]{64}$/);
    expect(containers[0]!.Command).toEqual(['/bin/sleep', '3600']);

    const first = t.reports[0]!;
    if (first.severity === 'INFO') {
      // this machine can run containers: it is running, and a second run changes nothing
      expect(first.text).toBe(`Successfully started container for image ${image}.`);
      expect(containers[0]!.State).toBe('running');
      t.clear();
      await apply(t, data);
      expect(t.reports).toEqual([]);
    } else {
      // it cannot (e.g. a sandbox without cgroup or rlimit rights): the error carries podman's own words
      expect(first.severity).toBe('ERR');
      expect(first.text).toBe(`Unable to start container for image ${image}.`);
      expect(first.log).toMatch(/crun|runc|OCI|cgroup/i);
      expect(containers[0]!.State).not.toBe('running');
      t.clear();
      await apply(t, data);
      expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
        ['WARN', `Container exited for image ${image}.`],
        ['ERR', `Unable to restart container for image ${image}.`],
      ]);
    }
  });
});

describe('podman_containers life cycle (fake podman: podman-style listing)', () => {
  let work: string;
  let t: SoftwareTestContext;

  beforeEach(async () => {
    work = await mkdtemp(path.join(tmpdir(), 'podman-fake-'));
  });
  afterEach(async () => {
    await t.cleanup();
    await rm(work, { recursive: true, force: true });
  });

  it('starts, leaves alone, restarts on change and on exit; logs in with podman’s auth file', async () => {
    const root = path.join(work, 'root');
    const fake = await installFakeRuntime(work, 'podman', path.join(root, 'run/containers/0/auth.json'));
    t = await createSoftwareTestContext({ root, pathPrepend: [fake.binDir], env: fake.env });
    const data = {
      registry_auths: [{ server: 'quay.io', username: 'u', password: 'p4ss' }],
      items: [{ name: 'app', image: 'quay.io/x/app:1', command: 'serve --port 80' }],
    };

    await apply(t, data);
    expect(t.reports.map((r) => r.text)).toEqual(['Configured credentials for quay.io.', 'Successfully started container for image quay.io/x/app:1.']);
    t.clear();
    await apply(t, data);
    expect(t.reports).toEqual([]);

    await fake.exit('app');
    await apply(t, data);
    expect(t.reports.map((r) => r.severity)).toEqual(['WARN', 'INFO']);
    t.clear();
    await apply(t, { ...data, items: [{ ...data.items[0]!, command: 'serve --port 81' }] });
    expect(t.reports.map((r) => r.text)).toEqual([
      'Container configuration update detected for image quay.io/x/app:1.',
      'Successfully restarted container for image quay.io/x/app:1.',
    ]);
    expect((await fake.containers()).map((c) => c.args.slice(-3))).toEqual([['serve', '--port', '81']]);
  });

  it('reports clearly when podman is missing, and runs nothing', async () => {
    const empty = path.join(work, 'empty');
    await mkdir(empty);
    t = await createSoftwareTestContext({ path: empty });
    await apply(t, { items: [{ image: 'x' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['ERR', 'Podman container configuration configured, but no podman executable found on system. Nothing applied.'],
    ]);
    expect(t.commands).toEqual([]);
  });
});
