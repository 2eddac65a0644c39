import { z } from 'zod';
import { defineRoute, type RouteSpec } from '../http/route.js';

export const REFRESH_COOKIE = 'fleet_refresh';

const tokenResponse = z.object({ token: z.string() });

export const authRoutes: RouteSpec[] = [
  defineRoute({
    method: 'post',
    path: '/login',
    tag: 'session',
    summary: 'Sign in with email and password',
    description:
      'Answers 200 {token}. When a second factor applies: 401 {error:"2fa_required", challenge, providers}; continue with /challenge-get and /challenge-verify. Rate-limited per account and per address (429 with Retry-After). Also sets an HttpOnly refresh cookie for POST /refresh-jwt.',
    access: 'public',
    audit: false,
    body: z.object({ email: z.string().min(3).max(254), password: z.string().min(1).max(1024) }),
    response: tokenResponse,
    handler: async ({ body, services, ip, userAgent, setCookie }) => {
      const userId = await services.auth.checkPassword(body.email, body.password, ip);
      const session = await services.auth.startSession(userId, ip, userAgent);
      setCookie(REFRESH_COOKIE, session.refreshToken, { maxAgeSeconds: session.refreshMaxAgeSeconds, path: '/api/v2' });
      return { token: session.token };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/refresh-jwt',
    tag: 'session',
    summary: 'Renew the access token',
    description: 'With the refresh cookie set at login, or a still-valid bearer token. The new JWT is in the Refreshed-Token header and the body.',
    access: 'public',
    audit: false,
    response: tokenResponse,
    handler: async ({ services, cookie, setHeader, bearer }) => {
      const token = await services.auth.refresh({ refreshToken: cookie(REFRESH_COOKIE), bearer });
      setHeader('Refreshed-Token', token);
      return { token };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/logout',
    tag: 'session',
    summary: 'Sign out: revokes this token and its session',
    access: 'authenticated',
    audit: false,
    handler: async ({ principal, services, setCookie }) => {
      await services.auth.revokeSession(principal.sessionId);
      setCookie(REFRESH_COOKIE, '', { maxAgeSeconds: 0, path: '/api/v2' });
      return undefined;
    },
  }),
];
