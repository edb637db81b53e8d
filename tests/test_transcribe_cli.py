#!/usr/bin/env python3
"""`rill transcribe` as INTERFACES.md ("Speech") gives it: the --json lines (fields, types,
committed text that only grows, the final line), the transcript against faster-whisper's
offline greedy one (tests/data/ref/whisper/transcripts.tsv: at most one word edit per clip after
the issue's normalisation), --offline, --pace 1 keeping real time, the terminal-less text output,
--help, and clear errors (missing file, a file that is not audio, a model that is not Whisper, a
missing model, usage).

Usage: test_transcribe_cli.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without
models/whisper-tiny.en.gguf. Prints 'N passed, N failed' last.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

RILL, SRC = sys.argv[1], sys.argv[2]
ASR = os.path.join(SRC, "models", "whisper-tiny.en.gguf")
BIRCH = os.path.join(SRC, "tests", "data", "audio", "birch_canoe_espeak.wav")
LV0880 = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"
results = []


def run(*args, ok=(0,), timeout=300):
    p = subprocess.run([RILL, "transcribe", *args], capture_output=True, text=True,
                       timeout=timeout, cwd=SRC)
    if p.returncode not in ok:
        raise AssertionError(f"rill transcribe {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p


def check(name, fn):
    try:
        fn()
        results.append((name, None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, e))


def reference(clip):
    with open(os.path.join(SRC, "tests", "data", "ref", "whisper", "transcripts.tsv")) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if cols[0] == "whisper-tiny.en" and cols[1] == clip:
                return bytes.fromhex(cols[3]).decode()
    raise AssertionError(f"no reference for {clip}")


def words(text):
    return re.sub(r"[^a-z0-9']+", " ", text.lower()).split()


def edits(a, b):
    a, b = words(a), words(b)
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(b)]


def json_lines(out):
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines, "no output"
    *changes, final = lines
    for c in changes:
        assert set(c) == {"audio_s", "wall_s", "committed", "tentative"}, c
        assert isinstance(c["committed"], str) and isinstance(c["tentative"], str), c
        assert isinstance(c["audio_s"], (int, float)) and isinstance(c["wall_s"], (int, float))
    assert set(final) == {"final", "text", "audio_s", "wall_s", "rtf"}, final
    assert final["final"] is True
    # committed text never shrinks or changes: each line's extends the one before
    prev, prev_t, prev_s = "", None, 0.0
    for c in changes:
        assert c["committed"].startswith(prev), (prev, c["committed"])
        assert prev_s <= c["audio_s"] <= final["audio_s"], (prev_s, c, final)
        assert c["committed"] != prev or c["tentative"] != prev_t, "a line without a change"
        prev, prev_t, prev_s = c["committed"], c["tentative"], c["audio_s"]
    assert final["text"] == prev.lstrip(" "), (final["text"], prev)
    assert abs(final["rtf"] - final["wall_s"] / final["audio_s"]) < 0.01, final
    return changes, final


def clip(path, name, *extra):
    if not os.path.exists(path):
        print(f"{name}: {path} absent, part skipped")
        return None
    changes, final = json_lines(run("--json", "--threads", "2", *extra, path).stdout)
    want = reference(name)
    e = edits(final["text"], want)
    print(f"{name} {' '.join(extra)}: {final['text']!r} ({len(changes)} changes, rtf "
          f"{final['rtf']}) vs {want!r}: {e} word edits")
    assert e <= 1, (final["text"], want)
    return changes, final


def t_json_streams_and_matches_reference():
    changes, final = clip(BIRCH, "birch")
    assert abs(final["audio_s"] - 2.84) < 0.02, final
    assert len(changes) >= 2, changes  # it streamed: tentative text came before the end
    assert any(c["tentative"] for c in changes), changes
    if not os.environ.get("RILL_TEST_LIGHT"):  # sanitizer runs: the same path, one clip
        clip(LV0880, "lv0880")


def t_offline_decodes_once():
    changes, final = clip(BIRCH, "birch", "--offline")
    assert len(changes) == 1 and changes[0]["tentative"] == "", changes
    assert "1 decodes" in run("--offline", BIRCH).stderr


def t_pace_real_time():
    t0 = time.monotonic()
    changes, final = json_lines(run("--json", "--pace", "1", BIRCH).stdout)
    took = time.monotonic() - t0
    assert took >= 2.8, took  # 2.84 s of audio at real time
    assert final["wall_s"] >= 2.8, final
    # a line comes out about when its audio is due, never before
    for c in changes:
        assert c["wall_s"] >= c["audio_s"] - 0.15, c


def t_text_output():
    p = run(BIRCH)
    assert p.stdout.endswith("\n") and "\033" not in p.stdout, repr(p.stdout)
    assert edits(p.stdout, reference("birch")) <= 1, p.stdout
    assert re.search(r"rill transcribe: 2\.84 s of audio in [0-9.]+ s \(rtf", p.stderr), p.stderr


def t_help():
    out = run("--help").stdout
    assert out.startswith("usage: rill transcribe"), out
    for opt in ("--asr", "--language", "--json", "--mic", "--device", "--pace", "--offline"):
        assert opt in out, opt


def t_errors():
    e = run("/nonexistent.wav", ok=(1,)).stderr
    assert e.startswith("rill transcribe: /nonexistent.wav:"), e
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        f.write(b"this is not audio at all\n" * 40)
        f.flush()
        e = run(f.name, ok=(1,)).stderr
        assert e.startswith(f"rill transcribe: {f.name}:"), e
    lm = os.path.join(SRC, "tests", "data", "models", "rill-tiny-llama-F32.gguf")
    if os.path.exists(lm):
        e = run("--asr", lm, BIRCH, ok=(1,)).stderr
        assert "is not a Whisper model" in e, e
    else:
        print(f"t_errors: {lm} absent, non-whisper model part skipped")
    e = run("--asr", "/nonexistent.gguf", BIRCH, ok=(1,)).stderr
    assert "cannot load /nonexistent.gguf" in e, e
    e = run("--language", "de", BIRCH, ok=(1,)).stderr
    assert 'has no language "de"' in e, e
    assert "either an audio FILE or --mic" in run(ok=(2,)).stderr
    assert "either an audio FILE or --mic" in run("--mic", BIRCH, ok=(2,)).stderr
    assert "--device goes with --mic" in run("--device", "1", BIRCH, ok=(2,)).stderr
    assert "unknown option" in run("--bogus", BIRCH, ok=(2,)).stderr


def main():
    if not os.path.exists(ASR):
        print(f"SKIP: {ASR} is missing: run scripts/setup.sh")
        return 77
    for name, fn in list(globals().items()):
        if name.startswith("t_") and callable(fn):
            check(name, fn)
    failed = [(n, e) for n, e in results if e is not None]
    for n, e in failed:
        print(f"FAIL {n}: {e!r}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
