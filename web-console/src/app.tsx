/** The console's frame: sign-in gate, navigation by permission, and the screen for the path. */
import type { ComponentChildren } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { allowed, type Area } from './areas.js';
import { Link, match, navigate, useLocation } from './router.js';
import { AuditScreen } from './screens/audit.js';
import { AttributesScreen } from './screens/attributes.js';
import { BootstrapKeysScreen } from './screens/bootstrap-keys.js';
import { CompanyScreen } from './screens/company.js';
import { SubscriptionScreen } from './screens/subscription.js';
import { DashboardScreen } from './screens/dashboard.js';
import { ConfigureScreen } from './screens/configure.js';
import { CliLoginScreen } from './screens/cli-login.js';
import { DeviceScreen } from './screens/device.js';
import { DevicesScreen } from './screens/devices.js';
import { FilesScreen } from './screens/files.js';
import { LoginScreen } from './screens/login.js';
import { LogsScreen } from './screens/logs.js';
import { CveDetailScreen, CveScreen } from './screens/cve.js';
import { pendingLabel, PendingHostsScreen, usePendingCount } from './screens/pending.js';
import { ProfileScreen } from './screens/profile.js';
import { RoleScreen, RolesScreen } from './screens/roles.js';
import { SessionsScreen } from './screens/sessions.js';
import { SetPasswordScreen } from './screens/set-password.js';
import { UsersScreen } from './screens/users.js';
import { clearReturnTo, signOut, useSession } from './session.js';
import { AccessDenied, ErrorBox, Loading } from './ui.js';

/** Pages shown with or without a session. */
const PUBLIC_PATHS = new Set(['/login', '/set-password']);

type ConsoleModule = typeof import('./screens/console.js');
type MapModule = typeof import('./screens/map.js');

/** The map and Leaflet load on first use. */
function LazyMap() {
  const [mod, setMod] = useState<MapModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./screens/map.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="The map could not be loaded" />;
  if (!mod) return <Loading what="the map" />;
  return <mod.MapScreen />;
}
type HelpModule = typeof import('./screens/help.js');

/** Help (the README and docs/, with the markdown renderer) loads on first use. */
function LazyHelp({ page }: { page: string }) {
  const [mod, setMod] = useState<HelpModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./screens/help.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="Help could not be loaded" />;
  if (!mod) return <Loading what="help" />;
  return <mod.HelpScreen page={page} />;
}
type PlayerModule = typeof import('./screens/player.js');
type AnalysisModule = typeof import('./screens/analysis.js');

/** Analysis and its charting library (uPlot) load on first use. */
function LazyAnalysis() {
  const [mod, setMod] = useState<AnalysisModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./screens/analysis.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="Analysis could not be loaded" />;
  if (!mod) return <Loading what="analysis" />;
  return <mod.AnalysisScreen />;
}

/** The recording player loads xterm.js on first use too. */
function LazyPlayer({ sessionId }: { sessionId: string }) {
  const [mod, setMod] = useState<PlayerModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./screens/player.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="The player could not be loaded" />;
  if (!mod) return <Loading what="the player" />;
  return <mod.PlayerScreen sessionId={sessionId} />;
}

/** The console screen and xterm.js load on first use, keeping the rest of the console small. */
function LazyConsole({ deviceId }: { deviceId: string }) {
  const [mod, setMod] = useState<ConsoleModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./screens/console.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="The console could not be loaded" />;
  if (!mod) return <Loading what="the console" />;
  return <mod.ConsoleScreen deviceId={deviceId} />;
}

/**
 * The console's chunk (xterm.js, the largest) is fetched once the first screen is drawn and the
 * browser is idle, so opening a console waits for the device alone, not for a download and parse.
 */
let consolePrefetch: Promise<unknown> | undefined;
function prefetchConsole(): void {
  if (consolePrefetch) return;
  const load = () => {
    consolePrefetch = import('./screens/console.js').catch(() => (consolePrefetch = undefined));
  };
  consolePrefetch = Promise.resolve();
  if ('requestIdleCallback' in window) requestIdleCallback(load, { timeout: 3000 });
  else setTimeout(load, 1000);
}

