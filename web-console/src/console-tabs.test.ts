import { describe, expect, it } from 'vitest';
import { addTab, attachTab, closeTab, loadTabs, MAX_TABS, saveTabs, setSession, showDevice, type ConsoleTabs } from './console-tabs.js';

function memory(): Storage {
  const items = new Map<string, string>();
  return {
    getItem: (k: string) => items.get(k) ?? null,
    setItem: (k: string, v: string) => void items.set(k, v),
    removeItem: (k: string) => void items.delete(k),
  } as Storage;
}

const a = { deviceId: 'a'.repeat(64), name: 'alpha' };
const b = { deviceId: 'b'.repeat(64), name: 'beta' };

describe('console tabs', () => {
  it('opens, switches, closes and remembers session ids across a reload', () => {
    const storage = memory();
    let state: ConsoleTabs = showDevice(loadTabs(storage), a);
    expect(state.tabs).toHaveLength(1);
    state = addTab(state, a);
    const [first, second] = state.tabs;
    expect(state.active).toBe(second.key);
    state = setSession(state, first.key, 'session-1');
    saveTabs(state, storage);
    const reloaded = loadTabs(storage);
    expect(reloaded.tabs.map((t) => t.session)).toEqual(['session-1', undefined]);
    expect(reloaded.active).toBe(second.key);
    // Showing a device already open keeps its tab; another device gets a new one.
    expect(showDevice(reloaded, a)).toBe(reloaded);
    expect(showDevice(reloaded, b).tabs).toHaveLength(3);
    // Closing the active tab shows its neighbour; forgetting a session drops its id.
    const closed = closeTab(reloaded, second.key);
    expect(closed).toMatchObject({ active: first.key, tabs: [{ key: first.key }] });
    expect(setSession(closed, first.key, undefined).tabs[0].session).toBeUndefined();
    saveTabs({ tabs: [] }, storage);
    expect(loadTabs(storage)).toEqual({ tabs: [] });
  });

  it('keeps at most MAX_TABS and ignores what it cannot read', () => {
    let state: ConsoleTabs = { tabs: [] };
    for (let i = 0; i < MAX_TABS + 3; i += 1) state = addTab(state, a);
    expect(state.tabs).toHaveLength(MAX_TABS);
    const storage = memory();
    storage.setItem('fleet.console.tabs', '{"tabs":[{"key":1},{"key":"k","deviceId":"d","name":"n","session":5}], "active":"zz"}');
    expect(loadTabs(storage)).toEqual({ tabs: [], active: undefined });
    storage.setItem('fleet.console.tabs', 'not json');
    expect(loadTabs(storage)).toEqual({ tabs: [] });
  });

  it('re-attaches to a session in the tab already on it, or in a new tab bound to it', () => {
    const device = { deviceId: 'd1', name: 'one' };
    let state = addTab({ tabs: [] }, device);
    state = setSession(state, state.active!, 's-1');
    state = addTab(state, device);
    const onS1 = state.tabs[0].key;
    // Already open here: that tab is shown, no new tab.
    const shownAgain = attachTab(state, device, 's-1');
    expect(shownAgain.tabs).toHaveLength(2);
    expect(shownAgain.active).toBe(onS1);
    // Opened elsewhere: a new tab that re-attaches to it.
    const attached = attachTab(state, device, 's-2');
    expect(attached.tabs).toHaveLength(3);
    expect(attached.tabs.find((t) => t.key === attached.active)).toMatchObject({ deviceId: 'd1', session: 's-2' });
  });
});
