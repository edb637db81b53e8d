#!/usr/bin/env python3
"""`rill translate --text` as INTERFACES.md ("Translation") gives it, on the tiny qwen2 model
(random weights: the words are noise, the records are what is checked): the --json lines (an
emission's fields and types, src_words and compute_s that never go back, the final line whose
text is the emissions joined), wait-k's first emission after k words, the plain text output,
--help, and clear errors (no --text, both --text and --audio, --asr or --pace without --audio,
a missing file, an unknown policy, a file that is not a
model, a model without a chat template, the default model not cached, sizes that do not fit).

Usage: test_translate_cli.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without the tiny models.
Prints 'N passed, N failed' last.
"""
import json
import os
import subprocess
import sys
import tempfile

RILL, SRC = sys.argv[1], sys.argv[2]
MODELS = os.path.join(SRC, "tests", "data", "models")
QWEN = os.path.join(MODELS, "rill-tiny-qwen2-F32.gguf")
LLAMA = os.path.join(MODELS, "rill-tiny-llama-F32.gguf")
# the tiny model's context is 256 positions
SMALL = ["--ctx", "256", "--window", "128", "--max-reply", "24", "-t", "1",
         "--instruction", "Translate into Spanish."]
TALK = ["the cat sat on the mat and the dog ran", "a bird sang in the tall green tree",
        "we walk to the river every day"]
results = []


def run(*args, ok=(0,), env=None, timeout=300):
    p = subprocess.run([RILL, "translate", *args], capture_output=True, timeout=timeout,
                       cwd=SRC, env=env)
    if p.returncode not in ok:
        raise AssertionError(f"rill translate {' '.join(args)}: exit {p.returncode}\n"
                             f"{p.stderr.decode(errors='replace')}")
    return p


def check(name, fn):
    try:
        fn()
        results.append((name, None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, e))


tmp = tempfile.mkdtemp(prefix="rill-translate-cli-")
talk_path = os.path.join(tmp, "talk.txt")
with open(talk_path, "w") as f:
    f.write("".join(s + "\n" for s in TALK) + "\n")  # and an empty line, which is skipped
N_WORDS = sum(len(s.split()) for s in TALK)


def records(policy):
    p = run("--model", QWEN, "--policy", policy, "--json", "--text", talk_path, *SMALL)
    lines = p.stdout.decode("utf-8").splitlines()  # strict: the lines are valid UTF-8
    return [json.loads(l) for l in lines]


def json_lines():
    for policy in ("local-agreement", "wait-2", "sentence"):
        recs = records(policy)
        assert recs, policy
        *emits, final = recs
        assert final.get("final") is True, final
        assert set(final) == {"final", "text", "compute_s"}, final
        last_src, last_cs = 0, 0.0
        for r in emits:
            assert set(r) == {"emit", "src_words", "compute_s"}, r
            assert isinstance(r["emit"], str) and r["emit"].strip() == r["emit"] != "", r
            assert isinstance(r["src_words"], int) and 1 <= r["src_words"] <= N_WORDS, r
            assert r["src_words"] >= last_src and r["compute_s"] >= last_cs, (policy, r)
            last_src, last_cs = r["src_words"], r["compute_s"]
        assert final["text"] == " ".join(r["emit"] for r in emits), (policy, final)
        assert final["compute_s"] >= last_cs > 0, (policy, final)
        if policy == "sentence":  # whole sentences: one emission at most per sentence end
            ends, at = set(), 0
            for s in TALK:
                at += len(s.split())
                ends.add(at)
            assert all(r["src_words"] in ends for r in emits), emits
        if policy == "wait-2":
            assert emits[0]["src_words"] >= 2, emits[0]


def plain_output():
    p = run("--model", QWEN, "--policy", "sentence", "--text", talk_path, *SMALL)
    out = p.stdout.decode("utf-8", errors="replace")
    j = records("sentence")
    assert " ".join(out.split()) == " ".join(j[-1]["text"].split()) or "\ufffd" in out, out
    assert "source words" in p.stderr.decode(), p.stderr


def help_text():
    p = run("--help")
    h = p.stdout.decode()
    for opt in ("--model", "--policy", "--json", "--text", "--audio", "--asr", "--pace",
                "local-agreement", "wait-k", "sentence"):
        assert opt in h, opt
    assert "not built yet" not in h


def errors():
    def err(args, code, *want, env=None):
        p = run(*args, ok=(code,), env=env)
        msg = p.stderr.decode()
        for w in want:
            assert w in msg, (args, msg)
        assert p.stdout == b"", (args, p.stdout)

    err(["--model", QWEN], 2, "--text")
    err(["--model", QWEN, "--text", os.path.join(tmp, "nope.txt")], 1, "nope.txt",
        "No such file")
    err(["--model", QWEN, "--policy", "wait-zero", "--text", talk_path], 2, "unknown --policy",
        "wait-zero")
    err(["--model", talk_path, "--text", talk_path, *SMALL], 1, "cannot load")
    err(["--model", LLAMA, "--text", talk_path, *SMALL], 1, "no chat template")
    err(["--model", QWEN, "--text", talk_path, "--ctx", "256", "--window", "200"], 2,
        "--window")
    err(["--model", QWEN, "--text", talk_path, "--ctx", "4096", "--window", "128",
         "--max-reply", "24"], 1, "training context")
    err(["--audio", talk_path, "--text", talk_path], 2, "either --text FILE or --audio FILE")
    err(["--text", talk_path, "--asr", talk_path], 2, "--asr and --pace go with --audio")
    err(["--text", talk_path, "--pace", "1"], 2, "--asr and --pace go with --audio")
    env = dict(os.environ, RILL_CACHE=os.path.join(tmp, "empty-cache"))
    err(["--text", talk_path], 1, "tools/fetch_model.py qwen2.5-coder-1.5b-instruct",
        env=env)


if not (os.path.exists(QWEN) and os.path.exists(LLAMA)):
    print(f"SKIP: {QWEN} is missing: run tools/make_test_models.py")
    sys.exit(77)
check("json_lines", json_lines)
check("plain_output", plain_output)
check("help_text", help_text)
check("errors", errors)
failed = [(n, e) for n, e in results if e is not None]
for n, e in results:
    print(("FAIL " if e else "ok   ") + n + (f": {e}" if e else ""))
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
