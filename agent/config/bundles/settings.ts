/**
 * qbee's `settings`: the agent's own settings. `agentinterval` (minutes) sets how often the engine
 * re-applies the configuration; `reports: false` stops sending reports; `metrics` turns metrics
 * sampling on or off (absent is off, as in qbee's agent; without an enabled settings bundle the
 * engine turns it back on). The others (remoteconsole, software_inventory, process_inventory) are
 * recorded; this agent has no separate switch for them.
 */
import type { Bundle } from '../bundle.js';
import { readState, writeState } from '../helpers.js';
import { flag, object } from '../parse.js';

export interface SettingsData {
  metrics: boolean;
  reports: boolean;
  remoteconsole: boolean;
  software_inventory: boolean;
  process_inventory: boolean;
  agentinterval: number;
}

export const settingsBundle: Bundle<SettingsData> = {
  name: 'settings',
  parse(data) {
    const o = object(data, 'settings');
    const interval = o.agentinterval ?? 5;
    if (typeof interval !== 'number' || !Number.isInteger(interval) || interval < 1 || interval > 1440)
      throw new Error('settings.agentinterval must be a whole number of minutes from 1 to 1440');
    return {
      metrics: flag(o, 'metrics', 'settings'),
      reports: o.reports === undefined ? true : flag(o, 'reports', 'settings'),
      remoteconsole: flag(o, 'remoteconsole', 'settings'),
      software_inventory: flag(o, 'software_inventory', 'settings'),
      process_inventory: flag(o, 'process_inventory', 'settings'),
      agentinterval: interval,
    };
  },
  async apply(data, ctx) {
    // Every run, changed or not: a restarted agent starts with metrics on and must learn they are off.
    ctx.agent?.setMetricsEnabled(data.metrics);
    const before = await readState<SettingsData>(ctx, 'settings');
    if (before && JSON.stringify(before) === JSON.stringify(data)) return;
    await writeState(ctx, 'settings', data);
    const changed = (Object.keys(data) as (keyof SettingsData)[]).filter((k) => !before || before[k] !== data[k]);
    ctx.report(
      'INFO',
      `Agent settings applied: ${changed.map((k) => `${k} ${typeof data[k] === 'boolean' ? (data[k] ? 'on' : 'off') : data[k]}`).join(', ')}${changed.includes('agentinterval') ? ' (minutes)' : ''}.`,
    );
  },
};
