/** Devices waiting for enrolment: approve or reject each one. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { ConfirmButton, ErrorBox, formatTime, ListTable, Notice, PageTitle, useAction, useLoad } from '../ui.js';

interface PendingHost {
  node_id?: string;
  device_id?: string;
  hostname?: string;
  title?: string;
  created_at?: string;
  last_seen?: string | null;
  last_ip?: string | null;
  ip?: string | null;
  bootstrap_key_id?: string | null;
  public_key_fingerprint?: string;
  group_id?: string;
  [key: string]: unknown;
}

function idOf(host: PendingHost): string {
  return String(host.node_id ?? host.device_id ?? '');
}

export function PendingHostsScreen() {
  const list = useLoad(() => api.get<PendingHost[]>('/pendinghost').then((a) => (Array.isArray(a) ? a : [])), []);
  const action = useAction();
  const [notice, setNotice] = useState('');

  const act = (verb: 'approve' | 'reject', host: PendingHost) =>
    void action.run(async () => {
      setNotice('');
      const id = idOf(host);
      if (verb === 'approve') await api.post('/pendinghost', { node_id: id });
      else await api.del(`/pendinghost/${encodeURIComponent(id)}`);
      setNotice(`${host.hostname ?? id.slice(0, 12)} was ${verb === 'approve' ? 'approved' : 'rejected'}.`);
      list.reload();
    });

  return (
    <section>
      <PageTitle
        actions={
          <button type="button" onClick={list.reload}>
            Refresh
          </button>
        }
      >
        Pending hosts
      </PageTitle>
      <ErrorBox error={list.error} />
      <ErrorBox error={action.error} title="The request failed" />
      {notice && <Notice>{notice}</Notice>}
      {list.data && list.data.length > 0 && <p class="muted">Compare each key fingerprint with the one the device's agent logged before approving it.</p>}
      <ListTable
        items={list.data}
        loading={list.loading}
        what="pending hosts"
        empty="No device is waiting for approval."
        columns={['Host name', 'Device id', 'Key fingerprint', 'Group', 'Address', 'Asked', 'Actions']}
        row={(host) => (
          <tr key={idOf(host)}>
            <td>{host.hostname ?? host.title ?? ''}</td>
            <td>
              <code title={idOf(host)}>{idOf(host).slice(0, 16)}…</code>
            </td>
            <td>
              <code>{host.public_key_fingerprint ?? ''}</code>
            </td>
            <td>
              <code>{host.group_id ?? ''}</code>
            </td>
            <td>{host.last_ip ?? host.ip ?? ''}</td>
            <td>{formatTime(host.created_at ?? host.last_seen ?? undefined)}</td>
            <td class="actions-cell">
              <button type="button" class="primary" disabled={action.busy} onClick={() => act('approve', host)}>
                Approve
              </button>
              <ConfirmButton label="Reject" question="Reject this device?" onConfirm={() => act('reject', host)} disabled={action.busy} />
            </td>
          </tr>
        )}
      />
    </section>
  );
}
