#!/usr/bin/env python3
"""rilld over loopback, as clients see it (docs/protocol.md is the contract): the whole command
set and its errors, a barrage of malformed frames, CURVE with per-key session ownership, a slow
subscriber that must not slow ingest, and restarts (kill -9 and SIGTERM) that lose no
acknowledged ingest.

Usage: test_server.py RILL_BINARY SOURCE_DIR [TEST...]   (TEST: commands, malformed, curve,
slow_subscriber, restart; default all). Each test starts its own daemons on free loopback ports
with a temporary --state and kills them at its end, so tests run alone or in parallel. Needs
pyzmq and msgpack (the project's .venv: scripts/setup.sh) and the default model
(models/SmolLM2-135M-Instruct.Q4_1.gguf, or $RILL_MODEL); exits 77 (skip) without them. Prints
'N passed, N failed' last.
"""
import os
import re
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rilld_harness import Rilld as _Rilld  # noqa: E402
from rilld_harness import keygen as harness_keygen  # noqa: E402
from rilld_harness import model_name, model_path, rilld_path, run_tests  # noqa: E402

try:
    import msgpack
    import zmq
except ImportError:  # pragma: no cover - reported as a skip
    zmq = msgpack = None

RILL, SRC = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3:]
MODEL = model_path(SRC)
# rilld names a model given as a bare FILE by the file's name without ".gguf" (rill_server.h)
MODEL_NAME = model_name(MODEL)
RILLD = rilld_path(RILL)
ERRORS = {"EFORMAT", "ERANGE", "EINVAL", "EUNSUPPORTED"}
FACTS = ("The capital of France is Paris. The sky is blue. Bob is 42 years old. "
         "The train leaves at nine.\n")
QUESTION = "How old is Bob?"
CTX = None


def strict_unpack(payload):
    """Decodes a reply or an event as a strict msgpack reader does: every str must be valid
    UTF-8 (docs/protocol.md: rilld escapes what is not), or this raises UnicodeDecodeError."""
    return msgpack.unpackb(payload, raw=False, unicode_errors="strict")


# ---- daemons ---------------------------------------------------------------------------------

class Rilld(_Rilld):
    """rilld on free ports with the test model (rilld_harness.Rilld)."""

    def __init__(self, state, *extra, **kw):
        super().__init__(RILLD, MODEL, state, *extra, **kw)


class Client:
    """A DEALER speaking the protocol. curve: (public, secret, server_public), Z85."""

    def __init__(self, d, curve=None, rcvhwm=None):
        self.sock = CTX.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # a DEALER whose connection was refused (CURVE) has nowhere to queue: never block
        self.sock.setsockopt(zmq.SNDTIMEO, 10000)
        if rcvhwm is not None:
            self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        if curve is not None:
            self.sock.curve_publickey = curve[0].encode()
            self.sock.curve_secretkey = curve[1].encode()
            self.sock.curve_serverkey = curve[2].encode()
        self.sock.connect(d.req_ep)
        self.next_id = 1

    def close(self):
        self.sock.close(0)

    def send(self, cmd, args=None, **envelope):
        rid = self.next_id
        self.next_id += 1
        m = {"v": 1, "id": rid, "cmd": cmd}
        if args is not None:
            m["args"] = args
        m.update(envelope)
        self.sock.send(msgpack.packb(m))
        return rid

    def recv(self, timeout=60):
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no reply")
        frames = self.sock.recv_multipart()
        assert len(frames) in (1, 2) and (len(frames) == 1 or frames[0] == b""), frames
        r = strict_unpack(frames[-1])
        assert set(r) == {"v", "id", "status", "message", "result"} and r["v"] == 1, r
        return r

    def req(self, cmd, args=None, timeout=60):
        rid = self.send(cmd, args)
        r = self.recv(timeout)
        assert r["id"] == rid, (rid, r)
        return r

    def call(self, cmd, **args):
        r = self.req(cmd, args)
        assert r["status"] == "OK" and r["message"] == "", (cmd, args, r)
        return r["result"]

    def err(self, cmd, **args):
        r = self.req(cmd, args)
        assert r["status"] != "OK" and r["result"] is None and r["message"], (cmd, args, r)
        return r["status"]

    def raw(self, frames):
        self.sock.send_multipart(frames if isinstance(frames, list) else [frames])


class Sub:
    """A SUB socket that collects events: (topic, payload) pairs."""

    def __init__(self, d, *topics, curve=None, rcvhwm=None, rcvbuf=None):
        self.sock = CTX.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        if rcvhwm is not None:
            self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        if rcvbuf is not None:
            self.sock.setsockopt(zmq.RCVBUF, rcvbuf)
        if curve is not None:
            self.sock.curve_publickey = curve[0].encode()
            self.sock.curve_secretkey = curve[1].encode()
            self.sock.curve_serverkey = curve[2].encode()
        self.sock.connect(d.ev_ep)
        for t in topics:
            self.sock.setsockopt(zmq.SUBSCRIBE, t.encode())
        self.events = []

    def drain(self, timeout=0.0, until=None):
        """Reads events until none came for `timeout` s, or until until(events) is true
        (then gives up after `timeout` s in all)."""
        deadline = time.time() + timeout
        while True:
            if until is not None and until(self.events):
                return self.events
            left = deadline - time.time() if until is not None else timeout
            if not self.sock.poll(max(0, int(left * 1000))):
                return self.events
            topic, payload = self.sock.recv_multipart()
            e = strict_unpack(payload)
            self.events.append((topic.decode("utf-8"), e))

    def of(self, topic):
        return [e for t, e in self.events if t == topic]

    def close(self):
        self.sock.close(0)


def stats(c):
    return c.call("server.stats")


# ---- 1. the command set ------------------------------------------------------------------------

