import { describe, expect, it, vi } from 'vitest';
import { collectInventory, parseMounts, parseOsRelease } from './inventory.js';

describe('inventory', () => {
  it('reads /etc/os-release values, quoted or not', () => {
    const r = parseOsRelease('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n# comment\n');
    expect(r).toMatchObject({ NAME: 'Debian GNU/Linux', VERSION_ID: '12', ID: 'debian', PRETTY_NAME: 'Debian GNU/Linux 12 (bookworm)' });
  });

  it('keeps real file systems from /proc/mounts, once per mount point, unescaping names', () => {
    const mounts = parseMounts(
      [
        'proc /proc proc rw 0 0',
        '/dev/sda1 / ext4 rw 0 0',
        'tmpfs /run tmpfs rw 0 0',
        '/dev/sdb1 /mnt/my\\040disk xfs rw 0 0',
        '/dev/sda1 / ext4 rw 0 0',
        'overlay /var/lib/docker/overlay2/x/merged overlay rw 0 0',
      ].join('\n'),
    );
    expect(mounts.map((m) => m.mount)).toEqual(['/', '/mnt/my disk', '/var/lib/docker/overlay2/x/merged']);
    expect(mounts[0]).toEqual({ device: '/dev/sda1', mount: '/', fstype: 'ext4' });
  });

  it("stamps its report without Date's toISOString, which loads ICU's time zones into the agent for good", async () => {
    const toISOString = vi.spyOn(Date.prototype, 'toISOString');
    try {
      const r = await collectInventory('1.2.3', Date.now() - 5000);
      expect(r.collected_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(toISOString).not.toHaveBeenCalled();
    } finally {
      toISOString.mockRestore();
    }
  });

  it('collects a report of this machine', async () => {
    const r = await collectInventory('1.2.3', Date.now() - 5000);
    expect(r.hostname).toBeTruthy();
    expect(r.os.name).toBeTruthy();
    expect(r.kernel).toBeTruthy();
    expect(r.arch).toBeTruthy();
    expect(r.cpu.cores).toBeGreaterThan(0);
    expect(r.memory.total).toBeGreaterThan(r.memory.free);
    expect(r.disks.length).toBeGreaterThan(0);
    expect(r.disks[0].size).toBeGreaterThan(0);
    expect(r.network.some((n) => n.addresses.length > 0)).toBe(true);
    expect(r.agent_version).toBe('1.2.3');
    expect(r.agent_uptime).toBeGreaterThanOrEqual(4);
    expect(JSON.stringify(r).length).toBeLessThan(512 * 1024);
  });
});
