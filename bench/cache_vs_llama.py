#!/usr/bin/env python3
"""Prefix-cache workloads against rewind's server and llama.cpp's llama-server on the same GGUF
file, side by side in one run (both servers up; each request sent to one, then the other;
loopback only, bounded in time).

Both servers get the same token-id prompts (rewind: POST /v1/completions with "prompt" as a list of
ids; llama-server: POST /completion with "prompt" as a list of ids and "cache_prompt": true),
greedy, a few generated tokens, streamed. Per request: prompt tokens, tokens the server re-ran
(rewind: usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens; llama-server:
timings.prompt_n, the prompt tokens it evaluated, beside timings.cache_n, those it reused), time to
the first streamed token and to the end of the response, both measured by this client.

Workloads (seeded random token ids, modelled on `rewind cache-bench`):
  shared-system  one system prompt (1024 tokens), then four requests with different 200-token
                 user messages
  long-chat      a long conversation (system prompt + turns, --chat-tokens in all), sent cold;
                 then the same conversation with one token of the message at ~90% of its length
                 edited; then that edited conversation sent again (a regenerated last reply)
  far-back       (with --far-back) the long conversation with a token at 10% of its length edited

usage: bench/cache_vs_llama.py --rewind build/release/rewind --model FILE.gguf
                               [--llama-server PATH] [--threads 2] [--ctx-size 16384]
                               [--chat-tokens 8192] [--max-tokens 4] [--far-back] [--json]
Without --llama-server only rewind runs (and the table says "llama-server not given").
Exits non-zero if a server fails to start or a request fails. Standard library only (python3)."""
import argparse, http.client, json, os, random, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import ServerProcess, free_port  # noqa: E402

TIMEOUT_S = 900  # per request


class Server(ServerProcess):
    """A ServerProcess asked for streamed completions of token-id prompts."""

    def request(self, ids, max_tokens):
        """Returns dict(prompt, rerun, ttft_ms, total_ms)."""
        if self.kind == "rewind":
            path = "/v1/completions"
            body = {"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                    "stream": True, "stream_options": {"include_usage": True}}
        else:
            path = "/completion"
            body = {"prompt": ids, "n_predict": max_tokens, "temperature": 0, "ignore_eos": True,
                    "cache_prompt": True, "stream": True}
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT_S)
        t0 = time.time()
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"{self.kind}: HTTP {r.status}: {r.read()[:300]!r}")
        ttft, last = None, None
        usage, timings, generated = {}, {}, 0
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(f"{self.kind}: {ev['error']}")
            if self.kind == "rewind":
                if ev.get("choices"):
                    generated += 1
                    if ttft is None:
                        ttft = time.time() - t0
                if ev.get("usage"):
                    usage = ev["usage"]
            else:
                if not ev.get("stop"):
                    generated += 1
                    if ttft is None:
                        ttft = time.time() - t0
                if ev.get("timings"):
                    timings = ev["timings"]
                    usage = {"prompt_tokens": ev.get("tokens_evaluated")}
        total = time.time() - t0
        c.close()
        if self.kind == "rewind":
            if not usage:
                raise RuntimeError("rewind: no usage in the stream")
            prompt = usage["prompt_tokens"]
            rerun = prompt - usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
        else:
            if not timings:
                raise RuntimeError("llama-server: no timings in the stream")
            prompt = usage.get("prompt_tokens")
            rerun = timings["prompt_n"]
            if prompt is not None and timings.get("cache_n", 0) + rerun != prompt:
                print(f"warning: llama-server prompt_n {rerun} + cache_n {timings.get('cache_n')} != "
                      f"tokens_evaluated {prompt}", file=sys.stderr)
        if prompt != len(ids):
            raise RuntimeError(f"{self.kind}: prompt tokens {prompt}, sent {len(ids)}")
        return {"prompt": prompt, "rerun": rerun, "ttft_ms": 1000 * (ttft if ttft is not None else total),
                "total_ms": 1000 * total}


