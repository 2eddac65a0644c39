/**
 * What an agent sends in a `metrics` message, checked field by field: the agent is a hostile peer.
 * A batch that is not an array, or longer than MAX_METRICS_BATCH, is dropped whole; within a batch
 * each sample is kept only when its label is known, its `ts` is a whole Unix second neither in the
 * future (beyond a little clock skew) nor older than the longest retention, its `id` is short
 * printable text (required for filesystems and interfaces), and every value of its label is a
 * finite number within the label's bounds (shared/metrics.ts). Unknown value names are left out.
 */
import { MAX_METRIC_ID_LENGTH, MAX_METRICS_BATCH, METRIC_FIELDS, type MetricLabel, type MetricSample } from '../../shared/metrics.js';

/** Clock skew allowed between a device and the broker. */
export const MAX_FUTURE_SECONDS = 300;

export interface BatchCheck {
  accepted: MetricSample[];
  /** samples left out (bad shape, label, time, id or value) */
  dropped: number;
  /** the whole message was refused (not an array, too many samples) */
  refused?: string;
}

const ID_PATTERN = /^[\x21-\x7e][\x20-\x7e]*$/;
const NEEDS_ID: ReadonlySet<MetricLabel> = new Set(['filesystem', 'network']);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function checkSample(raw: unknown, now: number, oldest: number): MetricSample | undefined {
  if (!isRecord(raw)) return undefined;
  const { label, ts, id, values } = raw;
  if (typeof label !== 'string' || !Object.prototype.hasOwnProperty.call(METRIC_FIELDS, label)) return undefined;
  const fields = METRIC_FIELDS[label as MetricLabel] as Record<string, readonly [number, number]>;
  if (typeof ts !== 'number' || !Number.isInteger(ts) || ts > now + MAX_FUTURE_SECONDS || ts < oldest) return undefined;
  if (id !== undefined && (typeof id !== 'string' || id.length > MAX_METRIC_ID_LENGTH || !ID_PATTERN.test(id))) return undefined;
  if (NEEDS_ID.has(label as MetricLabel) && !id) return undefined;
  if (!isRecord(values)) return undefined;
  const out: Record<string, number> = {};
  for (const [name, [min, max]] of Object.entries(fields)) {
    const v = values[name];
    if (typeof v !== 'number' || !Number.isFinite(v) || v < min || v > max) return undefined;
    out[name] = v;
  }
  return { label: label as MetricLabel, ts, ...(id ? { id } : {}), values: out };
}

/** Checks a `metrics` message's `samples` at `now` (Unix seconds), keeping none older than `oldest`. */
export function checkMetricBatch(samples: unknown, now: number, oldest: number): BatchCheck {
  if (!Array.isArray(samples)) return { accepted: [], dropped: 0, refused: 'samples is not an array' };
  if (samples.length > MAX_METRICS_BATCH) return { accepted: [], dropped: samples.length, refused: `more than ${MAX_METRICS_BATCH} samples` };
  const accepted: MetricSample[] = [];
  for (const raw of samples) {
    const sample = checkSample(raw, now, oldest);
    if (sample) accepted.push(sample);
  }
  return { accepted, dropped: samples.length - accepted.length };
}
