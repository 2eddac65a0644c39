/**
 * Live remote sessions (GET /remote/sessions): the caller's own and those on devices their
 * remote-access:manage covers, refreshed every few seconds. End is offered where the broker says
 * the caller may (`can_end`); the broker decides again when it is pressed. Consoles the caller
 * may watch read-only (`can_watch`) offer Watch; the caller's own consoles (`can_attach`) offer Re-attach,
 * from whichever tab or browser they are signed in on. On a phone the actions stay pinned at the row's right edge.
 */
import { useEffect, useState } from 'preact/hooks';
import { MAX_END_REASON } from '../../../shared/remote-frames.js';
import type { LiveSessionItem } from '../../../shared/api-types.js';
import { api, itemsOf } from '../api.js';
import { Link } from '../router.js';
import { ConfirmButton, ErrorBox, formatBytes, formatTime, ListTable, PageTitle, useAction, useLoad } from '../ui.js';

/** Where the owner re-attaches to their console: a console tab on its device bound to that session. */
export function reattachPath(s: { id: string; device: { id: string } }): string {
  return `/console/${encodeURIComponent(s.device.id)}?attach=${encodeURIComponent(s.id)}`;
}

const REFRESH_MS = 3000;

export function SessionsScreen() {
  const sessions = useLoad(async () => itemsOf<LiveSessionItem>(await api.get('/remote/sessions')), []);
  const ending = useAction();
  /** The reason typed for ending each session, by session id. */
  const [reasons, setReasons] = useState<Record<string, string>>({});
  useEffect(() => {
    document.title = 'Active sessions · Fleet console';
    const timer = setInterval(sessions.reload, REFRESH_MS);
    return () => clearInterval(timer);
  }, []);
  return (
    <section>
      <PageTitle>Active sessions</PageTitle>
      <ErrorBox error={sessions.error ?? ending.error} />
      <ListTable
        items={sessions.data}
        loading={sessions.loading}
        what="the sessions"
        empty="No remote sessions are running that you may see."
        columns={['Started', 'User', 'Device', 'Kind', 'Source', 'Bytes in / out', 'Actions']}
        row={(s) => (
          <tr key={s.id} data-testid={`session-${s.id}`}>
            <td>{formatTime(s.started_at)}</td>
            <td>{s.user.email}</td>
            <td>
              <Link href={`/devices/${s.device.id}`} title={s.device.id}>
                {s.device.name || <code>{s.device.id.slice(0, 12)}</code>}
              </Link>
            </td>
            <td>
              {s.kind}
              {s.attached === false && <span class="muted small"> (detached: waiting for its owner to re-attach)</span>}
              {s.watchers && s.watchers.length > 0 && (
                <div class="small" data-testid="session-watchers">
                  watched by {s.watchers.map((w) => w.user.email).join(', ')}
                </div>
              )}
            </td>
            <td>
              {s.source} {s.ip}
            </td>
            <td>
              {formatBytes(s.bytes_in)} / {formatBytes(s.bytes_out)}
            </td>
            {/* On a phone the row scrolls sideways under this cell, which stays at the right edge. */}
            <td class="actions-cell">
              {s.can_attach && (
                <Link
                  href={reattachPath(s)}
                  class="button small primary"
                  data-testid="reattach-session"
                  title={s.attached === false ? 'Resume this console here' : 'Take this console over here (the window showing it now lets it go)'}
                >
                  Re-attach
                </Link>
              )}{' '}
              {s.can_watch && (
                <Link href={`/watch/${encodeURIComponent(s.id)}`} class="button small" data-testid="watch-session">
                  Watch
                </Link>
              )}{' '}
              {s.can_end && (
                <ConfirmButton
                  label="End"
                  question={`End ${s.user.email}'s ${s.kind} on ${s.device.name || 'this device'}?`}
                  confirmLabel="Yes, end it"
                  disabled={ending.busy}
                  extra={
                    <input
                      class="end-reason"
                      aria-label="Reason (shown to the user)"
                      placeholder="Reason (shown to the user)"
                      maxLength={MAX_END_REASON}
                      value={reasons[s.id] ?? ''}
                      onInput={(e) => setReasons({ ...reasons, [s.id]: e.currentTarget.value })}
                    />
                  }
                  onConfirm={async () => {
                    const reason = (reasons[s.id] ?? '').trim();
                    await ending.run(() => api.del(`/remote/sessions/${encodeURIComponent(s.id)}`, undefined, reason ? { reason } : {}));
                    sessions.reload();
                  }}
                />
              )}
            </td>
          </tr>
        )}
      />
    </section>
  );
}
