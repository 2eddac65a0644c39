/**
 * The Profile page's SSH keys: the caller's registered public keys (GET/POST/DELETE /ssh/keys),
 * which the SSH gateway accepts only when the operator turned SSH_USER_KEYS on.
 */
import { useEffect, useState } from 'preact/hooks';
import type { SshKeyRecord } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { ErrorBox, Field, useAction } from '../ui.js';

export function SshKeysPanel() {
  const [keys, setKeys] = useState<SshKeyRecord[] | null>(null);
  const [line, setLine] = useState('');
  const [comment, setComment] = useState('');
  const [loadError, setLoadError] = useState<unknown>(null);
  const add = useAction();
  const remove = useAction();
  const errors = add.error instanceof ApiFailure ? add.error.fieldErrors() : {};
  const reload = () =>
    api.get<{ items: SshKeyRecord[] }>('/ssh/keys').then(
      (answer) => setKeys(answer.items),
      (err: unknown) => setLoadError(err),
    );
  useEffect(() => {
    void reload();
  }, []);
  return (
    <section class="boxed" aria-labelledby="h-ssh-keys">
      <h2 id="h-ssh-keys">SSH keys</h2>
      <p class="muted small">
        Public keys you sign in to the SSH gateway with, besides the certificate of fleet login — only where the operator allows it (SSH_USER_KEYS). Ed25519,
        ECDSA or RSA of at least 2048 bits.
      </p>
      <ErrorBox error={loadError} />
      {keys && keys.length === 0 && <p data-testid="ssh-keys-none">No keys registered.</p>}
      {keys && keys.length > 0 && (
        <ul class="plain-list" data-testid="ssh-keys">
          {keys.map((k) => (
            <li key={k.key_id} data-testid="ssh-key">
              <code>{k.fingerprint}</code> {k.type}
              {k.comment && <> — {k.comment}</>} <span class="muted small">added {new Date(k.created_at).toLocaleDateString()}</span>{' '}
              <button
                type="button"
                class="danger"
                aria-label={`Remove key ${k.comment || k.fingerprint}`}
                disabled={remove.busy}
                onClick={() =>
                  void remove.run(async () => {
                    await api.del(`/ssh/keys/${encodeURIComponent(k.key_id)}`);
                    await reload();
                  })
                }
              >
                Remove
              </button>
            </li>
          ))}
        </ul>
      )}
      <ErrorBox error={remove.error} title="Key not removed" />
      <form
        aria-label="Add an SSH key"
        onSubmit={(e) => {
          e.preventDefault();
          void add.run(async () => {
            await api.post('/ssh/keys', { public_key: line.trim(), ...(comment.trim() ? { comment: comment.trim() } : {}) });
            setLine('');
            setComment('');
            await reload();
          });
        }}
      >
        <Field
          label="Public key"
          name="ssh-public-key"
          required
          placeholder="ssh-ed25519 AAAA… you@laptop"
          value={line}
          onInput={(e) => setLine(e.currentTarget.value)}
          error={errors.public_key}
        />
        <Field label="Comment (optional)" name="ssh-key-comment" value={comment} onInput={(e) => setComment(e.currentTarget.value)} error={errors.comment} />
        <ErrorBox error={add.error} title="Key not added" />
        <button type="submit" disabled={add.busy}>
          Add key
        </button>
      </form>
    </section>
  );
}
