#!/usr/bin/env bash
# The README's test command: set up, build, run every test (ctest -j2).
# Usage: scripts/test.sh [release|debug]   (debug = ASan + UBSan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/setup.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j2
