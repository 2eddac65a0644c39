/** Request and response schemas of the device routes: validation, types and the OpenAPI document. */
import { z } from 'zod';
import type { AttributesRecord, GroupTreeNode } from '../../shared/api-types.js';
import { NODE_ID_PATTERN, TAG_PATTERN, TAG_RULE } from '../../shared/resources.js';
import { pagingQuery } from '../http/paging.js';
import { coordinateProblem, CUSTOM_VALUE_MAX_LENGTH, customKeyProblem, LEGACY_FIELDS, LEGACY_MAX_LENGTH, legacyNameProblem } from './attributes.js';
import { DEVICE_ID_PATTERN } from './scope.js';
import { isSingleLine, multiLine, singleLine } from '../../shared/text.js';
import { deviceAttributes, lastReported } from '../../shared/api-types/nodes.js';

export const MAX_TAGS_PER_NODE = 50;
export const MAX_CHANGES_PER_REQUEST = 1000;

export const deviceId = z
  .string()
  .regex(DEVICE_ID_PATTERN, 'must be a device id: 64 lowercase hexadecimal characters')
  .describe('Device id: SHA-256 of the device public key, 64 lowercase hex');

export const nodeId = z
  .string()
  .regex(NODE_ID_PATTERN, 'must be a node id: letters, digits, "_" and "-", at most 64, starting with a letter or digit')
  .describe('Node id of a group (e.g. root, unassigned_group) or a device id');

export const deviceParams = z.object({ device_id: deviceId });
export const nodeParams = z.object({ node_id: nodeId });

/** The device a node-addressed call concerns: device ids have their own form, group ids never take it. */
export const deviceOfNode = ({ params }: { params: { node_id: string } }) => (DEVICE_ID_PATTERN.test(params.node_id) ? params.node_id : undefined);

const tag = z.string().regex(TAG_PATTERN, `must be a tag: ${TAG_RULE}`);
export const tagList = z.array(tag).max(MAX_TAGS_PER_NODE, `at most ${MAX_TAGS_PER_NODE} tags per node`);

const title = singleLine(z.string().min(1, 'must not be empty').max(255, 'at most 255 characters'));

/** Legacy fields are one line (a name, a place) except the description, which may hold tabs and newlines. */
const legacyString = singleLine(z.string().max(LEGACY_MAX_LENGTH, `at most ${LEGACY_MAX_LENGTH} characters`));
const legacyText = multiLine(z.string().max(LEGACY_MAX_LENGTH, `at most ${LEGACY_MAX_LENGTH} characters`));

function coordinate(field: 'latitude' | 'longitude') {
  const limit = field === 'latitude' ? 90 : 180;
  return z
    .union([z.string(), z.number()])
    .superRefine((value, ctx) => {
      const problem = coordinateProblem(field, value);
      if (problem) ctx.addIssue({ code: 'custom', message: problem });
    })
    .describe(`Decimal degrees from -${limit} to ${limit}, as a string (a JSON number is accepted too); "" clears it.`);
}

/**
 * Custom values are what `$(key)` and `{{ key }}` put into the configuration's templates and commands
 * on the device (anyone with device:manage writes them): one line of text, so that no value can add a
 * line to a sudoers file or a script.
 */
export const CUSTOM_VALUE_MESSAGE =
  'must be one line of text: no newline, tab or other control characters, nor bidirectional formatting characters (custom values reach configuration templates and commands)';

const customRecord = z
  .record(
    z.string(),
    z.string().max(CUSTOM_VALUE_MAX_LENGTH, `a custom value holds at most ${CUSTOM_VALUE_MAX_LENGTH} characters`).refine(isSingleLine, CUSTOM_VALUE_MESSAGE),
  )
  .superRefine((record, ctx) => {
    for (const key of Object.keys(record)) {
      const problem = customKeyProblem(key) ?? (record[key] === '' ? undefined : legacyNameProblem(key));
      if (problem) ctx.addIssue({ code: 'custom', path: [key], message: problem });
    }
  })
  .describe(
    'Custom attributes to set: key (1-64 characters, no control characters; not __proto__, constructor or prototype, nor the name of a legacy field such as `latitude`) to value (one line of text, at most 4096 characters: no control characters, tab and newline included, nor bidirectional formatting characters); "" removes the key. Keys not named stay as they are.',
  );

// The record parser drops an own `__proto__` key without a word, so it is looked for in the body as sent.
const customAttributes = z.preprocess((input, ctx) => {
  if (input && typeof input === 'object' && Object.prototype.hasOwnProperty.call(input, '__proto__')) {
    ctx.addIssue({ code: 'custom', path: ['__proto__'], message: customKeyProblem('__proto__') as string, input });
  }
  return input;
}, customRecord);

export const attributesPatch = z.object({
  device_name: legacyString.optional(),
  description: legacyText.optional(),
  latitude: coordinate('latitude').optional(),
  longitude: coordinate('longitude').optional(),
  country: legacyString.optional(),
  city: legacyString.optional(),
  zip: legacyString.optional(),
  address: legacyString.optional(),
  custom: customAttributes.optional(),
});

