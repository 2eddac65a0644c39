/**
 * What qbee's `docker_containers` and `podman_containers` share: containers (`items`: name, image,
 * `docker_args`, `env_file` of the file store, `command`, `pre_condition`, `run_as_user`) kept running with
 * exactly those arguments, and `registry_auths` logged in to. A container carries two labels — its name
 * and a digest of its run arguments — so a changed configuration or an exited container is started anew,
 * and an unchanged running one is left alone. Commands run without a shell: `docker_args` and `command`
 * are split into words as a shell would, but nothing in them is expanded. Passwords go to `login` on its
 * standard input and never into a report.
 */
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { Bundle, BundleContext } from '../bundle.js';
import { readDeviceFile } from '../device-files.js';
import { ParameterError } from '../template.js';
import { outputTail, parseBundleData, preConditionHolds, resolveParameters, resolveTemplateValue, splitWords } from './software-support.js';

export type ContainerRuntime = 'docker' | 'podman';

const container = z.object({
  name: z.string().max(256).optional().default(''),
  image: z.string().min(1).max(1024),
  docker_args: z.string().max(16384).optional().default(''),
  env_file: z.string().max(1024).optional().default(''),
  command: z.string().max(16384).optional().default(''),
  pre_condition: z.string().max(4096).optional().default(''),
  run_as_user: z.string().max(64).optional().default(''),
});

const registryAuth = z.object({
  server: z.string().max(1024).optional().default(''),
  username: z.string().max(1024).optional().default(''),
  password: z.string().max(16384).optional().default(''),
});

const schema = z.looseObject({
  items: z.array(container).max(200).optional().default([]),
  registry_auths: z.array(registryAuth).max(50).optional().default([]),
});

export type ContainersData = z.infer<typeof schema>;
type Container = z.infer<typeof container>;

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const USER = /^[a-z_][a-z0-9_-]*\$?$/;
const DOCKER_HUB = 'https://index.docker.io/v1/';
const ID_LABEL = 'qbee-docker-id';
const ARGS_LABEL = 'qbee-docker-args-sha';

/** Where each runtime keeps registry credentials for root. */
const AUTH_FILE: Record<ContainerRuntime, string> = {
  docker: '/root/.docker/config.json',
  podman: '/run/containers/0/auth.json',
};

interface ContainerStatus {
  id: string;
  state: string;
  labels: Record<string, string>;
}

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

/** Reads `container ls --format {{json .}}`: podman prints one JSON array, docker one object per line. */
export function parseContainerList(output: string): ContainerStatus | null {
  const text = output.trim();
  if (!text) return null;
  let entries: unknown[];
  if (text.startsWith('[')) entries = JSON.parse(text) as unknown[];
  else entries = text.split('\n').map((line) => JSON.parse(line) as unknown);
  const first = entries[0] as Record<string, unknown> | undefined;
  if (!first) return null;
  const rawLabels = first.Labels;
  const labels: Record<string, string> = {};
  if (typeof rawLabels === 'string') {
    for (const pair of rawLabels.split(',')) {
      const at = pair.indexOf('=');
      if (at > 0) labels[pair.slice(0, at)] = pair.slice(at + 1);
    }
  } else if (rawLabels && typeof rawLabels === 'object') {
    for (const [k, v] of Object.entries(rawLabels)) if (typeof v === 'string') labels[k] = v;
  }
  const id = first.ID ?? first.Id;
  return { id: typeof id === 'string' ? id : '', state: typeof first.State === 'string' ? first.State : '', labels };
}

