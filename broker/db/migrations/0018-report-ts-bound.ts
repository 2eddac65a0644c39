import { sql, type Kysely, type Migration } from 'kysely';

/**
 * Report times are bounded by the broker clock from now on (broker/reports/validate.ts); a report
 * stored before with a time in the future (a device's clock, or a device pinning last_ts in the
 * year 5138) is brought down to the same bound: the time of this migration plus the skew.
 */
/** The future skew reports were allowed when this was written (REPORT_FUTURE_SKEW_S). */
const REPORT_FUTURE_SKEW_S = 5 * 60;

export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    const bound = Math.floor(Date.now() / 1000) + REPORT_FUTURE_SKEW_S;
    await sql`update reports set ts = ${bound} where ts > ${bound}`.execute(db);
  },
};
