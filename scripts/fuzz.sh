#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build/fuzz) and runs each for a short time from the
# project's seed inputs. Usage: scripts/fuzz.sh [seconds per target, default 15]
# The test command (scripts/test.sh) runs it briefly; run it longer by hand when changing a parser.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-15}"
CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DREWIND_BUILD_FUZZ=ON \
  -DREWIND_BUILD_TESTS=OFF >/dev/null
ninja -C build/fuzz fuzz_safetensors fuzz_gguf fuzz_tokenizer fuzz_openai_request fuzz_chat_template \
  fuzz_grammar fuzz_tier_file fuzz_resp fuzz_http_framing >/dev/null
seeds=build/fuzz/seeds
mkdir -p "$seeds"/{safetensors,gguf,tokenizer,openai,chat,grammar,tier,resp,http}
cp tests/data/qwen35-tiny/qwen3_5/model.safetensors "$seeds/safetensors/" 2>/dev/null || true
cp tests/fuzz/seeds/gguf/*.gguf "$seeds/gguf/"
cp tests/fuzz/seeds/tier/*.rwkt "$seeds/tier/"
cp tests/fuzz/seeds/resp/* "$seeds/resp/"
cp tests/fuzz/seeds/tokenizer/* "$seeds/tokenizer/"
printf '\r\nGET http://h/p?q HTTP/1.2\r\nTransfer-Encoding: gzip, chunked\r\n\r\n' > "$seeds/http/request.txt"
printf '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stop":["x"],"tools":[]}' \
  > "$seeds/openai/chat.json"
printf '{"prompt":"hello","max_tokens":3,"logprobs":2}' > "$seeds/openai/completion.json"
printf '{%% for m in messages %%}{{ m.role }}: {{ m.content | trim }}\n{%% endfor %%}' > "$seeds/chat/t1.jinja"
printf 'Hello <|im_start|>world 123 \xc3\xa9\n' > "$seeds/tokenizer/text.txt"
# Grammar seeds: the first byte picks GBNF (even) or JSON Schema (odd).
printf '0root ::= "{" ws item ("," ws item)* "}"\nitem ::= [a-z]+ ":" ws ([0-9]{1,3} | "\\"" [^"\\\\]* "\\"")\nws ::= [ \\t\\n]?\n' \
  > "$seeds/grammar/gbnf.txt"
printf '1{"type":"object","properties":{"a":{"type":"array","items":{"enum":[1,"x",null]},"maxItems":3},"b":{"type":"string","format":"date"},"c":{"$ref":"#"}},"required":["a"],"additionalProperties":false}' \
  > "$seeds/grammar/schema.json"
printf '1{"type":"object","properties":{"m":{"type":"string","format":"email","pattern":"@"},"k":{"oneOf":[{"const":1},{"$ref":"#/$defs/d","title":"t"}]},"t":{"type":"object","additionalProperties":{"type":"integer"}}},"$defs":{"d":{"type":"number","minimum":0,"multipleOf":2}}}' \
  > "$seeds/grammar/relaxed.json"
printf '1{"type":"object","properties":{"p":{"type":"string","pattern":"^(?:[A-Z]{2,3}|x.+)-\\\\d{4}[^x]?$"},"q":{"pattern":"a(b|c)*\xc3\xa9+|^$"},"r":{"pattern":"(a)\\\\1"},"h":{"format":"ipv6"},"n":{"type":"number","exclusiveMinimum":0,"maximum":1}}}' \
  > "$seeds/grammar/pattern.json"
# Two targets at a time (CI has two cores); a target's log is printed when it fails.
fuzz_one() {
  local name="$1" seeddir="$2"
  local bin="build/fuzz/tests/fuzz/fuzz_$name" corpus="build/fuzz/corpus_$name"
  mkdir -p "$corpus"
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -max_len=65536 -print_final_stats=0 "$corpus" "$seeds/$seeddir" \
      > "build/fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED (see build/fuzz/$name.log)" >&2
    tail -30 "build/fuzz/$name.log" >&2
    return 1
  fi
}
status=0
pids=()
for t in safetensors:safetensors gguf:gguf tokenizer:tokenizer openai_request:openai chat_template:chat \
    grammar:grammar tier_file:tier resp:resp http_framing:http; do
  fuzz_one "${t%%:*}" "${t##*:}" &
  pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
