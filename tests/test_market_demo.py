#!/usr/bin/env python3
"""The market demo end to end (the README's main job, shortened): demos/market/run.sh starts
rilld with the default model, market-demo streams two slow synthetic markets for 16 s (light enough that an ASan build
sharing two cores with another test still has idle time for the standing refreshes), and
the summary must show both sessions with ticks ingested, standing answers pushed, questions
answered (each session's TTFT p50 and max agreeing with the questions' own lines: core's
histogram reports the nearest-rank sample within 1/32 above it, the max exactly), and the
re-prefill comparison, and every printed answer checked against the ticks its version held
(a verdict line under it, the accuracy table adding up to them); rilld must stop cleanly (its
log says so).

In a sanitizer build (RILL_SANITIZE in BUILD's CMakeCache.txt) the model runs ~7x slower and the
engine is busy the whole run on a slow 2-core machine, so a refresh rarely finishes before the
next tick makes it stale (abandoned, as it should be): there the run is lighter and the check is
that standing refreshes ran (tokens at STANDING class), not that one was pushed.

Before the run: demos/market/run.sh's choice of model (RILL_MODEL, the model cache).

usage: test_market_demo.py SRC BUILD   (exit 77: the default model is missing)
"""
import math
import os
import re
import subprocess
import sys
import tempfile


