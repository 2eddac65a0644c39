import { describe, expect, it } from 'vitest';
import { AGENT_BUNDLE_NAMES, loadAgentBundle } from './registry.js';

describe('the bundle registry', () => {
  it("loads each bundle under qbee's name, once per name", async () => {
    expect(AGENT_BUNDLE_NAMES).toEqual([
      'settings',
      'parameters',
      'file_distribution',
      'users',
      'sshkeys',
      'password',
      'proc_watch',
      'ntp',
      'connectivity_watchdog',
      'package_management',
      'software_management',
      'firewall',
      'metrics_monitor',
      'docker_containers',
      'podman_containers',
      'rauc',
    ]);
    for (const name of AGENT_BUNDLE_NAMES) {
      const bundle = await loadAgentBundle(name);
      expect(bundle?.name).toBe(name);
      // one module, one bundle object: a second load hands back the same one
      expect(await loadAgentBundle(name)).toBe(bundle);
    }
  });

  it('has no bundle for a name it does not apply, nor for the names every object has', async () => {
    for (const name of ['rauc_v9', 'docker_compose', '__proto__', 'constructor', 'toString', 'hasOwnProperty', ''])
      expect(await loadAgentBundle(name)).toBeUndefined();
  });

  it('each software bundle parses an empty configuration, or says what it lacks', async () => {
    for (const name of ['package_management', 'software_management', 'firewall', 'metrics_monitor', 'docker_containers', 'podman_containers', 'rauc']) {
      const bundle = (await loadAgentBundle(name))!;
      if (name === 'rauc') expect(() => bundle.parse({})).toThrow(/rauc_bundle/);
      else expect(() => bundle.parse({})).not.toThrow();
    }
  });
});
