#!/usr/bin/env python3
"""The `rill` command as users and outside checks drive it (its interface is kept stable):
exit codes, --help, tokenize against llama.cpp's reference tokenizations, logits against
llama.cpp's reference logits, generate, bench model, and clear errors on bad input.

Usage: test_cli.py RILL_BINARY SOURCE_DIR SHARED_DIR. Exits 77 (skip) when the tiny test models
are absent. Prints 'N passed, N failed' last.
"""
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

RILL, SRC, SHARED = sys.argv[1], sys.argv[2], sys.argv[3]
TINY = os.path.join(SRC, "tests", "data", "models")
REF = os.path.join(SRC, "tests", "data", "ref")
results = []


def run(*args, ok=(0,)):
    p = subprocess.run([RILL, *args], capture_output=True, text=True, timeout=300)
    if p.returncode not in ok:
        raise AssertionError(f"rill {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p


def check(name, fn):
    try:
        fn()
        results.append((name, None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, e))


def t_help_and_usage():
    assert "commands:" in run("--help").stdout
    assert run("nope", ok=(2,)).stderr.startswith("rill: unknown command")
    assert run(ok=(2,)).returncode == 2
    for cmd in ("generate", "tokenize", "logits"):
        out = run(cmd, "--help").stdout
        assert out.startswith("usage: rill " + cmd), out
        assert "--model" in out
    assert "--n-prompt" in run("bench", "model", "--help").stdout


def t_bad_input():
    e = run("generate", ok=(2,)).stderr
    assert "--prompt is required" in e, e
    e = run("logits", "--tokens", "1 x", ok=(2,)).stderr
    assert "not a token id" in e, e
    e = run("generate", "--prompt", "a", "--top-p", "2", ok=(2,)).stderr
    assert "--top-p must be between" in e, e
    e = run("generate", "--prompt", "a", "--bogus", ok=(2,)).stderr
    assert "unknown option" in e, e
    e = run("logits", "--model", "/nonexistent.gguf", "--tokens", "1", ok=(1,)).stderr
    assert "cannot load /nonexistent.gguf" in e, e
    with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
        f.write(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8)
        f.flush()
        e = run("tokenize", "--model", f.name, "--prompt", "a", ok=(1,)).stderr
        assert f.name in e and "rill tokenize" in e, e
    m = os.path.join(TINY, "rill-tiny-llama-F32.gguf")
    e = run("logits", "--model", m, "--tokens", "999999", ok=(1,)).stderr
    assert "vocabulary" in e, e


def t_tokenize_matches_llama_cpp():
    """The shared llama.cpp cases through the command line (no BOS, special text as text)."""
    for vocab in ("llama-spm", "qwen2"):
        base = os.path.join(SHARED, "testdata", "tokenizer", f"ggml-vocab-{vocab}.gguf")
        texts = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
        wants = open(base + ".out", encoding="utf-8").read().split("\n")
        n = 0
        for text, want in zip(texts, wants):
            if not text or "\x00" in text:
                continue  # argv cannot carry NUL (nor an empty --prompt that means anything)
            got = run("tokenize", "--model", base, "--prompt=" + text, "--ids", "--no-bos",
                      "--no-parse-special").stdout.strip()
            ids = [int(x) for x in got.strip("[]").split(",") if x.strip()]
            assert ids == [int(x) for x in want.split()], (vocab, text, ids, want)
            n += 1
        assert n >= 40, n


def read_ref(model, tsv="logits.tsv", prefix=""):
    for line in open(os.path.join(REF, tsv)):
        if line.startswith("#"):
            continue
        f = line.rstrip("\n").split("\t")
        if f[4] == model and f[6] == "all" and f[0].startswith(prefix):
            raw = open(os.path.join(REF, f[0]), "rb")
            raw.seek(int(f[1]))
            rows, nv = int(f[2]), int(f[3])
            vals = struct.unpack(f"<{rows * nv}f", raw.read(rows * nv * 4))
            return f[7], rows, nv, vals
    raise AssertionError("no reference for " + model)


def t_logits_matches_llama_cpp():
    model = "rill-tiny-qwen2-F32.gguf"
    tokens, rows, nv, want = read_ref(model)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.f32")
        run("logits", "--model", os.path.join(TINY, model), "--tokens", tokens, "--all",
            "--kv-type", "f32", "--out", out, "--threads", "2")
        data = open(out, "rb").read()
        assert len(data) == rows * nv * 4, len(data)
        got = struct.unpack(f"<{rows * nv}f", data)
    scale = max(abs(x) for x in want)
    err = max(abs(a - b) for a, b in zip(got, want))
    assert err <= 1e-4 * scale, (err, scale)
    # Text output: the last row only, n_vocab numbers on one line.
    txt = run("logits", "--model", os.path.join(TINY, model), "--tokens", tokens,
              "--kv-type", "f32").stdout.splitlines()
    assert len(txt) == 1 and len(txt[0].split()) == nv
    last = [float(x) for x in txt[0].split()]
    assert max(abs(a - b) for a, b in zip(last, want[-nv:])) <= 1e-4 * scale


def t_logits_flash_attention():
    # --attn flash with an F16 cache against llama.cpp's flash attention (tests/data/ref/flash/;
    # tests/test_forward.c has the measured differences: 1.7e-3 of the scale at most here).
    model = "rill-tiny-qwen2-F32.gguf"
    tokens, rows, nv, want = read_ref(model, "flash/logits.tsv")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l.f32")
        run("logits", "--model", os.path.join(TINY, model), "--tokens", tokens, "--all",
            "--kv-type", "f16", "--attn", "flash", "--out", out, "--threads", "2")
        got = struct.unpack(f"<{rows * nv}f", open(out, "rb").read())
    scale = max(abs(x) for x in want)
    err = max(abs(a - b) for a, b in zip(got, want))
    assert err <= 5e-3 * scale, (err, scale)
    e = run("logits", "--model", os.path.join(TINY, model), "--tokens", "1", "--attn", "fast",
            ok=(1,)).stderr
    assert "--attn must be exact or flash" in e, e
    assert "--attn" in run("generate", "--help").stdout


def t_logits_quantized_cache():
    # --cache-type-k / --cache-type-v (--kv-type sets both) against llama.cpp with the same cache
    # types and flash attention (tests/data/ref/kvquant/, tools/ref_kvquant.py; the bounds and
    # the measured differences are in tests/test_forward.c, tiny_kvquant_matches_llama_cpp)
    model = "rill-tiny-qwen2-F32.gguf"
    for k, v, tol in (("q8_0", "q8_0", 3e-3), ("q8_0", "f16", 2.5e-2), ("f16", "q4_0", 3e-3)):
        tokens, rows, nv, want = read_ref(model, "kvquant/logits.tsv", f"kvquant/{k}-{v}-")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "l.f32")
            run("logits", "--model", os.path.join(TINY, model), "--tokens", tokens, "--all",
                "--cache-type-k", k, "--cache-type-v", v, "--attn", "flash", "--out", out,
                "--threads", "2")
            got = struct.unpack(f"<{rows * nv}f", open(out, "rb").read())
            if k == v:  # --kv-type names both parts
                run("logits", "--model", os.path.join(TINY, model), "--tokens", tokens, "--all",
                    "--kv-type", k, "--attn", "flash", "--out", out, "--threads", "2")
                assert struct.unpack(f"<{rows * nv}f", open(out, "rb").read()) == got
        scale = max(abs(x) for x in want)
        err = max(abs(a - b) for a, b in zip(got, want))
        assert err <= tol * scale, (k, v, err, scale)
    e = run("logits", "--model", os.path.join(TINY, model), "--tokens", "1", "--cache-type-v",
            "q5_0", ok=(1,)).stderr
    assert "--cache-type-v must be f32, f16, q8_0 or q4_0" in e, e
    for cmd in ("logits", "generate", "session-script", "serve"):
        h = run(cmd, "--help").stdout
        assert "--cache-type-k" in h and "--cache-type-v" in h, cmd


