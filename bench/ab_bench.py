#!/usr/bin/env python3
"""Side-by-side runs of `rewind bench`: configurations alternate round by round, so a shared
host's drifting bandwidth and clock hit every configuration alike; prints, per configuration,
the median and range of prefill and decode speed and of their fractions of the machine limits
that each run measured itself.

Usage: bench/ab_bench.py [--rounds N] [--bench-args "-p 512 -n 64 -t 2"]
                         LABEL=BINARY:MODEL[:EXTRA ARGS] ...
e.g.   bench/ab_bench.py --rounds 3 before=/tmp/old/rewind:models/q8.gguf \\
                         now=build/release/rewind:models/q8.gguf
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys


def run(binary, model, bench_args, extra):
    cmd = [binary, "bench", "--model", model, "--json", *shlex.split(bench_args), *shlex.split(extra)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON line from {' '.join(cmd)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bench-args", default="-p 512 -n 64 -t 2")
    ap.add_argument("configs", nargs="+", help="LABEL=BINARY:MODEL[:EXTRA ARGS]")
    a = ap.parse_args()
    configs = []
    for c in a.configs:
        label, sep, rest = c.partition("=")
        parts = rest.split(":", 2)
        if not sep or len(parts) < 2:
            sys.exit(f"ab_bench: bad configuration {c!r} (want LABEL=BINARY:MODEL[:EXTRA ARGS])")
        configs.append((label, parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    results = {label: [] for label, *_ in configs}
    for r in range(a.rounds):
        for label, binary, model, extra in configs:
            j = run(binary, model, a.bench_args, extra)
            results[label].append(j)
            first = f" (first run {j['prefill_first_tok_s']:.1f})" if "prefill_first_tok_s" in j else ""
            print(f"round {r + 1} {label}: prefill {j['prefill_tok_s']:.1f} tok/s{first} "
                  f"({100 * j['prefill_fraction_of_peak']:.1f}% of {j['prefill_peak']} peak), decode "
                  f"{j['decode_tok_s']:.2f} tok/s ({100 * j['decode_fraction_of_bound']:.1f}% of bound, "
                  f"bandwidth {j['bandwidth_gb_s']:.1f} GB/s)", flush=True)

    def span(xs, scale=1.0, fmt="{:.1f}"):
        xs = [x * scale for x in xs]
        return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"

    print("\nconfiguration: median [min-max] over rounds")
    for label, *_ in configs:
        js = results[label]
        # Builds whose bench times one prefill report no first run apart (their one prefill is it).
        first = ""
        if all("prefill_first_tok_s" in j for j in js):
            first = f" (first run {span([j['prefill_first_tok_s'] for j in js])})"
        # Builds from before the paired probes report only the bound of the passes before and
        # after the run (then under decode_fraction_of_bound).
        paired = all("decode_fraction_of_run_bound" in j for j in js)
        run_bound = [j["decode_fraction_of_run_bound"] if "decode_fraction_of_run_bound" in j
                     else j["decode_fraction_of_bound"] for j in js]
        best = [j.get("decode_best_step_fraction_of_run_bound",
                      j.get("decode_best_step_fraction_of_bound", 0.0)) for j in js]
        probed = (f"{span([j['decode_fraction_of_bound'] for j in js], 100)}% of bound, each step "
                  f"against a probe after it; " if paired else "")
        print(f"{label}: prefill {span([j['prefill_tok_s'] for j in js])} tok/s{first} = "
              f"{span([j['prefill_fraction_of_peak'] for j in js], 100)}% of {js[0]['prefill_peak']} peak; "
              f"decode {span([j['decode_tok_s'] for j in js], fmt='{:.2f}')} tok/s = {probed}"
              f"{span(run_bound, 100)}% of the bandwidth before and after the run "
              f"(median step {span([j['decode_median_step_tok_s'] * f / j['decode_tok_s'] for j, f in zip(js, run_bound)], 100)}%, "
              f"fastest step {span(best, 100)}%)")


if __name__ == "__main__":
    main()
