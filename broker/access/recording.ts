/**
 * Whether a console session is recorded, from the roles that grant it. Each role says `default`
 * (recorded), `off` or `required`. Across a user's roles that allow this console — on the device,
 * as the local user asked for — the strictest wins: `required` over `default`, and `off` holds only
 * when every one of them says `off`. One role cannot quietly switch off the recording another one
 * asks for: a `required` role granting the console as root on every device keeps a root console
 * recorded whatever an `off` role granting the console as any user there says.
 */
import { evaluate, type CompiledPolicy, type DeviceScope, type RemoteRequest } from '../../shared/resources.js';

export const RECORDING_MODES = ['default', 'off', 'required'] as const;
export type RecordingMode = (typeof RECORDING_MODES)[number];

/** How strict a mode is: a change to a lower rank lowers the recording. */
export const RECORDING_RANK: Readonly<Record<RecordingMode, number>> = { off: 0, default: 1, required: 2 };

/** A stored value as a mode; anything unknown (an older row) is `default`. */
export function recordingModeOf(value: string | null | undefined): RecordingMode {
  return (RECORDING_MODES as readonly string[]).includes(value ?? '') ? (value as RecordingMode) : 'default';
}

/** One of the user's roles: its policies and its recording setting. */
export interface RoleRecording {
  recording: RecordingMode;
  policies: CompiledPolicy[];
}

/**
 * The recording of a console on `device` for a user holding `roles` (see above), decided on the
 * roles whose grants allow this very console (`request`, with the local user it runs as).
 */
export function consoleRecordingMode(roles: RoleRecording[], device: DeviceScope, request: Extract<RemoteRequest, { action: 'console' }>): RecordingMode {
  const granting = roles.filter((r) => evaluate(r.policies, 'remote-access:connect', device, request).allowed);
  if (granting.some((r) => r.recording === 'required')) return 'required';
  if (granting.length > 0 && granting.every((r) => r.recording === 'off')) return 'off';
  return 'default';
}
