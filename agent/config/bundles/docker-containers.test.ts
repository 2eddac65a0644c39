/**
 * docker_containers up to the docker commands it runs: the test machine has no docker daemon, so a fake
 * `docker` (test-support/fake-container-runtime.ts) stands in and records every command.
 */
import { mkdtemp, rm, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, type SoftwareTestContext } from '../test-support/test-context.js';
import { dockerContainersBundle } from './docker-containers.js';
import { installFakeRuntime, type FakeRuntime } from '../test-support/fake-container-runtime.js';

let work: string;
let fake: FakeRuntime;
let t: SoftwareTestContext;

async function apply(data: unknown): Promise<void> {
  await dockerContainersBundle.apply(dockerContainersBundle.parse(data), t.ctx);
}

const web = { name: 'web', image: 'nginx:1.27', docker_args: `-p 8080:80 --hostname "my host" -e GREETING='hello world'`, command: 'nginx -g "daemon off;"' };

beforeEach(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'docker-bundle-'));
  const root = path.join(work, 'root');
  fake = await installFakeRuntime(work, 'docker', path.join(root, 'root/.docker/config.json'));
  t = await createSoftwareTestContext({ root, pathPrepend: [fake.binDir], env: fake.env });
});

afterEach(async () => {
  await t.cleanup();
  await rm(work, { recursive: true, force: true });
});

