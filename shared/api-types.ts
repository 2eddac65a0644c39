/**
 * The API's records as they travel (CONTRACT.md), written once for the broker, the CLI and the
 * web console, in one of two ways: a plain interface the broker's zod response schema is checked
 * against with `satisfies z.ZodType<…>` (a schema that drifts from its record does not compile), or
 * the zod response schema itself, which the broker's route declares as `response` and whose
 * `z.infer` type the others read. This file re-exports types only (`export type *`), so an importer
 * takes nothing at runtime from here: the browser bundle gets no zod.
 *
 * The records live by domain under api-types/; this file gathers them so importers name one module.
 */
export type * from './api-types/account.js';
export type * from './api-types/config.js';
export type * from './api-types/console-settings.js';
export type * from './api-types/devices.js';
export type * from './api-types/files.js';
export type * from './api-types/inventory.js';
export type * from './api-types/nodes.js';
export type * from './api-types/remote.js';
export type * from './api-types/security.js';
export type * from './api-types/ssh-keys.js';
export type * from './api-types/totp.js';