/** Watching someone's console read-only: the same module. */
function LazyWatch({ sessionId }: { sessionId: string }) {
  const [mod, setMod] = useState<ConsoleModule | null>(null);
  const [error, setError] = useState<unknown>();
  useEffect(() => {
    import('./screens/console.js').then(setMod, setError);
  }, []);
  if (error) return <ErrorBox error={error} title="The console could not be loaded" />;
  if (!mod) return <Loading what="the console" />;
  return <mod.WatchScreen sessionId={sessionId} />;
}

interface Screen {
  pattern: string;
  area?: Area;
  render: (params: Record<string, string>) => ComponentChildren;
}

const SCREENS: Screen[] = [
  { pattern: '/dashboard', area: 'dashboard', render: () => <DashboardScreen /> },
  { pattern: '/map', area: 'map', render: () => <LazyMap /> },
  { pattern: '/devices', area: 'devices', render: () => <DevicesScreen /> },
  { pattern: '/devices/:id', area: 'devices', render: (p) => <DeviceScreen deviceId={p.id} /> },
  { pattern: '/devices/:id/attributes', area: 'devices', render: (p) => <AttributesScreen deviceId={p.id} /> },
  { pattern: '/pending', area: 'pendingHosts', render: () => <PendingHostsScreen /> },
  { pattern: '/bootstrap-keys', area: 'bootstrapKeys', render: () => <BootstrapKeysScreen /> },
  { pattern: '/configure', area: 'configure', render: () => <ConfigureScreen /> },
  { pattern: '/files', area: 'filesManager', render: () => <FilesScreen /> },
  { pattern: '/users', area: 'users', render: () => <UsersScreen /> },
  { pattern: '/roles', area: 'roles', render: () => <RolesScreen /> },
  { pattern: '/roles/new', area: 'rolesManage', render: () => <RoleScreen /> },
  { pattern: '/roles/:id', area: 'roles', render: (p) => <RoleScreen roleId={p.id} /> },
  { pattern: '/audit', area: 'audit', render: () => <AuditScreen /> },
  { pattern: '/analysis', area: 'analysis', render: () => <LazyAnalysis /> },
  { pattern: '/logs', area: 'logs', render: () => <LogsScreen /> },
  { pattern: '/cve', area: 'cve', render: () => <CveScreen /> },
  { pattern: '/cve/:id', area: 'cve', render: (p) => <CveDetailScreen cveId={p.id} /> },
  { pattern: '/company', area: 'company', render: () => <CompanyScreen /> },
  { pattern: '/subscription', area: 'subscription', render: () => <SubscriptionScreen /> },
  { pattern: '/sessions', area: 'remoteSessions', render: () => <SessionsScreen /> },
  { pattern: '/profile', render: () => <ProfileScreen /> },
  { pattern: '/cli-login', render: () => <CliLoginScreen /> },
  { pattern: '/help', render: () => <LazyHelp page="" /> },
  { pattern: '/help/:page', render: (p) => <LazyHelp page={p.page} /> },
];

const NAV: { href: string; label: string; area: Area }[] = [
  { href: '/dashboard', label: 'Dashboard', area: 'dashboard' },
  { href: '/devices', label: 'Devices', area: 'devices' },
  { href: '/map', label: 'Map', area: 'map' },
  { href: '/pending', label: 'Pending hosts', area: 'pendingHosts' },
  { href: '/bootstrap-keys', label: 'Bootstrap keys', area: 'bootstrapKeys' },
  { href: '/configure', label: 'Configure', area: 'configure' },
  { href: '/files', label: 'Files', area: 'filesManager' },
  { href: '/users', label: 'Users', area: 'users' },
  { href: '/roles', label: 'Roles', area: 'roles' },
  { href: '/sessions', label: 'Sessions', area: 'remoteSessions' },
  { href: '/logs', label: 'Logs', area: 'logs' },
  { href: '/analysis', label: 'Analysis', area: 'analysis' },
  { href: '/cve', label: 'CVE', area: 'cve' },
  { href: '/audit', label: 'Audit', area: 'audit' },
  { href: '/company', label: 'Company', area: 'company' },
  { href: '/subscription', label: 'Subscription', area: 'subscription' },
];

function firstAllowedPath(): string {
  return NAV.find((n) => allowed(n.area))?.href ?? '/profile';
}

