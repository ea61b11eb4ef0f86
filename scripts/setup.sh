#!/usr/bin/env bash
# Installs the build dependencies from Debian's packages (idempotent: skips apt when everything
# is already there). Needs root or sudo when something is missing.
# Usage: scripts/setup.sh            everything: build, tests, fuzzing, the npm client test
#        scripts/setup.sh --runtime  only what building and running the `rewind` binary needs
set -euo pipefail

RUNTIME_PKGS=(
  cmake ninja-build g++ pkg-config
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libboost1.81-dev libcurl4-openssl-dev libssl-dev libedit-dev libxxhash-dev libhiredis-dev
)
TEST_PKGS=(
  libgtest-dev libgmock-dev
  clang-format clang libclang-rt-14-dev
  curl nodejs chromium
  redis-server redis-tools haproxy
  ccache
)

mode=full
case "${1:-}" in
  "") ;;
  --runtime) mode=runtime ;;
  *) echo "usage: scripts/setup.sh [--runtime]" >&2; exit 2 ;;
esac
PKGS=("${RUNTIME_PKGS[@]}")
if [ "$mode" = full ]; then PKGS+=("${TEST_PKGS[@]}"); fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's nodejs comes without npm (NodeSource's bundles it): ask for npm only when it is absent.
if [ "$mode" = full ]; then command -v npm >/dev/null 2>&1 || missing+=(npm); fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
