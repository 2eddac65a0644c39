import { z } from 'zod';
import type { CompanyRecord } from '../../shared/api-types.js';
import { singleLine } from '../../shared/text.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { COMPANY_FIELDS, type CompanyField, type CompanyService } from './service.js';

const field = (max: number) => singleLine(z.string().max(max, `at most ${max} characters`));
const fieldSchemas: Record<CompanyField, z.ZodType<string>> = {
  name: field(200),
  address: field(500),
  zip: field(32),
  city: field(200),
  country: field(100),
  vat_number: field(64),
  contact_name: field(200),
  contact_email: z.union([z.literal(''), z.email('must be an email address').max(254)]),
  contact_phone: field(64),
};

const settings = z
  .object({
    two_factor_required: z
      .boolean()
      .describe(
        'The account-wide second-factor policy (as PUT /settings/two-factor): changing it also needs users:manage, and turning it off every permission of the users who follow it',
      ),
    agent_interval: z
      .number()
      .int()
      .min(1)
      .max(1440)
      .describe(
        'Default agent run interval, minutes (1-1440): every agent without an enabled settings bundle (agentinterval) runs its configuration this often',
      ),
  })
  .strict();

const companyRecord = z.object({
  id: z.string().describe('The company id: made once per installation, never changes'),
  company_id: z.string().describe('The same id'),
  ...(Object.fromEntries(COMPANY_FIELDS.map((f) => [f, z.string()])) as Record<CompanyField, z.ZodString>),
  settings: settings,
  created_at: z.string(),
  updated_at: z.string(),
}) satisfies z.ZodType<CompanyRecord>;

const f = fieldSchemas;
const patchBody = z.object({
  name: f.name.refine((v) => v.trim() !== '', 'must not be empty').optional(),
  address: f.address.optional(),
  zip: f.zip.optional(),
  city: f.city.optional(),
  country: f.country.optional(),
  vat_number: f.vat_number.optional(),
  contact_name: f.contact_name.optional(),
  contact_email: f.contact_email.optional(),
  contact_phone: f.contact_phone.optional(),
  settings: settings.partial().strict().optional(),
});
const putBody = patchBody.extend({ name: f.name.refine((v) => v.trim() !== '', 'must not be empty') });

const params = z.object({ company_id: z.string().max(64).describe('The company id (GET /company answers it)') });

const CHANGE_NOTE =
  'Answers the whole record after the change; unknown company id: 404; an unknown field: 400. Audited (`company.update`) with the fields before and after.';

/** What the company routes use. */
export interface CompanyRouteDeps {
  company: CompanyService;
}

export const companyRoutes: RouteSpec<CompanyRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/company',
    tag: 'company',
    summary: "This installation's company",
    description: 'The one company record of the installation (as GET /company/{company_id}), for clients that do not know its id yet.',
    access: 'company:read',
    response: companyRecord,
    handler: async ({ deps }) => deps.company.get(await deps.company.id()),
  }),
  defineRoute({
    method: 'get',
    path: '/company/{company_id}',
    tag: 'company',
    summary: 'Read the company record',
    description:
      'The organisation: name, address (address, zip, city, country), VAT number, contact (name, email, phone) and `settings`: `two_factor_required` (the second-factor policy sign-in enforces) and ' +
      '`agent_interval` (default agent run interval in minutes: sent to every agent with its configuration, in force where no enabled `settings` bundle sets `agentinterval`; a change reaches connected agents within seconds). One company per installation; unknown id: 404.',
    access: 'company:read',
    params,
    response: companyRecord,
    handler: async ({ params, deps }) => deps.company.get(params.company_id),
  }),
  defineRoute({
    method: 'put',
    path: '/company/{company_id}',
    tag: 'company',
    summary: 'Replace the company record',
    description: '`name` is required; every other field left out becomes "". `settings` change only where given. ' + CHANGE_NOTE,
    access: 'company:manage',
    params,
    body: putBody,
    response: companyRecord,
    audit: 'company.update',
    subject: ({ params }, s) => s.company.subject(params.company_id),
    handler: async ({ params, body, principal, deps }) => deps.company.change(principal, params.company_id, body, true),
  }),
  defineRoute({
    method: 'patch',
    path: '/company/{company_id}',
    tag: 'company',
    summary: 'Change some fields of the company record',
    description: 'Only the fields given change (settings too). ' + CHANGE_NOTE,
    access: 'company:manage',
    params,
    body: patchBody,
    response: companyRecord,
    audit: 'company.update',
    subject: ({ params }, s) => s.company.subject(params.company_id),
    handler: async ({ params, body, principal, deps }) => deps.company.change(principal, params.company_id, body, false),
  }),
];
