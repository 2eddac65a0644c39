import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { ApiError } from '../http/errors.js';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import { CLI_TARBALL, cliArtifacts } from './cli.js';
import type { Logger } from 'pino';
import type { BrokerKey } from '../agents/broker-key.js';
import type { Config } from '../environment.js';

const TAG = 'agent-install';
/** The token install.sh carries where the broker writes its own URL. */
export const BROKER_URL_TOKEN = '__FLEET_BROKER_URL__';
/** Where it writes the SHA-256 of each package it serves ("<sha256>  <file>" lines), which install.sh checks downloads against. */
export const PACKAGE_SHA256S_TOKEN = '__FLEET_PACKAGE_SHA256S__';
/** Where it writes its public signing key, which install.sh pins for the agent. */
export const BROKER_KEY_TOKEN = '__FLEET_BROKER_KEY__';
/** Where install-cli.sh gets the name and the SHA-256 of the CLI tarball it downloads. */
export const CLI_TARBALL_TOKEN = '__FLEET_CLI_TARBALL__';
export const CLI_SHA256_TOKEN = '__FLEET_CLI_SHA256__';
/** What GET /install/{artifact} serves: the packages `npm run build:agent` makes, nothing else. */
const ARTIFACT = /^fleet-agent[A-Za-z0-9._+~-]{0,120}\.(deb|tar\.gz)$/;
/** ... and the CLI tarball of `npm run build:cli`. */
const ANY_ARTIFACT = new RegExp(`${ARTIFACT.source}|${CLI_TARBALL.source}`);
/** A host (name, IPv4 or [IPv6]) and port as a Host header carries them. */
const HOST = /^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?$/;

const cliNotBuilt = () =>
  new ApiError(
    404,
    'not_found',
    'The CLI is not on this broker: build it with `npm run build:cli` (or point CLI_ARTIFACTS_DIR at a directory holding the build).',
  );

const notBuilt = (what: string) =>
  new ApiError(
    404,
    'not_found',
    `${what} is not on this broker: build the agent with \`npm run build:agent\` (or point AGENT_ARTIFACTS_DIR at a directory holding the build).`,
  );

/** A regular file of the artifacts directory, or undefined. */
function artifactFile(dir: string, name: string): { file: string; size: number } | undefined {
  const file = path.join(dir, name);
  try {
    const stat = fs.statSync(file);
    return stat.isFile() ? { file, size: stat.size } : undefined;
  } catch {
    return undefined;
  }
}

/** Digests of package files, by path, kept while their size and modification time stay the same. */
const digestCache = new Map<string, { size: number; mtimeMs: number; sha256: string }>();

