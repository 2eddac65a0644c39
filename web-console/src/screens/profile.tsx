/** The signed-in user's own details: name, password, and an authenticator app (TOTP) with its QR code and recovery codes. */
import { useEffect, useState } from 'preact/hooks';
import type { SshClientSetup, TotpEnrolment } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { loadProfile, useSession, type Profile } from '../session.js';
import { CopyButton, ErrorBox, Field, Notice, PageTitle, useAction } from '../ui.js';
import { ConsoleAccounts } from './roles.js';
import { SshKeysPanel } from './profile-ssh-keys.js';

/** Whether an authenticator app is set up: the profile then offers the `google` provider. */
/** The profile's console grants (GET /profile `console_grants`), checked: an older broker sends none. */
function consoleGrantsOf(profile: Profile | null): { resource: string; users: string[] }[] {
  const raw = profile?.console_grants;
  if (!Array.isArray(raw)) return [];
  return raw.filter(
    (g): g is { resource: string; users: string[] } =>
      !!g && typeof g.resource === 'string' && Array.isArray(g.users) && g.users.every((u: unknown) => typeof u === 'string'),
  );
}

function totpEnabled(profile: Profile | null): boolean {
  const providers = profile?.two_factor?.providers;
  return Array.isArray(providers) && providers.includes('google');
}

/**
 * An action on the app proven by one of its codes or by the password: removing it, or replacing the
 * recovery codes. `act` sends the proof (`{code}` or `{password}`).
 */
function ProofForm({ label, danger, act }: { label: string; danger?: boolean; act: (proof: Record<string, string>) => Promise<void> }) {
  const [open, setOpen] = useState(false);
  const [proof, setProof] = useState<'code' | 'password'>('code');
  const [value, setValue] = useState('');
  const action = useAction();
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};
  if (!open) {
    return (
      <button type="button" class={danger ? 'danger' : undefined} onClick={() => setOpen(true)}>
        {label}
      </button>
    );
  }
  return (
    <form
      aria-label={label}
      onSubmit={(e) => {
        e.preventDefault();
        void action.run(async () => {
          await act({ [proof]: proof === 'code' ? value.trim() : value });
          setOpen(false);
          setValue('');
        });
      }}
    >
      <p>Confirm with a current code of the app, or with your password.</p>
      <div class="button-row" role="radiogroup" aria-label="Confirm with">
        <label class="check">
          <input type="radio" name={`${label}-proof`} checked={proof === 'code'} onChange={() => setProof('code')} /> a code of the app
        </label>
        <label class="check">
          <input type="radio" name={`${label}-proof`} checked={proof === 'password'} onChange={() => setProof('password')} /> my password
        </label>
      </div>
      <Field
        label={proof === 'code' ? 'Code' : 'Password'}
        name={danger ? 'totp-remove-proof' : 'recovery-proof'}
        type={proof === 'code' ? 'text' : 'password'}
        inputMode={proof === 'code' ? 'numeric' : undefined}
        autocomplete={proof === 'code' ? 'one-time-code' : 'current-password'}
        required
        value={value}
        onInput={(e) => setValue(e.currentTarget.value)}
        error={errors[proof]}
      />
      <ErrorBox error={action.error} title={`${label}: not done`} />
      <div class="button-row">
        <button type="submit" class={danger ? 'danger' : 'primary'} disabled={action.busy || !value}>
          {label}
        </button>
        <button type="button" onClick={() => setOpen(false)}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** New recovery codes, shown this once: copy or download them before leaving. */
function RecoveryCodesShown({ codes, onDone }: { codes: string[]; onDone: () => void }) {
  const text = `Fleet recovery codes (each works once, in place of an authenticator code)\n\n${codes.join('\n')}\n`;
  const download = () => {
    const link = document.createElement('a');
    link.href = URL.createObjectURL(new Blob([text], { type: 'text/plain' }));
    link.download = 'fleet-recovery-codes.txt';
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  };
  return (
    <div class="recovery-codes" role="region" aria-label="Recovery codes">
      <h3>Your recovery codes</h3>
      <p>
        Keep these somewhere safe. Each one signs you in once in place of an authenticator code, if you lose the app. They are shown only now: the broker keeps
        only their hashes.
      </p>
      <ul class="code-list" data-testid="recovery-codes">
        {codes.map((c) => (
          <li key={c}>
            <code>{c}</code>
          </li>
        ))}
      </ul>
      <div class="button-row">
        <CopyButton text={text} label="Copy codes" />
        <button type="button" onClick={download}>
          Download
        </button>
        <button type="button" class="primary" onClick={onDone}>
          I have saved them
        </button>
      </div>
    </div>
  );
}

function NameForm({ profile }: { profile: Profile | null }) {
  const [fname, setFname] = useState(profile?.fname ?? '');
  const [lname, setLname] = useState(profile?.lname ?? '');
  const [saved, setSaved] = useState(false);
  const action = useAction();
  useEffect(() => {
    setFname(profile?.fname ?? '');
    setLname(profile?.lname ?? '');
  }, [profile?.fname, profile?.lname]);
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};
  return (
    <form
      class="boxed"
      aria-label="Your name"
      onSubmit={(e) => {
        e.preventDefault();
        setSaved(false);
        void action.run(async () => {
          await api.patch('/profile', { fname, lname });
          await loadProfile();
          setSaved(true);
        });
      }}
    >
      <h2>Your details</h2>
      <p class="muted">Email: {profile?.email}</p>
      <div class="grid-2">
        <Field label="First name" name="p-fname" required value={fname} onInput={(e) => setFname(e.currentTarget.value)} error={errors.fname} />
        <Field label="Last name" name="p-lname" value={lname} onInput={(e) => setLname(e.currentTarget.value)} error={errors.lname} />
      </div>
      <ErrorBox error={action.error} title="Not saved" />
      {saved && <Notice>Saved.</Notice>}
      <button type="submit" class="primary" disabled={action.busy}>
        Save
      </button>
    </form>
  );
}

