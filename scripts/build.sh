#!/usr/bin/env bash
# Configures and builds a preset (build/<preset>).
# Usage: scripts/build.sh [preset] [--runtime]
#   preset: release (default) or debug
#   --runtime: only the `rewind` binary, configured without the tests (no GoogleTest needed;
#              scripts/setup.sh --runtime installs enough). Without it everything is built.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=release
runtime=0
for a in "$@"; do
  case "$a" in
    --runtime) runtime=1 ;;
    release|debug) preset="$a" ;;
    *) echo "usage: scripts/build.sh [release|debug] [--runtime]" >&2; exit 2 ;;
  esac
done
if [ "$runtime" = 1 ]; then
  cmake --preset "$preset" -DREWIND_BUILD_TESTS=OFF >/dev/null
  cmake --build --preset "$preset" --target rewind
else
  # Explicitly on: a build folder a --runtime build configured gets its tests back.
  cmake --preset "$preset" -DREWIND_BUILD_TESTS=ON >/dev/null
  cmake --build --preset "$preset"
fi
