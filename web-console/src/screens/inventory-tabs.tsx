/**
 * The typed inventory of one device (GET /inventoryreport/{id}?item_type=…): a tab per item type,
 * each a searchable, paged table. A type the agent never reported says so instead of a table.
 */
import { useState } from 'preact/hooks';
import type { InventoryItemReport as ItemReport } from '../../../shared/api-types.js';
import { api, ApiFailure } from '../api.js';
import { ErrorBox, formatTime, Loading, Table, useLoad } from '../ui.js';

type Row = Record<string, unknown>;

interface Tab {
  id: string;
  label: string;
  /** item types shown one after the other (docker and podman) */
  types: string[];
  columns: [string, (row: Row) => string][];
}

const text = (key: string) => (row: Row) => (row[key] === undefined || row[key] === null ? '' : String(row[key]));

const CONTAINER_COLUMNS: Tab['columns'] = [
  ['Name', text('names')],
  ['Image', text('image')],
  ['Status', text('status')],
  ['Ports', text('ports')],
  ['Created', text('created_at')],
];
const IMAGE_COLUMNS: Tab['columns'] = [
  ['Repository', text('repository')],
  ['Tag', text('tag')],
  ['Size', text('size')],
  ['Created', text('created_at')],
];

export const INVENTORY_TABS: Tab[] = [
  {
    id: 'software',
    label: 'Software',
    types: ['software'],
    columns: [
      ['Package', text('name')],
      ['Version', text('version')],
      ['Arch', text('arch')],
    ],
  },
  { id: 'containers', label: 'Containers', types: ['docker_containers', 'podman_containers'], columns: CONTAINER_COLUMNS },
  { id: 'images', label: 'Images', types: ['docker_images', 'podman_images'], columns: IMAGE_COLUMNS },
  {
    id: 'users',
    label: 'Users',
    types: ['users'],
    columns: [
      ['User', text('user')],
      ['UID', text('uid')],
      ['GID', text('gid')],
      ['Home', text('home')],
      ['Shell', text('shell')],
      ['Password', text('has_pwd')],
    ],
  },
  {
    id: 'groups',
    label: 'Groups',
    types: ['groups'],
    columns: [
      ['Group', text('group')],
      ['GID', text('gid')],
      ['Members', (r) => (Array.isArray(r.members) ? r.members.join(', ') : '')],
    ],
  },
  {
    id: 'ports',
    label: 'Ports',
    types: ['ports'],
    columns: [
      ['Protocol', text('proto')],
      ['Socket', text('socket')],
      ['Process', text('proc_info')],
    ],
  },
  {
    id: 'processes',
    label: 'Processes',
    types: ['processes'],
    columns: [
      ['PID', text('pid')],
      ['User', text('user')],
      ['CPU %', text('cpu')],
      ['Memory %', text('mem')],
      ['Command', text('cmdline')],
    ],
  },
];

const PAGE = 100;

/** One item type of the device, or null when it never reported that type. */
async function loadType(deviceId: string, type: string, search: string, offset: number): Promise<ItemReport | null> {
  const q = new URLSearchParams({ item_type: type, items_per_page: String(PAGE), offset: String(offset) });
  if (search) q.set('search', search);
  try {
    return await api.get<ItemReport>(`/inventoryreport/${encodeURIComponent(deviceId)}?${q}`);
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 404 && err.error === 'no_inventory') return null;
    throw err;
  }
}

function TypeTable({ deviceId, type, tab, search }: { deviceId: string; type: string; tab: Tab; search: string }) {
  const [offset, setOffset] = useState(0);
  const report = useLoad(() => loadType(deviceId, type, search, offset), [deviceId, type, search, offset]);
  if (report.loading && report.data === undefined) return <Loading what={type.replace('_', ' ')} />;
  if (report.error) return <ErrorBox error={report.error} />;
  const r = report.data;
  if (r === null || r === undefined) return <p class="muted">{`Not reported by this device (${type.replace('_', ' ')}).`}</p>;
  const items = r.items ?? [];
  const total = r.total ?? items.length;
  return (
    <div class="inventory-type" data-type={type}>
      <p class="muted">
        {tab.types.length > 1 ? `${type.split('_')[0]}: ` : ''}
        {total === 1 ? '1 item' : `${total} items`}
        {r.pkg_manager ? ` (${r.pkg_manager})` : ''} · changed {formatTime(r.received_at ?? undefined)}
      </p>
      <Table caption={`${tab.label} (${type})`} columns={tab.columns.map(([head]) => head)}>
        {items.map((row, i) => (
          <tr key={i}>
            {tab.columns.map(([head, cell]) => (
              <td key={head}>{cell(row)}</td>
            ))}
          </tr>
        ))}
      </Table>
      {total > PAGE && (
        <div class="pager">
          <button type="button" disabled={offset === 0} onClick={() => setOffset(Math.max(0, offset - PAGE))}>
            Previous
          </button>
          <span>
            {offset + 1}–{Math.min(offset + PAGE, total)} of {total}
          </span>
          <button type="button" disabled={offset + PAGE >= total} onClick={() => setOffset(offset + PAGE)}>
            Next
          </button>
        </div>
      )}
    </div>
  );
}

/** Tabs for software, containers, images, users, groups, ports and processes of one device. */
export function InventoryTabs({ deviceId }: { deviceId: string }) {
  const [current, setCurrent] = useState(INVENTORY_TABS[0].id);
  const [search, setSearch] = useState('');
  const tab = INVENTORY_TABS.find((t) => t.id === current) ?? INVENTORY_TABS[0];
  return (
    <div class="inventory-tabs">
      <div role="tablist" aria-label="Inventory">
        {INVENTORY_TABS.map((t) => (
          <button
            key={t.id}
            type="button"
            role="tab"
            id={`inv-tab-${t.id}`}
            aria-selected={t.id === current}
            aria-controls="inv-panel"
            onClick={() => {
              setCurrent(t.id);
              setSearch('');
            }}
          >
            {t.label}
          </button>
        ))}
      </div>
      <div role="tabpanel" id="inv-panel" aria-labelledby={`inv-tab-${tab.id}`}>
        <label>
          Filter {tab.label.toLowerCase()}{' '}
          <input type="search" value={search} maxLength={256} onInput={(e) => setSearch((e.target as HTMLInputElement).value)} />
        </label>
        {tab.types.map((type) => (
          <TypeTable key={`${tab.id}-${type}-${search}`} deviceId={deviceId} type={type} tab={tab} search={search} />
        ))}
      </div>
    </div>
  );
}
