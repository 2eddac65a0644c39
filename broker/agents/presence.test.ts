import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Db } from '../db/database.js';
import { AgentPresence } from './presence.js';

/** The one statement shape presence writes last contact with (UPDATE devices … WHERE device_id IN …): the ids of each. */
function recordingDb(): { db: Db; statements: string[][] } {
  const statements: string[][] = [];
  const db = {
    updateTable: () => ({
      set: () => ({
        where: (_column: string, _op: string, ids: string[]) => ({
          execute: async () => {
            statements.push(ids);
          },
        }),
      }),
    }),
  } as unknown as Db;
  return { db, statements };
}

describe('AgentPresence at shutdown', () => {
  it('records the last contact of a large fleet in bounded statements, every device once', async () => {
    const { db, statements } = recordingDb();
    const presence = new AgentPresence(db, pino({ level: 'silent' }), () => []);
    const ids = Array.from({ length: 1201 }, (_, i) => `device-${i}`);
    await presence.recordShutdown(ids);
    expect(statements.length).toBeGreaterThan(1);
    for (const s of statements) expect(s.length).toBeLessThanOrEqual(500);
    expect(statements.flat()).toEqual(ids);
  });

  it('writes nothing when no agent is connected', async () => {
    const { db, statements } = recordingDb();
    await new AgentPresence(db, pino({ level: 'silent' }), () => []).recordShutdown([]);
    expect(statements).toEqual([]);
  });
});
