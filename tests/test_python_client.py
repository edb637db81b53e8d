#!/usr/bin/env python3
"""The Python client (clients/python, module rill_client) against a real rilld and against a
fake one: every command once, the errors as RillError subclasses with their status, request
ids matched to replies, the events iterator (token, answer and standing events of an ask and a
standing query) with gap detection (a synthetic sequence and a real loss), CURVE with per-key
ownership, key files, and `pip install clients/python` into a fresh virtual environment
without network.

Usage: test_python_client.py RILL_BINARY SOURCE_DIR [TEST...]   (TEST: commands, errors,
events, gaps, curve, fake, install; default all). Each test starts its own rilld on free
loopback ports with a temporary --state. Needs pyzmq and msgpack (the project's .venv) and the
default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, or $RILL_MODEL); exits 77 (skip)
without them. `install` also exits 77 when the environment cannot build a wheel offline
(setuptools older than 70.1 without the wheel package: scripts/setup.sh installs it). Prints
'N passed, N failed' last.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rilld_harness import Rilld as _Rilld  # noqa: E402
from rilld_harness import free_ports, model_name, model_path, rilld_path  # noqa: E402
from rilld_harness import keygen as harness_keygen  # noqa: E402

try:
    import msgpack
    import zmq
except ImportError:  # pragma: no cover - reported as a skip
    zmq = msgpack = None

RILL, SRC = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3:]
PKG = os.path.join(SRC, "clients", "python")
MODEL = model_path(SRC)
MODEL_NAME = model_name(MODEL)
RILLD = rilld_path(RILL)
FACTS = ("The capital of France is Paris. The sky is blue. Bob is 42 years old. "
         "The train leaves at nine.\n")
QUESTION = "How old is Bob?"
LONG_Q = "List the numbers from 1 to 100, separated by commas."
SKIP = 77
results = []

if zmq is not None:
    sys.path.insert(0, PKG)
    import rill_client as rc  # noqa: E402  (the source tree's copy; `install` tests pip's)


def check(name, fn):
    try:
        rv = fn()
        results.append((name, "skip" if rv == SKIP else None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        import traceback
        traceback.print_exc()
        results.append((name, e))


def raises(cls, fn, status=None):
    """Runs fn, which must raise cls (with .status == status when given); returns the error."""
    try:
        fn()
    except cls as e:
        if status is not None:
            assert e.status == status, (e.status, status, e)
            assert e.wire == status[5:] and e.message, e
        return e
    raise AssertionError(f"{fn} did not raise {cls.__name__}")


def wait_for(pred, timeout=20.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# ---- rilld -------------------------------------------------------------------------------------

class Rilld(_Rilld):
    """One rilld on free loopback ports (killed at the end of the with block), its state in
    TMP/state."""

    def __init__(self, tmp, *extra):
        super().__init__(RILLD, MODEL, os.path.join(tmp, "state"), *extra)

    def client(self, **kw):
        return rc.Client(self.req_ep, self.ev_ep, **kw)



def collect(ev, until, timeout=30.0):
    """Reads items from Events ev until until(items) is true; returns them."""
    items, deadline = [], time.time() + timeout
    while not until(items):
        left = deadline - time.time()
        assert left > 0, ("timed out", items)
        it = ev.poll(left)
        if it is not None:
            items.append(it)
    return items


def settled(c, session, timeout=60.0):
    """session.stats once the engine has evaluated everything acknowledged."""
    deadline = time.time() + timeout
    while True:
        s = c.session_stats(session)
        if s["n_pending"] == 0 or time.time() > deadline:
            return s
        time.sleep(0.05)


# ---- 1. every command --------------------------------------------------------------------------

def t_commands():
    with tempfile.TemporaryDirectory() as tmp, Rilld(tmp) as d, d.client() as c:
        assert c.session_list() == []
        assert c.session_create("alpha", window=512, sinks=8,
                                system="You are a careful assistant.") == "alpha"
        dflt = c.session_create()
        assert re.fullmatch(r"s\d+", dflt), dflt
        assert c.session_create("m", model=MODEL_NAME, window=0) == "m"
        assert sorted(c.session_list()) == sorted(["alpha", dflt, "m"])
        st = c.session_stats("alpha")
        assert (st["window"], st["sinks"], st["model"]) == (512, 8, MODEL_NAME), st
        assert c.session_stats("m")["window"] == 0

        v1 = c.ingest_text("alpha", FACTS, flush=True)
        assert isinstance(v1, int) and v1 > st["version"], (v1, st)
        v2 = c.ingest_text("m", "The code word is", flush=False)
        v3 = c.ingest_replace("m", v2, "The code word is banana.\n")
        assert v3 > v2, (v2, v3)
        c.ingest_text("m", "", flush=True)
        assert settled(c, "m")["held_text"] == 0

        ts = 1704205800000000000
        r = c.ingest_ticks(dflt, [rc.Tick("AAPL", ts, 187.25, 100, "B"),
                                  {"symbol": "MSFT", "ts": ts + 1000, "price": 374.5,
                                   "size": 50, "side": "S"},
                                  rc.Tick("AAPL", ts + 2000, 187.5, 10),
                                  {"symbol": "AAPL", "ts": ts + 3000, "size": 10}])
        assert (r["accepted"], r["rejected"]) == (3, 1) and r["lines"] >= 1, r
        assert r["version"] >= 1, r

        s1 = settled(c, "alpha")
        a = c.ask("alpha", QUESTION, max_tokens=24)
        assert isinstance(a, rc.Answer) and "42" in a.answer, a
        assert 1 <= a.tokens <= 24 and a.version == s1["version"] == v1, (a, s1)
        assert a.context == s1["n_resident"] and a.cached is False, (a, s1)
        assert 0 < a.ttft_ms <= a.total_ms and a.backlog is not None and \
            a.ttft_compute_ms is not None, a
        assert a.raw["answer"] == a.answer and a.consistency == "acknowledged", a
        assert c.ask("alpha", "Describe Paris in detail.", max_tokens=1).tokens == 1
        # consistency: "evaluated" answers at once on what was evaluated, "acknowledged" waits
        # for the ~500 tokens just acknowledged (many 50 ms steps of prefill)
        c.session_create("ev")
        v0 = c.ingest_text("ev", FACTS, flush=True)
        settled(c, "ev")
        v = c.ingest_text("ev", " ".join(["The stream goes on with more text."] * 60),
                          flush=True)
        e = c.ask("ev", QUESTION, max_tokens=4, consistency="evaluated")
        assert e.consistency == "evaluated" and e.backlog == 0, e
        assert v0 <= e.version < v, (v0, e, v)
        k = c.ask("ev", QUESTION, max_tokens=4, consistency="acknowledged", timeout=300)
        assert k.consistency == "acknowledged" and k.version >= v, (k, v)
        c.session_close("ev")

        qid = c.standing_register("alpha", "When does the train leave?", max_tokens=8)
        assert isinstance(qid, int) and qid > 0
        (q,) = c.standing_list("alpha")
        assert isinstance(q, rc.StandingQuery) and q.qid == qid and \
            q.question == "When does the train leave?", q
        assert c.session_stats("alpha")["standing"] == 1
        deadline = time.time() + 30  # its first answer is computed now; standing.list keeps it
        while q.answer is None and time.time() < deadline:
            time.sleep(0.05)
            (q,) = c.standing_list("alpha")
        assert q.answer and q.answer_version == q.version, q

        assert c.standing_unregister("alpha", qid) is None
        assert c.standing_list("alpha") == []

        path = c.session_snapshot("alpha")
        assert os.path.isfile(path) and os.path.dirname(path) == os.path.abspath(d.state), path
        s = c.server_stats()
        assert s["sessions"] == 3 and s["questions"] >= 2, s
        assert [m["name"] for m in s["models"]] == [MODEL_NAME], s["models"]
        assert c.call("session.list") == c.session_list()  # the generic path
        assert c.session_close(dflt) is None
        assert dflt not in c.session_list()
        assert c.stale_replies == 0
        assert d.stop() == 0, d.log()


# ---- 2. errors ---------------------------------------------------------------------------------

def t_complete():
    """complete and server_metrics: greedy is deterministic, a stop string cuts, sampling
    follows the seed, and each bad argument raises its error class."""
    with tempfile.TemporaryDirectory() as tmp, Rilld(tmp) as d, d.client() as c:
        # complete: greedy is deterministic, a stop string cuts, sampling follows the seed
        done = c.complete("One, two, three, four,", max_tokens=6, temperature=0)
        assert isinstance(done, rc.Completion) and done.finish_reason == "length", done
        assert done.completion_tokens == 6 and done.prompt_tokens > 5 and done.model, done
        again = c.complete("One, two, three, four,", max_tokens=6, temperature=0)
        assert again.text == done.text, (again, done)
        cut = done.text.strip()[:2]
        stopped = c.complete("One, two, three, four,", max_tokens=6, temperature=0, stop=[cut])
        assert stopped.text == done.text[:done.text.index(cut)], (stopped, done)
        assert stopped.finish_reason == "stop"
        chat = c.complete(messages=[{"role": "user", "content": "Say hi."}], max_tokens=4,
                          temperature=0.9, seed=5)
        assert chat.text == c.complete(messages=[{"role": "user", "content": "Say hi."}],
                                       max_tokens=4, temperature=0.9, seed=5).text
        for bad, cls in [(dict(), rc.InvalidArgumentError),
                         (dict(prompt="x", messages=[{"role": "user", "content": "y"}]),
                          rc.InvalidArgumentError),
                         (dict(prompt="x", temperature=3.0), rc.RangeError),
                         (dict(prompt="x", model="nope"), rc.NotFoundError)]:
            try:
                c.complete(**bad)
                raise AssertionError(f"{bad}: no error")
            except cls:
                pass
        text = c.server_metrics()
        assert 'rill_requests_total{command="complete"}' in text, text[:300]


def t_errors():
    with tempfile.TemporaryDirectory() as tmp, Rilld(tmp) as d, d.client(timeout=20) as c:
        c.session_create("alpha")
        c.ingest_text("alpha", FACTS, flush=True)
        # an unknown session: NotFoundError, status RILL_ENOTFOUND, for every session command
        for name, fn in [("session_stats", lambda: c.session_stats("nope")),
                         ("session_close", lambda: c.session_close("nope")),
                         ("session_snapshot", lambda: c.session_snapshot("nope")),
                         ("ingest_text", lambda: c.ingest_text("nope", "x")),
                         ("ingest_replace", lambda: c.ingest_replace("nope", 1, "x")),
                         ("ingest_ticks", lambda: c.ingest_ticks("nope", [])),
                         ("ask", lambda: c.ask("nope", "q")),
                         ("standing_register", lambda: c.standing_register("nope", "q")),
                         ("standing_unregister", lambda: c.standing_unregister("nope", 1)),
                         ("standing_list", lambda: c.standing_list("nope"))]:
            e = raises(rc.NotFoundError, fn, "RILL_ENOTFOUND")
            assert isinstance(e, rc.RillError) and e.cmd, (name, e)
        raises(rc.NotFoundError, lambda: c.standing_unregister("alpha", 12345), "RILL_ENOTFOUND")
        # bad arguments, judged by rilld
        raises(rc.ExistsError, lambda: c.session_create("alpha"), "RILL_EEXIST")
        raises(rc.InvalidArgumentError, lambda: c.session_create("bad name"), "RILL_EINVAL")
        raises(rc.NotFoundError, lambda: c.session_create("x", model="nosuch"),
               "RILL_ENOTFOUND")
        raises(rc.RangeError, lambda: c.session_create("big", window=9000), "RILL_ERANGE")
        raises(rc.InvalidArgumentError, lambda: c.ask("alpha", ""), "RILL_EINVAL")
        raises(rc.RangeError, lambda: c.ask("alpha", "q", max_tokens=5000), "RILL_ERANGE")
        raises(rc.RangeError, lambda: c.ask("alpha", "q", max_tokens=0), "RILL_ERANGE")
        raises(rc.InvalidArgumentError, lambda: c.ask("alpha", "q", consistency="eventual"),
               "RILL_EINVAL")
        raises(rc.FormatError, lambda: c.ingest_text("alpha", 5), "RILL_EFORMAT")
        raises(rc.FormatError, lambda: c.ingest_ticks("alpha", "AAPL,1,2"), "RILL_EFORMAT")
        raises(rc.FormatError, lambda: c.ingest_ticks("alpha", {"symbol": "AAPL"}),
               "RILL_EFORMAT")
        raises(rc.RangeError, lambda: c.ingest_ticks("alpha", [{}] * 4097), "RILL_ERANGE")
        v = c.session_stats("alpha")["version"]
        raises(rc.InvalidArgumentError, lambda: c.ingest_replace("alpha", v + 100, "x"),
               "RILL_EINVAL")
        raises(rc.InvalidArgumentError, lambda: c.call("session.stats", {"session": "alpha",
                                                                         "bogus": 1}),
               "RILL_EINVAL")
        raises(rc.InvalidArgumentError, lambda: c.call("session.frobnicate"), "RILL_EINVAL")
        # nothing changed by any of them
        assert c.session_list() == ["alpha"] and c.session_stats("alpha")["version"] == v
        # found on this side: bad client arguments, an oversized request (not sent)
        raises(rc.RillError, lambda: d.client(timeout=0), "RILL_EINVAL")
        raises(rc.RillError, lambda: d.client(server_key="x" * 40), "RILL_EINVAL")
        raises(rc.RillError, lambda: rc.Client("nonsense://x"), "RILL_EINVAL")
        raises(rc.RillError, lambda: c.call("session.list", {"x": object()}), "RILL_EINVAL")
        n = c.server_stats()["requests"]
        raises(rc.RangeError, lambda: c.ingest_text("alpha", "x" * (2 << 20)), "RILL_ERANGE")
        assert c.server_stats()["requests"] == n + 1, "the oversized request was sent"
        # nobody listening: a timeout, not a hang
        (port,) = free_ports(1)
        with rc.Client(f"tcp://127.0.0.1:{port}", timeout=0.3) as lone:
            t0 = time.time()
            e = raises(rc.RillTimeout, lone.session_list, "RILL_ETIMEDOUT")
            assert isinstance(e, TimeoutError) and time.time() - t0 < 3, e
        # request ids: a call that timed out leaves a late reply behind, which the next calls
        # discard (counted) instead of taking it for theirs
        with c.events("alpha", ["answer"]) as ev:
            time.sleep(0.3)
            raises(rc.RillTimeout, lambda: c.ask("alpha", LONG_Q, max_tokens=64, timeout=0.01),
                   "RILL_ETIMEDOUT")
            late = c.last_request_id
            assert c.session_list() == ["alpha"]  # its own reply, whatever came first
            (fin,) = [x for x in collect(ev, lambda xs: xs and xs[-1].rid == late, 120)
                      if isinstance(x, rc.AnswerEvent)]
            assert fin.rid == late
        assert isinstance(c.server_stats(), dict)  # reads past the ask's late reply
        assert c.stale_replies == 1, c.stale_replies
        assert d.stop() == 0, d.log()


# ---- 3. events ---------------------------------------------------------------------------------

def t_events():
    with tempfile.TemporaryDirectory() as tmp, Rilld(tmp) as d, d.client() as c:
        c.session_create("alpha")
        c.session_create("alphabet")  # a session whose name extends alpha's: not alpha's events
        c.ingest_text("alpha", FACTS, flush=True)
        c.ingest_text("alphabet", FACTS, flush=True)
        with c.events("alpha") as ev, c.events("alpha", ["answer"]) as only:
            assert ev.topics == ["alpha/"] and only.topics == ["alpha/answer"]
            time.sleep(0.3)  # let the subscriptions reach rilld
            c.ask("alphabet", QUESTION, max_tokens=4)
            a = c.ask("alpha", QUESTION, max_tokens=24)
            rid = c.last_request_id
            items = collect(ev, lambda xs: any(isinstance(x, rc.AnswerEvent) for x in xs))
            toks = [x for x in items if isinstance(x, rc.TokenEvent)]
            assert not [x for x in items if isinstance(x, rc.Gap)], items
            assert toks and [t.seq for t in toks] == list(range(1, len(toks) + 1)), toks
            assert all(t.topic == "alpha/token" and t.session == "alpha" and t.rid == rid
                       for t in toks), toks
            assert a.answer in "".join(t.piece for t in toks), (a, toks)
            fin = items[-1]
            assert isinstance(fin, rc.AnswerEvent) and fin.seq == 1 and fin.rid == rid, fin
            assert (fin.answer, fin.version, fin.backlog) == (a.answer, a.version, a.backlog)
            got = collect(only, lambda xs: len(xs) >= 1)
            assert [type(x) for x in got] == [rc.AnswerEvent] and got[0].rid == rid, got
            # a standing query: its answer comes as a StandingEvent, again after new data
            qid = c.standing_register("alpha", "When does the train leave?", max_tokens=8)
            items = collect(ev, lambda xs: any(isinstance(x, rc.StandingEvent) for x in xs),
                            60)
            (se,) = [x for x in items if isinstance(x, rc.StandingEvent)]
            assert se.qid == qid and se.question == "When does the train leave?", se
            assert se.version == a.version and se.compute_ms > 0 and se.seq == 1, se
            assert "nine" in se.answer.lower() or "9" in se.answer, se
            v = c.ingest_text("alpha", "The train now leaves at ten.\n", flush=True)
            items = collect(ev, lambda xs: any(isinstance(x, rc.StandingEvent) and
                                               x.version >= v for x in xs), 60)
            last = [x for x in items if isinstance(x, rc.StandingEvent)][-1]
            assert last.version == v and last.seq >= 2 and last.data_version >= v, last
            assert ev.bad_events == 0 and ev.parser.gaps == 0
            # nothing of alphabet's came through
            assert only.poll(0.3) is None
        # next() raises RillTimeout when nothing comes; a closed iterator ends
        ev = c.events("alpha", ["token"], timeout=0.2)
        raises(rc.RillTimeout, lambda: next(ev), "RILL_ETIMEDOUT")
        ev.close()
        assert list(ev) == []
        raises(rc.RillError, lambda: ev.poll(), "RILL_ECLOSED")
        raises(rc.RillError, lambda: c.events("alpha", []), "RILL_EINVAL")
        raises(rc.RillError, lambda: c.events("alpha", ["a/b"]), "RILL_EINVAL")
        assert d.stop() == 0, d.log()


# ---- speech: ingest_audio and transcript events ---------------------------------------------

WHISPER = os.path.join(os.path.dirname(MODEL), "whisper-tiny.en.gguf")
BIRCH = os.path.join(SRC, "tests", "data", "audio", "birch_canoe_espeak.wav")


def t_audio():
    """ingest_audio: the espeak clip as 100 ms pcm16 packets into a transcript-only session, a
    repeat, a flush alone; TranscriptEvents add up to the sentence and end with a final one;
    bad arguments raise before anything is sent, the server's refusals as their errors."""
    if not os.path.exists(WHISPER):
        print(f"skip: no {WHISPER}")
        return SKIP
    import wave
    with wave.open(BIRCH) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        pcm = w.readframes(w.getnframes())
    with tempfile.TemporaryDirectory() as tmp, \
            Rilld(tmp, "--model", f"asr={WHISPER}") as d, d.client(timeout=60) as c:
        assert c.session_create("talk", model="asr") == "talk"
        with c.events("talk", ["transcript"], timeout=120) as ev:
            time.sleep(0.3)  # let the subscription reach rilld
            pkt = 3200  # 100 ms
            n = len(pcm) // pkt
            for i in range(n):
                r = c.ingest_audio("talk", pcm[i * pkt:(i + 1) * pkt], seq=i)
                assert r["samples"] == 1600 and r["packet"] == "ok", r
                assert r["expected"] == i + 1 and r["lost"] == 0 and r["queue_free"] >= 0, r
            r = c.ingest_audio("talk", pcm[:pkt], seq=2)
            assert r["packet"] == "duplicate" and r["samples"] == 0, r
            r = c.ingest_audio("talk", flush=True)
            assert r["packet"] == "none" and r["expected"] == -1, r
            items = collect(ev, lambda xs: any(isinstance(x, rc.TranscriptEvent) and x.final
                                               for x in xs), 120)
            assert not [x for x in items if isinstance(x, rc.Gap)], items
            tr = [x for x in items if isinstance(x, rc.TranscriptEvent)]
            assert [x.seq for x in tr] == list(range(1, len(tr) + 1)), tr
            assert all(x.status == "OK" and x.version == -1 for x in tr), tr
            assert tr[-1].final and tr[-1].tentative == "" and tr[-1].audio_s >= 2.7, tr[-1]
            text = "".join(x.committed for x in tr)
            assert "slid on the smooth" in text, text
        stats = c.session_stats("talk")["asr"]
        assert stats["finishes"] == 1 and stats["decodes"] >= 2, stats
        # refused before anything is sent
        sent = c.last_request_id
        raises(rc.InvalidArgumentError, lambda: c.ingest_audio("talk", "text", seq=0))
        raises(rc.InvalidArgumentError, lambda: c.ingest_audio("talk", pcm[:pkt]))
        raises(rc.InvalidArgumentError, lambda: c.ingest_audio("talk"))
        raises(rc.RangeError, lambda: c.ingest_audio("talk", bytes((1 << 20) + 2), seq=0))
        assert c.last_request_id == sent
        # the server's refusals
        raises(rc.UnsupportedError, lambda: c.ingest_audio("talk", pcm[:pkt], seq=0,
                                                           codec="flac"))
        raises(rc.FormatError, lambda: c.ingest_audio("talk", b"\x01", seq=0))
        raises(rc.RangeError, lambda: c.ingest_audio("talk", pcm[:pkt], seq=0, rate=0))
        raises(rc.NotFoundError, lambda: c.ingest_audio("nobody", pcm[:pkt], seq=0))
        c.session_create("plain")
        raises(rc.UnsupportedError, lambda: c.ingest_audio("plain", pcm[:pkt], seq=0))
        assert d.stop() == 0, d.log()


