/**
 * qbee's `parameters`: key/value `parameters` and `secrets` that `$(key)` placeholders and
 * templates resolve to (the engine feeds them to every bundle). Secret values are redacted from
 * every report. Applying records a digest of the set, so a change is reported once.
 */
import crypto from 'node:crypto';
import type { Bundle } from '../bundle.js';
import { readState, writeState } from '../helpers.js';
import { keyValues, object } from '../parse.js';

export interface ParametersData {
  parameters: { key: string; value: string }[];
  secrets: { key: string; value: string }[];
}

export const parametersBundle: Bundle<ParametersData> = {
  name: 'parameters',
  parse(data) {
    const o = object(data, 'parameters');
    return { parameters: keyValues(o, 'parameters', 'parameters'), secrets: keyValues(o, 'secrets', 'parameters') };
  },
  async apply(data, ctx) {
    // Kept in the agent's private state directory, which holds the configuration itself.
    const digest = crypto.createHash('sha256').update(JSON.stringify(data)).digest('hex');
    const before = await readState<{ digest: string }>(ctx, 'parameters');
    if (before?.digest === digest) return;
    await writeState(ctx, 'parameters', { digest });
    ctx.report('INFO', `Parameters updated: ${data.parameters.length} parameter(s), ${data.secrets.length} secret(s).`);
  },
};
