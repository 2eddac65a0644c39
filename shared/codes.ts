/**
 * Outcomes as codes: what code branches on. The sentences that go with them are for people and
 * may change; the codes may not. Spoken by the broker, the agent and the clients.
 */

/** Why an access decision came out as it did (Decision.code). */
export const DECISION_CODES = [
  /** allowed: the permission is held (and, with a device, a resource covers it) */
  'allowed',
  /** no role of the user grants the permission at all */
  'no_permission',
  /** the device is not in the tree (unknown, pending or removed) */
  'no_such_device',
  /** the permission is held, but no resource of it matches the device */
  'outside_resources',
  /** resources match the device, but none grants the requested remote action */
  'action_not_granted',
  /** a resource grants the action on the device, but not with the requested options (port, path…) */
  'option_not_granted',
] as const;
export type DecisionCode = (typeof DECISION_CODES)[number];

/** What is wrong with a role's policy (PolicyProblem.code). */
export const POLICY_PROBLEM_CODES = [
  'unknown_permission',
  /** the same permission in two policies of one role */
  'duplicate_permission',
  'too_many_resources',
  /** a resource other than "*" on a permission that does not accept resources */
  'resources_not_accepted',
  /** the resource string does not parse; its message names the resource */
  'resource_syntax',
  /** an action suffix on a permission other than remote-access:connect */
  'action_not_allowed',
] as const;
export type PolicyProblemCode = (typeof POLICY_PROBLEM_CODES)[number];

/** Why an agent refused to open a channel (the `code` of a `close` control message). */
export const AGENT_REFUSAL_CODES = [
  /** the copy path resolves outside the directories the user's grant allows */
  'path_outside_grant',
  /** the copy path lies within the grant as written, but a symlink leads outside it */
  'symlink_escape',
  /** the file or directory does not exist on the device */
  'not_found',
  /** the request is malformed (not an absolute path, a bad size or checksum, a bad port…) */
  'invalid_request',
  /** the path names a directory where a file is needed, or not a regular file */
  'not_a_file',
  /** a directory listing names something that is not a directory */
  'not_a_directory',
  /** the directory to make already exists on the device (as whatever it is) */
  'exists',
  /** reading, writing or connecting failed on the device */
  'io_error',
  /** the session kind or option is not supported by this agent */
  'unsupported',
  /** the console's login user does not exist on the device */
  'unknown_user',
  /** the agent does not run as root, so it cannot start a console as another user than its own */
  'user_switch_unavailable',
] as const;
export type AgentRefusalCode = (typeof AGENT_REFUSAL_CODES)[number];

/** Refusals that are the user's grant speaking (answered 403), not the device failing. */
const ACCESS_REFUSALS: ReadonlySet<AgentRefusalCode> = new Set(['path_outside_grant', 'symlink_escape']);

export function isAgentRefusalCode(value: unknown): value is AgentRefusalCode {
  return typeof value === 'string' && (AGENT_REFUSAL_CODES as readonly string[]).includes(value);
}

export function isAccessRefusal(code: AgentRefusalCode | undefined): boolean {
  return code !== undefined && ACCESS_REFUSALS.has(code);
}

/** An agent's refusal: thrown on the device, carried in the `close` message, rebuilt on the broker. */
export class AgentRefusal extends Error {
  constructor(
    readonly code: AgentRefusalCode,
    message: string,
  ) {
    super(message);
    this.name = 'AgentRefusal';
  }
}

/** The refusal code an error carries, if it is a known one. */
export function refusalCodeOf(err: unknown): AgentRefusalCode | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return isAgentRefusalCode(code) ? code : undefined;
}
