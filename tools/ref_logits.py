#!/usr/bin/env python3
"""Records llama.cpp reference outputs that rill's C tests compare against.

llama.cpp (through llama-cpp-python) is the outside oracle: everything written here comes from a
llama.cpp run on the same GGUF file, except the optional "exact" logits, which come from
tools/np_forward.py (float64 numpy, dequantized weights). Nothing is hard-coded except the inputs
(token sequences, prompts, texts).

Writes into --out (default tests/data/ref/):

  tiny/<model>.f32          llama.cpp logits for every position of the two fixed sequences of the
                            model's architecture (sequence "a", 16 tokens, then "b", 40 tokens):
                            float32 little-endian, row-major (position, vocab), rows of a then b
  tiny/<model>.exact.f32    np_forward.py's logits (float64 math on dequantized weights, no
                            activation rounding) for sequence "a" only, for the llama models whose
                            weights are not F32, one per weight type (same layout); kept to llama
                            only to stay near 2 MB in all
  smollm2/last_logits.f32   default model: logits of the LAST position of each of 3 sequences
                            (3 rows of n_vocab float32)
  <model>.gguf.inp / .out   tokenizer cases in the format of shared/testdata/tokenizer (strings
                            separated by "\\n__ggml_vocab_test__\\n"; one line of " id id ..." per
                            string; special-token parsing off; no BOS/EOS added), for the default
                            model and the two tiny vocabularies
  logits.tsv                one line per logits block (file, byte offset, rows, n_vocab, model,
                            model sha256, positions "all"/"last", token ids, top-1 id per position)
  greedy.tsv                default model: greedy 64-token continuations of 5 prompts
  index.json                everything above plus llama.cpp version and run settings

llama.cpp settings: n_threads 2, n_ctx 256 (tiny) / 1024 (default), n_batch = n_ubatch = n_ctx (a
sequence is one batch), KV cache F32 (type_k = type_v = F32; llama.cpp's own default is F16),
flash attention off, mmap on, CPU only. Greedy decoding uses llama.cpp's greedy sampler (no
penalties, temperature 0) and keeps going past end-of-generation tokens.

With --flash, writes only --out/flash/ (nothing above is touched): references for rill's flash
attention kernel, from llama.cpp with flash_attn=True and an F16 KV cache (type_k = type_v = F16),
other settings as above:

  flash/tiny-<model>.f32    every position of sequences a then b (as tiny/<model>.f32) for the
                            models in FLASH_TINY
  flash/smollm2_last.f32    default model: last-position logits of DEFAULT_LOGIT_TEXTS[2] (one
                            row of n_vocab float32); the top-1 of every position of all three
                            sequences is in flash/logits.tsv
  flash/logits.tsv          as logits.tsv; rows 0 and file "-" for a top-1-only line
  flash/index.json          settings, plus llama.cpp's own flash-vs-non-flash differences (F16
                            cache, flash on, against F32 cache, flash off) per block

Usage: ref_logits.py [--models tests/data/models] [--default-model models/SmolLM2-...gguf]
                     [--out tests/data/ref] [--skip-default] [--skip-tiny] [--flash]
The tiny models must exist (tools/make_test_models.py) and match the SHA256SUMS it wrote.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import make_test_models  # noqa: E402
import np_forward  # noqa: E402

import llama_cpp  # noqa: E402

# llama.cpp commit vendored by each llama-cpp-python release (from the package's CHANGELOG).
LLAMA_CPP_COMMIT = {"0.3.36": "0c1e57098"}

N_THREADS = 2
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1

# --flash: the tiny models recorded (both architectures, and the SmolLM2-like mixed Q8_0/Q4_1
# tied model) and the default-model sequence whose last-position logits are stored; kept to this
# to stay near 400 KB.
FLASH_TINY = ["rill-tiny-llama-F32.gguf", "rill-tiny-qwen2-F32.gguf",
              "rill-tiny-llama-tied-Q4_1.gguf"]
FLASH_DEFAULT_LOGITS = 2
SEQ_LENS = {"a": 16, "b": 40}
N_GENERATE = 64

# ------------------------------------------------------------------------------------------------
# Inputs


def tiny_sequences(arch: str, n_vocab: int, bos: int | None) -> dict[str, list[int]]:
    """Fixed pseudo-random token sequences over the whole vocabulary (control and byte tokens
    included); llama's start with BOS because its vocabulary adds BOS."""
    rng = np.random.default_rng({"llama": 1601, "qwen2": 1602}[arch])
    out = {}
    for name, n in SEQ_LENS.items():
        ids = [int(t) for t in rng.integers(0, n_vocab, n)]
        if bos is not None:
            ids[0] = bos
        out[name] = ids
    return out


