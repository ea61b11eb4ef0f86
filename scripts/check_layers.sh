#!/usr/bin/env bash
# Checks that every `#include "rewind/<layer>/..."` in src/rewind/<layer>/ points down the
# layers (docs/ARCHITECTURE.md, "Layers"; the CMake libraries in CMakeLists.txt link the same
# way). A file may always include its own layer. Besides that, a layer may include only:
#
#   layer      may include
#   base       (nothing)
#   tensor     base                          (header only: dtypes, quantised blocks, shapes)
#   io         base tensor
#   kernels    base tensor
#   tokenizer  base tensor io
#   chat       base tensor tokenizer
#   grammar    base tokenizer                (GBNF, JSON Schema, token masks)
#   sample     base tensor
#   state      base tensor
#   cache      base tensor state              (tokens, pages, snapshots; never the model)
#   model      base tensor io kernels state   (never the cache policy, engine or server)
#   engine     base tensor state cache model sample grammar
#   server     base tokenizer chat engine grammar sample/sampler.h
#   hub        base model/arch.h model/config.h   (rewind pull: the Hub, the store)
#
# The server talks to the engine's public API (engine/batch_engine.h), the tokenizer and the
# chat template; of the sample layer it may name only sample/sampler.h, whose SamplingParams is
# the type of a request's sampling fields in that API. It reads nothing of the model, the cache
# or the state directly. An entry with a slash allows that one header, not its whole layer.
# apps/ (the rewind binary) sits above all of them and is not checked.
#
# A directory under src/rewind that the table does not name is an error too: a new layer needs
# its row here. Each violation is printed as file:line: message; exit status 1 if there is any,
# else 0 with a one-line summary. Usage: scripts/check_layers.sh [source root]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
src="$root/src/rewind"
[ -d "$src" ] || { echo "check_layers: no $src" >&2; exit 2; }

declare -A allowed=(
  [base]=""
  [tensor]="base"
  [io]="base tensor"
  [kernels]="base tensor"
  [tokenizer]="base tensor io"
  [chat]="base tensor tokenizer"
  [grammar]="base tokenizer"
  [sample]="base tensor"
  [state]="base tensor"
  [cache]="base tensor state"
  [model]="base tensor io kernels state"
  [engine]="base tensor state cache model sample grammar"
  [server]="base tokenizer chat engine grammar sample/sampler.h"
  [hub]="base model/arch.h model/config.h"
)

violations=0 files=0 includes=0
report() {  # file line message
  echo "${1#"$root"/}:$2: $3"
  violations=$((violations + 1))
}

for dir in "$src"/*/; do
  layer=$(basename "$dir")
  if [ -z "${allowed[$layer]+set}" ]; then
    report "$src/$layer" 0 "layer '$layer' is not in scripts/check_layers.sh's table"
    continue
  fi
  files=$((files + $(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' \) | wc -l)))
  # file:line:text of every quoted include of the layer's sources.
  while IFS= read -r hit; do
    f=${hit%%:*} hit=${hit#*:}
    n=${hit%%:*} line=${hit#*:}
    [[ $line =~ \"([^\"]*)\" ]] || continue
    inc=${BASH_REMATCH[1]}
    if [[ $inc != rewind/*/* ]]; then
      report "$f" "$n" "quoted include \"$inc\" does not name its layer (write \"rewind/<layer>/...\")"
      continue
    fi
    includes=$((includes + 1))
    rest=${inc#rewind/}
    to=${rest%%/*}
    [ "$to" = "$layer" ] && continue
    ok=0
    for a in ${allowed[$layer]}; do
      if [ "$a" = "$to" ] || [ "$a" = "$rest" ]; then ok=1; break; fi
    done
    [ $ok -eq 1 ] && continue
    report "$f" "$n" "$layer may not include $inc (allowed: ${allowed[$layer]:-nothing outside base})"
  done < <(grep -rnE --include='*.h' --include='*.cpp' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir" | sort -t: -k1,1 -k2,2n)
done

if [ $violations -gt 0 ]; then
  echo "check_layers: $violations include(s) point up or across the layers (table: scripts/check_layers.sh)"
  exit 1
fi
echo "check_layers: ok, $includes rewind includes in $files files under src/rewind point down the layers"
