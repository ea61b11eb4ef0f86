#!/usr/bin/env python3
"""`rewind run` with 1 and 2 threads, with no load of its own ("idle") and beside a competing busy
loop pinned to one core ("busy"), side by side: prints per binary and model the median decode and prefill rates over the
rounds and the 2-thread / 1-thread ratios. The configurations alternate inside each round, so a
shared host's drift hits them alike; the busy loop (started and killed here, `taskset -c CPU`)
runs only during the "busy" runs. A benchmark: nothing is asserted.

Usage: bench/threads_bench.py [--rounds N] [-n TOKENS] [--prompt TEXT] [--cpu CPU]
                              [--model DIR|FILE.gguf ...] [LABEL=BINARY ...]
e.g.   bench/threads_bench.py --rounds 7 before=OLD/rewind now=build/release/rewind
Without --model the built-in model runs; "builtin" names it among several --model values.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

BUSY_LOOP = "while True: pass"


def run(binary, model, threads, n, prompt):
    cmd = [binary, "run", "--json", "--ignore-eos", "-n", str(n), "-p", prompt, "-t", str(threads)]
    if model != "builtin":
        cmd += ["--model", model]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in reversed(out.splitlines()):
        if line.strip().startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line from {' '.join(cmd)}")


class BusyLoop:
    """A Python busy loop pinned to one CPU, for the duration of a `with` block."""

    def __init__(self, cpu):
        self.cpu = cpu
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(["taskset", "-c", str(self.cpu), sys.executable, "-c", BUSY_LOOP])
        time.sleep(0.2)  # let it take its core
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def prefill_ms(j):
    if "prefill_ms" in j:
        return j["prefill_ms"]
    return 1e3 * j["prompt_tokens"] / j["prefill_tok_s"] if j["prefill_tok_s"] > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=200, help="tokens to generate (default 200)")
    ap.add_argument("--prompt", default="In the beginning God created the heaven and the earth. " * 8,
                    help="the prompt (default: about 100 tokens)")
    ap.add_argument("--cpu", type=int, default=(os.cpu_count() or 1) - 1,
                    help="the CPU the busy loop is pinned to (default the last)")
    ap.add_argument("--model", action="append", help="model(s) to run (default: the built-in one)")
    ap.add_argument("binaries", nargs="*", help="LABEL=BINARY (default now=build/release/rewind)")
    a = ap.parse_args()
    bins = []
    for b in a.binaries or ["now=build/release/rewind"]:
        label, sep, path = b.partition("=")
        if not sep or not path:
            sys.exit(f"threads_bench: bad binary {b!r} (want LABEL=BINARY)")
        bins.append((label, path))
    models = a.model or ["builtin"]
    loads = ["idle", "busy"]
    res = {}
    for r in range(a.rounds):
        for load in loads:
            ctx = BusyLoop(a.cpu) if load == "busy" else None
            if ctx:
                ctx.__enter__()
            try:
                for model in models:
                    for label, binary in bins:
                        for t in (1, 2):
                            j = run(binary, model, t, a.n, a.prompt)
                            res.setdefault((model, label, load, t), []).append(j)
                            print(f"round {r + 1} {model} {label} {load} {t}t: decode "
                                  f"{j['decode_tok_s']:.1f} tok/s, prefill {j['prefill_tok_s']:.1f} tok/s "
                                  f"({prefill_ms(j):.2f} ms for {j['prompt_tokens']} tokens)"
                                  + (f", {j['steps_alone']} steps alone" if t > 1 and "steps_alone" in j else ""),
                                  flush=True)
            finally:
                if ctx:
                    ctx.__exit__()

    med = lambda xs: statistics.median(xs)
    print(f"\nmedians over {a.rounds} rounds; busy = a busy loop pinned to CPU {a.cpu}; "
          f"decode counts the tokens after the first; prefill time is TTFT (it includes the first token)")
    hdr = f"{'model':<12} {'binary':<8} {'load':<5} {'decode 1t':>10} {'decode 2t':>10} {'2t/1t':>6} " \
          f"{'prefill 1t':>11} {'prefill 2t':>11} {'2t/1t':>6} {'ms 1t':>7} {'ms 2t':>7} {'alone 2t':>8}"
    print(hdr)
    for model in models:
        for label, _ in bins:
            for load in loads:
                d = {t: med([j["decode_tok_s"] for j in res[(model, label, load, t)]]) for t in (1, 2)}
                p = {t: med([j["prefill_tok_s"] for j in res[(model, label, load, t)]]) for t in (1, 2)}
                ms = {t: med([prefill_ms(j) for j in res[(model, label, load, t)]]) for t in (1, 2)}
                # Steps the 2-thread run took on one thread (too small, or measured faster so).
                alone = [j["steps_alone"] for j in res[(model, label, load, 2)] if "steps_alone" in j]
                alone_s = f"{med(alone):.0f}" if alone else "-"
                print(f"{os.path.basename(model.rstrip('/')):<12} {label:<8} {load:<5} {d[1]:>10.1f} {d[2]:>10.1f} "
                      f"{d[2] / d[1]:>6.2f} {p[1]:>11.1f} {p[2]:>11.1f} {p[2] / p[1]:>6.2f} {ms[1]:>7.2f} {ms[2]:>7.2f} "
                      f"{alone_s:>8}")


if __name__ == "__main__":
    main()
