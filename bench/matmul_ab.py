#!/usr/bin/env python3
"""Side-by-side runs of matmul_bench: the binaries take turns round by round with the same
arguments, so a shared host's drifting clock and bandwidth hit each alike; prints, per shape,
type and row count, each binary's fastest and median time over the rounds and their ratios to
the first binary's. The fastest run is the steadier figure on a noisy host (noise only slows).

Usage: bench/matmul_ab.py [--rounds N] --args "MATMUL_BENCH ARGS" LABEL=BINARY ...
e.g.   bench/matmul_ab.py --rounds 12 \\
         --args "--threads 1 --cpu-time --m 512 --dtype q4_k --isa amx --shape 3584x1024" \\
         before=/tmp/old/matmul_bench now=build/release/bench/matmul_bench
"""
import argparse
import shlex
import statistics
import subprocess
import sys


def run(binary, args):
    """{(shape, dtype, m): time_ms} from one matmul_bench run."""
    out = subprocess.run([binary, *shlex.split(args)], check=True, capture_output=True,
                         text=True).stdout
    cols, rows = None, {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "shape":
            cols = {name: i for i, name in enumerate(f)}
        elif cols and len(f) > cols["time_ms"] and f[cols["K"]].isdigit():
            rows[(f[cols["shape"]], f[cols["dtype"]], f[cols["M"]])] = float(f[cols["time_ms"]])
    if not rows:
        raise RuntimeError(f"no result rows from {binary} {args}")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--args", required=True, help="matmul_bench's arguments, as one string")
    ap.add_argument("configs", nargs="+", help="LABEL=BINARY")
    a = ap.parse_args()
    configs = []
    for c in a.configs:
        label, sep, binary = c.partition("=")
        if not sep or not binary:
            sys.exit(f"matmul_ab: bad configuration {c!r} (want LABEL=BINARY)")
        configs.append((label, binary))
    times = {label: {} for label, _ in configs}
    for _ in range(a.rounds):
        for label, binary in configs:
            for key, ms in run(binary, a.args).items():
                times[label].setdefault(key, []).append(ms)
    base = configs[0][0]
    print(f"ms over {a.rounds} rounds: fastest / median (ratio to {base}'s)")
    for key in times[base]:
        cells = []
        for label, _ in configs:
            xs = times[label].get(key)
            if not xs:
                cells.append(f"{label} -")
                continue
            lo, med = min(xs), statistics.median(xs)
            b = times[base][key]
            ratio = "" if label == base else f" ({lo / min(b):.3f} / {med / statistics.median(b):.3f})"
            cells.append(f"{label} {lo:.3f} / {med:.3f}{ratio}")
        print(f"{key[0]} {key[1]} m={key[2]}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
