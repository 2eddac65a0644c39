/** settings, parameters, connectivity_watchdog and ntp (against fake chronyc/systemctl: the test machine's clock service is never touched). */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { applyBundle, emptyPath, fakeTools, testContext } from '../test-support/system-test-context.js';
import { connectivityWatchdogBundle } from './connectivity-watchdog.js';
import { CHRONY_SOURCES, ntpBundle, TIMESYNCD_DROPIN } from './ntp.js';
import { parametersBundle } from './parameters.js';
import { settingsBundle } from './settings.js';

let t: ReturnType<typeof testContext>;
afterEach(() => t?.cleanup());

describe('settings', () => {
  it('records the settings and reports what changed, once', async () => {
    t = testContext();
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, reports: true, metrics: false }, t.ctx);
    expect(t.take()[0].text).toContain('agentinterval 10 (minutes)');
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, reports: true, metrics: false }, t.ctx);
    expect(t.take()).toEqual([]);
    await applyBundle(settingsBundle, { agentinterval: 15 }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'INFO', text: 'Agent settings applied: agentinterval 15 (minutes).' }]);
  });

  it("turns the agent's metrics on and off on every run, also when nothing changed (qbee's settings.metrics)", async () => {
    t = testContext();
    const turned: boolean[] = [];
    const ctx = { ...t.ctx, agent: { setMetricsEnabled: (on: boolean) => void turned.push(on) } };
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, metrics: false }, ctx);
    // unchanged: no report, but a restarted agent (metrics on) must hear "off" again
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, metrics: false }, ctx);
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, metrics: true }, ctx);
    // absent is off, as in qbee's agent
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10 }, ctx);
    expect(turned).toEqual([false, false, true, false]);
    expect(t.take().map((r) => r.text)).toEqual([
      'Agent settings applied: metrics off, reports on, remoteconsole off, software_inventory off, process_inventory off, agentinterval 10 (minutes), auto_update on, auto_update_window any time, auto_update_downgrade off.',
      'Agent settings applied: metrics on.',
      'Agent settings applied: metrics off.',
    ]);
  });

  it('hands the agent its update policy: auto_update, its window, downgrades', async () => {
    t = testContext();
    const policies: unknown[] = [];
    const ctx = { ...t.ctx, agent: { setMetricsEnabled: () => {}, setUpdatePolicy: (p: unknown) => void policies.push(p) } };
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10 }, ctx);
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, auto_update_window: '23:30-02:00', auto_update_downgrade: true }, ctx);
    await applyBundle(settingsBundle, { enabled: true, agentinterval: 10, auto_update: false }, ctx);
    expect(policies).toEqual([
      { enabled: true, downgrade: false },
      { enabled: true, downgrade: true, window: { from: 23 * 60 + 30, to: 120 } },
      { enabled: false, downgrade: false },
    ]);
    expect(t.take().map((r) => r.text)[1]).toBe('Agent settings applied: auto_update_window 23:30-02:00, auto_update_downgrade on.');
    expect(() => settingsBundle.parse({ auto_update_window: '25:00-02:00' })).toThrow('settings.auto_update_window must be "HH:MM-HH:MM"');
    expect(() => settingsBundle.parse({ auto_update_window: '02:00-02:00' })).toThrow('same minute');
    expect(() => settingsBundle.parse({ auto_update_window: 5 })).toThrow('settings.auto_update_window must be a string');
    expect(() => settingsBundle.parse({ auto_update: 'yes' })).toThrow('settings.auto_update must be true or false');
  });

  it('refuses a bad interval', () => {
    expect(() => settingsBundle.parse({ agentinterval: 0 })).toThrow('settings.agentinterval must be a whole number of minutes from 1 to 1440');
    expect(() => settingsBundle.parse({ agentinterval: '5' })).toThrow('agentinterval');
    expect(() => settingsBundle.parse({ reports: 'yes' })).toThrow('settings.reports must be true or false');
  });
});

