/**
 * Approving a command-line sign-in (OAuth 2.0 device authorization): the terminal shows a code,
 * the signed-in user enters or confirms it here, checks where the request comes from, and
 * approves (the terminal gets a session of theirs) or declines.
 */
import { useState } from 'preact/hooks';
import type { PendingSignIn } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { useLocation } from '../router.js';
import { ErrorBox, Notice, PageTitle, useAction } from '../ui.js';

export function CliLoginScreen() {
  const { query } = useLocation();
  const [code, setCode] = useState(query.get('code') ?? '');
  const [found, setFound] = useState<PendingSignIn | null>(null);
  const [done, setDone] = useState('');
  const action = useAction();
  const path = (c: string) => `/oauth2/device-auth/${encodeURIComponent(c.trim())}`;

  const lookUp = (e: Event) => {
    e.preventDefault();
    setDone('');
    void action.run(async () => setFound(await api.get<PendingSignIn>(path(code))));
  };
  const decide = (approve: boolean) =>
    void action.run(async () => {
      if (!found) return;
      if (approve) await api.post(path(found.user_code));
      else await api.del(path(found.user_code));
      setDone(approve ? `Approved: the terminal showing ${found.user_code} is now signed in as you.` : `Declined ${found.user_code}.`);
      setFound(null);
      setCode('');
    });

  return (
    <section>
      <PageTitle>Command-line sign-in</PageTitle>
      <p class="muted">
        Enter the code your terminal shows (fleet login, qbee-cli login). Approve only a code you see in your own terminal: that program gets your permissions.
      </p>
      <ErrorBox error={action.error} title="The request failed" />
      {done && <Notice>{done}</Notice>}
      <form class="inline-form boxed" onSubmit={lookUp} aria-label="Find a sign-in request">
        <div class="field">
          <label for="cli-code">Code</label>
          <input id="cli-code" value={code} onInput={(e) => setCode(e.currentTarget.value)} placeholder="BCDF-GHJK" autoComplete="off" />
        </div>
        <button type="submit" disabled={action.busy || !code.trim()}>
          Look up
        </button>
      </form>
      {found && (
        <div class="boxed" aria-label="Pending sign-in">
          <p>
            Code <code>{found.user_code}</code> was requested from <code>{found.client_ip}</code> by <code>{found.user_agent || 'an unnamed client'}</code>; it
            expires in {Math.ceil(found.expires_in / 60)} min.
          </p>
          <button type="button" onClick={() => decide(true)} disabled={action.busy}>
            Approve
          </button>{' '}
          <button type="button" onClick={() => decide(false)} disabled={action.busy}>
            Decline
          </button>
        </div>
      )}
    </section>
  );
}
