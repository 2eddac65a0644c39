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

/** System bundles: the agent's settings, parameters, files, users and keys, processes, time, watchdog. */
export const SYSTEM_BUNDLES: readonly Bundle[] = [
  settingsBundle,
  parametersBundle,
  fileDistributionBundle,
  usersBundle,
  sshKeysBundle,
  passwordBundle,
  procWatchBundle,
  ntpBundle,
  connectivityWatchdogBundle,
];
