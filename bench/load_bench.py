#!/usr/bin/env python3
"""Load benchmark for `rewind serve` (loopback only, bounded): N concurrent chat clients replay
multi-turn conversations and then edit an earlier user message and resend, against a server with
the prefix cache on and one with it off, side by side. Reports completion throughput, time to
first token p50/p95 and the cache's hit figures.

usage: bench/load_bench.py --binary build/release/rewind --model DIR [--clients 4] [--turns 3]
                           [--max-tokens 16] [--threads 2]
Standard library only (python3)."""
import argparse, http.client, json, random, re, statistics, subprocess, sys, threading, time

WORDS = ("the sea light keeper storm ship harbour night lamp rock wave wind island coast "
         "winter north bell fog tide stone tower signal sailor voyage rope deck cold").split()


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def start_server(binary, model, extra, threads):
    p = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", str(threads),
                          "--parallel", "8"] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
        if p.poll() is not None:
            break
    p.kill()
    sys.exit("server did not start")


def chat_stream(port, messages, max_tokens):
    """Returns (ttft_s, completion_tokens, cached_tokens, reply_text)."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "ignore_eos": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    ttft, text, usage = None, [], {}
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            piece = ch.get("delta", {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.time() - t0
                text.append(piece)
        if ev.get("usage"):
            usage = ev["usage"]
    c.close()
    return (ttft if ttft is not None else time.time() - t0, usage.get("completion_tokens", 0),
            usage.get("prompt_tokens_details", {}).get("cached_tokens", 0), "".join(text))


def client(port, idx, args, system, out):
    rng = random.Random(1000 + idx)
    messages = [{"role": "system", "content": system}]
    for _ in range(args.turns):
        messages.append({"role": "user", "content": " ".join(sentence(rng, 12) for _ in range(4))})
        ttft, toks, cached, reply = chat_stream(port, messages, args.max_tokens)
        out.append((ttft, toks, cached))
        messages.append({"role": "assistant", "content": reply})
    # Edit the second user message (or the first) and resend the conversation up to it.
    k = 3 if len(messages) > 3 else 1
    edited = [dict(m) for m in messages[:k + 1]]
    edited[k]["content"] = edited[k]["content"].replace(".", "!", 1) + " " + sentence(rng, 6)
    out.append(chat_stream(port, edited, args.max_tokens)[:3])


def run(binary, model, extra, args, system):
    proc, port = start_server(binary, model, extra, args.threads)
    try:
        results, threads = [], []
        t0 = time.time()
        for i in range(args.clients):
            th = threading.Thread(target=client, args=(port, i, args, system, results))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        wall = time.time() - t0
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/cache")
        cache = json.loads(c.getresponse().read())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ttfts = sorted(r[0] for r in results)
    toks = sum(r[1] for r in results)
    return {"requests": len(results), "wall_s": wall, "tok_s": toks / wall,
            "ttft_p50_ms": 1000 * statistics.median(ttfts),
            "ttft_p95_ms": 1000 * ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))],
            "cached_tokens": sum(r[2] for r in results), "cache": cache}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    rng = random.Random(7)
    system = " ".join(sentence(rng, 14) for _ in range(20))  # shared by every client
    rows = []
    for name, extra in (("cache on", []), ("cache off", ["--no-cache"])):
        r = run(args.binary, args.model, extra, args, system)
        rows.append((name, r))
    print(f"{args.clients} clients x ({args.turns} turns + 1 edit), max_tokens {args.max_tokens}, greedy")
    print(f"{'':10} {'requests':>8} {'tok/s':>8} {'TTFT p50':>10} {'TTFT p95':>10} {'cached tok':>10}  hits")
    for name, r in rows:
        h = r["cache"].get("hits", {})
        hits = (f"exact {h.get('exact', 0)} ext {h.get('extension', 0)} ckpt {h.get('checkpoint', 0)} "
                f"miss {h.get('misses', 0)}") if r["cache"].get("enabled") else "-"
        print(f"{name:10} {r['requests']:>8} {r['tok_s']:>8.1f} {r['ttft_p50_ms']:>8.0f}ms {r['ttft_p95_ms']:>8.0f}ms "
              f"{r['cached_tokens']:>10}  {hits}")


if __name__ == "__main__":
    main()
