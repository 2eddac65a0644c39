/** A device where node-pty cannot load: the agent runs (node-pty loads with the first console) and refuses consoles, saying why. */
import os from 'node:os';
import { describe, expect, it, vi } from 'vitest';
import { muxPair } from '../../test/support/mux-pair.js';
import { handleChannel } from './index.js';

vi.mock('node-pty', () => {
  throw new Error('pty.node: cannot open shared object file');
});

describe('console without node-pty', () => {
  it('refuses the console as unsupported, and serves the other sessions', async () => {
    const { broker, close } = await muxPair((ch) => handleChannel(ch, { stateDir: os.tmpdir(), log: () => {} }));
    try {
      await expect(broker.open('console', { cols: 80, rows: 24 })).rejects.toThrow(/Consoles are not available on this device: node-pty could not be loaded/);
      const { info } = await broker.open('copy', { direction: 'list', path: os.tmpdir() } as never);
      expect(info).toBeDefined();
    } finally {
      close();
    }
  });
});
