#!/usr/bin/env python3
"""rill against llama.cpp, side by side in one run: prompt processing (pp) and generation (tg).

Both engines run the same GGUF with the same thread count and the same workload, the way
llama-bench measures it: pp = N_PROMPT random token ids evaluated in batches of 512, tg = N_GEN
tokens decoded one at a time, both on top of DEPTH tokens already in the cache (llama-bench's -d;
evaluated once, untimed; 0 = an empty context). --flash-attn runs both with flash attention
(rill --attn flash, llama.cpp LLAMA_FLASH_ATTN_TYPE_ENABLED); without it both use their exact
attention. The runs alternate (rill, llama.cpp, rill, llama.cpp, ...) so that drift of a shared,
noisy machine hits both alike; each figure is the median over the rounds, and the ratio is
rill / llama.cpp of the medians. rill is measured with `rill bench model -r 1` (one warm-up and
one measured run per round, in a fresh process, which evaluates the depth anew); llama.cpp
through llama-cpp-python in this process (the depth evaluated once), also with one warm-up per
round.

Prints a Markdown table and one JSON line per (model, threads).

Usage: bench/vs_llama_cpp.py [--rill build/cli/rill] [--threads 1,2] [--rounds 5]
                             [-p 512] [-n 128] [-d 0] [--flash-attn] MODEL.gguf [...]
Needs the oracle tier: scripts/setup.sh --llama.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import llama_cpp


def rill_run(rill, model, threads, n_prompt, n_gen, depth, flash):
    out = subprocess.run([rill, "bench", "model", "--model", model, "-t", str(threads),
                          "-p", str(n_prompt), "-n", str(n_gen), "-d", str(depth), "-r", "1",
                          "--attn", "flash" if flash else "exact"],
                         check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    j = json.loads(line)
    return j["pp_tok_s"], j["tg_tok_s"], j["backend"]


class LlamaCpp:
    def __init__(self, model, threads, n_ctx, flash):
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                                   n_threads=threads, n_threads_batch=threads, verbose=False,
                                   logits_all=False, flash_attn=flash)
        self.n_vocab = self.llm.n_vocab()
        self.depth = 0

    def fill(self, ids):
        """The depth: evaluated once from an empty cache; every test then starts from it."""
        self.llm.reset()
        self.llm._ctx.memory_clear(True) if hasattr(self.llm._ctx, "memory_clear") else None
        if ids:
            self.llm.eval(ids)
        self.depth = len(ids)

    def _pp(self, ids):
        self.llm.n_tokens = self.depth  # eval() first removes every position from here on
        t0 = time.perf_counter()
        self.llm.eval(ids)
        dt = time.perf_counter() - t0
        assert self.llm.n_tokens == self.depth + len(ids), self.llm.n_tokens
        return len(ids) / dt

    def _tg(self, ids):
        self.llm.n_tokens = self.depth
        t0 = time.perf_counter()
        for t in ids:
            self.llm.eval([t])
        return len(ids) / (time.perf_counter() - t0)

    def run(self, n_prompt, n_gen, seed=42):
        rng = random.Random(seed)
        ids = [rng.randrange(self.n_vocab) for _ in range(max(n_prompt, n_gen))]
        pp = tg = 0.0
        if n_prompt:
            self._pp(ids[:n_prompt])  # warm-up
            pp = self._pp(ids[:n_prompt])
        if n_gen:
            self._tg(ids[:n_gen])
            tg = self._tg(ids[:n_gen])
        return pp, tg


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rill", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "cli", "rill"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-d", "--depth", type=int, default=0,
                    help="tokens in the cache under each test (llama-bench's -d)")
    ap.add_argument("--flash-attn", action="store_true",
                    help="flash attention in both engines (default: both exact)")
    a = ap.parse_args()
    at = f" @ d{a.depth}" if a.depth else ""

    print(f"llama-cpp-python {llama_cpp.__version__}; {a.rounds} alternating rounds; "
          f"pp{a.n_prompt}{at}, tg{a.n_gen}{at}; attention "
          f"{'flash' if a.flash_attn else 'exact'} in both")
    print("| model | threads | test | rill t/s | llama.cpp t/s | rill / llama.cpp |")
    print("|---|---|---|---|---|---|")
    lines = []
    for model in a.models:
        for threads in [int(t) for t in a.threads.split(",")]:
            ref = LlamaCpp(model, threads, a.depth + max(a.n_prompt, a.n_gen) + 16, a.flash_attn)
            rng = random.Random(7)
            ref.fill([rng.randrange(ref.n_vocab) for _ in range(a.depth)])
            r_pp, r_tg, l_pp, l_tg = [], [], [], []
            backend = "?"
            for _ in range(a.rounds):
                pp, tg, backend = rill_run(a.rill, model, threads, a.n_prompt, a.n_gen,
                                           a.depth, a.flash_attn)
                r_pp.append(pp)
                r_tg.append(tg)
                pp, tg = ref.run(a.n_prompt, a.n_gen)
                l_pp.append(pp)
                l_tg.append(tg)
            del ref
            name = os.path.basename(model)
            res = {"model": name, "threads": threads, "rill_backend": backend, "depth": a.depth,
                   "attn": "flash" if a.flash_attn else "exact"}
            for test, r, l in (("pp", r_pp, l_pp), ("tg", r_tg, l_tg)):
                rm, lm = statistics.median(r), statistics.median(l)
                print(f"| {name} | {threads} | {test}{a.n_prompt if test == 'pp' else a.n_gen}{at} "
                      f"| {rm:.1f} | {lm:.1f} | {rm / lm:.2f} |")
                res[f"{test}_rill"] = round(rm, 2)
                res[f"{test}_llama_cpp"] = round(lm, 2)
                res[f"{test}_ratio"] = round(rm / lm, 3)
            lines.append(res)
            sys.stdout.flush()
    for res in lines:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
