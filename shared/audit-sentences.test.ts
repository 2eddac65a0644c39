/** Audit entries as sentences: one per event the broker writes, a generic one for any other. */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { routeTable } from '../broker/routes.js';
import { auditSentence, SENTENCE_EVENTS, type SentenceEntry } from './audit-sentences.js';

const hex = (c: string) => c.repeat(64);
const names: Record<string, string> = { 'site-2': 'Site 2', [hex('a')]: 'kiosk-7' };
const nameOf = (id: string) => names[id];
const ok = (event: string, options: unknown, extra: Partial<SentenceEntry> = {}): string =>
  auditSentence({ event, action: 'POST /api/v2/x', result: 'ok', options, ...extra }, nameOf);

describe('auditSentence', () => {
  it('reads a group tree change node by node: created, moved, renamed, deleted, tagged', () => {
    expect(
      ok('device.tree.change', {
        params: {},
        before: { lab: { parent_id: 'site-1', title: 'lab', tags: [] } },
        after: { lab: { parent_id: 'site-2', title: 'lab', tags: [] } },
      }),
    ).toBe('Moved group lab under Site 2');
    expect(ok('device.tree.change', { before: { [hex('a')]: { title: 'x' } }, after: { [hex('a')]: { title: 'y' } } })).toBe('Renamed device x to y');
    expect(ok('device.tree.change', { before: { hq: null }, after: { hq: { parent_id: 'root', title: 'HQ', tags: [] } } })).toBe(
      'Created group HQ under the top of the tree',
    );
    expect(ok('device.tree.change', { before: { old: { parent_id: 'root', title: 'Old', tags: [] } }, after: { old: null } })).toBe('Deleted group Old');
    expect(
      ok('device.tree.change', {
        before: { lab: { parent_id: 'site-1', title: 'lab', tags: ['a'] } },
        after: { lab: { parent_id: 'site-2', title: 'Lab', tags: ['a', 'b'] } },
      }),
    ).toBe('Renamed group lab to Lab; moved group Lab under Site 2; set the tags of group Lab to a, b');
  });

  it('reads a refused tree change from the changes asked for, as an attempt', () => {
    const refused = auditSentence(
      {
        event: 'device.tree.change',
        action: 'PUT /api/v2/grouptree',
        result: 'error',
        reason: 'group_not_empty: …',
        options: {
          params: {},
          query: {},
          body: {
            changes: [
              { action: 'delete', data: { node_id: 'site-2' } },
              { action: 'move', data: { node_id: hex('a'), parent_id: 'site-2' } },
            ],
          },
        },
      },
      nameOf,
    );
    expect(refused).toBe('Tried to delete group Site 2; move device kiosk-7 under Site 2');
  });

  it('says how many changes a commit made, with its message', () => {
    expect(ok('config.commit', { message: 'Open port 22', changes: ['s1', 's2', 's3'], labels: [] })).toBe('Committed 3 changes: Open port 22');
    expect(ok('config.commit', { message: '', changes: ['s1'] })).toBe('Committed 1 change');
  });

  it('names users, roles, devices and tags from the recorded change', () => {
    expect(ok('user.create', { params: {}, before: null, after: { email: 'ann@example.com', password_hash: '[redacted]' } })).toBe(
      'Created user ann@example.com',
    );
    expect(ok('user.update', { params: { user_id: 'u1' }, before: { disabled: 0, email: 'bo@example.com' }, after: { disabled: 1 } })).toBe(
      'Changed user bo@example.com: disabled, email',
    );
    expect(ok('user.update', { params: { user_id: 'u1' }, before: { disabled: 0 }, after: { disabled: 1 } })).toBe('Disabled user u1');
    expect(ok('user.update', { params: { user_id: 'u1' }, before: { disabled: true }, after: { disabled: false } })).toBe('Re-enabled user u1');
    expect(ok('role.delete', { params: { role_id: 'r1' }, before: { name: 'Operators' }, after: null })).toBe('Deleted role “Operators”');
    expect(ok('role.replace', { params: { role_id: 'r1' }, before: { policies: [] }, after: { policies: [{}], name: 'Ops', updated_at: 'x' } })).toBe(
      'Changed role “Ops”: policies, name',
    );
    expect(ok('device.tags.update', { params: { node_id: hex('a') }, before: { tags: [] }, after: { tags: ['edge', 'prod'] } })).toBe(
      'Set the tags of device kiosk-7 to edge, prod',
    );
    expect(ok('device.tags.update', { params: { node_id: 'lab' }, before: { tags: ['x'] }, after: { tags: [] } })).toBe('Cleared the tags of group lab');
    expect(ok('device.remove', { params: { node_id: hex('b') }, before: { title: 'old-box' }, after: null })).toBe('Removed device old-box');
    expect(ok('device.approve', { params: {}, before: { state: 'pending' }, after: { state: 'approved' } }, { device_id: hex('a') })).toBe(
      'Approved device kiosk-7',
    );
    expect(ok('config.discard', { params: { sha: 'abcdef0123456789' } })).toBe('Discarded the staged change abcdef01');
    expect(ok('config.discard', { params: {} })).toBe('Discarded every staged change');
    expect(ok('cve.status', { params: { cve_id: 'CVE-2024-1' }, before: { status: 'open' }, after: { status: 'ignored' } })).toBe(
      'Set the status of CVE-2024-1 to ignored',
    );
  });

  it('reads remote access: opened, refused, ended, re-attached, watched, reloaded', () => {
    const remote = (event: string, result: string, action = 'console', options: unknown = {}) =>
      auditSentence({ event, action, result, device_id: hex('a'), options }, nameOf);
    expect(remote('remote.console.start', 'allowed')).toBe('Opened a console on kiosk-7');
    expect(remote('remote.tunnel.denied', 'denied', 'tunnel', { proto: 'tcp', port: 22 })).toBe('Tried to open a tunnel to port 22 on kiosk-7');
    expect(remote('remote.console', 'denied')).toBe('Tried to open a console on kiosk-7');
    expect(remote('remote.console.end', 'ended')).toBe('Ended a console on kiosk-7');
    expect(remote('remote.console.attach', 'allowed')).toBe('Re-attached to a console on kiosk-7');
    expect(remote('remote.console.watch', 'allowed')).toBe('Watched a console on kiosk-7, read-only');
    expect(remote('remote.reload.start', 'allowed', 'reload')).toBe('Reloaded the agent on kiosk-7');
    expect(remote('remote.qbee', 'denied', 'connect')).toBe('Tried to open a qbee-v1 connection on kiosk-7');
  });

  it('falls back to a generic sentence for an event it does not know, and never throws on odd options', () => {
    expect(ok('test.concurrent', { i: 1 })).toBe('Called POST /api/v2/x (event test.concurrent)');
    expect(auditSentence({ event: 'x.y', action: 'DELETE /api/v2/y', result: 'denied', options: null })).toBe('Tried to call DELETE /api/v2/y (event x.y)');
    for (const event of SENTENCE_EVENTS) {
      for (const options of [null, 'text', [], { params: 5, before: 'x', after: [1], body: { changes: 'no' } }]) {
        expect(typeof auditSentence({ event, action: '', result: 'ok', options })).toBe('string');
      }
    }
  });
});

