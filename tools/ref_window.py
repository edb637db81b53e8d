#!/usr/bin/env python3
"""Records what llama.cpp computes when it does what a windowed rill session does.

A rill session with S sinks and a window of W (sessions/rill_session.h) keeps S' sink tokens plus
at most W' recent ones (both rounded up to pages of P = 16). When it is full (n == S' + W') and a
token arrives, it drops evict_pages pages from the front of the recent part, slots
[S', S' + k*P), moves the rest down and re-rotates their keys by -k*P positions: every resident
token sits at RoPE position = slot, and the next token comes at n. An append of m tokens runs in
chunks of min(left, cap - n, max_batch) tokens, evicting before a chunk whenever n == cap
(rill_session_append in sessions/session.c).

This script replays exactly that on llama.cpp through llama-cpp-python's low-level API: decode the
same chunks at the same positions; where rill evicts, llama_memory_seq_rm(seq 0, S', S' + k*P)
and llama_memory_seq_add(seq 0, S' + k*P, -1, -k*P), after which llama.cpp re-rotates the cached
keys (its K-shift) before the next decode. With several layers the kept K/V still carry
attention to the evicted tokens, so this is not a fresh prefill of the kept tokens; it is the
same computation rill does, so the logits must agree within float tolerance.

A second run does the same removals without the position shift (new tokens continue at the old
positions, the kept keys keep theirs). Its logits differ from the first run's only because the
sinks' distance to everything else changed; storing them (tiny models) lets the C test show that
it can tell a shifted cache from an unshifted one. That llama.cpp really re-rotated the kept keys
is checked directly on 1-layer copies of the tiny models (shift_self_check, plain llama.cpp
without compaction): there K/V depend only on token and position, so after evictions the windowed
logits must equal a fresh prefill of sinks + kept tokens at the re-based positions. Measured
max|d|/scale: 1.1e-6 (llama), 7e-7 (qwen2) with the shift; 0.82 and 1.0 without. The script
stops if that fails.

Writes into --out (default tests/data/ref/window/):

  <case>.f32          llama.cpp's logits at the recorded points (float32 LE, row-major
                      (point, vocab)); the first point is just before the first eviction (the
                      session is full, nothing evicted: the forward pass alone), the others after
                      one or more evictions
  <case>.noshift.f32  same points, the run without the shift (tiny models only)
  index.tsv           one line per case, read by tests/test_sessions_ref.c (columns in its header;
                      tokens, appends (sizes of the append calls), points (indices of the appends
                      after which the logits were taken) and resident/evicted (rill's n_resident
                      and n_evicted at each point) are comma-separated)
  index.json          the same plus llama.cpp's version, settings, per-point statistics

llama.cpp settings: n_threads 2, KV cache F32 (type_k = type_v = F32), flash attention off, CPU,
n_ctx = n_batch = n_ubatch = the stream's length + 64 rounded up to 256 (one ubatch per chunk).
Cells are lined up with rill's slots: after each eviction the sequence is compacted into cells
0..n-1 in position order (Llama.compact: save, clear, load back). Without that, llama.cpp keeps
a hole of free cells between the sinks and the kept tokens, its attention sums (taken over cells)
are grouped differently from rill's (over slots), and on the Q4_1 default model, whose matmul
inputs are rounded to 8 bits, that alone moves the logits by a few percent of their scale
(index.json: cells_not_lined_up_max_abs_diff); on the F32 models by ~1e-7.

Usage: ref_window.py [--models tests/data/models] [--default-model models/SmolLM2-...gguf]
                     [--out tests/data/ref/window] [--skip-default]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
from ref_logits import LLAMA_CPP_COMMIT, sha256_file  # noqa: E402

import llama_cpp  # noqa: E402

N_THREADS = 2
GGML_TYPE_F32 = 0
PAGE = 16  # RILL_KV_PAGE_SIZE

# (case name, model file, S, W, evict_pages (0: rill's default), max_batch, n_stream, seed,
#  appends) -- appends: a list of append sizes (summing to n_stream) or None for pseudo-random
# sizes 1..40 with a few long ones, which makes some appends span evictions.
TINY_CASES = [
    ("llama_s16_w64_e1", "rill-tiny-llama-F32.gguf", 16, 64, 1, 64, 260, 1701, None),
    ("llama_s10_w100_e2", "rill-tiny-llama-F32.gguf", 10, 100, 2, 64, 420, 1702, None),
    ("qwen2_s16_w64_e1", "rill-tiny-qwen2-F32.gguf", 16, 64, 1, 64, 260, 1703, None),
    ("qwen2_s10_w100_e2", "rill-tiny-qwen2-F32.gguf", 10, 100, 2, 64, 420, 1704, None),
]
# The default model on real text: S 16, W 256, rill's default eviction (W'/P/4 = 4 pages).
DEFAULT_CASE = ("smollm2_s16_w256", 16, 256, 0, 64, 720, 1705)


# llama.cpp's log goes nowhere (kept alive here: ctypes does not hold the callback).
_QUIET = llama_cpp.llama_log_callback(lambda level, text, user: None)


def ceil_to(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def random_appends(rng: np.random.Generator, n: int) -> list[int]:
    sizes, left = [], n
    while left > 0:
        m = int(rng.integers(60, 130)) if rng.random() < 0.12 else int(rng.integers(1, 41))
        m = min(m, left)
        sizes.append(m)
        left -= m
    return sizes


class Llama:
    """One llama.cpp context with one sequence, driven token batch by token batch."""

    def __init__(self, path: str, n_ctx: int):
        llama_cpp.llama_backend_init()
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit(f"llama.cpp cannot load {path}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_ubatch = n_ctx
        cp.n_seq_max = 2  # sequence 1: the filler token of compact()
        cp.n_threads = N_THREADS
        cp.n_threads_batch = N_THREADS
        cp.type_k = GGML_TYPE_F32
        cp.type_v = GGML_TYPE_F32
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.offload_kqv = False
        cp.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit("llama.cpp: cannot create a context")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        if not llama_cpp.llama_memory_can_shift(self.mem):
            raise SystemExit("llama.cpp: this memory cannot shift positions")
        vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        self.vocab = vocab
        self.batch = llama_cpp.llama_batch_init(n_ctx, 0, 1)

    def close(self) -> None:
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def decode(self, tokens: list[int], pos0: int, want_logits: bool) -> np.ndarray | None:
        b = self.batch
        b.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if (want_logits and i == len(tokens) - 1) else 0
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc != 0:
            raise SystemExit(f"llama_decode failed: {rc}")
        if not want_logits:
            return None
        p = llama_cpp.llama_get_logits_ith(self.ctx, len(tokens) - 1)
        return np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_float)),
                                     shape=(self.n_vocab,)).copy()

    def pos_range(self, seq: int = 0) -> tuple[int, int]:
        return (llama_cpp.llama_memory_seq_pos_min(self.mem, seq),
                llama_cpp.llama_memory_seq_pos_max(self.mem, seq))

    def compact(self) -> None:
        """Moves sequence 0 into cells 0, 1, ... in position order, as rill's slots are.

        After a removal llama.cpp leaves a hole of free cells between the sinks and the kept
        tokens (and may later write new tokens into it). Its attention runs over cells, so its
        sums are then grouped differently from rill's, which runs over slots in position order;
        on the Q4_1 default model (whose matmul inputs are rounded to 8 bits) that alone moves
        logits by a few percent of their scale. Compaction: decode one filler token of sequence
        1 (llama.cpp applies the pending K-shift to the whole cache before any decode), drop it,
        save sequence 0 (cells in cell order: sinks, then kept tokens, i.e. position order), clear
        the cache and load the sequence back into cells 0..n-1. F32 K/V are copied bit for bit."""
        b = self.batch
        b.n_tokens = 1
        b.token[0] = 0
        b.pos[0] = 0
        b.n_seq_id[0] = 1
        b.seq_id[0][0] = 1
        b.logits[0] = 0
        if llama_cpp.llama_decode(self.ctx, b) != 0:
            raise SystemExit("llama_decode (filler) failed")
        llama_cpp.llama_memory_seq_rm(self.mem, 1, -1, -1)
        size = llama_cpp.llama_state_seq_get_size(self.ctx, 0)
        buf = (ctypes.c_uint8 * size)()
        n = llama_cpp.llama_state_seq_get_data(self.ctx, buf, size, 0)
        if n != size:
            raise SystemExit("llama_state_seq_get_data failed")
        llama_cpp.llama_memory_clear(self.mem, True)
        if llama_cpp.llama_state_seq_set_data(self.ctx, buf, n, 0) != n:
            raise SystemExit("llama_state_seq_set_data failed")

    def tokenize(self, text: str) -> list[int]:
        raw = text.encode()
        buf = (llama_cpp.llama_token * (len(raw) + 16))()
        n = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), False, False)
        if n < 0:
            raise SystemExit("tokenize: buffer too small")
        return [int(buf[i]) for i in range(n)]


def run_session(llm: Llama, tokens: list[int], appends: list[int], S: int, W: int, evict: int,
                max_batch: int, shift: bool,
                line_up: bool = True) -> tuple[list[np.ndarray], list[dict]]:
    """Replays rill_session_append's chunking and eviction; returns the logits after each append
    and per-append state (resident count, tokens evicted so far). line_up: fill each hole a
    removal leaves (Llama.compact) so that sequence 0's cells stay in position order."""
    S_, W_ = ceil_to(S, PAGE), ceil_to(W, PAGE)
    cap = S_ + W_
    k = evict if evict > 0 else max(1, W_ // PAGE // 4)
    llama_cpp.llama_memory_clear(llm.mem, True)
    n = 0           # resident tokens == rill's pos_next
    evicted = 0     # tokens evicted so far
    off = 0         # without the shift, llama.cpp's position of a non-sink slot s is s + off
    at = 0
    logits, states = [], []
    for size in appends:
        chunk_all = tokens[at:at + size]
        done = 0
        while done < size:
            if n == cap:
                a, b = S_ + off, S_ + k * PAGE + off
                if not llama_cpp.llama_memory_seq_rm(llm.mem, 0, a, b):
                    raise SystemExit("llama_memory_seq_rm failed")
                if shift:
                    llama_cpp.llama_memory_seq_add(llm.mem, 0, b, -1, -k * PAGE)
                else:
                    off += k * PAGE
                n -= k * PAGE
                evicted += k * PAGE
                if line_up:
                    llm.compact()
                lo, hi = llm.pos_range()
                want_hi = n - 1 + off
                if lo != 0 or hi != want_hi:
                    raise SystemExit(f"llama.cpp positions [{lo}, {hi}] after eviction, "
                                     f"expected [0, {want_hi}]")
            m = min(size - done, cap - n, max_batch)
            last = done + m == size
            pos0 = n if n < S_ else n + off
            if n < S_ and n + m > S_ and off:
                raise SystemExit("internal: a chunk straddles the sinks after an eviction")
            out = llm.decode(chunk_all[done:done + m], pos0, last)
            n += m
            done += m
        at += size
        logits.append(out)
        states.append({"n_resident": n, "n_evicted": evicted, "n_seen": at})
    return logits, states


def choose_points(states: list[dict], n_after: int) -> list[int]:
    """The append just before the first eviction, then n_after appends spread over the rest
    (the first one right after the first eviction, the last one the end of the stream)."""
    first_ev = next(i for i, s in enumerate(states) if s["n_evicted"] > 0)
    pts = [first_ev - 1] if first_ev > 0 else []
    rest = list(range(first_ev, len(states)))
    idx = np.linspace(0, len(rest) - 1, n_after).round().astype(int)
    for i in idx:
        if rest[i] not in pts:
            pts.append(rest[i])
    return pts


def do_case(llm: Llama, name: str, model: str, digest: str, tokens: list[int], appends: list[int],
            S: int, W: int, evict: int, max_batch: int, n_after: int, keep_noshift: bool,
            out_dir: str) -> tuple[dict, str]:
    shifted, states = run_session(llm, tokens, appends, S, W, evict, max_batch, True)
    plain, _ = run_session(llm, tokens, appends, S, W, evict, max_batch, False)
    holes, _ = run_session(llm, tokens, appends, S, W, evict, max_batch, True, line_up=False)
    pts = choose_points(states, n_after)
    rows = np.stack([shifted[i] for i in pts]).astype("<f4")
    rows.tofile(os.path.join(out_dir, f"{name}.f32"))
    ns = np.stack([plain[i] for i in pts]).astype("<f4")
    if keep_noshift:
        ns.tofile(os.path.join(out_dir, f"{name}.noshift.f32"))
    point_info = []
    for j, i in enumerate(pts):
        scale = float(np.abs(rows[j]).max())
        d = float(np.abs(rows[j].astype(np.float64) - ns[j]).max())
        dh = float(np.abs(rows[j].astype(np.float64) - holes[i]).max())
        point_info.append({"after_append": i, **states[i], "scale": scale,
                           "noshift_max_abs_diff": d, "top1": int(rows[j].argmax()),
                           "noshift_top1": int(ns[j].argmax()),
                           "cells_not_lined_up_max_abs_diff": dh})
        print(f"  {name}: point {j} after append {i} (seen {states[i]['n_seen']}, resident "
              f"{states[i]['n_resident']}, evicted {states[i]['n_evicted']}): scale {scale:.3g}, "
              f"max|d|/scale: without the shift {d / scale:.3g}, cells not lined up "
              f"{dh / scale:.3g}")
    S_, W_ = ceil_to(S, PAGE), ceil_to(W, PAGE)
    k = evict if evict > 0 else max(1, W_ // PAGE // 4)
    entry = {"case": name, "model": model, "sha256": digest, "n_vocab": llm.n_vocab,
             "n_sink": S, "window": W, "evict_pages": evict, "n_sink_pages": S_,
             "window_slots": W_, "evict_tokens": k * PAGE, "max_batch": max_batch,
             "tokens": tokens, "appends": appends, "points": pts,
             "file": f"{name}.f32", "noshift_file": f"{name}.noshift.f32" if keep_noshift else "",
             "point_info": point_info}
    tsv = "\t".join([name, model, digest, str(llm.n_vocab), str(S), str(W), str(evict),
                     str(max_batch), entry["file"], entry["noshift_file"] or "-",
                     ",".join(map(str, tokens)), ",".join(map(str, appends)),
                     ",".join(map(str, pts)),
                     ",".join(f"{states[i]['n_resident']}/{states[i]['n_evicted']}" for i in pts)])
    return entry, tsv


def fresh_logits(llm: Llama, ids: list[int], max_batch: int) -> np.ndarray:
    """Logits of the last of ids by a fresh prefill at positions 0.. (empty cache)."""
    llama_cpp.llama_memory_clear(llm.mem, True)
    out = None
    for i in range(0, len(ids), max_batch):
        out = llm.decode(ids[i:i + max_batch], i, i + max_batch >= len(ids))
    return out


def shift_self_check(tmp_dir: str) -> list[dict]:
    """Proof that llama.cpp re-rotates the kept keys on llama_memory_seq_add: with ONE layer,
    K/V depend only on the token and its position, so after eviction the windowed cache must equal
    a fresh prefill of sinks + kept tokens at the re-based positions (rill's own test of this is
    one_layer_eviction_equals_fresh_prefill in tests/test_sessions.c). The 1-layer models are
    layer 0 of the tiny F32 models (make_test_models.py's weights), written to tmp_dir."""
    import make_test_models as mtm
    results = []
    for arch, vocab in (("llama", mtm.spm_vocab()), ("qwen2", mtm.bpe_vocab())):
        w = mtm.make_weights(arch, len(vocab["tokens"]))
        w = {k: v for k, v in w.items() if not k.startswith("blk.1.")}
        path = os.path.join(tmp_dir, f"rill-tiny-{arch}-1layer-F32.gguf")
        saved = mtm.N_LAYER
        mtm.N_LAYER = 1
        try:
            mtm.write_model(path, arch, "1-layer check", vocab, w, {}, mtm.FT.ALL_F32)
        finally:
            mtm.N_LAYER = saved
        S, W, evict, mb, n = 16, 64, 1, 64, 200
        llm = Llama(path, ceil_to(n + 64, 256))
        rng = np.random.default_rng(1710)
        tokens = [int(t) for t in rng.integers(0, llm.n_vocab, n)]
        appends = random_appends(rng, n)
        worst = {True: 0.0, False: 0.0}
        for shift in (True, False):
            win, states = run_session(llm, tokens, appends, S, W, evict, mb, shift,
                                      line_up=False)
            for lg, st in zip(win, states):
                if st["n_evicted"] == 0:
                    continue
                kept = tokens[:S] + tokens[S + st["n_evicted"]:st["n_seen"]]
                want = fresh_logits(llm, kept, mb)
                d = float(np.abs(lg.astype(np.float64) - want).max()) / float(np.abs(want).max())
                worst[shift] = max(worst[shift], d)
        llm.close()
        os.remove(path)
        print(f"  llama.cpp shift check, 1-layer {arch}: windowed vs fresh prefill of the kept "
              f"tokens, max|d|/scale {worst[True]:.3g} with the shift, {worst[False]:.3g} without")
        if worst[True] > 1e-4 or worst[False] < 1e-2:
            raise SystemExit("llama.cpp did not apply the position shift as expected")
        results.append({"arch": arch, "n_sink": S, "window": W, "evict_pages": evict,
                        "n_stream": n, "max_rel_diff_with_shift": worst[True],
                        "max_rel_diff_without_shift": worst[False]})
    return results


def bible_text(n_verses: int) -> str:
    path = os.path.join(ROOT, "..", "shared", "testdata", "bible", "en-web.tsv")
    verses = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            _, _, text = line.rstrip("\n").partition("\t")
            verses.append(text)
            if len(verses) == n_verses:
                break
    return " ".join(verses)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "tests", "data", "models"))
    ap.add_argument("--default-model",
                    default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "ref", "window"))
    ap.add_argument("--skip-default", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    llama_cpp.llama_log_set(_QUIET, ctypes.c_void_p())

    ver = llama_cpp.__version__
    index = {"format": 1, "generator": "tools/ref_window.py", "llama_cpp_python": ver,
             "llama_cpp_commit": LLAMA_CPP_COMMIT.get(ver, "unknown"),
             "system_info": llama_cpp.llama_print_system_info().decode().strip(),
             "machine": platform.machine(), "numpy": np.__version__,
             "page_size": PAGE,
             "settings": {"n_threads": N_THREADS, "type_k": "F32", "type_v": "F32",
                          "flash_attn": False, "n_gpu_layers": 0,
                          "n_ctx = n_batch = n_ubatch": "stream length + 64 rounded up to 256",
                          "n_seq_max": 2, "cells": "compacted after each eviction (Llama.compact)"},
             "layout": "float32 little-endian, row-major (point, vocab)", "cases": []}
    tsv = ["#case\tmodel\tmodel_sha256\tn_vocab\tn_sink\twindow\tevict_pages\tmax_batch\tfile"
           "\tnoshift_file\ttokens\tappends\tpoints\tresident/evicted"]

    sums = {}
    for line in open(os.path.join(args.models, "SHA256SUMS")):
        digest, fname = line.split()
        sums[fname] = digest
    for name, model, S, W, evict, mb, n, seed, appends in TINY_CASES:
        path = os.path.join(args.models, model)
        digest = sha256_file(path)
        if digest != sums.get(model):
            raise SystemExit(f"{model}: sha256 does not match SHA256SUMS")
        llm = Llama(path, ceil_to(n + 64, 256))
        rng = np.random.default_rng(seed)
        tokens = [int(t) for t in rng.integers(0, llm.n_vocab, n)]
        if "llama" in model:
            tokens[0] = llama_cpp.llama_vocab_bos(llm.vocab)
        appends = appends or random_appends(rng, n)
        entry, line = do_case(llm, name, model, digest, tokens, appends, S, W, evict, mb, 4, True,
                              args.out)
        index["cases"].append(entry)
        tsv.append(line)
        llm.close()

    if not args.skip_default:
        name, S, W, evict, mb, n, seed = DEFAULT_CASE
        path = args.default_model
        digest = sha256_file(path)
        llm = Llama(path, ceil_to(n + 64, 256))
        tokens = llm.tokenize(bible_text(60))[:n]
        if len(tokens) < n:
            raise SystemExit("not enough text")
        appends = random_appends(np.random.default_rng(seed), n)
        entry, line = do_case(llm, name, os.path.basename(path), digest, tokens, appends, S, W,
                              evict, mb, 2, False, args.out)
        entry["text"] = "shared/testdata/bible/en-web.tsv: the first 60 verses' text joined by " \
                        "single spaces, tokenized by llama.cpp (no BOS, no special parsing), " \
                        f"first {n} tokens"
        index["cases"].append(entry)
        tsv.append(line)
        llm.close()

    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        index["llama_cpp_shift_check"] = shift_self_check(tmp)

    with open(os.path.join(args.out, "index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(args.out, "index.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join(tsv) + "\n")
    total = sum(os.path.getsize(os.path.join(args.out, fn)) for fn in os.listdir(args.out))
    print(f"wrote {args.out} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
