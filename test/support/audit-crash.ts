/**
 * A broker that dies mid-write: queues remote-session starts on the audit chain of the database named
 * by the arguments, prints each id as its start is reported written (`started <id>`, the moment a
 * session would begin relaying), and SIGKILLs itself after `reported` of them while more are still
 * queued or committing. Tests then check that every reported start is in the database.
 */
import fs from 'node:fs';
import { AuditService } from '../../broker/audit/service.js';
import { openStore } from '../../broker/db/database.js';

const [url, schema, reported] = process.argv.slice(2);
const store = await openStore(url, schema);
const audit = new AuditService(store.db, store.dialect, { brokerId: 'crashing' });
let told = 0;
for (let wave = 0; ; wave++) {
  // Waves of 20 without waiting: each wave queues behind the group being committed.
  for (let i = 0; i < 20; i++) {
    void audit
      .recordRemoteStart({
        event: 'remote.tunnel',
        user: { id: 'u1', email: 'op@example.com' },
        deviceId: 'd'.repeat(64),
        action: 'tunnel',
        options: { wave, i },
        allowed: true,
        reason: 'allowed',
        ip: '192.0.2.1',
        source: 'api',
      })
      .then((id) => {
        fs.writeSync(1, `started ${id}\n`);
        if (++told === Number(reported)) process.kill(process.pid, 'SIGKILL');
      });
  }
  await new Promise((resolve) => setImmediate(resolve));
}
