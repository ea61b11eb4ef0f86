#!/usr/bin/env bash
# The README's main command: set up, build, write the built-in default model (seeded random
# weights, preset "tiny") if it is not there yet, and run a prompt through it.
# Extra arguments go to `rewind run` (for example -n 64 --temperature 0.8).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release
model=models/default-tiny
if [ ! -f "$model/model.safetensors" ]; then
  mkdir -p models
  build/release/rewind make-model --preset tiny --seed 42 --out "$model"
fi
build/release/rewind run --model "$model" --prompt "The quick brown fox" -n 32 --ignore-eos "$@"