def t_commands():
    with tempfile.TemporaryDirectory() as tmp, Rilld(os.path.join(tmp, "state")) as d:
        c = Client(d)
        sub = Sub(d, "alpha/")
        system = "You are a careful assistant. Answer with a few words."
        assert c.call("session.list") == []
        assert c.call("session.create", session="alpha", window=512, sinks=8,
                      system=system) == {"session": "alpha", "model": MODEL_NAME}
        ingested = stats(c)["tokens_ingest"]
        assert ingested > 0, ingested  # the system prompt, evaluated once
        assert c.call("session.create", session="beta", window=512, sinks=8,
                      system=system) == {"session": "beta", "model": MODEL_NAME}
        st = stats(c)
        assert st["tokens_ingest"] == ingested, ("a shared prompt was evaluated again", st)
        a, b = c.call("session.stats", session="alpha"), c.call("session.stats", session="beta")
        assert a["n_seen"] == b["n_seen"] > 0 and (a["window"], a["sinks"]) == (512, 8), (a, b)
        dflt = c.call("session.create")["session"]
        assert dflt.startswith("s") and dflt[1:].isdigit(), dflt
        sd = c.call("session.stats", session=dflt)
        assert (sd["window"], sd["sinks"], sd["n_seen"]) == (2048, 16, 0), sd
        assert c.call("session.create", session="nowin", window=0)["session"] == "nowin"
        assert c.call("session.stats", session="nowin")["window"] == 0
        assert c.err("session.create", session="alpha") == "EEXIST"
        assert c.err("session.create", session="bad name") == "EINVAL"
        assert c.err("session.create", session="x" * 65) == "EINVAL"
        assert c.err("session.create", session="big", window=9000) == "ERANGE"
        assert sorted(c.call("session.list")) == sorted(["alpha", "beta", dflt, "nowin"])

        # ingest.text: flushed text is all in; unflushed text may hold back its unstable end
        v0 = c.call("session.stats", session="alpha")["version"]
        r = c.call("ingest.text", session="alpha", text=FACTS, flush=True)
        assert r["version"] > v0, (r, v0)
        s1 = settled_stats(c, "alpha")  # the reply means logged and queued, not evaluated
        assert s1["held_text"] == 0 and s1["n_seen"] > a["n_seen"] and s1["version"] == \
            r["version"], s1
        assert set(s1) >= {"version", "n_seen", "n_resident", "n_pending", "pages", "bytes",
                           "window", "sinks", "standing"}, s1
        c.call("ingest.text", session="beta", text="The code word is", flush=False)
        held = c.call("session.stats", session="beta")["held_text"]
        c.call("ingest.text", session="beta", text=" banana", flush=False)
        c.call("ingest.text", session="beta", text="", flush=True)
        sb = settled_stats(c, "beta")
        assert sb["held_text"] == 0 and held >= 0 and sb["n_seen"] > b["n_seen"], sb

        # ingest.ticks: valid ticks become lines, invalid ones are counted and skipped
        ts = 1704205800000000000
        ticks = [
            {"symbol": "AAPL", "ts": ts, "price": 187.25, "size": 100, "side": "B"},
            {"symbol": "MSFT", "ts": ts + 1000, "price": 374.5, "size": 50, "side": "S"},
            {"symbol": "AAPL", "ts": ts + 2000, "price": 187.5, "size": 10},
            {"symbol": "AAPL", "ts": ts + 3000, "price": "high", "size": 10},  # price: str
            {"symbol": "AAPL", "ts": ts + 4000, "size": 10},  # no price
            {"symbol": "", "ts": ts + 5000, "price": 1.0, "size": 1},  # empty symbol
        ]
        r = c.call("ingest.ticks", session=dflt, ticks=ticks)
        assert (r["accepted"], r["rejected"]) == (3, 3) and r["lines"] >= 1, r
        assert r["version"] >= 1, r
        assert settled_stats(c, dflt)["n_seen"] > 0
        r = c.call("ingest.ticks", session=dflt, ticks=[])
        assert (r["accepted"], r["rejected"], r["lines"]) == (0, 0, 0), r
        assert c.err("ingest.ticks", session=dflt, ticks={"symbol": "AAPL"}) == "EFORMAT"
        assert c.err("ingest.ticks", session=dflt, ticks="AAPL,1,2,3") == "EFORMAT"

        # ask: the reply, the token events (seq 1, 2, 3, ... on alpha/token), the answer event
        rid = c.send("ask", {"session": "alpha", "question": QUESTION, "max_tokens": 24})
        r = c.recv()
        assert r["id"] == rid and r["status"] == "OK", r
        ans = r["result"]
        assert set(ans) == {"answer", "tokens", "version", "context", "ttft_ms", "total_ms",
                            "cached", "backlog", "ttft_compute_ms", "consistency"}, ans
        assert "42" in ans["answer"] and ans["consistency"] == "acknowledged", ans
        assert 1 <= ans["tokens"] <= 24 and ans["version"] == s1["version"], ans
        assert ans["context"] == s1["n_resident"] and ans["cached"] is False, (ans, s1)
        assert 0 < ans["ttft_ms"] <= ans["total_ms"], ans
        assert ans["backlog"] >= 0 and 0 < ans["ttft_compute_ms"] <= ans["ttft_ms"] + 1e-3, ans
        sub.drain(10, until=lambda ev: any(t == "alpha/answer" for t, _ in ev))
        toks = sub.of("alpha/token")
        assert [e["seq"] for e in toks] == list(range(1, len(toks) + 1)) and toks, toks
        for e in toks:
            assert e["v"] == 1 and e["session"] == "alpha" and e["kind"] == "token", e
            assert e["rid"] == rid, (e, rid)
        assert ans["answer"] in "".join(e["piece"] for e in toks), toks
        (fin,) = sub.of("alpha/answer")
        assert fin["seq"] == 1 and fin["rid"] == rid and fin["answer"] == ans["answer"], fin
        assert fin["version"] == ans["version"] and fin["kind"] == "answer", fin
        assert (fin["backlog"], fin["ttft_compute_ms"]) == (ans["backlog"],
                                                            ans["ttft_compute_ms"]), fin
        # the next ask continues the topics' numbering
        rid2 = c.send("ask", {"session": "alpha", "question": "What is the capital of France?"})
        r2 = c.recv()
        assert r2["id"] == rid2 and "Paris" in r2["result"]["answer"], r2
        sub.drain(10, until=lambda ev: len([1 for t, _ in ev if t == "alpha/answer"]) == 2)
        toks = sub.of("alpha/token")
        assert [e["seq"] for e in toks] == list(range(1, len(toks) + 1)), toks
        assert [e["seq"] for e in sub.of("alpha/answer")] == [1, 2]
        assert {e["rid"] for e in toks} == {rid, rid2}, toks
        # max_tokens bounds the answer
        assert c.call("ask", session="alpha", question="Describe Paris in detail.",
                      max_tokens=1)["tokens"] == 1

        # standing queries: registered, refreshed (an event with version and age), listed,
        # refreshed again after new data, unregistered
        sub2 = Sub(d, "alpha/standing")
        time.sleep(0.2)  # let the subscription reach rilld
        q = c.call("standing.register", session="alpha", question="When does the train leave?",
                   max_tokens=8)
        qid = q["qid"]
        assert isinstance(qid, int) and qid > 0, q
        sub2.drain(20, until=lambda ev: len(ev) >= 1)
        (ev,) = sub2.of("alpha/standing")
        assert ev["qid"] == qid and ev["question"] == "When does the train leave?", ev
        assert ev["seq"] == 1 and ev["version"] == s1["version"] and ev["age_ms"] >= 0, ev
        assert ev["compute_ms"] > 0 and ev["data_version"] >= ev["version"], ev
        assert "nine" in ev["answer"].lower() or "9" in ev["answer"], ev
        (lst,) = c.call("standing.list", session="alpha")
        assert lst["qid"] == qid and lst["question"] == ev["question"], lst
        assert lst["version"] == ev["version"] and lst["refreshes"] >= 1 and lst["age_ms"] >= 0
        assert lst["answer"] == ev["answer"] and lst["answer_version"] == ev["version"], lst
        assert c.call("session.stats", session="alpha")["standing"] == 1
        v2 = c.call("ingest.text", session="alpha", text="The train now leaves at ten.\n",
                    flush=True)["version"]
        sub2.drain(20, until=lambda ev: any(e["version"] >= v2 for _, e in ev))
        last = sub2.of("alpha/standing")[-1]
        assert last["version"] == v2 and last["seq"] == len(sub2.of("alpha/standing")), last
        assert c.call("standing.unregister", session="alpha", qid=qid) is None
        assert c.call("standing.list", session="alpha") == []
        assert c.err("standing.unregister", session="alpha", qid=qid) == "ENOTFOUND"
        assert c.err("standing.unregister", session="beta", qid=12345) == "ENOTFOUND"

        # snapshot, server.stats
        snap = c.call("session.snapshot", session="alpha")["path"]
        assert os.path.isfile(snap) and os.path.dirname(os.path.abspath(snap)) == \
            os.path.abspath(d.state), snap
        st = stats(c)
        for k in ("sessions", "requests", "bad_requests", "events", "event_drops",
                  "reply_drops", "steps", "busy_ms", "idle_ms", "tokens_decode",
                  "tokens_prefill", "tokens_ingest", "free_pages", "questions"):
            assert k in st, (k, st)
        assert st["sessions"] == 4 and st["events"] >= len(toks) + 3 and st["questions"] >= 3

        # close: gone from the list, its files gone, its name free again
        assert c.call("session.close", session="beta") is None
        assert "beta" not in c.call("session.list")
        assert not [f for f in os.listdir(d.state) if f.startswith("beta.")], \
            os.listdir(d.state)
        assert c.err("session.stats", session="beta") == "ENOTFOUND"
        assert c.err("session.close", session="beta") == "ENOTFOUND"
        assert c.call("session.create", session="beta")["session"] == "beta"
        assert stats(c)["sessions"] == 4

        # errors: unknown sessions, arguments, commands and versions
        for cmd, args in [("session.stats", {}), ("session.close", {}),
                          ("session.snapshot", {}), ("ingest.text", {"text": "x"}),
                          ("ingest.ticks", {"ticks": []}), ("ask", {"question": "q"}),
                          ("standing.register", {"question": "q"}),
                          ("standing.unregister", {"qid": 1}), ("standing.list", {})]:
            assert c.err(cmd, session="nope", **args) == "ENOTFOUND", cmd
        bad_before = stats(c)["bad_requests"]
        assert c.err("session.stats", session="alpha", bogus=1) == "EINVAL"
        assert c.err("session.list", session="alpha") == "EINVAL"
        assert c.err("server.stats", verbose=True) == "EINVAL"
        assert c.err("ask", session="alpha") == "EINVAL"  # no question
        assert c.err("ask", session="alpha", question="") == "EINVAL"
        assert c.err("session.frobnicate") == "EINVAL"
        assert c.err("ask", session="alpha", question="q", max_tokens=5000) == "ERANGE"
        assert c.err("ask", session="alpha", question="q", max_tokens=0) == "ERANGE"
        assert c.err("ingest.text", session="alpha", text=5) == "EFORMAT"
        assert c.err("ingest.text", session="alpha", text="x", flush=1) == "EFORMAT"
        for env, want in [({"v": 2}, "EUNSUPPORTED"), ({"v": 0}, "EUNSUPPORTED"),
                          ({"v": 2, "trace": "abc"}, "EUNSUPPORTED"),
                          ({"trace": "abc"}, "EINVAL"), ({"v": None}, "EINVAL"),
                          ({"v": "1"}, "EINVAL")]:
            m = {"v": 1, "id": 777, "cmd": "server.stats"}
            m.update(env)
            if m["v"] is None:
                del m["v"]
            c.raw(msgpack.packb(m))
            r = c.recv()
            assert r["status"] == want and r["id"] == 777 and r["result"] is None, (env, r)
        assert stats(c)["bad_requests"] == bad_before + 10 + 6
        # a request after an empty delimiter frame (as REQ sends) gets one back
        c.raw([b"", msgpack.packb({"v": 1, "id": 9, "cmd": "session.list"})])
        assert c.sock.poll(10000)
        frames = c.sock.recv_multipart()
        assert len(frames) == 2 and frames[0] == b"", frames
        assert strict_unpack(frames[1])["status"] == "OK"
        assert d.stop() == 0, d.log()


