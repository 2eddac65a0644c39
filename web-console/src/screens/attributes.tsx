/**
 * The attribute editor, with the spec's UI rules: legacy fields; custom attributes with a counter
 * "used / max"; an existing key cannot be edited, only its value; a row marked for deletion can
 * be restored before Save; nothing is persisted until Save, which sends one PATCH; errors from
 * the API's answer are shown at the field they name.
 */
import { useEffect, useState } from 'preact/hooks';
import type { AttributesRecord, DeviceAttributes, LegacyAttribute, NodeView } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { allowed } from '../areas.js';
import { guardLeaving, Link } from '../router.js';
import { AccessDenied, ErrorBox, Field, Loading, Notice, PageTitle, useLoad } from '../ui.js';

export const LEGACY_FIELDS = [
  { name: 'device_name', label: 'Name' },
  { name: 'description', label: 'Description' },
  { name: 'latitude', label: 'Latitude', hint: '-90 to 90' },
  { name: 'longitude', label: 'Longitude', hint: '-180 to 180' },
  { name: 'country', label: 'Country' },
  { name: 'city', label: 'City' },
  { name: 'zip', label: 'Zip code' },
  { name: 'address', label: 'Address' },
] as const satisfies readonly { name: LegacyAttribute; label: string; hint?: string }[];

export type LegacyField = (typeof LEGACY_FIELDS)[number]['name'];

export const KEY_MAX = 64;
export const VALUE_MAX = 4096;
/** The broker's limit for a legacy field's text. */
export const LEGACY_MAX = 1024;

/** Decimal degrees as the broker takes them: `52`, `-8.25`, `.5`; no exponent, no spaces. */
const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)$/;

/** The broker's checks of a legacy field, made here too so every mistake shows before Save. */
export function legacyProblem(field: LegacyField, value: string): string | undefined {
  if (value.length > LEGACY_MAX) return `At most ${LEGACY_MAX} characters.`;
  if ((field === 'latitude' || field === 'longitude') && value !== '') {
    const limit = field === 'latitude' ? 90 : 180;
    if (value.length > 32 || !DECIMAL.test(value) || Math.abs(Number(value)) > limit) return `A decimal number from -${limit} to ${limit}.`;
  }
  return undefined;
}

const LEGACY_NAMES = new Set<string>(LEGACY_FIELDS.map((f) => f.name));

interface Row {
  /** Stable id for rendering (keys of new rows change while typing). */
  uid: number;
  key: string;
  value: string;
  /** Exists on the device: its key is fixed. */
  existing: boolean;
  original?: string;
  deleted: boolean;
}

let nextUid = 1;

function rowsOf(custom: Record<string, string>): Row[] {
  return Object.entries(custom)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([key, value]) => ({ uid: nextUid++, key, value, original: value, existing: true, deleted: false }));
}

/** The PATCH body for the edits: changed legacy fields, changed/new custom keys, deletions as "". */
export function patchBody(original: DeviceAttributes, legacy: Record<LegacyField, string>, rows: Row[]): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const f of LEGACY_FIELDS) if ((legacy[f.name] ?? '') !== (original[f.name] ?? '')) body[f.name] = legacy[f.name];
  const custom: Record<string, string> = {};
  for (const r of rows) {
    if (r.existing && r.deleted) custom[r.key] = '';
    else if (r.existing && r.value !== r.original) custom[r.key] = r.value;
    else if (!r.existing && r.key.trim()) custom[r.key.trim()] = r.value;
  }
  if (Object.keys(custom).length) body.custom = custom;
  return body;
}

/**
 * What the browser can tell before asking the API: empty or duplicate keys, empty values, the
 * length limits, and keys named like a legacy field (the broker refuses those too).
 */
export function localProblems(rows: Row[]): Record<number, string> {
  const problems: Record<number, string> = {};
  const seen = new Set(rows.filter((r) => r.existing).map((r) => r.key));
  for (const r of rows) {
    if (r.existing) {
      if (r.deleted) continue;
      if (r.value === '') problems[r.uid] = 'Enter a value, or use Delete to remove this attribute.';
      else if (r.value.length > VALUE_MAX) problems[r.uid] = `A value holds at most ${VALUE_MAX} characters.`;
      continue;
    }
    const key = r.key.trim();
    if (!key && !r.value) continue;
    if (!key) problems[r.uid] = 'Enter a key.';
    else if (key.length > KEY_MAX) problems[r.uid] = `A key holds at most ${KEY_MAX} characters.`;
    else if (LEGACY_NAMES.has(key)) problems[r.uid] = `"${key}" is a device field above; set it there or choose another key.`;
    else if (seen.has(key)) problems[r.uid] = `The key "${key}" is used already.`;
    else if (r.value === '') problems[r.uid] = 'Enter a value.';
    else if (r.value.length > VALUE_MAX) problems[r.uid] = `A value holds at most ${VALUE_MAX} characters.`;
    seen.add(key);
  }
  return problems;
}

