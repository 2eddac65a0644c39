/**
 * The digest of an inventory report that decides whether it is sent again: what changes by itself
 * (uptime, free memory and disk, small CPU drift) is left out. The connection needs it from start;
 * the collectors load when the first inventory is taken.
 */
import crypto from 'node:crypto';
import type { RunningProcess } from '../shared/inventory.js';
import { asRecord } from './inventory-read.js';

/**
 * The digest that decides whether a type is sent again. Processes are compared by who runs what and
 * their whole-percent CPU and memory, so a tenth of a percent of drift is not a change.
 */
export function inventoryDigest(type: string, data: unknown): string {
  let view = data;
  if (type === 'processes') {
    const items = (data as { items?: RunningProcess[] }).items ?? [];
    view = items.map((p) => [p.pid, p.user, p.cmdline, Math.round(p.cpu), Math.round(p.mem)]);
  } else if (type === 'system') {
    view = stableSystemView(data as Record<string, unknown>);
  }
  return crypto.createHash('sha256').update(JSON.stringify(view)).digest('hex');
}

/** The system report without what changes by itself (uptime, free memory and disk, collection time). */
function stableSystemView(r: Record<string, unknown>): Record<string, unknown> {
  const { uptime: _u, agent_uptime: _a, collected_at: _c, memory, disks, ...rest } = r;
  return {
    ...rest,
    memory_total: asRecord(memory).total,
    disks: Array.isArray(disks) ? disks.map((d) => ({ ...asRecord(d), free: undefined })) : disks,
  };
}
