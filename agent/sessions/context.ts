/** What every session handler is given (its own file, so the handlers need not import the dispatcher in index.ts). */
export interface SessionContext {
  /** Where the agent keeps its state (temp files for copies land next to their target instead). */
  stateDir: string;
  log: (msg: string, detail?: Record<string, unknown>) => void;
}
