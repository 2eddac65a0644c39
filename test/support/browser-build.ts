/**
 * The browser project's global set-up: builds the web console once, before any browser file
 * starts, when there is no build or a source is newer (each file used to check on its own, and two
 * files started together would each start the same build into the same folder). Then starts one
 * Chromium for the whole project and hands its endpoint to the files (`inject('chromiumEndpoint')`):
 * each file connects to it instead of launching its own, and every test still opens a fresh context
 * (own cookies, storage and cache). The files run one at a time, so no two share it at once.
 */
import type { TestProject } from 'vitest/node';
import { ensureBuilt, launchBrowserServer } from './chromium.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The WebSocket endpoint of the project's Chromium (playwright's `chromium.connect`). */
    chromiumEndpoint: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  ensureBuilt();
  const server = await launchBrowserServer();
  project.provide('chromiumEndpoint', server.wsEndpoint());
  return () => server.close();
}