function legacyProblems(legacy: Record<LegacyField, string>): Partial<Record<LegacyField, string>> {
  const problems: Partial<Record<LegacyField, string>> = {};
  for (const f of LEGACY_FIELDS) {
    const problem = legacyProblem(f.name, legacy[f.name] ?? '');
    if (problem) problems[f.name] = problem;
  }
  return problems;
}

export function AttributesScreen({ deviceId }: { deviceId: string }) {
  const loaded = useLoad(() => api.get<AttributesRecord>(`/deviceattribute/${encodeURIComponent(deviceId)}`), [deviceId]);
  // The broker's hint (GET /node): a manager restricted to other groups gets no editor for this device.
  const node = useLoad(() => api.get<NodeView>(`/node/${encodeURIComponent(deviceId)}`).catch(() => null), [deviceId]);
  const [original, setOriginal] = useState<AttributesRecord | null>(null);
  const [legacy, setLegacy] = useState<Record<LegacyField, string>>({} as Record<LegacyField, string>);
  const [rows, setRows] = useState<Row[]>([]);
  const [failure, setFailure] = useState<unknown>();
  const [problems, setProblems] = useState<Record<number, string>>({});
  const [legacyErrors, setLegacyErrors] = useState<Partial<Record<LegacyField, string>>>({});
  const [saving, setSaving] = useState(false);
  const [saved, setSaved] = useState(false);

  function reset(record: AttributesRecord) {
    setOriginal(record);
    setLegacy(Object.fromEntries(LEGACY_FIELDS.map((f) => [f.name, record[f.name] ?? ''])) as Record<LegacyField, string>);
    setRows(rowsOf(record.custom ?? {}));
    setProblems({});
    setLegacyErrors({});
  }

  useEffect(() => {
    if (loaded.data) reset(loaded.data);
  }, [loaded.data]);

  const dirty = original !== null && Object.keys(patchBody(original, legacy, rows)).length > 0;
  // Closing or reloading the tab with unsaved edits asks first.
  useEffect(() => {
    if (!dirty) return;
    const warn = (e: BeforeUnloadEvent) => e.preventDefault();
    window.addEventListener('beforeunload', warn);
    // So does leaving for another page of the console.
    const unguard = guardLeaving(() => window.confirm('Leave without saving? Your changes to the attributes are lost.'));
    return () => {
      window.removeEventListener('beforeunload', warn);
      unguard();
    };
  }, [dirty]);

  if (!allowed('updateAttributes')) return <AccessDenied message="Changing attributes needs the device:manage permission." />;
  if (node.data?.can_manage === false)
    return <AccessDenied message="This device is outside your device:manage resources: its attributes cannot be changed by you." />;
  if (loaded.error) return <ErrorBox error={loaded.error} />;
  if (!original) return <Loading what="attributes" />;

  const body = patchBody(original, legacy, rows);
  const max = typeof original.custom_max === 'number' ? original.custom_max : null;
  const used = rows.filter((r) => !r.deleted && (r.existing || r.key.trim() !== '')).length;
  const open = rows.filter((r) => !r.deleted).length;
  const fieldErrors = failure instanceof ApiFailure ? failure.fieldErrors() : {};

  const customError = (r: Row): string | undefined => problems[r.uid] ?? fieldErrors[`custom.${r.key.trim()}`];

  const updateRow = (uid: number, change: Partial<Row>) => {
    setSaved(false);
    setRows((all) => all.map((r) => (r.uid === uid ? { ...r, ...change } : r)));
  };

  const save = async (e: Event) => {
    e.preventDefault();
    const local = localProblems(rows);
    const localLegacy = legacyProblems(legacy);
    setProblems(local);
    setLegacyErrors(localLegacy);
    setFailure(undefined);
    if (Object.keys(local).length || Object.keys(localLegacy).length || !dirty) return;
    setSaving(true);
    try {
      const answer = await api.patch<AttributesRecord | undefined>(`/deviceattribute/${encodeURIComponent(deviceId)}`, body);
      // The API answers with the whole record; keep the limit from the first read if it omits it.
      const record = answer && typeof answer === 'object' ? answer : await api.get<AttributesRecord>(`/deviceattribute/${encodeURIComponent(deviceId)}`);
      reset({ ...record, custom_max: record.custom_max ?? original.custom_max });
      setSaved(true);
    } catch (err) {
      setFailure(err);
    } finally {
      setSaving(false);
    }
  };

  return (
    <section>
      <PageTitle actions={<Link href={`/devices/${deviceId}`}>Back to the device</Link>}>Edit attributes</PageTitle>
      <p class="muted">
        Device <code>{deviceId}</code>. Changes are kept here until you press Save.
      </p>
      <form onSubmit={save} aria-label="Device attributes" class="attributes-form" noValidate>
        <fieldset>
          <legend>Device details</legend>
          <div class="grid-2">
            {LEGACY_FIELDS.map((f) => (
              <Field
                key={f.name}
                label={f.label}
                name={f.name}
                value={legacy[f.name]}
                hint={'hint' in f ? f.hint : undefined}
                error={legacyErrors[f.name] ?? fieldErrors[f.name]}
                inputMode={f.name === 'latitude' || f.name === 'longitude' ? 'decimal' : undefined}
                onInput={(e) => {
                  setSaved(false);
                  setLegacy({ ...legacy, [f.name]: e.currentTarget.value });
                }}
              />
            ))}
          </div>
        </fieldset>

        <fieldset>
          <legend>Custom attributes</legend>
          <p class="counter" data-testid="custom-counter" aria-live="polite">
            {used} / {max ?? '?'} custom attributes in use
          </p>
          {fieldErrors.custom && (
            <p class="field-error" role="alert">
              {fieldErrors.custom}
            </p>
          )}
          <div class="custom-rows" role="list">
            {rows.map((r) => {
              const error = customError(r);
              return (
                <div role="listitem" key={r.uid} class={`custom-row${r.deleted ? ' deleted' : ''}${error ? ' has-error' : ''}`} data-key={r.key}>
                  {r.existing ? (
                    <div class="field">
                      <label for={`ck-${r.uid}`}>Key</label>
                      <input
                        id={`ck-${r.uid}`}
                        value={r.key}
                        readOnly
                        aria-readonly="true"
                        class="readonly"
                        title="The key of an existing attribute cannot be changed"
                      />
                    </div>
                  ) : (
                    <div class="field">
                      <label for={`ck-${r.uid}`}>New key</label>
                      <input
                        id={`ck-${r.uid}`}
                        value={r.key}
                        maxLength={KEY_MAX * 4}
                        onInput={(e) => updateRow(r.uid, { key: e.currentTarget.value })}
                        aria-invalid={error ? 'true' : undefined}
                      />
                    </div>
                  )}
                  <div class="field grow">
                    <label for={`cv-${r.uid}`}>Value</label>
                    <input
                      id={`cv-${r.uid}`}
                      value={r.value}
                      disabled={r.deleted}
                      onInput={(e) => updateRow(r.uid, { value: e.currentTarget.value })}
                      aria-invalid={error ? 'true' : undefined}
                      aria-describedby={error ? `ce-${r.uid}` : undefined}
                    />
                  </div>
                  <div class="row-actions">
                    {r.existing && !r.deleted && (
                      <button type="button" class="danger" onClick={() => updateRow(r.uid, { deleted: true })} aria-label={`Delete ${r.key}`}>
                        Delete
                      </button>
                    )}
                    {r.existing && r.deleted && (
                      <button type="button" onClick={() => updateRow(r.uid, { deleted: false })} aria-label={`Undo delete of ${r.key}`}>
                        Undo
                      </button>
                    )}
                    {!r.existing && (
                      <button
                        type="button"
                        onClick={() => {
                          setSaved(false);
                          setRows((all) => all.filter((x) => x.uid !== r.uid));
                        }}
                        aria-label={`Remove new row ${r.key}`}
                      >
                        Remove
                      </button>
                    )}
                  </div>
                  {r.deleted && <small class="muted row-note">Marked for deletion; removed when you save.</small>}
                  {error && (
                    <small id={`ce-${r.uid}`} class="field-error row-note" role="alert">
                      {error}
                    </small>
                  )}
                </div>
              );
            })}
          </div>
          <button
            type="button"
            disabled={max !== null && open >= max}
            onClick={() => {
              setSaved(false);
              const uid = nextUid++;
              setRows((all) => [...all, { uid, key: '', value: '', existing: false, deleted: false }]);
              setTimeout(() => (document.getElementById(`ck-${uid}`) as HTMLInputElement | null)?.focus());
            }}
          >
            Add custom attribute
          </button>
          {max !== null && open >= max && <small class="muted"> The maximum of {max} is reached.</small>}
        </fieldset>

        {/* Refused fields are shown at the field; the box says only that and how many. */}
        {Object.keys(fieldErrors).length > 0 ? (
          <div class="error-box" role="alert">
            <strong>The attributes were not saved</strong>
            <p>
              {Object.keys(fieldErrors).length === 1 ? 'One field needs' : `${Object.keys(fieldErrors).length} fields need`} a change: see the marked{' '}
              {Object.keys(fieldErrors).length === 1 ? 'field' : 'fields'}.
            </p>
          </div>
        ) : (
          <ErrorBox error={failure} title="The attributes were not saved" />
        )}
        {saved && !dirty && <Notice>Saved.</Notice>}
        <div class="button-row sticky-actions">
          <button type="submit" class="primary" disabled={saving || !dirty}>
            {saving ? 'Saving…' : 'Save'}
          </button>
          <button type="button" disabled={saving || !dirty} onClick={() => reset(original)}>
            Discard changes
          </button>
          {dirty && <span class="muted">Unsaved changes</span>}
        </div>
      </form>
    </section>
  );
}
