import os from 'node:os';
import { expect } from 'vitest';
import { handleChannel } from '../../agent/sessions/index.js';
import type { Channel } from '../../shared/mux.js';
import type { ConsoleParams } from '../../shared/protocol.js';
import { processGone } from '../../agent/sessions/process.js';
import { muxPair } from './mux-pair.js';

/** The broker end of a Mux pair whose agent end serves channels with the agent's handleChannel, and the agent's channels. */
export async function sessionPair(window = 256 * 1024) {
  const agentChannels: Channel[] = [];
  const { broker, close } = await muxPair((ch) => {
    agentChannels.push(ch);
    return handleChannel(ch, { stateDir: os.tmpdir(), log: () => {} });
  }, window);
  return { broker, agentChannels, close };
}

/**
 * Opens a piped console whose command floods (`params` make it so) on a pair made with a window of
 * `window`, stops reading, and checks that what the agent holds stays near its buffer and that a closed
 * channel ends the command's whole process group.
 */
export async function expectBoundedPipedFlood(p: Awaited<ReturnType<typeof sessionPair>>, params: ConsoleParams, window: number) {
  const { channel, info } = await p.broker.open('console', params);
  channel.pause();
  const agentSide = p.agentChannels[0];
  await expect.poll(() => agentSide.writableNeedDrain, { timeout: 15_000 }).toBe(true);
  const held = agentSide.writableLength;
  await new Promise((r) => setTimeout(r, 500));
  // Stopped: the pipes are not read, so the command waits; what the agent holds stays near its buffer.
  expect(agentSide.writableLength).toBe(held);
  expect(held).toBeLessThanOrEqual(256 * 1024 + 64 * 1024);
  expect(channel.stats.bytesIn).toBeLessThanOrEqual(window);
  const pid = info.pid as number;
  channel.destroy();
  // The command runs in its own process group: the hang-up reaches every process of it.
  await expect.poll(() => processGone(-pid), { timeout: 15_000 }).toBe(true);
}
