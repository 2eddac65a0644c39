/** Users: create, edit, disable and enable, reset passwords (single-use links), delete. */
import { useState } from 'preact/hooks';
import type { RoleRecord, UserList, UserRecord, WelcomeMailDelivery } from '../../../shared/api-types.js';
import { api, ApiFailure, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { getSession } from '../session.js';
import { ConfirmButton, CopyButton, ErrorBox, Field, formatTime, ListTable, Notice, PageTitle, useAction, useLoad } from '../ui.js';

interface Draft {
  fname: string;
  lname: string;
  email: string;
  roles: string[];
  password: string;
  /** Per-user override of the account's 2FA policy; 'keep' leaves it as it is. */
  twoFactor: 'keep' | 'policy' | 'on' | 'off';
}

const TWO_FACTOR: Record<Exclude<Draft['twoFactor'], 'keep'>, boolean | null> = { policy: null, on: true, off: false };

function UserForm({ user, roles, onDone, onCancel }: { user?: UserRecord; roles: RoleRecord[]; onDone: (message: string) => void; onCancel: () => void }) {
  const [draft, setDraft] = useState<Draft>({
    fname: user?.fname ?? '',
    lname: user?.lname ?? '',
    email: user?.email ?? '',
    roles: user?.roles ?? [],
    password: '',
    twoFactor: user ? 'keep' : 'policy',
  });
  const action = useAction();
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};
  const set = (name: keyof Draft) => (e: Event) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value });
  const prefix = user ? `u-${user.user_id}` : 'u-new';

  const save = (e: Event) => {
    e.preventDefault();
    void action.run(async () => {
      const body: Record<string, unknown> = { fname: draft.fname, lname: draft.lname, email: draft.email, roles: draft.roles };
      if (draft.twoFactor !== 'keep') {
        const enabled = TWO_FACTOR[draft.twoFactor];
        // A new user follows the policy when nothing is sent; null is only for changing back.
        if (user || enabled !== null) body.two_factor = { enabled };
      }
      if (user) {
        await api.patch(`/user/${encodeURIComponent(user.user_id)}`, body);
        onDone(`${draft.email} was saved.`);
      } else {
        if (draft.password) body.password = draft.password;
        const created = await api.post<{ welcome_mail?: WelcomeMailDelivery }>('/user', body);
        onDone(createdMessage(draft.email, Boolean(draft.password), created?.welcome_mail));
      }
    });
  };

  return (
    <form class="boxed" onSubmit={save} aria-label={user ? `Edit ${user.email}` : 'New user'}>
      <h2>{user ? `Edit ${user.email}` : 'New user'}</h2>
      <div class="grid-2">
        <Field label="First name" name={`${prefix}-fname`} required value={draft.fname} onInput={set('fname')} error={errors.fname} />
        <Field label="Last name" name={`${prefix}-lname`} value={draft.lname} onInput={set('lname')} error={errors.lname} />
        <Field label="Email" name={`${prefix}-email`} type="email" required value={draft.email} onInput={set('email')} error={errors.email} />
        {!user && (
          <Field
            label="Password (optional)"
            name={`${prefix}-password`}
            type="password"
            autocomplete="new-password"
            value={draft.password}
            onInput={set('password')}
            error={errors.password}
            hint="Leave empty to send a welcome email with a link to set one. Give one for an API user."
          />
        )}
        <div class="field">
          <label for={`${prefix}-2fa`}>Second factor at sign-in</label>
          <select id={`${prefix}-2fa`} value={draft.twoFactor} onChange={(e) => setDraft({ ...draft, twoFactor: e.currentTarget.value as Draft['twoFactor'] })}>
            {user && <option value="keep">Keep as it is (now {user.two_factor?.enabled ? 'asked' : 'not asked'})</option>}
            <option value="policy">Follow the account policy</option>
            <option value="on">Always ask</option>
            <option value="off">Never ask (API users for scripts)</option>
          </select>
          {errors.two_factor && <small class="field-error">{errors.two_factor}</small>}
        </div>
      </div>
      <fieldset class={errors.roles ? 'has-error' : ''}>
        <legend>Roles</legend>
        {roles.length === 0 && <p class="muted">No roles to choose from.</p>}
        {roles.map((r) => (
          <label key={r.id} class="check">
            <input
              type="checkbox"
              checked={draft.roles.includes(r.id)}
              onChange={(e) => setDraft({ ...draft, roles: e.currentTarget.checked ? [...draft.roles, r.id] : draft.roles.filter((x) => x !== r.id) })}
            />{' '}
            {r.name}
          </label>
        ))}
        {errors.roles && (
          <small class="field-error" role="alert">
            {errors.roles}
          </small>
        )}
      </fieldset>
      <ErrorBox error={action.error} title="The user was not saved" />
      <div class="button-row">
        <button type="submit" class="primary" disabled={action.busy || draft.roles.length === 0}>
          {user ? 'Save' : 'Create user'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

/** The account-wide second-factor policy, switchable by user managers. */
function TwoFactorPolicy() {
  const policy = useLoad(() => api.get<{ enabled: boolean }>('/settings/two-factor'), []);
  const action = useAction();
  if (policy.error) return <ErrorBox error={policy.error} />;
  if (!policy.data) return null;
  const enabled = policy.data.enabled;
  return (
    <div class="boxed policy-box">
      <span>
        Second factor for every user without an override: <strong data-testid="two-factor-policy">{enabled ? 'on' : 'off'}</strong>
      </span>
      {allowed('usersManage') && (
        <button
          type="button"
          disabled={action.busy}
          onClick={() =>
            void action.run(async () => {
              await api.put('/settings/two-factor', { enabled: !enabled });
              policy.reload();
            })
          }
        >
          {enabled ? 'Turn off' : 'Turn on'}
        </button>
      )}
      <ErrorBox error={action.error} title="The policy was not changed" />
    </div>
  );
}

/** Says where the welcome mail went: only a mail handed to the relay is "sent". */
export function createdMessage(email: string, withPassword: boolean, delivery: WelcomeMailDelivery | undefined): string {
  const first = withPassword ? `${email} was created and can sign in with the password given.` : `${email} was created.`;
  const what = withPassword ? 'A welcome email' : 'A welcome email with a link to set a password';
  if (delivery === 'sent') return `${first} ${what} was sent.`;
  if (delivery === 'outbox')
    return `${first} ${what} was not sent: no mail server is configured (SMTP_URL), so it was written to the broker's outbox folder.${withPassword ? '' : ' Use "Create reset link" to hand over a link instead.'}`;
  if (delivery === 'failed')
    return `${first} ${what} could not be sent; see the broker's log.${withPassword ? '' : ' Use "Create reset link" to hand over a link instead.'}`;
  return first;
}

export function UsersScreen() {
  const users = useLoad(() => api.get<UserList>('/userlist', { items_per_page: 1000 }), []);
  const roles = useLoad(
    () => (allowed('roles') ? api.get('/roleslist', { items_per_page: 1000 }).then((a) => itemsOf<RoleRecord>(a)) : Promise.resolve([])),
    [],
  );
  const manage = allowed('usersManage');
  const action = useAction();
  const [editing, setEditing] = useState<UserRecord | 'new' | null>(null);
  const [notice, setNotice] = useState('');
  /** A reset link to hand over: the API shows it once, so it stays here until closed. */
  const [handover, setHandover] = useState<{ email: string; link: string; expires_at: string } | null>(null);
  const me = getSession().profile?.user_id;
  const roleName = (id: string) => roles.data?.find((r) => r.id === id)?.name ?? id;

  const done = (message: string) => {
    setEditing(null);
    setNotice(message);
    users.reload();
  };
  const change = (u: UserRecord, run: () => Promise<unknown>, message: string) =>
    void action.run(async () => {
      setNotice('');
      await run();
      setNotice(message);
      users.reload();
    });

  return (
    <section>
      <PageTitle
        actions={
          manage && (
            <button type="button" class="primary" onClick={() => setEditing('new')}>
              New user
            </button>
          )
        }
      >
        Users
      </PageTitle>
      {users.data?.seats && (
        <p class="muted" data-testid="seats">
          Seats: {users.data.seats.used} / {users.data.seats.max} active users (disabled users do not count).
        </p>
      )}
      <TwoFactorPolicy />
      {notice && <Notice>{notice}</Notice>}
      {handover && (
        <div class="boxed" role="region" aria-label="Reset link">
          <p>
            Reset link for <strong>{handover.email}</strong>, shown only this once; it works once and expires {formatTime(handover.expires_at)}:
          </p>
          <p>
            <code data-testid="reset-link">{handover.link}</code> <CopyButton text={handover.link} label="Copy link" />
          </p>
          <button type="button" onClick={() => setHandover(null)}>
            Close
          </button>
        </div>
      )}
      <ErrorBox error={action.error} title="The request failed" />
      {editing && (
        <UserForm
          key={editing === 'new' ? 'new' : editing.user_id}
          user={editing === 'new' ? undefined : editing}
          roles={roles.data ?? []}
          onDone={done}
          onCancel={() => setEditing(null)}
        />
      )}
      <ErrorBox error={users.error} />
      <ListTable
        items={users.data && itemsOf<UserRecord>(users.data)}
        loading={users.loading}
        what="users"
        columns={['Name', 'Email', 'Roles', 'State', 'Last sign-in', manage && 'Actions']}
        row={(u) => (
          <tr key={u.user_id} class={u.disabled ? 'disabled-row' : ''} data-email={u.email}>
            <td>
              {u.fname} {u.lname}
            </td>
            <td>{u.email}</td>
            <td>{u.roles.map(roleName).join(', ')}</td>
            <td>
              <span class={`badge ${u.disabled ? 'denied' : 'ok'}`}>{u.disabled ? 'disabled' : 'active'}</span>
              {u.two_factor?.enabled && <span class="badge">2FA</span>}
            </td>
            <td>{formatTime(u.last_login ?? undefined) || <span class="muted">never</span>}</td>
            {manage && (
              <td class="actions-cell">
                <button type="button" onClick={() => setEditing(u)}>
                  Edit
                </button>
                {u.user_id !== me &&
                  (u.disabled ? (
                    <button
                      type="button"
                      onClick={() => change(u, () => api.patch(`/user/${encodeURIComponent(u.user_id)}`, { disabled: false }), `${u.email} is enabled.`)}
                    >
                      Enable
                    </button>
                  ) : (
                    <ConfirmButton
                      label="Disable"
                      question={`Disable ${u.email}? They are signed out at once.`}
                      onConfirm={() => change(u, () => api.patch(`/user/${encodeURIComponent(u.user_id)}`, { disabled: true }), `${u.email} is disabled.`)}
                    />
                  ))}
                {u.user_id !== me && (
                  <ConfirmButton
                    label="Mail reset link"
                    class=""
                    question={`Mail ${u.email} a link to choose a new password? The current one works until the link is used.`}
                    confirmLabel="Yes, mail it"
                    onConfirm={() =>
                      change(
                        u,
                        () => api.post(`/user/${encodeURIComponent(u.user_id)}/password-reset`, { send_email: true }),
                        `A reset link was mailed to ${u.email}.`,
                      )
                    }
                  />
                )}
                {u.user_id !== me && (
                  <ConfirmButton
                    label="Create reset link"
                    class=""
                    question={`Create a link for ${u.email} to choose a new password, to hand over yourself?`}
                    confirmLabel="Yes, create it"
                    onConfirm={() =>
                      change(
                        u,
                        async () =>
                          setHandover({
                            email: u.email,
                            ...(await api.post<{ link: string; expires_at: string }>(`/user/${encodeURIComponent(u.user_id)}/password-reset`, {
                              send_email: false,
                            })),
                          }),
                        `A reset link for ${u.email} was created.`,
                      )
                    }
                  />
                )}
                {u.user_id !== me && (
                  <ConfirmButton
                    label="Delete"
                    question={`Delete ${u.email}? This cannot be undone.`}
                    onConfirm={() => change(u, () => api.del(`/user/${encodeURIComponent(u.user_id)}`), `${u.email} was deleted.`)}
                  />
                )}
              </td>
            )}
          </tr>
        )}
      />
    </section>
  );
}
