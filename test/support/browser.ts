/**
 * Browser tests: Debian's Chromium driven by playwright-core against a real broker serving the
 * built web console. Screenshots go to test/artifacts/ (kept by CI as artifacts).
 *
 * A browser test file calls `useBrowserSuite()` once: it starts a test broker before the file's
 * tests and closes it after them, with every browser context still open (the console is built once,
 * before any browser file, by the project's global set-up, browser-build.ts, which also starts the
 * run's one Chromium). Each test worker connects to that Chromium once and keeps the connection for
 * the browser files it runs after (`isolate: false` in vitest.config.ts); what a connection opens
 * is its own. Each test then opens its own context and page with `suite.open()` (own cookies,
 * storage and cache; signed in as the administrator unless told otherwise, over the API, not the form,
 * which the sign-in tests drive themselves) and ends with
 * `expectNoErrorsAndClose()`.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Browser, BrowserContext, Download, Page } from 'playwright-core';
import { afterAll, beforeAll, expect, inject } from 'vitest';
import { ADMIN, startTestBroker, type TestBroker } from './broker.js';
import { ARTIFACTS, connectBrowser, launchBrowser } from './chromium.js';

export { ARTIFACTS, CHROMIUM, ensureBuilt, launchBrowser } from './chromium.js';

export interface WatchedPage {
  page: Page;
  context: BrowserContext;
  /** Script errors and console.error messages, except the browser's own line for a 4xx/5xx answer. */
  errors: string[];
  /** Expects that the page logged no script or console error, then closes its context. */
  expectNoErrorsAndClose(): Promise<void>;
}

export interface Viewport {
  width: number;
  height: number;
}

/** A fresh context (own cookies and storage) and page, with its console watched. */
export async function openPage(browser: Browser, baseURL: string, viewport: Viewport = { width: 1280, height: 800 }, touch = false): Promise<WatchedPage> {
  const context = await browser.newContext({ baseURL, viewport, ...(touch ? { hasTouch: true, isMobile: true } : {}) });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    // A refused call (401 on a wrong password, 403 on a denied page) makes Chromium log
    // "Failed to load resource"; the UI shows the API's message for it, which tests check.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) errors.push(msg.text());
  });
  return {
    page,
    context,
    errors,
    async expectNoErrorsAndClose() {
      expect(errors).toEqual([]);
      await context.close();
    },
  };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/**
 * A finished download's bytes. Read through playwright's stream rather than `download.path()`: the
 * Chromium is another process's (connected to, not launched here), and a connected browser's
 * downloads have no local path.
 */
export async function downloaded(download: Download): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await download.createReadStream()) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * Signs in over the API and hands the page what the form's sign-in leaves it, so the console starts
 * signed in on its first load: the refresh cookie (the login answer's, into the context's own
 * cookie jar), the token in the tab's sessionStorage and the hint in localStorage. The storage is
 * written on an empty page of the broker's origin that never reaches the broker. Each call is a
 * session of its own: a test that signs out revokes only its own.
 */
async function signInOverApi(page: Page, baseURL: string, email = ADMIN.email, password = ADMIN.password): Promise<void> {
  const answer = await page.context().request.post('/api/v2/login', { data: { email, password } });
  if (answer.status() !== 200) throw new Error(`login ${email} failed: ${answer.status()} ${await answer.text()}`);
  const { token } = (await answer.json()) as { token: string };
  const blank = new URL('/blank-for-storage', baseURL).href;
  await page.route(blank, (route) => route.fulfill({ contentType: 'text/html', body: '' }));
  await page.goto(blank);
  await page.unroute(blank);
  await page.evaluate((value) => {
    sessionStorage.setItem('fleet.token', value);
    localStorage.setItem('fleet.session', '1');
  }, token);
}

export interface OpenOptions {
  /** Who is signed in (over the API, see `signInOverApi`): the administrator by default, `null` for nobody. */
  as?: { email: string; password: string } | null;
  viewport?: Viewport;
  /** The page to load first; without it, the start page once signed in (and nothing for nobody). */
  at?: string;
  /** A touch screen, as a phone's. */
  touch?: boolean;
  /** Another broker than the file's. */
  broker?: TestBroker;
}

export interface BrowserSuite {
  /** The file's broker, started before its tests. */
  readonly t: TestBroker;
  readonly browser: Browser;
  /** A fresh page on the broker with its console watched, signed in as `options.as`. */
  open(options?: OpenOptions): Promise<WatchedPage>;
}

let workerBrowser: Promise<Browser> | undefined;

/**
 * The worker's connection to the run's Chromium (started by the project's global set-up), made by
 * the first browser file the worker runs and kept for the next ones; made again if it went away,
 * and a Chromium of the worker's own when there is none to connect to. Playwright closes it when
 * the worker exits.
 */
async function sharedBrowser(): Promise<Browser> {
  const current = workerBrowser && (await workerBrowser.catch(() => undefined));
  if (current?.isConnected()) return current;
  const endpoint = inject('chromiumEndpoint');
  workerBrowser = endpoint ? connectBrowser(endpoint).catch(() => launchBrowser()) : launchBrowser();
  return workerBrowser;
}

/**
 * Registers the file's set-up and tear-down: starts a broker (with `env`, which may be a function
 * when it depends on something an earlier hook started) and takes the worker's Chromium; after the
 * file's tests, closes every context left open (a test that failed before closing its own) and the broker.
 */
export function useBrowserSuite(options: { env?: Record<string, string> | (() => Record<string, string>) } = {}): BrowserSuite {
  let t: TestBroker | undefined;
  let browser: Browser | undefined;

  beforeAll(async () => {
    // The console is built by the project's global set-up (test/support/browser-build.ts).
    t = await startTestBroker({ env: typeof options.env === 'function' ? options.env() : options.env });
    browser = await sharedBrowser();
  });

  afterAll(async () => {
    // Files run one at a time in a worker, and a connection sees only the contexts it opened, so
    // every open context is this file's.
    for (const context of browser?.contexts() ?? []) await context.close();
    await t?.close();
  });

  const started = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error('The browser suite is used before its beforeAll hook ran.');
    return value;
  };

  return {
    get t() {
      return started(t);
    },
    get browser() {
      return started(browser);
    },
    async open({ as = ADMIN, at, viewport, touch, broker }: OpenOptions = {}) {
      const baseURL = (broker ?? started(t)).url;
      const watched = await openPage(started(browser), baseURL, viewport, touch);
      if (as) await signInOverApi(watched.page, baseURL, as.email, as.password);
      if (at) await watched.page.goto(at);
      else if (as) {
        await watched.page.goto('/');
        await watched.page.locator('header.topbar').waitFor();
      }
      return watched;
    },
  };
}
