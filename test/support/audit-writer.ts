/**
 * A second broker's audit writer, in a process of its own: appends `count` entries to the audit
 * chain of the database named by the arguments (tests of several brokers on one database).
 */
import { AuditService } from '../../broker/audit/service.js';
import { openStore } from '../../broker/db/database.js';

const [url, schema, count] = process.argv.slice(2);
const store = await openStore(url, schema);
try {
  const audit = new AuditService(store.db, store.dialect);
  await Promise.all(
    Array.from({ length: Number(count) }, (_, i) => audit.recordChange({ event: 'test.concurrent', action: `other ${i}`, options: { i }, ip: '127.0.0.1' })),
  );
} finally {
  await store.close();
}