def t_generate():
    m = os.path.join(TINY, "rill-tiny-qwen2-Q8_0.gguf")
    a = run("generate", "--model", m, "--prompt", "ab", "-n", "12", "--temp", "0")
    b = run("generate", "--model", m, "--prompt", "ab", "-n", "12", "--temp", "0")
    assert a.stdout == b.stdout and a.stdout.strip(), a.stdout
    assert "generated" in a.stderr and "12 generated" in a.stderr, a.stderr
    s1 = run("generate", "--model", m, "--prompt", "ab", "-n", "12", "--seed", "7").stdout
    s2 = run("generate", "--model", m, "--prompt", "ab", "-n", "12", "--seed", "7").stdout
    assert s1 == s2
    c = run("generate", "--model", m, "--prompt", "hi", "--chat", "-n", "4", "--temp", "0")
    assert "prompt tokens" in c.stderr
    e = run("generate", "--model", os.path.join(TINY, "rill-tiny-llama-F32.gguf"), "--prompt",
            "hi", "--chat", ok=(1,)).stderr
    assert "chat template" in e, e


def t_simd_override():
    """RILL_SIMD picks the kernel table; one the CPU lacks is a clear error, a bad value a
    warning. The backend's name is in generate's last line."""
    m = os.path.join(TINY, "rill-tiny-llama-F32.gguf")
    args = ("generate", "--model", m, "--prompt", "ab", "-n", "2", "--temp", "0")

    def gen(simd, ok=(0,)):
        p = subprocess.run([RILL, *args], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "RILL_SIMD": simd})
        assert p.returncode in ok, (simd, p.returncode, p.stderr)
        return p

    base = gen("scalar")
    assert "cpu-scalar" in base.stderr, base.stderr
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    for simd, need in (("avx2", {"avx2", "fma", "f16c"}),
                       ("avx512", {"avx2", "fma", "f16c", "avx512f", "avx512vl", "avx512bw"})):
        if need <= flags:
            p = gen(simd)
            assert "cpu-" + simd in p.stderr and p.stdout == base.stdout, (simd, p.stderr)
        else:
            e = gen(simd, ok=(1,)).stderr
            assert f"RILL_SIMD={simd} asks for kernels this CPU lacks" in e, e
    p = gen("avx9")
    assert "RILL_SIMD=avx9 is not scalar, avx2 or avx512: ignored" in p.stderr, p.stderr
    assert p.stdout == base.stdout


