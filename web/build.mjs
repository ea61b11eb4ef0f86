// Builds the page into dist/ (committed; embedded into the server by cmake/embed_web.cmake):
// index.html, favicon.svg, app.js and app.css (one minified bundle each, ASCII only).
// Usage: node build.mjs [--outdir DIR]   (the staleness test builds into a temporary DIR)
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const at = process.argv.indexOf('--outdir');
const outdir = at > 0 ? process.argv[at + 1] : join(here, 'dist');
mkdirSync(outdir, { recursive: true });

await build({
  entryPoints: { app: join(here, 'src/main.js') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  charset: 'ascii',
  legalComments: 'eof',
  outdir,
  logLevel: 'warning',
});
copyFileSync(join(here, 'src/index.html'), join(outdir, 'index.html'));
copyFileSync(join(here, 'src/favicon.svg'), join(outdir, 'favicon.svg'));
// Text files end with one newline, so a rebuild compares byte for byte.
for (const f of ['app.js', 'app.css']) {
  const p = join(outdir, f);
  writeFileSync(p, readFileSync(p, 'utf8').replace(/\n*$/, '\n'));
}