const legacyOut = Object.fromEntries(LEGACY_FIELDS.map((f) => [f, z.string()])) as Record<(typeof LEGACY_FIELDS)[number], z.ZodString>;

export const attributesRecord = z.object({
  ...legacyOut,
  custom: z.record(z.string(), z.string()),
  custom_max: z.number().int().describe('How many custom attributes a device may hold (MAX_CUSTOM_ATTRIBUTES)'),
}) satisfies z.ZodType<AttributesRecord>;

/** A device's attributes as answered: declared once (shared/api-types/nodes.ts) for the broker and the console. */
export const deviceAttributesOut = deviceAttributes;

// Not recursive on purpose: a self-referencing schema would need $defs that the OpenAPI document cannot place
// (so `nodes` is checked against the record only as a list of objects).
export const treeNode = z.object({
  id: z.string(),
  node_id: z.string(),
  title: z.string(),
  type: z.enum(['group', 'device']),
  tags: z.array(z.string()).describe('The node’s own tags (a device also carries the tags of every group above it)'),
  nodes: z.array(z.looseObject({})).describe('Child nodes, of this same shape (empty for a device)'),
  status: z.enum(['online', 'offline']).optional().describe('Devices only'),
  last_reported: lastReported,
  attributes: deviceAttributesOut.optional().describe('Devices only'),
  device_commit_sha: z.string().optional().describe('Devices only: the configuration commit its agent last applied (empty before the first)'),
  config_propagated: z.boolean().optional().describe('Devices only: whether its agent applied the commit of its current configuration'),
  can_manage: z
    .boolean()
    .optional()
    .describe(
      'With `manage_hints=true` and device:manage only: whether the caller may rename, move and tag this node (a group: also delete it and create in it)',
    ),
}) satisfies z.ZodType<Omit<GroupTreeNode, 'nodes'> & { nodes: object[] }>;

export const groupTreeResponse = z.object({
  total_devices: z.number().int(),
  tree: treeNode,
  manageable_tags: z
    .union([z.literal('*'), z.array(z.string())])
    .optional()
    .describe('With `manage_hints=true` and device:manage only: the tags the caller may add or remove, `"*"` for any'),
});

export const subtreeResponse = z.object({
  id: z.string(),
  node_id: z.string(),
  title: z.string(),
  type: z.enum(['group', 'device']),
  tags: z.array(z.string()),
  nodes: z.array(treeNode),
  ancestors: z.array(z.string()).describe('Node ids from root down to this node'),
  total_devices: z.number().int(),
});

// GET /node/{node_id}'s record, declared once for the broker and the console.
export { nodeView } from '../../shared/api-types/nodes.js';

// Fields the qbee clients send along with every change (zero values included): accepted, ignored.
const ignored = (schema: z.ZodType) => schema.optional().describe('Accepted and ignored');
// Fields qbee clients send with every change (Go structs without omitempty send zero values too).
const clientExtras = {
  position: ignored(z.number().int()),
  type: ignored(z.enum(['group', 'device', ''])),
  oldParentId: ignored(z.string().max(64)),
  old_parent_id: ignored(z.string().max(64)),
};

export const treeChange = z.discriminatedUnion('action', [
  z.object({
    action: z.literal('create'),
    data: z
      .object({
        node_id: z
          .union([nodeId, z.literal('')])
          .optional()
          .describe('Id of the new group; generated when left out or empty'),
        title,
        parent_id: nodeId,
        tags: tagList.optional(),
        ...clientExtras,
      })
      .strict(),
  }),
  z.object({
    action: z.literal('rename'),
    data: z.object({ node_id: nodeId, title, parent_id: ignored(z.string().max(64)), ...clientExtras }).strict(),
  }),
  z.object({
    action: z.literal('move'),
    data: z.object({ node_id: nodeId, parent_id: nodeId, title: ignored(z.string().max(255)), ...clientExtras }).strict(),
  }),
  z.object({
    action: z.literal('update'),
    data: z
      .object({
        node_id: nodeId,
        tags: tagList.describe("The node's own tags, replacing the current ones"),
        parent_id: ignored(z.string().max(64)),
        title: ignored(z.string().max(255)),
        ...clientExtras,
      })
      .strict(),
  }),
  z.object({
    action: z.literal('delete'),
    data: z.object({ node_id: nodeId, parent_id: ignored(z.string().max(64)), title: ignored(z.string().max(255)), ...clientExtras }).strict(),
  }),
]);

export const treeChangesBody = z.object({
  changes: z.array(treeChange).min(1, 'give at least one change').max(MAX_CHANGES_PER_REQUEST, `at most ${MAX_CHANGES_PER_REQUEST} changes per request`),
});

export const treeChangesResponse = z.object({
  applied: z.number().int(),
  results: z.array(z.object({ action: z.enum(['create', 'rename', 'move', 'update', 'delete']), node_id: z.string() })),
});

export const tagsQuery = z.object({
  search: z.string().max(64).optional().describe('Only tags containing this text (case-insensitive)'),
  ...pagingQuery.shape,
});

export const tagsResponse = z.object({ items: z.array(z.object({ tag: z.string(), count: z.number().int() })), total: z.number().int() });
