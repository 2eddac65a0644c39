/**
 * The software bundles, for the configuration engine to register next to the system bundles: packages,
 * software with its configuration, firewall, metrics thresholds, containers and RAUC updates.
 */
import type { Bundle } from '../bundle.js';
import { dockerContainersBundle } from './docker-containers.js';
import { firewallBundle } from './firewall.js';
import { metricsMonitorBundle } from './metrics-monitor.js';
import { packageManagementBundle } from './package-management.js';
import { podmanContainersBundle } from './podman-containers.js';
import { raucBundle } from './rauc.js';
import { softwareManagementBundle } from './software-management.js';

export const softwareBundles: readonly Bundle[] = [
  packageManagementBundle,
  softwareManagementBundle,
  firewallBundle,
  metricsMonitorBundle,
  dockerContainersBundle,
  podmanContainersBundle,
  raucBundle,
];
