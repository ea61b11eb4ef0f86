#!/usr/bin/env bash
# The README's test command: set up, build, run every test (ctest -j2), then run the fuzz
# targets briefly (REWIND_FUZZ_SECONDS per target, default 15).
# Usage: scripts/test.sh [release|debug]   (debug = ASan + UBSan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/setup.sh
scripts/build.sh "$preset"
# The official openai npm client for tests/integration/server_test.cpp (OpenAiNodeClient).
(cd tests/integration/openai_client && (npm ci --no-audit --no-fund || npm install --no-audit --no-fund)) ||
  echo "test.sh: warning: npm could not install tests/integration/openai_client; the openai client tests will skip (fail where CI is set)" >&2
# The web page's build tools (web.BundleUpToDate) and puppeteer-core for the browser test.
for d in web tests/integration/web_ui; do
  (cd "$d" && (npm ci --no-audit --no-fund || npm install --no-audit --no-fund)) ||
    echo "test.sh: warning: npm could not install $d; its tests will skip (fail where CI is set)" >&2
done
ctest --preset "$preset" -j2
# The parsers' libFuzzer targets, briefly (release runs only; the debug preset is already slow).
if [ "$preset" = release ]; then
  scripts/fuzz.sh "${REWIND_FUZZ_SECONDS:-15}"
fi