# ---- 2. malformed frames -----------------------------------------------------------------------

def p_str(s):
    b = s.encode() if isinstance(s, str) else s
    if len(b) < 32:
        return bytes([0xA0 | len(b)]) + b
    return (b"\xd9" + bytes([len(b)]) if len(b) < 256 else b"\xda" + struct.pack(">H", len(b))) + b


def p_uint(n):
    return bytes([n]) if n < 128 else b"\xcf" + struct.pack(">Q", n)


def p_map(pairs):
    return bytes([0x80 | len(pairs)]) + b"".join(p_str(k) + v for k, v in pairs)


# one value of every msgpack type (all wrong somewhere)
WRONG = [b"\xc0", b"\xc2", b"\xc3", b"\x05", b"\xff", b"\xd3" + struct.pack(">q", -7),
         b"\xcf" + struct.pack(">Q", 2 ** 64 - 1), b"\xcb" + struct.pack(">d", 1.5),
         b"\xca" + struct.pack(">f", 2.0), p_str("text"), b"\xc4\x03abc", b"\x92\x01\x02",
         p_map([("k", b"\x01")]), b"\xd4\x01\x00", b"\xc7\x02\x05ab", p_str("")]

# every command with its arguments, valid
VALID = [
    ("session.create", [("session", p_str("m")), ("window", b"\x00"), ("sinks", b"\x00"),
                        ("system", p_str("sys"))]),
    ("session.close", [("session", p_str("m"))]),
    ("session.list", []),
    ("session.stats", [("session", p_str("m"))]),
    ("session.snapshot", [("session", p_str("m"))]),
    ("ingest.text", [("session", p_str("m")), ("text", p_str("t")), ("flush", b"\xc3")]),
    ("ingest.ticks", [("session", p_str("m")), ("ticks", b"\x90")]),
    ("ask", [("session", p_str("m")), ("question", p_str("q")), ("max_tokens", b"\x08")]),
    ("standing.register", [("session", p_str("m")), ("question", p_str("q")),
                           ("max_tokens", b"\x08")]),
    ("standing.unregister", [("session", p_str("m")), ("qid", b"\x07")]),
    ("standing.list", [("session", p_str("m"))]),
    ("server.stats", []),
]


def right_type(field, w):
    """Whether the value w has the type (not necessarily the range) the field takes."""
    if field in ("session", "system", "text", "question"):
        return w[0] & 0xE0 == 0xA0 and (w != p_str("") or field in ("system", "text"))
    if field == "flush":
        return w in (b"\xc2", b"\xc3")
    if field == "ticks":
        return w[0] & 0xF0 == 0x90
    # window, sinks, max_tokens, qid: positive integers (only qid has no upper bound)
    return w == b"\x05" or (field == "qid" and w[0] == 0xCF)


# byte strings that are not UTF-8, one of each kind: a stray continuation byte, overlong
# encodings, surrogates, code points above U+10FFFF, bytes that never occur, sequences cut
# short (at the end, and by a byte that cannot continue them)
BAD_UTF8 = [b"\x80", b"\xbb", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf",
            b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xfe",
            b"\xff", b"\xe2\x82", b"\xf0\x9f\x98", b"\xe2\x82A", b"\xc3("]


def escaped(b):
    """What rilld sends for the bytes b: each byte of an invalid sequence as \\xNN."""
    out, i = [], 0
    while i < len(b):
        for n in (4, 3, 2, 1):
            try:
                out.append(b[i:i + n].decode("utf-8"))
                i += n
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append("\\x%02x" % b[i])
            i += 1
    return "".join(out)


def envelope(cmd, args, rid=5):
    return p_map([("v", b"\x01"), ("id", bytes([rid])), ("cmd", p_str(cmd)),
                  ("args", p_map(args))])


def barrage():
    """(frames, the reply expected: True when rilld must answer with a decode error)."""
    rnd = random.Random(1234)
    out = []
    for _ in range(150):  # random bytes
        out.append(([bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 200)))], True))
    for _ in range(60):  # random bytes after a plausible start
        out.append(([b"\x84" + bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64)))],
                    True))
    ask = envelope("ask", VALID[7][1])
    for cut in range(1, len(ask)):  # a valid request cut at every point
        out.append(([ask[:cut]], True))
    out.append(([ask + b"\xc0"], True))  # a trailing byte
    out.append(([ask + ask], True))  # two requests in one frame
    huge = [b"\xdf\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff\x01", b"\xdb\xff\xff\xff\xffabc",
            b"\xc6\xff\xff\xff\xff", b"\xc9\x7f\xff\xff\xff\x01",
            b"\xde\xff\xff" + p_str("v") + b"\x01",
            p_map([("v", b"\x01"), ("id", b"\x01"), ("cmd", p_str("ingest.ticks")),
                   ("args", p_map([("session", p_str("m")),
                                   ("ticks", b"\xdd\x7f\xff\xff\xff\x80")]))]),
            p_map([("v", b"\x01"), ("id", b"\x01"), ("cmd", b"\xdb\x7f\xff\xff\xffask")])]
    out += [([h], True) for h in huge]
    for depth in (9, 12, 40, 1000):  # nesting
        deep = b"\x91" * depth + b"\xc0"
        out.append(([deep], True))
        out.append(([p_map([("v", b"\x01"), ("id", b"\x02"), ("cmd", p_str("ingest.ticks")),
                            ("args", p_map([("session", p_str("m")), ("ticks", deep)]))])],
                    True))
        out.append(([b"\x81\xa1k" * depth + b"\xc0"], True))
    # wrong types for every field of every command and of the envelope
    for cmd, args in VALID:
        for i in range(len(args)):
            for w in WRONG:
                a = list(args)
                if right_type(a[i][0], w):
                    continue
                a[i] = (a[i][0], w)
                out.append(([envelope(cmd, a)], True))
        for w in WRONG:  # args itself
            if w != b"\xc0" and not w.startswith(b"\x81"):
                out.append(([p_map([("v", b"\x01"), ("id", b"\x03"), ("cmd", p_str(cmd)),
                                    ("args", w)])], True))
    for w in WRONG:
        for key in ("v", "id", "cmd"):
            pairs = [("v", b"\x01"), ("id", b"\x04"), ("cmd", p_str("server.stats"))]
            if (key == "v" and w == b"\x01") or (key == "id" and w in (b"\x05", b"\xcf" +
                                                                      struct.pack(">Q", 1))):
                continue
            pairs = [(k, w if k == key else v) for k, v in pairs]
            out.append(([p_map(pairs)], True))
    out.append(([p_map([("v", b"\x01"), ("id", b"\xcf" + struct.pack(">Q", 2 ** 63)),
                        ("cmd", p_str("server.stats"))])], True))  # id too large
    out.append(([p_map([(b"\x01", b"\x01")])], True))  # a key that is not a string
    out.append(([b"\x81\x01\x01"], True))
    out.append(([p_map([("v", b"\x01"), ("id", b"\x01"), ("cmd", p_str("session.stats")),
                        ("args", b"\x81\x01" + p_str("m"))])], True))
    out.append(([b"\x92\x01\x02"], True))  # not a map
    out.append(([p_str("session.list")], True))
    out.append(([b"\xc1"], True))  # the reserved byte
    out.append(([b""], True))  # an empty frame
    out.append(([b"", b""], True))  # a delimiter and an empty frame
    out.append(([b"junk", b"more junk"], True))  # two frames
    out.append(([b"a", b"b", b"c", envelope("server.stats", [])], True))  # four
    out.append(([b"", envelope("server.stats", []), b"tail"], True))
    # bytes that are not UTF-8 where rilld echoes request bytes (the command name, an argument
    # name) or checks them (session names, envelope keys): every reply must still be UTF-8
    for bad in BAD_UTF8:
        out.append(([envelope(b"ingest.t" + bad + b"xt", [])], True))
        out.append(([envelope(bad, [])], True))
        for cmd, args in VALID:
            out.append(([envelope(cmd, args + [(b"ar" + bad + b"g", b"\x01")])], True))
            if any(k == "session" for k, _ in args):
                a = [(k, p_str(b"m" + bad) if k == "session" else v) for k, v in args]
                out.append(([envelope(cmd, a)], True))
        out.append(([p_map([("v", b"\x01"), ("id", b"\x06"), (b"c" + bad + b"md",
                                                             p_str("server.stats"))])], True))
    return out