function Frame({ path, children }: { path: string; children: ComponentChildren }) {
  const session = useSession();
  const [menuOpen, setMenuOpen] = useState(false);
  const first = useRef(true);
  useEffect(() => {
    setMenuOpen(false);
    // After moving to another page, start keyboard and screen-reader users at its heading.
    if (first.current) first.current = false;
    else (document.querySelector('main h1') as HTMLElement | null)?.focus({ preventScroll: true });
  }, [path]);
  useEffect(prefetchConsole, []);
  // The signed-in user's own page reads "Profile" with who they are: their name alone ("Admin" for
  // the first administrator) would read like an administration area.
  const name = [session.profile?.fname, session.profile?.lname].filter(Boolean).join(' ');
  const email = session.profile?.email ?? '';
  const pending = usePendingCount(allowed('pendingHosts'));
  return (
    <div class="frame">
      <a class="skip-link" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <Link href="/" class="brand">
          Fleet
        </Link>
        <button type="button" class="menu-toggle" aria-expanded={menuOpen} aria-controls="main-nav" onClick={() => setMenuOpen(!menuOpen)}>
          Menu
          {pending !== undefined && pending > 0 && (
            <span class="nav-count" data-testid="menu-pending-count" title={`${pending} host${pending === 1 ? '' : 's'} waiting for approval`}>
              {pendingLabel(pending)}
            </span>
          )}
        </button>
        <nav id="main-nav" class={menuOpen ? 'open' : ''} aria-label="Main">
          {NAV.filter((n) => allowed(n.area)).map((n) => (
            <Link key={n.href} href={n.href} aria-current={path === n.href || path.startsWith(`${n.href}/`) ? 'page' : undefined}>
              {n.label}
              {n.area === 'pendingHosts' && pending !== undefined && pending > 0 && (
                <span class="nav-count" data-testid="nav-pending-count" title={`${pending} host${pending === 1 ? '' : 's'} waiting for approval`}>
                  {pendingLabel(pending)}
                </span>
              )}
            </Link>
          ))}
          <span class="spacer" />
          <Link href="/help" aria-current={path === '/help' || path.startsWith('/help/') ? 'page' : undefined} class="help-link">
            Help
          </Link>
          <Link href="/profile" aria-current={path === '/profile' ? 'page' : undefined} class="profile-link" title={[name, email].filter(Boolean).join(' · ')}>
            Profile{email && <small class="profile-email"> {email}</small>}
          </Link>
          <button
            type="button"
            class="link-button"
            onClick={async () => {
              await signOut();
              navigate('/login', { replace: true });
            }}
          >
            Sign out
          </button>
        </nav>
      </header>
      <main id="main" tabIndex={-1}>
        {children}
      </main>
    </div>
  );
}

export function App() {
  const session = useSession();
  const { path } = useLocation();

  useEffect(() => {
    if (session.status === 'signed-out' && !PUBLIC_PATHS.has(path)) navigate('/login', { replace: true });
    if (session.status === 'signed-in' && (path === '/login' || path === '/')) navigate(clearReturnTo() ?? firstAllowedPath(), { replace: true });
  }, [session.status, path]);

  if (path === '/set-password') return <SetPasswordScreen />;
  if (session.status === 'starting') return <Loading what="the console" />;
  if (session.status === 'signed-out') return <LoginScreen />;

  // The console takes the whole window: no frame around it.
  const consoleParams = match('/console/:id', path);
  if (consoleParams) return <LazyConsole deviceId={consoleParams.id} />;
  const watchParams = match('/watch/:id', path);
  if (watchParams) return <LazyWatch sessionId={watchParams.id} />;
  const playerParams = match('/recordings/:id', path);
  if (playerParams) return allowed('recordings') ? <LazyPlayer sessionId={playerParams.id} /> : <AccessDenied />;

  for (const screen of SCREENS) {
    const params = match(screen.pattern, path);
    if (!params) continue;
    return <Frame path={path}>{screen.area && !allowed(screen.area) ? <AccessDenied /> : screen.render(params)}</Frame>;
  }
  return (
    <Frame path={path}>
      {path === '/' || path === '/login' ? (
        <Loading />
      ) : (
        <div class="error-box" role="alert">
          <strong>Not found</strong>
          <p>
            There is no page at {path}. <Link href="/">Go to the start page</Link>.
          </p>
        </div>
      )}
    </Frame>
  );
}
