import type { Channel } from '../../shared/mux.js';

export interface SessionContext {
  /** Where the agent keeps its state (temp files for copies land next to their target instead). */
  stateDir: string;
  log: (msg: string, detail?: Record<string, unknown>) => void;
}

/**
 * Serves a channel the broker opened: console, tunnel or copy. Resolves with optional info for the
 * broker once the session is set up; throws (with a message for the user) to refuse it.
 */
export async function handleChannel(channel: Channel, _ctx: SessionContext): Promise<Record<string, unknown> | void> {
  throw new Error(`${channel.kind} sessions are not supported by this agent yet`);
}