def t_malformed():
    with tempfile.TemporaryDirectory() as tmp, \
            Rilld(os.path.join(tmp, "state"), "--max-msg", "4096") as d:
        c = Client(d)
        c.call("session.create", session="m", window=256, sinks=4)
        c.call("ingest.text", session="m", text=FACTS, flush=True)
        before = c.call("ask", session="m", question=QUESTION, max_tokens=16)
        bad0 = stats(c)["bad_requests"]

        raw = Client(d, rcvhwm=100000)
        cases = barrage()
        n = 0
        for i in range(0, len(cases), 200):  # pipelined, in batches
            batch = cases[i:i + 200]
            for frames, _ in batch:
                raw.raw(frames)
            for frames, _ in batch:
                r = raw.recv(30)
                assert r["status"] in ERRORS and r["result"] is None and r["message"], \
                    (frames, r)
                n += 1
        assert not raw.sock.poll(200), "more replies than requests"
        assert d.alive(), d.log()

        # frames above --max-msg: ZeroMQ drops them and the connection (no reply)
        for size in (4097, 70000):
            big = Client(d)
            big.raw(envelope("ingest.text", [("session", p_str("m")),
                                             ("text", b"\xdb" + struct.pack(">I", size) +
                                              b"x" * size)]))
            try:
                big.recv(1.0)
                raise AssertionError("a reply to a frame above --max-msg")
            except TimeoutError:
                pass
            big.close()
        # not ZeroMQ at all: bytes straight onto the TCP ports
        for ep in (d.req_ep, d.ev_ep):
            host, port = ep[len("tcp://"):].rsplit(":", 1)
            for blob in (b"GET / HTTP/1.0\r\n\r\n", bytes(range(256)) * 8, b"\xff" + b"\x00" * 8
                         + b"\x7f\x03\x00NULL" + b"\x00" * 60):
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    s.sendall(blob)
                    time.sleep(0.05)
        # junk on the event socket: subscription frames of any shape
        xs = CTX.socket(zmq.XSUB)
        xs.setsockopt(zmq.LINGER, 0)
        xs.connect(d.ev_ep)
        for f in (b"", b"\x01", b"\x00", b"\x02junk", b"\x01" + b"m" * 5000, b"\x01m/"):
            xs.send(f)
        time.sleep(0.3)
        xs.close(0)

        assert d.alive(), d.log()
        st = stats(c)
        assert st["bad_requests"] == bad0 + n, (st["bad_requests"], bad0, n)
        after = c.call("ask", session="m", question=QUESTION, max_tokens=16)
        assert (after["answer"], after["tokens"]) == (before["answer"], before["tokens"]), \
            (before, after)
        assert "42" in after["answer"], after
        assert c.call("session.list") == ["m"]  # nothing created by the junk

        # echoed bytes that are not UTF-8 are escaped, cut at a character's boundary
        for bad in BAD_UTF8:
            raw.raw(envelope(b"ingest.t" + bad + b"xt", []))
            r = raw.recv(30)
            assert r["message"] == "unknown command '%s'" % escaped(b"ingest.t" + bad + b"xt"), r
        raw.raw(envelope(b"x" * 39 + "\u00e9".encode(), []))  # the 40-byte cut inside the é
        assert raw.recv(30)["message"] == "unknown command '%s'" % ("x" * 39)
        raw.raw(envelope("ask", [("session", p_str("m")), ("qu\u00e9stion", p_str("q"))]))
        assert raw.recv(30)["message"] == "ask takes no argument 'qu\u00e9stion'"  # valid: as is
        hostile_strings(d, raw)
        assert d.stop() == 0, d.log()


def hostile_strings(d, raw):
    """Requests that rilld accepts, with bytes that are not UTF-8 in every string argument:
    each reply and event must decode strictly, and the questions it echoes come back
    escaped."""
    sub = Sub(d, "u/")
    time.sleep(0.3)  # the subscription reaches rilld

    def req(cmd, args):
        raw.raw(envelope(cmd, args))
        r = raw.recv(60)
        assert r["status"] == "OK" and r["message"] == "", (cmd, args, r)
        return r["result"]

    junk = b"".join(BAD_UTF8)
    req("session.create", [("session", p_str("u")), ("window", b"\x00"),
                           ("system", p_str(b"sys " + junk))])
    for bad in BAD_UTF8:
        req("ingest.text", [("session", p_str("u")), ("text", p_str(b"t" + bad + b"\n"))])
    tick = [("ts", b"\x01"), ("price", b"\x02"), ("size", b"\x03")]
    ticks = [p_map([("symbol", p_str(b"AA" + bad))] + tick) for bad in BAD_UTF8]
    ticks.append(p_map([("symbol", p_str("AAPL")), ("side", p_str(b"\xe2\x82"))] + tick))
    ticks.append(p_map([("symbol", p_str("AAPL")), (b"ven\xffue", p_str(b"\xff"))] + tick))
    st = req("ingest.ticks", [("session", p_str("u")),
                              ("ticks", b"\xdc" + struct.pack(">H", len(ticks)) + b"".join(ticks))])
    assert (st["accepted"], st["rejected"]) == (1, len(BAD_UTF8) + 1), st
    a = req("ask", [("session", p_str("u")), ("question", p_str(b"why " + junk + b"?")),
                    ("max_tokens", b"\x02")])
    assert isinstance(a["answer"], str), a
    q1 = b"what " + junk + b" now?"
    q2 = b"a" * 510 + "\u00e9".encode()  # the 511-byte display cut inside the é
    qid1 = req("standing.register", [("session", p_str("u")), ("question", p_str(q1)),
                                     ("max_tokens", b"\x02")])["qid"]
    qid2 = req("standing.register", [("session", p_str("u")), ("question", p_str(q2)),
                                     ("max_tokens", b"\x02")])["qid"]
    listed = {x["qid"]: x["question"] for x in req("standing.list", [("session", p_str("u"))])}
    assert listed == {qid1: escaped(q1), qid2: "a" * 510}, listed
    req("ingest.text", [("session", p_str("u")), ("text", p_str(b"more\n")), ("flush", b"\xc3")])
    sub.drain(120, until=lambda evs: {e["qid"] for t, e in evs if t == "u/standing"} >= {qid1})
    got = {e["qid"]: e["question"] for e in sub.of("u/standing")}
    assert got.get(qid1) == escaped(q1), (got, sub.events)
    assert any(t == "u/answer" for t, _ in sub.events), sub.events
    for qid in (qid1, qid2):
        req("standing.unregister", [("session", p_str("u")), ("qid", p_uint(qid))])
    req("session.close", [("session", p_str("u"))])
    sub.close()


# ---- 3. CURVE ----------------------------------------------------------------------------------

def keygen(prefix):
    return harness_keygen(RILL, prefix)


