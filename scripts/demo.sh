#!/usr/bin/env bash
# The README's main command: set up, build, and start the OpenAI-compatible server on the
# built-in default model, models/kjv-target (a small Qwen3.5-style hybrid trained on the King
# James Bible by tools/train/train.py, committed in the repository; see models/README.md). It
# prints a curl line to try. Extra arguments go to `rewind serve` (e.g. --port 9000). It installs
# only what building and running need and builds only the `rewind` binary (scripts/test.sh does
# the full setup and build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --runtime
scripts/build.sh release --runtime
exec build/release/rewind serve --model models/kjv-target "$@"
