/**
 * Account records as GET routes answer them: the list page shape, users and the signed-in
 * profile, roles and permissions, and the installation's company. Types only (see ../api-types.ts).
 */
import type { Permission } from '../permissions.js';

/** The answer of a list route: one page of `items` and how many there are in all. */
export interface ListPage<T> {
  items: T[];
  total: number;
}

/** A second factor a user can sign in with: `email` always, `google` (an authenticator app) once confirmed. */
export type SecondFactorProvider = 'email' | 'google';

/** A user's `two_factor` (CONTRACT.md). */
export interface TwoFactorState {
  /** whether sign-in asks this user for a second factor (the account policy, or the user's override) */
  enabled: boolean;
  /** the providers the user can use: `email` always, `google` once an authenticator app is confirmed */
  providers: SecondFactorProvider[];
}

/**
 * Where the welcome mail of a new user went (POST /user): handed to the SMTP relay, written to the
 * broker's outbox folder because no SMTP_URL is set, or not sent at all.
 */
export type WelcomeMailDelivery = 'sent' | 'outbox' | 'failed';

/** A user as GET /user/{user_id} and GET /userlist show it. */
export interface UserRecord {
  user_id: string;
  fname: string;
  lname: string;
  email: string;
  /** role ids */
  roles: string[];
  disabled: boolean;
  two_factor: TwoFactorState;
  /** ISO 8601 */
  created_at: string;
  /** ISO 8601, or null before the first sign-in */
  last_login: string | null;
}

/** GET /userlist: users, and the subscription's seats taken by active users. */
export interface UserList extends ListPage<UserRecord> {
  seats: { used: number; max: number };
}

/** GET /profile: the signed-in user's own record plus what they may do. */
export interface Profile extends UserRecord {
  /** every permission the user's roles grant (on at least some devices) */
  permissions: string[];
  /** unused recovery codes of the authenticator app (0 without an app) */
  recovery_codes_left: number;
  /** the remote-access:connect resources that allow a console, with the logins each names (none: the agent's own account) */
  console_grants: { resource: string; users: string[] }[];
}

/** Console recording for the sessions a role grants: `default` (recorded), `off`, or `required`. */
export type RoleRecordingMode = 'default' | 'off' | 'required';

/** A user holding a role, as a role's `used_by` (and a refused delete's `role_in_use`) names them. */
export interface RoleUser {
  user_id: string;
  fname: string;
  lname: string;
}

/** A permission a role grants, on the devices its resources name (`*`: every device). */
export interface RolePolicy {
  permission: string;
  resources: string[];
}

/** A role as GET /role/{role_id} and GET /roleslist show it. Times are Unix seconds, as the qbee API clients read them. */
export interface RoleRecord {
  id: string;
  name: string;
  description: string;
  policies: RolePolicy[];
  recording: RoleRecordingMode;
  /** the built-in Administrator role: cannot be changed or deleted */
  builtin: boolean;
  created_at: number;
  created_by: string | null;
  updated_at: number;
  updated_by: string | null;
  used_by: RoleUser[];
}

/** A permission in GET /permissionslist. */
export interface PermissionInfo {
  permission: Permission;
  description: string;
  /** whether its policies take resources other than `*` */
  accepts_resources: boolean;
}

/** The fields of the company record a caller sets. */
export type CompanyField = 'name' | 'address' | 'zip' | 'city' | 'country' | 'vat_number' | 'contact_name' | 'contact_email' | 'contact_phone';

/** The company record's settings. */
export interface CompanySettings {
  /** the account-wide second-factor policy (the same as PUT /settings/two-factor) */
  two_factor_required: boolean;
  /** default agent run interval, minutes */
  agent_interval: number;
}

/** GET /company and GET /company/{company_id}: the installation's one company. */
export type CompanyRecord = Record<CompanyField, string> & {
  id: string;
  company_id: string;
  settings: CompanySettings;
  created_at: string;
  updated_at: string;
};

/** A Stripe subscription of the installation's customer, as GET /stripe/subscriptions lists it. */
export interface SubscriptionView {
  id: string;
  status: string;
  quantity: number;
  price_id: string | null;
  /** Unix seconds */
  current_period_end: number | null;
  cancel_at_period_end: boolean;
}

/** GET /stripe/subscriptions: the seats in force and taken, and the Stripe subscriptions. */
export interface SubscriptionsAnswer {
  /** Seats in force: the SEATS setting. */
  seats: number;
  /** What occupies seats: active users (disabled users do not count). */
  seats_used: number;
  usage: { users: number; devices: number };
  /** STRIPE_SECRET_KEY is set */
  billing_configured: boolean;
  /** The Stripe subscriptions of this installation's customer (empty without billing or customer). */
  subscriptions: SubscriptionView[];
}

/** GET /oauth2/device-auth/{user_code}: a pending CLI sign-in, for the user to check before approving it. */
export interface PendingSignIn {
  user_code: string;
  client_ip: string;
  user_agent: string;
  /** seconds left */
  expires_in: number;
}
