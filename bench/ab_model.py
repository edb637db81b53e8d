#!/usr/bin/env python3
"""Two rill builds side by side: `rill bench model` of build A and build B, paired.

For a change to rill itself (a kernel, a task split) on a shared, noisy machine, where one
run of each build can differ by 30% from drift alone. The builds run alternately (A B, then
B A, ...) for --pairs rounds, each a fresh process with the same `bench model` arguments; for
each figure (pp and tg tokens/s) it prints the median of each build and the median of the
per-round ratios B / A, which is the figure to quote (drift that hits one round hits both of
its runs). Run it once with the same binary as A and B to see the noise floor of the moment.

Usage: bench/ab_model.py A_RILL B_RILL [--pairs 8] -- BENCH_MODEL_ARGS...
e.g.   bench/ab_model.py /tmp/rill_before build/cli/rill --pairs 8 -- \\
           --attn flash -p 48 -n 32 -d 4048 -t 2 -r 3
Prints one line per figure and one JSON line with every round's values.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(rill, args):
    try:
        proc = subprocess.run([rill, "bench", "model"] + args, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"ab_model: cannot run {rill}: {e.strerror}")
    if proc.returncode != 0:
        sys.exit(f"ab_model: {rill} bench model failed ({proc.returncode}): {proc.stderr.strip()}")
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit(f"ab_model: {rill} bench model printed no JSON line")
    j = json.loads(lines[-1])
    return {k: j[k] for k in ("pp_tok_s", "tg_tok_s") if j.get(k)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="rill binary A (the baseline)")
    ap.add_argument("b", help="rill binary B")
    ap.add_argument("--pairs", type=int, default=8, help="rounds of A and B (default 8)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    o = ap.parse_args(argv[:cut])
    args = argv[cut + 1:]  # `rill bench model` arguments, after --
    if o.pairs < 1:
        sys.exit("ab_model: --pairs must be at least 1")
    rounds = []
    for i in range(o.pairs):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        r = {}
        for which in order:
            r[which] = run(o.a if which == "a" else o.b, args)
        rounds.append(r)
    for key in ("pp_tok_s", "tg_tok_s"):
        pairs = [(r["a"][key], r["b"][key]) for r in rounds if key in r["a"] and key in r["b"]]
        if not pairs:
            continue
        ratios = sorted(b / a for a, b in pairs)
        print(f"{key}: A median {statistics.median(p[0] for p in pairs):.1f}, "
              f"B median {statistics.median(p[1] for p in pairs):.1f}, "
              f"B/A paired median {statistics.median(ratios):.3f} "
              f"(rounds: {' '.join(f'{x:.2f}' for x in ratios)})")
    print(json.dumps({"a": o.a, "b": o.b, "args": args, "rounds": rounds}))


if __name__ == "__main__":
    main()
