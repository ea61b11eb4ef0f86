#!/usr/bin/env python3
"""`rewind bench` against llama.cpp's `llama-bench` on the same GGUF files, side by side.

For each round and file both programs run one after the other (the order alternates by round,
so a shared host's drift hits them alike); prints per file the prefill and decode tok/s of each
program per round and the median of the per-round ratios. A benchmark: nothing is asserted.

Usage: bench/vs_llama.py --llama-bench PATH [--rewind PATH] [--rounds N] [-p N] [-n N] [-t N]
                         FILE.gguf [FILE.gguf ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_json(cmd, timeout):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def rewind_rates(args, path):
    d = run_json([args.rewind, "bench", "-m", path, "-p", str(args.p), "-n", str(args.n), "-t",
                  str(args.t), "--prefill-runs", str(args.reps), "--json"], args.timeout)
    return d["prefill_tok_s"], d["decode_tok_s"]


def llama_rates(args, path):
    rows = run_json([args.llama_bench, "-m", path, "-p", str(args.p), "-n", str(args.n), "-t",
                     str(args.t), "-r", str(args.reps), "-o", "json"], args.timeout)
    pre = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    dec = next(r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return pre, dec


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rewind", default="build/release/rewind")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-p", type=int, default=512, help="prompt tokens")
    ap.add_argument("-n", type=int, default=64, help="decode tokens")
    ap.add_argument("-t", type=int, default=2, help="threads, both programs")
    ap.add_argument("--reps", type=int, default=2,
                    help="prefill runs (rewind) / repetitions (llama-bench) per measurement")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per program run")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    for f in args.files:
        if not os.path.isfile(f):
            sys.exit(f"no such file: {f}")

    res = {f: {"rewind": [], "llama": []} for f in args.files}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        order = [("rewind", rewind_rates), ("llama", llama_rates)]
        if r % 2:
            order.reverse()
        for f in args.files:
            for name, fn in order:
                pre, dec = fn(args, f)
                res[f][name].append((pre, dec))
                print(f"round {r + 1} {os.path.basename(f)} {name}: prefill {pre:.1f} tok/s, "
                      f"decode {dec:.2f} tok/s", flush=True)
                load.append(os.getloadavg()[0])

    print(f"\n{args.rounds} rounds, -p {args.p} -n {args.n} -t {args.t}; "
          f"1-minute load average {min(load):.1f}-{max(load):.1f}")
    print("| file | prefill llama.cpp | prefill rewind | rewind / llama.cpp | decode llama.cpp "
          "| decode rewind | rewind / llama.cpp |")
    print("|---|---|---|---|---|---|---|")
    for f in args.files:
        lw, rw = res[f]["llama"], res[f]["rewind"]
        cells = []
        for k in (0, 1):
            ratio = statistics.median(b[k] / a[k] for a, b in zip(lw, rw))
            fmt = "{:.1f}" if k == 0 else "{:.2f}"
            cells += [" / ".join(fmt.format(a[k]) for a in lw),
                      " / ".join(fmt.format(b[k]) for b in rw), f"{ratio:.2f}x"]
        print(f"| {os.path.basename(f)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