def t_bench_model():
    m = os.path.join(TINY, "rill-tiny-llama-Q4_0.gguf")
    out = run("bench", "model", "--model", m, "-p", "16", "-n", "4", "-r", "1", "-t", "1").stdout
    j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    assert j["pp_tok_s"] > 0 and j["tg_tok_s"] > 0 and j["threads"] == 1, j
    assert j["model"] == "rill-tiny-llama-Q4_0.gguf", j
    rows = [l.split("|")[4].strip() for l in out.splitlines() if l.startswith("| rill-tiny")]
    assert rows == ["pp16", "tg4"], out
    assert j["depth"] == 0, j
    # --depth: the tests run on top of that many cached tokens, named as llama-bench names them
    out = run("bench", "model", "--model", m, "-p", "16", "-n", "4", "-d", "200", "-r", "1",
              "-t", "1").stdout
    j = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    assert j["depth"] == 200 and j["pp_tok_s"] > 0 and j["tg_tok_s"] > 0, j
    rows = [l.split("|")[4].strip() for l in out.splitlines() if l.startswith("| rill-tiny")]
    assert rows == ["pp16 @ d200", "tg4 @ d200"], out
    # the depth counts against the model's context (256 for the tiny model): a clear error
    p = subprocess.run([RILL, "bench", "model", "--model", m, "-p", "16", "-n", "4", "-d", "250"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stdout
    assert "a context of 266 tokens (-d plus the larger of -p and -n) exceeds the model's " \
           "training context 256" in p.stderr, p.stderr


def t_session_script():
    """The script language end to end: logits agree with `rill logits`, fork/rollback/stats,
    generate, and a snapshot + log restore that reproduces the session."""
    m = os.path.join(TINY, "rill-tiny-qwen2-Q8_0.gguf")
    ids = "5 17 200 33 9 120 7 64 250 3"
    with tempfile.TemporaryDirectory() as d:
        snap, log = os.path.join(d, "a.snap"), os.path.join(d, "a.log")
        script = "\n".join([
            "# comment line",
            "new a",
            f"log a {log} always",
            "append a " + ids,
            "logits a",
            "fork a b",
            "append b 1 2 3",
            "rollback b 10",
            "logits b",
            "stats a",
            f"snapshot a {snap}",
            "append a 44 45",
            "logits a",
            "drop a",
            f"restore c {snap} log {log}",
            "logits c",
            "stats c",
            "generate c 4",
        ]) + "\n"
        p = subprocess.run([RILL, "session-script", "--model", m, "--kv-type", "f32", "-"],
                           input=script, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert len(lines) == 7, lines
        want = run("logits", "--model", m, "--tokens", ids, "--kv-type", "f32").stdout.split()
        assert lines[0].split() == want, "session logits differ from rill logits"
        assert lines[1] == lines[0], "fork + append + rollback did not restore the logits"
        st = json.loads(lines[2])
        for k in ("n_seen", "n_resident", "n_sink", "kept_from", "pos_next", "pages", "bytes"):
            assert k in st, (k, st)
        assert st["n_seen"] == 10 and st["pos_next"] == 10, st
        assert lines[4] == lines[3], "restore (snapshot + log replay) differs from the session"
        st = json.loads(lines[5])
        assert st["n_seen"] == 12, st
        assert len(lines[6].split()) == 4
    # The budget: as cells, or as memory; too small a budget for the input is a clear error.
    p = subprocess.run([RILL, "session-script", "--model", m, "--kv-mem", "1K", "-"],
                       input="new a\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--kv-mem 1K holds" in p.stderr, p.stderr
    p = subprocess.run([RILL, "session-script", "--model", m, "--kv-cells", "16", "-"],
                       input="new a\nappend a " + " ".join(["5"] * 40) + "\n",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and ("EFULL" in p.stderr or "full" in p.stderr), p.stderr
    p = subprocess.run([RILL, "session-script", "--model", m, "-"], input="frobnicate a\n",
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "frobnicate" in p.stderr, p.stderr


def hist_rank_pct(xs, q):
    """The sample core's histogram (core/rill_hist.h) reports at quantile q: nearest rank, the
    smallest rank >= q * n."""
    xs = sorted(xs)
    return xs[max(1, math.ceil(q * len(xs))) - 1]


def hist_close(got, want, rel=0.0, eps=0.0011):
    """got is how the histogram reports the sample want: the upper edge of want's bucket, so at or
    above it and within 1/32 of it. eps: both went through JSON's 3 decimals; rel: want was
    computed from rounded figures."""
    return want * (1 - rel) - eps <= got <= want * (1 + rel) * (1 + 1 / 32) + eps


def bench_stream_percentiles(rill, st, summ):
    """Every percentile of `rill bench stream`'s summaries is the histogram's report of the
    nearest-rank sample of the per-question figures (and below 100 questions p99 is the exact
    max); a sort of the same samples would pass too, anything else (a mean, a wrong rank, ms
    truncated to whole buckets) would not."""
    sr, ss = summ["rill"], summ["stateless"]
    t = [r["ttft_ms"] for r in rill]
    for q, key in ((0.5, "ttft_p50_ms"), (0.9, "ttft_p90_ms"), (0.99, "ttft_p99_ms")):
        assert hist_close(sr[key], hist_rank_pct(t, q)), (key, sr[key], sorted(t))
        assert hist_close(sr["buckets"][0][key], hist_rank_pct(t, q)), (key, sr["buckets"])
        sv = [r["ttft_ms"] for r in st]
        assert hist_close(ss[key], hist_rank_pct(sv, q)), (key, ss[key], sv)
    assert sr["ttft_p50_ms"] <= sr["ttft_p90_ms"] <= sr["ttft_p99_ms"], sr
    assert len(t) < 100 and abs(sr["ttft_p99_ms"] - max(t)) <= 0.0011, (sr, t)
    assert abs(sr["p99_over_p50"] - sr["ttft_p99_ms"] / sr["ttft_p50_ms"]) <= 0.002, sr
    per_q = {
        "engine_ttft": [r["engine_ttft_ms"] for r in rill],
        "ttft_own": [r["ttft_compute_ms"] for r in rill],
        "ttft_other": [r["engine_ttft_ms"] - r["ttft_compute_ms"] for r in rill],
        "backlog": [r["backlog"] for r in rill],
        "standing_age": [r["standing_age_ms"] for r in rill if r["standing_age_ms"] is not None],
    }
    for name, xs in per_q.items():
        for q, p in ((0.5, "p50"), (0.99, "p99")):
            got = sr[f"{name}_{p}" + ("" if name == "backlog" else "_ms")]
            if not xs:
                assert got is None, (name, got)
                continue
            eps = 0.0021 if name == "ttft_other" else 0.0011  # a difference of two rounded figures
            assert hist_close(got, hist_rank_pct(xs, q), eps=eps), (name, p, got, sorted(xs))
    # over_rill: the median over the sampled questions of stateless TTFT / rill TTFT.
    rill_by_q = {(r["session"], r["q"]): r["ttft_ms"] for r in rill}
    ratios = [r["ttft_ms"] / rill_by_q[(r["session"], r["q"])] for r in st]
    got = ss["buckets"][0]["over_rill"]
    assert hist_close(got, hist_rank_pct(ratios, 0.5), rel=2e-3), (got, ratios)


def bench_stream_accuracy(rill, st, summ, exp):
    """Issue 23's check in `rill bench stream`: every answer line says what its answer was, what
    is true at the chunks it saw and whether they agree (true/false/null); a summary's accuracy
    is its lines' right over scored, per kind too. The truth is recomputed here from the export
    for the kinds whose answer is a line's own field (the last MSFT line's price and side; AAPL's
    last price against its first) at the chunks the answer's version held (checked against the
    tokens it was answered on), so a truth fed at the wrong version, or answers scored against
    another session's ticks, fail."""
    kinds = {"moved_most", "above_first_price", "last_price_side", "largest_size", "trend",
             "sells_count"}
    streams = {s["session"]: s for s in exp["streams"]}
    for mode, lines in (("rill", rill), ("stateless", st)):
        for r in lines:
            assert r["truth_kind"] in kinds and r["correct"] in (True, False, None), r
            assert isinstance(r["answer_text"], str), r
            q = next(x for x in streams[r["session"]]["questions"] if x["q"] == r["q"])
            chunks = streams[r["session"]]["chunks"]
            seen = r["chunks_seen"]  # from the version the answer saw
            if mode == "stateless":
                assert seen == q["after"], (r, q)
            else:  # the whole chunks within the tokens it was answered on
                ends = [len(exp["prompt"]) + sum(len(c["tokens"]) for c in chunks[:k])
                        for k in range(len(chunks) + 1)]
                assert ends[seen] <= r["engine_context"], (r, ends)
                assert seen == len(chunks) or r["engine_context"] < ends[seen + 1], (r, ends)
                assert r["data_version"] >= seen, r
            text = [c["text"].split() for c in chunks[:seen]]
            if r["truth_kind"] == "last_price_side":
                ms = [t for t in text if t[0] == "MSFT"]
                want = f"{ms[-1][1]} {ms[-1][4]}" if ms else None
                assert r["expected"] == want, (r, want)
            if r["truth_kind"] == "above_first_price":
                aa = [t for t in text if t[0] == "AAPL"]
                want = None
                if aa:
                    first, last = float(aa[0][1]), float(aa[-1][1])
                    want = ("yes" if last > first else "no" if last < first else "equal") + \
                        ", " + aa[-1][1]
                assert r["expected"] == want, (r, want)
            if r["expected"] is None:
                assert r["correct"] is None, r
        sm = summ[mode]
        scored = [r for r in lines if r["correct"] is not None]
        right = [r for r in scored if r["correct"]]
        assert sm["scored"] == len(scored) and sm["correct"] == len(right), sm
        if scored:
            assert abs(sm["accuracy"] - len(right) / len(scored)) <= 0.0006, sm
        else:
            assert sm["accuracy"] is None, sm
        by = sm["accuracy_by_kind"]
        assert set(by) == {r["truth_kind"] for r in lines}, by
        for k, v in by.items():
            mine = [r for r in lines if r["truth_kind"] == k]
            assert v["n"] == len(mine), (k, v)
            assert v["scored"] == sum(r["correct"] is not None for r in mine), (k, v)
            assert v["correct"] == sum(r["correct"] is True for r in mine), (k, v)
    sr = summ["rill"]
    assert sr["standing_kind"] == "all_last_prices", sr
    assert 0 <= sr["standing_correct"] <= sr["standing_scored"] <= sr["standing_answers_checked"]
    assert sr["standing_answers_checked"] >= 1, sr


def bench_stream_stop_rule(m):
    """The default stop rule: an answer ends with its first line (or an end-of-generation
    token), so nothing is decoded after the line end. --instruct question puts each kind's
    answer-form instruction after its question (the system prompt's texts are
    test_market_truth's: the tiny model's context cannot hold them with a question)."""
    with tempfile.TemporaryDirectory() as d:
        js, ex = os.path.join(d, "s.jsonl"), os.path.join(d, "s.export.json")
        run("bench", "stream", "--model", m, "--no-prompt", "--sessions", "2", "--rate", "50",
            "--every", "2", "--context", "96", "--answer", "12", "--stateless", "0", "-t", "1",
            "--instruct", "question", "--json", js, "--export", ex)
        rows = [json.loads(line) for line in open(js)]
        exp = json.load(open(ex))
    summ = next(r for r in rows if r.get("summary"))
    assert summ["stop"] is True and summ["instruct"] == "question", summ
    # the larger of --answer and 96 where the model's context holds it: not the tiny model's
    assert summ["standing_answer"] == 12, summ
    assert all(re.search(r"[?.] Reply (with|on one line with) [^?]*\.<\|im_end\|>\n", t)
               for t in exp["question_texts"] + [exp["standing_text"]]), exp["question_texts"]
    qs = [r for r in rows if not r.get("summary")]
    assert qs and all(1 <= r["n_answer"] <= 12 for r in qs), qs
    for r in qs:
        body = r["answer_text"].lstrip(" \t\r\n")
        cut = body.find("\n")
        assert cut < 0 or body[cut + 1:].strip() == "", r  # nothing after the first line's end
    p = subprocess.run([RILL, "bench", "stream", "--model", m, "--instruct", "all"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--instruct" in p.stderr, p


def bench_stream_consistency(m):
    """--consistency both (issue 18 item 3): the rill mode's questions split between waiting for
    everything acknowledged and answering on what the engine has evaluated, each kind asked both
    ways (the export and the lines agree on which); an acknowledged answer saw every chunk before
    its question, an evaluated one may not; the summary's by_consistency figures are those of
    its lines (counts, TTFT percentiles, chunks behind, accuracy). A bad name is a usage error."""
    with tempfile.TemporaryDirectory() as d:
        js, ex = os.path.join(d, "c.jsonl"), os.path.join(d, "c.export.json")
        out = run("bench", "stream", "--model", m, "--no-prompt", "--sessions", "4", "--rate",
                  "200", "--every", "2", "--context", "128", "--answer", "4", "--stateless", "0",
                  "-t", "1", "--no-stop", "--consistency", "both", "--json", js,
                  "--export", ex).stdout
        rows = [json.loads(line) for line in open(js)]
        exp = json.load(open(ex))
    assert re.search(r"^consistency acknowledged: \d+ questions", out, re.M), out
    assert re.search(r"^consistency evaluated: \d+ questions", out, re.M), out
    sr = next(r for r in rows if r.get("summary") and r["mode"] == "rill")
    assert sr["consistency"] == "both", sr
    lines = [r for r in rows if not r.get("summary") and r["mode"] == "rill"]
    want = {(s["session"], q["q"]): q["consistency"] for s in exp["streams"]
            for q in s["questions"]}
    after = {(s["session"], q["q"]): q["after"] for s in exp["streams"] for q in s["questions"]}
    assert {(r["session"], r["q"]): r["consistency"] for r in lines} == want, (lines, want)
    for c in ("acknowledged", "evaluated"):
        mine = [r for r in lines if r["consistency"] == c]
        assert mine, (c, lines)
        bc = sr["by_consistency"][c]
        assert bc["questions"] == len(mine) and bc["failed"] == 0, (c, bc)
        t = [r["ttft_ms"] for r in mine]
        for q, key in ((0.5, "ttft_p50_ms"), (0.99, "ttft_p99_ms")):
            assert hist_close(bc[key], hist_rank_pct(t, q)), (c, key, bc[key], t)
        behind = [max(0, after[(r["session"], r["q"])] - r["chunks_seen"]) for r in mine]
        assert bc["behind_any"] == sum(b > 0 for b in behind), (c, bc, behind)
        assert hist_close(bc["behind_p50"], hist_rank_pct(behind, 0.5)), (c, bc, behind)
        if c == "acknowledged":
            assert all(b == 0 for b in behind), (mine, behind)
        scored = [r for r in mine if r["correct"] is not None]
        assert bc["scored"] == len(scored), (c, bc)
        assert bc["correct"] == sum(r["correct"] is True for r in scored), (c, bc)
    # both halves hold more than one kind: the split does not follow the kind
    kinds = {c: {r["kind"] for r in lines if r["consistency"] == c}
             for c in ("acknowledged", "evaluated")}
    assert len(kinds["acknowledged"]) > 1 and len(kinds["evaluated"]) > 1, kinds
    p = subprocess.run([RILL, "bench", "stream", "--model", m, "--consistency", "eventual"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--consistency" in p.stderr, p


def bench_stream_cache_types(m):
    """--cache-type-k / -v (issue 18 item 1): the stream runs on a quantized cache, both modes,
    and the summary says which; an unknown type is refused with the flag's name."""
    with tempfile.TemporaryDirectory() as d:
        js = os.path.join(d, "q.jsonl")
        run("bench", "stream", "--model", m, "--no-prompt", "--sessions", "2", "--rate", "50",
            "--every", "2", "--context", "128", "--answer", "4", "--stateless", "1", "-t", "1",
            "--no-stop", "--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--json", js)
        rows = [json.loads(line) for line in open(js)]
    summ = {r["mode"]: r for r in rows if r.get("summary")}
    for mode, least in (("rill", 2), ("stateless", 1)):
        sm = summ[mode]
        assert sm["kv"] == "q8_0/q4_0" and sm["cache_type_k"] == "q8_0", sm
        assert sm["cache_type_v"] == "q4_0" and sm["questions"] >= least, sm
        assert sm["failed"] == 0, sm
    assert all(r["status"] == "OK" for r in rows if not r.get("summary")), rows
    p = subprocess.run([RILL, "bench", "stream", "--model", m, "--cache-type-k", "q5_0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--cache-type-k" in p.stderr, p


def t_bench_stream():
    """`rill bench stream` on the tiny model at tiny sizes: runs in a second, its JSON lines
    parse (one per question and mode, a summary per mode), and the export holds the stream."""
    p = subprocess.run([RILL, "bench", "stream", "--help"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode == 1 and "not built" in p.stderr:
        # built only once scheduler/ and ingest/ are part of the build
        assert not (os.path.exists(os.path.join(SRC, "scheduler", "CMakeLists.txt")) and
                    os.path.exists(os.path.join(SRC, "ingest", "CMakeLists.txt"))), p.stderr
        return
    assert p.returncode == 0 and "--export" in p.stdout and "--sessions" in p.stdout, p.stdout
    m = os.path.join(TINY, "rill-tiny-qwen2-Q8_0.gguf")
    with tempfile.TemporaryDirectory() as d:
        js, ex = os.path.join(d, "s.jsonl"), os.path.join(d, "s.export.json")
        out = run("bench", "stream", "--model", m, "--no-prompt", "--sessions", "2", "--rate",
                  "50", "--every", "2", "--context", "128", "--answer", "4", "--stateless", "1",
                  "-t", "1", "--no-stop", "--json", js, "--export", ex).stdout
        assert "| context <= |" in out, out
        assert "| question kind | questions | scored | right | rill accuracy |" in out, out
        assert re.search(r"^accuracy \(first line of each answer .*: rill (\S+) of \d+ scored",
                         out, re.M), out
        assert '"accuracy":' in out.splitlines()[-1], out
        rows = [json.loads(line) for line in open(js)]
        exp = json.load(open(ex))
    qs = [r for r in rows if not r.get("summary")]
    summ = {r["mode"]: r for r in rows if r.get("summary")}
    assert set(summ) == {"rill", "stateless"}, summ
    n_q = sum(len(s["questions"]) for s in exp["streams"])
    assert n_q >= 2 and summ["rill"]["questions"] == n_q and summ["rill"]["failed"] == 0, summ
    rill = [r for r in qs if r["mode"] == "rill"]
    assert len(rill) == n_q and all(r["status"] == "OK" and r["n_answer"] == 4 and
                                    r["ttft_ms"] > 0 and r["total_ms"] >= r["ttft_ms"]
                                    for r in rill), rill
    # what each TTFT was made of: own steps within it, the backlog it waited for
    assert all(0 <= r["ttft_compute_ms"] <= r["engine_ttft_ms"] and r["backlog"] >= 0
               for r in rill), rill
    assert any(r["ttft_compute_ms"] > 0 for r in rill), rill
    assert summ["rill"]["backlog_p99"] >= summ["rill"]["backlog_p50"] >= 0, summ
    assert 0 <= summ["rill"]["ttft_own_p50_ms"] <= summ["rill"]["ttft_own_p99_ms"], summ
    assert "host_steal_pct" in summ["rill"], summ
    st = [r for r in qs if r["mode"] == "stateless"]
    assert st and all(r["status"] == "OK" for r in st), st
    assert 0 <= summ["rill"]["utilization"] <= 1, summ["rill"]
    assert summ["rill"]["attn"] == "flash" and exp["attn"] == "flash", summ["rill"]  # default
    assert [b["le"] for b in summ["rill"]["buckets"]] == [256], summ["rill"]
    # The summaries' percentiles against the per-question lines (bench_stream_percentiles).
    bench_stream_percentiles(rill, st, summ)
    bench_stream_accuracy(rill, st, summ, exp)
    # The export: every chunk's tokens, questions after a chunk, contexts that add up.
    assert exp["format"] == "rill-stream" and len(exp["streams"]) == 2, exp.keys()
    for s in exp["streams"]:
        t = [c["t_ns"] for c in s["chunks"]]
        assert t == sorted(t) and all(c["tokens"] and c["text"].endswith("\n")
                                      for c in s["chunks"]), s
        for q in s["questions"]:
            n = len(exp["prompt"]) + sum(len(c["tokens"]) for c in s["chunks"][:q["after"]])
            assert q["context"] == n <= 128, (q, n)
    assert summ["rill"]["stop"] is False and summ["rill"]["instruct"] == "system", summ["rill"]
    # The questions as put to the model: the chat turn (the tiny model's template is ChatML);
    # by default the answer rules are the system prompt's, not the question's.
    assert summ["rill"]["prompt"] == "chat", summ["rill"]
    assert all(t.startswith("<|im_start|>user\n") and t.endswith("<|im_start|>assistant\n") and
               " Reply with " not in t for t in exp["question_texts"]), exp["question_texts"]
    bench_stream_stop_rule(m)
    bench_stream_consistency(m)
    bench_stream_cache_types(m)
    assert summ["rill"]["kv"] == "f16" and summ["rill"]["cache_type_v"] == "f16", summ["rill"]
    assert summ["rill"]["consistency"] == "acknowledged", summ["rill"]  # the default
    assert all(r["consistency"] == "acknowledged" for r in rill), rill
    # Deterministic: the same options give the same stream.
    with tempfile.TemporaryDirectory() as d:
        ex2 = os.path.join(d, "again.json")
        run("bench", "stream", "--model", m, "--no-prompt", "--sessions", "2", "--rate", "50",
            "--every", "2", "--context", "128", "--answer", "4", "-t", "1", "--export", ex2,
            "--export-only")
        assert json.load(open(ex2))["streams"] == exp["streams"]


def t_devices():
    """`rill devices`: --help from its table; with an ALSA configuration that defines a null PCM
    (PortAudio lists it as a device), one tab-separated line `index, name, channels, rate` for
    it; with none of the user's own ALSA configuration, either device lines or the clear message
    that there are none (this machine has no sound card; others may)."""
    out = run("devices", "--help").stdout
    assert out.startswith("usage: rill devices") and "--verbose" in out, out
    assert "devices" in run("--help").stdout
    assert "unexpected argument" in run("devices", "extra", ok=(2,)).stderr
    line = re.compile(r"^(\d+)\t([^\t]+)\t(\d+)\t(\d+)$")
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, HOME=home)
        p = subprocess.run([RILL, "devices"], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        if not lines:
            assert "no audio input devices" in p.stderr, p.stderr
            assert "ALSA lib" not in p.stderr, p.stderr  # the probe's noise is kept out
        for ln in lines:
            assert line.match(ln), ln
        with open(os.path.join(home, ".asoundrc"), "w") as f:
            f.write("pcm.rill_cli_null {\n    type null\n}\n")
        p = subprocess.run([RILL, "devices"], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        got = [line.match(ln) for ln in p.stdout.splitlines()]
        assert all(got), p.stdout
        null = [m for m in got if m.group(2) == "rill_cli_null"]
        if not null:
            print("t_devices: PortAudio lists no 'rill_cli_null' (no ALSA host API?): that part skipped")
            return
        assert int(null[0].group(3)) > 0 and int(null[0].group(4)) > 0, null[0].group(0)


def main():
    if not os.path.exists(os.path.join(TINY, "rill-tiny-llama-F32.gguf")):
        print("SKIP: tests/data/models/ is empty (tools/make_test_models.py)")
        return 77
    for name, fn in sorted(globals().items()):
        if name.startswith("t_") and callable(fn):
            check(name, fn)
    for name, err in results:
        print(("ok   " if err is None else "FAIL ") + name + ("" if err is None else f": {err}"))
    bad = sum(1 for _, e in results if e is not None)
    print(f"{len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