export function createContainersBundle(runtime: ContainerRuntime): Bundle<ContainersData> {
  const bundleName = `${runtime}_containers`;
  const Runtime = runtime === 'docker' ? 'Docker' : 'Podman';

  async function login(ctx: BundleContext, auth: z.infer<typeof registryAuth>): Promise<boolean> {
    const server = resolveParameters(auth.server, ctx.parameters).trim() || DOCKER_HUB;
    const username = resolveParameters(auth.username, ctx.parameters);
    const password = resolveTemplateValue(auth.password, ctx.parameters);
    const wanted = Buffer.from(`${username}:${password}`).toString('base64');
    try {
      const raw = await readDeviceFile(ctx.root, AUTH_FILE[runtime], 1024 * 1024);
      const config = JSON.parse(raw?.toString('utf8') ?? '{}') as { auths?: Record<string, { auth?: string }> };
      if (config.auths?.[server]?.auth === wanted) return true;
    } catch {
      // no such file yet, or unreadable: log in (which writes it)
    }
    if (server.startsWith('-') || username.startsWith('-')) {
      ctx.report('ERR', `Unable to authenticate with ${server} repository: invalid server or username.`);
      return false;
    }
    const result = await ctx.run([runtime, 'login', '--username', username, '--password-stdin', '--', server], { input: password, timeoutMs: 120_000 });
    if (result.code !== 0) {
      ctx.report('ERR', `Unable to authenticate with ${server} repository.`, outputTail(result, [password, wanted]));
      return false;
    }
    ctx.report('INFO', `Configured credentials for ${server}.`, outputTail(result, [password, wanted]));
    return true;
  }

  /** One container; false when it failed (qbee stops the bundle there). */
  async function ensureContainer(ctx: BundleContext, spec: Container, index: number, secrets: string[]): Promise<boolean> {
    const p = (text: string): string => resolveParameters(text, ctx.parameters);
    const name = p(spec.name).trim() || String(index);
    const image = p(spec.image).trim();
    const user = p(spec.run_as_user).trim();
    if (!NAME.test(name)) {
      ctx.report('ERR', `Invalid container name '${name}'.`);
      return false;
    }
    if (!image || image.startsWith('-') || /\s/.test(image)) {
      ctx.report('ERR', `Invalid image '${image}' for container ${name}.`);
      return false;
    }
    if (user && !USER.test(user)) {
      ctx.report('ERR', `Invalid run_as_user '${user}' for container ${name}.`);
      return false;
    }
    if (!(await preConditionHolds(ctx, spec.pre_condition))) return true;

    const argsText = p(spec.docker_args).trim();
    const commandText = p(spec.command).trim();
    let extraArgs: string[];
    let commandWords: string[];
    try {
      // split as written, then resolved word by word: a value stays inside the word it stands in
      // (a value with spaces or quotes never adds an argument such as --privileged)
      extraArgs = splitWords(spec.docker_args.trim()).map(p);
      commandWords = splitWords(spec.command.trim()).map(p);
    } catch (err) {
      if (err instanceof ParameterError) throw err;
      ctx.report('ERR', `Invalid docker_args or command for container ${name}: ${(err as Error).message}`);
      return false;
    }

    let envChanged = false;
    let envFilePath = '';
    const envFile = p(spec.env_file).trim();
    if (envFile) {
      envFilePath = path.join(ctx.stateDir, `${runtime}-containers`, `${sha256(name)}.envfile`);
      let local: string;
      try {
        local = await ctx.fetchFile(envFile);
      } catch (err) {
        ctx.report('ERR', `Unable to download env_file '${envFile}' for container ${name}.`, (err as Error).message);
        return false;
      }
      try {
        const content = await readFile(local);
        const current = await readFile(envFilePath).catch(() => null);
        if (!current || !current.equals(content)) {
          await mkdir(path.dirname(envFilePath), { recursive: true, mode: 0o700 });
          await writeFile(envFilePath, content, { mode: 0o600 });
          envChanged = current !== null;
        }
      } finally {
        await rm(local, { force: true });
      }
    }

    // the arguments string whose digest marks the container, as qbee composes it
    const runArgs = ['--name', name, ...(envFilePath ? ['--env-file', envFilePath] : []), argsText, image, commandText].join(' ');
    const digest = sha256(runArgs);
    const prefix = user ? ['runuser', '-u', user, '--'] : [];
    const cli = (args: string[], input?: string): ReturnType<BundleContext['run']> =>
      ctx.run([...prefix, runtime, ...args], { timeoutMs: 10 * 60_000, ...(input === undefined ? {} : { input }) });

    const listed = await cli(['container', 'ls', '--all', '--no-trunc', '--filter', `label=${ID_LABEL}=${name}`, '--format', '{{json .}}']);
    let status: ContainerStatus | null;
    try {
      if (listed.code !== 0) throw new Error('listing failed');
      status = parseContainerList(listed.stdout);
    } catch {
      ctx.report('ERR', `Cannot check status for image ${image}.`, outputTail(listed, secrets));
      return false;
    }

    const runArgv = [
      'run',
      '--detach',
      '--label',
      `${ID_LABEL}=${name}`,
      '--label',
      `${ARGS_LABEL}=${digest}`,
      '--name',
      name,
      ...(envFilePath ? ['--env-file', envFilePath] : []),
      ...extraArgs,
      image,
      ...commandWords,
    ];

    if (!status || !status.id) {
      const started = await cli(runArgv);
      if (started.code !== 0) {
        ctx.report('ERR', `Unable to start container for image ${image}.`, outputTail(started, secrets));
        return false;
      }
      ctx.report('INFO', `Successfully started container for image ${image}.`, outputTail(started, secrets));
      return true;
    }

    let restart = envChanged;
    if (status.state !== 'running') {
      ctx.report('WARN', `Container exited for image ${image}.`);
      restart = true;
    } else if (status.labels[ARGS_LABEL] !== digest) {
      ctx.report('WARN', `Container configuration update detected for image ${image}.`);
      restart = true;
    }
    if (!restart) return true;

    const killed = await cli(['kill', status.id]);
    const removed = await cli(['rm', '--force', status.id]);
    const started = removed.code === 0 ? await cli(runArgv) : removed;
    if (started.code !== 0) {
      ctx.report(
        'ERR',
        `Unable to restart container for image ${image}.`,
        outputTail({ stdout: killed.stdout + started.stdout, stderr: started.stderr }, secrets),
      );
      return false;
    }
    ctx.report('INFO', `Successfully restarted container for image ${image}.`, outputTail(started, secrets));
    return true;
  }

  return {
    name: bundleName,
    parse: (data) => parseBundleData(bundleName, schema, data),
    async apply(data, ctx) {
      if (data.items.length === 0 && data.registry_auths.length === 0) return;
      if (!(await ctx.has(runtime))) {
        ctx.report('ERR', `${Runtime} container configuration configured, but no ${runtime} executable found on system. Nothing applied.`);
        return;
      }
      const secrets = data.registry_auths.map((a) => resolveTemplateValue(a.password, ctx.parameters)).filter(Boolean);
      for (const auth of data.registry_auths) {
        if (!(await login(ctx, auth))) return;
      }
      for (const [index, spec] of data.items.entries()) {
        if (ctx.signal.aborted) return;
        if (!(await ensureContainer(ctx, spec, index, secrets))) return;
      }
    },
  };
}