# ---- 4. gaps -----------------------------------------------------------------------------------

def frames(session, kind, seq, **fields):
    return [f"{session}/{kind}".encode(),
            msgpack.packb({"v": 1, "seq": seq, "session": session, "kind": kind, **fields})]


def t_gaps():
    # synthetic: the parser is fed a sequence with holes
    p = rc.EventParser()
    tok = {"rid": 7, "piece": "x"}
    out = [p.feed(frames("s", "token", n, **tok)) for n in (1, 2, 5, 6)]
    assert [len(o) for o in out] == [1, 1, 2, 1], out
    assert out[2][0] == rc.Gap("s/token", 3, 5) and out[2][0].missing == 2, out[2]
    assert isinstance(out[2][1], rc.TokenEvent) and out[2][1].seq == 5
    # topics are counted apart: another topic's first event is no gap, its hole is
    assert len(p.feed(frames("s", "answer", 4, rid=7, answer="a"))) == 1
    g = p.feed(frames("s", "answer", 6, rid=7, answer="a"))
    assert g[0] == rc.Gap("s/answer", 5, 6), g
    # seq back to 1 (a restarted rilld): a new count, no gap; a repeat: no gap
    assert len(p.feed(frames("s", "token", 1, **tok))) == 1
    assert len(p.feed(frames("s", "token", 1, **tok))) == 1
    assert (p.gaps, p.missed) == (2, 3), (p.gaps, p.missed)
    # malformed messages are skipped, counted, and leave the counts alone
    before = dict(p.last_seq)
    bad = [[b"s/token"],  # one frame
           frames("s", "token", 9, **tok) + [b""],  # three
           [b"s/token", b"\xc1"],  # not msgpack
           [b"s/token", msgpack.packb([1, 2])],  # not a map
           [b"s/token", msgpack.packb({"v": 1, "session": "s", "kind": "token"})],  # no seq
           [b"s/token", msgpack.packb({"v": 1, "seq": 0, "session": "s", "kind": "token"})],
           [b"s/token", msgpack.packb({"v": 2, "seq": 9, "session": "s", "kind": "token"})],
           [b"t/token", frames("s", "token", 9)[1]],  # topic and payload disagree
           [b"stoken", frames("s", "token", 9)[1]],  # no kind in the topic
           [b"s/token", b"\x85\xa1v\x01\xa3seq\x09\xa7session\xa1s\xa4kind\xa5token"
            b"\xa5piece\xa2\xff\xfe"],  # a piece that is not UTF-8
           [b"\xff/token", frames("s", "token", 9)[1]]]
    for m in bad:
        assert p.feed(m) == [], m
    assert p.bad_events == len(bad) and p.last_seq == before, (p.bad_events, p.last_seq)
    # an unknown kind comes through as a plain Event with its fields
    (e,) = p.feed(frames("s", "weather", 1, wind=3))
    assert type(e) is rc.Event and e.fields == {"wind": 3} and e.kind == "weather", e
    # seeded with where a topic stood: the first event can show a gap
    p2 = rc.EventParser({"s/token": 3})
    assert p2.feed(frames("s", "token", 6, **tok))[0] == rc.Gap("s/token", 4, 6)

    # real: events rilld published while nobody listened show as a gap to an iterator
    # resumed from the last one's last_seq
    with tempfile.TemporaryDirectory() as tmp, Rilld(tmp) as d, d.client() as c:
        c.session_create("alpha")
        c.ingest_text("alpha", FACTS, flush=True)
        with c.events("alpha") as ev:
            time.sleep(0.3)
            c.ask("alpha", QUESTION, max_tokens=6)
            collect(ev, lambda xs: any(isinstance(x, rc.AnswerEvent) for x in xs))
            mark = ev.last_seq
        assert mark["alpha/answer"] == 1 and mark["alpha/token"] >= 1, mark
        c.ask("alpha", "What is the capital of France?", max_tokens=6)  # unobserved
        with c.events("alpha", last_seq=mark) as ev2:
            time.sleep(0.3)
            c.ask("alpha", "What colour is the sky?", max_tokens=6)
            items = collect(ev2, lambda xs: any(isinstance(x, rc.AnswerEvent) for x in xs))
            gaps = [x for x in items if isinstance(x, rc.Gap)]
            by = {g.topic: g for g in gaps}
            assert by["alpha/answer"] == rc.Gap("alpha/answer", 2, 3), gaps
            assert by["alpha/token"].expected == mark["alpha/token"] + 1 and \
                by["alpha/token"].missing >= 1, gaps
            # each gap comes right before the event that revealed it
            for i, x in enumerate(items):
                if isinstance(x, rc.Gap):
                    assert items[i + 1].topic == x.topic and items[i + 1].seq == x.got, items
        assert d.stop() == 0, d.log()


