/**
 * Devices waiting for enrolment: approve or reject each one, or approve a selection at once. The
 * list and the count in the navigation and on the dashboard follow the event stream: a host that
 * enrols appears without a reload, one approved or rejected elsewhere goes.
 */
import { useEffect, useState } from 'preact/hooks';
import type { PendingHost } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { usePendingEvents } from '../events.js';
import { ConfirmButton, ErrorBox, formatTime, ListTable, Notice, PageTitle, useAction, useLoad } from '../ui.js';

function idOf(host: PendingHost): string {
  return host.node_id;
}

/** The pending list holds at most this many (GET /pendinghost's page): a count at it reads "1000+". */
const LIST_MAX = 1000;

function loadPending(): Promise<PendingHost[]> {
  return api.get<PendingHost[]>('/pendinghost', { items_per_page: LIST_MAX }).then((a) => (Array.isArray(a) ? a : []));
}

/** "3", or "1000+" when the list is full. */
export function pendingLabel(count: number): string {
  return count >= LIST_MAX ? `${LIST_MAX}+` : String(count);
}

/**
 * How many hosts wait for approval, kept current by the event stream (undefined until known, and
 * for users who may not list them: device:approve).
 */
export function usePendingCount(enabled: boolean): number | undefined {
  const [count, setCount] = useState<number>();
  const [round, setRound] = useState(0);
  useEffect(() => {
    if (!enabled) return;
    let live = true;
    loadPending().then(
      (hosts) => live && setCount(hosts.length),
      () => live && setCount(undefined),
    );
    return () => {
      live = false;
    };
  }, [enabled, round]);
  const reload = () => setRound((n) => n + 1);
  usePendingEvents(enabled, reload, reload);
  return enabled ? count : undefined;
}

export function PendingHostsScreen() {
  const list = useLoad(loadPending, []);
  usePendingEvents(true, list.reload, list.reload);
  const action = useAction();
  const [notice, setNotice] = useState('');
  const [picked, setPicked] = useState<Set<string>>(new Set());
  const selected = (list.data ?? []).filter((h) => picked.has(idOf(h)));
  const toggle = (id: string) => {
    const next = new Set(picked);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setPicked(next);
  };

  /** Approves one after the other; stops at the first refusal, naming the host. */
  const approveSelected = () =>
    void action.run(async () => {
      setNotice('');
      let done = 0;
      try {
        for (const host of selected) {
          await api.post('/pendinghost', { node_id: idOf(host) });
          done += 1;
        }
      } catch (err) {
        const host = selected[done];
        throw new Error(
          `${host.hostname ?? idOf(host).slice(0, 12)} was not approved (${done} approved before it): ${err instanceof Error ? err.message : String(err)}`,
        );
      } finally {
        setPicked(new Set());
        list.reload();
      }
      setNotice(`${done} host${done === 1 ? '' : 's'} approved.`);
    });

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
      {list.data && list.data.length > 0 && (
        <div class="bulk-actions" role="group" aria-label="Actions on the selected hosts">
          <span>{selected.length} selected</span>
          <ConfirmButton
            label="Approve selected"
            class="primary"
            disabled={!selected.length || action.busy}
            question={`Approve ${selected.length} host${selected.length === 1 ? '' : 's'}? Each joins the fleet in its key's group.`}
            confirmLabel="Yes, approve"
            onConfirm={approveSelected}
          />
        </div>
      )}
      <ListTable
        items={list.data}
        loading={list.loading}
        what="pending hosts"
        empty="No device is waiting for approval."
        columns={['Select', 'Host name', 'Device id', 'Key fingerprint', 'Group', 'Address', 'Asked', 'Actions']}
        row={(host) => (
          <tr key={idOf(host)}>
            <td>
              <input
                type="checkbox"
                aria-label={`Select ${host.hostname ?? idOf(host).slice(0, 12)}`}
                checked={picked.has(idOf(host))}
                onChange={() => toggle(idOf(host))}
              />
            </td>
            <td>{host.hostname}</td>
            <td>
              <code title={idOf(host)}>{idOf(host).slice(0, 16)}…</code>
            </td>
            <td>
              <code>{host.public_key_fingerprint ?? ''}</code>
            </td>
            <td>
              <code>{host.group_id ?? ''}</code>
            </td>
            <td>{host.last_ip ?? ''}</td>
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
