/**
 * The console's tabs: several consoles open at once, each on its own session. Kept in the
 * browser tab's sessionStorage with each console's session id, so that a reload re-attaches to
 * the same sessions (the broker keeps them CONSOLE_DETACH_GRACE_SECONDS after a dropped connection).
 */

export interface ConsoleTab {
  /** this tab's own key (not the session's id) */
  key: string;
  deviceId: string;
  name: string;
  /** the local users the console may run as, when the grants name them */
  users?: string[];
  /** the broker's session, once the console is open: re-attached after a reload */
  session?: string;
}

export interface ConsoleTabs {
  tabs: ConsoleTab[];
  active?: string;
}

const KEY = 'fleet.console.tabs';
/** More tabs than this are not kept (each is a live shell on a device). */
export const MAX_TABS = 8;

let counter = 0;
function newKey(): string {
  counter += 1;
  return `t${Date.now().toString(36)}${counter}`;
}

function isTab(value: unknown): value is ConsoleTab {
  const t = value as ConsoleTab | null;
  return (
    !!t &&
    typeof t.key === 'string' &&
    typeof t.deviceId === 'string' &&
    typeof t.name === 'string' &&
    (t.session === undefined || typeof t.session === 'string') &&
    (t.users === undefined || (Array.isArray(t.users) && t.users.every((u) => typeof u === 'string')))
  );
}

export function loadTabs(storage: Pick<Storage, 'getItem'> = sessionStorage): ConsoleTabs {
  try {
    const parsed = JSON.parse(storage.getItem(KEY) ?? 'null') as ConsoleTabs | null;
    if (!parsed || !Array.isArray(parsed.tabs)) return { tabs: [] };
    const tabs = parsed.tabs.filter(isTab).slice(0, MAX_TABS);
    const active = tabs.some((t) => t.key === parsed.active) ? parsed.active : tabs[0]?.key;
    return { tabs, active };
  } catch {
    return { tabs: [] };
  }
}

export function saveTabs(state: ConsoleTabs, storage: Pick<Storage, 'setItem' | 'removeItem'> = sessionStorage): void {
  if (state.tabs.length === 0) storage.removeItem(KEY);
  else storage.setItem(KEY, JSON.stringify(state));
}

/** Opens a new tab on the device and makes it the active one (the oldest is dropped beyond MAX_TABS). */
export function addTab(state: ConsoleTabs, device: { deviceId: string; name: string; users?: string[] }): ConsoleTabs {
  const tab: ConsoleTab = { key: newKey(), deviceId: device.deviceId, name: device.name, ...(device.users ? { users: device.users } : {}) };
  return { tabs: [...state.tabs, tab].slice(-MAX_TABS), active: tab.key };
}

/** Shows the device's console: its first tab, or a new one. */
export function showDevice(state: ConsoleTabs, device: { deviceId: string; name: string; users?: string[] }): ConsoleTabs {
  const current = state.tabs.find((t) => t.key === state.active);
  if (current?.deviceId === device.deviceId) return state;
  const existing = state.tabs.find((t) => t.deviceId === device.deviceId);
  return existing ? { ...state, active: existing.key } : addTab(state, device);
}

/**
 * Re-attaches to one of the user's sessions (from the Sessions screen or the device page, maybe
 * opened in another tab or browser): the tab already on it, or a new tab that attaches to it.
 */
export function attachTab(state: ConsoleTabs, device: { deviceId: string; name: string; users?: string[] }, session: string): ConsoleTabs {
  const existing = state.tabs.find((t) => t.session === session);
  if (existing) return { ...state, active: existing.key };
  const added = addTab(state, device);
  return setSession(added, added.active!, session);
}

export function closeTab(state: ConsoleTabs, key: string): ConsoleTabs {
  const index = state.tabs.findIndex((t) => t.key === key);
  if (index < 0) return state;
  const tabs = state.tabs.filter((t) => t.key !== key);
  const active = state.active === key ? tabs[Math.min(index, tabs.length - 1)]?.key : state.active;
  return { tabs, active };
}

/** Records (or forgets, with undefined) the session a tab's console runs on. */
export function setSession(state: ConsoleTabs, key: string, session: string | undefined): ConsoleTabs {
  return {
    ...state,
    tabs: state.tabs.map((t) => {
      if (t.key !== key) return t;
      const { session: _old, ...rest } = t;
      return session ? { ...rest, session } : rest;
    }),
  };
}