function PasswordForm() {
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const [repeat, setRepeat] = useState('');
  const [saved, setSaved] = useState(false);
  const action = useAction();
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};
  const mismatch = repeat !== '' && next !== repeat;
  return (
    <form
      class="boxed"
      aria-label="Change password"
      onSubmit={(e) => {
        e.preventDefault();
        if (mismatch) return;
        setSaved(false);
        void action.run(async () => {
          await api.post('/profile/password', { current_password: current, new_password: next });
          setCurrent('');
          setNext('');
          setRepeat('');
          setSaved(true);
        });
      }}
    >
      <h2>Password</h2>
      <Field
        label="Current password"
        name="pw-current"
        type="password"
        autocomplete="current-password"
        required
        value={current}
        onInput={(e) => setCurrent(e.currentTarget.value)}
        error={errors.current_password}
      />
      <Field
        label="New password"
        name="pw-new"
        type="password"
        autocomplete="new-password"
        required
        value={next}
        onInput={(e) => setNext(e.currentTarget.value)}
        error={errors.new_password}
      />
      <Field
        label="New password again"
        name="pw-repeat"
        type="password"
        autocomplete="new-password"
        required
        value={repeat}
        onInput={(e) => setRepeat(e.currentTarget.value)}
        error={mismatch ? 'The two new passwords differ.' : undefined}
      />
      <ErrorBox error={action.error} title="The password was not changed" />
      {saved && <Notice>Your password was changed. Other sessions were signed out.</Notice>}
      <button type="submit" class="primary" disabled={action.busy || !current || !next || mismatch}>
        Change password
      </button>
    </form>
  );
}

function TotpPanel({ profile }: { profile: Profile | null }) {
  const [enrolment, setEnrolment] = useState<TotpEnrolment | null>(null);
  const [code, setCode] = useState('');
  const [notice, setNotice] = useState('');
  const [codes, setCodes] = useState<string[] | null>(null);
  const action = useAction();
  const enabled = totpEnabled(profile);
  const left = typeof profile?.recovery_codes_left === 'number' ? profile.recovery_codes_left : 0;
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};

  return (
    <section class="boxed" aria-labelledby="h-totp">
      <h2 id="h-totp">Authenticator app</h2>
      {notice && <Notice>{notice}</Notice>}
      <ErrorBox error={action.error} title="Two-factor setup failed" />
      <p>
        Sign-in asks for a second factor: <strong data-testid="two-factor-state">{profile?.two_factor?.enabled ? 'yes' : 'no'}</strong>
        {profile?.two_factor?.enabled ? '.' : ' (an administrator can turn it on for you or for everyone).'}
      </p>
      {codes && <RecoveryCodesShown codes={codes} onDone={() => setCodes(null)} />}
      {enabled && !enrolment && !codes && (
        <>
          <p>An authenticator app is set up: you can use its codes when signing in.</p>
          <p>
            Recovery codes left: <strong data-testid="recovery-codes-left">{left}</strong>
            {left <= 3 ? ' — replace them before they run out.' : '.'}
          </p>
          <div class="button-row">
            <ProofForm
              label="Replace recovery codes"
              act={async (proof) => {
                const answer = await api.post<{ recovery_codes: string[] }>('/profile/totp/recovery-codes', proof);
                setNotice('New recovery codes: the earlier ones no longer work.');
                setCodes(answer.recovery_codes);
                await loadProfile();
              }}
            />
            <ProofForm
              label="Remove authenticator"
              danger
              act={async (proof) => {
                await api.del('/profile/totp', undefined, proof);
                void loadProfile();
                setNotice('The authenticator app was removed.');
              }}
            />
          </div>
        </>
      )}
      {!enabled && !enrolment && (
        <>
          <p>Protect your account with a code from an authenticator app when you sign in.</p>
          <button
            type="button"
            class="primary"
            disabled={action.busy}
            onClick={() =>
              void action.run(async () => {
                setNotice('');
                setEnrolment(await api.post<TotpEnrolment>('/profile/totp', {}));
              })
            }
          >
            Set up an authenticator app
          </button>
        </>
      )}
      {enrolment && (
        <form
          aria-label="Confirm authenticator"
          onSubmit={(e) => {
            e.preventDefault();
            void action.run(async () => {
              const answer = await api.post<{ recovery_codes: string[] }>('/profile/totp/confirm', { code: code.trim() });
              setEnrolment(null);
              setCode('');
              setCodes(answer.recovery_codes);
              await loadProfile();
              setNotice('The authenticator app is set up and the second factor is on: from your next sign-in, you are asked for its code.');
            });
          }}
        >
          <ol>
            <li>Scan this code with your authenticator app:</li>
          </ol>
          <img src={enrolment.qr_data_url} alt="QR code of the authenticator secret" class="qr" width={200} height={200} data-testid="totp-qr" />
          <p>
            Or enter the secret by hand: <code data-testid="totp-secret">{enrolment.secret}</code>
          </p>
          <ol start={2}>
            <li>Enter the 6-digit code the app shows:</li>
          </ol>
          <Field
            label="Code"
            name="totp-code"
            inputMode="numeric"
            autocomplete="one-time-code"
            required
            value={code}
            onInput={(e) => setCode(e.currentTarget.value)}
            error={errors.code}
          />
          <div class="button-row">
            <button type="submit" class="primary" disabled={action.busy || !code.trim()}>
              Confirm
            </button>
            <button type="button" onClick={() => setEnrolment(null)}>
              Cancel
            </button>
          </div>
        </form>
      )}
    </section>
  );
}

