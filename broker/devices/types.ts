/**
 * The shapes the devices domain answers with and takes: a device record, a node's view, a group as
 * qbee lists it, the tree changes, and the live sources of connection state plugged into the service.
 */
import type { DeviceAttributes } from '../../shared/api-types.js';

export interface DeviceRecord {
  device_id: string;
  state: string;
  hostname: string;
  public_key: string;
  bootstrap_key: string | null;
  attributes: DeviceAttributes;
  created_at: string;
  approved_at: string | null;
  last_seen: string | null;
  last_ip: string | null;
  agent_version: string | null;
  /** Where the device sits in the tree; null while pending. */
  node: { parent_id: string | null; title: string; tags: string[] } | null;
}

export interface NodeView {
  id: string;
  node_id: string;
  title: string;
  type: 'group' | 'device';
  parent_id: string | null;
  tags: string[];
  /** Own tags and those of every group above. */
  effective_tags: string[];
  /** Node ids from root down to this node. */
  ancestors: string[];
  path: { node_id: string; title: string }[];
  status?: 'online' | 'offline';
  last_reported?: number | null;
  attributes?: DeviceAttributes;
  /** GET /node/{node_id}, for a holder of device:manage: whether they may manage this node. */
  can_manage?: boolean;
}

/** A group as qbee's GET /groups lists it. */
export interface GroupListItem {
  node_id: string;
  /** "" for root */
  parent_id: string;
  tags: string[];
  type: 'group';
  title: string;
  /** Node ids from root down to the group itself. */
  ancestors: string[];
  /** Unix seconds of the last change; 0: not tracked here. */
  updated: number;
}

export type TreeChange =
  | { action: 'create'; data: { node_id?: string; title: string; parent_id: string; tags?: string[] } }
  | { action: 'rename'; data: { node_id: string; title: string } }
  | { action: 'move'; data: { node_id: string; parent_id: string } }
  | { action: 'delete'; data: { node_id: string } }
  /** qbee's action for setting a node's own tags (as PATCH /grouptree/{node_id}). */
  | { action: 'update'; data: { node_id: string; tags: string[] } };

export interface TreeChangeResult {
  applied: number;
  results: { action: TreeChange['action']; node_id: string }[];
}

/** Says whether a device is connected right now; undefined when the source does not know. */
export type OnlineSource = (deviceId: string) => boolean | undefined;

/** When a connected device was last heard from (ISO 8601); undefined when it is not connected here. */
export type HeardSource = (deviceId: string) => string | undefined;
