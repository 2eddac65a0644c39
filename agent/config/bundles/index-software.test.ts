import { describe, expect, it } from 'vitest';
import { softwareBundles } from './index-software.js';

describe('softwareBundles', () => {
  it("holds each software bundle once, under qbee's name", () => {
    expect(softwareBundles.map((b) => b.name)).toEqual([
      'package_management',
      'software_management',
      'firewall',
      'metrics_monitor',
      'docker_containers',
      'podman_containers',
      'rauc',
    ]);
  });

  it('each parses an empty configuration, or says what it lacks', () => {
    for (const bundle of softwareBundles) {
      if (bundle.name === 'rauc') expect(() => bundle.parse({})).toThrow(/rauc_bundle/);
      else expect(() => bundle.parse({})).not.toThrow();
    }
  });
});
