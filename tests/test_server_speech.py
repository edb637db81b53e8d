#!/usr/bin/env python3
"""rilld's speech sessions over ZeroMQ (docs/protocol.md "Speech sessions"): a daemon with a
language model and whisper-tiny.en, a LibriVox clip sent as pcm16 and as Opus packets
(`ingest.audio`), the `<session>/transcript` events checked against themselves (committed
deltas that add up, a final event with the tail committed) and the final text against
`rill transcribe --json` on the same file (within one word: the daemon's engine takes the
audio in other chunks than the command); a language-model session with a recognizer (its
text is the transcript: versions and counters); packet loss, duplicates and late packets
counted; hostile frames (bad codec, absurd rate and channels, garbage Opus, wrong types, a
format change mid-stream, audio to a session without a recognizer, other commands on a
transcript-only session) refused with clear errors and nothing changed; a client that
vanishes mid-stream; a restart (the language model's session and its recognizer come back).

Usage: test_server_speech.py RILL_BINARY SOURCE_DIR [TEST...]  (TEST: pcm16, opus, hostile,
vanish, restart; default all). Needs pyzmq, msgpack, PyAV and numpy (the project's .venv), the default
model and models/whisper-tiny.en.gguf; exits 77 without them.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import wave

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402  (reads RILL_BINARY SOURCE_DIR from argv as this does)
from rilld_harness import run_tests  # noqa: E402

try:
    import av
    import numpy as np
except ImportError:  # pragma: no cover - reported as a skip
    av = np = None

RILL, SRC = sys.argv[1], sys.argv[2]
WHISPER = os.path.join(SRC, "models", "whisper-tiny.en.gguf")
CLIP = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"
PACKET = 320  # samples per packet: 20 ms at 16 kHz


def words(text):
    """The issue's normalisation: lower case; letters, digits and apostrophes; the rest space."""
    return re.sub(r"[^a-z0-9']+", " ", text.lower()).split()