def t_curve():
    with tempfile.TemporaryDirectory() as tmp:
        keys, own = os.path.join(tmp, "keys"), os.path.join(tmp, "own")
        os.makedirs(os.path.join(keys, "clients"))
        os.makedirs(own)
        spub, _ = keygen(os.path.join(keys, "server"))
        ka, kb, kc = (keygen(os.path.join(own, n)) for n in ("a", "b", "c"))
        for n in ("a", "b"):  # c stays unlisted
            shutil.copy(os.path.join(own, n + ".pub"), os.path.join(keys, "clients"))
        assert oct(os.stat(os.path.join(keys, "server.key")).st_mode & 0o777) == "0o600"
        ca, cb, cc = ((k[0], k[1], spub) for k in (ka, kb, kc))
        with Rilld(os.path.join(tmp, "state"), "--curve-keys", keys) as d:
            assert "CURVE" in d.log(), d.log()
            a, b = Client(d, ca), Client(d, cb)
            assert a.call("session.create", session="A-session") == {"session": "A-session",
                                                                       "model": MODEL_NAME}
            a.call("ingest.text", session="A-session", text=FACTS, flush=True)
            assert b.call("session.list") == [] and a.call("session.list") == ["A-session"]
            for cmd, args in [("ingest.text", {"text": "x", "flush": True}),
                              ("ingest.ticks", {"ticks": []}), ("ask", {"question": "q"}),
                              ("session.stats", {}), ("session.close", {}),
                              ("session.snapshot", {}), ("standing.register",
                                                         {"question": "q"}),
                              ("standing.list", {}), ("standing.unregister", {"qid": 1})]:
                assert b.err(cmd, session="A-session", **args) == "EPERM", cmd
            assert b.call("session.create", session="B-session")["session"] == "B-session"
            assert a.call("session.list") == ["A-session"]
            assert a.err("session.stats", session="B-session") == "EPERM"

            # events: A's subscription receives A's session, B's receives nothing of it
            sa = Sub(d, "A-session/", curve=ca)
            sb = Sub(d, "A-session/", "A-session", "A", "", "B-session/", curve=cb)
            time.sleep(0.3)
            for attempt in range(3):
                a.call("ask", session="A-session", question=QUESTION, max_tokens=8)
                sa.drain(3, until=lambda ev: any(t == "A-session/answer" for t, _ in ev))
                if sa.of("A-session/answer"):
                    break
            assert sa.of("A-session/token") and sa.of("A-session/answer"), sa.events
            b.call("ask", session="B-session", question="Hi?", max_tokens=2)
            sb.drain(1.0)
            assert sb.events and all(t.startswith("B-session/") for t, _ in sb.events), \
                sb.events
            sa.drain(0.3)
            assert all(t.startswith("A-session/") for t, _ in sa.events), sa.events

            # a key not listed gets no reply at all, nor does a client without CURVE
            for cl in (Client(d, cc), Client(d)):
                try:
                    cl.send("session.list")
                    cl.recv(1.5)
                    raise AssertionError("an unlisted client got a reply")
                except (TimeoutError, zmq.Again):
                    pass
                cl.close()
            sc = Sub(d, "A-session/", "", curve=cc)
            a.call("ask", session="A-session", question=QUESTION, max_tokens=4)
            assert not sc.drain(1.0), sc.events

            # a closed session's name stays its owner's: B's subscriptions to it stay silent
            a.call("session.close", session="A-session")
            assert b.err("session.create", session="A-session") == "EEXIST"
            assert a.call("session.create", session="A-session")["session"] == "A-session"
            a.call("ingest.text", session="A-session", text=FACTS, flush=True)
            sb.events.clear()
            a.call("ask", session="A-session", question=QUESTION, max_tokens=4)
            sb.drain(1.0)
            assert not [t for t, _ in sb.events if t.startswith("A-session")], sb.events
            s = stats(a)
            assert s["sessions"] == 2, s
            assert d.stop() == 0, d.log()

        # without keys: non-loopback endpoints are refused unless --insecure-bind
        st = os.path.join(tmp, "state2")
        d = Rilld(st, host="0.0.0.0")
        d.start(expect_exit=True)
        assert d.proc.returncode not in (0, None), d.proc.returncode
        assert "--insecure-bind" in d.log() and "refusing" in d.log(), d.log()
        with Rilld(st, "--insecure-bind", host="0.0.0.0") as d:
            assert "INSECURE" in d.log(), d.log()
            assert Client(d).call("session.list") == []
            assert d.stop() == 0
        with Rilld(st) as d:
            assert "loopback only" in d.log(), d.log()


# ---- 4. a slow subscriber ----------------------------------------------------------------------

SESSIONS = 6
LONG_Q = "List the numbers from 1 to 100, separated by commas."


def wname(i):
    # long names make long events (the name is in the topic and the payload), so that fewer of
    # them fill the buffers between rilld and a subscriber that does not read
    return f"w{i}-" + "x" * 60


def workload(d, probe, n_probe):
    """Asks long answers on every session (many token events) while `probe` ingests n_probe
    chunks one at a time; returns the ingest round-trip times."""
    asker = Client(d)
    for i in range(SESSIONS):
        asker.send("ask", {"session": wname(i), "question": LONG_Q, "max_tokens": 64})
    rtts = []
    for k in range(n_probe):
        t = time.perf_counter()
        probe.call("ingest.text", session="probe", text=f"Reading {k}: {k * 7} units.\n",
                   flush=True)
        rtts.append(time.perf_counter() - t)
    for i in range(SESSIONS):
        r = asker.recv(120)
        assert r["status"] == "OK", r
    asker.close()
    return rtts


def t_slow_subscriber():
    """XPUB drops for a subscriber whose queue is full (--hwm, then the socket buffers) and
    never blocks: ingest goes on at its pace, and the subscriber sees the loss as gaps in seq.
    The events go over ipc:// here: TCP's buffers grow with the kernel's autotuning, so how
    many events a stalled TCP subscriber absorbs before the drops start is not predictable."""
    with tempfile.TemporaryDirectory() as tmp, \
            Rilld(os.path.join(tmp, "state"), "--hwm", "200",
                  events=f"ipc://{tmp}/events") as d:
        c = Client(d)
        for i in range(SESSIONS):
            c.call("session.create", session=wname(i), window=512, sinks=4)
            c.call("ingest.text", session=wname(i),
                   text="Numbers: " + ", ".join(str(k) for k in range(1, 40)) + "\n", flush=True)
        c.call("session.create", session="probe", window=256, sinks=4)
        fast = Sub(d, "")
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                fast.drain(0.05)

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        try:
            time.sleep(0.2)
            base = workload(d, c, 10)
            slow = Sub(d, "", rcvhwm=1, rcvbuf=1)  # subscribes, then does not read
            time.sleep(0.3)
            e0 = stats(c)["events"]
            deadline = time.time() + 10
            while len(fast.events) < e0 and time.time() < deadline:
                time.sleep(0.05)
            # where each topic stands when the slow subscriber starts: it should see each
            # topic go on from here
            start = {}
            for t, e in list(fast.events):
                start[t] = e["seq"]
            with_slow = []
            for _ in range(3):
                with_slow += workload(d, c, 10)
            e1 = stats(c)["events"]
            time.sleep(0.3)
        finally:
            stop.set()
            th.join()
        mb, ms = statistics.median(base), statistics.median(with_slow)
        print(f"  ingest round trip: median {mb * 1e3:.1f} ms alone, {ms * 1e3:.1f} ms with a "
              f"slow subscriber (max {max(with_slow) * 1e3:.1f} ms); {e1 - e0} events meanwhile")
        assert ms <= 3 * mb + 0.1 and max(with_slow) < 5, (base, with_slow)
        # the fast subscriber saw every event, in order
        topics = {}
        for t, e in fast.events:
            topics.setdefault(t, []).append(e["seq"])
        for t, seqs in topics.items():
            assert seqs == list(range(1, len(seqs) + 1)), (t, seqs)
        assert sum(len(v) for v in topics.values()) == stats(c)["events"], topics.keys()
        # the slow one lost what did not fit its queues; once it reads again, the next events
        # show the gap in their sequence numbers
        slow.drain(1.0)
        got = len(slow.events)
        c.call("ask", session=wname(0), question=LONG_Q, max_tokens=4)
        slow.drain(2.0, until=lambda ev: ev and ev[-1][0] == wname(0) + "/answer")
        seqs, gaps = dict(start), 0
        for t, e in slow.events:
            prev = seqs.get(t, 0)
            assert e["seq"] > prev, (t, e, prev)
            gaps += e["seq"] - prev - 1
            seqs[t] = e["seq"]
        print(f"  slow subscriber: {got} of {e1 - e0} events received while it did not read; "
              f"{gaps} missing by seq afterwards")
        assert got < e1 - e0 and gaps > 0, (got, e1 - e0, gaps)
        st = stats(c)
        # XPUB drops for one slow subscriber without telling rilld: event_drops counts only
        # events rilld could not hand to ZeroMQ at all (docs/protocol.md)
        assert st["event_drops"] == 0 and st["reply_drops"] == 0, st
        assert d.stop() == 0, d.log()


# ---- 5. restarts -------------------------------------------------------------------------------

