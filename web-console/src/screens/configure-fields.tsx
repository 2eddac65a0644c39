/**
 * The form of a bundle in the Configure area: one field editor per field spec, and the suggestions
 * it offers (the file store's files, a device's users and listening ports).
 */
import { api } from '../api.js';
import { isObject, newItem, type FieldSpec, type Json, type JsonObject } from '../config-forms.js';
import { useLoad } from '../ui.js';

// ---- the form of a bundle ----

/** The datalist of the file store's files offered for file sources (the spec's "Configure, File selector", files:read). */
export const FILE_LIST_ID = 'cfg-store-files';

export function FileStoreList() {
  const files = useLoad(
    () =>
      api
        .get<{ items: { path: string; is_dir: boolean }[] }>('/files', { search: JSON.stringify({ path: '^/.*' }), items_per_page: 1000, sort_field: 'path' })
        .then((r) => r.items.filter((f) => !f.is_dir).map((f) => f.path))
        .catch(() => [] as string[]),
    [],
  );
  return (
    <datalist id={FILE_LIST_ID}>
      {(files.data ?? []).map((p) => (
        <option key={p} value={p} />
      ))}
    </datalist>
  );
}

/**
 * The spec's "Configure, User and Ports popups" (inventory:read): on a device, its users and listening
 * ports from its inventory, offered as suggestions in the user name and destination port fields.
 */
export const INVENTORY_LIST_ID = { users: 'cfg-device-users', ports: 'cfg-device-ports' } as const;

function portOf(socket: unknown): string {
  const m = typeof socket === 'string' ? /:(\d+)$/.exec(socket) : null;
  return m ? m[1] : '';
}

export function DeviceInventoryLists({ deviceId }: { deviceId: string }) {
  const lists = useLoad(async () => {
    const get = (itemType: 'users' | 'ports') =>
      api
        .get<{ items?: Record<string, unknown>[] }>(`/inventoryreport/${encodeURIComponent(deviceId)}`, { item_type: itemType, items_per_page: 1000 })
        .then((r) => r.items ?? [])
        .catch(() => []);
    const [users, ports] = await Promise.all([get('users'), get('ports')]);
    return {
      users: [...new Set(users.map((u) => String(u.user ?? '')).filter(Boolean))],
      ports: [...new Set(ports.map((p) => portOf(p.socket)).filter(Boolean))].sort((a, b) => Number(a) - Number(b)),
    };
  }, [deviceId]);
  return (
    <>
      <datalist id={INVENTORY_LIST_ID.users}>
        {(lists.data?.users ?? []).map((u) => (
          <option key={u} value={u} />
        ))}
      </datalist>
      <datalist id={INVENTORY_LIST_ID.ports}>
        {(lists.data?.ports ?? []).map((p) => (
          <option key={p} value={p} />
        ))}
      </datalist>
    </>
  );
}

function getAt(value: JsonObject, key: string): Json | undefined {
  return value[key];
}

