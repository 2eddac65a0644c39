/**
 * The CVE area of the web console: the list with severity and host counts from a feed matched
 * against a device's packages, one CVE with its devices and an accept/ignore decision with a
 * reason (cve:manage), the device page's CVE panel, and the spec's UI permission rows "CVE"
 * (cve:read) and "CVE, Manage" (cve:manage): hidden from users without them, refused by the API.
 */
import crypto from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseAdvisory } from '../../broker/cve/osv.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
let device: string;

const digest = (data: unknown) => crypto.createHash('sha256').update(JSON.stringify(data)).digest('hex');
const advisory = (id: string, cve: string, name: string, fixed: string, vector?: string, summary = `${name}: a flaw`) => ({
  id,
  aliases: [cve],
  summary,
  ...(vector ? { severity: [{ type: 'CVSS_V3', score: vector }] } : { database_specific: { severity: 'low' } }),
  affected: [{ package: { ecosystem: 'Debian:12', name }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed }] }] }],
});

beforeAll(async () => {
  device = await suite.t.addDevice({ name: 'edge-cve' });
  const inventory = suite.t.broker.services.inventory;
  await inventory.record(device, { hostname: 'edge-cve', os: { name: 'Debian GNU/Linux', id: 'debian', version: '12' } });
  const software = {
    pkg_manager: 'dpkg',
    items: [
      { name: 'openssh-server', version: '1:9.2p1-2+deb12u2', arch: 'amd64' },
      { name: 'curl', version: '7.88.1-10+deb12u5', arch: 'amd64' },
      { name: 'less', version: '590-2', arch: 'amd64' },
    ],
  };
  await inventory.recordItem(device, { type: 'software', digest: digest(software), data: software });
  await suite.t.broker.services.cve.importAdvisories(
    [
      advisory('DSA-5724-1', 'CVE-2024-6387', 'openssh-server', '1:9.2p1-2+deb12u3', 'CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:H/A:H', 'openssh: regreSSHion'),
      advisory('DSA-5000-1', 'CVE-2024-2398', 'curl', '7.88.1-10+deb12u6', 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H'),
      advisory('DEBIAN-CVE-2024-32487', 'CVE-2024-32487', 'less', '590-2.1~deb12u1'),
      advisory('DSA-4000-1', 'CVE-2023-0001', 'curl', '7.0-1', 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H'),
    ].map((a) => {
      const r = parseAdvisory(a);
      if (!r.ok || !r.advisory) throw new Error('fixture');
      return r.advisory;
    }),
  );
});

describe('CVE', () => {
  it('lists the CVEs affecting devices, shows one with its devices, and records a decision with a reason (cve:manage)', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'CVE', exact: true }).click();
    const rows = page.getByTestId('cve-row');
    await expect.poll(() => rows.count()).toBe(3);
    expect(await rows.first().textContent()).toContain('CVE-2024-6387');
    expect(await rows.first().textContent()).toContain('high 8.1');
    await expect.poll(() => page.getByTestId('cve-count-high').textContent()).toBe('2');
    await screenshot(page, 'cve-list');

    await rows.first().getByRole('link', { name: 'CVE-2024-6387' }).click();
    const deviceRow = page.getByTestId('cve-device-row');
    await deviceRow.waitFor();
    expect(await deviceRow.textContent()).toContain('edge-cve');
    expect(await deviceRow.textContent()).toContain('1:9.2p1-2+deb12u3');
    await page.getByLabel('Decision', { exact: true }).selectOption('ignored');
    await page.getByLabel('Reason').fill('sshd is not exposed on these devices');
    await page.getByRole('button', { name: 'Save decision' }).click();
    await page.getByTestId('cve-reason').waitFor();
    expect(await page.getByTestId('cve-reason').textContent()).toContain('sshd is not exposed');
    await screenshot(page, 'cve-detail');
    const statuses = await suite.t.api('GET', '/api/v2/cve/status/cves', { token: suite.t.adminToken });
    expect(statuses.body.items).toMatchObject([{ cve_id: 'CVE-2024-6387', status: 'ignored', reason: 'sshd is not exposed on these devices' }]);

    // The device page lists its CVEs.
    await deviceRow.getByRole('link', { name: 'edge-cve' }).click();
    await expect.poll(() => page.getByTestId('device-cve-row').count()).toBe(3);
    await expectNoErrorsAndClose();
  });

  it('imports a feed file and removes a CVE from the feed (cve:manage)', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'CVE', exact: true }).click();
    await expect.poll(() => page.getByTestId('cve-row').count()).toBe(3);
    const feed = [advisory('DSA-6000-1', 'CVE-2024-9999', 'less', '591-1', 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 'less: another flaw')];
    await page
      .getByLabel('Import feed (OSV JSON)')
      .setInputFiles({ name: 'feed.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify(feed)) });
    await page.getByText('Imported 1 advisories').waitFor();
    await expect.poll(() => page.getByTestId('cve-row').count()).toBe(4);
    // The counts load beside the list, not with it: wait for them too.
    await expect.poll(() => page.getByTestId('cve-count-critical').textContent()).toBe('1');
    // A malformed file: the broker's message, nothing imported.
    await page.getByLabel('Import feed (OSV JSON)').setInputFiles({ name: 'bad.json', mimeType: 'application/json', buffer: Buffer.from('{"id": ') });
    await page.getByText('The feed was not imported').waitFor();

    await page.getByRole('link', { name: 'CVE-2024-9999' }).click();
    await page.getByTestId('cve-device-row').waitFor();
    await page.getByRole('button', { name: 'Remove from feed' }).click();
    await page.getByRole('button', { name: 'Yes, remove from feed' }).click();
    await page.getByRole('heading', { level: 1, name: 'CVE', exact: true }).waitFor();
    await expect.poll(() => page.getByTestId('cve-row').count()).toBe(3);
    expect((await suite.t.api('GET', '/api/v2/cve/CVE-2024-9999', { token: suite.t.adminToken })).status).toBe(404);
    await expectNoErrorsAndClose();
  });

  it('shows a cve:read holder the list without the manage controls, and the API refuses them', async () => {
    const reader = await suite.t.userWith([{ permission: 'cve:read' }, { permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader });
    await page.getByRole('link', { name: 'CVE', exact: true }).click();
    await expect.poll(() => page.getByTestId('cve-row').count()).toBe(3);
    expect(await page.getByLabel('Import feed (OSV JSON)').count()).toBe(0);
    await page.goto('/cve/CVE-2024-2398');
    await page.getByTestId('cve-device-row').waitFor();
    expect(await page.getByRole('button', { name: 'Save decision' }).count()).toBe(0);
    expect((await suite.t.api('PATCH', '/api/v2/cve/CVE-2024-2398', { token: reader.token, body: { status: 'accepted', reason: 'x' } })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('hides CVE from a user without cve:read, and the API refuses them', async () => {
    const other = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: other });
    expect(await page.getByRole('link', { name: 'CVE', exact: true }).count()).toBe(0);
    await page.goto('/cve');
    await page.getByText('Access denied').waitFor();
    await page.goto(`/devices/${device}`);
    await page.getByRole('heading', { name: 'edge-cve' }).waitFor();
    expect(await page.getByRole('heading', { name: 'CVEs' }).count()).toBe(0);
    expect((await suite.t.api('GET', '/api/v2/cvelist', { token: other.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});
