/**
 * The configuration bundles of qbee's BundleData (qbee-cli config/, qbee-agent app/configuration/),
 * in the order the broker lists them and the console shows them. The broker checks names against it;
 * the agent applies them in qbee's own order (agent/config/engine.ts).
 */
export const BUNDLES = [
  'settings',
  'parameters',
  'users',
  'sshkeys',
  'password',
  'ntp',
  'firewall',
  'package_management',
  'file_distribution',
  'software_management',
  'connectivity_watchdog',
  'proc_watch',
  'metrics_monitor',
  'docker_containers',
  'podman_containers',
  'rauc',
] as const;
export type BundleName = (typeof BUNDLES)[number];
