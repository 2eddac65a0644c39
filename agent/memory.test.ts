import { afterEach, expect, it } from 'vitest';
import { forgetLauncherEnvironment, releaseMemory } from './memory.js';

const global = globalThis as { gc?: () => void };
const hadGc = 'gc' in global;
const ownGc = global.gc;
afterEach(() => {
  if (hadGc) global.gc = ownGc;
  else delete global.gc;
});

it('collects when node exposes its collector (the packaged agent), and does nothing when it does not', () => {
  delete global.gc;
  expect(() => releaseMemory()).not.toThrow();
  let calls = 0;
  global.gc = () => void calls++;
  releaseMemory();
  releaseMemory();
  expect(calls).toBe(2);
});

it("removes the launcher's malloc settings from the environment that consoles and commands inherit", () => {
  const env: NodeJS.ProcessEnv = { PATH: '/usr/bin', MALLOC_ARENA_MAX: '1', FLEET_AGENT_MALLOC_ARENA_MAX: 'launcher' };
  forgetLauncherEnvironment(env);
  expect(env).toEqual({ PATH: '/usr/bin' });
  const both: NodeJS.ProcessEnv = {
    PATH: '/usr/bin',
    MALLOC_ARENA_MAX: '1',
    FLEET_AGENT_MALLOC_ARENA_MAX: 'launcher',
    MALLOC_TRIM_THRESHOLD_: '262144',
    FLEET_AGENT_MALLOC_TRIM_THRESHOLD_: 'launcher',
  };
  forgetLauncherEnvironment(both);
  expect(both).toEqual({ PATH: '/usr/bin' });
});

it('keeps a MALLOC_TRIM_THRESHOLD_ that whoever started the agent set, removing only what the launcher marked', () => {
  const env: NodeJS.ProcessEnv = { MALLOC_ARENA_MAX: '1', FLEET_AGENT_MALLOC_ARENA_MAX: 'launcher', MALLOC_TRIM_THRESHOLD_: '1000' };
  forgetLauncherEnvironment(env);
  expect(env).toEqual({ MALLOC_TRIM_THRESHOLD_: '1000' });
  const forged: NodeJS.ProcessEnv = { MALLOC_TRIM_THRESHOLD_: '1000', FLEET_AGENT_MALLOC_TRIM_THRESHOLD_: 'yes' };
  forgetLauncherEnvironment(forged);
  expect(forged).toEqual({ MALLOC_TRIM_THRESHOLD_: '1000', FLEET_AGENT_MALLOC_TRIM_THRESHOLD_: 'yes' });
});

it('keeps a MALLOC_ARENA_MAX that whoever started the agent set', () => {
  const env: NodeJS.ProcessEnv = { PATH: '/usr/bin', MALLOC_ARENA_MAX: '4' };
  forgetLauncherEnvironment(env);
  expect(env).toEqual({ PATH: '/usr/bin', MALLOC_ARENA_MAX: '4' });
  // Only the launcher's own marker counts.
  const forged: NodeJS.ProcessEnv = { MALLOC_ARENA_MAX: '4', FLEET_AGENT_MALLOC_ARENA_MAX: 'yes' };
  forgetLauncherEnvironment(forged);
  expect(forged).toEqual({ MALLOC_ARENA_MAX: '4', FLEET_AGENT_MALLOC_ARENA_MAX: 'yes' });
});