def workloads(args):
    """[(workload, step label, ids)]: the same list for every server."""
    rng = random.Random(args.seed)
    toks = lambda n: [rng.randrange(args.id_min, args.id_max) for _ in range(n)]

    def other(t):
        return args.id_min + (t - args.id_min + 1 + rng.randrange(args.id_max - args.id_min - 1)) % (
            args.id_max - args.id_min)

    steps = []
    sys_p = toks(1024)
    for i in range(4):
        steps.append(("shared-system", f"user message {i + 1}", sys_p + toks(200)))
    n = args.chat_tokens
    chat = toks(1024)
    while len(chat) < n:  # user turns and replies of 300-1200 tokens
        chat += toks(min(n - len(chat), rng.randrange(300, 1200)))
    steps.append(("long-chat", "cold", chat))
    edited = list(chat)
    at = int(0.9 * n)
    edited[at] = other(edited[at])
    steps.append(("long-chat", f"edit at {at}", edited))
    steps.append(("long-chat", "regenerate", list(edited)))
    if args.far_back:
        far = list(chat)
        at = int(0.1 * n)
        far[at] = other(far[at])
        steps.append(("far-back", f"edit at {at}", far))
    return steps


def run_all(servers, steps, args):
    """Starts every server, then sends each step to each server in turn (so a change in the
    machine's load falls on both alike); returns {kind: [result per step]}."""
    started = []
    try:
        for s in servers:
            s.start(args.startup_s)
            started.append(s)
            warm = random.Random(99)  # warm-up: scratch buffers, page faults; ids unlike the workloads'
            s.request([warm.randrange(args.id_min, args.id_max) for _ in range(64)], 2)
        out = {s.kind: [] for s in servers}
        for wl, label, ids in steps:
            for s in servers:
                r = s.request(ids, args.max_tokens)
                out[s.kind].append(r)
                print(f"  {s.kind:7} {wl:14} {label:16} prompt {r['prompt']:6}  re-run {r['rerun']:6}  "
                      f"ttft {r['ttft_ms']:9.1f} ms  total {r['total_ms']:9.1f} ms", file=sys.stderr, flush=True)
        return out
    finally:
        for s in started:
            s.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rewind", required=True, help="the rewind binary")
    ap.add_argument("--model", required=True, help="a GGUF file both servers load")
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (omit: rewind alone)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx-size", type=int, default=16384)
    ap.add_argument("--chat-tokens", type=int, default=8192)
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--far-back", action="store_true", help="also edit the long chat at 10%% of its length")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--id-min", type=int, default=1000, help="prompt token ids are drawn from [min, max)")
    ap.add_argument("--id-max", type=int, default=100000)
    ap.add_argument("--startup-s", type=float, default=300)
    ap.add_argument("--json", action="store_true", help="one JSON object per request")
    args = ap.parse_args()
    if args.chat_tokens + args.max_tokens + 16 > args.ctx_size:
        sys.exit("--ctx-size must hold --chat-tokens + --max-tokens")

    steps = workloads(args)
    servers = [Server("rewind", [args.rewind, "serve", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
                                 "--threads", str(args.threads), "--ctx-size", str(args.ctx_size)], 0)]
    if args.llama_server:
        port = free_port()
        servers.append(Server("llama", [args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port",
                                        str(port), "-t", str(args.threads), "-c", str(args.ctx_size)], port))
    print(f"# same token ids to each server, greedy, max_tokens {args.max_tokens}, each step to each server in turn")
    for s in servers:
        print(f"# {s.kind}: {' '.join(s.cmd)}")
    if not args.llama_server:
        print("# llama-server not given: rewind alone")
    try:
        results = run_all(servers, steps, args)
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    if args.json:
        for i, (wl, label, ids) in enumerate(steps):
            row = {"workload": wl, "step": label, "prompt_tokens": len(ids)}
            for k, rs in results.items():
                row[k] = rs[i]
            print(json.dumps(row))
    else:
        hdr = f"{'workload':14} {'step':16} {'prompt':>6} | {'rewind re-run':>13} {'TTFT':>9} | "
        hdr += f"{'llama re-run':>12} {'TTFT':>9} | {'llama/rewind':>12}"
        print(hdr)
        for i, (wl, label, ids) in enumerate(steps):
            rw, ll = results.get("rewind"), results.get("llama")
            line = f"{wl:14} {label:16} {len(ids):6} | "
            line += f"{rw[i]['rerun']:13} {rw[i]['ttft_ms']:7.0f}ms | " if rw else f"{'-':>13} {'-':>9} | "
            if ll:
                line += f"{ll[i]['rerun']:12} {ll[i]['ttft_ms']:7.0f}ms | "
                line += f"{ll[i]['ttft_ms'] / max(rw[i]['ttft_ms'], 1e-3):11.1f}x" if rw else f"{'-':>12}"
            else:
                line += f"{'-':>12} {'-':>9} | {'-':>12}" if args.llama_server else "llama-server not given"
            print(line)


if __name__ == "__main__":
    main()
