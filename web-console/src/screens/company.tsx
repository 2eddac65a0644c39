/**
 * The company record: name, address, contact and settings (the second-factor policy sign-in
 * enforces, the default agent interval). Shown with company:read; editable with company:manage.
 */
import { useEffect, useState } from 'preact/hooks';
import type { CompanyField, CompanyRecord } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { allowed } from '../areas.js';
import { ErrorBox, Field, Loading, Notice, PageTitle, useAction, useLoad } from '../ui.js';

const TEXT_FIELDS: Array<[CompanyField, string]> = [
  ['name', 'Company name'],
  ['address', 'Address'],
  ['zip', 'Postal code'],
  ['city', 'City'],
  ['country', 'Country'],
  ['vat_number', 'VAT number'],
  ['contact_name', 'Contact name'],
  ['contact_email', 'Contact email'],
  ['contact_phone', 'Contact phone'],
];

export function CompanyScreen() {
  const company = useLoad(() => api.get<CompanyRecord>('/company'), []);
  const [draft, setDraft] = useState<CompanyRecord | undefined>();
  const [saved, setSaved] = useState(false);
  const action = useAction();
  const mayManage = allowed('companyManage');
  useEffect(() => setDraft(company.data), [company.data]);
  const errors = action.error instanceof ApiFailure ? action.error.fieldErrors() : {};

  if (company.error) return <ErrorBox error={company.error} />;
  if (!draft) return <Loading what="the company" />;

  const save = (e: Event) => {
    e.preventDefault();
    setSaved(false);
    const original = company.data as CompanyRecord;
    const changed: Record<string, unknown> = {};
    for (const [f] of TEXT_FIELDS) if (draft[f] !== original[f]) changed[f] = draft[f];
    const settings: Record<string, unknown> = {};
    if (draft.settings.agent_interval !== original.settings.agent_interval) settings.agent_interval = draft.settings.agent_interval;
    if (draft.settings.two_factor_required !== original.settings.two_factor_required) settings.two_factor_required = draft.settings.two_factor_required;
    if (Object.keys(settings).length > 0) changed.settings = settings;
    void action.run(async () => {
      await api.patch(`/company/${draft.id}`, changed);
      setSaved(true);
      company.reload();
    });
  };

  return (
    <section>
      <PageTitle>Company</PageTitle>
      <form onSubmit={save} aria-label="Company">
        <fieldset disabled={!mayManage || action.busy}>
          {TEXT_FIELDS.map(([f, label]) => (
            <Field
              key={f}
              label={label}
              name={`company-${f}`}
              type={f === 'contact_email' ? 'email' : 'text'}
              value={draft[f]}
              onInput={(e) => setDraft({ ...draft, [f]: e.currentTarget.value })}
              error={errors[f]}
            />
          ))}
          <Field
            label="Default agent interval (minutes)"
            name="company-agent-interval"
            type="number"
            min={1}
            max={1440}
            value={String(draft.settings.agent_interval)}
            onInput={(e) => setDraft({ ...draft, settings: { ...draft.settings, agent_interval: Number(e.currentTarget.value) } })}
            error={errors['settings.agent_interval']}
            hint="How often every agent applies its configuration again, unless a settings bundle sets its own interval."
          />
          <label class="check">
            <input
              type="checkbox"
              checked={draft.settings.two_factor_required}
              onChange={(e) => setDraft({ ...draft, settings: { ...draft.settings, two_factor_required: e.currentTarget.checked } })}
            />{' '}
            Require a second factor at sign-in (users without their own setting)
          </label>
          {mayManage && (
            <div class="button-row">
              <button type="submit" class="primary">
                Save
              </button>
            </div>
          )}
        </fieldset>
      </form>
      <ErrorBox error={action.error} title="The company was not saved" />
      {saved && !action.error && <Notice>Saved.</Notice>}
      <p class="muted">
        Company id <code>{draft.id}</code>
      </p>
    </section>
  );
}
