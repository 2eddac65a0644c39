/**
 * The bundles this agent applies, by qbee's name, each loaded when a configuration first names it
 * (dynamic import): an agent that is never configured, or only with a few bundles, does not load
 * the others nor zod, which their schemas are built with. A name not listed here is a bundle this
 * agent does not support (the engine reports it).
 */
import type { Bundle } from './bundle.js';

type Loader = () => Promise<Bundle>;

/** Every bundle: the system bundles (settings, parameters, files, users and keys, processes, time, watchdog), then the software ones. */
const LOADERS: Readonly<Record<string, Loader>> = {
  settings: async () => (await import('./bundles/settings.js')).settingsBundle,
  parameters: async () => (await import('./bundles/parameters.js')).parametersBundle,
  file_distribution: async () => (await import('./bundles/file-distribution.js')).fileDistributionBundle,
  users: async () => (await import('./bundles/users.js')).usersBundle,
  sshkeys: async () => (await import('./bundles/sshkeys.js')).sshKeysBundle,
  password: async () => (await import('./bundles/password.js')).passwordBundle,
  proc_watch: async () => (await import('./bundles/proc-watch.js')).procWatchBundle,
  ntp: async () => (await import('./bundles/ntp.js')).ntpBundle,
  connectivity_watchdog: async () => (await import('./bundles/connectivity-watchdog.js')).connectivityWatchdogBundle,
  package_management: async () => (await import('./bundles/package-management.js')).packageManagementBundle,
  software_management: async () => (await import('./bundles/software-management.js')).softwareManagementBundle,
  firewall: async () => (await import('./bundles/firewall.js')).firewallBundle,
  metrics_monitor: async () => (await import('./bundles/metrics-monitor.js')).metricsMonitorBundle,
  docker_containers: async () => (await import('./bundles/docker-containers.js')).dockerContainersBundle,
  podman_containers: async () => (await import('./bundles/podman-containers.js')).podmanContainersBundle,
  rauc: async () => (await import('./bundles/rauc.js')).raucBundle,
};

/** The names of the bundles this agent applies. */
export const AGENT_BUNDLE_NAMES: readonly string[] = Object.keys(LOADERS);

/** The bundle of that name, loaded on first use (a module is loaded once); undefined for a bundle this agent does not apply. */
export function loadAgentBundle(name: string): Promise<Bundle | undefined> {
  return Object.hasOwn(LOADERS, name) ? LOADERS[name]() : Promise.resolve(undefined);
}
