/**
 * The browser project's global set-up: builds the web console once, before any browser file
 * starts, when there is no build or a source is newer (each file used to check on its own, and two
 * files started together would each start the same build into the same folder); and starts the one
 * Chromium every test worker connects to (support/browser.ts), closed after the run. The browser
 * files run beside the others, in whichever worker is free, so a Chromium per worker meant a
 * launch (about a second of CPU) for nearly every file.
 */
import type { TestProject } from 'vitest/node';
import { ensureBuilt, launchBrowserServer } from './chromium.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Where the run's Chromium listens (playwright's `connect`). */
    chromiumEndpoint: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  ensureBuilt();
  const server = await launchBrowserServer();
  project.provide('chromiumEndpoint', server.wsEndpoint());
  return () => server.close();
}
