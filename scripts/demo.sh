#!/usr/bin/env bash
# The README's main command: set up, build, and start the OpenAI-compatible server on the
# built-in default model, models/kjv-target (a small Qwen3.5-style hybrid trained on the King
# James Bible by tools/train/train.py, committed in the repository; see models/README.md). It
# prints a curl line to try. Extra arguments go to `rewind serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
exec build/release/rewind serve --model models/kjv-target "$@"
