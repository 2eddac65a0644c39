/**
 * What a configuration bundle is on the agent: a name (qbee's), the data it gets (qbee's field names),
 * and one `apply` that brings the device to that state and says what it did through reports. Applying
 * twice changes nothing the second time and reports no change.
 */
import type { FileHandle } from 'node:fs/promises';
import type { ReportSeverity } from '../../shared/protocol.js';

export interface CommandResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * The agent's own switches that qbee's `settings` bundle turns. The agent hands them to the engine;
 * absent where no agent runs around the engine (tests of other bundles).
 */
export interface AgentSwitches {
  /** qbee's `settings.metrics`: sample and send metrics, or not (off empties the queue) */
  setMetricsEnabled(enabled: boolean): void;
  /** `settings.auto_update`, `auto_update_window`, `auto_update_downgrade`: when the agent updates itself */
  setUpdatePolicy?(policy: UpdatePolicy): void;
}

/** When the agent installs a newer agent the broker publishes (agent/update). */
export interface UpdatePolicy {
  enabled: boolean;
  /** minutes after local midnight [from, to); absent: any time. from > to wraps past midnight. */
  window?: { from: number; to: number };
  /** install a lower version than the running one when the broker publishes it */
  downgrade: boolean;
}

/** Without an enabled settings bundle: updates on, any time, no downgrades. */
export const DEFAULT_UPDATE_POLICY: UpdatePolicy = { enabled: true, downgrade: false };

/** What a bundle gets to do its work; tests hand it temp roots and their own command runner. */
export interface BundleContext {
  /** the commit being applied */
  commitId: string;
  /** the device's attributes and the parameters bundle's values: what templates render with */
  parameters: Record<string, string>;
  /** filesystem root the bundle writes under: `/` on a device, a temp directory in tests */
  root: string;
  /** the agent's own state directory (bundle state such as what it last wrote) */
  stateDir: string;
  /** runs a command without a shell (argv), bounded in time and output */
  run(argv: string[], options?: { input?: string; timeoutMs?: number; env?: Record<string, string> }): Promise<CommandResult>;
  /** true when an executable of that name is on the PATH */
  has(executable: string): Promise<boolean>;
  /** fetches a file of the broker's file store to a local temporary path (deleted by the caller) */
  fetchFile(path: string): Promise<string>;
  /**
   * fetches a file of the broker's file store straight into an open file (from its position),
   * checked against the broker's size and sha256 as it arrives; absent: fetchFile then a copy
   */
  fetchFileInto?(path: string, into: FileHandle): Promise<{ size: number; sha256: string }>;
  /** records a report of this bundle; `log` is the operation's output (secrets are redacted by the engine) */
  report(severity: ReportSeverity, text: string, log?: string): void;
  signal: AbortSignal;
  /** asks for a reboot of the device once the run is over (qbee's RebootAfterRun); absent: the bundle reports that one is needed */
  requestReboot?(why: string): void;
  /** the agent's switches (only the settings bundle turns them) */
  agent?: AgentSwitches;
}

export interface Bundle<T = unknown> {
  /** qbee's bundle name, e.g. `file_distribution` */
  readonly name: string;
  /** checks and narrows the data the broker sent; throws an Error saying what is wrong */
  parse(data: unknown): T;
  apply(data: T, ctx: BundleContext): Promise<void>;
}
