#include "cli.h"

#include "rewind/kernels/kernel_options.h"
#include "rewind/kernels/matmul.h"

#ifndef REWIND_VERSION
#define REWIND_VERSION "unknown"
#endif
#ifndef REWIND_GIT_COMMIT
#define REWIND_GIT_COMMIT "unknown"
#endif

namespace rw::app {

namespace {

// Options several commands share, with the same spelling and description everywhere.
OptSpec model_opt(const std::string& help = "the model (default: the built-in model " +
                                            std::string("models/kjv-target)")) {
  return {"--model", "-m", "DIR|FILE.gguf", help, {}, false};
}
OptSpec threads_opt() {
  return {"--threads", "-t", "N", "threads (default: this machine's cores)", {}, false};
}
OptSpec weights_opt() {
  return {"--weights",
          "",
          "auto|f32|bf16",
          "weights in memory: auto (quantised and BF16 kept, the rest F32), f32 or bf16",
          {},
          false};
}
std::vector<OptSpec> kv_type_opts() {
  return {{"--cache-type-k",
           "-ctk",
           "TYPE",
           "KV cache type of K: f32, bf16, f16 (default) or q8_0",
           {},
           false},
          {"--cache-type-v",
           "-ctv",
           "TYPE",
           "KV cache type of V: f32, bf16, f16 (default) or q8_0",
           {},
           false}};
}
OptSpec quant_dot_opt() {
  return {"--quant-dot",
          "",
          "auto|int8|f32",
          "quantised matmuls: int8 dots or exact f32 (auto: int8 with AVX2/AVX-512)",
          {},
          false};
}
OptSpec json_opt(const std::string& help) {
  return {"--json", "", "", help, {}, false};
}
std::vector<OptSpec> spec_opts() {
  return {
      {"--spec",
       "",
       "METHOD",
       "speculative decoding: off (default), ngram, draft:DIR (a draft model), mtp",
       {},
       false},
      {"--model-draft",
       "-md",
       "DIR|FILE",
       "a draft model (llama-server's): the same as --spec draft:DIR|FILE",
       {},
       false},
      {"--draft-k",
       "",
       "K",
       "most draft tokens per round (default 4, 1..16)",
       {"--draft-max", "--draft-n", "--draft"},
       false},
      {"--spec-fixed-k", "", "", "keep k fixed (default: shrink after rejections)", {}, false},
  };
}
std::vector<OptSpec> join(std::vector<OptSpec> a, const std::vector<OptSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
// The penalties (penalties_from), the same on run, chat and serve.
std::vector<OptSpec> penalty_opts() {
  return {
      {"--repeat-penalty", "", "R", "divide repeated tokens' positive logits by R (1: off)"},
      {"--repeat-last-n", "", "N", "tokens --repeat-penalty looks back over (64; -1: all)"},
      {"--presence-penalty", "", "P", "minus P for a token already generated (default 0)"},
      {"--frequency-penalty", "", "F", "minus F x a token's count in the reply (default 0)"},
  };
}
// The sampling options of chat and serve, whose defaults are the model's
// (generation_config.json).
std::vector<OptSpec> sampling_default_opts() {
  return join(
      {
          {"--temperature",
           "",
           "T",
           "sampling temperature (default: the model's, else 1)",
           {"--temp"}},
          {"--top-k", "", "K", "keep the K most likely tokens (default: the model's, else all)"},
          {"--top-p", "", "P",
           "nucleus sampling mass, in [0, 1] (0: the most likely token; default: the model's, "
           "else 1)"},
          {"--min-p", "", "P",
           "drop tokens below P x the best one's probability (default: the model's, else 0)"},
      },
      penalty_opts());
}
OptSpec template_opt() {
  return {"--chat-template", "", "JINJA|chatml",
          "render with this Jinja template text (or rewind's ChatML) instead of the model's, as "
          "llama-server's"};
}
OptSpec template_file_opt() {
  return {"--chat-template-file", "", "FILE",
          "render with this Jinja chat template instead of the model's (its special tokens "
          "stay the model's)"};
}
// llama.cpp's options that a CPU engine has no use for, so that its command lines run as they
// are (llama_compat_from).
std::vector<OptSpec> llama_compat_opts() {
  std::vector<OptSpec> o = {
      {"--jinja", "", "", "accepted for llama.cpp's command lines: templates are always Jinja"},
      {"--n-gpu-layers",
       "-ngl",
       "N|auto|all",
       "accepted and ignored (with a note): rewind runs on the CPU",
       {"--gpu-layers"}},
      {"--flash-attn", "-fa", "[on|off|auto]",
       "accepted and ignored: rewind's attention always runs in one pass over K/V"},
      {"--cont-batching", "-cb", "", "accepted: rewind always batches continuously"},
      {"--no-mmap", "", "", "accepted: rewind reads the weights into its own memory either way"},
      {"--ubatch-size", "-ub", "N",
       "accepted and ignored (with a note): rewind sizes its own matmul tiles"},
      {"--threads-batch", "-tb", "N",
       "accepted: --threads runs the prefill too (another N is noted and ignored)"},
  };
  for (OptSpec& s : o)
    if (s.name == "--flash-attn") s.implicit_value = "on";  // older llama.cpp's bare -fa
  return o;
}
const char* kTypes =
    "f32|f16|bf16|q8_0|q4_k|q4_k_m|q5_k|q5_k_m|q6_k|q4_0|q4_1|q5_0|q5_1|iq4_nl|"
    "q3_k|iq4_xs|q2_k";

std::vector<CommandSpec> build_specs() {
  std::vector<CommandSpec> c;
  c.push_back(
      {"run", "Generate text from a prompt (raw completion, no chat template).",
       "-p TEXT|-f FILE [options]",
       join({model_opt(),
             {"--prompt", "-p", "TEXT", "the text to continue (this or --file)", {}, false},
             {"--file", "-f", "FILE", "continue the text of FILE (llama.cpp's -f)", {}, false},
             {"--ctx-size",
              "-c",
              "N",
              "the prompt and the generated tokens together at most N (0: the model's context "
              "length; default: what -n asks)",
              {},
              false},
             {"--n-predict",
              "-n",
              "N",
              "tokens to generate (default 32; -1: until an end-of-sequence token or the "
              "model's context length)",
              {},
              false},
             {"--temperature", "", "T", "sampling temperature (default 0: greedy)", {"--temp"}},
             {"--top-k", "", "K", "keep the K most likely tokens (default 0: all)", {}, false},
             {"--top-p",
              "",
              "P",
              "nucleus sampling mass, in [0, 1] (0: the most likely token; "
              "default 1: off)",
              {},
              false},
             {"--min-p", "", "P", "drop tokens below P x the best one's probability (default 0)"},
             {"--seed", "-s", "S", "sampling seed (default 0)", {}, false},
             threads_opt(),
             {"--chunk",
              "-b",
              "N",
              "prefill chunk in tokens (default 512; same results)",
              {"--batch-size"}},
             weights_opt(),
             quant_dot_opt(),
             {"--ignore-eos", "", "", "keep generating past the end-of-sequence token", {}, false},
             json_opt("print one JSON object (text, token ids, speeds) instead of the text"),
             {"--quiet", "-q", "", "no progress lines and no figures on stderr", {}, false}},
            spec_opts()),
       "Greedy output is identical with and without --spec.\n"
       "Figures (stderr, or --json): load time apart; prefill from the request's start to the\n"
       "first generated token (its sampling and the threads' wake-up included; for a short\n"
       "prompt mostly those), decode over the tokens after the first (prefill_ms, decode_ms,\n"
       "decode_tokens and the rates in --json)."});
  c.push_back(
      {"chat",
       "Chat with a model in the terminal (its chat template, the prefix cache).",
       "[options]",
       {model_opt(),
        {"--system", "", "TEXT", "the system prompt (default none; /system changes it)", {}, false},
        {"--ctx-size",
         "-c",
         "N",
         "the conversation's context in tokens (default 4096; 0: the model's)",
         {},
         false},
        {"--n-predict", "-n", "N", "most tokens per reply (default -1: up to the context)"},
        {"--seed", "-s", "S", "sampling seed; reply i uses S + i (default random)", {}, false},
        {"--think", "", "on|off", "ask the template to turn reasoning on or off (its default)"},
        {"--ignore-eos", "", "", "keep generating past the end-of-sequence token", {}, false},
        threads_opt(),
        {"--cache-ram", "", "MiB", "prefix cache budget: KV pages + checkpoints (1024)", {}, false},
        {"--no-cache", "", "", "chat without the prefix cache (every turn re-runs it all)"},
        weights_opt(),
        quant_dot_opt(),
        {"--load", "", "FILE", "start from a conversation saved with /save", {}, false},
        {"--history", "", "FILE", "the input history (default <store>/chat_history)", {}, false},
        {"--no-history", "", "", "keep no input history between sessions", {}, false},
        {"--quiet", "-q", "", "no banner and no status line after each reply", {}, false}},
       "Type a message and press Enter; a line ending in \\ continues on the next line, and\n"
       "\"\"\" opens and closes a block of lines. Commands: /regen, /edit N [TEXT], /undo,\n"
       "/system [TEXT], /history, /stats, /clear, /save FILE, /load FILE, /help, /quit (also\n"
       "Ctrl-D). A saved conversation is an OpenAI request body ({\"messages\": [...]}).\n"
       "Each turn renders the whole conversation with the model's chat template and resumes\n"
       "from the prefix cache's checkpoint where it departs from the previous turn; the status\n"
       "line after each reply (stderr) shows the prompt's cached and re-run tokens.\n"
       "Ctrl-C stops a streaming reply (the part shown is kept in the conversation); at the\n"
       "prompt it drops the line, and a second Ctrl-C leaves (status 0). On a terminal the\n"
       "input has line editing and history (libedit); from a pipe, lines are read as they come."});
  c.push_back(
      {"serve", "The OpenAI-compatible HTTP server (chat, completions, streaming, metrics).",
       "[options]",
       join(
           {{"--model",
             "-m",
             "[NAME=]DIR|FILE.gguf",
             "the model (default: the built-in model models/kjv-target); repeat to serve "
             "several, each NAME=PATH (NAME a comma list), a request's \"model\" picks one",
             {},
             true},
            {"--model-opt",
             "",
             "NAME:OPT=V",
             "one model's own value of a per-model option (see below)",
             {},
             true},
            {"--alias",
             "-a",
             "NAME",
             "model name for /v1/models and answers (or a comma list); others get 404",
             {},
             true},
            {"--host", "", "ADDR", "address to listen on (default 127.0.0.1)", {}, false},
            {"--port", "", "N", "port (default 8080; 0 picks a free one, printed on start)"},
            {"--api-key",
             "",
             "KEY",
             "require 'Authorization: Bearer KEY' on every route but /health and the web page "
             "(a comma list, or repeated: any of them)",
             {},
             true},
            {"--api-key-file",
             "",
             "FILE",
             "the keys --api-key takes, one a line (llama-server's; with --api-key: any of all)",
             {},
             true},
            {"--parallel", "-np", "N", "sequences decoding at once (default 4)", {}, false},
            {"--chunk",
             "-b",
             "N",
             "a step's tokens: decode rows, then prefill (512)",
             {"--batch-size"}},
            {"--mixed-chunk",
             "",
             "N",
             "a step's tokens while sequences decode (default and at most --chunk): smaller, "
             "a shorter wait for them",
             {},
             false},
            {"--itl-target",
             "",
             "T",
             "the time a step that decodes beside a prefill aims at, its prefill chunk sized "
             "from measured step times: Nx (times a step of the decode rows alone), N (ms) or "
             "off (default 6x)",
             {},
             false},
            {"--ctx-size", "-c", "N",
             "prompt + max_tokens limit per request (default 32768; 0: the model's)"},
            {"--n-predict", "-n", "N",
             "most tokens per reply: the max_tokens of a request that gives none, and the cap "
             "of a larger one (default -1: up to the context; -2 the same)"},
            {"--cache-ram", "", "MiB", "prefix cache budget: KV pages + checkpoints (4096)"},
            {"--grammar-cache-ram", "", "MiB",
             "compiled grammars of structured output and their cached masks (256)"},
            {"--no-cache", "", "", "serve without the prefix cache", {}, false},
            {"--cache-dir", "", "DIR",
             "keep checkpoints and KV pages on disk too: written behind, read back after an "
             "eviction or a restart"},
            {"--cache-disk", "", "GiB", "disk budget of --cache-dir (16; LRU beyond)"},
            {"--cache-fsync", "", "", "fdatasync each --cache-dir file before its rename"},
            {"--cache-redis", "", "URL",
             "share checkpoints and KV pages with other replicas of the model through Redis: "
             "redis://HOST:PORT[,HOST:PORT...] (standalone or cluster)"},
            {"--cache-redis-timeout", "", "MS", "timeout of each --cache-redis call (250)"},
            {"--cache-redis-ttl", "", "S", "expiry of each --cache-redis object (0: none)"},
            {"--checkpoint-interval", "", "N",
             "checkpoint grid in tokens (512; 0: none, turn starts still count)"},
            {"--checkpoint-max", "", "N", "checkpoints kept per branch (32; 0: no limit)"},
            threads_opt(),
            {"--max-queue", "", "N", "requests waiting beyond --parallel before 429 (64)"},
            {"--max-body", "", "BYTES", "request body limit, 413 beyond (8388608)", {}, false},
            {"--max-buffered", "", "BYTES",
             "request bodies + answers the HTTP layer may hold at once (64 MiB, at least "
             "--max-body; a body past it gets 503, a whole answer past it 400)"},
            weights_opt(),
            quant_dot_opt(),
            {"--shutdown-grace", "", "S",
             "on SIGINT/SIGTERM, time running requests get to finish (5)"},
            {"--header-timeout", "", "S", "deadline for a request's header (10; 408 beyond)"},
            {"--body-timeout", "", "S", "deadline for a request's body (30; 408 beyond)"},
            {"--idle-timeout", "", "S", "keep-alive connection idle between requests (5)"},
            {"--max-connections", "", "N", "open connections in total (512; 503 beyond)"},
            {"--max-connections-per-client", "", "N",
             "open connections from one address (64; 503 beyond)"},
            {"--cors-origin", "", "LIST", "origins allowed by CORS, comma list or * (default off)"},
            {"--no-webui", "", "", "no web page at / (the API only)"},
            {"--reasoning-format", "", "FORMAT",
             "a chat reply's <think> block: deepseek or auto (default) in reasoning_content, "
             "none left in the content (a request's reasoning_format wins)"},
            {"--chat-template-kwargs", "", "JSON",
             "the template's enable_thinking when a request gives none, as "
             "{\"enable_thinking\": false} (llama-server's)"},
            {"--reasoning-budget", "", "N",
             "-1 (default) lets the model think, 0 renders with enable_thinking false "
             "(llama-server's)"},
            {"--metrics", "", "",
             "accepted for llama-server's command lines: /metrics is always on"},
            {"--log-format", "", "text|json", "access log: one line per request (default text)"},
            {"--log-file", "", "PATH", "append the access log to PATH (default: stderr)"},
            {"--quiet", "-q", "", "no access log", {}, false}},
           spec_opts()),
       "Routes: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize,\n"
       "/apply-template; GET /v1/models, /v1/models/{id}, /v1/cache, /v1/cache/tree, /props,\n"
       "/metrics, /health and the web page at /; DELETE /v1/cache. /chat/completions,\n"
       "/completions and /models (without /v1, as llama-server answers them) are the same.\n"
       "A request may pick its own drafter: \"speculative\": \"off\"|\"ngram\"|\"draft\"|\"mtp\"\n"
       "or {\"method\": ..., \"k\": K}. Without --alias any \"model\" is accepted.\n"
       "Several models: --model a=DIR1 --model b=DIR2; each has its own engine and prefix cache\n"
       "(--cache-ram, --grammar-cache-ram and --cache-disk split evenly), a request's \"model\"\n"
       "picks one (none: the first; an unknown name: 404), and GET /v1/cache, /v1/cache/tree and\n"
       "/props take ?model=NAME. The models share --threads threads (their parallel jobs take\n"
       "turns). Every option applies to every model, except that --model-opt NAME:OPT=V (or\n"
       "NAME:OPT for a flag) sets one for model NAME: ctx-size, parallel, chunk, mixed-chunk,\n"
       "itl-target, max-queue, checkpoint-interval, checkpoint-max, no-cache, spec, draft-k,\n"
       "spec-fixed-k, weights, cache-type-k, cache-type-v, the sampling options and\n"
       "chat-template-file (e.g. --model-opt b:ctx-size=4096 --model-opt a:temperature=0.6).\n"
       "--temperature, --top-k, --top-p, --min-p and the penalties set what a request that\n"
       "leaves them out gets, in place of the model's generation_config.json.\n"
       "A --spec draft:DIR is loaded once and shared by the models that use it; each must have\n"
       "the draft's vocabulary (else give the others their own --spec with --model-opt).\n"
       "Access log fields (docs/ARCHITECTURE.md, \"Access log\"): time, request id, client,\n"
       "method and path, status, prompt / cached / re-run / completion tokens, time to first\n"
       "token, total time, finish reason.\n"
       "SIGINT/SIGTERM: stop accepting, give running requests the grace period, then end them\n"
       "(streams get a final chunk and [DONE]); exit 0."});
  c.push_back(
      {"bench",
       "Prefill and decode throughput against this machine's measured limits.",
       "[options]",
       {model_opt(),
        {"--n-prompt", "-p", "N", "prompt tokens to prefill (default 512)", {}, false},
        {"--n-gen", "-n", "N", "tokens to decode (default 128)", {}, false},
        threads_opt(),
        {"--prefill-runs", "", "N", "timed prefills after a first one (default 3)", {}, false},
        weights_opt(),
        quant_dot_opt(),
        {"--isa", "", "auto|amx|avx512|avxvnni|avx2|scalar",
         "widest SIMD path the kernels may take"},
        {"--seed", "", "S", "seed of the random prompt (default 1)", {}, false},
        {"--decode-split", "", "SPLIT", "auto|guided|static, or A,B to compare two step by step"},
        {"--batch", "", "N,...", "decode N sequences per step, sizes side by side", {}, false},
        {"--mixed-prefill", "", "L", "with --batch: also beside L-token prefills", {}, false},
        {"--step-tokens", "", "B", "with --mixed-prefill: a step's token budget (512)", {}, false},
        {"--itl-target",
         "",
         "T",
         "with --mixed-prefill: one more set, chunks from this step target",
         {},
         false},
        json_opt("print one JSON object")},
       "--prefill-runs: the headline is their median; the first prefill, which grows the buffers\n"
       "to the prompt's size, is reported apart.\n"
       "--isa amx: AVX-512 with AMX-INT8 tiles for Q8_0, Q4_K, Q5_K and Q6_K prefill; avxvnni:\n"
       "AVX2 with AVX-VNNI's int8 dot products.\n"
       "--decode-split: how the threads split a decode step's matmuls (auto: a static share per\n"
       "thread for matrices of up to 8 MiB a thread, guided chunks for larger ones); two, as A,B,\n"
       "take turns step by step (A on even steps), and a line compares them: each one's median\n"
       "step against its probe, and the median ratio of B's step time to the A step before it.\n"
       "--batch: instead of the above, for each N a set of N sequences (each prefilled with its\n"
       "own -p token prompt) decodes -n tokens, one step of every set in turn per round, so the\n"
       "sizes share the machine's state; each set's aggregate tok/s (N / median step) and its\n"
       "ratio to one sequence's (the first N given, normally 1).\n"
       "--mixed-prefill: one more set of the largest N decodes while another sequence prefills\n"
       "L-token prompts one after another in chunks of what the N rows leave of --step-tokens\n"
       "(the engine's plan): its steps' p50 / p99 time is the decode rows' inter-token latency\n"
       "under that load; a step with the whole prompt in one piece is timed for comparison.\n"
       "--itl-target: one more mixed set whose chunks are sized from measured step times to\n"
       "aim at the target (Nx or N ms, as `rewind serve --itl-target`), the sets' steps taking\n"
       "turns; each reports its prompt's progress (prompt tok/s) beside its latency."});
  c.push_back(
      {"cache-bench",
       "Scripted multi-request workloads with the prefix cache on and off, side by side.",
       "[--workload NAME] [options]",
       {model_opt(),
        {"--workload", "", "NAME",
         "shared-system, edit-turn, long-branch, repeat, chat or all (default all)"},
        {"--scale", "", "X", "multiplies every prompt size of the workload (default 1.0)"},
        {"--interval", "", "N", "checkpoint grid in tokens (default 512)", {}, false},
        {"--budget-mib", "", "MiB", "cache budget (default 4096)", {}, false},
        {"--max-per-branch", "", "N", "checkpoints kept per branch (default 32)", {}, false},
        {"--n-predict", "-n", "N", "tokens generated per request (default 4)", {}, false},
        {"--chunk", "", "N", "prefill chunk in tokens (default 512)", {}, false},
        threads_opt(),
        {"--seed", "", "S", "seed of the scripted prompts (default 1)", {}, false},
        weights_opt(),
        quant_dot_opt(),
        json_opt("print JSON lines instead of the table")},
       ""});
  c.push_back(
      {"spec-bench",
       "Speculative decoding (n-gram, draft model, MTP) against plain decoding.",
       "[options]",
       {model_opt(),
        {"--draft", "", "DIR", "a draft model with the same tokenizer (adds the draft row)"},
        {"--n-predict", "-n", "N", "tokens to generate (default 64)", {}, false},
        {"--draft-k", "", "K", "most draft tokens per round (default 4, 1..16)", {}, false},
        {"--workload", "", "code|text", "the built-in prompt (default code)", {}, false},
        {"--prompt", "-p", "TEXT", "a prompt of your own instead of the workload's", {}, false},
        threads_opt(),
        weights_opt(),
        quant_dot_opt(),
        {"--spec-fixed-k", "", "", "keep k fixed (default: shrink after rejections)", {}, false},
        json_opt("print one JSON object on one line instead of the table")},
       "Greedy decoding of one prompt, plain and with each drafter, side by side."});
  c.push_back({"logits",
               "Print the logits of a token list (or a prompt) as exact JSON.",
               "-m DIR|FILE.gguf (--tokens IDS | -p TEXT) [options]",
               {model_opt("the model (required)"),
                {"--tokens", "", "IDS", "token ids, comma-separated (1,2,3)", {}, false},
                {"--prompt", "-p", "TEXT", "text to encode instead of --tokens", {}, false},
                {"--positions", "", "I,J,...", "positions to print (default: all)", {}, false},
                threads_opt(),
                weights_opt(),
                quant_dot_opt()},
               ""});
  c.push_back(
      {"convert",
       std::string("Write a Hugging Face checkpoint as one GGUF file (default type ") +
           kDefaultConvertType + ").",
       "--in HF_DIR -o FILE.gguf [--type TYPE]",
       {{"--in", "-i", "HF_DIR", "the checkpoint directory (required)", {}, false},
        {"--out", "-o", "FILE.gguf", "the file to write (required)", {"--outfile"}, false},
        {"--type",
         "",
         "TYPE",
         std::string("matrix type (default ") + kDefaultConvertType +
             "; f32 or bf16 keep full precision)",
         {"--outtype"}},
        {"--to", "", "gguf", "the output format; gguf (the default) is the only one", {}, false},
        {"--chat-template-file", "", "FILE",
         "write this Jinja chat template into the file instead of the checkpoint's"},
        {"--quiet", "-q", "", "no progress line", {}, false}},
       std::string("TYPE: ") + kTypes +
           ".\n"
           "A row length that is not a multiple of the type's block falls back as llama-quantize\n"
           "does (q4_k to q5_0, q5_k to q5_1, q6_k to q8_0, q2_k/q3_k to q4_0, iq4_xs to iq4_nl;\n"
           "f16 when not a multiple of 32);\n"
           "norms, conv, ssm_a, dt bias and MoE routers stay f32. q4_k_m, q5_k_m: "
           "llama-quantize's\n"
           "mixtures (q6_k for output and, in some layers, attn_v and ffn_down). q4_0, q4_1, "
           "q5_0,\n"
           "q5_1, iq4_nl, q3_k, iq4_xs, q2_k: for files made elsewhere; written here to test\n"
           "loading.\n"
           "The MTP head is written as blk.N.nextn.* (not for qwen3next)."});
  c.push_back(
      {"make-model",
       "Write a seeded random model in the Hugging Face layout (or as GGUF).",
       "--out DIR [--preset NAME] [options] | --from DIR --noise SIGMA --out DIR",
       {{"--preset", "", "NAME",
         "tiny, tiny-dense, qwen3.5-tiny-256, qwen3.5-mini, qwen3.5-0.8b, qwen3.5-moe-tiny, "
         "qwen3-next-tiny, granite-h-tiny, granite-h-dense-tiny, nemotron-h-tiny, "
         "nemotron-h-moe-tiny, granite-4.0-h-350m, granite-4.0-h-tiny, nemotron-nano-9b-v2 or "
         "nemotron-3-nano-30b-a3b (default tiny)"},
        {"--out", "-o", "DIR", "where to write (FILE.gguf with --format gguf; required)"},
        {"--dtype",
         "",
         "f32|bf16",
         "weight dtype of the HF files, and of the weights a GGUF file is made from (default "
         "f32; bf16 for the real Granite / Nemotron shapes)",
         {},
         false},
        {"--seed", "", "N", "the weights' seed (default 0)", {}, false},
        {"--mtp", "", "", "also write the multi-token-prediction head (mtp.*)", {}, false},
        {"--layers", "", "N", "decoder layers (default: the preset's)", {}, false},
        {"--layer-types", "", "full,linear,...",
         "one of full|linear per layer (default: every 4th layer full)"},
        {"--linear-heads", "", "HK,HV,DK,DV",
         "Gated DeltaNet key heads, value heads, key and value head dims"},
        {"--from", "", "DIR", "copy the model in DIR, adding noise (with --noise)", {}, false},
        {"--noise", "", "SIGMA", "add SIGMA * rms(w) * N(0,1) to each float weight but A_log"},
        {"--format", "", "hf|gguf", "write the HF layout (default) or one GGUF file", {}, false},
        {"--type",
         "",
         "TYPE",
         "with --format gguf: the matrix type (default f32); the weights go straight into the "
         "file, one tensor at a time (no HF files in between)",
         {},
         false},
        {"--quiet", "-q", "", "no progress line", {}, false}},
       "tiny-dense has every layer full attention. --linear-heads: HV a multiple of HK; llama.cpp\n"
       "loads only DK == DV, as every released checkpoint has. --from copies other files\n"
       "unchanged. --format gguf writes llama.cpp's layout from the same weights the HF layout\n"
       "would hold (--mtp: the head as blk.N.nextn.*, except for qwen3_next).\n"
       "granite-*: Granite-4.0-H (granitemoehybrid), nemotron-*: Nemotron-H (nemotron_h; --mtp,\n"
       "--layers, --layer-types and --linear-heads do not apply). Weights are made and written "
       "one\n"
       "tensor at a time, so a real shape needs no more memory than its largest tensor."});
  c.push_back(
      {"pull",
       "Download a model from the Hugging Face Hub into the model store.",
       "ORG/NAME[:QUANT|:FILE] [options]",
       {{"--revision", "", "REV", "a branch, tag or commit (default: main)", {}, false},
        {"--quiet", "-q", "", "no progress or messages; the model's path still goes to stdout"},
        {"--list", "", "", "list the pulled models (the same as: rewind models)", {}, false}},
       "ORG/NAME: a checkpoint repository (config.json, *.safetensors, tokenizer files), or a\n"
       "GGUF repository (its one GGUF file, else its Q4_K_M file). ORG/NAME:Q4_K_M picks the GGUF\n"
       "file whose name carries that quantisation (or :PATH, a file). --model ORG/NAME (or NAME\n"
       "alone, when unique) then runs it.\n"
       "Environment: HF_TOKEN (private and gated repositories), HF_ENDPOINT (default\n"
       "https://huggingface.co), REWIND_HOME (the store; default ~/.cache/rewind).\n"
       "An interrupted pull resumes where it stopped when run again; every file is checked\n"
       "against the Hub's size and sha256. Architectures rewind cannot run are refused before\n"
       "any weights are downloaded."});
  c.push_back({"models",
               "List the models `rewind pull` stored (name, size, path).",
               "",
               {},
               "--model takes the name."});
  // Inserts `opts` after the option `after` of `cs` (at the end when it has none).
  auto insert_after = [](CommandSpec& cs, const std::string& after,
                         const std::vector<OptSpec>& opts) {
    auto at = cs.options.end();
    for (auto it = cs.options.begin(); it != cs.options.end(); ++it)
      if (it->name == after) at = it + 1;
    cs.options.insert(at, opts.begin(), opts.end());
  };
  // The KV cache types after --quant-dot, and llama.cpp's CPU-less options at the end, wherever
  // a model is loaded for running; the model's sampling defaults and a template in chat and
  // serve.
  for (CommandSpec& cs : c) {
    if (cs.name != "run" && cs.name != "chat" && cs.name != "serve" && cs.name != "bench" &&
        cs.name != "cache-bench" && cs.name != "spec-bench" && cs.name != "logits")
      continue;
    insert_after(cs, "--quant-dot", kv_type_opts());
    if (cs.name == "run") insert_after(cs, "--seed", penalty_opts());
    if (cs.name == "chat" || cs.name == "serve") {
      insert_after(cs, cs.name == "chat" ? "--n-predict" : "--ctx-size", sampling_default_opts());
      insert_after(cs, "--frequency-penalty", {template_file_opt(), template_opt()});
    }
    insert_after(cs, "", llama_compat_opts());
  }
  return c;
}

}  // namespace

const std::vector<CommandSpec>& command_specs() {
  static const std::vector<CommandSpec> specs = build_specs();
  return specs;
}

const CommandSpec* command_spec(const std::string& name) {
  for (const CommandSpec& c : command_specs())
    if (c.name == name) return &c;
  return nullptr;
}

std::string top_level_help() {
  std::string out = "usage: rewind COMMAND [options]\n\ncommands:\n";
  for (const CommandSpec& c : command_specs()) {
    std::string n = c.name;
    n.resize(12, ' ');
    out += "  " + n + c.summary + "\n";
  }
  out += "  help        this list, or a command's options: rewind help COMMAND\n";
  out += "  version     the version, git commit and kernel paths (also --version)\n";
  out += "\n'rewind COMMAND --help' (or -h) lists every option of a command.\n";
  return out;
}

std::string unknown_command_message(const std::string& typed) {
  std::vector<std::string> names = {"help", "version"};
  for (const CommandSpec& c : command_specs()) names.push_back(c.name);
  const std::string hint = typed.empty() || typed[0] == '-' ? "" : did_you_mean(typed, names);
  return "unknown command '" + typed + "'" + (hint.empty() ? "" : "; did you mean " + hint + "?") +
         " (rewind help lists the commands)";
}

std::string version_text() {
  std::string out =
      std::string("rewind ") + REWIND_VERSION + " (commit " + REWIND_GIT_COMMIT + ")\n";
#if defined(__x86_64__)
  out += "kernels built in: amx-int8, avx512 (vnni), avx2 (avx-vnni), scalar\n";
#else
  out += "kernels built in: scalar\n";
#endif
  out += "this CPU: f32/bf16 matmul " + std::string(matmul_isa()) + ", int8 dot " +
         matmul_int8_isa() + ", amx-int8 tiles " + (matmul_amx_enabled() ? "yes" : "no") +
         "; widest path " +
         (isa_cap_supported(IsaCap::Avx512) ? "avx512"
          : isa_cap_supported(IsaCap::Avx2) ? "avx2"
                                            : "scalar") +
         "\n";
  return out;
}

}  // namespace rw::app
