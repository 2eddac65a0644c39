/**
 * Device attributes: the legacy fields (name, description, location) and the custom key-value
 * pairs used in templating. Stored as one JSON object per device; read back with every legacy
 * field as a string.
 */
import type { DeviceAttributes, LegacyAttribute } from '../../shared/api-types.js';
import { isSingleLine } from '../../shared/text.js';

export const LEGACY_FIELDS = [
  'device_name',
  'description',
  'latitude',
  'longitude',
  'country',
  'city',
  'zip',
  'address',
] as const satisfies readonly LegacyAttribute[];
export type LegacyField = (typeof LEGACY_FIELDS)[number];

/** Longest value of a legacy string field (the spec leaves it open). */
export const LEGACY_MAX_LENGTH = 1024;
export const CUSTOM_KEY_MAX_LENGTH = 64;
export const CUSTOM_VALUE_MAX_LENGTH = 4096;

/** A decimal number as text: `52`, `-8.25`, `+0.5`, `.5`; no exponent, no spaces. */
const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)$/;
/** Keys are printable: no control characters; names that would alter an object's prototype are refused. */
const RESERVED_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

export type StoredAttributes = Partial<Record<LegacyField, string>> & { custom?: Record<string, string> };

export interface AttributesPatch {
  device_name?: string;
  description?: string;
  latitude?: string | number;
  longitude?: string | number;
  country?: string;
  city?: string;
  zip?: string;
  address?: string;
  custom?: Record<string, string>;
}

const text = (v: unknown): string => (typeof v === 'string' ? v : v === undefined || v === null ? '' : String(v));

/** The stored JSON, tolerant of missing or non-string values (older rows, hand edits). */
export function readAttributes(json: string | null | undefined): DeviceAttributes {
  let raw: Record<string, unknown> = {};
  try {
    const parsed: unknown = json ? JSON.parse(json) : {};
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) raw = parsed as Record<string, unknown>;
  } catch {
    raw = {};
  }
  // One literal shape for every record: the tree renders many thousands of these.
  return {
    device_name: text(raw.device_name),
    description: text(raw.description),
    latitude: text(raw.latitude),
    longitude: text(raw.longitude),
    country: text(raw.country),
    city: text(raw.city),
    zip: text(raw.zip),
    address: text(raw.address),
    custom: readCustom(raw.custom),
  };
}

function readCustom(custom: unknown): Record<string, string> {
  if (!custom || typeof custom !== 'object' || Array.isArray(custom)) return {};
  const source = custom as Record<string, unknown>;
  // Usually every value is a string already: the parsed object can be used as it is.
  let clean = true;
  for (const k in source) {
    if (typeof source[k] !== 'string' || RESERVED_KEYS.has(k)) {
      clean = false;
      break;
    }
  }
  if (clean) return source as Record<string, string>;
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(source)) if (!RESERVED_KEYS.has(k) && v !== undefined && v !== null) out[k] = String(v);
  return out;
}

/** What goes back into the store: empty legacy fields are left out. */
export function storedForm(attributes: DeviceAttributes): StoredAttributes {
  const out: StoredAttributes = {};
  for (const field of LEGACY_FIELDS) if (attributes[field] !== '') out[field] = attributes[field];
  out.custom = { ...attributes.custom };
  return out;
}

/** Why a coordinate is refused, or undefined when it is fine. `""` (clear) is fine. */
export function coordinateProblem(field: 'latitude' | 'longitude', value: string | number): string | undefined {
  const limit = field === 'latitude' ? 90 : 180;
  const expected = `must be a decimal number from -${limit} to ${limit}`;
  if (typeof value === 'number') return Number.isFinite(value) && Math.abs(value) <= limit ? undefined : expected;
  if (value === '') return undefined;
  if (value.length > 32 || !DECIMAL.test(value)) return expected;
  return Math.abs(Number(value)) <= limit ? undefined : expected;
}

/** Why a custom key is refused, or undefined. */
export function customKeyProblem(key: string): string | undefined {
  if (key.length === 0) return 'a custom key must not be empty';
  if (key.length > CUSTOM_KEY_MAX_LENGTH) return `custom key is longer than ${CUSTOM_KEY_MAX_LENGTH} characters`;
  if (!isSingleLine(key)) return 'custom key contains control characters or bidirectional formatting characters';
  if (RESERVED_KEYS.has(key)) return `"${key}" is reserved; choose another custom key`;
  return undefined;
}

/**
 * Why a custom key may not be set: one named like a legacy field (`latitude`) would be shown
 * twice, beside the field, and read as the same thing. Removing such a key ("") stays possible.
 */
export function legacyNameProblem(key: string): string | undefined {
  return (LEGACY_FIELDS as readonly string[]).includes(key) ? `"${key}" is a device field; set it there or choose another custom key` : undefined;
}

export class AttributeLimitError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Applies a PATCH: only the given keys change; `""` clears a legacy field or removes a custom
 * key. Field formats are checked by the request schema already; this checks what depends on the
 * stored record (the number of custom keys) and throws AttributeLimitError naming `custom`.
 * A device already above a lowered limit may still change or remove keys, just not add any.
 */
export function applyPatch(current: DeviceAttributes, patch: AttributesPatch, maxCustom: number): DeviceAttributes {
  const next: DeviceAttributes = { ...current, custom: { ...current.custom } };
  for (const field of LEGACY_FIELDS) {
    const v = patch[field];
    if (v !== undefined) next[field] = typeof v === 'number' ? String(v) : v;
  }
  if (patch.custom) {
    for (const [key, value] of Object.entries(patch.custom)) {
      if (value === '') delete next.custom[key];
      else next.custom[key] = value;
    }
    const before = Object.keys(current.custom).length;
    const after = Object.keys(next.custom).length;
    if (after > maxCustom && after > before) {
      throw new AttributeLimitError('custom', `A device holds at most ${maxCustom} custom attributes; this change would leave ${after}.`);
    }
  }
  return next;
}