# ---- 5. CURVE ----------------------------------------------------------------------------------

def keygen(prefix):
    """The key files of `rill keygen PREFIX`: (PREFIX.pub, PREFIX.key)."""
    harness_keygen(RILL, prefix)
    return prefix + ".pub", prefix + ".key"


def t_curve():
    with tempfile.TemporaryDirectory() as tmp:
        keys, own = os.path.join(tmp, "keys"), os.path.join(tmp, "own")
        os.makedirs(os.path.join(keys, "clients"))
        os.makedirs(own)
        spub, _ = keygen(os.path.join(keys, "server"))
        (apub, akey), (bpub, bkey), (cpub, ckey) = (keygen(os.path.join(own, n))
                                                    for n in "abc")
        for p in (apub, bpub):  # c stays unlisted
            shutil.copy(p, os.path.join(keys, "clients"))
        # key files, read as rilld reads them
        assert rc.read_key(spub) == open(spub).read().strip()
        bad = os.path.join(tmp, "bad.pub")
        for text in ("", "short", open(apub).read().strip() + " more", "~" * 40,
                     "#" * 39 + "\x00", "%" * 40, " " * 5000):
            with open(bad, "w") as f:
                f.write(text)
            raises(rc.FormatError, lambda: rc.read_key(bad), "RILL_EFORMAT")
        raises(rc.RillError, lambda: rc.read_key(os.path.join(tmp, "none.pub")), "RILL_EIO")
        with open(bad, "w") as f:
            f.write("\n\t " + open(apub).read().strip() + "\r\n\v\f")
        assert rc.read_key(bad) == open(apub).read().strip()

        with Rilld(os.path.join(tmp), "--curve-keys", keys) as d:
            assert "CURVE" in d.log(), d.log()
            # a's keys as paths, b's as Z85 text
            a = d.client(server_key=spub, public_key=apub, secret_key=akey, timeout=20)
            b = d.client(server_key=rc.read_key(spub), public_key=rc.read_key(bpub),
                         secret_key=rc.read_key(bkey), timeout=20)
            assert a.session_create("A-session") == "A-session"
            a.ingest_text("A-session", FACTS, flush=True)
            assert b.session_list() == [] and a.session_list() == ["A-session"]
            for fn in (lambda: b.ask("A-session", "q"), lambda: b.session_stats("A-session"),
                       lambda: b.ingest_text("A-session", "x", flush=True),
                       lambda: b.standing_list("A-session"),
                       lambda: b.session_close("A-session")):
                e = raises(rc.NotPermittedError, fn, "RILL_EPERM")
                assert "not your session" in e.message, e
            assert b.session_create("B-session") == "B-session"
            raises(rc.NotPermittedError, lambda: a.session_stats("B-session"), "RILL_EPERM")
            raises(rc.ExistsError, lambda: b.session_create("A-session"), "RILL_EEXIST")
            # events: a's iterator gets a's session's events over CURVE; b's gets none of them
            with a.events("A-session") as ea, b.events("A-session") as eb:
                time.sleep(0.3)
                ans = a.ask("A-session", QUESTION, max_tokens=8)
                items = collect(ea, lambda xs: any(isinstance(x, rc.AnswerEvent) for x in xs))
                assert any(isinstance(x, rc.TokenEvent) for x in items), items
                assert items[-1].answer == ans.answer and "42" in ans.answer, (items, ans)
                assert eb.poll(0.5) is None
            # an unlisted key gets no reply at all: a timeout
            cc = d.client(server_key=spub, public_key=cpub, secret_key=ckey, timeout=1.0)
            raises(rc.RillTimeout, cc.session_list, "RILL_ETIMEDOUT")
            cc.close()
            a.close()
            b.close()
            assert d.stop() == 0, d.log()


