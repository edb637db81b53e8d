#!/usr/bin/env python3
"""rilld's translation sessions (docs/protocol.md, "Translation sessions") over loopback:
`session.create {model, asr, translate}` on the tiny qwen2 model (random weights: the Spanish is
noise, the records are what is checked) with whisper-tiny.en, a two-sentence espeak-ng clip as
pcm16 ingest.audio packets, and the <session>/translation events checked against the session's
own <session>/transcript events (with the sentence policy every emission comes at a sentence
end of the committed transcript; fields, order, gapless seq), session.stats' translation map,
clear errors for bad args (nothing created), commands a translation session refuses, and a
session closed and a daemon stopped (SIGTERM) while their translations run: both prompt and
clean (the daemon exits 0).

Usage: test_server_translate.py RILL_BINARY SOURCE_DIR [TEST...]. Exits 77 (skip) without
pyzmq/msgpack/numpy (.venv), whisper-tiny.en, the tiny models or espeak-ng.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402  (reads RILL_BINARY SOURCE_DIR from argv as this does)
from rilld_harness import Rilld, rilld_path, run_tests  # noqa: E402

RILL, SRC = sys.argv[1], sys.argv[2]
WHISPER = os.path.join(SRC, "models", "whisper-tiny.en.gguf")
QWEN = os.path.join(SRC, "tests", "data", "models", "rill-tiny-qwen2-F32.gguf")
SPEECH = "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue background."
PACKET = 320  # samples: 20 ms
KEYS = {"v", "seq", "session", "kind", "emit", "src_s", "src_words", "compute_s", "segment",
        "segment_end", "status", "message"}


def clip_packets(tmp):
    path = os.path.join(tmp, "two.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", path, SPEECH], check=True)
    w = wave.open(path)
    rate = w.getframerate()
    raw = w.readframes(w.getnframes())
    assert w.getsampwidth() == 2 and w.getnchannels() == 1
    step = PACKET * rate // 16000 * 2
    return rate, [raw[i:i + step] for i in range(0, len(raw), step)]


def daemon(tmp):
    return Rilld(rilld_path(RILL), f"llm={QWEN}", os.path.join(tmp, "state"), "--model",
                 f"asr={WHISPER}", threads=2)


def send_all(c, session, rate, packets):
    for i, data in enumerate(packets):
        args = dict(session=session, codec="pcm16", rate=rate, channels=1, seq=i, data=data)
        for _ in range(600):
            r = c.req("ingest.audio", args)
            if r["status"] != "EFULL":
                break
            time.sleep(0.05)
        assert r["status"] == "OK", r


def create(c, name, policy="sentence"):
    return c.call("session.create", session=name, model="llm", asr="asr", translate=policy,
                  system="Translate into Spanish.")


def t_events():
    with tempfile.TemporaryDirectory() as tmp:
        rate, packets = clip_packets(tmp)
        d = daemon(tmp)
        try:
            d.start()
            c = ts.Client(d)
            sub = ts.Sub(d, "talk/transcript", "talk/translation")
            time.sleep(0.3)
            assert create(c, "talk") == {"session": "talk", "model": "llm", "asr": "asr",
                                         "translate": "sentence"}
            send_all(c, "talk", rate, packets)
            c.call("ingest.audio", session="talk", flush=True)
            # the final transcript, then the translation of its last sentence
            sub.drain(240, until=lambda ev: any(t == "talk/transcript" and e["final"]
                                                for t, e in ev))
            text = "".join(e["committed"] for e in sub.of("talk/transcript")).split()
            ends, n = set(), 0
            for w in text:
                n += 1
                if re.search(r"[.?!][\"')\]]*$", w):
                    ends.add(n)
            ends.add(n)
            print(f"transcript {' '.join(text)!r}: sentence ends {sorted(ends)}")
            deadline = time.time() + 240
            while time.time() < deadline:
                st = c.call("session.stats", session="talk")["translation"]
                sub.drain(1.0)
                if st["queued_bytes"] == 0 and len(sub.of("talk/translation")) == st["emissions"] \
                        and (st["emissions"] > 0 and
                             sub.of("talk/translation")[-1]["src_words"] == n):
                    break
            evs = sub.of("talk/translation")
            print(f"{len(evs)} translation events: {[(e['src_words'], e['src_s']) for e in evs]}")
            assert evs, "no translation events"
            last_s, last_seg = 0.0, -1
            for i, e in enumerate(evs):
                assert set(e) == KEYS and e["kind"] == "translation" and e["status"] == "OK", e
                assert e["seq"] == i + 1, (i, e)
                assert e["emit"].strip() == e["emit"] != "", e
                assert e["segment_end"] is True and e["src_words"] in ends, (e, ends)
                assert e["src_s"] >= last_s and e["segment"] > last_seg, evs
                assert e["compute_s"] > 0, e
                last_s, last_seg = e["src_s"], e["segment"]
            assert evs[-1]["src_words"] == n, (evs[-1], n)
            st = c.call("session.stats", session="talk")
            assert st["transcript_only"] is True, st
            tr = st["translation"]
            assert tr["policy"] == "sentence" and tr["emissions"] == len(evs), tr
            # words as rill splits them: ASCII whitespace (str.split would also cut at \x1c..)
            assert tr["emitted_words"] == sum(len(re.findall(r"[^ \t\n\r\v\f]+", e["emit"]))
                                              for e in evs), tr
            assert tr["dropped_bytes"] == 0, tr
            assert st["asr"]["finishes"] == 1, st["asr"]
            # what a translation session refuses
            assert c.err("ask", session="talk", question="what?") == "EUNSUPPORTED"
            assert c.err("ingest.text", session="talk", text="hi") == "EUNSUPPORTED"
            c.call("session.close", session="talk")
            assert c.call("session.list") == []
            sub.close()
            c.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def t_errors():
    with tempfile.TemporaryDirectory() as tmp:
        d = daemon(tmp)
        try:
            d.start()
            c = ts.Client(d)
            base = dict(session="x", model="llm", asr="asr")

            def bad(status, want, **over):
                args = {k: v for k, v in dict(base, **over).items() if v is not None}
                r = c.req("session.create", args)
                assert r["status"] == status and want in r["message"], (over, r)

            bad("EINVAL", "unknown policy", translate="wait-zero")
            bad("EINVAL", "unknown policy", translate="x" * 40)
            bad("EINVAL", "needs a recognizer", translate="sentence", asr=None)
            bad("EINVAL", "sinks", translate="sentence", sinks=4)
            bad("EINVAL", "recognizer", translate="sentence", model="asr")
            bad("ENOTFOUND", "no model named", translate="sentence", asr="nope")
            bad("EINVAL", "", translate="sentence", window=8)  # rill_translate_new judges it
            r = c.req("session.create", dict(base, translate=7))
            assert r["status"] == "EFORMAT", r
            assert c.call("session.list") == []
            assert c.call("server.stats")["sessions"] == 0
            c.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def t_stop():
    """A session closed and a daemon stopped while their translations draft: prompt, clean."""
    with tempfile.TemporaryDirectory() as tmp:
        rate, packets = clip_packets(tmp)
        d = daemon(tmp)
        try:
            d.start()
            c = ts.Client(d)
            for name in ("a", "b"):  # both before any audio: a create waits for engine passes
                create(c, name, "la")
            for name in ("a", "b"):
                send_all(c, name, rate, packets)
                c.call("ingest.audio", session=name, flush=True)
            time.sleep(2.0)  # the recognizers commit, the translations draft
            # bounds for a loaded machine and sanitizer builds: a close waits for a few engine
            # passes (the recognizer's, the interrupted request's, the session's close), never
            # for the translation's remaining work
            t0 = time.time()
            r = c.req("session.close", {"session": "a"}, timeout=170)
            assert r["status"] == "OK", r
            print(f"session.close with its translation running: {time.time() - t0:.2f} s")
            assert time.time() - t0 < 170, time.time() - t0
            assert c.call("session.list") == ["b"]
            c.close()
            t0 = time.time()
            assert d.stop(timeout=150) == 0, d.log()
            print(f"SIGTERM with a translation running: {time.time() - t0:.2f} s")
            assert time.time() - t0 < 120, time.time() - t0
            assert "ERROR" not in d.log() or "translation" not in d.log(), d.log()
        finally:
            d.kill()


def main():
    if ts.zmq is None:
        print("SKIP: pyzmq and msgpack are needed (the project's .venv)")
        return 77
    for need in (WHISPER, QWEN):
        if not os.path.exists(need):
            print(f"SKIP: {need} is missing")
            return 77
    if shutil.which("espeak-ng") is None:
        print("SKIP: espeak-ng is missing")
        return 77
    ts.CTX = ts.zmq.Context()
    tests = {n[2:]: fn for n, fn in globals().items() if n.startswith("t_") and callable(fn)}
    rc = run_tests(tests, sys.argv[3:])
    ts.CTX.destroy(0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