export function FieldEditor({
  field,
  value,
  onChange,
  errors,
  path,
  disabled,
}: {
  field: FieldSpec;
  value: Json | undefined;
  onChange: (v: Json) => void;
  errors: Record<string, string>;
  path: string;
  disabled: boolean;
}) {
  const id = `cfg-${path.replace(/\./g, '-')}`;
  const error = errors[path];
  const help = field.help && <small class="hint">{field.help}</small>;
  const err = error && (
    <small class="field-error" role="alert">
      {error}
    </small>
  );
  switch (field.kind) {
    case 'bool': {
      // Not set (absent: the agent's default or what is inherited) is neither on nor off: the box
      // shows a dash and the word says so.
      const state = value === true ? 'on' : value === false ? 'off' : 'not set';
      return (
        <div class="field bool-field">
          <label class="check">
            <input
              id={id}
              type="checkbox"
              checked={value === true}
              ref={(el) => {
                if (el) el.indeterminate = value !== true && value !== false;
              }}
              disabled={disabled}
              onChange={(e) => onChange(e.currentTarget.checked)}
            />
            <span>{field.label}</span>
            <span class={`bool-state ${state === 'not set' ? 'unset' : state}`} data-testid={`state-${path}`}>
              {state}
            </span>
          </label>
          {help}
        </div>
      );
    }
    case 'select':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          <select id={id} value={typeof value === 'string' ? value : field.options[0]} disabled={disabled} onChange={(e) => onChange(e.currentTarget.value)}>
            {field.options.map((o) => (
              <option key={o} value={o}>
                {o}
              </option>
            ))}
          </select>
          {help}
          {err}
        </div>
      );
    case 'number':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          <input
            id={id}
            type="number"
            min={field.min}
            max={field.max}
            value={typeof value === 'number' ? value : ''}
            disabled={disabled}
            aria-invalid={error ? 'true' : undefined}
            onInput={(e) => {
              const raw = e.currentTarget.value;
              onChange(raw === '' ? null : Number(raw));
            }}
          />
          {help}
          {err}
        </div>
      );
    case 'text':
    case 'secret':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          {field.kind === 'secret' ? (
            <input
              id={id}
              type="password"
              autocomplete="new-password"
              value={typeof value === 'string' ? value : ''}
              disabled={disabled}
              aria-invalid={error ? 'true' : undefined}
              onInput={(e) => onChange(e.currentTarget.value)}
            />
          ) : (
            <input
              id={id}
              type="text"
              autocomplete="off"
              list={field.fileStore ? FILE_LIST_ID : field.fromInventory ? INVENTORY_LIST_ID[field.fromInventory] : undefined}
              placeholder={field.placeholder}
              value={typeof value === 'string' ? value : value === undefined || value === null ? '' : String(value)}
              disabled={disabled}
              aria-invalid={error ? 'true' : undefined}
              onInput={(e) => onChange(e.currentTarget.value)}
            />
          )}
          {help}
          {err}
        </div>
      );
    case 'strings':
      return (
        <div class={`field${error ? ' has-error' : ''}`}>
          <label for={id}>{field.label}</label>
          <textarea
            id={id}
            rows={3}
            value={Array.isArray(value) ? value.join('\n') : ''}
            disabled={disabled}
            aria-invalid={error ? 'true' : undefined}
            onInput={(e) =>
              onChange(
                e.currentTarget.value
                  .split('\n')
                  .map((s) => s.trim())
                  .filter(Boolean),
              )
            }
          />
          {help}
          {err}
        </div>
      );
    case 'object': {
      const obj = isObject(value) ? value : {};
      return (
        <fieldset class="config-object">
          <legend>{field.label}</legend>
          {help}
          {field.fields.map((f) => (
            <FieldEditor
              key={f.key}
              field={f}
              value={getAt(obj, f.key)}
              path={`${path}.${f.key}`}
              errors={errors}
              disabled={disabled}
              onChange={(v) => onChange({ ...obj, [f.key]: v })}
            />
          ))}
        </fieldset>
      );
    }
    case 'list': {
      const list = Array.isArray(value) ? value : [];
      return (
        <fieldset class="config-list">
          <legend>{field.label}</legend>
          {help}
          {list.map((item, i) => {
            const obj = isObject(item) ? item : {};
            return (
              <div class="config-item" key={i} data-testid={`${path}.${i}`}>
                <div class="config-item-fields">
                  {field.fields.map((f) => (
                    <FieldEditor
                      key={f.key}
                      field={f}
                      value={getAt(obj, f.key)}
                      path={`${path}.${i}.${f.key}`}
                      errors={errors}
                      disabled={disabled}
                      onChange={(v) => onChange(list.map((x, j) => (j === i ? { ...obj, [f.key]: v } : x)))}
                    />
                  ))}
                </div>
                {!disabled && (
                  <button
                    type="button"
                    class="small"
                    aria-label={`Remove ${field.itemLabel} ${i + 1}`}
                    onClick={() => onChange(list.filter((_, j) => j !== i))}
                  >
                    Remove
                  </button>
                )}
              </div>
            );
          })}
          {list.length === 0 && <p class="muted small">None.</p>}
          {!disabled && (
            <button type="button" class="small" onClick={() => onChange([...list, newItem(field.fields)])}>
              Add {field.itemLabel}
            </button>
          )}
        </fieldset>
      );
    }
    default:
      return null;
  }
}
