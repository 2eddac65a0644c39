/**
 * The bounds of the typed inventory (shared/inventory.ts), in a file of their own without zod: the
 * agent trims what it collects to them and loads no schema library for it.
 */

/** Bounds of one payload: the agent trims to them, the broker refuses what exceeds them. */
export const INVENTORY_LIMITS = {
  packages: 20_000,
  containers: 1_000,
  images: 1_000,
  users: 5_000,
  groups: 5_000,
  ports: 5_000,
  processes: 100,
  /** names, versions, ids, users */
  short: 256,
  /** commands, GECOS, paths, port lists */
  long: 2_048,
} as const;
