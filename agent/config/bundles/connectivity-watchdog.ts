/**
 * qbee's `connectivity_watchdog`: reboot the device after `threshold` failed connection attempts
 * to the broker in a row. The engine counts the failures; applying records the threshold.
 */
import type { Bundle } from '../bundle.js';
import { readState, writeState } from '../helpers.js';
import { object } from '../parse.js';

export interface ConnectivityWatchdogData {
  threshold: number;
}

export const connectivityWatchdogBundle: Bundle<ConnectivityWatchdogData> = {
  name: 'connectivity_watchdog',
  parse(data) {
    const o = object(data, 'connectivity_watchdog');
    const raw = o.threshold;
    const n = typeof raw === 'string' && /^\d{1,4}$/.test(raw) ? Number(raw) : raw;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 1000)
      throw new Error('connectivity_watchdog.threshold must be a whole number from 0 to 1000 (qbee sends it as a string)');
    return { threshold: n };
  },
  async apply(data, ctx) {
    const before = await readState<ConnectivityWatchdogData>(ctx, 'connectivity_watchdog');
    if (before?.threshold === data.threshold) return;
    await writeState(ctx, 'connectivity_watchdog', data);
    ctx.report(
      'INFO',
      data.threshold > 0
        ? `Connectivity watchdog set: the device reboots after ${data.threshold} failed connection attempts in a row.`
        : 'Connectivity watchdog disabled (threshold 0).',
    );
  },
};
