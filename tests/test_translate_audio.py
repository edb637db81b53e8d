#!/usr/bin/env python3
"""`rill translate --audio` as INTERFACES.md ("Translation") gives it: Whisper tiny.en on a
short espeak-ng clip of two sentences (made here, deterministically: espeak-ng's en-us voice at
150 words per minute), feeding the tiny qwen2 model (random weights: the Spanish is noise, the
records are what is checked). The --json lines: an emission's fields ({emit, src_s, src_words,
compute_s}), src_s and compute_s that never go back, the final line ({final, text, src_s,
transcript, compute_s}: the emissions joined, src_s the clip's length, the recognizer's
committed transcript); with the sentence policy every emission comes at the end of a sentence
of that transcript, and the first sentence is translated before the clip has been
consumed (the translation streams); errors (a missing clip, an --asr that is not Whisper).

Usage: test_translate_audio.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without
models/whisper-tiny.en.gguf, the tiny models or espeak-ng. Prints 'N passed, N failed' last.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import wave

RILL, SRC = sys.argv[1], sys.argv[2]
ASR = os.path.join(SRC, "models", "whisper-tiny.en.gguf")
QWEN = os.path.join(SRC, "tests", "data", "models", "rill-tiny-qwen2-F32.gguf")
SMALL = ["--model", QWEN, "--ctx", "256", "--window", "128", "--max-reply", "24", "-t", "2",
         "--instruction", "Translate into Spanish."]
SPEECH = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
results = []


def run(cmd, *args, ok=(0,), timeout=400):
    p = subprocess.run([RILL, cmd, *args], capture_output=True, timeout=timeout, cwd=SRC)
    if p.returncode not in ok:
        raise AssertionError(f"rill {cmd} {' '.join(args)}: exit {p.returncode}\n"
                             f"{p.stderr.decode(errors='replace')}")
    return p


def check(name, fn):
    try:
        fn()
        results.append((name, None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, e))


if not (os.path.exists(ASR) and os.path.exists(QWEN) and shutil.which("espeak-ng")):
    print("SKIP: needs models/whisper-tiny.en.gguf, the tiny models and espeak-ng")
    sys.exit(77)
tmp = tempfile.mkdtemp(prefix="rill-translate-audio-")
CLIP = os.path.join(tmp, "two.wav")
subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", CLIP, SPEECH], check=True)
with wave.open(CLIP) as w:
    CLIP_S = w.getnframes() / w.getframerate()

def records(policy):
    p = run("translate", "--json", "--asr", ASR, "--policy", policy, "--audio", CLIP, *SMALL)
    recs = [json.loads(l) for l in p.stdout.decode("utf-8").splitlines()]  # strict UTF-8
    assert recs, policy
    *emits, final = recs
    assert set(final) == {"final", "text", "src_s", "transcript", "compute_s"}, final
    ends, n_words = sentence_ends(final["transcript"])
    assert final["final"] is True
    assert abs(final["src_s"] - CLIP_S) < 0.01, (final, CLIP_S)
    last_s, last_c, last_w = 0.0, 0.0, 0
    for r in emits:
        assert set(r) == {"emit", "src_s", "src_words", "compute_s"}, r
        assert isinstance(r["emit"], str) and r["emit"].strip() == r["emit"] != "", r
        assert last_s <= r["src_s"] <= final["src_s"], (policy, r)
        assert last_c <= r["compute_s"] <= final["compute_s"], (policy, r)
        assert last_w <= r["src_words"] <= n_words, (policy, r)
        last_s, last_c, last_w = r["src_s"], r["compute_s"], r["src_words"]
    assert final["text"] == " ".join(r["emit"] for r in emits), final
    assert final["compute_s"] > 0, final
    print(f"transcript {final['transcript']!r}: sentence ends {sorted(ends)}")
    print(f"{policy}: {len(emits)} emissions at src_s {[r['src_s'] for r in emits]}, "
          f"src_words {[r['src_words'] for r in emits]}")
    # the clip's words as tiny.en hears them (it mishears espeak-ng's "birch" and "planks")
    assert n_words >= 8 and "dark blue" in final["transcript"], final
    return emits, final, ends


def sentence_ends(transcript):
    """The word counts at the transcript's sentence ends (and its end), and its words."""
    ends, at = set(), 0
    for w in transcript.split():
        at += 1
        if re.search(r"[.?!][\"')\]]*$", w):
            ends.add(at)
    ends.add(at)  # the end of the clip closes the last segment
    return ends, at


def sentence_policy():
    emits, final, ends = records("sentence")
    assert emits, "nothing emitted"
    assert all(r["src_words"] in ends for r in emits), (emits, ends)
    # the first sentence was translated while the clip was still being read
    first = [r for r in emits if r["src_words"] == min(ends)]
    assert first and first[0]["src_s"] < final["src_s"] - 0.5, (first, final)


def wait_k_policy():
    emits, _, _ = records("wait-2")
    assert emits and emits[0]["src_words"] >= 2, emits


def errors():
    p = run("translate", "--audio", os.path.join(tmp, "nope.wav"), "--asr", ASR, *SMALL, ok=(1,))
    assert b"nope.wav" in p.stderr and p.stdout == b"", p.stderr
    p = run("translate", "--audio", CLIP, "--asr", QWEN, *SMALL, ok=(1,))
    assert b"is not a Whisper model" in p.stderr and p.stdout == b"", p.stderr


check("sentence_policy", sentence_policy)
check("wait_k_policy", wait_k_policy)
check("errors", errors)
shutil.rmtree(tmp, ignore_errors=True)
failed = [(n, e) for n, e in results if e is not None]
for n, e in results:
    print(("FAIL " if e else "ok   ") + n + (f": {e}" if e else ""))
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
