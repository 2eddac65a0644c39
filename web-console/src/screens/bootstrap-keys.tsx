/** Bootstrap keys: what a device presents to enrol, the group it lands in, and whether it is accepted at once. */
import { useState } from 'preact/hooks';
import type { BootstrapKeyEntry, GroupTree, GroupTreeNode } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { allowed } from '../areas.js';
import { ConfirmButton, CopyButton, ErrorBox, formatTime, ListTable, Notice, PageTitle, useAction, useLoad } from '../ui.js';

/**
 * A key as the screen shows it: the shared list entry under its key (the map's own key), with
 * `created_at` and `devices` left out of POST /bootstrapkey's shorter answer.
 */
type BootstrapKey = Pick<BootstrapKeyEntry, 'group_id' | 'auto_accept' | 'label' | 'expires_at' | 'expired' | 'devices'> &
  Partial<Pick<BootstrapKeyEntry, 'created_at'>> & { key: string };

/**
 * The one line that installs an edge agent on a device and enrols it with this key against this
 * broker (GET /install.sh). The key goes in on standard input (printf is a shell builtin): never on
 * a command line, which sudo logs and ps shows.
 */
export function installCommand(key: string, broker: string): string {
  return `curl -fsSL ${broker.replace(/\/+$/, '')}/install.sh -o fleet-install.sh && printf '%s\\n' '${key}' | sudo sh fleet-install.sh --bootstrap-key-stdin`;
}

const AUTO_ACCEPT_WARNING = 'Every device that presents this key joins the fleet at once, without approval. Keep the key secret.';

function InstallCommand({ bootstrapKey }: { bootstrapKey: string }) {
  const line = installCommand(bootstrapKey, location.origin);
  return (
    <div class="install-command">
      <pre data-testid="install-command">{line}</pre>
      <CopyButton text={line} label="Copy install command" />
    </div>
  );
}

/**
 * GET /bootstrapkeylist and GET /bootstrapkey/{key} answer a map `{<key>: {group_id, auto_accept, key_id, created_at}}`
 * (qbee's shape); readers without bootstrap-keys:manage get it keyed by `key_id`, the key itself left out.
 */
export function keysOf(answer: unknown): BootstrapKey[] {
  if (!answer || typeof answer !== 'object' || Array.isArray(answer)) return [];
  // POST /bootstrapkey answers a shorter entry (no key_id, created_at, devices): every field may be missing.
  return Object.entries(answer as Record<string, Partial<BootstrapKeyEntry>>)
    .filter(([, v]) => v && typeof v === 'object')
    .map(([key, v]) => ({
      key,
      group_id: String(v.group_id ?? ''),
      auto_accept: Boolean(v.auto_accept),
      created_at: v.created_at,
      label: typeof v.label === 'string' ? v.label : '',
      expires_at: typeof v.expires_at === 'string' ? v.expires_at : null,
      expired: Boolean(v.expired),
      devices: typeof v.devices === 'number' ? v.devices : undefined,
    }));
}

/** Lifetimes offered for a key: '' never expires, else hours from now. */
export const EXPIRY_CHOICES: { value: string; label: string }[] = [
  { value: '', label: 'Never' },
  { value: '1', label: 'In 1 hour' },
  { value: '24', label: 'In 1 day' },
  { value: '168', label: 'In 7 days' },
  { value: '720', label: 'In 30 days' },
];

/** The expires_at the API takes for a choice of EXPIRY_CHOICES (null: never). */
export function expiryFrom(choice: string, now = Date.now()): string | null {
  const hours = Number(choice);
  return choice && hours > 0 ? new Date(now + hours * 3600_000).toISOString() : null;
}

function Expiry({ k }: { k: BootstrapKey }) {
  if (!k.expires_at) return <span class="muted">never</span>;
  if (k.expired)
    return (
      <span class="badge denied" title={`Expired ${formatTime(k.expires_at)}: enrols nothing`}>
        expired {formatTime(k.expires_at)}
      </span>
    );
  return <span>{formatTime(k.expires_at)}</span>;
}

export function groupsOf(node: GroupTreeNode | undefined, depth = 0): { node_id: string; label: string }[] {
  if (!node || node.type !== 'group') return [];
  return [
    { node_id: node.node_id, label: `${'  '.repeat(depth)}${node.title} (${node.node_id})` },
    ...(node.nodes ?? []).flatMap((c) => groupsOf(c, depth + 1)),
  ];
}

