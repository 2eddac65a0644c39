/**
 * Sign-in: email and password, then, when the user has a second factor, the provider choice
 * (authenticator app or email) and the code.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, request } from '../api.js';
import { signedIn, useSession } from '../session.js';
import { ErrorBox, Field, Notice } from '../ui.js';

type Step =
  | { kind: 'credentials' }
  | { kind: 'forgot'; sent?: string }
  | { kind: 'provider'; challenge: string; providers: string[] }
  | { kind: 'code'; challenge: string; provider: string }
  /** Signed in with a recovery code: how many are left is said before going on. */
  | { kind: 'recovered'; token: string; left: number };

const PROVIDER_LABELS: Record<string, { label: string; hint: string }> = {
  google: { label: 'Authenticator app', hint: 'Enter the 6-digit code your authenticator app shows for Fleet.' },
  email: { label: 'Email me a code', hint: 'We sent a 6-digit code to your email address.' },
};

/** An enrolled authenticator app is offered first: it works offline and needs no mail round trip. */
function preferredFirst(providers: string[]): string[] {
  return [...providers].sort((a, b) => Number(b === 'google') - Number(a === 'google'));
}

export function LoginScreen() {
  const session = useSession();
  const [step, setStep] = useState<Step>({ kind: 'credentials' });
  const [email, setEmail] = useState(() => new URLSearchParams(location.search).get('email') ?? '');
  const [password, setPassword] = useState('');
  const [code, setCode] = useState('');
  /** The code step takes a recovery code instead of an app code. */
  const [recovery, setRecovery] = useState(false);
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    document.title = 'Sign in · Fleet console';
  }, []);
  useEffect(() => {
    (document.querySelector('.login form input, .login form button') as HTMLElement | null)?.focus();
  }, [step.kind]);

  // The frame then leaves /login for the page asked for before sign-in, or the first area.
  const finish = (token: string) => signedIn(token, email);

  async function attempt(action: () => Promise<void>) {
    setBusy(true);
    setError(undefined);
    try {
      await action();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  async function chooseProvider(challenge: string, provider: string) {
    const answer = await request<{ challenge: string }>('POST', '/challenge-get', { anonymous: true, body: { challenge, preferProvider: provider } });
    setCode('');
    setRecovery(false);
    setStep({ kind: 'code', challenge: answer.challenge, provider });
  }

  const submitCredentials = (e: Event) => {
    e.preventDefault();
    void attempt(async () => {
      try {
        const answer = await request<{ token: string }>('POST', '/login', { anonymous: true, body: { email, password } });
        await finish(answer.token);
      } catch (err) {
        if (err instanceof ApiFailure && err.error === '2fa_required' && typeof err.body.challenge === 'string') {
          const providers = preferredFirst(Array.isArray(err.body.providers) ? (err.body.providers as string[]) : ['google', 'email']);
          setPassword('');
          if (providers.length === 1) await chooseProvider(err.body.challenge, providers[0]);
          else setStep({ kind: 'provider', challenge: err.body.challenge, providers });
          return;
        }
        throw err;
      }
    });
  };

  const submitCode = (e: Event) => {
    e.preventDefault();
    if (step.kind !== 'code') return;
    void attempt(async () => {
      const answer = await request<{ token: string; recovery_codes_left?: number }>('POST', '/challenge-verify', {
        anonymous: true,
        body: { challenge: step.challenge, code: code.trim() },
      });
      if (typeof answer.recovery_codes_left === 'number') setStep({ kind: 'recovered', token: answer.token, left: answer.recovery_codes_left });
      else await finish(answer.token);
    });
  };

  const askForLink = (e: Event) => {
    e.preventDefault();
    void attempt(async () => {
      const answer = await request<{ message: string }>('POST', '/password/forgot', { anonymous: true, body: { email } });
      setStep({ kind: 'forgot', sent: answer.message });
    });
  };

  const restart = () => {
    setStep({ kind: 'credentials' });
    setError(undefined);
    setCode('');
  };

  return (
    <div class="login">
      <div class="login-card">
        <h1>Fleet console</h1>
        {/* "You are signed out." belongs to the first step; it is stale once the password was accepted. */}
        {session.notice && !error && step.kind === 'credentials' && <Notice>{session.notice}</Notice>}
        <ErrorBox error={error} title="Sign-in failed" />

        {step.kind === 'credentials' && (
          <form onSubmit={submitCredentials} aria-label="Sign in">
            <Field label="Email" name="email" type="email" autocomplete="username" required value={email} onInput={(e) => setEmail(e.currentTarget.value)} />
            <Field
              label="Password"
              name="password"
              type="password"
              autocomplete="current-password"
              required
              value={password}
              onInput={(e) => setPassword(e.currentTarget.value)}
            />
            <button type="submit" class="primary" disabled={busy}>
              {busy ? 'Signing in…' : 'Sign in'}
            </button>
            <button
              type="button"
              class="link-button"
              onClick={() => {
                setError(undefined);
                setStep({ kind: 'forgot' });
              }}
            >
              Forgot your password?
            </button>
          </form>
        )}

        {step.kind === 'forgot' && (
          <form onSubmit={askForLink} aria-label="Reset password">
            <h2>Reset your password</h2>
            {step.sent ? (
              <Notice>{step.sent}</Notice>
            ) : (
              <>
                <p>We mail you a link to choose a new password.</p>
                <Field
                  label="Email"
                  name="forgot-email"
                  type="email"
                  autocomplete="username"
                  required
                  value={email}
                  onInput={(e) => setEmail(e.currentTarget.value)}
                />
                <button type="submit" class="primary" disabled={busy || !email}>
                  Send the link
                </button>
              </>
            )}
            <button type="button" class="link-button" onClick={restart}>
              Back to sign-in
            </button>
          </form>
        )}

        {step.kind === 'provider' && (
          <form onSubmit={(e) => e.preventDefault()} aria-label="Second factor">
            <h2>Second factor</h2>
            <p>How do you want to confirm it is you?</p>
            <div class="stack">
              {step.providers.map((provider) => (
                <button
                  key={provider}
                  type="button"
                  class="primary"
                  disabled={busy}
                  onClick={() => void attempt(() => chooseProvider(step.challenge, provider))}
                >
                  {PROVIDER_LABELS[provider]?.label ?? provider}
                </button>
              ))}
            </div>
            <button type="button" class="link-button" onClick={restart}>
              Back
            </button>
          </form>
        )}

        {step.kind === 'code' && !recovery && (
          <form onSubmit={submitCode} aria-label="Verification">
            <h2>Enter your code</h2>
            <p>{PROVIDER_LABELS[step.provider]?.hint ?? 'Enter the code you received.'}</p>
            <Field
              label="Code"
              name="code"
              inputMode="numeric"
              autocomplete="one-time-code"
              pattern="[0-9 ]*"
              required
              value={code}
              onInput={(e) => setCode(e.currentTarget.value)}
            />
            <button type="submit" class="primary" disabled={busy || !code.trim()}>
              {busy ? 'Checking…' : 'Verify'}
            </button>
            {step.provider === 'google' && (
              <button
                type="button"
                class="link-button"
                onClick={() => {
                  setRecovery(true);
                  setCode('');
                  setError(undefined);
                }}
              >
                Use a recovery code
              </button>
            )}
            <button type="button" class="link-button" onClick={restart}>
              Start again
            </button>
          </form>
        )}

        {step.kind === 'code' && recovery && (
          <form onSubmit={submitCode} aria-label="Sign in with a recovery code">
            <h2>Enter a recovery code</h2>
            <p>One of the recovery codes you saved when you set up the authenticator app (xxxx-xxxx-xxxx-xxxx). Each works once.</p>
            <Field
              label="Recovery code"
              name="recovery-code"
              autocomplete="off"
              spellcheck={false}
              required
              value={code}
              onInput={(e) => setCode(e.currentTarget.value)}
            />
            <button type="submit" class="primary" disabled={busy || !code.trim()}>
              {busy ? 'Checking…' : 'Verify'}
            </button>
            <button
              type="button"
              class="link-button"
              onClick={() => {
                setRecovery(false);
                setCode('');
                setError(undefined);
              }}
            >
              Use a code of the app
            </button>
          </form>
        )}

        {step.kind === 'recovered' && (
          <div role="region" aria-label="Recovery code used">
            <h2>Signed in with a recovery code</h2>
            <p data-testid="recovery-codes-left">
              {step.left === 0 ? 'That was your last recovery code.' : `${step.left} recovery code${step.left === 1 ? '' : 's'} left.`}{' '}
              {step.left <= 3
                ? 'Replace them in your profile now, and set up your authenticator app again if you lost it.'
                : 'The one you used no longer works.'}
            </p>
            <button type="button" class="primary" disabled={busy} onClick={() => void attempt(() => finish(step.token))}>
              Continue
            </button>
          </div>
        )}
      </div>
    </div>
  );
}
