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
# A compiler cache where one is installed (scripts/setup.sh installs it with the test tools):
# rebuilds of a fresh clone, as CI's, then compile only what changed, wherever the clone lies
# (paths below it hashed relative to it). CMake reads the launcher variable when it first
# configures a build folder; an explicit one is kept.
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
fi
if [ "$runtime" = 1 ]; then
  cmake --preset "$preset" -DREWIND_BUILD_TESTS=OFF >/dev/null
  cmake --build --preset "$preset" --target rewind
else
  # Explicitly on: a build folder a --runtime build configured gets its tests back.
  cmake --preset "$preset" -DREWIND_BUILD_TESTS=ON >/dev/null
  cmake --build --preset "$preset"
fi