def edits(a, b):
    """Word edit distance (substitutions, insertions, deletions)."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def reference_text():
    """`rill transcribe --json CLIP`'s final text."""
    p = subprocess.run([RILL, "transcribe", "--asr", WHISPER, "--json", "-t", "1", CLIP],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    import json
    last = json.loads(p.stdout.strip().splitlines()[-1])
    assert last["final"] is True, last
    return last["text"]


def clip_pcm():
    w = wave.open(CLIP)
    assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
    return np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def pcm16_packets(pcm):
    return [pcm[i:i + PACKET].tobytes() for i in range(0, len(pcm), PACKET)]


def opus_packets(pcm):
    """The clip as raw Opus packets (20 ms, 32 kbit/s, libopus through PyAV)."""
    c = av.CodecContext.create("libopus", "w")
    c.sample_rate, c.layout, c.format, c.bit_rate = 16000, "mono", "s16", 32000
    c.open()
    out = []
    for i in range(0, len(pcm), PACKET):
        chunk = pcm[i:i + PACKET]
        if len(chunk) < PACKET:
            chunk = np.concatenate([chunk, np.zeros(PACKET - len(chunk), np.int16)])
        f = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        f.sample_rate = 16000
        out += [bytes(p) for p in c.encode(f)]
    out += [bytes(p) for p in c.encode(None)]
    return out


def daemon(tmp):
    return ts.Rilld(os.path.join(tmp, "state"), "--model", f"asr={WHISPER}", threads=2)


def send_all(c, session, codec, packets, first_seq=0, skip=()):
    """Sends the packets (retrying a packet the full queue refused); returns the replies."""
    replies = []
    for i, data in enumerate(packets):
        if i in skip:
            continue
        args = dict(session=session, codec=codec, rate=16000, channels=1, seq=first_seq + i,
                    data=data)
        for _ in range(600):
            r = c.req("ingest.audio", args)
            if r["status"] != "EFULL":
                break
            time.sleep(0.05)
        assert r["status"] == "OK", r
        replies.append(r["result"])
    return replies


def transcript_events(sub, topic, timeout=240):
    """Collects topic's events until the final one; checks their shape and order."""
    sub.drain(timeout, until=lambda ev: any(t == topic and e["final"] for t, e in ev))
    evs = sub.of(topic)
    assert evs and evs[-1]["final"], evs
    keys = {"v", "seq", "session", "kind", "committed", "tentative", "audio_s", "final",
            "version", "status", "message"}
    for i, e in enumerate(evs):
        assert set(e) == keys and e["kind"] == "transcript" and e["status"] == "OK", e
        assert e["seq"] == i + 1, (i, e)  # no gaps
        assert i == 0 or e["audio_s"] >= evs[i - 1]["audio_s"], evs
    assert evs[-1]["tentative"] == "", evs[-1]
    return evs


def check_stream(codec, make_packets):
    ref = reference_text()
    pcm = clip_pcm()
    packets = make_packets(pcm)
    with tempfile.TemporaryDirectory() as tmp:
        d = daemon(tmp)
        try:
            d.start()
            c = ts.Client(d)
            models = c.call("server.stats")["models"]
            assert [(m["name"], m["kind"]) for m in models] == [(ts.MODEL_NAME, "llm"),
                                                                ("asr", "asr")], models
            sub = ts.Sub(d, "live/transcript", "talk/transcript")
            time.sleep(0.3)  # the subscriptions reach the daemon
            # transcript-only, on the Whisper model
            assert c.call("session.create", session="live", model="asr") == {
                "session": "live", "model": "asr", "asr": "asr"}
            # a language-model session that the recognizer feeds
            assert c.call("session.create", session="talk", asr="asr", window=0) == {
                "session": "talk", "model": ts.MODEL_NAME, "asr": "asr"}
            for s in ("live", "talk"):
                replies = send_all(c, s, codec, packets)
                assert all(r["packet"] == "ok" and r["lost"] == 0 for r in replies), replies
                assert replies[-1]["expected"] == len(packets)
                n = sum(r["samples"] for r in replies)
                assert abs(n - len(pcm)) <= (2000 if codec == "opus" else 0), (n, len(pcm))
                r = c.call("ingest.audio", session=s, flush=True)
                assert r["samples"] == 0 and r["expected"] == -1, r
            for s in ("live", "talk"):
                evs = transcript_events(sub, f"{s}/transcript")
                text = "".join(e["committed"] for e in evs).strip()
                assert edits(words(text), words(ref)) <= 1, (codec, s, text, ref)
                st = c.call("session.stats", session=s)
                a = st["asr"]
                assert a["model"] == "asr" and a["packets"] == len(packets), a
                assert a["packets_lost"] == a["packets_duplicate"] == a["packets_bad"] == 0, a
                assert a["finishes"] == 1 and a["decodes"] >= 1 and a["step_errors"] == 0, a
                assert a["queue_samples"] == 0, a
                if s == "live":
                    assert st["transcript_only"] is True and evs[-1]["version"] == -1, st
                    assert a["consumer_inputs"] == 0, a
                else:
                    # every update went into the session: its version is the last event's
                    assert st["transcript_only"] is False, st
                    assert a["consumer_inputs"] >= 1 and a["consumer_errors"] == 0, a
                    assert st["version"] == evs[-1]["version"], (st, evs[-1])
                    assert st["held_text"] == 0, st
            # the language model's session answers questions about what was said
            ans = c.call("ask", session="talk", question="Repeat the last sentence.",
                         max_tokens=8)
            assert ans["version"] == c.call("session.stats", session="talk")["version"], ans
            # ingest.audio on a session without a recognizer
            c.call("session.create", session="plain")
            assert c.err("ingest.audio", session="plain", codec=codec, rate=16000, channels=1,
                         seq=0, data=packets[0]) == "EUNSUPPORTED"
            c.call("session.close", session="live")
            c.call("session.close", session="talk")
            sub.close()
            c.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def t_pcm16():
    check_stream("pcm16", pcm16_packets)


def t_opus():
    check_stream("opus", opus_packets)


def t_hostile():
    """Hostile ingest.audio frames get clear errors and change nothing; loss, duplicates and
    late packets are counted and answered with what happened."""
    pcm = clip_pcm()
    packets = pcm16_packets(pcm)
    opus = opus_packets(pcm)
    with tempfile.TemporaryDirectory() as tmp:
        d = daemon(tmp)
        try:
            d.start()
            c = ts.Client(d)
            c.call("session.create", session="s", model="asr")
            base = dict(session="s", codec="pcm16", rate=16000, channels=1, seq=0,
                        data=packets[0])

            def bad(status, **over):
                args = dict(base)
                args.update(over)
                for k in [k for k, v in over.items() if v is None]:
                    del args[k]
                r = c.req("ingest.audio", args)
                assert r["status"] == status and r["message"], (over, r)
                return r["message"]

            before = c.call("session.stats", session="s")["asr"]
            assert "opus" in bad("EUNSUPPORTED", codec="mp3")
            bad("ERANGE", rate=0)
            bad("ERANGE", rate=10 ** 9)
            bad("ERANGE", channels=0)
            bad("ERANGE", channels=1000)
            bad("ERANGE", rate=2 ** 63)  # past the wire's range
            bad("EFORMAT", rate="16000")
            bad("EFORMAT", data="not bytes")
            bad("EFORMAT", seq=-1)
            bad("EFORMAT", data=b"\x01")  # half a frame
            bad("EFORMAT", data=b"")
            bad("EINVAL", data=None)  # a packet without its data
            bad("EINVAL", codec=None, rate=None, channels=None, seq=None, data=None)
            bad("EFORMAT", codec="opus", data=b"\xff" * 40)  # garbage Opus
            bad("ERANGE", codec="opus", rate=44100)  # not an Opus rate
            bad("EFORMAT", flush="yes")
            assert c.err("ingest.audio", session="nope", **{k: v for k, v in base.items()
                                                            if k != "session"}) == "ENOTFOUND"
            # other commands on a transcript-only session
            assert c.err("ingest.text", session="s", text="hello") == "EUNSUPPORTED"
            assert c.err("ask", session="s", question="what?") == "EUNSUPPORTED"
            assert c.err("session.create", session="x", model="asr", window=64) == "EINVAL"
            assert c.err("session.create", session="x", asr=ts.MODEL_NAME) == "EINVAL"
            assert c.err("session.create", session="x", asr="nope") == "ENOTFOUND"
            assert c.err("session.create", session="x", model="asr", asr="asr") == "EINVAL"
            assert c.err("complete", model="asr", prompt="hi") == "EINVAL"
            assert "x" not in c.call("session.list")
            after = c.call("session.stats", session="s")["asr"]
            assert after["samples_queued"] == before["samples_queued"] == 0, after
            assert after["packets"] == 0, after
            # a good stream, with a gap, a duplicate and a late packet
            r = send_all(c, "s", "pcm16", packets[:10])
            assert [x["packet"] for x in r] == ["ok"] * 10, r
            # a format change mid-stream: refused, the stream goes on as it was
            assert "stream" in bad("EINVAL", seq=10, rate=8000, data=packets[10][:320])
            assert c.call("session.stats", session="s")["asr"]["packets"] == 10
            dup = c.call("ingest.audio", **dict(base, seq=9, data=packets[9]))
            assert dup["packet"] == "duplicate" and dup["samples"] == 0, dup
            gap = c.call("ingest.audio", **dict(base, seq=12, data=packets[12]))
            assert gap["packet"] == "gap" and gap["lost"] == 2, gap
            assert gap["concealed_ms"] == 40 and gap["samples"] == 3 * PACKET, gap
            late = c.call("ingest.audio", **dict(base, seq=11, data=packets[11]))
            assert late["packet"] == "late" and late["samples"] == 0, late
            a = c.call("session.stats", session="s")["asr"]
            assert (a["packets"], a["packets_lost"], a["packets_concealed"],
                    a["packets_duplicate"], a["packets_late"]) == (11, 2, 2, 1, 1), a
            assert a["samples_queued"] == 13 * PACKET, a
            # a flush ends the stream: the next one may be Opus, numbered anew
            c.call("ingest.audio", session="s", flush=True)
            r = send_all(c, "s", "opus", opus[:5], first_seq=1000)
            assert [x["packet"] for x in r] == ["ok"] * 5, r
            bad("EINVAL", seq=1005, data=packets[13])  # pcm16 into the Opus stream
            c.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def t_vanish():
    """A client that sends half a clip and vanishes (no flush): the daemon goes on, another
    client of the same owner finishes the stream, and a session closed with audio still queued
    goes cleanly."""
    packets = pcm16_packets(clip_pcm())
    with tempfile.TemporaryDirectory() as tmp:
        d = daemon(tmp)
        try:
            d.start()
            a = ts.Client(d)
            a.call("session.create", session="v", model="asr")
            a.call("session.create", session="w", asr="asr", window=0)
            half = len(packets) // 2
            for i in range(half):
                a.send("ingest.audio", dict(session="v", codec="pcm16", rate=16000, channels=1,
                                            seq=i, data=packets[i]))
            a.close()  # gone, replies unread
            b = ts.Client(d)
            sub = ts.Sub(d, "v/transcript")
            time.sleep(0.3)
            st = b.call("session.stats", session="v")["asr"]
            assert st["packets"] <= half, st
            # the rest, from where the decoder expects it: ZeroMQ may drop what the closed
            # client had not sent yet, and a gap past the concealment bound resyncs at seq
            exp = half
            while True:
                r = b.call("ingest.audio", session="v", codec="pcm16", rate=16000, channels=1,
                           seq=exp, data=packets[exp])
                if r["packet"] in ("ok", "resync") and r["expected"] == half + 1:
                    break
                exp = r["expected"]
                assert exp <= half, r
            send_all(b, "v", "pcm16", packets[half + 1:], first_seq=half + 1)
            b.call("ingest.audio", session="v", flush=True)
            evs = transcript_events(sub, "v/transcript")
            assert words("".join(e["committed"] for e in evs)), evs
            # audio queued on a language model's session, then closed at once
            send_all(b, "w", "pcm16", packets)
            b.call("session.close", session="w")
            b.call("session.close", session="v")
            assert b.call("session.list") == []
            assert b.call("server.stats")["sessions"] == 0
            sub.close()
            b.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def t_restart():
    """A language model's session with a recognizer survives a restart: its text (the
    transcript, from its log) and a fresh recognizer; a transcript-only session does not."""
    packets = pcm16_packets(clip_pcm())
    with tempfile.TemporaryDirectory() as tmp:
        d = daemon(tmp)
        try:
            d.start()
            c = ts.Client(d)
            c.call("session.create", session="talk", asr="asr", window=0)
            c.call("session.create", session="live", model="asr")
            sub = ts.Sub(d, "talk/transcript")
            time.sleep(0.3)
            send_all(c, "talk", "pcm16", packets)
            c.call("ingest.audio", session="talk", flush=True)
            evs = transcript_events(sub, "talk/transcript")
            before = c.call("session.stats", session="talk")
            assert before["version"] == evs[-1]["version"], (before, evs[-1])
            sub.close()
            c.close()
            assert d.stop() == 0, d.log()
            d.start()
            c = ts.Client(d)
            assert c.call("session.list") == ["talk"], d.log()
            after = c.call("session.stats", session="talk")
            # the same input (tokens seen or still pending: the engine may not have evaluated
            # the last of it when `before` was read)
            assert (after["version"], after["n_seen"] + after["n_pending"]) == \
                (before["version"], before["n_seen"] + before["n_pending"]), (before, after)
            assert after["asr"] is not None and after["asr"]["packets"] == 0, after
            sub = ts.Sub(d, "talk/transcript")
            time.sleep(0.3)
            send_all(c, "talk", "pcm16", packets[:50])
            c.call("ingest.audio", session="talk", flush=True)
            evs2 = transcript_events(sub, "talk/transcript")
            assert evs2[-1]["version"] > before["version"], (evs2[-1], before)
            sub.close()
            c.close()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def main():
    if ts.zmq is None or av is None or np is None:
        print("SKIP: pyzmq, msgpack, PyAV and numpy are needed (the project's .venv)")
        return 77
    for need in (ts.MODEL, WHISPER, CLIP):
        if not os.path.exists(need):
            print(f"SKIP: {need} is missing")
            return 77
    ts.CTX = ts.zmq.Context()
    tests = {n[2:]: fn for n, fn in globals().items() if n.startswith("t_") and callable(fn)}
    rc = run_tests(tests, sys.argv[3:])
    ts.CTX.destroy(0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
