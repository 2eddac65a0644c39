import pino from 'pino';
import { expect, it } from 'vitest';
import type { ControlMessage } from '../../shared/protocol.js';
import type { WriteQueue } from '../db/batch.js';
import type { Db } from '../db/database.js';
import { AgentLink } from './agent-link.js';
import type { ConfigAgentLink, ReportSink } from './deps.js';
import type { Rendering } from './rendering.js';
import type { ConfigStore } from './store.js';

it("writes a connecting agent's configuration state through the connect writes, then sends it the configuration", async () => {
  const events: string[] = [];
  const rendering = {
    deviceRendered: async () => ({
      config: { commit_id: 'c1', bundles: [], bundle_data: {} },
      attributes: {},
      defaults: {},
      size: 100,
      digest: 'd1',
      dropped: [],
    }),
  } as unknown as Rendering;
  const q = { recordState: async (deviceId: string, commit: string) => void events.push(`state ${deviceId} ${commit}`) } as unknown as ConfigStore;
  const agents: ConfigAgentLink = {
    send: (deviceId: string, msg: ControlMessage) => (events.push(`send ${deviceId} ${msg.t}`), true),
    isConnected: () => true,
    open: () => Promise.reject(new Error('not used')),
  };
  const writes: WriteQueue = {
    run: async (write) => {
      events.push('queued');
      return write();
    },
  };
  const link = new AgentLink({} as Db, q, rendering, agents, {} as ReportSink, pino({ level: 'silent' }), writes);
  await link.onConnected('dev1');
  expect(events).toEqual(['queued', 'state dev1 c1', 'send dev1 config']);
});
