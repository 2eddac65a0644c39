/**
 * One bundle applied in a configuration run, and where the run's reports go (bounded, secrets
 * redacted): the context a bundle works with (commands, files of the broker, reports, a reboot
 * request), its own signal (aborted when the engine stops or the bundle runs past its time bound),
 * and its outcome turned into reports. A bundle that ignores its signal is left behind and marked
 * stuck; the run goes on without it.
 */
import type { AgentReport, ReportSeverity } from '../../shared/protocol.js';
import type { AgentSwitches, Bundle, BundleContext } from './bundle.js';
import { hasExecutable, runCommand } from './command.js';
import type { FileFetcher } from './files.js';
import { redact } from './received.js';

/** Bounds of what one run reports. */
const MAX_REPORTS_PER_BUNDLE = 100;
const MAX_REPORTS_PER_RUN = 1000;
const MAX_REPORT_TEXT = 2000;
const MAX_LOG_BYTES = 16 * 1024;

/** Where a bundle reports; the engine stamps the commit ids and redacts secrets. */
export type Sink = (bundle: string, bundleCommitId: string, severity: ReportSeverity, text: string, log?: string) => void;

/** The sink of one run: reports collected into `reports`, bounded, stamped with the run's commit, secrets redacted. */
export function reportSink(reports: AgentReport[], commitId: string, secrets: readonly string[]): Sink {
  return (bundle, bundleCommitId, sev, text, log) => {
    if (reports.length >= MAX_REPORTS_PER_RUN) return;
    let logText = log ? redact(log, secrets) : '';
    if (Buffer.byteLength(logText) > MAX_LOG_BYTES) logText = '[…]' + Buffer.from(logText).subarray(-MAX_LOG_BYTES).toString('utf8');
    reports.push({
      bundle,
      bundle_commit_id: bundleCommitId,
      commit_id: commitId,
      labels: bundle,
      sev,
      text: redact(text, secrets).slice(0, MAX_REPORT_TEXT),
      ...(logText ? { log: Buffer.from(logText).toString('base64') } : {}),
      ts: Math.floor(Date.now() / 1000),
    });
  };
}

/** What the bundles of one run share. */
export interface RunContext {
  /** the commit being applied */
  commitId: string;
  parameters: Record<string, string>;
  root: string;
  /** the bundles' state directory */
  stateDir: string;
  env: NodeJS.ProcessEnv;
  files: FileFetcher;
  agent?: AgentSwitches;
  /** the engine's: aborted when it stops */
  signal: AbortSignal;
  /** longest one bundle may take */
  timeoutMs: number;
  sink: Sink;
  /** the reboots asked for in this run (the engine reboots once, after it) */
  rebootFor: string[];
  /** bundles stopped for taking too long whose apply has not returned yet */
  stuck: Set<string>;
}

/** Applies `bundle` with its parsed `data`; what it did and its failure become reports through `run.sink`. */
export async function applyBundle(name: string, bundle: Bundle, data: unknown, bundleCommitId: string, run: RunContext): Promise<void> {
  // Each bundle gets its own signal: the engine stopping aborts it, and so does running past
  // the time bound. A bundle that ignores its signal is left behind; the run goes on.
  const bundleRun = new AbortController();
  const stop = () => bundleRun.abort();
  run.signal.addEventListener('abort', stop, { once: true });
  let finished = false;
  let count = 0;
  const ctx: BundleContext = {
    commitId: run.commitId,
    parameters: run.parameters,
    root: run.root,
    stateDir: run.stateDir,
    run: (argv, options) => runCommand(argv, run.env, bundleRun.signal, options),
    has: (executable) => hasExecutable(executable, run.env.PATH),
    fetchFile: (file) => run.files.fetch(file, bundleRun.signal),
    fetchFileInto: (file, into) => run.files.fetchInto(file, into, bundleRun.signal),
    report: (severity, text, log) => {
      if (finished || ++count > MAX_REPORTS_PER_BUNDLE) return;
      run.sink(name, bundleCommitId, severity, text, log);
    },
    signal: bundleRun.signal,
    ...(run.agent ? { agent: run.agent } : {}),
    requestReboot: (why) => {
      if (finished) return;
      count++;
      if (run.rebootFor.length === 0) run.sink(name, bundleCommitId, 'WARN', `Scheduling system reboot: ${why}`);
      run.rebootFor.push(why);
    },
  };
  const { timeoutMs } = run;
  let timer: NodeJS.Timeout | undefined;
  const outOfTime = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  // qbee reports what a bundle did and its errors only: an unchanged bundle is silent, so
  // the interval runs that repair drift do not flood the Logs
  const applying = bundle.apply(data, ctx).then(
    () => 'done' as const,
    (err: unknown) => ({ err }),
  );
  try {
    const outcome = await Promise.race([applying, outOfTime]);
    if (outcome === 'timeout') {
      bundleRun.abort();
      run.sink(
        name,
        bundleCommitId,
        'ERR',
        `${name} did not finish within ${timeoutMs >= 1000 ? `${Math.round(timeoutMs / 1000)} s` : `${timeoutMs} ms`}: stopped, the other bundles go on.`,
      );
      run.stuck.add(name);
      void applying.finally(() => run.stuck.delete(name));
    } else if (outcome !== 'done') {
      run.sink(name, bundleCommitId, 'ERR', `${name} failed: ${outcome.err instanceof Error ? outcome.err.message : String(outcome.err)}`);
    }
  } finally {
    finished = true;
    clearTimeout(timer);
    run.signal.removeEventListener('abort', stop);
  }
}
