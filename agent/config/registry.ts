/** The bundles this agent applies, by qbee's name. */
import type { Bundle } from './bundle.js';
import { connectivityWatchdogBundle } from './bundles/connectivity-watchdog.js';
import { fileDistributionBundle } from './bundles/file-distribution.js';
import { ntpBundle } from './bundles/ntp.js';
import { parametersBundle } from './bundles/parameters.js';
import { passwordBundle } from './bundles/password.js';
import { procWatchBundle } from './bundles/proc-watch.js';
import { settingsBundle } from './bundles/settings.js';
import { sshKeysBundle } from './bundles/sshkeys.js';
import { usersBundle } from './bundles/users.js';
import { softwareBundles } from './bundles/index-software.js';

/** Every bundle this agent applies: the system bundles (settings, parameters, files, users and keys, processes, time, watchdog) and the software ones. */
export const AGENT_BUNDLES: readonly Bundle[] = [
  settingsBundle,
  parametersBundle,
  fileDistributionBundle,
  usersBundle,
  sshKeysBundle,
  passwordBundle,
  procWatchBundle,
  ntpBundle,
  connectivityWatchdogBundle,
  ...softwareBundles,
];
