import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { publicKeyLine } from '../../shared/ssh-keys.js';
import { useBrowserSuite } from '../support/browser.js';

const PHONE = { viewport: { width: 390, height: 844 }, touch: true };

describe('SSH keys on the Profile page', () => {
  const suite = useBrowserSuite({ env: { SSH_PORT: '0' } });

  it('adds a key, lists it with its fingerprint, refuses a malformed one with the reason, and removes it', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const other = await suite.t.userWith([{ permission: 'device:read' }]);
    const theirs = (
      await suite.t.api('POST', '/api/v2/ssh/keys', {
        token: other.token,
        body: { public_key: publicKeyLine(crypto.generateKeyPairSync('ed25519').publicKey, 'theirs') },
      })
    ).body;
    const line = publicKeyLine(crypto.generateKeyPairSync('ed25519').publicKey);
    for (const phone of [false, true]) {
      const { page, expectNoErrorsAndClose } = await suite.open({ as: user, ...(phone ? PHONE : {}), at: '/profile' });
      await page.getByRole('heading', { name: 'SSH keys' }).waitFor();
      await page.getByTestId('ssh-keys-none').waitFor();
      // Another user's key is never shown.
      expect(await page.getByText(theirs.fingerprint).count()).toBe(0);

      await page.getByLabel('Public key').fill('ssh-rsa AAAAnot-a-key');
      await page.getByRole('button', { name: 'Add key' }).click();
      await page.getByText(/Key not added/).waitFor();
      expect(await page.getByTestId('ssh-key').count()).toBe(0);

      await page.getByLabel('Public key').fill(line);
      await page.getByLabel('Comment (optional)').fill(phone ? 'phone' : 'laptop');
      await page.getByRole('button', { name: 'Add key' }).click();
      const item = page.getByTestId('ssh-key');
      await item.waitFor();
      const listed = (await suite.t.api('GET', '/api/v2/ssh/keys', { token: user.token })).body.items;
      expect(listed).toHaveLength(1);
      expect(await item.textContent()).toContain(listed[0].fingerprint);
      expect(await item.textContent()).toContain(phone ? 'phone' : 'laptop');
      if (phone) expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);

      await page.getByRole('button', { name: `Remove key ${phone ? 'phone' : 'laptop'}` }).click();
      await page.getByTestId('ssh-keys-none').waitFor();
      expect((await suite.t.api('GET', '/api/v2/ssh/keys', { token: user.token })).body.items).toEqual([]);
      await expectNoErrorsAndClose();
    }
    expect((await suite.t.api('GET', '/api/v2/ssh/keys', { token: other.token })).body.items).toHaveLength(1);
  });
});
