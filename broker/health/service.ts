/**
 * Whether this broker should be sent traffic: what a load balancer's health check asks. Not ready
 * while shutting down (so the balancer stops sending before the connections close), when its
 * database does not answer, or, in a cluster, when it has not joined yet or does not hear the others.
 */
import { sql } from 'kysely';
import type { Db } from '../db/database.js';
import type { ClusterService } from '../cluster/service.js';

/** A database answering slower than this counts as lost. */
export const HEALTH_DB_TIMEOUT_MS = 2000;

export type HealthCheck = 'ok' | 'failed';

export interface HealthReport {
  ok: boolean;
  broker_id: string | null;
  /** Why it is not ready, for the operator: `draining`, `database`, `cluster`. */
  reasons: string[];
  checks: { database: HealthCheck; cluster: HealthCheck | 'off' };
}

export class HealthService {
  private draining = false;
  private probe?: Promise<HealthCheck>;

  constructor(private readonly deps: { db: Db; cluster?: ClusterService; timeoutMs?: number }) {}

  /** From now on the broker answers not ready (it is shutting down). */
  drain(): void {
    this.draining = true;
  }

  get isDraining(): boolean {
    return this.draining;
  }

  async check(): Promise<HealthReport> {
    const reasons: string[] = [];
    if (this.draining) reasons.push('draining');
    const database = await this.database();
    if (database === 'failed') reasons.push('database');
    const cluster = this.deps.cluster;
    const clusterCheck: HealthCheck | 'off' = !cluster ? 'off' : cluster.ready ? 'ok' : 'failed';
    if (clusterCheck === 'failed') reasons.push('cluster');
    return { ok: reasons.length === 0, broker_id: cluster?.brokerId ?? null, reasons, checks: { database, cluster: clusterCheck } };
  }

  /**
   * `select 1`, within the timeout. One probe at a time: checks made while one is pending wait for
   * it, so a database that hangs does not pile up queries (one per check) behind it.
   */
  private async database(): Promise<HealthCheck> {
    this.probe ??= sql`select 1 as one`
      .execute(this.deps.db)
      .then((): HealthCheck => 'ok')
      .catch((): HealthCheck => 'failed')
      .finally(() => {
        this.probe = undefined;
      });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'failed'>((resolve) => {
      timer = setTimeout(() => resolve('failed'), this.deps.timeoutMs ?? HEALTH_DB_TIMEOUT_MS);
    });
    try {
      return await Promise.race([this.probe, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