describe('docker_containers (fake docker: no daemon here)', () => {
  it('starts the container with its labels and arguments split as a shell would, then leaves it alone', async () => {
    await apply({ items: [web] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['INFO', 'Successfully started container for image nginx:1.27.']]);
    const run = (await fake.log()).find((argv) => argv[0] === 'run')!;
    expect(run.slice(0, 4)).toEqual(['run', '--detach', '--label', 'qbee-docker-id=web']);
    expect(run[5]).toMatch(/^qbee-docker-args-sha=[0-9a-f]{64}$/);
    expect(run.slice(6)).toEqual([
      '--name',
      'web',
      '-p',
      '8080:80',
      '--hostname',
      'my host',
      '-e',
      'GREETING=hello world',
      'nginx:1.27',
      'nginx',
      '-g',
      'daemon off;',
    ]);

    t.clear();
    await apply({ items: [web] });
    expect(t.reports).toEqual([]);
    expect(t.commands.map((argv) => argv.slice(0, 3))).toEqual([['docker', 'container', 'ls']]);
  });

  it('restarts a container whose arguments changed, and one that exited', async () => {
    await apply({ items: [web] });
    t.clear();
    await apply({ items: [{ ...web, docker_args: '-p 9090:80' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['WARN', 'Container configuration update detected for image nginx:1.27.'],
      ['INFO', 'Successfully restarted container for image nginx:1.27.'],
    ]);
    expect((await fake.containers()).map((c) => [c.name, c.state, c.args.includes('9090:80')])).toEqual([['web', 'running', true]]);

    await fake.exit('web');
    t.clear();
    await apply({ items: [{ ...web, docker_args: '-p 9090:80' }] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([
      ['WARN', 'Container exited for image nginx:1.27.'],
      ['INFO', 'Successfully restarted container for image nginx:1.27.'],
    ]);
    expect((await fake.containers()).map((c) => c.state)).toEqual(['running']);
  });

  it('names an unnamed container by its index, resolves $(parameters), and restarts when the env_file changes', async () => {
    t.ctx.parameters = { tag: '2.0' };
    t.files.set('/env/app.env', 'A=1\n');
    const app = { image: 'registry.example.com/app:$(tag)', env_file: '/env/app.env' };
    await apply({ items: [app] });
    const [c] = await fake.containers();
    expect(c!.name).toBe('0');
    expect(c!.args).toContain('registry.example.com/app:2.0');
    const envPath = c!.args[c!.args.indexOf('--env-file') + 1]!;
    expect(await readFile(envPath, 'utf8')).toBe('A=1\n');

    t.clear();
    await apply({ items: [app] });
    expect(t.reports).toEqual([]);

    t.files.set('/env/app.env', 'A=2\n');
    await apply({ items: [app] });
    expect(t.reports.map((r) => r.text)).toEqual(['Successfully restarted container for image registry.example.com/app:2.0.']);
    expect(await readFile(envPath, 'utf8')).toBe('A=2\n');
  });

  it('keeps a value inside the word it stands in: a value with spaces and quotes adds no argument', async () => {
    t.ctx.parameters = { location: 'berlin --privileged -v /:/host' };
    await apply({ items: [{ name: 'loc', image: 'nginx:1.27', docker_args: '-e LOCATION=$(location)', command: 'echo "at $(location)"' }] });
    const run = (await fake.log()).find((argv) => argv[0] === 'run')!;
    expect(run.slice(6)).toEqual(['--name', 'loc', '-e', 'LOCATION=berlin --privileged -v /:/host', 'nginx:1.27', 'echo', 'at berlin --privileged -v /:/host']);
    expect(run).not.toContain('--privileged');
  });

  it('logs in to registries with the password on stdin, never in a command or report, once', async () => {
    const auth = { server: 'registry.example.com', username: 'robot', password: 'S3cret-pw' };
    await apply({ registry_auths: [auth], items: [web] });
    expect(t.reports.map((r) => r.text)).toEqual(['Configured credentials for registry.example.com.', 'Successfully started container for image nginx:1.27.']);
    expect(JSON.stringify(t.commands)).not.toContain('S3cret-pw');
    expect(JSON.stringify(t.reports)).not.toContain('S3cret-pw');
    t.clear();
    await apply({ registry_auths: [auth], items: [web] });
    expect(t.reports).toEqual([]);
  });

  it('reports a refused login with the output, the password redacted, and starts nothing', async () => {
    await apply({ registry_auths: [{ server: 'registry.example.com', username: 'robot', password: 'wrong' }], items: [web] });
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', 'Unable to authenticate with registry.example.com repository.']]);
    expect(t.reports[0]!.log).toContain('unauthorized: robot:********');
    expect(await fake.containers()).toEqual([]);
  });

  it('reports a container that cannot start, with the runtime output', async () => {
    const failing = await createSoftwareTestContext({
      root: t.root,
      pathPrepend: [fake.binDir],
      env: { ...fake.env, FAKE_RUN_FAIL: 'pull access denied for nginx' },
    });
    try {
      await dockerContainersBundle.apply(dockerContainersBundle.parse({ items: [web] }), failing.ctx);
      expect(failing.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', 'Unable to start container for image nginx:1.27.']]);
      expect(failing.reports[0]!.log).toContain('pull access denied for nginx');
    } finally {
      await failing.cleanup();
    }
  });

  it('skips a container whose pre_condition fails', async () => {
    await apply({ items: [{ ...web, pre_condition: 'false' }] });
    expect(t.reports).toEqual([]);
    expect(await fake.log()).toEqual([]);
  });

  it('refuses names, images and arguments that would be misread, running nothing', async () => {
    await apply({ items: [{ ...web, name: '--privileged' }] });
    await apply({ items: [{ ...web, image: '--privileged' }] });
    // the arguments may hold secrets from parameters: the report does not repeat them
    t.ctx.parameters = { token: 'tok-123' };
    await apply({ items: [{ ...web, docker_args: `-e "TOKEN=$(token)` }] });
    expect(t.reports.map((r) => r.severity)).toEqual(['ERR', 'ERR', 'ERR']);
    expect(t.reports.map((r) => r.text)).toEqual([
      "Invalid container name '--privileged'.",
      "Invalid image '--privileged' for container web.",
      'Invalid docker_args or command for container web: unbalanced " quote',
    ]);
    expect(JSON.stringify(t.reports)).not.toContain('tok-123');
    expect(await fake.log()).toEqual([]);
  });
});

describe('docker_containers errors', () => {
  it('reports clearly when docker is missing, and runs nothing', async () => {
    const empty = await mkdtemp(path.join(tmpdir(), 'no-tools-'));
    const bare = await createSoftwareTestContext({ path: empty });
    try {
      await dockerContainersBundle.apply(dockerContainersBundle.parse({ items: [web] }), bare.ctx);
      expect(bare.reports.map((r) => [r.severity, r.text])).toEqual([
        ['ERR', 'Docker container configuration configured, but no docker executable found on system. Nothing applied.'],
      ]);
      expect(bare.commands).toEqual([]);
    } finally {
      await bare.cleanup();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('rejects malformed data with the field that is wrong', () => {
    expect(() => dockerContainersBundle.parse({ items: [{ name: 'x' }] })).toThrow(/items\.0\.image/);
    expect(() => dockerContainersBundle.parse({ registry_auths: [{ password: 5 }] })).toThrow(/registry_auths\.0\.password/);
  });
});
