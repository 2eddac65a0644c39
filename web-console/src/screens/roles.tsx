// Kept whole, past ~450 lines: the roles list, the role screen and its policy editor share the draft-policy model and its checks; split apart each would import most of the others.
/**
 * Roles and their policy editor. Each resource string is checked as it is typed with the same
 * parser the broker uses (shared/resources.ts); a role in use cannot be deleted and the refusal
 * names who uses it.
 */
import { useMemo, useState } from 'preact/hooks';
import { NOT_BUILT_PERMISSIONS, PERMISSIONS, PERMISSION_NAMES, acceptsResources, type Permission } from '../../../shared/permissions.js';
import { AGENT_ACCOUNT, compilePolicies, consoleGrants, validatePolicies, type Policy, type PolicyProblem } from '../../../shared/resources.js';
import type { PermissionInfo, RoleRecord, RoleRecordingMode, RoleUser } from '../../../shared/api-types.js';
import { api, ApiFailure, itemsOf } from '../api.js';
import { allowed } from '../areas.js';
import { Link, navigate } from '../router.js';
import { ConfirmButton, ErrorBox, Field, formatTime, ListTable, Loading, Notice, PageTitle, useAction, useLoad } from '../ui.js';

/** A permission none of whose calls is built yet: granting it does nothing today. */
function notBuilt(permission: string): boolean {
  return (NOT_BUILT_PERMISSIONS as readonly string[]).includes(permission);
}

/** What "Add permission" starts with: reading devices, the most common grant, else the first built one left. */
const DEFAULT_PERMISSION: Permission = 'device:read';

/** Said after a save, on the list the editor returns to. */
let savedNotice = '';

function whoUses(users: RoleUser[]): string {
  return users.map((u) => [u.fname, u.lname].filter(Boolean).join(' ') || u.user_id).join(', ');
}

/** The refusal of a delete, naming who uses the role. */
function DeleteRefusal({ error }: { error: unknown }) {
  if (error instanceof ApiFailure && error.error === 'role_in_use' && Array.isArray(error.body.used_by)) {
    const users = error.body.used_by as RoleUser[];
    return (
      <div class="error-box" role="alert">
        <strong>The role is in use</strong>
        <p>{error.message}</p>
        <p>
          Used by: <span data-testid="used-by">{whoUses(users)}</span>. Give them another role first.
        </p>
      </div>
    );
  }
  return <ErrorBox error={error} title="The role was not deleted" />;
}

function DeleteRole({ role, onDeleted }: { role: RoleRecord; onDeleted: () => void }) {
  const action = useAction();
  return (
    <>
      <ConfirmButton
        label="Delete"
        question={`Delete the role ${role.name}?`}
        onConfirm={async () => {
          const ok = await action.run(() => api.del(`/role/${encodeURIComponent(role.id)}`).then(() => true));
          if (ok) onDeleted();
        }}
      />
      <DeleteRefusal error={action.error} />
    </>
  );
}

