#!/usr/bin/env python3
"""rill against llama.cpp, side by side in one run: prompt processing (pp) and generation (tg).

Both engines run the same GGUF with the same thread count and the same workload, the way
llama-bench measures it: pp = N_PROMPT random token ids evaluated in batches of 512, tg = N_GEN
tokens decoded one at a time, both on top of DEPTH tokens already in the cache (llama-bench's -d;
evaluated once, untimed; 0 = an empty context). --flash-attn runs both with flash attention
(rill --attn flash, llama.cpp LLAMA_FLASH_ATTN_TYPE_ENABLED); without it both use their exact
attention.

llama.cpp comes in up to two builds, each llama-cpp-python of the same version in its own
Python (--llama): "portable", the .venv's AVX2 build that the reference data comes from (the
interpreter running this script), and "native", the GGML_NATIVE build of this CPU
(scripts/setup.sh --llama-native: $RILL_CACHE/llama-native/venv). Each runs in a worker process
of its own Python (this script with --worker), which loads the model and evaluates the depth
once. The runs alternate (rill, llama.cpp portable, llama.cpp native, rill, ...) so that drift
of a shared, noisy machine hits all alike; each figure is the median over the rounds, and a
ratio is rill / llama.cpp of the medians. rill is measured with `rill bench model -r 1` (one
warm-up and one measured run per round, in a fresh process, which evaluates the depth anew);
llama.cpp also with one warm-up per round.

Prints the builds' system info, a Markdown table and one JSON line per (model, threads).

Usage: bench/vs_llama_cpp.py [--rill build/cli/rill] [--llama portable,native] [--threads 1,2]
                             [--rounds 5] [-p 512] [-n 128] [-d 0] [--flash-attn] MODEL.gguf [...]
Needs the oracle tier: scripts/setup.sh --llama (and --llama-native for the native build; without
it the default --llama is the portable build alone).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

NATIVE_PYTHON = os.path.join(
    os.environ.get("RILL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rill"),
    "llama-native", "venv", "bin", "python")


def rill_run(rill, model, threads, n_prompt, n_gen, depth, flash):
    out = subprocess.run([rill, "bench", "model", "--model", model, "-t", str(threads),
                          "-p", str(n_prompt), "-n", str(n_gen), "-d", str(depth), "-r", "1",
                          "--attn", "flash" if flash else "exact"],
                         check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    j = json.loads(line)
    return j["pp_tok_s"], j["tg_tok_s"], j["backend"]


class LlamaCpp:
    """One llama.cpp context in this process (the worker side)."""

    def __init__(self, model, threads, n_ctx, flash):
        import llama_cpp
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


def worker():
    """The worker: JSON requests on stdin, one JSON reply line each on stdout."""
    import llama_cpp
    ref = None
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "hello":
            info = llama_cpp.llama_print_system_info()
            reply = {"version": llama_cpp.__version__, "file": llama_cpp.__file__,
                     "system_info": info.decode() if isinstance(info, bytes) else str(info)}
        elif op == "open":
            ref = LlamaCpp(req["model"], req["threads"], req["n_ctx"], req["flash"])
            reply = {"n_vocab": ref.n_vocab}
        elif op == "fill":
            ref.fill(req["ids"])
            reply = {}
        elif op == "run":
            pp, tg = ref.run(req["n_prompt"], req["n_gen"])
            reply = {"pp": pp, "tg": tg}
        elif op == "close":
            ref = None
            reply = {}
        else:
            reply = {"error": f"unknown op {op}"}
        print(json.dumps(reply), flush=True)


class Worker:
    """A llama.cpp build in its own Python process (this script with --worker)."""

    def __init__(self, name, python):
        self.name = name
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self.call(op="hello")

    def call(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"vs_llama_cpp: the {self.name} llama.cpp worker exited "
                     f"(status {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            sys.exit(f"vs_llama_cpp: {self.name}: {reply['error']}")
        return reply

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def main():
    if sys.argv[1:2] == ["--worker"]:
        worker()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--rill", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                   "cli", "rill"))
    ap.add_argument("--llama", default=None,
                    help="llama.cpp builds, comma-separated: portable (this Python's), native "
                         f"({NATIVE_PYTHON}); default both where the native one is installed")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-d", "--depth", type=int, default=0,
                    help="tokens in the cache under each test (llama-bench's -d)")
    ap.add_argument("--flash-attn", action="store_true",
                    help="flash attention in all engines (default: all exact)")
    a = ap.parse_args()
    at = f" @ d{a.depth}" if a.depth else ""
    pythons = {"portable": sys.executable, "native": NATIVE_PYTHON}
    if a.llama is None:
        a.llama = "portable,native" if os.access(NATIVE_PYTHON, os.X_OK) else "portable"
        if a.llama == "portable":
            print(f"vs_llama_cpp: no native llama.cpp ({NATIVE_PYTHON}; scripts/setup.sh "
                  "--llama-native): the portable build alone", file=sys.stderr)
    builds = a.llama.split(",")
    for b in builds:
        if b not in pythons:
            sys.exit(f"vs_llama_cpp: --llama {b}: not portable or native")
        if not os.access(pythons[b], os.X_OK):
            sys.exit(f"vs_llama_cpp: --llama {b}: {pythons[b]} missing "
                     "(scripts/setup.sh --llama-native)")
    workers = [Worker(b, pythons[b]) for b in builds]

    for w in workers:
        print(f"llama.cpp {w.name}: llama-cpp-python {w.hello['version']} ({w.hello['file']}); "
              f"{w.hello['system_info'].strip()}")
    print(f"{a.rounds} alternating rounds; pp{a.n_prompt}{at}, tg{a.n_gen}{at}; attention "
          f"{'flash' if a.flash_attn else 'exact'} in all")
    cols = "".join(f" llama.cpp {w.name} t/s | rill / {w.name} |" for w in workers)
    print(f"| model | threads | test | rill t/s |{cols}")
    print("|---|---|---|---|" + "---|---|" * len(workers))
    lines = []
    for model in a.models:
        for threads in [int(t) for t in a.threads.split(",")]:
            rng = random.Random(7)
            for w in workers:
                n_vocab = w.call(op="open", model=model, threads=threads,
                                 n_ctx=a.depth + max(a.n_prompt, a.n_gen) + 16,
                                 flash=a.flash_attn)["n_vocab"]
            depth_ids = [rng.randrange(n_vocab) for _ in range(a.depth)]
            for w in workers:
                w.call(op="fill", ids=depth_ids)
            r_pp, r_tg = [], []
            l_pp = {w.name: [] for w in workers}
            l_tg = {w.name: [] for w in workers}
            backend = "?"
            for _ in range(a.rounds):
                pp, tg, backend = rill_run(a.rill, model, threads, a.n_prompt, a.n_gen,
                                           a.depth, a.flash_attn)
                r_pp.append(pp)
                r_tg.append(tg)
                for w in workers:
                    res = w.call(op="run", n_prompt=a.n_prompt, n_gen=a.n_gen)
                    l_pp[w.name].append(res["pp"])
                    l_tg[w.name].append(res["tg"])
            for w in workers:
                w.call(op="close")
            name = os.path.basename(model)
            res = {"model": name, "threads": threads, "rill_backend": backend, "depth": a.depth,
                   "attn": "flash" if a.flash_attn else "exact", "rounds": a.rounds}
            for test, r, l in (("pp", r_pp, l_pp), ("tg", r_tg, l_tg)):
                rm = statistics.median(r)
                row = f"| {name} | {threads} | {test}{a.n_prompt if test == 'pp' else a.n_gen}{at} " \
                      f"| {rm:.1f} |"
                res[f"{test}_rill"] = round(rm, 2)
                for w in workers:
                    lm = statistics.median(l[w.name])
                    row += f" {lm:.1f} | {rm / lm:.2f} |"
                    res[f"{test}_llama_{w.name}"] = round(lm, 2)
                    res[f"{test}_ratio_{w.name}"] = round(rm / lm, 3)
                print(row)
            lines.append(res)
            sys.stdout.flush()
    for w in workers:
        w.close()
    for res in lines:
        print(json.dumps(res))


if __name__ == "__main__":
    main()