def chunk(i):
    return f"Reading {i}: the pressure is {1000 + 7 * i} hPa and the wind {i % 13} knots.\n"


def settled_stats(c, session, timeout=60):
    """session.stats once the engine has evaluated everything queued on the session. An ingest
    reply acknowledges input that is logged and queued, not evaluated: n_seen counts evaluated
    tokens only (n_pending the queued ones), and how many a stats request right after the reply
    finds evaluated depends on the scheduler's chunk size and timing. A restored session has
    replayed its log in full, so comparisons with it need the settled counts."""
    deadline = time.time() + timeout
    while True:
        st = c.call("session.stats", session=session)
        if st["n_pending"] == 0:
            return st
        assert time.time() < deadline, ("queued tokens not evaluated in time", st)
        time.sleep(0.005)


def t_restart():
    n = 40
    system = "You read sensor logs."
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state")
        d = Rilld(state)
        try:
            d.start()
            c = Client(d)
            c.call("session.create", session="r", window=1024, sinks=4, system=system)
            ids = [c.send("ingest.text", {"session": "r", "text": chunk(i), "flush": True})
                   for i in range(n)]
            acked = []
            while len(acked) < 12:
                r = c.recv(60)
                assert r["status"] == "OK", r
                acked.append((r["id"], r["result"]["version"]))
            d.proc.kill()  # kill -9 mid-stream
            d.proc.wait()
            assert [i for i, _ in acked] == ids[:len(acked)], acked
            d.start()
            c = Client(d)
            assert c.call("session.list") == ["r"], d.log()
            got = settled_stats(c, "r")  # restore replays the log in full: nothing is queued
            # the same chunks, one by one, into a fresh session: n_seen after each prefix
            c.call("session.create", session="ref", window=1024, sinks=4, system=system)
            s = settled_stats(c, "ref")
            prefix, vers = [s["n_seen"]], [s["version"]]
            for i in range(n):
                c.call("ingest.text", session="ref", text=chunk(i), flush=True)
                s = settled_stats(c, "ref")
                prefix.append(s["n_seen"])
                vers.append(s["version"])
            k = len(acked)
            assert got["version"] >= acked[-1][1], (got, acked)
            assert got["n_seen"] in prefix[k:], ("restored", got, "prefixes", prefix, k)
            kept = prefix.index(got["n_seen"])
            assert got["version"] == vers[kept], (got, vers, kept)
            print(f"  kill -9 after {k} acks of {n}: {kept} chunks restored")
            # the restored session goes on, and answers as the reference does at that point
            c.call("session.close", session="ref")
            c.call("ingest.text", session="r", text="The station is called Nordholm.\n",
                   flush=True)
            q = "What is the station called?"
            a1 = c.call("ask", session="r", question=q, max_tokens=12)
            assert "Nordholm" in a1["answer"], a1
            # standing queries are state too: two registered, one of them unregistered again
            sq = "Which station is this?"
            keep = c.call("standing.register", session="r", question=sq, max_tokens=10)["qid"]
            gone = c.call("standing.register", session="r", question="Wind?", max_tokens=4)["qid"]
            assert c.call("standing.unregister", session="r", qid=gone) is None
            deadline = time.time() + 60
            while True:  # its first refresh, so the engine is idle before the stats below
                (lst,) = c.call("standing.list", session="r")
                assert lst["qid"] == keep, lst
                if lst["refreshes"] >= 1:
                    break
                assert time.time() < deadline, lst
                time.sleep(0.05)
            s1 = settled_stats(c, "r")

            # SIGTERM: a snapshot is written and restored, with the standing query
            assert d.stop() == 0, d.log()
            assert "stopped" in d.log() and os.path.isfile(os.path.join(state, "r.snap")), \
                (d.log(), os.listdir(state))
            d.start()
            c = Client(d)
            assert "restored session r (1 standing queries)" in d.log(), d.log()
            s2 = c.call("session.stats", session="r")
            for key in ("n_seen", "version", "n_resident", "window", "sinks", "standing"):
                assert s2[key] == s1[key], (key, s1, s2)
            a2 = c.call("ask", session="r", question=q, max_tokens=12)
            assert (a2["answer"], a2["tokens"]) == (a1["answer"], a1["tokens"]), (a1, a2)
            (lst,) = c.call("standing.list", session="r")
            assert lst["question"] == sq, lst
            sub = Sub(d, "r/standing")
            time.sleep(0.2)  # let the subscription reach rilld
            v = c.call("ingest.text", session="r", text="Nordholm reports calm.\n",
                       flush=True)["version"]
            sub.drain(60, until=lambda ev: any(e["version"] >= v for _, e in ev))
            ev = sub.of("r/standing")[-1]
            assert ev["qid"] == lst["qid"] and ev["question"] == sq, ev
            assert ev["version"] == v and "Nordholm" in ev["answer"], ev
            # the state file cannot be written (its temporary name is taken by a directory):
            # neither a registration nor an unregistration happens
            other = c.call("standing.register", session="r", question="Pressure?")["qid"]
            blocker = os.path.join(state, "r.standing.tmp")
            os.mkdir(blocker)
            assert c.err("standing.register", session="r", question="Wind?") == "EIO"
            assert c.err("standing.unregister", session="r", qid=other) == "EIO"
            assert sorted(x["qid"] for x in c.call("standing.list", session="r")) == \
                sorted([lst["qid"], other])
            os.rmdir(blocker)
            assert c.call("standing.unregister", session="r", qid=other) is None
            assert c.call("standing.unregister", session="r", qid=lst["qid"]) is None
            assert not os.path.exists(os.path.join(state, "r.standing")), os.listdir(state)
            # and kill -9 after the snapshot: the log after it is replayed, and a standing
            # query registered meanwhile is there (acknowledged means written)
            c.call("ingest.text", session="r", text=chunk(99), flush=True)
            c.call("standing.register", session="r", question=sq, max_tokens=6)
            s3 = settled_stats(c, "r")
            d.proc.kill()
            d.proc.wait()
            d.start()
            c = Client(d)
            s4 = c.call("session.stats", session="r")
            assert (s4["n_seen"], s4["version"]) == (s3["n_seen"], s3["version"]), (s3, s4)
            assert [x["question"] for x in c.call("standing.list", session="r")] == [sq]
            assert d.stop() == 0, d.log()
            # a damaged state file: the session is restored, the queries are not, and rilld says so
            with open(os.path.join(state, "r.standing"), "wb") as f:
                f.write(b"6 9999\nWhich")
            d.start()
            c = Client(d)
            assert "unreadable r.standing" in d.log(), d.log()
            assert c.call("session.list") == ["r"] and \
                c.call("standing.list", session="r") == [], d.log()
            assert d.stop() == 0, d.log()
        finally:
            d.kill()