export function RolesScreen() {
  const roles = useLoad(() => api.get('/roleslist', { items_per_page: 1000 }).then((a) => itemsOf<RoleRecord>(a)), []);
  const manage = allowed('rolesManage');
  const [notice, setNotice] = useState(() => {
    const said = savedNotice;
    savedNotice = '';
    return said;
  });
  return (
    <section>
      <PageTitle
        actions={
          manage && (
            <Link href="/roles/new" class="button primary">
              New role
            </Link>
          )
        }
      >
        Roles
      </PageTitle>
      {notice && <Notice>{notice}</Notice>}
      <ErrorBox error={roles.error} />
      <ListTable
        items={roles.data}
        loading={roles.loading}
        what="roles"
        columns={['Name', 'Description', 'Permissions', 'Used by', manage && 'Actions']}
        row={(r) => (
          <tr key={r.id} data-role={r.name}>
            <td>
              <Link href={`/roles/${r.id}`}>{r.name}</Link>
            </td>
            <td>{r.description}</td>
            <td>{r.policies.length}</td>
            <td>{r.used_by?.length ? whoUses(r.used_by) : <span class="muted">nobody</span>}</td>
            {manage && (
              <td class="actions-cell">
                {/* The built-in Administrator role cannot be deleted: no button that always fails. */}
                {!r.builtin && (
                  <DeleteRole
                    role={r}
                    onDeleted={() => {
                      setNotice(`The role ${r.name} was deleted.`);
                      roles.reload();
                    }}
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

interface DraftPolicy {
  uid: number;
  permission: string;
  resources: string[];
}

let nextUid = 1;

function toDraft(policies: Policy[]): DraftPolicy[] {
  // "All devices" is shown as the explicit "*" the broker lists, never as an empty list.
  return policies.map((p) => ({
    uid: nextUid++,
    permission: p.permission,
    resources: acceptsResources(p.permission) ? (p.resources?.length ? [...p.resources] : ['*']) : [],
  }));
}

/**
 * A grant on devices must name them: an empty row or no row at all would be stored as "all
 * devices" without anyone having typed `*`.
 */
export function blankResourceProblems(drafts: DraftPolicy[]): PolicyProblem[] {
  return drafts.flatMap((d, policy) => {
    if (!acceptsResources(d.permission)) return [];
    if (d.resources.length === 0) {
      return [{ policy, permission: d.permission, code: 'resource_syntax', message: 'Add a resource: * for all devices, or the tags and groups it covers.' }];
    }
    return d.resources.some((r) => !r.trim())
      ? [{ policy, permission: d.permission, resource: '', code: 'resource_syntax', message: 'Empty resource: type * for all devices, or remove the row.' }]
      : [];
  });
}

/** The problems of a 400 `invalid_policy` answer, in the shape the shared validator uses. */
function apiProblems(error: unknown): PolicyProblem[] {
  if (!(error instanceof ApiFailure) || !Array.isArray(error.body.problems)) return [];
  return (error.body.problems as PolicyProblem[]).filter((p) => typeof p.policy === 'number');
}

/** Policies as the API takes them (the editor refuses blank resources before this). */
export function toPolicies(drafts: DraftPolicy[]): Policy[] {
  return drafts.map((d) => {
    if (!acceptsResources(d.permission)) return { permission: d.permission };
    const resources = d.resources.map((r) => r.trim()).filter(Boolean);
    return resources.length ? { permission: d.permission, resources } : { permission: d.permission };
  });
}

/**
 * Which account each console grant opens. A grant without `user=` opens the agent's own account,
 * root on a packaged install: warned, with how to name a login instead.
 */
export function ConsoleAccounts({ grants }: { grants: { resource: string; users: string[] }[] }) {
  return (
    <ul class="plain-list console-accounts" aria-label="Which account a console opens">
      {grants.map((g) =>
        g.users.length === 0 ? (
          <li key={g.resource} class="notice warn" data-testid="console-account-warning">
            ⚠ A console through <code>{g.resource}</code> opens {AGENT_ACCOUNT}. Name the login it may use with <code>user=</code>, e.g.{' '}
            <code>{`${g.resource.split('/')[0]}/console(user=operator)`}</code>.
          </li>
        ) : (
          <li key={g.resource} class="muted small" data-testid="console-account">
            A console through <code>{g.resource}</code> runs as {g.users.join(', ')}.
          </li>
        ),
      )}
    </ul>
  );
}

function PolicyEditor({
  policy,
  index,
  problems,
  apiErrors,
  permissions,
  readOnly,
  onChange,
  onRemove,
}: {
  policy: DraftPolicy;
  index: number;
  problems: PolicyProblem[];
  apiErrors: Record<string, string>;
  permissions: PermissionInfo[];
  readOnly: boolean;
  onChange: (p: DraftPolicy) => void;
  onRemove: () => void;
}) {
  const accepts = acceptsResources(policy.permission);
  const general = problems.filter((p) => p.resource === undefined);
  const id = `p-${policy.uid}`;
  const resourceProblem = (r: string) => problems.find((p) => p.resource === r.trim())?.message;
  const consoles = consoleGrants(
    compilePolicies([{ permission: policy.permission, resources: policy.resources.map((r) => r.trim()).filter((r) => r && !resourceProblem(r)) }]),
  );
  return (
    <li class={`policy${problems.length ? ' has-error' : ''}`} data-permission={policy.permission}>
      <div class="policy-head">
        <div class="field grow">
          <label for={`${id}-perm`}>Permission</label>
          <select
            id={`${id}-perm`}
            value={policy.permission}
            disabled={readOnly}
            onChange={(e) => {
              const permission = e.currentTarget.value;
              onChange({ ...policy, permission, resources: acceptsResources(permission) ? (policy.resources.length ? policy.resources : ['*']) : [] });
            }}
          >
            {permissions.map((p) => (
              <option key={p.permission} value={p.permission} disabled={notBuilt(p.permission) && p.permission !== policy.permission}>
                {p.permission} — {p.description}
                {notBuilt(p.permission) ? ' (not built yet)' : ''}
              </option>
            ))}
          </select>
        </div>
        {!readOnly && (
          <button type="button" onClick={onRemove} aria-label={`Remove ${policy.permission}`}>
            Remove
          </button>
        )}
      </div>
      {general.map((p) => (
        <small key={p.message} class="field-error" role="alert">
          {p.message}
        </small>
      ))}
      {apiErrors[`policies.${index}`] && (
        <small class="field-error" role="alert">
          {apiErrors[`policies.${index}`]}
        </small>
      )}
      {accepts ? (
        <div class="resources">
          <p class="muted small">
            Resources, at least one (* is all devices). Examples: *, tag:prod, node:berlin, */console, */console(user=operator),
            tag:lab/tunnel(proto=tcp;port=22)
          </p>
          {policy.resources.map((r, i) => {
            const problem = resourceProblem(r) ?? apiErrors[`policies.${index}.resources.${i}`];
            const rid = `${id}-r${i}`;
            return (
              <div class={`resource-row${problem ? ' has-error' : ''}`} key={i}>
                <label class="visually-hidden" for={rid}>
                  Resource {i + 1} of {policy.permission}
                </label>
                <input
                  id={rid}
                  value={r}
                  readOnly={readOnly}
                  spellcheck={false}
                  autocomplete="off"
                  aria-invalid={problem ? 'true' : undefined}
                  aria-describedby={problem ? `${rid}-error` : undefined}
                  onInput={(e) => onChange({ ...policy, resources: policy.resources.map((x, j) => (j === i ? e.currentTarget.value : x)) })}
                />
                {!readOnly && (
                  <button
                    type="button"
                    aria-label={`Remove resource ${r}`}
                    onClick={() => onChange({ ...policy, resources: policy.resources.filter((_, j) => j !== i) })}
                  >
                    ×
                  </button>
                )}
                {problem ? (
                  <small id={`${rid}-error`} class="field-error" role="alert">
                    {problem}
                  </small>
                ) : (
                  r.trim() && <small class="ok-mark">valid</small>
                )}
              </div>
            );
          })}
          {!readOnly && (
            <button type="button" class="small" onClick={() => onChange({ ...policy, resources: [...policy.resources, ''] })}>
              Add resource
            </button>
          )}
        </div>
      ) : (
        <p class="muted small">Applies everywhere (this permission takes no resources).</p>
      )}
      {consoles.length > 0 && <ConsoleAccounts grants={consoles} />}
    </li>
  );
}

export function RoleScreen({ roleId }: { roleId?: string }) {
  const loaded = useLoad(() => (roleId ? api.get<RoleRecord>(`/role/${encodeURIComponent(roleId)}`) : Promise.resolve(null)), [roleId]);
  const permissionList = useLoad(
    () =>
      api
        .get('/permissionslist')
        .then((a) => itemsOf<PermissionInfo>(a))
        .catch(() => [] as PermissionInfo[]),
    [],
  );
  const role = loaded.data ?? undefined;
  const [draft, setDraft] = useState<{ name: string; description: string; recording: RoleRecordingMode; policies: DraftPolicy[] } | null>(null);
  const action = useAction();
  const manage = allowed('rolesManage') && !role?.builtin;

  // The shared list is the fallback when the broker's list is not available. Permissions not
  // built yet come last (and cannot be picked).
  const permissions: PermissionInfo[] = (
    permissionList.data?.length
      ? permissionList.data
      : PERMISSION_NAMES.map((p) => ({ permission: p, description: PERMISSIONS[p].description, accepts_resources: PERMISSIONS[p].accepts_resources }))
  ).sort((a, b) => Number(notBuilt(a.permission)) - Number(notBuilt(b.permission)));

  const current =
    draft ??
    (role
      ? { name: role.name, description: role.description ?? '', recording: role.recording ?? 'default', policies: toDraft(role.policies) }
      : { name: '', description: '', recording: 'default' as RoleRecordingMode, policies: [] });
  const policies = useMemo(() => toPolicies(current.policies), [current.policies]);
  const problems = useMemo(() => [...validatePolicies(policies), ...blankResourceProblems(current.policies)], [policies, current.policies]);
  const apiErrors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};
  // What the broker refused, shown at the policy and resource (until the role is edited again).
  const refused = apiProblems(action.error);
  const update = (next: Partial<typeof current>) => setDraft({ ...current, ...next });

  if (roleId && loaded.error) return <ErrorBox error={loaded.error} />;
  if (roleId && !role) return <Loading what="the role" />;

  const unused = permissions.filter((p) => !notBuilt(p.permission) && !current.policies.some((d) => d.permission === p.permission));
  const nextPermission = unused.find((p) => p.permission === DEFAULT_PERMISSION) ?? unused[0];

  const save = (e: Event) => {
    e.preventDefault();
    if (problems.length) return;
    void action.run(async () => {
      const body = { name: current.name.trim(), description: current.description, recording: current.recording, policies };
      if (role) await api.put(`/role/${encodeURIComponent(role.id)}`, body);
      else await api.post('/role', body);
      savedNotice = role ? `The role ${body.name} was saved.` : `The role ${body.name} was created.`;
      navigate('/roles');
    });
  };

  return (
    <section>
      <PageTitle actions={<Link href="/roles">All roles</Link>}>{role ? `Role ${role.name}` : 'New role'}</PageTitle>
      {role && (
        <p class="muted">
          {role.updated_at && <>Changed {formatTime(role.updated_at)}. </>}
          {role.used_by?.length ? `Used by ${whoUses(role.used_by)}.` : 'Not assigned to anyone.'}
          {role.builtin && ' Built-in role: it cannot be changed.'}
        </p>
      )}
      <form onSubmit={save} aria-label="Role" class="role-form" noValidate>
        <div class="grid-2">
          <Field
            label="Name"
            name="role-name"
            required
            readOnly={!manage}
            value={current.name}
            onInput={(e) => update({ name: e.currentTarget.value })}
            error={apiErrors.name}
          />
          <Field
            label="Description"
            name="role-description"
            readOnly={!manage}
            value={current.description}
            onInput={(e) => update({ description: e.currentTarget.value })}
            error={apiErrors.description}
          />
        </div>
        <div class="field">
          <label for="role-recording">Console recording</label>
          <select
            id="role-recording"
            disabled={!manage}
            value={current.recording}
            onChange={(e) => update({ recording: e.currentTarget.value as RoleRecordingMode })}
          >
            <option value="default">Recorded (default)</option>
            <option value="off">Off</option>
            <option value="required">Required: refuse a console that cannot be recorded</option>
          </select>
          <p class="muted">With several roles, required wins; off only when every role granting the console says off.</p>
        </div>
        <h2>Permissions</h2>
        {current.policies.length === 0 && <p class="muted">No permissions yet.</p>}
        <ul class="policies">
          {current.policies.map((p, i) => (
            <PolicyEditor
              key={p.uid}
              policy={p}
              index={i}
              problems={[...problems, ...refused].filter((x) => x.policy === i)}
              apiErrors={apiErrors}
              permissions={permissions}
              readOnly={!manage}
              onChange={(next) => update({ policies: current.policies.map((x) => (x.uid === p.uid ? next : x)) })}
              onRemove={() => update({ policies: current.policies.filter((x) => x.uid !== p.uid) })}
            />
          ))}
        </ul>
        {manage && nextPermission && (
          <button
            type="button"
            onClick={() =>
              update({
                policies: [
                  ...current.policies,
                  { uid: nextUid++, permission: nextPermission.permission, resources: acceptsResources(nextPermission.permission) ? [''] : [] },
                ],
              })
            }
          >
            Add permission
          </button>
        )}
        {problems.length > 0 && (
          <p class="field-error" role="status">
            {problems.length} problem{problems.length === 1 ? '' : 's'} to fix before saving.
          </p>
        )}
        <ErrorBox error={action.error} title="The role was not saved" />
        {manage && (
          <div class="button-row">
            <button type="submit" class="primary" disabled={action.busy || problems.length > 0 || !current.name.trim()}>
              {role ? 'Save role' : 'Create role'}
            </button>
            {role && <DeleteRole role={role} onDeleted={() => navigate('/roles')} />}
          </div>
        )}
      </form>
    </section>
  );
}
