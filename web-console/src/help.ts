/// <reference types="vite/client" />
/**
 * The project's documentation inside the console: the README and each page of `docs/`, as they are
 * in the repository, bundled at build time (each page its own chunk, fetched when opened) and drawn
 * with marked. Links between pages become console links (`operator-guide.md#audit` →
 * `/help/operator-guide#audit`); links to code in the repository stay as text a reader can find.
 */
import { marked } from 'marked';

const PAGES = import.meta.glob<string>('../../docs/*.md', { query: '?raw', import: 'default' });
const README = () => import('../../README.md?raw').then((m: { default: string }) => m.default);
const IMAGES = import.meta.glob<string>('../../docs/screenshots/*.png', { query: '?url', import: 'default' });

/** The page names there are (`operator-guide`, `security`, …), README first as ''. */
export const HELP_PAGES: string[] = ['', ...Object.keys(PAGES).map((p) => p.replace(/^.*\/([^/]+)\.md$/, '$1'))];

/** The console path of a help page. */
export function helpPath(page: string, anchor?: string): string {
  return `/help${page ? `/${page}` : ''}${anchor ? `#${anchor}` : ''}`;
}

/** The markdown of a page, or null when there is no such page. */
export async function loadHelp(page: string): Promise<string | null> {
  if (page === '') return README();
  const load = PAGES[`../../docs/${page}.md`];
  return load ? load() : null;
}

/**
 * Where a link written in `page`'s markdown leads in the console: another help page, a screenshot,
 * an address outside, or nothing (a file of the repository the console does not serve).
 */
export function helpHref(page: string, href: string): { kind: 'help' | 'outside' | 'image'; href: string } | { kind: 'none' } {
  if (/^[a-z][a-z0-9+.-]*:/i.test(href)) return { kind: 'outside', href };
  const [target, anchor] = href.split('#', 2) as [string, string | undefined];
  if (target === '') return { kind: 'help', href: helpPath(page, anchor) };
  // Paths are written relative to the page: the README sits at the root, the rest in docs/.
  const base = page === '' ? '' : 'docs/';
  const parts: string[] = [];
  for (const part of `${base}${target}`.split('/')) {
    if (part === '..') parts.pop();
    else if (part !== '.' && part !== '') parts.push(part);
  }
  const resolved = parts.join('/');
  if (resolved === 'README.md') return { kind: 'help', href: helpPath('', anchor) };
  const doc = /^docs\/([a-z0-9-]+)\.md$/.exec(resolved);
  if (doc && HELP_PAGES.includes(doc[1])) return { kind: 'help', href: helpPath(doc[1], anchor) };
  if (/^docs\/screenshots\/[a-z0-9-]+\.png$/.test(resolved)) return { kind: 'image', href: resolved.slice('docs/'.length) };
  return { kind: 'none' };
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens. */
export function headingId(text: string): string {
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}_\- ]/gu, '')
    .replace(/ /g, '-');
}

/** The page as HTML, its links made console links, its headings given GitHub's anchors. */
export async function renderHelp(page: string, markdown: string): Promise<string> {
  const images = new Map<string, string>();
  for (const [path, load] of Object.entries(IMAGES)) images.set(path.replace(/^.*\/docs\//, ''), await load());
  const renderer = new marked.Renderer();
  renderer.heading = function ({ tokens, depth, text }) {
    return `<h${depth} id="${headingId(text.replace(/`/g, ''))}">${this.parser.parseInline(tokens)}</h${depth}>\n`;
  };
  renderer.link = function ({ href, tokens }) {
    const inner = this.parser.parseInline(tokens);
    const to = helpHref(page, href);
    if (to.kind === 'none') return `<span class="help-file" title="${escapeAttr(href)}">${inner}</span>`;
    if (to.kind === 'outside') return `<a href="${escapeAttr(to.href)}" rel="noopener noreferrer" target="_blank">${inner}</a>`;
    if (to.kind === 'image') return `<a href="${escapeAttr(images.get(to.href) ?? '#')}" target="_blank">${inner}</a>`;
    return `<a href="${escapeAttr(to.href)}" data-help-link>${inner}</a>`;
  };
  renderer.image = function ({ href, text }) {
    const to = helpHref(page, href);
    const src = to.kind === 'image' ? images.get(to.href) : undefined;
    return src ? `<img src="${escapeAttr(src)}" alt="${escapeAttr(text)}" loading="lazy">` : `<em>${escapeAttr(text)}</em>`;
  };
  // The pages are the project's own (bundled at build time, never a user's text); raw HTML in them is shown as text all the same.
  renderer.html = ({ text }) => escapeAttr(text);
  return marked.parse(markdown, { renderer, async: false, gfm: true });
}

function escapeAttr(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
