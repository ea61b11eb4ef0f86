#!/usr/bin/env bash
# The committed web page bundle (web/dist, embedded into `rewind serve`) equals a fresh build of
# web/src with the locked npm packages: a change to the page's source without `npm run build`
# fails here. Exit 77 (skipped) where node or web/node_modules is missing, unless CI is set.
set -euo pipefail
cd "$(dirname "$0")/.."
missing() {
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
    echo "check_web_bundle: $1 (CI is set: this check must run)" >&2
    exit 1
  fi
  echo "check_web_bundle: skipped: $1" >&2
  exit 77
}
command -v node >/dev/null 2>&1 || missing "node is not installed"
[ -f web/node_modules/esbuild/package.json ] || missing "web/node_modules is missing (run: cd web && npm ci)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
node web/build.mjs --outdir "$tmp"
if ! diff -r web/dist "$tmp" >/dev/null; then
  echo "check_web_bundle: web/dist is stale; rebuild it: (cd web && npm run build), and commit web/dist" >&2
  diff -rq web/dist "$tmp" >&2 || true
  exit 1
fi
echo "check_web_bundle: web/dist equals a fresh build of web/src"