describe('every event the broker writes has its own sentence', () => {
  const remote = /^remote\./;

  it('each audited route', () => {
    const missing = routeTable()
      .filter((r) => r.method !== 'get' && r.audit !== false)
      .map((r) => (typeof r.audit === 'string' ? r.audit : `${r.tag}.${r.method}`))
      .filter((event) => !SENTENCE_EVENTS.includes(event));
    expect(missing).toEqual([]);
  });

  it('each event the broker writes by name (sessions, commits, recordings, retention…)', () => {
    const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'broker');
    const events = new Set<string>();
    const walk = (dir: string) => {
      for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
        const file = path.join(dir, entry.name);
        if (entry.isDirectory()) walk(file);
        else if (file.endsWith('.ts') && !file.endsWith('.test.ts')) {
          for (const m of fs.readFileSync(file, 'utf8').matchAll(/(?:event: |_EVENT = |audit: )'([a-z_]+(?:\.[a-z_]+)+)'/g)) events.add(m[1]);
        }
      }
    };
    walk(root);
    // device.online and device.offline are the live event stream's, not the audit trail's.
    const audit = [...events].filter((e) => !e.startsWith('device.online') && !e.startsWith('device.offline'));
    expect(audit.length).toBeGreaterThan(40);
    expect(audit.filter((e) => !SENTENCE_EVENTS.includes(e) && !remote.test(e))).toEqual([]);
  });
});