# ---- 6. a fake rilld ---------------------------------------------------------------------------

class Fake:
    """A ROUTER on a free port that answers each request with the replies script(req) returns
    (a list of raw frames), recording the requests."""

    def __init__(self, script):
        self.script, self.requests = script, []
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.ep = f"tcp://127.0.0.1:{port}"
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.stop.is_set():
            if not self.sock.poll(50):
                continue
            ident, *rest = self.sock.recv_multipart()
            req = msgpack.unpackb(rest[-1], raw=False)
            self.requests.append((rest, req))
            for frame in self.script(req):
                self.sock.send_multipart([ident, frame])

    def close(self):
        self.stop.set()
        self.th.join()
        self.sock.close(0)
        self.ctx.term()


def reply(rid, status="OK", message="", result=None, **extra):
    m = {"v": 1, "id": rid, "status": status, "message": message, "result": result}
    m.update(extra)
    return msgpack.packb(m)


def t_fake():
    def script(req):
        rid, cmd = req["id"], req["cmd"]
        if cmd == "session.list":  # a stale reply first, then this one's
            return [reply(rid + 1000, result=["wrong"]), reply(rid, result=["right"])]
        if cmd == "server.stats":
            return [reply(rid, result={"sessions": 0})]
        if cmd == "v2":
            return [msgpack.packb({"v": 2, "id": rid, "status": "OK", "message": "",
                                   "result": None})]
        if cmd == "notutf8":
            return [b"\x85\xa1v\x01\xa2id" + msgpack.packb(rid) +
                    b"\xa6status\xa2OK\xa7message\xa2\xc3\x28\xa6result\xc0"]
        if cmd == "notmap":
            return [msgpack.packb([rid])]
        if cmd == "extra":
            return [reply(rid, more=1)]
        if cmd == "trailing":
            return [reply(rid) + b"\x00"]
        if cmd == "weird":
            return [reply(rid, "EWEIRD", "something new")]
        if cmd == "full":
            return [reply(rid, "EFULL", "queue full")]
        if cmd == "ask":
            return [reply(rid, result={"answer": "x", "tokens": 1})]  # fields missing
        return []  # silence

    f = Fake(script)
    try:
        with rc.Client(f.ep, timeout=2.0) as c:
            assert c.session_list() == ["right"] and c.stale_replies == 1
            assert c.server_stats() == {"sessions": 0}
            # the requests as sent: one frame {v, id, cmd[, args]}, ids distinct and rising
            (fr1, r1), (fr2, r2) = f.requests[:2]
            assert len(fr1) == 1 and r1 == {"v": 1, "id": r1["id"], "cmd": "session.list"}, r1
            assert r2["id"] == r1["id"] + 1 and "args" not in r2, r2
            raises(rc.UnsupportedError, lambda: c.call("v2"), "RILL_EUNSUPPORTED")
            for cmd in ("notutf8", "notmap", "extra", "trailing"):
                raises(rc.FormatError, lambda: c.call(cmd), "RILL_EFORMAT")
            e = raises(rc.RillError, lambda: c.call("weird"), "RILL_EWEIRD")
            assert type(e) is rc.RillError and e.message == "something new" and \
                e.cmd == "weird", e
            raises(rc.FullError, lambda: c.call("full"), "RILL_EFULL")
            raises(rc.FormatError, lambda: c.ask("s", "q"), "RILL_EFORMAT")
            _, ra = f.requests[-1]
            assert ra["args"] == {"session": "s", "question": "q"}, ra  # None args not sent
            t0 = time.time()
            raises(rc.RillTimeout, lambda: c.call("silence", timeout=0.3), "RILL_ETIMEDOUT")
            assert time.time() - t0 < 2
            assert c.session_list() == ["right"]
        c.close()
        raises(rc.RillError, c.session_list, "RILL_ECLOSED")
    finally:
        f.close()