def t_config():
    """--config FILE: settings from 'option = value' lines, the command line over them; a bad
    line stops rilld before it binds."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "rilld.conf")
        with open(cfg, "w") as f:
            f.write("# defaults of this deployment\nwindow = 512\nsinks = 32  # sink tokens\n"
                    "\nmax-sessions = 1\n")
        with Rilld(os.path.join(tmp, "state"), "--config", cfg, "--sinks", "48") as d:
            assert " flash attention" in d.log(), d.log()  # the daemon's default kernel
            c = Client(d)
            name = c.call("session.create")["session"]
            st = c.call("session.stats", session=name)
            assert (st["window"], st["sinks"]) == (512, 48), st  # file, then command line
            assert c.err("session.create") == "EFULL"  # max-sessions = 1
            c.close()
        with open(cfg, "w") as f:
            f.write("attn = exact\n")
        with Rilld(os.path.join(tmp, "state1"), "--config", cfg) as d:
            assert " exact attention" in d.log(), d.log()
        d = Rilld(os.path.join(tmp, "state3"), "--attn", "fast")
        d.start(expect_exit=True)
        assert d.proc.wait(30) == 2, "rilld accepted --attn fast"
        assert "--attn must be flash or exact" in d.log(), d.log()
        with open(cfg, "w") as f:
            f.write("window = 512\nno-such-option = 3\n")
        d = Rilld(os.path.join(tmp, "state2"), "--config", cfg)
        d.start(expect_exit=True)
        assert d.proc.wait(30) != 0, "rilld accepted a bad config line"
        assert "no-such-option" in d.log(), d.log()


def t_sleep():
    """Sessions that sleep: with a KV budget of a few windows, sessions beyond it sleep (least
    recently used first) and wake on their next ask with the answer they gave awake; a pinned
    session never sleeps; server.stats, session.stats and the metrics count it; a restart
    restores sleepers from their logs; a bad --sleep-disk stops rilld."""
    names = [f"z{i}" for i in range(6)]
    facts = {n: f"{n} keeps the number {100 + 7 * i}. The code of {n} is {chr(65 + i)}{i}. "
             for i, n in enumerate(names)}
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state")
        d = Rilld(state, "--sleep-disk", "64M", "--sleep-idle-s", "0", kv_cells=2048)
        d.start()
        c = Client(d)
        first = {}
        pinned = c.call("session.create", session="pinned", window=256, sinks=16, pin=True)
        assert pinned["session"] == "pinned", pinned
        c.call("ingest.text", session="pinned", text=FACTS, flush=True)
        for n in names:
            c.call("session.create", session=n, window=256, sinks=16)
            c.call("ingest.text", session=n, text=facts[n], flush=True)
            r = c.call("ask", session=n, question=f"What number does {n} keep?", max_tokens=8)
            first[n] = (r["answer"], r["version"])
        st = stats(c)
        assert st["sessions"] == 7 and st["sessions_asleep"] >= 1, st
        assert st["sessions_awake"] + st["sessions_asleep"] == 7, st
        assert st["sleeps"] >= 1 and st["admission_rejects"] == 0, st
        asleep = [n for n in names if c.call("session.stats", session=n)["asleep"]]
        assert asleep and c.call("session.stats", session=asleep[0])["sleep_tier"] == \
            "snapshot", asleep
        for n in reversed(names):  # every one answers as it did awake (waking the sleepers)
            r = c.call("ask", session=n, question=f"What number does {n} keep?", max_tokens=8)
            assert (r["answer"], r["version"]) == first[n], (n, r, first[n])
        st = stats(c)
        assert st["wakes"] >= len(asleep) and st["wake_errors"] == 0, st
        assert st["wake_ms_p50"] > 0, st
        sp = c.call("session.stats", session="pinned")
        assert sp["pinned"] and not sp["asleep"] and sp["wakes"] == 0, sp
        text = c.call("server.metrics")["text"]
        assert f"rill_wakes_total {st['wakes']}" in text, text
        assert "rill_sessions_asleep " in text and "rill_wake_duration_seconds_count" in text
        c.close()
        assert d.stop() == 0
        assert not any(f.endswith(".sleep") for f in os.listdir(os.path.join(state, "sleep")))
        with Rilld(state, kv_cells=2048) as d2:  # restored: sleepers come back from their logs
            c = Client(d2)
            for n in names:
                r = c.call("ask", session=n, question=f"What number does {n} keep?",
                           max_tokens=8)
                assert r["answer"] == first[n][0], (n, r, first[n])
            c.close()
        bad = Rilld(os.path.join(tmp, "state2"), "--sleep-disk", "12Q")
        bad.start(expect_exit=True)
        assert bad.proc.wait(30) == 2, "rilld accepted --sleep-disk 12Q"
        assert "--sleep-disk" in bad.log(), bad.log()


def t_replace():
    """ingest.replace: from a version on the text is another, the answer follows it, the log
    keeps it across a restart, and bad versions are refused without changing anything."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Rilld(os.path.join(tmp, "state"))
        try:
            d.start()
            c = Client(d)
            c.call("session.create", session="asr", window=0)
            v1 = c.call("ingest.text", session="asr",
                        text="The station is called Nordholm.\n")["version"]
            v2 = c.call("ingest.text", session="asr", text="The wind is from the west.\n",
                        flush=True)["version"]
            assert v2 > v1, (v1, v2)  # flush is an input of its own
            before = settled_stats(c, "asr")
            vr = c.call("ingest.replace", session="asr", from_version=v1,
                        text="The station is called Kastrup.\n")["version"]
            assert vr == v2 + 1, (v2, vr)
            # the new text's unstable end is held back like any text's until a flush
            assert settled_stats(c, "asr")["held_text"] > 0
            vf = c.call("ingest.text", session="asr", text="", flush=True)["version"]
            assert vf == vr + 1, (vr, vf)
            st = settled_stats(c, "asr")
            assert st["version"] == vf and st["n_seen"] < before["n_seen"], (before, st)
            q = "What is the station called?"
            a = c.call("ask", session="asr", question=q, max_tokens=16)
            assert "Kastrup" in a["answer"] and "Nordholm" not in a["answer"], a
            assert a["version"] == vf, a
            # refused, nothing changed
            assert c.err("ingest.replace", session="asr", from_version=vf + 5, text="x") == "EINVAL"
            assert c.err("ingest.replace", session="asr", from_version=0, text="x") == "ERANGE"
            assert c.err("ingest.replace", session="asr", from_version=1) == "EINVAL"
            assert c.err("ingest.replace", session="nope", from_version=1, text="x") == "ENOTFOUND"
            assert settled_stats(c, "asr") == st
            c.close()
            d.stop()
            d.start()  # replayed from the log
            c = Client(d)
            st2 = settled_stats(c, "asr")
            assert (st2["version"], st2["n_seen"]) == (st["version"], st["n_seen"]), (st, st2)
            a = c.call("ask", session="asr", question=q, max_tokens=16)
            assert "Kastrup" in a["answer"], a
            c.close()
        finally:
            d.kill()


def t_models():
    """Several models in one daemon: server.stats lists them, sessions are created on a named
    model (the first given is the default), their work is counted on their model, a missing or
    malformed model name is refused, a restart restores each session into its model and skips
    one whose model is gone; questions use the chat template where the model has one."""
    tiny = os.path.join(SRC, "tests", "data", "models", "rill-tiny-qwen2-F32.gguf")
    if not os.path.exists(tiny):
        raise AssertionError(f"{tiny} is missing (scripts/test.sh generates it)")
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "state")
        d = Rilld(state, "--model", f"tiny={tiny}")
        try:
            d.start()
            log = d.log()
            assert f"model {MODEL_NAME} (default): {MODEL}, questions chatml" in log, log
            assert f"model tiny: {tiny}, questions chatml" in log, log
            c = Client(d)
            models = c.call("server.stats")["models"]
            assert [m["name"] for m in models] == [MODEL_NAME, "tiny"], models
            assert models[1]["file"] == tiny and models[0]["chat_template"] == "chatml", models
            assert c.call("session.create", session="big") == {"session": "big",
                                                              "model": MODEL_NAME}
            assert c.call("session.create", session="small", model="tiny",
                          window=0) == {"session": "small", "model": "tiny"}
            assert c.call("session.stats", session="small")["model"] == "tiny"
            assert c.call("session.stats", session="big")["model"] == MODEL_NAME
            assert c.err("session.create", session="x", model="nope") == "ENOTFOUND"
            assert c.err("session.create", session="x", model="bad name!") == "EINVAL"
            assert c.err("session.create", session="x", model=7) == "EFORMAT"
            assert "x" not in c.call("session.list")
            c.call("ingest.text", session="small", text="a b c d e f g h\n", flush=True)
            st = settled_stats(c, "small")
            assert st["n_seen"] > 0, st
            models = c.call("server.stats")["models"]
            assert models[1]["tokens_ingest"] == st["n_seen"], (models, st)
            assert models[0]["tokens_ingest"] == 0, models
            assert (models[0]["sessions"], models[1]["sessions"]) == (1, 1), models
            a = c.call("ask", session="small", question="what?", max_tokens=4)
            assert a["tokens"] >= 1, a
            c.call("ingest.text", session="big", text=FACTS, flush=True)
            a = c.call("ask", session="big", question="How old is Bob?", max_tokens=16)
            assert "42" in a["answer"], a  # the chat template's user turn: a direct answer
            c.close()
            d.stop()
            d.start()
            c = Client(d)
            assert sorted(c.call("session.list")) == ["big", "small"], d.log()
            assert c.call("session.stats", session="small")["model"] == "tiny"
            c.close()
            d.stop()
            # without the tiny model: its session waits, files kept; a --question-format wins
            # over chat templates
            d = Rilld(state, "--question-format", "Q: %s\\nA:")
            d.start()
            assert f"model {MODEL_NAME} (default): {MODEL}, questions in the fixed format" in \
                d.log(), d.log()
            c = Client(d)
            assert c.call("session.list") == ["big"], d.log()
            assert "session small is on model tiny, which is not loaded" in d.log(), d.log()
            assert os.path.exists(os.path.join(state, "small.meta"))
            c.close()
        finally:
            d.kill()



