import type { CompanyField, CompanyRecord, CompanySettings } from '../../shared/api-types.js';
import type { AgentDefaults } from '../../shared/protocol.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AuthService } from '../auth/service.js';
import type { Db } from '../db/database.js';
import type { CompanyTable } from '../db/schema.js';
import { notFound } from '../errors.js';
import type { UsersService } from '../users/service.js';

/** The fields of the company record a caller sets (PUT replaces them, PATCH changes the given ones). */
export const COMPANY_FIELDS = ['name', 'address', 'zip', 'city', 'country', 'vat_number', 'contact_name', 'contact_email', 'contact_phone'] as const;
export type { CompanyField, CompanyRecord, CompanySettings };
// The list and the shared type name the same fields.
COMPANY_FIELDS satisfies readonly CompanyField[];

export type CompanyChange = Partial<Record<CompanyField, string>> & { settings?: Partial<CompanySettings> };

export interface CompanyDeps {
  db: Db;
  auth: Pick<AuthService, 'twoFactorPolicy'>;
  users: Pick<UsersService, 'setTwoFactorPolicy'>;
  access: Pick<AccessService, 'require'>;
}

/**
 * The organisation's record: one per installation, made by the migration with a stable id. Its
 * `two_factor_required` setting is the account-wide second-factor policy sign-in enforces.
 */
export class CompanyService {
  constructor(private readonly deps: CompanyDeps) {}

  private async row(companyId: string): Promise<CompanyTable> {
    const row = await this.deps.db.selectFrom('company').selectAll().where('id', '=', companyId).executeTakeFirst();
    if (!row) throw notFound(`Company ${companyId}`);
    return row;
  }

  /** The installation's company id (the only row). */
  async id(): Promise<string> {
    const row = await this.deps.db.selectFrom('company').select('id').orderBy('created_at').executeTakeFirstOrThrow();
    return row.id;
  }

  async get(companyId: string): Promise<CompanyRecord> {
    return this.present(await this.row(companyId));
  }

  /** The defaults every agent gets with its configuration (the installation's only company row). */
  async agentDefaults(): Promise<AgentDefaults> {
    const row = await this.deps.db.selectFrom('company').select('agent_interval').orderBy('created_at').executeTakeFirst();
    const minutes = Number(row?.agent_interval);
    return Number.isInteger(minutes) && minutes >= 1 && minutes <= 1440 ? { agent_interval: minutes } : {};
  }

  /** For the audit entry: the row with the policy it carries. */
  async subject(companyId: string): Promise<object | undefined> {
    const row = await this.deps.db.selectFrom('company').selectAll().where('id', '=', companyId).executeTakeFirst();
    return row && { ...row, two_factor_required: await this.deps.auth.twoFactorPolicy() };
  }

  /**
   * Changes the record: with `replace`, every field left out becomes "" (PUT); else only the given
   * ones (PATCH). Settings change only where given. Turning the second-factor policy on or off also
   * needs users:manage and, to turn it off, every permission of the users who follow it (as PUT
   * /settings/two-factor): 403 otherwise, and nothing changes.
   */
  async change(principal: Principal, companyId: string, change: CompanyChange, replace: boolean): Promise<CompanyRecord> {
    const row = await this.row(companyId);
    const wanted = change.settings?.two_factor_required;
    if (wanted !== undefined && wanted !== (await this.deps.auth.twoFactorPolicy())) {
      await this.deps.access.require(principal, 'users:manage');
      await this.deps.users.setTwoFactorPolicy(principal, wanted);
    }
    const fields: Partial<CompanyTable> = {};
    for (const f of COMPANY_FIELDS) {
      const value = change[f];
      if (value !== undefined) fields[f] = value;
      else if (replace) fields[f] = '';
    }
    if (change.settings?.agent_interval !== undefined) fields.agent_interval = change.settings.agent_interval;
    await this.deps.db
      .updateTable('company')
      .set({ ...fields, updated_at: new Date().toISOString() })
      .where('id', '=', row.id)
      .execute();
    return this.get(companyId);
  }

  private async present(row: CompanyTable): Promise<CompanyRecord> {
    const fields = Object.fromEntries(COMPANY_FIELDS.map((f) => [f, row[f]])) as Record<CompanyField, string>;
    return {
      id: row.id,
      company_id: row.id,
      ...fields,
      settings: { two_factor_required: await this.deps.auth.twoFactorPolicy(), agent_interval: Number(row.agent_interval) },
      created_at: row.created_at,
      updated_at: row.updated_at,
    };
  }
}
