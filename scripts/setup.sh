#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages (idempotent: skips apt when
# everything is already there). Needs root or sudo when something is missing.
set -euo pipefail

PKGS=(
  cmake ninja-build g++ pkg-config
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev
  clang-format clang libclang-rt-14-dev
  libboost1.81-dev libcurl4-openssl-dev curl nodejs
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Debian's nodejs comes without npm (NodeSource's bundles it): ask for npm only when it is absent.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
