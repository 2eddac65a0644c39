import { describe, expect, it } from 'vitest';
import { HELP_PAGES, headingId, helpHref, loadHelp, renderHelp } from './help.js';

describe('help pages', () => {
  it('has the README and every page of docs/', () => {
    expect(HELP_PAGES[0]).toBe('');
    expect(HELP_PAGES).toEqual(expect.arrayContaining(['operator-guide', 'security', 'remote-access', 'benchmarks', 'qbee']));
  });

  it('turns links between pages into console links, from the README and from docs/', () => {
    expect(helpHref('', 'docs/operator-guide.md#audit')).toEqual({ kind: 'help', href: '/help/operator-guide#audit' });
    expect(helpHref('security', '../README.md')).toEqual({ kind: 'help', href: '/help' });
    expect(helpHref('security', 'several-brokers.md#faults-what-survives-what')).toEqual({
      kind: 'help',
      href: '/help/several-brokers#faults-what-survives-what',
    });
    expect(helpHref('agent', '#updates')).toEqual({ kind: 'help', href: '/help/agent#updates' });
    expect(helpHref('', 'https://example.com/x')).toEqual({ kind: 'outside', href: 'https://example.com/x' });
    // A file of the repository, or a page that does not exist, is not a link in the console.
    expect(helpHref('', 'deploy/haproxy.cfg')).toEqual({ kind: 'none' });
    expect(helpHref('agent', '../../etc/passwd')).toEqual({ kind: 'none' });
    expect(helpHref('', 'docs/no-such-page.md')).toEqual({ kind: 'none' });
  });

  it("gives headings GitHub's anchors", () => {
    expect(headingId('Faults: what survives what')).toBe('faults-what-survives-what');
    expect(headingId('Sign-in, tokens and 2FA')).toBe('sign-in-tokens-and-2fa');
  });

  it('every link in every page leads somewhere the console has, or is plain text', async () => {
    const rendered = new Map<string, string>();
    const ids = new Set<string>();
    for (const page of HELP_PAGES) {
      const markdown = await loadHelp(page);
      expect(markdown, page).toEqual(expect.any(String));
      const html = await renderHelp(page, markdown ?? '');
      rendered.set(page, html);
      for (const m of html.matchAll(/ id="([^"]+)"/g)) ids.add(`${page}#${m[1]}`);
    }
    expect(ids.size).toBeGreaterThan(50);
    for (const [page, html] of rendered) {
      for (const m of html.matchAll(/href="\/help(?:\/([a-z0-9-]+))?(?:#([^"]*))?" data-help-link/g)) {
        const target = m[1] ?? '';
        expect(HELP_PAGES, `${page} links to ${m[0]}`).toContain(target);
        if (m[2]) expect(ids.has(`${target}#${m[2]}`), `${page} links to ${m[0]}`).toBe(true);
      }
    }
  });

  it('shows raw HTML in a page as text', async () => {
    const html = await renderHelp('', 'before <script>alert(1)</script> after\n\n<img src=x onerror=alert(1)>');
    expect(html).not.toContain('<script');
    expect(html).not.toContain('<img src=x');
  });
});
