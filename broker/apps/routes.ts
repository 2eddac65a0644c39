import { z } from 'zod';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { deviceId, port } from '../remote/schemas.js';
import { APP_LABEL_ID_CHARS } from './origin.js';
import { APP_DESTINATION } from './proxy.js';
import { APP_SESSION_SECONDS, type AppsService } from './service.js';

/** What the device web UI routes use. */
export interface AppsRouteDeps {
  apps: Pick<AppsService, 'issue'>;
}

export const appsRoutes: RouteSpec<AppsRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/remote/apps/{device_id}',
    tag: 'remote',
    summary: "Open a device's web UI (its local HTTP service) in the browser",
    description: `Answers the URL of a one-time link to the device's HTTP service on \`port\` (its ${APP_DESTINATION}), served on an origin of its own: \`<first ${APP_LABEL_ID_CHARS} hex digits of the device id>-<port>.<APPS_HOST>\`, never the broker's. Decided as a tunnel (\`remote-access:connect\` with \`tunnel(proto=tcp;port=…)\`; a grant naming \`dst\` must name ${APP_DESTINATION}); a refusal is 403 and audited as \`remote.tunnel.denied\`. The link carries a single-use ticket (60 s, bound to the caller's sign-in session, like POST /remote/ticket); that origin trades it for an app session — a host-only, HttpOnly, SameSite=Lax cookie valid ${APP_SESSION_SECONDS / 60} minutes for that device and port only — decided and audited again as \`remote.tunnel.start\` with \`via: "web_app"\` (its end carries the bytes of every request). Requests there, WebSockets included, go over the tunnel channel to the device with the Host header rewritten and the broker's cookies taken out; the session is re-authorized every 2 s while used. 409 \`apps_host_not_configured\` without APPS_HOST. Body: \`{"port":n,"path":"/"}\`.`,
    access: 'remote-access:connect',
    device: ({ params }) => params.device_id,
    audit: false,
    auditDenied: { event: 'remote.tunnel', action: 'tunnel' },
    transaction: false,
    params: z.object({ device_id: deviceId }),
    body: z.object({
      port,
      path: z.string().max(2048).default('/').describe('Where to open the web UI (a path on its origin, default `/`).'),
    }),
    response: z.object({
      url: z.string().describe('Open it in a new browser tab (a top-level navigation): it sets the app session cookie and redirects to `path`.'),
      expires_in: z.number().describe('seconds the link stays valid'),
    }),
    handler: async ({ params, body, principal, bearer, deps, host, ip }) =>
      deps.apps.issue(principal, bearer as string, params.device_id, body.port, body.path, host, ip),
  }),
];
