/**
 * Debian's Chromium for tests and benches, and the built web console it loads: no vitest here, so
 * `npm run bench` can drive a browser too.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserServer } from 'playwright-core';

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

const LAUNCH = {
  executablePath: CHROMIUM,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--no-first-run',
    '--disable-quic',
  ],
};

export function launchBrowser(): Promise<Browser> {
  return chromium.launch(LAUNCH);
}

/** A Chromium that other processes reach at its `wsEndpoint()` (`connectBrowser`): one for every test worker. */
export function launchBrowserServer(): Promise<BrowserServer> {
  return chromium.launchServer(LAUNCH);
}

/** Connects to a Chromium started by `launchBrowserServer`; the contexts this connection opens close with it. */
export function connectBrowser(wsEndpoint: string): Promise<Browser> {
  return chromium.connect(wsEndpoint);
}
