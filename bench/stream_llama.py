#!/usr/bin/env python3
"""llama.cpp on the exact stream of `rill bench stream --export`: modes (b) and (c).

The stream is replayed in real time (each chunk and question at its arrival time) into one
llama.cpp context driven through llama-cpp-python's low-level API, the best ways a user could:

  (b) persistent  one context with n_seq_max = K sessions, one KV sequence per session (a
                  non-unified KV cache: each sequence attends only to its own cells, --kv-unified
                  to share one). Data is decoded as it arrives, several sessions' chunks batched
                  into one llama_decode. A question is decoded on top of its session's sequence
                  (together with that session's data not decoded yet), its answer decoded token
                  by token, then the question and answer are removed with llama_memory_seq_rm,
                  so the sequence holds the data again.
  (c) prefix      prompt-prefix reuse only, as a server with a prompt cache and a pinned slot
                  does: nothing is decoded when data arrives; a question evaluates (session
                  context + question) reusing the longest cached prefix of its session's
                  sequence, i.e. the context as of its previous question, so only the data since
                  then plus the question are evaluated at question time.

Both modes batch like a continuous-batching server: each llama_decode carries one token of every
answer being decoded, then the prefill of waiting questions (arrival order), then (b only) data,
and, while a question waits or decodes, no more data than fills the step cap: --max-delay-ms
worth of tokens at the measured cost per token, at least 16 (rill's scheduler has had no such
floor for data in a question's step since 356b1d3; for llama.cpp, whose question prefill is not
chunked here, the floor measured better: docs/benchmarks.md); with no question open, data goes
in batches of up to n_batch (512). A question waits for the step in flight, like on rill. Same
model file, threads and F16 KV cache as `rill bench stream`; flash attention only with
--flash-attn (off is llama.cpp's CPU default and, at long contexts on the CPUs measured, its
faster mode: docs/benchmarks.md); greedy (arg-max) answers of exactly --answer tokens (no stop).

TTFT = from the question's arrival time (its tick) to the end of the llama_decode that gave its
first answer token (plus the arg-max); total = to its last token.

Export format (JSON, written by `rill bench stream --export FILE`):
  {"format": "rill-stream", "version": 1, "model", "seed", "sessions", "rate", "every",
   "answer", "context", "n_ctx", "threads", "attn" (rill's kernel), "max_delay_ms", "standing",
   "prompt_text", "prompt": [ids] (the shared system prompt, first in every session),
   "standing_text", "standing_tokens", "question_texts": [...], "question_tokens": [[ids]...],
   "streams": [{"session": i,
                "chunks": [{"t_ns": arrival since the start, "text": "AAPL 187.32 ...\\n",
                            "tokens": [ids]}...],
                "questions": [{"q": j, "kind": index into question_tokens, "t_ns",
                               "after": chunks before it, "context": tokens before it}...]}...]}

Output: JSON lines, the schema of `rill bench stream --json` (one line per question, then a
summary line per mode: TTFT p50/p90/p99 overall and per context bucket). Needs the oracle
tier: scripts/setup.sh --llama.

Usage: bench/stream_llama.py EXPORT.json [--modes persistent,prefix] [--threads 2]
                             [--json OUT.jsonl] [--model FILE] [--max-delay-ms 50] [--flash-attn]
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time

import numpy as np

import llama_cpp as L

GGML_TYPE_F16 = 1
MIN_CHUNK = 16


def pct(values, p):
    """Nearest-rank percentile (the definition rill bench stream uses); None when empty."""
    v = sorted(values)
    if not v:
        return None
    k = math.ceil(p * len(v))
    return v[min(max(k, 1), len(v)) - 1]


def buckets_for(context):
    edges, e = [], 256
    while True:
        edges.append(e)
        if e >= context or len(edges) == 8:
            return edges
        e *= 2


def bucket_of(edges, n):
    for e in edges:
        if n <= e:
            return e
    return edges[-1]


@L.llama_log_callback
def _quiet(level, text, user):  # noqa: ARG001 - llama.cpp's log goes nowhere
    pass


class Engine:
    """One llama.cpp context with K sequences and a batch to fill."""

    def __init__(self, model, k, n_ctx_seq, threads, n_batch, kv_unified, flash_attn):
        L.llama_log_set(_quiet, None)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(model.encode(), mp)
        if not self.model:
            sys.exit(f"stream_llama: cannot load {model}")
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        cp = L.llama_context_default_params()
        cp.n_ctx = k * n_ctx_seq
        cp.n_seq_max = k
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = (L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                              else L.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cp.type_k = GGML_TYPE_F16
        cp.type_v = GGML_TYPE_F16
        cp.kv_unified = kv_unified
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            sys.exit("stream_llama: cannot create the llama.cpp context")
        self.mem = L.llama_get_memory(self.ctx)
        self.n_batch = n_batch
        self.batch = L.llama_batch_init(n_batch, 0, 1)

    def close(self):
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def decode(self, items):
        """items: (token, pos, seq, logits) tuples, at most n_batch. Returns the seconds taken."""
        b = self.batch
        for i, (tok, pos, seq, lg) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if lg else 0
        b.n_tokens = len(items)
        t = time.perf_counter()
        rc = L.llama_decode(self.ctx, b)
        dt = time.perf_counter() - t
        if rc != 0:
            sys.exit(f"stream_llama: llama_decode returned {rc} ({len(items)} tokens)")
        return dt

    def argmax(self, i):
        p = L.llama_get_logits_ith(self.ctx, i)
        return int(np.ctypeslib.as_array(p, shape=(self.n_vocab,)).argmax())  # lowest id on ties

    def seq_rm(self, seq, p0):
        if not L.llama_memory_seq_rm(self.mem, seq, p0, -1):
            sys.exit(f"stream_llama: llama_memory_seq_rm({seq}, {p0}) failed")


class Question:
    def __init__(self, s, x, qtokens, arrival):
        self.s, self.q, self.kind, self.ctx_export = s, x["q"], x["kind"], x["context"]
        self.qtokens, self.arrival = qtokens, arrival
        self.todo = None  # tokens still to prefill (the session's pending data + the question)
        self.answer = []
        self.first = self.done = None
        self.context = 0  # tokens of the session's data under the question


def run(exp, eng, eager, max_delay_ms, n_answer, quiet):
    k = exp["sessions"]
    qtok = exp["question_tokens"]
    prompt = exp["prompt"]
    # Every sequence starts with the shared prompt (not timed).
    for s in range(k):
        L.llama_memory_seq_rm(eng.mem, s, -1, -1)
    items = [(t, i, s, False) for s in range(k) for i, t in enumerate(prompt)]
    for i in range(0, len(items), eng.n_batch):
        eng.decode(items[i:i + eng.n_batch])
    # The timeline: (t_ns, session, order, kind, payload); a question follows its chunk.
    ev = []
    for st in exp["streams"]:
        s = st["session"]
        for c, ch in enumerate(st["chunks"]):
            ev.append((ch["t_ns"], s, 2 * c, "data", ch["tokens"]))
        for qq in st["questions"]:
            ev.append((qq["t_ns"], s, 2 * (qq["after"] - 1) + 1, "q", qq))
    ev.sort(key=lambda e: (e[0], e[1], e[2]))
    n_data = [len(prompt)] * k  # tokens of data in each sequence (prompt included)
    arrived = [len(prompt)] * k  # tokens of data arrived (prompt included)
    pending = [[] for _ in range(k)]  # data arrived, not decoded
    active = [None] * k  # the question on each sequence
    waiting = [[] for _ in range(k)]  # further questions of a session, in order
    order = []  # active questions in arrival order
    results = []
    ns_per_tok = 0.0
    busy = idle = 0.0
    tok_data = tok_prefill = tok_decode = 0
    backlog_max = 0
    t0 = time.perf_counter() + 0.2
    i = 0
    last_note = t0
    while True:
        now = time.perf_counter()
        while i < len(ev) and t0 + ev[i][0] / 1e9 <= now:
            t_ns, s, _, kind, x = ev[i]
            i += 1
            if kind == "data":
                pending[s].extend(x)
                arrived[s] += len(x)
            else:
                q = Question(s, x, qtok[x["kind"]], t0 + t_ns / 1e9)
                q.upto = arrived[s]  # the data it must see: what arrived before it
                waiting[s].append(q)
        for s in range(k):
            if active[s] is None and waiting[s]:
                q = waiting[s].pop(0)
                # the data that arrived before it, then the question; data that arrived after
                # it (on an engine that is behind) waits until the answer is done
                cut = q.upto - n_data[s]
                q.todo = pending[s][:cut] + q.qtokens
                q.context = q.upto
                q.pos = n_data[s]
                pending[s] = pending[s][cut:]
                n_data[s] = q.upto
                active[s] = q
                order.append(q)
        backlog_max = max(backlog_max, sum(len(p) for p in pending))
        if i >= len(ev) and not order and (not eager or not any(pending)):
            break
        cap = eng.n_batch
        if order and max_delay_ms > 0 and ns_per_tok > 0:
            cap = int(min(eng.n_batch, max(MIN_CHUNK, max_delay_ms * 1e6 / ns_per_tok)))
        batch, outs = [], []
        for q in order:  # one token of every answer being decoded
            if q.todo is None:
                batch.append((q.answer[-1], q.pos, q.s, True))
                outs.append((q, len(batch) - 1))
                q.pos += 1
        n_dec = len(batch)
        for q in order:  # then the prefill of waiting questions, not capped: nothing is above it
            room = eng.n_batch - len(batch)
            if q.todo is None or room <= 0:
                continue
            take = q.todo[:room]
            q.todo = q.todo[room:]
            for j, t in enumerate(take):
                last = not q.todo and j == len(take) - 1
                batch.append((t, q.pos, q.s, last))
                q.pos += 1
                if last:
                    outs.append((q, len(batch) - 1))
            if not q.todo:
                q.todo = None
        n_pre = len(batch) - n_dec
        if eager:  # then data of sessions without a question, round robin
            room = (cap if order else eng.n_batch) - len(batch)
            sess = [s for s in range(k) if active[s] is None and pending[s]]
            while room > 0 and sess:
                share = max(1, room // len(sess))
                for s in list(sess):
                    take = pending[s][:min(share, room)]
                    pending[s] = pending[s][len(take):]
                    for t in take:
                        batch.append((t, n_data[s], s, False))
                        n_data[s] += 1
                    room -= len(take)
                    if not pending[s] or room <= 0:
                        sess.remove(s)
        if not batch:
            nxt = t0 + ev[i][0] / 1e9 if i < len(ev) else now + 0.001
            t = time.perf_counter()
            time.sleep(max(0.0, nxt - t))
            idle += time.perf_counter() - t
            continue
        dt = eng.decode(batch)
        busy += dt
        tok_decode += n_dec
        tok_prefill += n_pre
        tok_data += len(batch) - n_dec - n_pre
        if len(batch) >= 8:
            per = dt * 1e9 / len(batch)
            ns_per_tok = per if ns_per_tok == 0 else 0.8 * ns_per_tok + 0.2 * per
        for q, row in outs:
            tok = eng.argmax(row)
            t = time.perf_counter()
            if q.first is None:
                q.first = t
            q.answer.append(tok)
            if len(q.answer) == n_answer:
                q.done = t
                eng.seq_rm(q.s, q.context)  # the sequence holds the data again
                n_data[q.s] = q.context
                active[q.s] = None
                order.remove(q)
                results.append(q)
        if not quiet and time.perf_counter() - last_note > 10:
            last_note = time.perf_counter()
            print(f"stream_llama: {last_note - t0:.0f} s, {len(results)} questions answered, "
                  f"{sum(len(p) for p in pending)} tokens of data pending", file=sys.stderr)
    stats = {"utilization": busy / (busy + idle) if busy + idle > 0 else None,
             "stream_s": time.perf_counter() - t0, "tokens_ingest": tok_data,
             "tokens_prefill": tok_prefill, "tokens_decode": tok_decode,
             "backlog_max_tokens": backlog_max}
    return results, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export")
    ap.add_argument("--modes", default="persistent,prefix",
                    help="comma-separated: persistent (b), prefix (c)")
    ap.add_argument("--threads", type=int, default=None, help="default: the export's")
    ap.add_argument("--model", default=None, help="default: the export's")
    ap.add_argument("--json", default=None, help="default: EXPORT without .json + .llama.jsonl")
    ap.add_argument("--max-delay-ms", type=float, default=None,
                    help="step cap while questions wait or decode (default: the export's)")
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--kv-unified", action="store_true",
                    help="one KV stream shared by all sequences (default: one per sequence)")
    ap.add_argument("--flash-attn", action="store_true",
                    help="llama.cpp's flash attention (LLAMA_FLASH_ATTN_TYPE_ENABLED)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()

    exp = json.load(open(a.export))
    if exp.get("format") != "rill-stream" or exp.get("version") != 1:
        sys.exit(f"stream_llama: {a.export} is not a rill bench stream export")
    model = a.model or exp["model"]
    threads = a.threads or exp["threads"]
    max_delay = exp["max_delay_ms"] if a.max_delay_ms is None else a.max_delay_ms
    out = a.json or (a.export[:-5] if a.export.endswith(".json") else a.export) + ".llama.jsonl"
    edges = buckets_for(exp["context"])
    n_answer = exp["answer"]
    eng = Engine(model, exp["sessions"], exp["n_ctx"], threads, a.n_batch, a.kv_unified,
                 a.flash_attn)
    lines = []
    for mode in a.modes.split(","):
        if mode not in ("persistent", "prefix"):
            sys.exit(f"stream_llama: unknown mode {mode}")
        name = "llama_" + mode
        if not a.quiet:
            print(f"stream_llama: {name}: {exp['sessions']} sessions, threads {threads}",
                  file=sys.stderr)
        res, st = run(exp, eng, mode == "persistent", max_delay, n_answer, a.quiet)
        res.sort(key=lambda q: (q.s, q.q))
        ttft = []
        per_bucket = {e: [] for e in edges}
        for q in res:
            b = bucket_of(edges, q.ctx_export)
            t_ms = (q.first - q.arrival) * 1e3
            ttft.append(t_ms)
            per_bucket[b].append(t_ms)
            lines.append({"bench": "stream", "mode": name, "session": q.s, "q": q.q,
                          "kind": q.kind, "context": q.ctx_export, "bucket": b,
                          "n_question": len(q.qtokens), "status": "OK",
                          "ttft_ms": round(t_ms, 3),
                          "total_ms": round((q.done - q.arrival) * 1e3, 3),
                          "engine_ttft_ms": None, "engine_context": q.context,
                          "n_answer": len(q.answer), "answer": q.answer})
        p50 = pct(ttft, 0.5)
        p99 = pct(ttft, 0.99)
        summary = {"bench": "stream", "mode": name, "summary": True, "model": model,
                   "sessions": exp["sessions"], "rate": exp["rate"], "every": exp["every"],
                   "answer": n_answer, "context": exp["context"], "threads": threads,
                   "seed": exp["seed"], "kv": "f16", "kv_unified": a.kv_unified,
                   "flash_attn": a.flash_attn, "max_delay_ms": max_delay,
                   "llama_cpp_python": L.__version__, "questions": len(ttft), "failed": 0,
                   "ttft_p50_ms": p50, "ttft_p90_ms": pct(ttft, 0.9), "ttft_p99_ms": p99,
                   "p99_over_p50": p99 / p50 if p50 else None, **st,
                   "buckets": [{"le": e, "n": len(per_bucket[e]),
                                "ttft_p50_ms": pct(per_bucket[e], 0.5),
                                "ttft_p90_ms": pct(per_bucket[e], 0.9),
                                "ttft_p99_ms": pct(per_bucket[e], 0.99)} for e in edges]}
        lines.append(summary)
        print(f"{name}: TTFT p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(ttft)} questions; "
              f"utilization {100 * (st['utilization'] or 0):.1f}%; data backlog at most "
              f"{st['backlog_max_tokens']} tokens")
        for b in summary["buckets"]:
            if b["n"]:
                print(f"  context <= {b['le']}: {b['n']} questions, TTFT p50 "
                      f"{b['ttft_p50_ms']:.1f} ms, p99 {b['ttft_p99_ms']:.1f} ms")
    eng.close()
    with open(out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    print(f"stream_llama: wrote {out}")


if __name__ == "__main__":
    main()
