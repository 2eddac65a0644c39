import { useEffect, useRef, useState } from 'preact/hooks';
import { helpPath, loadHelp, renderHelp } from '../help.js';
import { navigate } from '../router.js';
import { ErrorBox, Loading } from '../ui.js';

/**
 * Help: the README and the pages of docs/ (help.ts), each from the build. Links between pages stay
 * in the console; an anchor scrolls to its heading.
 */
export function HelpScreen({ page }: { page: string }) {
  const [state, setState] = useState<{ kind: 'loading' } | { kind: 'ready'; html: string } | { kind: 'missing' } | { kind: 'error'; error: unknown }>({
    kind: 'loading',
  });
  const body = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let live = true;
    setState({ kind: 'loading' });
    loadHelp(page)
      .then(async (markdown) => {
        if (!live) return;
        if (markdown === null) return setState({ kind: 'missing' });
        const html = await renderHelp(page, markdown);
        if (live) setState({ kind: 'ready', html });
      })
      .catch((error: unknown) => live && setState({ kind: 'error', error }));
    return () => {
      live = false;
    };
  }, [page]);
  useEffect(() => {
    if (state.kind !== 'ready') return;
    const title = body.current?.querySelector('h1')?.textContent;
    document.title = `${title ? `${title} · ` : ''}Help · Fleet console`;
    const anchor = decodeURIComponent(location.hash.slice(1));
    if (anchor) document.getElementById(anchor)?.scrollIntoView();
    else window.scrollTo(0, 0);
  }, [state]);
  if (state.kind === 'loading') return <Loading what="the page" />;
  if (state.kind === 'error') return <ErrorBox error={state.error} />;
  if (state.kind === 'missing')
    return (
      <div class="help">
        <h1 tabIndex={-1}>No such help page</h1>
        <p>
          <a href={helpPath('')}>Start from the overview</a>.
        </p>
      </div>
    );
  return (
    <div
      class="help"
      ref={body}
      // Links between help pages move within the console instead of reloading it.
      onClick={(e) => {
        const link = (e.target as HTMLElement).closest('a[data-help-link]');
        if (!link || e.ctrlKey || e.metaKey || e.shiftKey) return;
        e.preventDefault();
        const href = link.getAttribute('href') ?? '/help';
        const [path, anchor] = href.split('#', 2);
        if (path === location.pathname && anchor) {
          history.replaceState(null, '', href);
          document.getElementById(anchor)?.scrollIntoView();
        } else navigate(href);
      }}
      dangerouslySetInnerHTML={{ __html: state.html }}
    />
  );
}