/** A copyable text: the text as shown, and a Copy button beside it. */
function CopyBlock({ text, label, testId }: { text: string; label: string; testId: string }) {
  return (
    <div class="install-command">
      <pre data-testid={testId}>{text}</pre>
      <CopyButton text={text} label={label} />
    </div>
  );
}

/** How to use native ssh/scp through the broker's SSH gateway (GET /ssh/config), or that it is off. */
function SshPanel() {
  const [setup, setSetup] = useState<SshClientSetup | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let live = true;
    api.get<SshClientSetup>('/ssh/config').then(
      (answer) => live && setSetup(answer),
      (err: unknown) => live && setError(err),
    );
    return () => {
      live = false;
    };
  }, []);
  return (
    <section class="boxed" aria-labelledby="h-ssh">
      <h2 id="h-ssh">SSH access</h2>
      <ErrorBox error={error} />
      {setup && !setup.enabled && (
        <p data-testid="ssh-off">The operator has not turned the SSH gateway on (SSH_PORT), so native ssh does not reach devices through this broker.</p>
      )}
      {setup?.enabled && setup.url && setup.ssh_config && setup.known_hosts && (
        <>
          <p>Use ssh, scp and ssh -L on your own machine: once, with the fleet CLI, sign in and add the gateway to your SSH config.</p>
          <CopyBlock text={`fleet login --url ${setup.url}\nfleet ssh-config >> ~/.ssh/config`} label="Copy set-up commands" testId="ssh-commands" />
          <p>Then reach a device by its name:</p>
          <pre data-testid="ssh-example">ssh root@&lt;device name&gt;.{setup.host}</pre>
          <h3>The ~/.ssh/config block</h3>
          <p class="muted small">
            What fleet ssh-config writes (profile {setup.profile}); its certificate comes from fleet login and lasts your sign-in session.
          </p>
          <CopyBlock text={setup.ssh_config} label="Copy SSH config" testId="ssh-config" />
          <h3>known_hosts line</h3>
          <p class="muted small">The gateway's host key, which fleet login writes for you.</p>
          <CopyBlock text={setup.known_hosts} label="Copy known_hosts line" testId="ssh-known-hosts" />
        </>
      )}
    </section>
  );
}

export function ProfileScreen() {
  const session = useSession();
  const profile = session.profile;
  const permissions = session.permissions ? [...session.permissions].sort() : null;
  return (
    <section>
      <PageTitle>Profile</PageTitle>
      <div class="panels">
        <NameForm profile={profile} />
        <PasswordForm />
        <TotpPanel profile={profile} />
        <SshPanel />
        <SshKeysPanel />
        {permissions && (
          <section class="boxed" aria-labelledby="h-perms">
            <h2 id="h-perms">What your roles allow</h2>
            <ul class="permission-list">
              {permissions.map((p) => (
                <li key={p}>
                  <code>{p}</code>
                </li>
              ))}
            </ul>
            {consoleGrantsOf(profile).length > 0 && (
              <>
                <h3>Consoles you may open</h3>
                <ConsoleAccounts grants={consoleGrantsOf(profile)} />
              </>
            )}
          </section>
        )}
      </div>
    </section>
  );
}
