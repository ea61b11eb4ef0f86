#!/usr/bin/env bash
# The README's main command: set up, build, write the built-in default model (seeded random
# weights, preset "tiny") if it is not there yet, and start the OpenAI-compatible server on it
# (it prints a curl line to try). Extra arguments go to `rewind serve` (e.g. --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
model=models/default-tiny
if [ ! -f "$model/model.safetensors" ]; then
  mkdir -p models
  build/release/rewind make-model --preset tiny --seed 42 --out "$model"
fi
exec build/release/rewind serve --model "$model" "$@"