async function sha256Of(file: string): Promise<string> {
  const hash = crypto.createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The SHA-256 of a file, hashed again only when its size or modification time changed. */
async function cachedSha256(file: string, stat: fs.Stats): Promise<string> {
  let cached = digestCache.get(file);
  if (!cached || cached.size !== stat.size || cached.mtimeMs !== stat.mtimeMs) {
    cached = { size: stat.size, mtimeMs: stat.mtimeMs, sha256: await sha256Of(file) };
    digestCache.set(file, cached);
  }
  return cached.sha256;
}

/** "<sha256>  <file>" of every package in the artifacts directory (sha256sum's format), sorted by name. */
async function packageDigests(dir: string): Promise<string> {
  let names: string[];
  try {
    names = (await fs.promises.readdir(dir)).filter((n) => ARTIFACT.test(n)).sort();
  } catch {
    return '';
  }
  const lines: string[] = [];
  for (const name of names) {
    const file = path.join(dir, name);
    let stat: fs.Stats;
    try {
      stat = await fs.promises.stat(file);
    } catch {
      continue;
    }
    if (!stat.isFile()) continue;
    lines.push(`${await cachedSha256(file, stat)}  ${name}`);
  }
  return lines.join('\n');
}

function sendError(res: Response, err: ApiError) {
  res.status(err.status).json(err.toJSON());
}

/** The answer when neither PUBLIC_URL nor the Host header gives a URL to write into a script. */
const noBrokerUrl = () =>
  new ApiError(400, 'invalid_request', 'The Host header is not a host name (or PUBLIC_URL has characters a URL does not): set PUBLIC_URL on the broker.');

/** The broker URL devices are told to use: PUBLIC_URL, else the origin this request came to. */
function brokerUrl(req: Request, publicUrl: string | undefined): string | undefined {
  // Only URL characters that need no quoting in the script (it also checks them itself).
  if (publicUrl) return /^https?:\/\/[A-Za-z0-9.:[\]/_~%@+=,-]+$/.test(publicUrl) ? publicUrl.replace(/\/+$/, '') : undefined;
  const host = req.get('host') ?? '';
  return HOST.test(host) ? `${req.protocol}://${host}` : undefined;
}

/** What the install routes use: where the artifacts are, the broker's key and address for the install script. */
export interface InstallRouteDeps {
  brokerKey: Pick<BrokerKey, 'publicKeyPem'>;
  config: Pick<Config, 'agentArtifactsDir' | 'cliArtifactsDir' | 'publicUrl'>;
  logger: Logger;
}

export const installRoutes: RouteSpec<InstallRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/install.sh',
    absolute: true,
    tag: TAG,
    summary: 'The agent installer script',
    description:
      'A POSIX sh script (text/x-shellscript) that installs the edge agent on a Linux device and enrols it: ' +
      "`curl -fsSL https://<broker>/install.sh -o fleet-install.sh && printf '%s\\n' '<key>' | sudo sh fleet-install.sh --bootstrap-key-stdin` " +
      '(or `--bootstrap-key-file <file>`; never the key on the command line). It checks for Node.js >= 20, picks the .deb ' +
      '(dpkg with the nodejs package) or the tarball for the machine architecture, downloads it from GET /install/{artifact} and checks it against ' +
      'the SHA-256 this broker wrote into the script (a package altered on the way is refused, nothing installed), writes ' +
      "/etc/fleet-agent/config.json (this broker's URL: PUBLIC_URL, else the origin of the request), the key in /etc/fleet-agent/bootstrap-key " +
      "(0600, root only) and this broker's public signing key in /var/lib/fleet-agent/broker-key.pem (the key the agent trusts), and starts the " +
      'fleet-agent systemd service. It refuses an http:// broker other than this machine unless given --insecure-http. No authentication: it holds no secret. ' +
      '404 when the agent is not built on this broker (`npm run build:agent`; directory AGENT_ARTIFACTS_DIR).',
    access: 'public',
    audit: false,
    transaction: false,
    handler: async ({ deps }) => {
      const dir = deps.config.agentArtifactsDir;
      return Reply.raw(async (res) => {
        const found = artifactFile(dir, 'install.sh');
        if (!found) return sendError(res, notBuilt('The agent installer'));
        const url = brokerUrl(res.req, deps.config.publicUrl);
        if (!url) return sendError(res, noBrokerUrl());
        const script = (await fs.promises.readFile(found.file, 'utf8'))
          .replaceAll(BROKER_URL_TOKEN, url)
          .replaceAll(PACKAGE_SHA256S_TOKEN, await packageDigests(dir))
          .replaceAll(BROKER_KEY_TOKEN, deps.brokerKey.publicKeyPem.trim());
        res.status(200);
        res.setHeader('Content-Type', 'text/x-shellscript; charset=utf-8');
        res.setHeader('Cache-Control', 'no-store');
        res.send(script);
      });
    },
  }),
  defineRoute({
    method: 'get',
    path: '/install-cli.sh',
    absolute: true,
    tag: TAG,
    summary: 'The CLI installer script',
    description:
      'A POSIX sh script (text/x-shellscript) that installs the `fleet` command-line client for the user running it: ' +
      '`curl -fsSL https://<broker>/install-cli.sh | sh` (into ~/.local, /usr/local as root; `sh -s -- --prefix DIR` or PREFIX=DIR to choose). ' +
      'It checks for Node.js >= 20, downloads the CLI tarball from GET /install/{artifact}, checks it against the SHA-256 this broker wrote ' +
      'into the script (an altered tarball is refused, nothing installed) and writes <prefix>/bin/fleet and <prefix>/lib/fleet-cli/. ' +
      'No authentication: it holds no secret. 404 when the CLI is not built on this broker (`npm run build:cli`; directory CLI_ARTIFACTS_DIR; ' +
      'a broker running from source builds it on demand).',
    access: 'public',
    audit: false,
    transaction: false,
    handler: async ({ deps }) => {
      return Reply.raw(async (res) => {
        const found = await cliArtifacts(deps.config.cliArtifactsDir, deps.logger);
        if (!found) return sendError(res, cliNotBuilt());
        const url = brokerUrl(res.req, deps.config.publicUrl);
        if (!url) return sendError(res, noBrokerUrl());
        let script: string;
        let sha256: string;
        try {
          sha256 = await cachedSha256(found.tarball, await fs.promises.stat(found.tarball));
          script = await fs.promises.readFile(found.installer, 'utf8');
        } catch {
          return sendError(res, cliNotBuilt());
        }
        res.status(200);
        res.setHeader('Content-Type', 'text/x-shellscript; charset=utf-8');
        res.setHeader('Cache-Control', 'no-store');
        res.send(script.replaceAll(BROKER_URL_TOKEN, url).replaceAll(CLI_TARBALL_TOKEN, found.tarballName).replaceAll(CLI_SHA256_TOKEN, sha256));
      });
    },
  }),
  defineRoute({
    method: 'get',
    path: '/install/{artifact}',
    absolute: true,
    tag: TAG,
    summary: 'Download an agent package',
    description:
      'The packages `npm run build:agent` made, as install.sh asks for them: `fleet-agent_<version>_<arch>.deb` (Debian package) or ' +
      '`fleet-agent-<version>-linux-<arch>.tar.gz` (the same tree for other Linux systems), `<arch>` being amd64, arm64 or armhf; ' +
      'and the CLI tarball `fleet-cli-<version>.tar.gz` of `npm run build:cli` (as install-cli.sh asks for it). ' +
      'Streams application/vnd.debian.binary-package or application/gzip with Content-Length. No authentication. ' +
      '404 when that package is not built on this broker (other architectures need a build on such a machine, copied into AGENT_ARTIFACTS_DIR); ' +
      '400 for a name that is not an agent package.',
    access: 'public',
    audit: false,
    transaction: false,
    params: z.object({
      artifact: z
        .string()
        .regex(ANY_ARTIFACT, 'a package name: fleet-agent_<version>_<arch>.deb, fleet-agent-<version>-linux-<arch>.tar.gz or fleet-cli-<version>.tar.gz')
        .describe('package file name'),
    }),
    handler: async ({ params, deps }) => {
      const cli = CLI_TARBALL.test(params.artifact);
      if (cli) await cliArtifacts(deps.config.cliArtifactsDir, deps.logger);
      const found = artifactFile(cli ? deps.config.cliArtifactsDir : deps.config.agentArtifactsDir, params.artifact);
      if (!found) throw cli ? cliNotBuilt() : notBuilt(`The agent package ${params.artifact}`);
      return Reply.raw(async (res) => {
        const stream = fs.createReadStream(found.file);
        res.status(200);
        res.setHeader('Content-Type', params.artifact.endsWith('.deb') ? 'application/vnd.debian.binary-package' : 'application/gzip');
        res.setHeader('Content-Length', String(found.size));
        res.setHeader('Content-Disposition', `attachment; filename="${params.artifact}"`);
        res.setHeader('Cache-Control', 'no-cache');
        try {
          await pipeline(stream, res);
        } catch {
          // The client went away, or the file was replaced by a new build mid-stream.
          stream.destroy();
        }
      });
    },
  }),
];
