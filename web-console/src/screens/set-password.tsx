/**
 * The page of a welcome or reset link (`/set-password?token=…`): choose a password, then sign in.
 * Reachable without a session.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, request } from '../api.js';
import { Link, useLocation, withQuery } from '../router.js';
import { ErrorBox, Field, Notice } from '../ui.js';

export function SetPasswordScreen() {
  const { query } = useLocation();
  const token = query.get('token') ?? '';
  const [password, setPassword] = useState('');
  const [repeat, setRepeat] = useState('');
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const [done, setDone] = useState<string | null>(null);
  useEffect(() => {
    document.title = 'Set your password · Fleet console';
  }, []);
  const fieldErrors = error instanceof ApiFailure ? error.fieldErrors() : {};
  const mismatch = repeat !== '' && repeat !== password;

  const submit = async (e: Event) => {
    e.preventDefault();
    if (mismatch) return;
    setBusy(true);
    setError(undefined);
    try {
      const answer = await request<{ email: string }>('POST', '/password/set', { anonymous: true, body: { token, password } });
      setDone(answer.email);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div class="login">
      <div class="login-card">
        <h1>Set your password</h1>
        {!token && <ErrorBox error={new ApiFailure(400, 'invalid_link', 'This link has no token. Open the link from the mail again, or ask for a new one.')} />}
        {done ? (
          <>
            <Notice>Your password is set.</Notice>
            <Link href={withQuery('/login', { email: done })} class="button primary">
              Sign in
            </Link>
          </>
        ) : (
          token && (
            <form onSubmit={submit}>
              <ErrorBox error={fieldErrors.token ? error : undefined} title="The link cannot be used" />
              <Field
                label="New password"
                name="sp-password"
                type="password"
                autocomplete="new-password"
                required
                value={password}
                onInput={(e) => setPassword(e.currentTarget.value)}
                error={fieldErrors.password}
              />
              <Field
                label="New password again"
                name="sp-repeat"
                type="password"
                autocomplete="new-password"
                required
                value={repeat}
                onInput={(e) => setRepeat(e.currentTarget.value)}
                error={mismatch ? 'The two passwords differ.' : undefined}
              />
              {error !== undefined && !fieldErrors.token && !fieldErrors.password && <ErrorBox error={error} />}
              <button type="submit" class="primary" disabled={busy || !password || mismatch}>
                {busy ? 'Saving…' : 'Set password'}
              </button>
            </form>
          )
        )}
        <p>
          <Link href="/login">Back to sign-in</Link>
        </p>
      </div>
    </div>
  );
}
