/**
 * Browser tests: Debian's Chromium driven by playwright-core against a real broker serving the
 * built web console. Screenshots go to test/artifacts/ (kept by CI as artifacts).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { expect } from 'vitest';
import { ADMIN } from '../support/broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const WEB = path.join(ROOT, 'web-console');
export const ARTIFACTS = path.join(ROOT, 'test', 'artifacts');

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestMtime(full) : fs.statSync(full).mtimeMs);
  }
  return newest;
}

/** Builds the console when there is no build, or when a source is newer than it. */
export function ensureBuilt(): void {
  const index = path.join(WEB, 'dist', 'index.html');
  const built = fs.existsSync(index) ? fs.statSync(index).mtimeMs : 0;
  const sources = Math.max(
    newestMtime(path.join(WEB, 'src')),
    fs.statSync(path.join(WEB, 'index.html')).mtimeMs,
    fs.statSync(path.join(WEB, 'vite.config.ts')).mtimeMs,
    newestMtime(path.join(ROOT, 'shared')),
  );
  if (built > sources) return;
  execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'pipe' });
}

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic'],
  });
}

export interface WatchedPage {
  page: Page;
  context: BrowserContext;
  /** Script errors and console.error messages, except the browser's own line for a 4xx/5xx answer. */
  errors: string[];
}

/** A fresh context (own cookies and storage) and page, with its console watched. */
export async function openPage(browser: Browser, baseURL: string, viewport = { width: 1280, height: 800 }): Promise<WatchedPage> {
  const context = await browser.newContext({ baseURL, viewport });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    // A refused call (401 on a wrong password, 403 on a denied page) makes Chromium log
    // "Failed to load resource"; the UI shows the API's message for it, which tests check.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource')) errors.push(msg.text());
  });
  return { page, context, errors };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Signs in through the form and waits for the console's frame. */
export async function signIn(page: Page, email = ADMIN.email, password = ADMIN.password): Promise<void> {
  await page.goto('/login');
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('header.topbar').waitFor();
}

export function expectNoConsoleErrors(watched: WatchedPage): void {
  expect(watched.errors).toEqual([]);
}
