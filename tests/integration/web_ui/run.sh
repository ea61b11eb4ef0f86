#!/usr/bin/env bash
# ctest's entry to web_ui_test.mjs: exit 77 (skipped) where node, the puppeteer-core package or
# Chromium is missing, unless CI is set (then that is a failure).
# Usage: run.sh REWIND_BINARY OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
missing() {
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then
    echo "web_ui: $1 (CI is set: this test must run)" >&2
    exit 1
  fi
  echo "web_ui: skipped: $1" >&2
  exit 77
}
command -v node >/dev/null 2>&1 || missing "node is not installed"
[ -f "$here/node_modules/puppeteer-core/package.json" ] ||
  missing "puppeteer-core is not installed (run: cd tests/integration/web_ui && npm ci)"
chromium="${CHROMIUM:-/usr/bin/chromium}"
[ -x "$chromium" ] || missing "no Chromium at $chromium (Debian: apt-get install chromium)"
exec node "$here/web_ui_test.mjs" --binary "$1" --out "$2" --chromium "$chromium"