# ---- server.metrics: the Prometheus text, checked by promtool (issue 16 part 4) ---------------

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
METRIC_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
METRIC_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse_metrics(text):
    """{family: type} and {(name, ((label, value), ...)): value} of a text exposition; asserts
    that every sample follows its family's HELP and TYPE lines."""
    types, samples, family = {}, {}, None
    lines = text.split("\n")
    assert lines[-1] == "", "the text must end with a line feed"
    for line in lines[:-1]:
        if line.startswith("# HELP "):
            family = line.split(" ")[2]
            assert family not in types, ("family twice", family)
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == family, ("TYPE without its HELP", line)
            types[name] = kind
            continue
        m = METRIC_SAMPLE.match(line)
        assert m, ("not a sample line", line)
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        assert family is not None and name.startswith(family) and family in types, (family, line)
        if name != family:
            assert types[family] == "histogram" and name[len(family):] in (
                "_bucket", "_sum", "_count"), line
        key = (name, tuple(METRIC_LABEL.findall(labels)))
        assert key not in samples, ("sample twice", line)
        samples[key] = float(value)
    return types, samples


def documented_metrics():
    """The metric names of docs/protocol.md's "Metrics" table."""
    doc = open(os.path.join(SRC, "docs", "protocol.md")).read()
    section = doc.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(rill_[a-z_]+)`", section, re.M))


def promtool_check(text):
    assert os.path.exists(PROMTOOL), "promtool is missing (scripts/setup.sh installs prometheus)"
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text.encode(), capture_output=True,
                       timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (
        r.returncode, r.stdout.decode(), r.stderr.decode())


def t_metrics():
    with tempfile.TemporaryDirectory() as tmp, Rilld(os.path.join(tmp, "state")) as d:
        c = Client(d)

        def metrics():
            r = c.call("server.metrics")
            assert set(r) == {"text"} and isinstance(r["text"], str), r
            promtool_check(r["text"])
            return parse_metrics(r["text"])

        def val(samples, name, **labels):
            return samples[(name, tuple(labels.items()))]  # labels in the text's order

        types, m0 = metrics()
        assert set(types) == documented_metrics(), (set(types) ^ documented_metrics())
        assert types["rill_ttft_seconds"] == types["rill_step_duration_seconds"] == "histogram"
        assert val(m0, "rill_ttft_seconds_count") == 0
        assert val(m0, "rill_sessions", model=MODEL_NAME) == 0

        c.call("session.create", session="met")
        c.call("ingest.text", session="met", text=FACTS, flush=True)
        settled_stats(c, "met")
        sub = Sub(d, "met/standing")
        time.sleep(0.2)  # let the subscription reach rilld
        asks_ok = 0
        assert "42" in c.call("ask", session="met", question=QUESTION, max_tokens=16)["answer"]
        asks_ok += 1
        c.call("ask", session="met", question="What is the capital of France?")
        asks_ok += 1
        assert c.err("ask", session="nope", question="q") == "ENOTFOUND"  # an ask's error
        q = "When does the train leave?"
        c.call("standing.register", session="met", question=q, max_tokens=8)
        sub.drain(30, until=lambda ev: len(ev) >= 1)
        assert sub.of("met/standing"), "no standing answer"
        hit = c.call("ask", session="met", question=q, max_tokens=8)  # the standing cache
        assert hit["cached"] is True, hit
        asks_ok += 1
        c.raw(b"\xc1")  # not msgpack: an invalid frame
        assert c.recv()["status"] == "EFORMAT"
        assert c.err("server.metrics", verbose=True) == "EINVAL"  # takes no argument: invalid
        settled_stats(c, "met")
        types, m1 = metrics()
        st = stats(c)

        def delta(name, **labels):
            return val(m1, name, **labels) - val(m0, name, **labels)

        # requests and errors by command: exactly what was sent
        assert delta("rill_requests_total", command="ask") == 4
        assert delta("rill_request_errors_total", command="ask") == 1
        assert delta("rill_requests_total", command="invalid") == 2
        assert delta("rill_request_errors_total", command="invalid") == 2
        assert delta("rill_requests_total", command="server.metrics") == 1
        for cmd in ("session.create", "ingest.text", "standing.register"):
            assert delta("rill_requests_total", command=cmd) == 1, cmd
            assert delta("rill_request_errors_total", command=cmd) == 0, cmd
        total = sum(v for (n, _), v in m1.items() if n == "rill_requests_total")
        assert total == st["requests"] - 1, (total, st["requests"])  # the stats call itself
        # TTFT: one sample per ask answered; buckets cumulative up to +Inf == _count
        assert delta("rill_ttft_seconds_count") == asks_ok
        assert val(m1, "rill_ttft_seconds_sum") > 0
        for h in ("rill_ttft_seconds", "rill_step_duration_seconds"):
            b = sorted(((float(lb[0][1]), v) for (n, lb), v in m1.items()
                        if n == h + "_bucket"), key=lambda x: x[0])
            assert len(b) == 16 and b[-1][0] == float("inf"), b
            assert all(x[1] <= y[1] for x, y in zip(b, b[1:])), b
            assert b[-1][1] == val(m1, h + "_count"), b
        # steps: one sample per forward pass
        steps = val(m1, "rill_steps_total", model=MODEL_NAME)
        assert val(m1, "rill_step_duration_seconds_count") == steps == st["steps"] > 0, st
        assert 0 < val(m1, "rill_step_duration_seconds_sum") <= st["busy_ms"] / 1e3 + 1e-6
        # tokens by class, sessions, pages, backlog, standing: as server.stats says
        for cls in ("decode", "prefill", "ingest", "standing"):
            assert val(m1, "rill_tokens_total", model=MODEL_NAME, **{"class": cls}) == \
                st["tokens_" + cls], (cls, st)
        assert val(m1, "rill_tokens_total", model=MODEL_NAME, **{"class": "ingest"}) > 0
        assert val(m1, "rill_tokens_total", model=MODEL_NAME, **{"class": "spec"}) == 0
        assert val(m1, "rill_sessions", model=MODEL_NAME) == st["sessions"] == 1
        cap, used = (val(m1, "rill_kv_pages_capacity", model=MODEL_NAME),
                     val(m1, "rill_kv_pages_used", model=MODEL_NAME))
        free = val(m1, "rill_kv_pages_free", model=MODEL_NAME)
        assert cap == st["total_pages"] and free == st["free_pages"] and used + free == cap
        assert used > 0 and val(m1, "rill_kv_pages_reserved", model=MODEL_NAME) == \
            st["reserved_pages"] > 0, st
        assert val(m1, "rill_backlog_tokens", model=MODEL_NAME) == 0
        assert val(m1, "rill_standing_refreshes_total") == st["standing_refreshes"] >= 1
        assert delta("rill_standing_cache_hits_total") == 1
        assert val(m1, "rill_standing_cache_hits_total") == st["standing_cache_hits"]
        for k in ("event_drops", "reply_drops", "engine_drops"):
            assert val(m1, f"rill_{k}_total") == st[k], k
        for k in ("computed", "kept", "wasted"):
            assert val(m1, f"rill_spec_tokens_{k}_total") == 0, k
        # the backlog while a long input is being evaluated: at most what was ingested, at
        # least what the session still has queued afterwards (it only shrinks meanwhile)
        seen = c.call("session.stats", session="met")["n_seen"]
        c.call("ingest.text", session="met", text=FACTS * 10, flush=True)
        _, m2 = metrics()
        backlog = val(m2, "rill_backlog_tokens", model=MODEL_NAME)
        assert backlog >= c.call("session.stats", session="met")["n_pending"], backlog
        assert backlog <= settled_stats(c, "met")["n_seen"] - seen, backlog
        assert val(metrics()[1], "rill_backlog_tokens", model=MODEL_NAME) == 0
        sub.close()
        c.close()
        assert d.stop() == 0, d.log()


def main():
    global CTX
    if zmq is None:
        print("SKIP: pyzmq and msgpack are needed (scripts/setup.sh installs them in .venv)")
        return 77
    if not os.path.exists(MODEL):
        print(f"SKIP: {MODEL} is missing (scripts/setup.sh downloads it)")
        return 77
    if not os.path.exists(RILLD):
        print(f"FAIL: {RILLD} is missing (the build makes it next to {RILL})")
        return 1
    CTX = zmq.Context()
    tests = {n[2:]: fn for n, fn in globals().items() if n.startswith("t_") and callable(fn)}
    rc = run_tests(tests, ONLY)
    CTX.destroy(0)
    return rc


if __name__ == "__main__":
    sys.exit(main())