def check_model_choice(src, env):
    """RILL_MODEL naming no file is refused before anything starts; a better model in the cache
    is the one run.sh names and hands to rilld (a file that is no GGUF here: rilld refuses it,
    and run.sh fails with rilld's message)."""
    run = os.path.join(src, "demos", "market", "run.sh")
    p = subprocess.run([run], cwd=src, env=dict(env, RILL_MODEL="/nonexistent.gguf"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "RILL_MODEL=/nonexistent.gguf: no such file" in p.stderr, p
    # RILL_MODEL=default is the default model (rill's own RILL_MODEL is a path: not passed on)
    cache = tempfile.mkdtemp(prefix="rill-test-cache.")
    p = subprocess.run([run, "--duration", "1", "--sessions", "1"], cwd=src,
                       env=dict(env, RILL_MODEL="default", RILL_CACHE=cache), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert re.search(r"^market demo: model SmolLM2-135M-Instruct \(the default; RILL_MODEL=default",
                     p.stdout, re.M), p.stdout[:600]
    cache = tempfile.mkdtemp(prefix="rill-test-cache.")
    os.makedirs(os.path.join(cache, "models"))
    fake = os.path.join(cache, "models", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    with open(fake, "w") as f:
        f.write("not a GGUF\n")
    p = subprocess.run([run], cwd=src, env=dict(env, RILL_CACHE=cache), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0, p
    assert re.search(r"^market demo: model Qwen2\.5-Coder-1\.5B-Instruct \(" + re.escape(fake),
                     p.stdout, re.M), p.stdout
    assert fake in p.stderr, p.stderr  # rilld was given the file, and said what is wrong with it


def main():
    src, build = sys.argv[1], sys.argv[2]
    if not os.path.exists(os.path.join(src, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")):
        print("SKIP: the default model is missing (scripts/setup.sh fetches it)")
        return 77
    # The demo picks its model (issue 23): an empty model cache means the default model, and
    # the line naming it says how to get the better one.
    empty_cache = tempfile.mkdtemp(prefix="rill-test-cache.")
    env = dict(os.environ, RILL_BUILD=build, RILL_CACHE=empty_cache)
    env.pop("RILL_MODEL", None)
    env.pop("RILL_FETCH_MODEL", None)
    check_model_choice(src, env)
    sanitized = False
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("RILL_SANITIZE:"):
                sanitized = line.split("=", 1)[1].strip() != ""
    load = ["--duration", "24", "--rate", "0.2", "--ask-every", "10"] if sanitized else \
        ["--duration", "16", "--rate", "0.5", "--ask-every", "6"]
    p = subprocess.run([os.path.join(src, "demos", "market", "run.sh"), "--sessions", "2", *load],
                       cwd=src, env=env, capture_output=True, text=True, timeout=240)
    out = p.stdout
    print(out[-3000:])
    assert re.search(r"^market demo: model SmolLM2-135M-Instruct \(the default; the better "
                     r"Qwen2\.5-Coder-1\.5B-Instruct is not in the model cache: "
                     r"RILL_FETCH_MODEL=1 fetches it", out, re.M), out[:600]
    print(p.stderr[-2000:], file=sys.stderr)
    assert p.returncode == 0, f"run.sh exited {p.returncode}"
    rows = re.findall(r"^(market-\d)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+\S+"
                      r"\s+([\d.]+)ms\s+([\d.]+)ms\s*$", out, re.M)
    assert [r[0] for r in rows] == ["market-1", "market-2"], rows
    asks = {}
    for name, ms in re.findall(r"^\[\s*[\d.]+s\] (market-\d)\s+ask\s+ttft\s+([\d.]+) ms", out, re.M):
        asks.setdefault(name, []).append(float(ms))
    for name, ticks, lines, version, context, pushes, p50, mx in rows:
        assert int(ticks) > 0 and int(lines) > 0 and int(context) > 0, (name, ticks, context)
        assert int(version) > 0, (name, version)
        # Both columns and the ask lines are printed to 0.1 ms.
        xs, p50, mx = sorted(asks.get(name, [])), float(p50), float(mx)
        if not xs:
            assert p50 == 0 and mx == 0, (name, p50, mx)
            continue
        want = xs[max(1, math.ceil(0.5 * len(xs))) - 1]
        assert want - 0.1 <= p50 <= want * (1 + 1 / 32) + 0.11, (name, p50, xs)
        assert abs(mx - xs[-1]) <= 0.1 + 1e-9 and p50 <= mx, (name, mx, xs)
    pushes = sum(int(r[5]) for r in rows)
    if sanitized:
        standing = re.search(r"^engine: .*\bstanding (\d+);", out, re.M)
        assert standing and (pushes > 0 or int(standing.group(1)) > 0), "no standing refresh ran"
    else:
        assert pushes > 0, "no standing answer was pushed"
    assert re.search(r"\bask\s+ttft", out), "no interactive question was answered"
    # Issue 23's check: every printed answer (asks and pushes) is scored, with a line under it,
    # and the accuracy table adds up to those lines.
    n_answers = len(re.findall(r"^\[\s*[\d.]+s\] market-\d\s+(?:ask|push)\s", out, re.M))
    verdicts = re.findall(r"^\s+(right|wrong|unscored) \(true at v\d+: ", out, re.M)
    assert len(verdicts) == n_answers, (len(verdicts), n_answers)
    assert "accuracy (each answer's first line against the ticks" in out, out
    assert "the check holds" not in out, out  # the replayed governor wrote rilld's lines
    table = re.findall(r"^(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+%|-)\s*$", out, re.M)
    kinds = {k: tuple(map(int, r)) for k, *r, _ in table}
    assert "overall" in kinds, table
    n, scored, right = kinds.pop("overall")
    assert n == n_answers and scored == verdicts.count("right") + verdicts.count("wrong"), table
    assert right == verdicts.count("right"), (table, verdicts)
    assert set(kinds) <= {"moved_last", "above_first", "last_price", "largest_trade",
                          "buys_sells", "quote"} and kinds, kinds
    assert [sum(v[i] for v in kinds.values()) for i in range(3)] == [n, scored, right], table
    assert re.search(r"re-prefilling the same data .* \((\d+)x\)", out), "no re-prefill line"
    state = re.search(r"are in (\S+)", out).group(1)
    log = open(os.path.join(state, "rilld.log")).read()
    assert "rilld: stopped" in log, log
    print("ok: market demo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
