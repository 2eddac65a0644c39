import fs from 'node:fs';
import type { IncomingMessage } from 'node:http';
import path from 'node:path';
import express, { type Express } from 'express';
import { enrolDocs } from './enrol/routes.js';
import { DomainError } from './errors.js';
import { buildOpenApi } from './http/openapi.js';
import { API_PREFIX } from './http/api-paths.js';
import { errorHandler, mountRoutes, type PipelineDeps } from './http/router.js';
import { refuseLoneSurrogates } from './http/unicode.js';
import { WEB_DIST, swaggerDist } from './paths.js';
import { remoteDocs } from './remote/routes.js';
import { mountedRouteTable } from './routes.js';
import type { Services } from './services.js';
import { mapTileOrigins } from './environment.js';

const SWAGGER_DIST = swaggerDist();

const SANDBOX_HTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Fleet API sandbox</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/api/sandbox/assets/swagger-ui.css"></head>
<body><div id="sandbox"></div>
<script src="/api/sandbox/assets/swagger-ui-bundle.js"></script>
<script src="/api/sandbox/init.js"></script></body></html>`;

const SANDBOX_INIT = `window.ui = SwaggerUIBundle({ url: '${API_PREFIX}/openapi.json', dom_id: '#sandbox', persistAuthorization: true, tryItOutEnabled: true, deepLinking: true });`;

/** A Host header that is a host name or an IP address and an optional port, nothing more. */
const HOST_HEADER = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/;

/**
 * The WebSocket origins of this broker, for the console's `connect-src`: the one of PUBLIC_URL
 * (wss for https) and the one the page was asked at (its Host header; wss only when the request
 * came over TLS), so the console's sockets may reach this broker and no other host. A Host header
 * that is not a plain host and port adds nothing ('self' still holds).
 */
export function webSocketOrigins(host: string | undefined, secure: boolean, publicUrl?: string): string[] {
  const origins: string[] = [];
  const url = publicUrl && URL.canParse(publicUrl) ? new URL(publicUrl) : undefined;
  if (url && HOST_HEADER.test(url.host)) origins.push(`${url.protocol === 'https:' ? 'wss' : 'ws'}://${url.host}`);
  if (host && HOST_HEADER.test(host)) {
    const h = host.toLowerCase();
    if (!secure) origins.push(`ws://${h}`);
    origins.push(`wss://${h}`);
  }
  return [...new Set(origins)];
}

/** What the request pipeline itself uses (http/router.ts); each route's handler gets its own domain's deps (routes.ts). */
function pipelineDeps(services: Services): PipelineDeps {
  const { authenticator, access, audit, store, epoch, logger, config } = services;
  return { authenticator, access, audit, store, epoch, logger, config };
}

/** The HTTP application: the API, its OpenAPI document and sandbox, and the web console. */
export function createApp(services: Services): Express {
  const app = express();
  app.disable('x-powered-by');
  // API answers are not cached by validators; hashing every JSON body for an ETag is wasted work.
  app.set('etag', false);
  app.set('trust proxy', services.config.trustProxy);
  app.set('query parser', 'simple');
  app.use((_req, res, next) => {
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.setHeader('Referrer-Policy', 'no-referrer');
    res.setHeader('X-Frame-Options', 'DENY');
    next();
  });

  // qbee's Terraform provider sends its JSON bodies without a Content-Type: a body without one is read as JSON too.
  const jsonOrUntyped = (req: IncomingMessage) => {
    const type = req.headers['content-type'];
    return type === undefined || /^application\/json\s*(;|$)/i.test(type);
  };
  const routes = mountedRouteTable(services);
  // Built at its first request, not at start: the document is about a fifth of a second of CPU (every
  // route's schema converted), which a broker that never serves it (each test broker) need not pay.
  let openapi: Record<string, unknown> | undefined;
  const pipeline = pipelineDeps(services);

  const api = express.Router();
  api.use(express.json({ limit: '1mb', type: jsonOrUntyped }), refuseLoneSurrogates);
  api.get('/openapi.json', (_req, res) => {
    openapi ??= buildOpenApi(
      routes.map((m) => m.route),
      [...enrolDocs, ...remoteDocs],
    );
    res.json(openapi);
  });
  mountRoutes(
    api,
    routes.filter((m) => !m.route.absolute),
    pipeline,
  );
  api.use((req, _res, next) => next(new DomainError('not_found', 'unknown_call', `No call ${req.method} ${API_PREFIX}${req.path}.`)));
  app.use(API_PREFIX, api);
  // The spec also places challenge-verify at the root.
  const rootRoutes = routes.filter((m) => m.route.absolute);
  if (rootRoutes.length) {
    const root = express.Router();
    root.use(express.json({ limit: '1mb', type: jsonOrUntyped }), refuseLoneSurrogates);
    mountRoutes(root, rootRoutes, pipeline);
    app.use(root);
  }

  app.get('/api/sandbox', (_req, res) => {
    res.setHeader('Content-Security-Policy', "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'");
    res.type('html').send(SANDBOX_HTML);
  });
  app.get('/api/sandbox/init.js', (_req, res) => {
    res.type('application/javascript').send(SANDBOX_INIT);
  });
  app.use('/api/sandbox/assets', express.static(SWAGGER_DIST, { index: false }));
  app.use('/api', (req, _res, next) => next(new DomainError('not_found', 'unknown_call', `No call ${req.method} /api${req.path}.`)));

  if (fs.existsSync(path.join(WEB_DIST, 'index.html'))) {
    // Map tiles are the one thing the console may load from elsewhere, and only when MAP_TILE_URL names a source.
    const imgSrc = ["'self'", 'data:', ...mapTileOrigins(services.config.mapTileUrl)].join(' ');
    const publicUrl = services.config.publicUrl;
    app.use((req, res, next) => {
      // The console loads only its own code; WebSockets go back to this broker, and nowhere else.
      const connectSrc = ["'self'", ...webSocketOrigins(req.headers.host, req.secure, publicUrl)].join(' ');
      res.setHeader(
        'Content-Security-Policy',
        `default-src 'self'; connect-src ${connectSrc}; img-src ${imgSrc}; style-src 'self' 'unsafe-inline'; object-src 'none'; base-uri 'self'; frame-ancestors 'none'`,
      );
      next();
    });
    app.use(express.static(WEB_DIST, { index: 'index.html', maxAge: '1h' }));
    // The console routes in the browser: unknown paths load the app.
    app.get(/^\/(?!api\/).*/, (_req, res) => {
      res.sendFile(path.join(WEB_DIST, 'index.html'));
    });
  } else {
    app.get('/', (_req, res) => {
      res.type('text/plain').send('Fleet broker. The web console is not built: run `npm run build`. The API is at /api/v2 and its sandbox at /api/sandbox.\n');
    });
  }
  app.use(errorHandler(services));
  return app;
}