/**
 * A key's group: a list of the tree's groups once it has loaded, a disabled list saying so while it
 * loads, and a field for a group's id where the tree could not be read.
 */
function GroupSelect({
  id,
  value,
  groups,
  loading,
  onChange,
}: {
  id: string;
  value: string;
  groups: { node_id: string; label: string }[];
  loading: boolean;
  onChange: (v: string) => void;
}) {
  if (loading)
    return (
      <select id={id} disabled aria-busy="true">
        <option>Loading groups…</option>
      </select>
    );
  if (!groups.length) return <input id={id} value={value} onInput={(e) => onChange(e.currentTarget.value)} placeholder="group node id" />;
  return (
    <select id={id} value={value} onChange={(e) => onChange(e.currentTarget.value)}>
      {!groups.some((g) => g.node_id === value) && <option value={value}>{value}</option>}
      {groups.map((g) => (
        <option key={g.node_id} value={g.node_id}>
          {g.label}
        </option>
      ))}
    </select>
  );
}

export function BootstrapKeysScreen() {
  const list = useLoad(() => api.get('/bootstrapkeylist').then(keysOf), []);
  const tree = useLoad(() => api.get<GroupTree>('/grouptree').catch(() => null), []);
  const groups = groupsOf(tree.data?.tree ?? undefined);
  const manage = allowed('bootstrapKeysManage');
  const action = useAction();
  const [created, setCreated] = useState<BootstrapKey | null>(null);
  const [draft, setDraft] = useState({ group_id: 'unassigned_group', auto_accept: false, label: '', expiry: '' });
  /** A key that accepts automatically is asked about first: on creation, and when turned on. */
  const [confirming, setConfirming] = useState<{ question: string; yes: string; run: () => void } | null>(null);

  const create = (e: Event) => {
    e.preventDefault();
    if (draft.auto_accept && !confirming) {
      setConfirming({ question: `Create a key that accepts devices automatically? ${AUTO_ACCEPT_WARNING}`, yes: 'Yes, create key', run: createNow });
      return;
    }
    createNow();
  };
  const createNow = () => {
    setConfirming(null);
    void action.run(async () => {
      const answer = await api.post('/bootstrapkey', {
        group_id: draft.group_id,
        auto_accept: draft.auto_accept,
        label: draft.label.trim(),
        ...(draft.expiry ? { expires_at: expiryFrom(draft.expiry) } : {}),
      });
      setCreated(keysOf(answer)[0] ?? null);
      list.reload();
    });
  };
  /** Sends only what changed: the other fields stay as the broker has them. */
  const update = (k: BootstrapKey, change: Partial<Pick<BootstrapKey, 'group_id' | 'auto_accept' | 'label' | 'expires_at'>>) =>
    void action.run(async () => {
      await api.put(`/bootstrapkey/${encodeURIComponent(k.key)}`, change);
      list.reload();
    });

  return (
    <section>
      <PageTitle>Bootstrap keys</PageTitle>
      <p class="muted">
        A device enrols with a bootstrap key. It joins the key's group, at once when the key accepts automatically, else after approval under Pending hosts.
      </p>
      <ErrorBox error={list.error} />
      <ErrorBox error={action.error} title="The request failed" />
      {created && (
        <>
          <Notice>
            New key <code>{created.key}</code> <CopyButton text={created.key} label="Copy key" />
          </Notice>
          <p>On the device, in a checkout of this project, run:</p>
          <InstallCommand bootstrapKey={created.key} />
        </>
      )}
      {confirming && (
        <div class="confirm boxed" role="group" aria-label="Confirm automatic accept">
          <p>{confirming.question}</p>
          <button type="button" class="danger" onClick={confirming.run}>
            {confirming.yes}
          </button>
          <button type="button" onClick={() => setConfirming(null)}>
            Cancel
          </button>
        </div>
      )}
      {manage && (
        <form class="inline-form boxed" onSubmit={create} aria-label="New bootstrap key">
          <div class="field">
            <label for="bk-label">Label</label>
            <input
              id="bk-label"
              maxLength={100}
              value={draft.label}
              placeholder="e.g. rack 4, spring batch"
              onInput={(e) => setDraft({ ...draft, label: e.currentTarget.value })}
            />
          </div>
          <div class="field">
            <label for="bk-expiry">Expires</label>
            <select id="bk-expiry" value={draft.expiry} onChange={(e) => setDraft({ ...draft, expiry: e.currentTarget.value })}>
              {EXPIRY_CHOICES.map((c) => (
                <option key={c.value} value={c.value}>
                  {c.label}
                </option>
              ))}
            </select>
          </div>
          <div class="field">
            <label for="bk-group">Group</label>
            <GroupSelect
              id="bk-group"
              value={draft.group_id}
              groups={groups}
              loading={tree.loading}
              onChange={(group_id) => setDraft({ ...draft, group_id })}
            />
          </div>
          <label class="check">
            <input type="checkbox" checked={draft.auto_accept} onChange={(e) => setDraft({ ...draft, auto_accept: e.currentTarget.checked })} /> Accept devices
            automatically
          </label>
          <button type="submit" class="primary" disabled={action.busy}>
            Create key
          </button>
        </form>
      )}
      <ListTable
        items={list.data}
        loading={list.loading}
        what="bootstrap keys"
        empty="No bootstrap keys yet."
        columns={['Label', 'Key', 'Group', 'Automatic accept', 'Devices', 'Expires', 'Created', manage && 'Actions']}
        row={(k) => (
          <tr key={k.key} class={k.expired ? 'expired' : undefined}>
            <td>
              {manage ? (
                <input
                  class="key-label"
                  aria-label={`Label of key ${k.key}`}
                  maxLength={100}
                  value={k.label}
                  placeholder="no label"
                  onChange={(e) => {
                    const label = e.currentTarget.value.trim();
                    if (label !== k.label) update(k, { label });
                  }}
                />
              ) : (
                k.label
              )}
            </td>
            <td>
              <code class="key">{k.key}</code> <CopyButton text={k.key} />
              {manage && (
                <details>
                  <summary>Install command</summary>
                  <InstallCommand bootstrapKey={k.key} />
                </details>
              )}
            </td>
            <td>
              {manage ? (
                <GroupSelect id={`bk-g-${k.key}`} value={k.group_id} groups={groups} loading={tree.loading} onChange={(group_id) => update(k, { group_id })} />
              ) : (
                <code>{k.group_id}</code>
              )}
            </td>
            <td>
              {manage ? (
                <label class="check">
                  <input
                    type="checkbox"
                    checked={k.auto_accept}
                    onChange={(e) => {
                      if (!e.currentTarget.checked) return update(k, { auto_accept: false });
                      // Stays off until confirmed.
                      e.currentTarget.checked = false;
                      setConfirming({
                        question: `Turn on automatic accept for this key? ${AUTO_ACCEPT_WARNING}`,
                        yes: 'Yes, accept automatically',
                        run: () => {
                          setConfirming(null);
                          update(k, { auto_accept: true });
                        },
                      });
                    }}
                  />{' '}
                  automatic
                </label>
              ) : k.auto_accept ? (
                'yes'
              ) : (
                'no'
              )}
            </td>
            <td>{k.devices ?? ''}</td>
            <td>
              <Expiry k={k} />
              {manage && (
                <select
                  aria-label={`Change expiry of key ${k.key}`}
                  value="keep"
                  onChange={(e) => {
                    const choice = e.currentTarget.value;
                    e.currentTarget.value = 'keep';
                    if (choice !== 'keep') update(k, { expires_at: expiryFrom(choice) });
                  }}
                >
                  <option value="keep">Change…</option>
                  {EXPIRY_CHOICES.map((c) => (
                    <option key={c.value} value={c.value}>
                      {c.value ? `Expire ${c.label.toLowerCase()}` : 'Never expire'}
                    </option>
                  ))}
                </select>
              )}
            </td>
            <td>{formatTime(k.created_at)}</td>
            {manage && (
              <td class="actions-cell">
                <ConfirmButton
                  label="Delete"
                  question="Delete this key? Devices can no longer enrol with it."
                  onConfirm={() =>
                    void action.run(async () => {
                      await api.del(`/bootstrapkey/${encodeURIComponent(k.key)}`);
                      list.reload();
                    })
                  }
                />
              </td>
            )}
          </tr>
        )}
      />
    </section>
  );
}