DEFAULT_LOGIT_TEXTS = [
    # (parse_special, text)
    (False, "The quick brown fox jumps over the lazy dog."),
    (True, None),  # the chat template rendered for a user question, see chat_prompt()
    (False, "AAPL 187.32 +0.05 200 B\nMSFT 411.10 -1.25 1500 S\nNVDA 903.55 +12.40 80 B\n"
            "AAPL 187.35 +0.03 100 B\nQ: which symbol moved most?\nA:"),
]

GREEDY_PROMPTS = [
    (False, "The history of the printing press begins"),
    (True, None),  # chat template, see chat_prompt()
    (False, 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    (False, "AAPL 187.32 +0.05 200 B\nMSFT 411.10 -1.25 1500 S\nAAPL 187.35 +0.03 100 B\nMSFT"),
    (False, "Here is a list of the planets in order from the sun:\n1."),
]

TOKENIZER_TEXTS = [
    "Hello world",
    " Hello world",
    "Hello, world! How are you today?",
    "",
    " ",
    "   ",
    "\t",
    "\n",
    "\n\n\n",
    "\t\n \t  \n",
    "a  b   c    d     e",
    "line one\nline two\r\nline three",
    "The quick brown fox jumps over the lazy dog.",
    "It's 3:45pm; she'd said they'll arrive at 10:00, wouldn't they?",
    "1234567890",
    "3.14159 2.71828 -0.5 +1e-9 1,000,000 0x1F",
    "AAPL 187.32 +0.05 200 B",
    "MSFT 411.10 -1.25 1500 S\nNVDA 903.55 +12.40 80 B\n",
    "EUR/USD 1.08420 bid 1.08425 ask",
    "BTC-USD 67012.5 \u25b20.8% vol=12.3k",
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    'int main(void) { printf("%d\\n", 42); return 0; }',
    "for (i = 0; i < 10; ++i) {\n\tsum += a[i];\n}",
    '{"key": [1, 2, 3], "ok": true, "nested": {"x": null}}',
    '<div class="x">&amp; &lt;tag&gt;</div>',
    "https://example.com/path/to?q=1&r=two#frag",
    "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u00e0 la fran\u00e7aise, na\u00efve fa\u00e7ade",
    "\u00c5ngstr\u00f6m \u00d8resund \u0141\u00f3d\u017a Stra\u00dfe",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! "
    "\u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc785\ub2c8\ub2e4",
    "\U0001f642 \U0001f680\U0001f525 \U0001f44d\U0001f3fd "
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "emoji in text: I \u2764\ufe0f NY \U0001f355!",
    "    indented with four spaces",
    "trailing spaces   ",
    "MiXeD CaSe and ALLCAPS and snake_case_names and camelCaseNames",
    "<|im_start|>user\nhi<|im_end|>",
    "'''''' \"\"\"\" ...... !!!!!! ?????? ------",
    "Mixed: price=187.32\u20ac, \u0394=+0.05, \u65e5\u672c, \U0001f642, tab\there\n\n  end",
]

# ------------------------------------------------------------------------------------------------
# llama.cpp helpers


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path: str, n_ctx: int, flash: bool = False) -> llama_cpp.Llama:
    """flash False: the main references' settings (F32 cache, no flash attention); True: flash
    attention with an F16 cache."""
    kv_type = GGML_TYPE_F16 if flash else GGML_TYPE_F32
    return llama_cpp.Llama(
        path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=N_THREADS,
        n_threads_batch=N_THREADS, logits_all=True, type_k=kv_type, type_v=kv_type,
        flash_attn=flash, n_gpu_layers=0, verbose=False)


def eval_logits(llm: llama_cpp.Llama, ids: list[int]) -> np.ndarray:
    """Logits (len(ids), n_vocab) float32 for one sequence from an empty KV cache (reset() sets
    n_tokens to 0 and eval() then drops every cached cell from position 0 on)."""
    llm.reset()
    llm.eval(ids)
    out = np.array(llm.scores[: len(ids)], dtype=np.float32)
    check_logits(out, f"{len(ids)} tokens")
    return out


