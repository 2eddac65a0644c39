import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const here = fileURLToPath(new URL('.', import.meta.url));

/**
 * The web console: a static single-page app the broker serves at `/`.
 * JSX is compiled for Preact by Vite's own transformer (no plugin needed).
 */
export default defineConfig({
  root: here,
  base: '/',
  publicDir: false,
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: true,
    chunkSizeWarningLimit: 700,
  },
  server: {
    // `npx vite --config web-console/vite.config.ts` against a broker on :8080 during development.
    proxy: { '/api': { target: 'http://127.0.0.1:8080', ws: true } },
  },
});
