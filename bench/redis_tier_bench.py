#!/usr/bin/env python3
"""The shared tier (`rewind serve --cache-redis`): the time to first token of an edited turn on a
fresh replica with the shared tier against one without, side by side on one machine in one run
(loopback only; the script starts its own redis-server on a free port).

Each rep: a new random --tokens-token prompt (token ids through POST /v1/completions, greedy, 1
token) is served by replica A (--cache-redis), which publishes its pages and checkpoints; then the
prompt with one token edited at 90% of its length goes to a fresh replica B (--cache-redis, empty
RAM) and to a fresh replica C without the shared tier, alternating which goes first. Reported:
median TTFT of B and C and their ratio, the tokens B resumed and re-ran, the bytes B read from Redis
for the resume (and the time its lookup spent finding and reading them), the bytes A published per
prompt.

usage: bench/redis_tier_bench.py --rewind build/release/rewind [--model DIR] [--tokens 4000]
                                 [--reps 3] [--threads 2] [--json]
Without --model, `rewind make-model --preset qwen3.5-mini` is made in a temporary directory.
Needs redis-server. Standard library only (python3)."""
import json, os, random, shutil, socket, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import free_port  # noqa: E402
from tier_server import Server, model_and_vocab, parse_args, queue_drained  # noqa: E402


def main():
    a = parse_args(__doc__, 4000)
    work = tempfile.mkdtemp(prefix="rewind_redis_bench_")
    redis = None
    try:
        model, vocab = model_and_vocab(a.rewind, a.model, work)
        ctx = a.tokens + 64
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", work],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        shared = ["--cache-redis", f"redis://127.0.0.1:{port}"]
        rng = random.Random(11)
        ttft_b, ttft_c, cached, rerun, read, load, written = [], [], [], [], [], [], []
        for i in range(a.reps):
            prompt = [rng.randrange(vocab) for _ in range(a.tokens)]
            edited = list(prompt)
            at = int(len(edited) * 0.9)
            edited[at] = (edited[at] + 1) % vocab
            A = Server(a.rewind, model, a.threads, ctx, shared)
            A.start()
            A.complete(prompt)
            st = queue_drained(A, "redis")
            written.append(st["bytes_written"])
            A.stop()
            B = Server(a.rewind, model, a.threads, ctx, shared)
            C = Server(a.rewind, model, a.threads, ctx, [])
            B.start()
            C.start()
            order = [(B, ttft_b), (C, ttft_c)]
            if i % 2:
                order.reverse()
            for srv, out in order:
                _, ttft, usage = srv.complete(edited)
                out.append(ttft)
                if srv is B:
                    cached.append(usage["prompt_tokens_details"]["cached_tokens"])
                    rerun.append(usage["prompt_tokens"] - cached[-1])
            c = B.get("/v1/cache")
            read.append(c["redis"]["bytes_read"])
            load.append(c["tiers"]["load_ms"])
            B.stop()
            C.stop()
        res = {
            "tokens": a.tokens, "reps": a.reps, "threads": a.threads,
            "ttft_s_shared": statistics.median(ttft_b), "ttft_s_without": statistics.median(ttft_c),
            "ratio": statistics.median(ttft_b) / statistics.median(ttft_c),
            "resumed_tokens": statistics.median(cached), "rerun_tokens": statistics.median(rerun),
            "bytes_read_per_resume": statistics.median(read),
            "lookup_ms_per_resume": statistics.median(load),
            "bytes_published_per_prompt": statistics.median(written),
        }
        if a.json:
            print(json.dumps(res, indent=1))
            return 0
        print(f"shared tier, {a.tokens}-token prompts edited at 90%, {a.threads} threads, "
              f"{a.reps} reps (medians)")
        print("| measure | fresh replica with --cache-redis | fresh replica without | ratio |")
        print("|---|---|---|---|")
        print(f"| time to first token of the edited prompt | {res['ttft_s_shared']:.3f} s | "
              f"{res['ttft_s_without']:.3f} s | {res['ratio']:.3f} |")
        print(f"| prompt tokens resumed / re-run | {res['resumed_tokens']} / "
              f"{res['rerun_tokens']} | 0 / {a.tokens} | |")
        print(f"bytes read from Redis per resume: {res['bytes_read_per_resume'] / 1048576:.2f} MiB "
              f"(lookup: {res['lookup_ms_per_resume']:.0f} ms finding and reading them); "
              f"published per {a.tokens}-token prompt: "
              f"{res['bytes_published_per_prompt'] / 1048576:.2f} MiB")
        return 0
    finally:
        if redis:
            redis.kill()
            redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
