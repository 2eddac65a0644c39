/**
 * The bundle's shell launcher (LAUNCHER): what it hands node. A stand-in `node` first on the PATH
 * prints its arguments and the malloc settings it was given.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { AGENT_MALLOC_ARENA_MAX, AGENT_MALLOC_TRIM_THRESHOLD, AGENT_NODE_FLAGS, LAUNCHER } from './build.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-launcher-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
fs.mkdirSync(path.join(dir, 'bin'));
fs.writeFileSync(
  path.join(dir, 'bin', 'node'),
  '#!/bin/sh\nprintf "arena=%s marker=%s trim=%s marker=%s args=%s\\n" "${MALLOC_ARENA_MAX-unset}" "${FLEET_AGENT_MALLOC_ARENA_MAX-unset}" ' +
    '"${MALLOC_TRIM_THRESHOLD_-unset}" "${FLEET_AGENT_MALLOC_TRIM_THRESHOLD_-unset}" "$*"\n',
  { mode: 0o755 },
);
const bundle = path.join(dir, 'fleet-agent.mjs');
fs.writeFileSync(bundle, `${LAUNCHER}console.log('the agent');\n`, { mode: 0o755 });

function launch(env: Record<string, string>): string {
  const base = { PATH: `${path.join(dir, 'bin')}:/usr/bin:/bin` };
  return execFileSync(bundle, ['--config', 'c.json'], { env: { ...base, ...env }, encoding: 'utf8' }).trim();
}

const OURS = `arena=${AGENT_MALLOC_ARENA_MAX} marker=launcher trim=${AGENT_MALLOC_TRIM_THRESHOLD} marker=launcher`;

it("starts node on the bundle with the agent's flags, one malloc arena and a fixed trim threshold, marked for the agent to remove", () => {
  expect(launch({})).toBe(`${OURS} args=${AGENT_NODE_FLAGS} ${bundle} --config c.json`);
});

it('leaves a MALLOC_ARENA_MAX or MALLOC_TRIM_THRESHOLD_ already set, and unmarked', () => {
  expect(launch({ MALLOC_ARENA_MAX: '4' })).toBe(
    `arena=4 marker=unset trim=${AGENT_MALLOC_TRIM_THRESHOLD} marker=launcher args=${AGENT_NODE_FLAGS} ${bundle} --config c.json`,
  );
  expect(launch({ MALLOC_TRIM_THRESHOLD_: '1000' })).toBe(
    `arena=${AGENT_MALLOC_ARENA_MAX} marker=launcher trim=1000 marker=unset args=${AGENT_NODE_FLAGS} ${bundle} --config c.json`,
  );
});

it("FLEET_AGENT_NODE_FLAGS replaces the flags (empty: Node's defaults)", () => {
  expect(launch({ FLEET_AGENT_NODE_FLAGS: '' })).toBe(`${OURS} args=${bundle} --config c.json`);
  expect(launch({ FLEET_AGENT_NODE_FLAGS: '--max-old-space-size=64' })).toBe(`${OURS} args=--max-old-space-size=64 ${bundle} --config c.json`);
});

it('is a comment to JavaScript: node runs the bundle', () => {
  const out = execFileSync(process.execPath, [bundle], { encoding: 'utf8' });
  expect(out).toBe('the agent\n');
});
