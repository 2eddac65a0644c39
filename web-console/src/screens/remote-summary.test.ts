/** The Remote access panel's words: what a user may do on the device, what not, and what waits for it to connect. */
import { describe, expect, it } from 'vitest';
import type { RemoteCapabilities } from '../../../shared/api-types.js';
import { remoteSummary } from './remote-summary.js';

const none: RemoteCapabilities = { device_id: 'd', connected: true, console: false, tunnel: false, copy: false, reload: false };

describe('remote access panel', () => {
  it('a copy-only user: the file browser and transfer, and an honest word for the rest', () => {
    expect(remoteSummary({ ...none, copy: true }, true)).toEqual({
      may: [
        { text: 'Browse the files on the device', href: '#h-files' },
        { text: 'Copy files to and from the device', href: '#h-transfer' },
      ],
      mayNot: 'Your roles do not allow a console, tunnels or an agent reload on this device.',
    });
  });

  it('copy grants naming no readable directory: transfer only; offline: the browser waits for the device', () => {
    expect(remoteSummary({ ...none, copy: true, copy_paths: [] }, true)?.may).toEqual([{ text: 'Copy files to and from the device', href: '#h-transfer' }]);
    expect(remoteSummary({ ...none, copy: true, connected: false }, true)).toMatchObject({
      may: [{ text: 'Copy files to and from the device', href: '#h-transfer' }],
      offline: 'The device is offline: the file browser is available once it connects.',
    });
  });

  it('everything allowed: nothing refused; offline names what waits', () => {
    const all = { ...none, console: true, tunnel: true, copy: true, reload: true };
    expect(remoteSummary(all, true)?.mayNot).toBeUndefined();
    expect(remoteSummary({ ...all, connected: false }, true)?.offline).toBe(
      'The device is offline: the console, reload and the file browser are available once it connects.',
    );
    // Tunnels are pointed at only where the page shows their panel.
    expect(remoteSummary(all, false)?.may.map((m) => m.href)).toEqual(['#h-files', '#h-transfer']);
  });

  it('nothing allowed: no summary (the panel says so itself)', () => {
    expect(remoteSummary(none, true)).toBeUndefined();
  });
});
