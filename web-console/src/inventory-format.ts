/**
 * A device's inventory as an operator reads it: named rows ("Memory", "Last boot") with units and
 * dates ("3.8 GiB", "2026-11-20 10:02"), never raw keys and epoch numbers. The fields this agent
 * reports have rows of their own; any other field (another agent's) gets a label from its key and a
 * value formatted by what its key says it holds (a time, a size, a duration).
 */

export type InventoryRow = [label: string, value: string];

type Row = Record<string, unknown>;

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

/** 4083023872 → "3.8 GiB". */
export function bytesText(n: number): string {
  if (!Number.isFinite(n) || n < 0) return String(n);
  let v = n;
  let i = 0;
  while (v >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${UNITS[i]}`;
}

/** 443100 → "5 d 3 h"; 4000 → "1 h 6 min"; 42 → "42 s". */
export function durationText(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return String(seconds);
  const d = Math.floor(seconds / 86400);
  const h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  if (d) return `${d} d ${h} h`;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min`;
  return `${Math.floor(seconds)} s`;
}

const two = (n: number) => String(n).padStart(2, '0');

/** A time in the reader's zone as "2026-11-20 10:02" (sortable, unambiguous across locales). */
export function dateText(d: Date): string {
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;
}

/**
 * A time from what an agent may send: Unix seconds, Unix milliseconds or an ISO 8601 string. Only
 * plausible times (2000–2100) count, so a small number is never read as 1970.
 */
export function timeOf(value: unknown): Date | undefined {
  let ms: number | undefined;
  if (typeof value === 'number') ms = value > 1e11 ? value : value * 1000;
  else if (typeof value === 'string' && /^\d{4}-\d{2}-\d{2}/.test(value)) ms = Date.parse(value);
  else if (typeof value === 'string' && /^\d{9,13}$/.test(value)) return timeOf(Number(value));
  if (ms === undefined || !Number.isFinite(ms)) return undefined;
  return ms >= Date.UTC(2000, 0, 1) && ms < Date.UTC(2100, 0, 1) ? new Date(ms) : undefined;
}

/** "kernel_version" → "Kernel version"; "bootTime" → "Boot time". */
export function labelOf(key: string): string {
  const words = key
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .replace(/[_.-]+/g, ' ')
    .trim()
    .toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

const TIME_KEY = /(^|_)(at|time|date|ts|timestamp|since|boot|booted|last_boot|boot_time|created|updated|seen)$/i;
const SIZE_KEY = /(memory|mem|bytes|size|total|free|used|available|swap|capacity|ram)$/i;
const DURATION_KEY = /(uptime|duration|_seconds|_secs|elapsed)$/i;

/** One value, formatted by what its key says it holds. */
export function valueText(key: string, value: unknown): string {
  if (value === null || value === undefined || value === '') return '—';
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  if (TIME_KEY.test(key) || /time|date/i.test(key)) {
    const at = timeOf(value);
    if (at) return dateText(at);
  }
  if (typeof value === 'number' && DURATION_KEY.test(key)) return durationText(value);
  if (typeof value === 'number' && SIZE_KEY.test(key)) return bytesText(value);
  if (Array.isArray(value)) {
    if (value.length === 0) return 'none';
    return value.map((v) => (v !== null && typeof v === 'object' ? JSON.stringify(v) : String(v))).join(', ');
  }
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** The fields with rows of their own below (or tables: disks, network), never repeated as "other". */
const KNOWN = new Set([
  'device_id',
  'received_at',
  'hostname',
  'os',
  'kernel',
  'kernel_version',
  'arch',
  'cpu',
  'memory',
  'disks',
  'network',
  'agent_version',
  'uptime',
  'agent_uptime',
  'collected_at',
]);

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/** The summary rows of an inventory report (GET /inventory/{id}), then its other fields, readable. */
export function inventoryRows(report: Row): InventoryRow[] {
  const os = (report.os ?? {}) as Row;
  const cpu = (report.cpu ?? {}) as Row;
  const memory = (report.memory ?? {}) as Row;
  const collected = timeOf(report.collected_at) ?? timeOf(report.received_at);
  const uptime = num(report.uptime);
  const total = num(memory.total);
  const free = num(memory.free);
  const rows: [string, string | undefined][] = [
    ['Host name', str(report.hostname)],
    ['Operating system', str(os.pretty_name) ?? ([str(os.name), str(os.version)].filter(Boolean).join(' ') || undefined)],
    ['Kernel', [str(report.kernel), str(report.kernel_version)].filter(Boolean).join(' ') || undefined],
    ['Architecture', str(report.arch)],
    [
      'CPU',
      str(cpu.model) || num(cpu.cores) ? `${str(cpu.model) ?? ''}${num(cpu.cores) ? `${str(cpu.model) ? ' ' : ''}(${num(cpu.cores)} cores)` : ''}` : undefined,
    ],
    ['Memory', total !== undefined ? `${bytesText(total)}${free !== undefined ? ` (${bytesText(free)} free)` : ''}` : undefined],
    ['Last boot', uptime !== undefined && collected ? dateText(new Date(collected.getTime() - uptime * 1000)) : undefined],
    ['Up for', uptime !== undefined ? durationText(uptime) : undefined],
    ['Agent version', str(report.agent_version)],
    ['Agent running for', num(report.agent_uptime) !== undefined ? durationText(num(report.agent_uptime)!) : undefined],
    ['Collected', collected ? dateText(collected) : undefined],
    ['Received', timeOf(report.received_at) ? dateText(timeOf(report.received_at)!) : undefined],
  ];
  const known = rows.filter((r): r is InventoryRow => r[1] !== undefined);
  const other: InventoryRow[] = [];
  for (const [key, value] of Object.entries(report)) {
    if (KNOWN.has(key)) continue;
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      // One level of nesting reads "Parent · child" (a deeper value as its JSON).
      for (const [inner, v] of Object.entries(value as Row).slice(0, 50))
        other.push([`${labelOf(key)} · ${labelOf(inner).toLowerCase()}`, valueText(inner, v)]);
    } else other.push([labelOf(key), valueText(key, value)]);
  }
  return [...known, ...other.slice(0, 200)];
}
