import type { Migration } from 'kysely';
import type { Dialect } from '../dialect.js';
import { migration as m0001 } from './0001-initial.js';
import { migration as m0002 } from './0002-totp-last-step.js';
import { migration as m0003 } from './0003-revoked-devices.js';
import { migration as m0004 } from './0004-audit-chain.js';
import { migration as m0005 } from './0005-role-recording.js';
import { migration as m0006 } from './0006-bootstrap-key-label.js';
import { migration as m0007 } from './0007-configuration.js';
import { migration as m0008 } from './0008-reports-company.js';
import { migration as m0009 } from './0009-inventory.js';
import { migration as m0010 } from './0010-metrics.js';
import { migration as m0011 } from './0011-cluster.js';
import { migration as m0013 } from './0013-cve.js';
import { migration as m0014 } from './0014-shared-state.js';
import { migration as m0016 } from './0016-cluster-sessions.js';
import { migration as m0017 } from './0017-configuration-reach.js';
import { migration as m0018 } from './0018-report-ts-bound.js';
import { migration as m0019 } from './0019-device-code-claims.js';
import { migration as m0020 } from './0020-recovery-codes.js';
import { migration as m0021 } from './0021-ssh-keys.js';

/**
 * Migrations, in order, one file each (NNNN-name.ts; the key below is the name recorded in the
 * database's migration table and never changes). Each is written once and never edited after it has
 * landed: a later change to the schema is a new file. A migration imports nothing from the domains:
 * what it needs of them (a hash, a bound, a rule) is copied in as it was when it was written, so that
 * later changes to domain code cannot change what an old migration does.
 *
 * 0012 and 0015 were never used by a migration that landed: the numbers were held by changes built
 * at the same time as their neighbours, which landed without a migration of their own. They stay
 * unused: Kysely's migrator refuses a new migration whose name sorts before one already applied.
 */
export function migrations(dialect: Dialect): Record<string, Migration> {
  return {
    '0001_initial': m0001(dialect),
    '0002_totp_last_step': m0002,
    '0003_revoked_devices': m0003,
    '0004_audit_chain': m0004(dialect),
    '0005_role_recording': m0005,
    '0006_bootstrap_key_label': m0006,
    '0007_configuration': m0007(dialect),
    '0008_reports_company': m0008(dialect),
    '0009_inventory': m0009,
    '0010_metrics': m0010(dialect),
    '0011_cluster': m0011(dialect),
    '0013_cve': m0013,
    '0014_shared_state': m0014(dialect),
    '0016_cluster_sessions': m0016(dialect),
    '0017_configuration_reach': m0017,
    '0018_report_ts_bound': m0018,
    '0019_device_code_claims': m0019,
    '0020_recovery_codes': m0020,
    '0021_ssh_keys': m0021,
  };
}
