/**
 * A small history router: real paths (the broker answers unknown paths with the app), links that
 * keep middle-click and ctrl-click working, and path patterns like `/devices/:id`.
 */
import type { ComponentChildren, LooseAnchorHTMLAttributes } from 'preact';
import { useEffect, useState } from 'preact/hooks';

export interface Location {
  path: string;
  query: URLSearchParams;
}

function current(): Location {
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** Asked before an in-app navigation; answering false keeps the page (a form with unsaved edits). */
let leaveGuard: (() => boolean) | null = null;

const listeners = new Set<() => void>();
/** Where the app is, so a Back refused by the leave guard can return there. */
let shown = typeof window !== 'undefined' ? location.pathname + location.search : '/';
if (typeof window !== 'undefined') {
  window.addEventListener('popstate', () => {
    // The browser has moved already; a page with unsaved edits that wants to stay puts it back.
    if (leaveGuard && !leaveGuard()) {
      history.pushState(null, '', shown);
      return;
    }
    shown = location.pathname + location.search;
    listeners.forEach((l) => l());
  });
}

/** Sets the guard while a page holds unsaved edits; returns its removal. */
export function guardLeaving(mayLeave: () => boolean): () => void {
  leaveGuard = mayLeave;
  return () => {
    if (leaveGuard === mayLeave) leaveGuard = null;
  };
}

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === location.pathname + location.search) return;
  if (leaveGuard && !leaveGuard()) return;
  if (options.replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  shown = to;
  listeners.forEach((l) => l());
  window.scrollTo(0, 0);
}

export function useLocation(): Location {
  const [loc, setLoc] = useState(current);
  useEffect(() => {
    const l = () => setLoc(current());
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return loc;
}

/** Parameters of `path` against a pattern (`/devices/:id`), or null when it does not match. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const p = pattern.split('/').filter(Boolean);
  const a = path.split('/').filter(Boolean);
  if (p.length !== a.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < p.length; i++) {
    if (p[i].startsWith(':')) params[p[i].slice(1)] = decodeURIComponent(a[i]);
    else if (p[i] !== a[i]) return null;
  }
  return params;
}

type LinkProps = Omit<LooseAnchorHTMLAttributes<HTMLAnchorElement>, 'href'> & { href: string; children?: ComponentChildren; 'data-testid'?: string };

export function Link({ href, onClick, ...rest }: LinkProps) {
  return (
    <a
      href={href}
      onClick={(e) => {
        if (typeof onClick === 'function') onClick(e);
        if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(href);
      }}
      {...(rest as Record<string, unknown>)}
    />
  );
}

/** Builds `/path?query` without empty values. */
export function withQuery(path: string, query: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v) params.set(k, v);
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

/** Previous/next buttons for a list paged in the URL (`offset` in its query), as the Audit, Logs and CVE screens keep theirs. */
export function QueryPager({
  path,
  query,
  offset,
  page,
  total,
  labels = ['Previous', 'Next'],
}: {
  path: string;
  query: Record<string, string | undefined>;
  offset: number;
  page: number;
  total: number;
  labels?: [string, string];
}) {
  const go = (to: number) => navigate(withQuery(path, { ...query, offset: String(to) }));
  return (
    <div class="pager">
      <button type="button" disabled={offset === 0} onClick={() => go(Math.max(0, offset - page))}>
        {labels[0]}
      </button>
      <button type="button" disabled={offset + page >= total} onClick={() => go(offset + page)}>
        {labels[1]}
      </button>
    </div>
  );
}
