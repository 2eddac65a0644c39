/**
 * What the device page's Remote access panel says besides its buttons: what the caller may do on the
 * device and where (a copy-only user sees the file browser and transfer, not an empty panel), what
 * their roles do not allow, and what waits for the device to connect.
 */
import type { RemoteCapabilities } from '../../../shared/api-types.js';

export interface RemoteSummary {
  /** what the caller may do beyond the panel's own buttons, each pointing at the panel that does it */
  may: { text: string; href: string }[];
  /** one sentence naming what the caller's roles do not allow here; absent when they allow everything */
  mayNot?: string;
  /** one sentence naming what is allowed but waits for the device to connect; absent while it is connected */
  offline?: string;
}

/** "a", "a and b", "a, b and c" (or "or") */
function listed(items: string[], conjunction = 'and'): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} ${conjunction} ${items[items.length - 1]}`;
}

/**
 * `tunnelPanel`: whether the page shows its Tunnels panel (the console area of the UI is allowed).
 * Undefined when the roles allow nothing here (the panel says so in its own words).
 */
export function remoteSummary(access: RemoteCapabilities, tunnelPanel: boolean): RemoteSummary | undefined {
  if (!(access.console || access.reload || access.copy || access.tunnel)) return undefined;
  // An empty list: every copy grant names directories, none readable (uploads to paths named in full only).
  const browsable = access.copy && !(access.copy_paths && access.copy_paths.length === 0);
  const may: RemoteSummary['may'] = [];
  if (access.copy && browsable && access.connected) may.push({ text: 'Browse the files on the device', href: '#h-files' });
  if (access.copy) may.push({ text: 'Copy files to and from the device', href: '#h-transfer' });
  if (access.tunnel && tunnelPanel) may.push({ text: 'Open tunnels to ports on the device', href: '#h-tunnels' });
  const not = [!access.console && 'a console', !access.copy && 'file copy', !access.tunnel && 'tunnels', !access.reload && 'an agent reload'].filter(
    (x): x is string => Boolean(x),
  );
  const waiting = [access.console && 'the console', access.reload && 'reload', browsable && 'the file browser'].filter((x): x is string => Boolean(x));
  return {
    may,
    ...(not.length > 0 ? { mayNot: `Your roles do not allow ${listed(not, 'or')} on this device.` } : {}),
    ...(!access.connected && waiting.length > 0
      ? { offline: `The device is offline: ${listed(waiting)} ${waiting.length === 1 ? 'is' : 'are'} available once it connects.` }
      : {}),
  };
}
