#!/usr/bin/env python3
"""The prefix cache's disk tier (`rewind serve --cache-dir`): what it costs and what it saves,
side by side with a server without it, on one machine in one run (loopback only).

1. Write-behind on cold prefills: --reps distinct random --tokens-token prompts (token ids through
   POST /v1/completions, greedy, 1 token), each sent once to a server with --cache-dir and once to
   one without, alternating which goes first; every request is cold (a miss) on both. The disk
   server's writer runs behind each request (the next request is sent at once, so any cost of the
   writer competing for the cores is in the figures). Reported: median request time of each and
   their ratio, and the bytes the tier wrote per prompt.
2. Restart to first hit: the disk server is stopped (SIGTERM: its queue is flushed) and started
   again on the same directory; the first prompt with one token edited at 90% of its length is
   sent at once. Reported: from the process start to the first token (start-up, index, the
   fingerprint from its cached digests, the disk reads and the re-run suffix), against the same
   on a server without --cache-dir (start-up and the whole cold prefill); the bytes read for the
   resume, the tokens re-run, and the first token of a second edit at the same point, resumed
   from RAM (the difference is what reading from disk added).

usage: bench/disk_tier_bench.py --rewind build/release/rewind [--model DIR] [--tokens 10000]
                                [--reps 3] [--threads 2] [--json]
Without --model, `rewind make-model --preset qwen3.5-mini` is made in a temporary directory.
Standard library only (python3)."""
import json, os, random, shutil, statistics, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tier_server import Server, model_and_vocab, parse_args, queue_drained  # noqa: E402


def main():
    a = parse_args(__doc__, 10000)
    work = tempfile.mkdtemp(prefix="rewind_disk_bench_")
    try:
        model, vocab = model_and_vocab(a.rewind, a.model, work)
        ctx = a.tokens + 64
        cache_dir = os.path.join(work, "cache")
        rng = random.Random(7)
        prompts = [[rng.randrange(vocab) for _ in range(a.tokens)] for _ in range(a.reps)]

        disk = Server(a.rewind, model, a.threads, ctx, ["--cache-dir", cache_dir])
        plain = Server(a.rewind, model, a.threads, ctx, [])
        disk.start()
        plain.start()
        t_disk, t_plain = [], []
        for i, p in enumerate(prompts):
            order = [(disk, t_disk), (plain, t_plain)]
            if i % 2:
                order.reverse()
            for srv, out in order:
                total, _, usage = srv.complete(p)
                assert usage["prompt_tokens_details"]["cached_tokens"] == 0, "not a cold prefill"
                out.append(total)
        # Let the writer finish before counting bytes.
        st = queue_drained(disk, "disk")
        written = st["bytes_written"] / len(prompts)
        writer_s = st["write_ms_avg"] * st["writes"] / 1e3 / len(prompts)
        disk.stop()
        plain.stop()

        edited = list(prompts[0])
        at = int(len(edited) * 0.9)
        edited[at] = (edited[at] + 1) % vocab
        # Restart on the same directory; the first request at once.
        again = Server(a.rewind, model, a.threads, ctx, ["--cache-dir", cache_dir])
        start_disk = again.start()
        _, ttft_disk, usage_disk = again.complete(edited)
        first_hit = time.time() - again.t_spawn
        st2 = again.get("/v1/cache")["disk"]
        # The same resume point again, now from RAM (another token at the edit): what the disk
        # read added to the first token.
        edited2 = list(edited)
        edited2[at] = (edited2[at] + 1) % vocab
        _, ttft_ram, usage_ram = again.complete(edited2)
        again.stop()
        cold = Server(a.rewind, model, a.threads, ctx, [])
        start_cold = cold.start()
        _, ttft_cold, _ = cold.complete(edited)
        first_cold = time.time() - cold.t_spawn
        cold.stop()

        res = {
            "tokens": a.tokens, "reps": a.reps, "threads": a.threads,
            "cold_request_s_disk": statistics.median(t_disk),
            "cold_request_s_plain": statistics.median(t_plain),
            "write_behind_ratio": statistics.median(t_disk) / statistics.median(t_plain),
            "bytes_written_per_prompt": written,
            "writer_s_per_prompt": writer_s,
            "restart_start_s": start_disk, "restart_ttft_s": ttft_disk,
            "restart_to_first_token_s": first_hit,
            "cold_start_s": start_cold, "cold_ttft_s": ttft_cold,
            "cold_to_first_token_s": first_cold,
            "restart_ratio": first_hit / first_cold,
            "resume_cached_tokens": usage_disk["prompt_tokens_details"]["cached_tokens"],
            "resume_rerun_tokens": usage_disk["prompt_tokens"] -
                                   usage_disk["prompt_tokens_details"]["cached_tokens"],
            "resume_bytes_read": st2["bytes_read"],
            "resume_load_s": st2["load_ms"] / 1e3,
            "ram_resume_ttft_s": ttft_ram,
            "ram_resume_cached_tokens": usage_ram["prompt_tokens_details"]["cached_tokens"],
            "restored_objects": st2["restored_at_start"],
        }
        if a.json:
            print(json.dumps(res, indent=1))
            return 0
        print(f"disk tier, {a.tokens}-token prompts, {a.threads} threads, {a.reps} cold prompts each")
        print(f"| measure | --cache-dir | without | ratio |")
        print(f"|---|---|---|---|")
        print(f"| cold request (prefill + 1 token), median | {res['cold_request_s_disk']:.2f} s | "
              f"{res['cold_request_s_plain']:.2f} s | {res['write_behind_ratio']:.3f} |")
        print(f"| process start to first token, edit at 90% | {first_hit:.2f} s | {first_cold:.2f} s | "
              f"{res['restart_ratio']:.3f} |")
        print(f"|   of which start-up (listening) | {start_disk:.2f} s | {start_cold:.2f} s | |")
        print(f"|   of which the request's first token | {ttft_disk:.2f} s | {ttft_cold:.2f} s | |")
        print(f"| the same resume point from RAM (a second edit there) | {ttft_ram:.2f} s | | "
              f"{ttft_disk / ttft_ram:.3f} |")
        print(f"bytes written per cold prompt: {written / 1048576:.1f} MiB "
              f"(writer thread {writer_s:.2f} s); resume after restart: "
              f"{res['resume_bytes_read'] / 1048576:.1f} MiB read, {res['resume_cached_tokens']} tokens "
              f"resumed, {res['resume_rerun_tokens']} re-run, {res['resume_load_s'] * 1e3:.0f} ms finding and "
              f"reading them; {res['restored_objects']} objects indexed")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