def check_logits(logits: np.ndarray, what: str) -> None:
    if not np.isfinite(logits).all():
        raise SystemExit(f"non-finite logits ({what})")
    if float(logits.std()) < 0.1:
        raise SystemExit(f"degenerate logits, std {logits.std():.3g} ({what})")


def greedy(llm: llama_cpp.Llama, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """llama.cpp's greedy sampler, n tokens, ignoring end-of-generation. Also returns the logit
    margin between the chosen token and the runner-up at each step (near-ties flip easily)."""
    smpl = llama_cpp.llama_sampler_init_greedy()
    try:
        llm.reset()
        llm.eval(prompt)
        out, margins = [], []
        for _ in range(n):
            tok = int(llama_cpp.llama_sampler_sample(smpl, llm._ctx.ctx, -1))
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top2 = np.sort(row)[-2:]
            if int(row.argmax()) != tok:
                raise SystemExit("greedy sampler disagrees with argmax of the logits")
            out.append(tok)
            margins.append(float(top2[1] - top2[0]))
            llm.eval([tok])
        return out, margins
    finally:
        llama_cpp.llama_sampler_free(smpl)


def tokenize(llm: llama_cpp.Llama, text: str, add_special: bool, parse_special: bool) -> list[int]:
    return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=add_special,
                                         special=parse_special)]


def write_vocab_cases(llm: llama_cpp.Llama, out_dir: str, model_file: str) -> dict:
    """X.gguf.inp / X.gguf.out in the format of shared/testdata/tokenizer (special-token parsing
    off, no BOS/EOS added)."""
    base = os.path.join(out_dir, os.path.basename(model_file))
    with open(base + ".inp", "w", encoding="utf-8", newline="") as f:
        for t in TOKENIZER_TEXTS:
            f.write(t + "\n__ggml_vocab_test__\n")
    with open(base + ".out", "w", encoding="utf-8", newline="") as f:
        for t in TOKENIZER_TEXTS:
            ids = tokenize(llm, t, add_special=False, parse_special=False)
            f.write("".join(f" {i}" for i in ids) + "\n")
    return {"inp": os.path.basename(base) + ".inp", "out": os.path.basename(base) + ".out",
            "n_cases": len(TOKENIZER_TEXTS), "add_special": False, "parse_special": False}


def settings(n_ctx: int, flash: bool = False) -> dict:
    kv_type = "F16" if flash else "F32"
    return {"n_threads": N_THREADS, "n_ctx": n_ctx, "n_batch": n_ctx, "n_ubatch": n_ctx,
            "type_k": kv_type, "type_v": kv_type, "flash_attn": flash, "n_gpu_layers": 0}


def tsv_ids(ids) -> str:
    return ",".join(str(int(i)) for i in ids)


# ------------------------------------------------------------------------------------------------
# Tiny models


