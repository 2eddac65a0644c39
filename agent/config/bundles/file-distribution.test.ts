import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { sha256 } from '../fsutil.js';
import { applyBundle, emptyPath, testContext } from '../test-support/system-test-context.js';
import { fileDistributionBundle as bundle } from './file-distribution.js';

let t: ReturnType<typeof testContext>;
afterEach(() => t?.cleanup());

const TEMPLATE = 'greeting={{greeting}}\nsite = {{ location }}\nkeep={{unknown}}\nopen={{ no close\n';

function config(over: Record<string, unknown> = {}, file: Record<string, unknown> = {}) {
  return {
    files: [
      {
        label: 'app',
        templates: [
          { source: '/templates/app.conf', destination: '/etc/app/app.conf', is_template: true, ...file },
          { source: '/bin/tool.bin', destination: '/opt/tool/tool.bin', is_template: false },
        ],
        parameters: [{ key: 'greeting', value: 'hello $(site)' }],
        command: `echo ran >> "${'$'}(marker)"`,
        ...over,
      },
    ],
  };
}

describe('file_distribution', () => {
  it('renders templates with the set parameters, parameters and attributes, copies files, then runs the after-command', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': Buffer.from([0, 1, 2, 255]) } });
    t.ctx.parameters = { site: 'oslo', location: 'rack-7', marker: path.join(t.dir, 'after.log') };
    await applyBundle(bundle, config(), t.ctx);
    expect(fs.readFileSync(t.at('/etc/app/app.conf'), 'utf8')).toBe('greeting=hello oslo\nsite = rack-7\nkeep={{unknown}}\nopen={{ no close\n');
    expect(fs.readFileSync(t.at('/opt/tool/tool.bin'))).toEqual(Buffer.from([0, 1, 2, 255]));
    expect(fs.statSync(t.at('/etc/app/app.conf')).mode & 0o777).toBe(0o640);
    expect(fs.readFileSync(path.join(t.dir, 'after.log'), 'utf8')).toBe('ran\n');
    const reports = t.take();
    expect(reports.map((r) => [r.sev, r.text])).toEqual([
      ['INFO', '[app] Successfully rendered template file /templates/app.conf to /etc/app/app.conf'],
      ['INFO', '[app] Successfully downloaded file /bin/tool.bin to /opt/tool/tool.bin'],
      ['INFO', '[app] Successfully executed after command'],
    ]);

    // idempotent: nothing changes, nothing is reported, the after-command does not run again
    await applyBundle(bundle, config(), t.ctx);
    expect(t.take()).toEqual([]);
    expect(fs.readFileSync(path.join(t.dir, 'after.log'), 'utf8')).toBe('ran\n');

    // drift is repaired
    fs.writeFileSync(t.at('/etc/app/app.conf'), 'edited by hand\n');
    await applyBundle(bundle, config(), t.ctx);
    expect(t.take().map((r) => r.text)).toEqual([
      '[app] Successfully rendered template file /templates/app.conf to /etc/app/app.conf',
      '[app] Successfully executed after command',
    ]);
    expect(fs.readFileSync(t.at('/etc/app/app.conf'), 'utf8')).toContain('greeting=hello oslo');
  });

  it('with the digest in the configuration, a second run does not fetch again', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' } });
    t.ctx.parameters = { site: 'oslo', marker: path.join(t.dir, 'after.log') };
    const cfg = config({}, { digest: sha256(TEMPLATE) });
    (cfg.files[0].templates[1] as Record<string, unknown>).digest = sha256('bin');
    await applyBundle(bundle, cfg, t.ctx);
    expect(t.fetched).toEqual(['/templates/app.conf', '/bin/tool.bin']);
    t.take();
    await applyBundle(bundle, cfg, t.ctx);
    expect(t.fetched).toHaveLength(2);
    expect(t.take()).toEqual([]);
  });

  it('a changed template parameter re-renders the file and runs the after-command again', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' } });
    t.ctx.parameters = { site: 'oslo', marker: path.join(t.dir, 'after.log') };
    await applyBundle(bundle, config(), t.ctx);
    t.ctx.parameters = { ...t.ctx.parameters, site: 'bergen' };
    await applyBundle(bundle, config(), t.ctx);
    expect(fs.readFileSync(t.at('/etc/app/app.conf'), 'utf8')).toContain('greeting=hello bergen');
    expect(fs.readFileSync(path.join(t.dir, 'after.log'), 'utf8')).toBe('ran\nran\n');
  });

  it('reports a failing after-command with its exit code and output', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' }, parameters: { site: 'oslo' } });
    await applyBundle(bundle, config({ command: 'echo "disk full" >&2; exit 3' }), t.ctx);
    const failed = t.take().find((r) => r.sev === 'ERR');
    expect(failed?.text).toBe('[app] After command failed: exit code 3');
    expect(failed?.log).toContain('disk full');
  });

  it('skips a file set whose pre-condition fails, and applies it once the condition holds', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' }, parameters: { site: 'oslo' } });
    const flagFile = path.join(t.dir, 'ready');
    const cfg = config({ command: '', pre_condition: `test -e "${flagFile}"` });
    await applyBundle(bundle, cfg, t.ctx);
    expect(fs.existsSync(t.at('/etc/app/app.conf'))).toBe(false);
    expect(t.take()).toEqual([]);
    fs.writeFileSync(flagFile, '');
    await applyBundle(bundle, cfg, t.ctx);
    expect(fs.existsSync(t.at('/etc/app/app.conf'))).toBe(true);
  });

  it('reports files it cannot get or place, and still places the others', async () => {
    t = testContext({ files: { '/bin/tool.bin': 'bin' }, parameters: { site: 'oslo' } });
    await applyBundle(bundle, config({ command: '' }), t.ctx);
    const reports = t.take();
    expect(reports[0]).toMatchObject({
      sev: 'ERR',
      text: expect.stringContaining('Unable to render template file /templates/app.conf to /etc/app/app.conf: the broker refused'),
    });
    expect(reports[1]).toMatchObject({ sev: 'INFO' });
    expect(fs.readFileSync(t.at('/opt/tool/tool.bin'), 'utf8')).toBe('bin');
  });

  it('refuses relative destinations and symlinked ones, and a digest the file store does not match', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' }, parameters: { site: 'oslo' } });
    fs.mkdirSync(t.at('/opt/tool'), { recursive: true });
    fs.symlinkSync(path.join(t.dir, 'elsewhere'), t.at('/opt/tool/tool.bin'));
    const cfg = config({ command: '' }, { destination: 'etc/app.conf' });
    await applyBundle(bundle, cfg, t.ctx);
    const texts = t.take().map((r) => `${r.sev} ${r.text}`);
    expect(texts[0]).toContain('ERR [app] Unable to render template file /templates/app.conf to etc/app.conf: absolute destination path required');
    expect(texts[1]).toContain('refusing to replace the symlink');
    expect(fs.existsSync(path.join(t.dir, 'elsewhere'))).toBe(false);

    await applyBundle(bundle, config({ command: '' }, { digest: sha256('other') }), t.ctx);
    expect(t.take()[0].text).toContain('does not match the digest');
    expect(() => bundle.parse({ files: [{ templates: [{ source: '/a' }] }] })).toThrow('file_distribution.files[0].templates[0].destination is required');
    expect(() => bundle.parse({ files: 'x' })).toThrow('must be a list');
  });

  it('with no shell on the device, a set with commands reports that and applies nothing', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' } });
    t.setPath(emptyPath(t.dir));
    await applyBundle(bundle, config(), t.ctx);
    expect(t.take()).toEqual([{ sev: 'ERR', text: 'sh is not installed on this device: file distribution (its commands need a shell) not applied.' }]);
    expect(fs.existsSync(t.at('/etc/app/app.conf'))).toBe(false);
  });

  it('a value cannot lead a destination elsewhere, and an unknown $(key) fails the set, naming it', async () => {
    t = testContext({ files: { '/templates/app.conf': TEMPLATE, '/bin/tool.bin': 'bin' }, parameters: { site: 'oslo', app: '../../sudoers.d/x' } });
    await applyBundle(bundle, config({ command: '' }, { destination: '/etc/app/$(app).conf' }), t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
      'ERR [app] Unable to render template file /templates/app.conf to /etc/app/$(app).conf: parameter $(app) holds a ".." path segment: not used in a path',
      'INFO [app] Successfully downloaded file /bin/tool.bin to /opt/tool/tool.bin',
    ]);
    expect(fs.existsSync(t.at('/etc/sudoers.d'))).toBe(false);

    t.ctx.parameters = { site: 'oslo' };
    const marker = path.join(t.dir, 'ran');
    await applyBundle(bundle, config({ command: `touch "${marker}"`, parameters: [{ key: 'greeting', value: '$(nope)' }] }), t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
      'ERR [app] File set not applied: unknown parameter $(nope): no parameter, secret or device attribute has this key.',
    ]);
    expect(fs.existsSync(marker)).toBe(false);
  });
});
