#!/usr/bin/env python3
"""rill against llama.cpp on a real GGUF file: logits bit for bit, greedy continuations token for
token.

For model files that are too large for CI (Qwen2.5-Coder-0.5B-Instruct Q4_K_M: 491 MB, fetched by
tools/fetch_model.py), this runs the comparison tests/test_forward.c makes on the tiny models and
the default model:

  logits  each prompt followed by llama.cpp's greedy continuation, evaluated from position 0 as
          one batch in both engines (`rill logits --all`, llama.cpp with logits_all), every
          position; reported as the number of positions whose n_vocab logits are bit-identical,
          the max |difference| and the top-1 agreement.
  greedy  N tokens decoded one at a time from the prompt (`rill generate --temp 0`, llama.cpp's
          greedy sampler, both stopping at an end-of-generation token): the generated text must be
          equal; the smallest top-1 margin of llama.cpp's steps is printed (a margin of ~0 would
          make a tie, not a bug, the likely cause of a difference).

Settings as tools/ref_logits.py: 2 threads, KV cache F32 in both, exact (non-flash) attention,
CPU only, llama.cpp's portable AVX2 build (tools/requirements-llama.txt). Prompts are tokenized
by llama.cpp (add_special, special-token parsing on), the same ids go to rill; rill's own
tokenizer is used by `rill generate` and must give the same ids (checked through its text).

Exit status 0 when every position of every prompt is bit-identical and every greedy text is equal;
1 otherwise (the report says where). Prints one JSON line at the end.

Usage: tools/parity_real_model.py [--rill build/cli/rill] [-n 32] MODEL.gguf
Needs the oracle tier: scripts/setup.sh --llama.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
N_THREADS = 2
GGML_TYPE_F32 = 0

PROMPTS = [
    "Translate into Spanish: In the beginning God created the heaven and the earth.\nSpanish:",
    "<|im_start|>system\nYou are a translator. Answer with the Spanish translation only."
    "<|im_end|>\n<|im_start|>user\nAnd the evening and the morning were the first day."
    "<|im_end|>\n<|im_start|>assistant\n",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "AAPL 187.32 +0.05 200 B\nMSFT 411.10 -1.25 1500 S\nQ: which symbol moved most?\nA:",
]


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def llama_greedy(llm: llama_cpp.Llama, prompt: list[int], n: int):
    """llama.cpp's greedy sampler from an empty cache: the tokens up to (not including) the first
    end-of-generation token, at most n, and the top-1 minus top-2 logit at each step."""
    smpl = llama_cpp.llama_sampler_init_greedy()
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    try:
        llm.reset()
        llm.eval(prompt)
        out, margins = [], []
        for _ in range(n):
            tok = int(llama_cpp.llama_sampler_sample(smpl, llm._ctx.ctx, -1))
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top2 = np.sort(row)[-2:]
            margins.append(float(top2[1] - top2[0]))
            if llama_cpp.llama_vocab_is_eog(vocab, tok):
                break
            out.append(tok)
            llm.eval([tok])
        return out, margins
    finally:
        llama_cpp.llama_sampler_free(smpl)


def llama_logits(llm: llama_cpp.Llama, ids: list[int]) -> np.ndarray:
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def rill_logits(rill: str, model: str, ids: list[int], n_vocab: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "logits.f32")
        subprocess.run([rill, "logits", "--model", model, "--tokens", ",".join(map(str, ids)),
                        "--all", "--out", out, "-t", str(N_THREADS), "--kv-type", "f32",
                        "--attn", "exact"], check=True, capture_output=True)
        return np.fromfile(out, dtype="<f4").reshape(len(ids), n_vocab)


def rill_generate(rill: str, model: str, prompt: str, n: int) -> str:
    r = subprocess.run([rill, "generate", "--model", model, "--prompt", prompt, "-n", str(n),
                        "--temp", "0", "--repeat-penalty", "1", "-t", str(N_THREADS),
                        "--kv-type", "f32", "--attn", "exact"],
                       check=True, capture_output=True)
    text = r.stdout.decode("utf-8")
    return text[:-1] if text.endswith("\n") else text  # generate ends its output with a newline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--rill", default=os.path.join(ROOT, "build", "cli", "rill"))
    ap.add_argument("-n", type=int, default=32, help="greedy tokens per prompt")
    args = ap.parse_args()

    llm = llama_cpp.Llama(args.model, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True, type_k=GGML_TYPE_F32,
                          type_v=GGML_TYPE_F32, flash_attn=False, n_gpu_layers=0, verbose=False)
    n_vocab = llm.n_vocab()
    ok = True
    results = []
    for i, text in enumerate(PROMPTS):
        ids = [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)]
        gen, margins = llama_greedy(llm, ids, args.n)
        want_text = llm.detokenize(gen, special=True).decode("utf-8", "replace")
        got_text = rill_generate(args.rill, args.model, text, args.n)
        greedy_ok = got_text == want_text

        seq = ids + gen
        want = llama_logits(llm, seq)
        got = rill_logits(args.rill, args.model, seq, n_vocab)
        same_rows = int(sum(np.array_equal(got[r].view(np.uint32), want[r].view(np.uint32))
                            for r in range(len(seq))))
        max_abs = float(np.abs(got.astype(np.float64) - want).max())
        top1 = int((got.argmax(axis=1) == want.argmax(axis=1)).sum())
        ok &= greedy_ok and same_rows == len(seq)
        res = {"prompt": i, "prompt_tokens": len(ids), "generated": len(gen),
               "greedy_text_equal": greedy_ok, "min_margin": min(margins) if margins else None,
               "positions": len(seq), "positions_bit_identical": same_rows,
               "max_abs_diff": max_abs, "top1_equal": top1}
        results.append(res)
        print(f"prompt {i}: {len(ids)} + {len(gen)} tokens; greedy text "
              f"{'equal' if greedy_ok else 'DIFFERENT'} (smallest margin "
              f"{res['min_margin']:.4g}); logits bit-identical at {same_rows}/{len(seq)} "
              f"positions, max|d| {max_abs:.3g}, top-1 {top1}/{len(seq)}")
        if not greedy_ok:
            print(f"  llama.cpp: {want_text!r}\n  rill:      {got_text!r}")
    llm.close()
    summary = {"tool": "parity_real_model", "model": os.path.basename(args.model),
               "sha256": sha256_file(args.model), "llama_cpp_python": llama_cpp.__version__,
               "threads": N_THREADS, "kv": "f32", "attn": "exact", "ok": bool(ok),
               "prompts": results}
    print(json.dumps(summary))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
