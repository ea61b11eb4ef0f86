#!/usr/bin/env bash
# Reproduces the figures of docs/PERFORMANCE.md (not part of CI; takes several minutes and
# ~15 GB of disk for the generated models under models/). Usage: scripts/bench.sh [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
t="${1:-2}"
scripts/build.sh release >/dev/null
bin=build/release/rewind
mkdir -p models
[ -f models/qwen3.5-0.8b-f32/model.safetensors ] || $bin make-model --preset qwen3.5-0.8b --dtype f32 --seed 1 --out models/qwen3.5-0.8b-f32
[ -f models/qwen3.5-0.8b-bf16/model.safetensors ] || $bin make-model --preset qwen3.5-0.8b --dtype bf16 --seed 1 --out models/qwen3.5-0.8b-bf16
[ -f models/qwen3.5-mini/model.safetensors ] || $bin make-model --preset qwen3.5-mini --seed 1 --out models/qwen3.5-mini
echo "== engine: qwen3.5-0.8b shape, prefill 512, decode 128, $t threads"
$bin bench --model models/qwen3.5-0.8b-f32 -p 512 -n 128 -t "$t"
$bin bench --model models/qwen3.5-0.8b-bf16 -p 512 -n 128 -t "$t"
echo "== GGUF: the f32 checkpoint converted to f32, bf16, q8_0, q4_k, q5_k_m; prefill 512, decode 128, $t threads"
for ty in f32 bf16 q8_0 q4_k q5_k_m; do
  [ -f models/qwen3.5-0.8b-$ty.gguf ] || $bin convert --in models/qwen3.5-0.8b-f32 --out models/qwen3.5-0.8b-$ty.gguf --type $ty
  $bin bench --model models/qwen3.5-0.8b-$ty.gguf -p 512 -n 128 -t "$t"
done
echo "== GGUF: the quantised files again without the AMX tiles (VNNI only; no-op without AMX)"
for ty in q8_0 q4_k; do
  $bin bench --model models/qwen3.5-0.8b-$ty.gguf -p 512 -n 128 -t "$t" --isa avx512 || true
done
echo "== GGUF: the quantised files again with the f32 dot (exact dequantisation) for comparison"
for ty in q8_0 q4_k; do
  $bin bench --model models/qwen3.5-0.8b-$ty.gguf -p 512 -n 128 -t "$t" --quant-dot f32
done
echo "== matmul kernels alone, quantised, int8 dot: decode (M=1) and prefill (M=512)"
build/release/bench/matmul_bench --threads "$t" --m 1,512 --dtype q8_0,q4_k,q5_k,q6_k --seconds 0.5
build/release/bench/matmul_bench --threads "$t" --m 512 --dtype q8_0,q4_k,q5_k --seconds 0.5 --isa avx512 || true
echo "== threads on a shared machine: rewind run with 1 and 2 threads, idle and beside a busy loop"
python3 bench/threads_bench.py --rounds 7 --model builtin --model models/qwen3.5-mini now="$bin"
echo "== prefix cache: all workloads, cache on vs off (qwen3.5-mini shape)"
$bin cache-bench --model models/qwen3.5-mini --workload all -t "$t"
echo "== prefix cache: shared-system and repeat on the qwen3.5-0.8b shape"
$bin cache-bench --model models/qwen3.5-0.8b-bf16 --workload shared-system -t "$t"
$bin cache-bench --model models/qwen3.5-0.8b-bf16 --workload repeat --scale 0.5 -t "$t"
echo "== server under load: 4 clients x (3 turns + 1 edit), cache on vs off (qwen3.5-mini shape)"
python3 bench/load_bench.py --binary "$bin" --model models/qwen3.5-mini --clients 4 --turns 3 --max-tokens 16 --threads "$t"
echo "== speculative decoding: the trained pair on held-out chapters (128 tokens, k 4)"
for ref in "John 11:1-3" "Acts 7:1-3" "Joshua 1:1-3" "Proverbs 14:1-3"; do
  if command -v bible >/dev/null; then
    prompt="$(bible -f "$ref" | sed -E 's/^[^ ]+ //')"
  else
    echo "(bible-kjv-text is not installed: apt-get install bible-kjv-text for the held-out prompts)"
    prompt="And it came to pass in those days,"
  fi
  $bin spec-bench --model models/kjv-target --draft models/kjv-draft --prompt "$prompt" -n 128 --draft-k 4 -t "$t"
done
echo "== speculative decoding: qwen3.5-0.8b shape (BF16), a noisy copy as the draft"
[ -f models/qwen3.5-0.8b-bf16-noisy/model.safetensors ] || $bin make-model --from models/qwen3.5-0.8b-bf16 --noise 0.03 --seed 9 --out models/qwen3.5-0.8b-bf16-noisy
$bin spec-bench --model models/qwen3.5-0.8b-bf16 --draft models/qwen3.5-0.8b-bf16-noisy -n 48 --draft-k 4 -t "$t"
