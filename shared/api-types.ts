/**
 * The API's records as they travel (CONTRACT.md), written once for the broker, the CLI and the
 * web console. Plain interfaces and no runtime code, so the browser bundle takes nothing from
 * these files (and no zod). The broker's zod response schemas are checked against these types with
 * `satisfies z.ZodType<…>`, so a schema that drifts from its record does not compile.
 *
 * The records live by domain under api-types/; this file gathers them so importers name one module.
 */
export type * from './api-types/account.js';
export type * from './api-types/devices.js';
export type * from './api-types/remote.js';
export type * from './api-types/security.js';