# ---- 7. pip install ----------------------------------------------------------------------------

def t_install():
    """`pip install clients/python` into a fresh virtual environment, without network: the
    module imports from the environment, not from the source tree, and talks to rilld."""
    with tempfile.TemporaryDirectory() as tmp:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       check=True, timeout=120)
        py = os.path.join(venv, "bin", "python")
        # the dependencies (pyzmq, msgpack) and build tools come from this interpreter's
        # environment: the new one sees its site-packages through a .pth file
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True,
                              check=True).stdout.strip()
        ours = [p for p in sys.path if os.path.isdir(p) and
                os.path.basename(p) in ("site-packages", "dist-packages")]
        with open(os.path.join(site, "rill-test-deps.pth"), "w") as f:
            f.write("\n".join(ours) + "\n")
        probe = subprocess.run(
            [py, "-c", "import setuptools, importlib.util as u\n"
             "v = tuple(int(x) for x in setuptools.__version__.split('.')[:2])\n"
             "print(int(v >= (70, 1) or u.find_spec('wheel') is not None))"],
            capture_output=True, text=True)
        if probe.stdout.strip() != "1":
            print("  skip: this environment cannot build a wheel offline (setuptools < 70.1 "
                  "and no wheel package; scripts/setup.sh installs tools/requirements.txt)",
                  probe.stderr)
            return SKIP
        src = os.path.join(tmp, "src")  # a copy: setuptools writes build files beside it
        shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                "__pycache__"))
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PYTHONNOUSERSITE="1")
        env.pop("PYTHONPATH", None)
        p = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                            src], capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        shutil.rmtree(src)
        with Rilld(tmp) as d:
            code = ("import sys, rill_client as r\n"
                    "c = r.Client(sys.argv[1], sys.argv[2], timeout=20)\n"
                    "print(r.__file__)\n"
                    "print(c.session_create('inst'), c.session_list())\n"
                    "try:\n    c.session_stats('nope')\n"
                    "except r.NotFoundError as e:\n    print(e.status)\n")
            q = subprocess.run([py, "-c", code, d.req_ep, d.ev_ep], capture_output=True,
                               text=True, env=env, cwd=tmp, timeout=60)
            assert q.returncode == 0, q.stdout + q.stderr
            where, made, status = q.stdout.splitlines()
            assert where.startswith(os.path.realpath(venv)) or where.startswith(venv), where
            assert made == "inst ['inst']" and status == "RILL_ENOTFOUND", q.stdout
        # pip knows it: metadata and dependencies as declared
        s = subprocess.run([py, "-m", "pip", "show", "rill-client"], capture_output=True,
                           text=True, env=env)
        assert s.returncode == 0 and "Requires: msgpack, pyzmq" in s.stdout, s.stdout


TESTS = {"audio": t_audio, "commands": t_commands, "complete": t_complete, "errors": t_errors, "events": t_events,
         "gaps": t_gaps, "curve": t_curve, "fake": t_fake, "install": t_install}


def main():
    if zmq is None:
        print("skip: pyzmq and msgpack are needed (scripts/setup.sh makes .venv)")
        return SKIP
    names = ONLY or list(TESTS)
    needs_model = [n for n in names if n not in ("fake",)]
    if needs_model and not os.path.exists(MODEL):
        print(f"skip: no model at {MODEL}")
        return SKIP
    for n in names:
        check(n, TESTS[n])
    failed = [(n, e) for n, e in results if e not in (None, "skip")]
    skipped = [n for n, e in results if e == "skip"]
    for n, e in results:
        print(f"{'ok' if e is None else 'SKIP' if e == 'skip' else 'FAIL'} {n}"
              f"{'' if e in (None, 'skip') else ': ' + repr(e)}")
    print(f"{len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed")
    if failed:
        return 1
    return SKIP if skipped and len(skipped) == len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
