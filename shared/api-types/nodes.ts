/**
 * Nodes of the group tree as the devices routes answer one: zod schemas the broker declares as
 * `response` and their types for the console, which imports types only (`import type`), so no zod
 * reaches the browser bundle.
 */
import { z } from 'zod';
import type { DeviceAttributes } from './devices.js';

/** A device's attributes as answered: the legacy fields (always present, "" when unset) and the custom pairs. */
export const deviceAttributes = z.object({
  device_name: z.string(),
  description: z.string(),
  latitude: z.string(),
  longitude: z.string(),
  country: z.string(),
  city: z.string(),
  zip: z.string(),
  address: z.string(),
  custom: z.record(z.string(), z.string()),
}) satisfies z.ZodType<DeviceAttributes>;

/** GET /node/{node_id} (and a node's answer after a change): the node with its path and effective tags. */
/** A device's last contact, as every node record gives it. */
export const lastReported = z
  .number()
  .int()
  .nullable()
  .optional()
  .describe('Devices only: last contact, Unix seconds, null if never; for a device connected to this broker, its last heartbeat');

export const nodeView = z.object({
  id: z.string(),
  node_id: z.string(),
  title: z.string(),
  type: z.enum(['group', 'device']),
  parent_id: z.string().nullable(),
  tags: z.array(z.string()),
  effective_tags: z.array(z.string()).describe('Own tags and those of every group above'),
  ancestors: z.array(z.string()).describe('Node ids from root down to this node'),
  path: z.array(z.object({ node_id: z.string(), title: z.string() })),
  status: z.enum(['online', 'offline']).optional(),
  last_reported: lastReported,
  attributes: deviceAttributes.optional(),
  can_manage: z
    .boolean()
    .optional()
    .describe('GET /node/{node_id}, for a holder of device:manage only: whether they may manage this node (rename, move, tag; a device: its attributes)'),
});
export type NodeView = z.infer<typeof nodeView>;
