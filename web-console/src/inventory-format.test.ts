/** Inventory rows: readable names, units and dates, never raw keys and epoch numbers. */
import { describe, expect, it } from 'vitest';
import { bytesText, dateText, durationText, inventoryRows, labelOf, timeOf, valueText } from './inventory-format.js';

/** A local time as dateText writes it (the reader's zone, whatever the machine's). */
const local = (y: number, mo: number, d: number, h: number, mi: number) => new Date(y, mo - 1, d, h, mi);

describe('units and times', () => {
  it('writes sizes in binary units, durations in days, hours and minutes, times as YYYY-MM-DD HH:MM', () => {
    expect(bytesText(4_083_023_872)).toBe('3.8 GiB');
    expect(bytesText(512)).toBe('512 B');
    expect(bytesText(250 * 1024 ** 3)).toBe('250 GiB');
    expect(durationText(443_100)).toBe('5 d 3 h');
    expect(durationText(4000)).toBe('1 h 6 min');
    expect(durationText(125)).toBe('2 min');
    expect(durationText(42)).toBe('42 s');
    expect(dateText(local(2026, 11, 20, 10, 2))).toBe('2026-11-20 10:02');
  });

  it('reads Unix seconds, milliseconds and ISO strings as times, and nothing implausible', () => {
    const at = local(2026, 11, 20, 10, 2);
    expect(timeOf(at.getTime() / 1000)?.getTime()).toBe(at.getTime());
    expect(timeOf(at.getTime())?.getTime()).toBe(at.getTime());
    expect(timeOf(String(at.getTime() / 1000))?.getTime()).toBe(at.getTime());
    expect(timeOf(at.toISOString())?.getTime()).toBe(at.getTime());
    expect(timeOf(42)).toBeUndefined();
    expect(timeOf('soon')).toBeUndefined();
  });

  it('labels keys in words', () => {
    expect(labelOf('kernel_version')).toBe('Kernel version');
    expect(labelOf('bootTime')).toBe('Boot time');
    expect(labelOf('swap.total')).toBe('Swap total');
  });

  it('formats an unknown field by what its key says it holds', () => {
    const boot = local(2026, 11, 20, 10, 2);
    expect(valueText('boot_time', boot.getTime() / 1000)).toBe('2026-11-20 10:02');
    expect(valueText('last_seen', boot.toISOString())).toBe('2026-11-20 10:02');
    expect(valueText('swap_total', 2 * 1024 ** 3)).toBe('2.0 GiB');
    expect(valueText('process_uptime', 90)).toBe('1 min');
    expect(valueText('secure_boot', true)).toBe('yes');
    expect(valueText('timezone', 'Europe/Oslo')).toBe('Europe/Oslo');
    expect(valueText('cores', 4)).toBe('4');
    expect(valueText('gpus', [])).toBe('none');
    expect(valueText('anything', null)).toBe('—');
  });
});

describe('inventoryRows', () => {
  it('names each field this agent reports, with units and dates, and derives the last boot', () => {
    const collected = local(2026, 11, 25, 12, 0);
    const rows = inventoryRows({
      device_id: 'a'.repeat(64),
      hostname: 'edge-01',
      os: { name: 'Debian GNU/Linux', version: '12', pretty_name: 'Debian GNU/Linux 12 (bookworm)' },
      kernel: '6.1.0-18-amd64',
      kernel_version: '#1 SMP Debian 6.1.76-1',
      arch: 'x86_64',
      cpu: { model: 'Intel Atom x6425E', cores: 4 },
      memory: { total: 4_083_023_872, free: 1_288_490_189 },
      agent_version: '1.4.0',
      uptime: 443_100 + 2 * 60 + 0.5,
      agent_uptime: 3600,
      collected_at: collected.toISOString(),
      received_at: collected.toISOString(),
      disks: [],
      network: [],
    });
    expect(rows).toEqual([
      ['Host name', 'edge-01'],
      ['Operating system', 'Debian GNU/Linux 12 (bookworm)'],
      ['Kernel', '6.1.0-18-amd64 #1 SMP Debian 6.1.76-1'],
      ['Architecture', 'x86_64'],
      ['CPU', 'Intel Atom x6425E (4 cores)'],
      ['Memory', '3.8 GiB (1.2 GiB free)'],
      ['Last boot', '2026-11-20 08:52'],
      ['Up for', '5 d 3 h'],
      ['Agent version', '1.4.0'],
      ['Agent running for', '1 h 0 min'],
      ['Collected', '2026-11-25 12:00'],
      ['Received', '2026-11-25 12:00'],
    ]);
  });

  it('reads another agent’s fields in words, one level of nesting as "Parent · child"', () => {
    const boot = local(2026, 11, 20, 10, 2);
    const rows = inventoryRows({ boot_time: boot.getTime() / 1000, swap: { total: 2 * 1024 ** 3, used: 0 }, serial_number: 'SN-1' });
    expect(rows).toEqual([
      ['Boot time', '2026-11-20 10:02'],
      ['Swap · total', '2.0 GiB'],
      ['Swap · used', '0 B'],
      ['Serial number', 'SN-1'],
    ]);
    // No raw key, no epoch number.
    expect(JSON.stringify(rows)).not.toMatch(/boot_time|serial_number|\d{10}/);
  });

  it('leaves out what was not reported', () => {
    expect(inventoryRows({ hostname: 'h' })).toEqual([['Host name', 'h']]);
  });
});
