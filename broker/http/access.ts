import type { Permission } from '../../shared/permissions.js';

/**
 * Who may call a route: anyone (`public`), any signed-in user (`authenticated`), or holders of a
 * permission. For permissions that accept resources, `device` names the device the call concerns
 * and the check is made against it. A list: any one of these permissions (a stream that tells of
 * several kinds of things, each filtered by its own permission in the handler).
 */
export type Access = 'public' | 'authenticated' | Permission | readonly Permission[];

/** How `access` reads in the OpenAPI document and the role editor: `a or b` for a list. */
export function accessLabel(access: Access): string {
  return typeof access === 'string' ? access : access.join(' or ');
}
