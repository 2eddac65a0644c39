/**
 * qbee's `settings`: the agent's own settings. `agentinterval` (minutes) sets how often the engine
 * re-applies the configuration; `reports: false` stops sending reports; `metrics` turns metrics
 * sampling on or off (absent is off, as in qbee's agent; without an enabled settings bundle the
 * engine turns it back on). The others (remoteconsole, software_inventory, process_inventory) are
 * recorded; this agent has no separate switch for them.
 *
 * Agent updates (fields of this agent; qbee's settings bundle has none): `auto_update` (default on)
 * lets the agent install the newer agent its broker publishes; `auto_update_window` ("HH:MM-HH:MM",
 * device local time, may wrap past midnight; empty: any time) says when; `auto_update_downgrade`
 * (default off) lets it install a lower version the broker publishes.
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
  auto_update: boolean;
  auto_update_window: string;
  auto_update_downgrade: boolean;
}

const WINDOW = /^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$/;

/** "HH:MM-HH:MM" as minutes after midnight; undefined for "" (any time). */
export function parseWindow(text: string): { from: number; to: number } | undefined {
  if (text === '') return undefined;
  const m = WINDOW.exec(text);
  if (!m) throw new Error('settings.auto_update_window must be "HH:MM-HH:MM" (24-hour, device local time) or empty');
  const from = Number(m[1]) * 60 + Number(m[2]);
  const to = Number(m[3]) * 60 + Number(m[4]);
  if (from === to) throw new Error('settings.auto_update_window must not start and end at the same minute');
  return { from, to };
}

export const settingsBundle: Bundle<SettingsData> = {
  name: 'settings',
  parse(data) {
    const o = object(data, 'settings');
    const interval = o.agentinterval ?? 5;
    if (typeof interval !== 'number' || !Number.isInteger(interval) || interval < 1 || interval > 1440)
      throw new Error('settings.agentinterval must be a whole number of minutes from 1 to 1440');
    const window = o.auto_update_window ?? '';
    if (typeof window !== 'string') throw new Error('settings.auto_update_window must be a string');
    parseWindow(window);
    return {
      metrics: flag(o, 'metrics', 'settings'),
      reports: o.reports === undefined ? true : flag(o, 'reports', 'settings'),
      remoteconsole: flag(o, 'remoteconsole', 'settings'),
      software_inventory: flag(o, 'software_inventory', 'settings'),
      process_inventory: flag(o, 'process_inventory', 'settings'),
      agentinterval: interval,
      auto_update: o.auto_update === undefined || o.auto_update === null ? true : flag(o, 'auto_update', 'settings'),
      auto_update_window: window,
      auto_update_downgrade: flag(o, 'auto_update_downgrade', 'settings'),
    };
  },
  async apply(data, ctx) {
    // Every run, changed or not: a restarted agent starts with metrics on and must learn they are off.
    ctx.agent?.setMetricsEnabled(data.metrics);
    const window = parseWindow(data.auto_update_window);
    ctx.agent?.setUpdatePolicy?.({ enabled: data.auto_update, downgrade: data.auto_update_downgrade, ...(window ? { window } : {}) });
    const before = await readState<SettingsData>(ctx, 'settings');
    if (before && JSON.stringify(before) === JSON.stringify(data)) return;
    await writeState(ctx, 'settings', data);
    const changed = (Object.keys(data) as (keyof SettingsData)[]).filter((k) => !before || before[k] !== data[k]);
    const shown = (k: keyof SettingsData) => {
      const v = data[k];
      if (typeof v === 'boolean') return `${k} ${v ? 'on' : 'off'}`;
      if (k === 'agentinterval') return `${k} ${v} (minutes)`;
      return `${k} ${v === '' ? 'any time' : v}`;
    };
    ctx.report('INFO', `Agent settings applied: ${changed.map(shown).join(', ')}.`);
  },
};