def do_tiny(models_dir: str, out_dir: str, index: dict, tsv: list[str]) -> None:
    sums = {}
    sums_path = os.path.join(models_dir, "SHA256SUMS")
    if not os.path.exists(sums_path):
        raise SystemExit(f"{sums_path} missing: run tools/make_test_models.py first")
    for line in open(sums_path):
        digest, name = line.split()
        sums[name] = digest
    tiny_dir = os.path.join(out_dir, "tiny")
    os.makedirs(tiny_dir, exist_ok=True)
    index["tiny"] = {"settings": settings(256), "sequences": {}, "models": []}
    vocab_done = set()
    for fname, arch, tied, overrides, wtype, _ in make_test_models.model_specs():
        path = os.path.join(models_dir, fname)
        digest = sha256_file(path)
        if digest != sums.get(fname):
            raise SystemExit(f"{fname}: sha256 {digest} does not match SHA256SUMS")
        llm = load(path, 256)
        n_vocab = llm.n_vocab()
        add_bos = bool(llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true")
        seqs = tiny_sequences(arch, n_vocab, llm.token_bos() if add_bos else None)
        index["tiny"]["sequences"][arch] = seqs
        stem = fname[: -len(".gguf")]
        rel = f"tiny/{stem}.f32"
        offset = 0
        blocks = []
        with open(os.path.join(out_dir, rel), "wb") as f:
            for sname, ids in seqs.items():
                logits = eval_logits(llm, ids)
                top1 = logits.argmax(axis=1)
                if len(set(top1.tolist())) < 3:
                    raise SystemExit(f"{fname}: top-1 nearly constant over positions")
                f.write(logits.astype("<f4").tobytes())
                blocks.append({"sequence": sname, "offset": offset, "rows": len(ids),
                               "top1": top1.tolist()})
                tsv.append("\t".join([rel, str(offset), str(len(ids)), str(n_vocab), fname, digest,
                                      "all", tsv_ids(ids), tsv_ids(top1)]))
                offset += logits.nbytes
        entry = {"model": fname, "sha256": digest, "arch": arch, "tied": tied,
                 "weight_type": wtype, "overrides": overrides, "n_vocab": n_vocab,
                 "file": rel, "blocks": blocks}

        # numpy cross-check: F32 weights must agree closely; others are stored as "exact" refs.
        m = np_forward.Model(path)
        exact_a = m.forward(seqs["a"]).astype(np.float32)
        lc_a = np.fromfile(os.path.join(out_dir, rel), dtype="<f4",
                           count=len(seqs["a"]) * n_vocab).reshape(len(seqs["a"]), n_vocab)
        d = float(np.abs(exact_a - lc_a).max())
        entry["np_forward_max_abs_diff_a"] = d
        if wtype == "F32" and d > 1e-4:
            raise SystemExit(f"{fname}: numpy forward differs from llama.cpp by {d}")
        if wtype != "F32" and arch == "llama":
            erel = f"tiny/{stem}.exact.f32"
            exact_a.astype("<f4").tofile(os.path.join(out_dir, erel))
            entry["exact"] = {"file": erel, "sequence": "a", "rows": len(seqs["a"]),
                              "source": "tools/np_forward.py (float64, dequantized weights)"}
            tsv.append("\t".join([erel, "0", str(len(seqs["a"])), str(n_vocab), fname, digest,
                                  "all-exact", tsv_ids(seqs["a"]),
                                  tsv_ids(exact_a.argmax(axis=1))]))
        print(f"{fname:34s} n_vocab {n_vocab}  numpy-vs-llama.cpp max|d| (seq a) {d:.3g}")

        if arch not in vocab_done:
            entry["tokenizer_cases"] = write_vocab_cases(llm, out_dir, fname)
            vocab_done.add(arch)
        index["tiny"]["models"].append(entry)
        llm.close()


# ------------------------------------------------------------------------------------------------
# Default model


def chat_prompt(llm: llama_cpp.Llama, question: str) -> str:
    """Renders the model's own chat template (tokenizer.chat_template) with jinja2."""
    import jinja2
    tmpl = llm.metadata["tokenizer.chat_template"]
    env = jinja2.Environment(loader=jinja2.BaseLoader(), keep_trailing_newline=True)
    return env.from_string(tmpl).render(messages=[{"role": "user", "content": question}],
                                        add_generation_prompt=True)


def do_default(model_path: str, out_dir: str, index: dict, tsv: list[str], gtsv: list[str]) -> None:
    digest = sha256_file(model_path)
    fname = os.path.basename(model_path)
    llm = load(model_path, 1024)
    n_vocab = llm.n_vocab()
    md = llm.metadata
    sub = os.path.join(out_dir, "smollm2")
    os.makedirs(sub, exist_ok=True)
    info = {"model": fname, "sha256": digest, "n_vocab": n_vocab, "settings": settings(1024),
            "metadata": {k: md.get(k) for k in (
                "general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre",
                "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
                "tokenizer.ggml.add_space_prefix", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                "tokenizer.ggml.padding_token_id", "tokenizer.chat_template")},
            "token_bos": llm.token_bos(), "token_eos": llm.token_eos()}

    # (a) last-position logits of 3 sequences, plus top-1 at every position
    rel = "smollm2/last_logits.f32"
    seqs = []
    with open(os.path.join(out_dir, rel), "wb") as f:
        for i, (special, text) in enumerate(DEFAULT_LOGIT_TEXTS):
            if text is None:
                text = chat_prompt(llm, "What is the capital of France?")
            ids = tokenize(llm, text, add_special=True, parse_special=special)
            logits = eval_logits(llm, ids)
            top1 = logits.argmax(axis=1)
            last = logits[-1].astype("<f4")
            f.write(last.tobytes())
            seqs.append({"text": text, "parse_special": special, "add_special": True,
                         "tokens": ids, "offset": i * n_vocab * 4, "rows": 1,
                         "top1": top1.tolist()})
            tsv.append("\t".join([rel, str(i * n_vocab * 4), "1", str(n_vocab), fname, digest,
                                  "last", tsv_ids(ids), tsv_ids(top1)]))
            print(f"{fname}: sequence {i}: {len(ids)} tokens, last top-1 {int(top1[-1])} "
                  f"{llm.detokenize([int(top1[-1])])!r}")
    info["last_logits"] = {"file": rel, "sequences": seqs}

    # (b) greedy continuations
    gens = []
    for i, (special, text) in enumerate(GREEDY_PROMPTS):
        if text is None:
            text = chat_prompt(llm, "Give me three tips for writing clear code.")
        ids = tokenize(llm, text, add_special=True, parse_special=special)
        out, margins = greedy(llm, ids, N_GENERATE)
        eog = [j for j, t in enumerate(out) if llama_cpp.llama_vocab_is_eog(
            llama_cpp.llama_model_get_vocab(llm.model), t)]
        gens.append({"prompt": text, "parse_special": special, "add_special": True,
                     "prompt_tokens": ids, "generated": out, "margins": margins,
                     "first_eog": eog[0] if eog else None,
                     "generated_text": llm.detokenize(out, special=True).decode("utf-8",
                                                                                "replace")})
        gtsv.append("\t".join([fname, digest, str(i), "1" if special else "0", json.dumps(text),
                               tsv_ids(ids), tsv_ids(out),
                               ",".join(f"{m:.4f}" for m in margins)]))
        print(f"{fname}: prompt {i}: {len(ids)} tokens -> {gens[-1]['generated_text'][:60]!r}")
    info["greedy"] = gens

    # (c) tokenizer cases
    info["tokenizer_cases"] = write_vocab_cases(llm, out_dir, fname)
    index["default"] = info
    llm.close()


# ------------------------------------------------------------------------------------------------
# Flash attention references (--flash)


def do_flash(models_dir: str, default_model: str | None, out_dir: str, index: dict,
             tsv: list[str]) -> None:
    sub = os.path.join(out_dir, "flash")
    os.makedirs(sub, exist_ok=True)
    if models_dir is not None:
        sums = {}
        for line in open(os.path.join(models_dir, "SHA256SUMS")):
            digest, name = line.split()
            sums[name] = digest
        specs = {spec[0]: spec for spec in make_test_models.model_specs()}
        index["tiny"] = {"settings": settings(256, flash=True), "models": []}
        for fname in FLASH_TINY:
            path = os.path.join(models_dir, fname)
            digest = sha256_file(path)
            if digest != sums.get(fname):
                raise SystemExit(f"{fname}: sha256 {digest} does not match SHA256SUMS")
            arch = specs[fname][1]
            llm = load(path, 256, flash=True)
            base = load(path, 256)
            n_vocab = llm.n_vocab()
            add_bos = bool(llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true")
            seqs = tiny_sequences(arch, n_vocab, llm.token_bos() if add_bos else None)
            rel = f"flash/tiny-{fname[: -len('.gguf')]}.f32"
            offset = 0
            blocks = []
            with open(os.path.join(out_dir, rel), "wb") as f:
                for sname, ids in seqs.items():
                    logits = eval_logits(llm, ids)
                    plain = eval_logits(base, ids)
                    top1 = logits.argmax(axis=1)
                    d = float(np.abs(logits - plain).max())
                    f.write(logits.astype("<f4").tobytes())
                    blocks.append({"sequence": sname, "offset": offset, "rows": len(ids),
                                   "top1": top1.tolist(), "max_abs_diff_vs_non_flash_f32_kv": d,
                                   "top1_equal_non_flash": int((top1 == plain.argmax(1)).sum())})
                    tsv.append("\t".join([rel, str(offset), str(len(ids)), str(n_vocab), fname,
                                          digest, "all", tsv_ids(ids), tsv_ids(top1)]))
                    offset += logits.nbytes
                    print(f"flash {fname:32s} seq {sname}: llama.cpp flash vs non-flash "
                          f"max|d| {d:.3g}")
            index["tiny"]["models"].append({"model": fname, "sha256": digest, "arch": arch,
                                            "file": rel, "blocks": blocks})
            llm.close()
            base.close()
    if default_model is not None:
        digest = sha256_file(default_model)
        fname = os.path.basename(default_model)
        llm = load(default_model, 1024, flash=True)
        base = load(default_model, 1024)
        n_vocab = llm.n_vocab()
        rel = "flash/smollm2_last.f32"
        seqs = []
        for i, (special, text) in enumerate(DEFAULT_LOGIT_TEXTS):
            if text is None:
                text = chat_prompt(llm, "What is the capital of France?")
            ids = tokenize(llm, text, add_special=True, parse_special=special)
            logits = eval_logits(llm, ids)
            plain = eval_logits(base, ids)
            top1 = logits.argmax(axis=1)
            d = float(np.abs(logits[-1] - plain[-1]).max())
            keep = i == FLASH_DEFAULT_LOGITS
            if keep:
                logits[-1].astype("<f4").tofile(os.path.join(out_dir, rel))
            seqs.append({"tokens": ids, "top1": top1.tolist(), "file": rel if keep else None,
                         "last_max_abs_diff_vs_non_flash_f32_kv": d,
                         "top1_equal_non_flash": int((top1 == plain.argmax(1)).sum())})
            tsv.append("\t".join([rel if keep else "-", "0", "1" if keep else "0", str(n_vocab),
                                  fname, digest, "last", tsv_ids(ids), tsv_ids(top1)]))
            print(f"flash {fname}: sequence {i}: {len(ids)} tokens, last-position llama.cpp "
                  f"flash vs non-flash max|d| {d:.3g}, top-1 equal "
                  f"{seqs[-1]['top1_equal_non_flash']}/{len(ids)}")
        index["default"] = {"model": fname, "sha256": digest, "n_vocab": n_vocab,
                            "settings": settings(1024, flash=True), "sequences": seqs}
        llm.close()
        base.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "tests", "data", "models"))
    ap.add_argument("--default-model",
                    default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "ref"))
    ap.add_argument("--skip-tiny", action="store_true")
    ap.add_argument("--skip-default", action="store_true")
    ap.add_argument("--flash", action="store_true",
                    help="write only the flash-attention references (--out/flash/)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    ver = llama_cpp.__version__
    index = {"format": 1,
             "generator": "tools/ref_logits.py",
             "llama_cpp_python": ver,
             "llama_cpp_commit": LLAMA_CPP_COMMIT.get(ver, "unknown"),
             "system_info": llama_cpp.llama_print_system_info().decode().strip(),
             "machine": platform.machine(),
             "numpy": np.__version__,
             "layout": "float32 little-endian, row-major (position, vocab)"}
    tsv = ["#file\toffset\trows\tn_vocab\tmodel\tmodel_sha256\tpositions\ttokens\ttop1"]
    if args.flash:
        do_flash(None if args.skip_tiny else args.models,
                 None if args.skip_default else args.default_model, args.out, index, tsv)
        sub = os.path.join(args.out, "flash")
        with open(os.path.join(sub, "index.json"), "w", encoding="utf-8") as f:
            json.dump(index, f, indent=1, ensure_ascii=False)
            f.write("\n")
        with open(os.path.join(sub, "logits.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(tsv) + "\n")
        total = sum(os.path.getsize(os.path.join(sub, fn)) for fn in os.listdir(sub))
        print(f"wrote {sub} ({total} bytes)")
        return 0
    gtsv = ["#model\tmodel_sha256\tprompt_id\tparse_special\tprompt_json\tprompt_tokens"
            "\tgenerated\tmargins"]
    if not args.skip_tiny:
        do_tiny(args.models, args.out, index, tsv)
    if not args.skip_default:
        do_default(args.default_model, args.out, index, tsv, gtsv)
    with open(os.path.join(args.out, "index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(args.out, "logits.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join(tsv) + "\n")
    if not args.skip_default:
        with open(os.path.join(args.out, "greedy.tsv"), "w", encoding="utf-8") as f:
            f.write("\n".join(gtsv) + "\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(args.out)
                for fn in fns)
    print(f"wrote {args.out} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