describe('parameters', () => {
  it('reports a changed set once, never the values', async () => {
    t = testContext();
    const data = { parameters: [{ key: 'site', value: 'oslo' }], secrets: [{ key: 'token', value: 's3cr3t' }] };
    await applyBundle(parametersBundle, data, t.ctx);
    const reports = t.take();
    expect(reports).toEqual([{ sev: 'INFO', text: 'Parameters updated: 1 parameter(s), 1 secret(s).' }]);
    await applyBundle(parametersBundle, data, t.ctx);
    expect(t.take()).toEqual([]);
    await applyBundle(parametersBundle, { ...data, secrets: [{ key: 'token', value: 'rotated' }] }, t.ctx);
    expect(t.take()).toHaveLength(1);
  });

  it('refuses entries without a key', () => {
    expect(() => parametersBundle.parse({ parameters: [{ value: 'x' }] })).toThrow('parameters.parameters[0].key is required');
    expect(() => parametersBundle.parse({ secrets: {} })).toThrow('parameters.secrets must be a list');
  });
});

describe('connectivity_watchdog', () => {
  it('records the threshold (qbee sends a string) and reports a change once', async () => {
    t = testContext();
    await applyBundle(connectivityWatchdogBundle, { threshold: '3' }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'INFO', text: 'Connectivity watchdog set: the device reboots after 3 failed connection attempts in a row.' }]);
    await applyBundle(connectivityWatchdogBundle, { threshold: '3' }, t.ctx);
    expect(t.take()).toEqual([]);
    expect(() => connectivityWatchdogBundle.parse({ threshold: 'three' })).toThrow('connectivity_watchdog.threshold must be a whole number');
  });
});

describe('ntp', () => {
  const servers = { servers: ['0.pool.ntp.org', '192.0.2.10'] };

  it('writes a chrony source file and reloads sources; a second run changes nothing', async () => {
    t = testContext();
    const calls = path.join(t.dir, 'calls');
    t.setPath(fakeTools(t.dir, { chronyc: `echo "chronyc $*" >> "${calls}"` }));
    await applyBundle(ntpBundle, servers, t.ctx);
    expect(fs.readFileSync(t.at(CHRONY_SOURCES), 'utf8')).toBe('server 0.pool.ntp.org iburst\nserver 192.0.2.10 iburst\n');
    expect(fs.readFileSync(calls, 'utf8')).toBe('chronyc reload sources\n');
    expect(t.take()).toEqual([{ sev: 'INFO', text: 'NTP servers set for chrony: 0.pool.ntp.org, 192.0.2.10' }]);
    await applyBundle(ntpBundle, servers, t.ctx);
    expect(t.take()).toEqual([]);
    expect(fs.readFileSync(calls, 'utf8')).toBe('chronyc reload sources\n');
    await applyBundle(ntpBundle, { servers: [] }, t.ctx);
    expect(fs.existsSync(t.at(CHRONY_SOURCES))).toBe(false);
  });

  it('with systemd-timesyncd, writes a drop-in and restarts the service', async () => {
    t = testContext();
    const calls = path.join(t.dir, 'calls');
    t.setPath(fakeTools(t.dir, { systemctl: `echo "systemctl $*" >> "${calls}"`, timedatectl: 'exit 0' }));
    await applyBundle(ntpBundle, servers, t.ctx);
    expect(fs.readFileSync(t.at(TIMESYNCD_DROPIN), 'utf8')).toContain('[Time]\nNTP=0.pool.ntp.org 192.0.2.10\n');
    expect(fs.readFileSync(calls, 'utf8')).toBe('systemctl restart systemd-timesyncd\n');
    await applyBundle(ntpBundle, servers, t.ctx);
    expect(t.take()).toHaveLength(1);
  });

  it('reports a missing NTP client, a failing reload and bad server names', async () => {
    t = testContext();
    t.setPath(emptyPath(t.dir));
    await applyBundle(ntpBundle, servers, t.ctx);
    expect(t.take()).toEqual([{ sev: 'ERR', text: 'No NTP client is installed on this device (chrony or systemd-timesyncd): ntp not applied.' }]);
    expect(fs.existsSync(t.at(CHRONY_SOURCES))).toBe(false);
    t.setPath(fakeTools(t.dir, { chronyc: 'echo "506 Cannot talk to daemon" >&2; exit 1' }));
    await applyBundle(ntpBundle, servers, t.ctx);
    expect(t.take()).toEqual([{ sev: 'ERR', text: 'chronyc reload sources failed: exit code 1', log: '506 Cannot talk to daemon\n' }]);
    expect(() => ntpBundle.parse({ servers: ['pool.ntp.org; reboot'] })).toThrow('ntp.servers[0] must be a host name or address');
  });
});
