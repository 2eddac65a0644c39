/**
 * `npm run bench -- console`: how long an operator waits in the web console, in Debian's Chromium
 * against a broker with a real agent, each figure beside its anchor measured in the same run: the
 * console's own page (index.html and its script, no data) loaded from the same broker.
 *
 * - sign-in: from pressing "Sign in" to the dashboard's first data drawn;
 * - each area (devices, audit, analysis, logs, CVE): from navigation to its first screen of data;
 * - console: from opening /console/<device> to the shell's prompt drawn in the terminal.
 *
 * Medians of several rounds, each in a fresh browser context (cold page, warm broker), printed only.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { startAgent } from '../test/support/agent.js';
import { ADMIN, startTestBroker } from '../test/support/broker.js';
import { ensureBuilt, launchBrowser } from '../test/support/chromium.js';

const ROUNDS = 7;

/** The areas timed to their first screen: a title drawn and nothing in the main part still loading. */
const AREAS = ['devices', 'audit', 'analysis', 'logs', 'cve'];

async function firstScreen(page: Page): Promise<void> {
  await page.waitForFunction(
    () => {
      const main = document.querySelector('main');
      return !!main?.querySelector('h1') && !main.querySelector('.loading') && (main.textContent ?? '').length > 40;
    },
    undefined,
    { timeout: 30_000, polling: 'raf' },
  );
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

async function timed(run: () => Promise<void>): Promise<number> {
  const started = performance.now();
  await run();
  return performance.now() - started;
}

export async function benchConsole(log: (line: string) => void): Promise<void> {
  ensureBuilt();
  const t = await startTestBroker({ database: 'sqlite' });
  // The agent's login shell reads its user's dotfiles: a build machine's (version managers and the
  // like) can take most of a second and would hide ours. The agent gets an empty home, as a device has.
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-console-home-'));
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  const agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body as object)[0], env: { HOME: home } });
  const device = await agent.waitConnected(t, 60_000);
  const shell = process.env.SHELL || '/bin/bash';
  const shellStart = () => timed(async () => void execFileSync(shell, ['-l', '-i', '-c', 'exit'], { env: { ...process.env, HOME: home }, stdio: 'ignore' }));
  const browser = await launchBrowser();
  try {
    const fresh = async (): Promise<{ page: Page; close: () => Promise<void> }> => {
      const context = await browser.newContext({ baseURL: t.url, viewport: { width: 1440, height: 900 } });
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      return { page, close: () => context.close() };
    };
    const signedIn = async (): Promise<{ page: Page; close: () => Promise<void> }> => {
      const opened = await fresh();
      await opened.page.goto('/login');
      await opened.page.getByLabel('Email').fill(ADMIN.email);
      await opened.page.getByLabel('Password').fill(ADMIN.password);
      await opened.page.getByRole('button', { name: 'Sign in' }).click();
      await opened.page.locator('header.topbar').waitFor();
      return opened;
    };

    const anchor: number[] = [];
    const signIn: number[] = [];
    const areas = new Map<string, number[]>(AREAS.map((a) => [a, []]));
    const prompt: number[] = [];
    const ready: number[] = [];
    const shellAlone: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      // The anchor: the console's static page, parsed and its script run, with no data asked.
      {
        const { page, close } = await fresh();
        anchor.push(await timed(async () => void (await page.goto('/login', { waitUntil: 'load' }))));
        await close();
      }
      {
        const { page, close } = await fresh();
        await page.goto('/login');
        await page.getByLabel('Email').fill(ADMIN.email);
        await page.getByLabel('Password').fill(ADMIN.password);
        signIn.push(
          await timed(async () => {
            await page.getByRole('button', { name: 'Sign in' }).click();
            await firstScreen(page);
          }),
        );
        await close();
      }
      const { page, close } = await signedIn();
      for (const area of AREAS) {
        areas.get(area)?.push(
          await timed(async () => {
            await page.goto(`/${area}`);
            await firstScreen(page);
          }),
        );
      }
      shellAlone.push(await shellStart());
      const started = performance.now();
      page.once('websocket', (ws) => {
        const onFrame = (frame: { payload: string | Buffer }) => {
          if (typeof frame.payload === 'string' && frame.payload.includes('"ready"')) {
            ready.push(performance.now() - started);
            ws.off('framereceived', onFrame);
          }
        };
        ws.on('framereceived', onFrame);
      });
      prompt.push(
        await timed(async () => {
          await page.goto(`/console/${device}`);
          // The prompt: the shell's first output drawn in the terminal.
          await page.waitForFunction(() => (document.querySelector('.xterm-rows')?.textContent ?? '').trim().length > 0, undefined, {
            timeout: 30_000,
            polling: 'raf',
          });
        }),
      );
      await page.goto('/devices'); // leaving the console ends its session
      await close();
    }

    const base = median(anchor);
    const row = (name: string, values: number[]) =>
      log(`${name.padEnd(22)} ${median(values).toFixed(0).padStart(6)} ms  = ${(median(values) / base).toFixed(2)}× the static page`);
    log(`static page (anchor)   ${base.toFixed(0).padStart(6)} ms  (median of ${ROUNDS}, fresh context each)`);
    row('sign-in to dashboard', signIn);
    for (const area of AREAS) row(`area ${area}`, areas.get(area) ?? []);
    row('console ready frame', ready);
    row('console prompt', prompt);
    log(`  of which the login shell (${shell} -l -i, alone) ${median(shellAlone).toFixed(0)} ms; target: prompt under 500 ms`);
  } finally {
    await browser.close();
    await agent.close();
    await t.close();
    fs.rmSync(home, { recursive: true, force: true });
  }
}
