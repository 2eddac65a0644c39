import { z, type ZodType } from 'zod';
import { acceptsResources } from '../../shared/permissions.js';
import { API_PREFIX } from './api-paths.js';
import { accessLabel, type RouteSpec } from './route.js';

const errorSchema = {
  type: 'object',
  required: ['code', 'error', 'message'],
  properties: {
    code: { type: 'integer', description: 'HTTP status' },
    error: { type: 'string', description: 'snake_case reason' },
    message: { type: 'string', description: 'what went wrong, for a person' },
  },
  additionalProperties: true,
};

function jsonSchema(schema: ZodType, io: 'input' | 'output'): Record<string, unknown> {
  try {
    const s = z.toJSONSchema(schema, { io, unrepresentable: 'any' }) as Record<string, unknown>;
    delete s.$schema;
    return s;
  } catch {
    return {};
  }
}

function parameters(schema: ZodType | undefined, where: 'path' | 'query') {
  if (!schema) return [];
  const s = jsonSchema(schema, 'input') as { properties?: Record<string, unknown>; required?: string[] };
  return Object.entries(s.properties ?? {}).map(([name, p]) => ({
    name,
    in: where,
    required: where === 'path' || (s.required ?? []).includes(name),
    schema: p,
    ...(typeof (p as { description?: string }).description === 'string' ? { description: (p as { description: string }).description } : {}),
  }));
}

export interface ExtraOperation {
  method: string;
  path: string;
  operation: Record<string, unknown>;
}

/** The OpenAPI 3.1 document, generated from the same schemas that validate requests. */
export function buildOpenApi(routes: RouteSpec[], extra: ExtraOperation[] = [], version = '0.1.0'): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const full = route.absolute ? route.path : `${API_PREFIX}${route.path}`;
    const access =
      route.access === 'public'
        ? 'No token needed.'
        : route.access === 'authenticated'
          ? 'Any signed-in user.'
          : Array.isArray(route.access)
            ? `Needs ${route.access.map((p) => `\`${p}\``).join(' or ')}.`
            : `Needs permission \`${route.access}\`${acceptsResources(route.access as string) && route.device ? ' on the device concerned (resource filters apply)' : ''}.`;
    const op: Record<string, unknown> = {
      operationId: `${route.method}${full.replace(/[{}]/g, '').replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ''))}`,
      summary: route.summary,
      description: [route.description, access, route.notImplemented ? 'Not built yet: answers 501.' : ''].filter(Boolean).join('\n\n'),
      tags: [route.tag],
      'x-permission': accessLabel(route.access),
      parameters: [...parameters(route.params, 'path'), ...parameters(route.query, 'query')],
      responses: {
        [String(route.status ?? 200)]: {
          description: 'Success',
          ...(route.stream
            ? { content: { 'text/event-stream': { schema: { type: 'string' } } } }
            : route.response
              ? { content: { 'application/json': { schema: jsonSchema(route.response, 'output') } } }
              : {}),
        },
        '400': { description: 'Invalid input', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
        ...(route.access !== 'public'
          ? {
              '401': {
                description: 'No, invalid, expired or revoked token',
                content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
              },
              '403': { description: 'Not allowed', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
            }
          : {}),
        ...(route.notImplemented
          ? { '501': { description: 'Not built yet', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } }
          : {}),
      },
      ...(route.access === 'public' ? { security: [] } : {}),
    };
    if (route.body && route.method !== 'get') {
      if (route.upload) {
        const fields = jsonSchema(route.body, 'input') as { properties?: Record<string, unknown>; required?: string[] };
        op.requestBody = {
          required: true,
          content: {
            'multipart/form-data': {
              schema: {
                type: 'object',
                properties: { ...(fields.properties ?? {}), [route.upload.field]: { type: 'string', format: 'binary' } },
                required: [...(fields.required ?? []), route.upload.field],
              },
            },
          },
        };
      } else {
        const schema = jsonSchema(route.body, 'input');
        const forms = route.form ? { 'multipart/form-data': { schema }, 'application/x-www-form-urlencoded': { schema } } : {};
        op.requestBody = { required: !route.form, content: { 'application/json': { schema }, ...forms } };
      }
    }
    (paths[full] ??= {})[route.method] = op;
  }
  for (const e of extra) (paths[e.path] ??= {})[e.method] = e.operation;
  return {
    openapi: '3.1.0',
    info: {
      title: 'Fleet broker API',
      version,
      description:
        'Device fleet management and remote access. Sign in with POST /api/v2/login, then send `Authorization: Bearer <token>`. Errors are `{code, error, message}`.',
    },
    servers: [{ url: '/' }],
    components: {
      securitySchemes: { authorization: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'The token from POST /api/v2/login.' } },
      schemas: { Error: errorSchema },
    },
    security: [{ authorization: [] }],
    paths,
  };
}
