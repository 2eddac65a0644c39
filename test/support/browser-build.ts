/**
 * The browser project's global set-up: builds the web console once, before any browser file
 * starts, when there is no build or a source is newer (each file used to check on its own, and two
 * files started together would each start the same build into the same folder).
 */
import { ensureBuilt } from './chromium.js';

export default function setup(): void {
  ensureBuilt();
}
