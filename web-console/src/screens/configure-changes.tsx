/** The staged configuration changes: each with its diff, discarded, or committed with a message. */
import { useState } from 'preact/hooks';
import type { ConfigCommit } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { allowed } from '../areas.js';
import { editable, lineDiff, pretty } from '../config-forms.js';
import { Link } from '../router.js';
import { ErrorBox, formatTime, Loading, useAction, useLoad } from '../ui.js';
import { entityHref, loadConfig, type Change, type EntityType } from './configure-model.js';

// ---- staged changes: diff, discard, commit ----

function Diff({ before, after }: { before: string; after: string }) {
  const lines = lineDiff(before, after);
  return (
    <pre class="diff" data-testid="diff">
      {lines.map((l, i) => (
        <span key={i} class={l.op === '+' ? 'add' : l.op === '-' ? 'del' : ''}>
          {l.op} {l.text}
          {'\n'}
        </span>
      ))}
    </pre>
  );
}

function ChangeDiff({ change }: { change: Change }) {
  const type: EntityType = change.content.tag ? 'tag' : 'node';
  const id = (change.content.tag ?? change.content.node_id) as string;
  const committed = useLoad(() => loadConfig('config', type, id, 'own').catch(() => null), [type, id, change.sha]);
  if (committed.loading && !committed.data) return <Loading what="the committed state" />;
  const before = committed.data?.config.bundle_data[change.content.formtype];
  const beforeText = before ? pretty({ ...editable(before), extend: before.extend === true }) : '';
  const after = change.content.config.reset_to_group === true ? '' : pretty({ ...editable(change.content.config), extend: change.content.extend });
  return <Diff before={beforeText} after={after} />;
}

export function StagedChanges({ changes, names, onChanged }: { changes: Change[]; names: Map<string, string>; onChanged: (text: string) => void }) {
  const [message, setMessage] = useState('');
  const [messageError, setMessageError] = useState('');
  const action = useAction();
  const mayEdit = allowed('configureModify');
  const commit = (e: Event) => {
    e.preventDefault();
    if (!message.trim()) {
      setMessageError('Say what the commit does.');
      return;
    }
    setMessageError('');
    void action.run(async () => {
      const r = await api.post<ConfigCommit>('/commit', { action: 'commit', message: message.trim() });
      setMessage('');
      onChanged(`Committed ${changes.length} change${changes.length === 1 ? '' : 's'} (${r.sha.slice(0, 12)}): connected devices apply it now.`);
    });
  };
  return (
    <section class="panel" aria-labelledby="h-staged" data-testid="staged-changes">
      <div class="panel-head">
        <h2 id="h-staged">Staged changes ({changes.length})</h2>
        {mayEdit && changes.length > 0 && (
          <button
            type="button"
            class="small"
            disabled={action.busy}
            onClick={() =>
              void action.run(async () => {
                await api.del('/changes');
                onChanged('All staged changes discarded.');
              })
            }
          >
            Discard all
          </button>
        )}
      </div>
      {changes.length === 0 && <p class="muted">No staged changes. Changes you stage are yours until you commit them.</p>}
      <ul class="changes">
        {changes.map((c) => {
          const type: EntityType = c.content.tag ? 'tag' : 'node';
          const id = (c.content.tag ?? c.content.node_id) as string;
          return (
            <li key={c.sha} class="change" data-testid={`change-${c.content.formtype}`}>
              <div class="change-head">
                <Link href={entityHref(type, id, c.content.formtype)}>
                  <strong>{c.content.formtype}</strong> of {type === 'tag' ? `tag ${id}` : (names.get(id) ?? id)}
                </Link>
                <span class="muted small">
                  {c.content.config.reset_to_group === true ? 'reset to inherited' : c.content.extend ? 'extends' : 'replaces'} · {formatTime(c.created)}
                </span>
                {mayEdit && (
                  <button
                    type="button"
                    class="small"
                    aria-label={`Discard the ${c.content.formtype} change`}
                    disabled={action.busy}
                    onClick={() =>
                      void action.run(async () => {
                        await api.del(`/change/${c.sha}`);
                        onChanged(`${c.content.formtype} change discarded.`);
                      })
                    }
                  >
                    Discard
                  </button>
                )}
              </div>
              <ChangeDiff change={c} />
            </li>
          );
        })}
      </ul>
      {mayEdit && changes.length > 0 && (
        <form class="inline-form" onSubmit={commit}>
          <div class={`field grow${messageError ? ' has-error' : ''}`}>
            <label for="cfg-message">Commit message</label>
            <input
              id="cfg-message"
              value={message}
              maxLength={1000}
              onInput={(e) => setMessage(e.currentTarget.value)}
              aria-invalid={messageError ? 'true' : undefined}
            />
            {messageError && (
              <small class="field-error" role="alert">
                {messageError}
              </small>
            )}
          </div>
          <button type="submit" class="primary" disabled={action.busy}>
            Commit
          </button>
        </form>
      )}
      <ErrorBox error={action.error} />
    </section>
  );
}
