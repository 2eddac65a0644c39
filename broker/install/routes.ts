import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { ApiError } from '../http/errors.js';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';

const TAG = 'agent-install';
/** The token install.sh carries where the broker writes its own URL. */
export const BROKER_URL_TOKEN = '__FLEET_BROKER_URL__';
/** What GET /install/{artifact} serves: the packages `npm run build:agent` makes, nothing else. */
const ARTIFACT = /^fleet-agent[A-Za-z0-9._+~-]{0,120}\.(deb|tar\.gz)$/;
/** A host (name, IPv4 or [IPv6]) and port as a Host header carries them. */
const HOST = /^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?$/;

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

function sendError(res: Response, err: ApiError) {
  res.status(err.status).json(err.toJSON());
}

/** The broker URL devices are told to use: PUBLIC_URL, else the origin this request came to. */
function brokerUrl(req: Request, publicUrl: string | undefined): string | undefined {
  // Only URL characters that need no quoting in the script (it also checks them itself).
  if (publicUrl) return /^https?:\/\/[A-Za-z0-9.:[\]/_~%@+=,-]+$/.test(publicUrl) ? publicUrl.replace(/\/+$/, '') : undefined;
  const host = req.get('host') ?? '';
  return HOST.test(host) ? `${req.protocol}://${host}` : undefined;
}

export const installRoutes: RouteSpec[] = [
  defineRoute({
    method: 'get',
    path: '/install.sh',
    absolute: true,
    tag: TAG,
    summary: 'The agent installer script',
    description:
      'A POSIX sh script (text/x-shellscript) that installs the edge agent on a Linux device and enrols it: ' +
      '`curl -fsSL https://<broker>/install.sh | sudo sh -s -- --bootstrap-key <key>`. It checks for Node.js >= 20, picks the .deb ' +
      '(dpkg with the nodejs package) or the tarball for the machine architecture, downloads it from GET /install/{artifact}, writes ' +
      "/etc/fleet-agent/config.json (this broker's URL: PUBLIC_URL, else the origin of the request) and the key in /etc/fleet-agent/bootstrap-key " +
      '(0600, root only), and starts the fleet-agent systemd service. No authentication: it holds no secret. ' +
      '404 when the agent is not built on this broker (`npm run build:agent`; directory AGENT_ARTIFACTS_DIR).',
    access: 'public',
    audit: false,
    transaction: false,
    handler: async ({ services }) => {
      const dir = services.config.agentArtifactsDir;
      return Reply.raw(async (res) => {
        const found = artifactFile(dir, 'install.sh');
        if (!found) return sendError(res, notBuilt('The agent installer'));
        const url = brokerUrl(res.req, services.config.publicUrl);
        if (!url)
          return sendError(
            res,
            new ApiError(
              400,
              'invalid_request',
              'The Host header is not a host name (or PUBLIC_URL has characters a URL does not): set PUBLIC_URL on the broker.',
            ),
          );
        const script = (await fs.promises.readFile(found.file, 'utf8')).replaceAll(BROKER_URL_TOKEN, url);
        res.status(200);
        res.setHeader('Content-Type', 'text/x-shellscript; charset=utf-8');
        res.setHeader('Cache-Control', 'no-store');
        res.send(script);
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
      '`fleet-agent-<version>-linux-<arch>.tar.gz` (the same tree for other Linux systems), `<arch>` being amd64, arm64 or armhf. ' +
      'Streams application/vnd.debian.binary-package or application/gzip with Content-Length. No authentication. ' +
      '404 when that package is not built on this broker (other architectures need a build on such a machine, copied into AGENT_ARTIFACTS_DIR); ' +
      '400 for a name that is not an agent package.',
    access: 'public',
    audit: false,
    transaction: false,
    params: z.object({
      artifact: z
        .string()
        .regex(ARTIFACT, 'an agent package name: fleet-agent_<version>_<arch>.deb or fleet-agent-<version>-linux-<arch>.tar.gz')
        .describe('package file name'),
    }),
    handler: async ({ params, services }) => {
      const found = artifactFile(services.config.agentArtifactsDir, params.artifact);
      if (!found) throw notBuilt(`The agent package ${params.artifact}`);
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
