#!/usr/bin/env python3
"""Writes the seed corpus of the request fuzzer (fuzz/corpus/request/seed-*), deterministically.

Python standard library only (msgpack is written by hand with struct: only what seeds need, in
every width msgpack allows, so the fuzzer starts from each header form). Seeds: a valid request
for every command (minimal, and with every optional argument), the same in wide encodings, and
near-valid ones that each break one rule of docs/protocol.md (another version, an unknown or
doubled key, a missing or mistyped field, a bad session name, a number out of range, a lying
count, too deep, trailing bytes). Regression inputs found by fuzzing are added next to them as
crash-*/regress-* files.

Usage: fuzz/make_request_seeds.py [OUT_DIR]   (default: fuzz/corpus/request next to this script)
"""

import os
import struct
import sys


def s(x, wide=0):
    """A str; wide 0: the shortest form, 1: str8, 2: str16, 3: str32."""
    b = x.encode() if isinstance(x, str) else x
    if wide == 0:
        wide = 0 if len(b) < 32 else 1 if len(b) < 256 else 2 if len(b) < 65536 else 3
    if wide == 0:
        return bytes([0xA0 | len(b)]) + b
    head, fmt = [(b"\xd9", ">B"), (b"\xda", ">H"), (b"\xdb", ">I")][wide - 1]
    return head + struct.pack(fmt, len(b)) + b


def u(v, wide=0):
    """A positive int; wide 0: the shortest form, 1..4: uint8, uint16, uint32, uint64."""
    if wide == 0:
        wide = 0 if v < 128 else 1 if v < 256 else 2 if v < 65536 else 3 if v < 2 ** 32 else 4
    if wide == 0:
        return bytes([v])
    head, fmt = [(b"\xcc", ">B"), (b"\xcd", ">H"), (b"\xce", ">I"), (b"\xcf", ">Q")][wide - 1]
    return head + struct.pack(fmt, v)


def i64(v):
    return b"\xd3" + struct.pack(">q", v)


def f64(v):
    return b"\xcb" + struct.pack(">d", v)


NIL, FALSE, TRUE = b"\xc0", b"\xc2", b"\xc3"


def m(pairs, wide=False):
    n = len(pairs)
    head = bytes([0x80 | n]) if n < 16 and not wide else b"\xde" + struct.pack(">H", n)
    return head + b"".join((s(k) if isinstance(k, str) else k) + v for k, v in pairs)


def a(items, wide=False):
    n = len(items)
    head = bytes([0x90 | n]) if n < 16 and not wide else b"\xdc" + struct.pack(">H", n)
    return head + b"".join(items)


def req(cmd, args=None, rid=1, v=1, extra=()):
    pairs = [("v", u(v)), ("id", u(rid)), ("cmd", s(cmd))]
    if args is not None:
        pairs.append(("args", m(args)))
    pairs.extend(extra)
    return m(pairs)


TS = 1704205800000000000


def tick(sym="AAPL", ts=TS, price=f64(187.25), size=u(100), side=s("B")):
    pairs = [("symbol", s(sym)), ("ts", u(ts, 4)), ("price", price), ("size", size)]
    if side is not None:
        pairs.append(("side", side))
    return m(pairs)


SESSION = ("session", s("alpha"))
Q = ("question", s("How old is Bob?"))


def seeds():
    out = {}
    # every command, minimal and full
    out["create-min"] = req("session.create")
    out["create-noargs-nil"] = req("session.create", extra=[("args", NIL)])
    out["create-full"] = req("session.create", [("session", s("alpha-1.x_Y")),
                                                ("window", u(512)), ("sinks", u(8)),
                                                ("system", s("You are terse."))])
    out["create-nowindow"] = req("session.create", [SESSION, ("window", u(0))])
    out["close"] = req("session.close", [SESSION], rid=2)
    out["list"] = req("session.list", rid=3)
    out["list-empty-args"] = req("session.list", [], rid=3)
    out["stats"] = req("session.stats", [SESSION], rid=4)
    out["snapshot"] = req("session.snapshot", [SESSION], rid=5)
    out["ingest-text"] = req("ingest.text", [SESSION, ("text", s("Bob is 42 years old.\n"))])
    out["ingest-text-flush"] = req("ingest.text", [SESSION, ("text", s("tail")),
                                                   ("flush", TRUE)])
    out["ingest-text-empty"] = req("ingest.text", [SESSION, ("text", s("")), ("flush", FALSE)])
    out["ingest-text-utf8"] = req("ingest.text", [SESSION,
                                                  ("text", s("na\u00efve \u20ac \U0001f600\n"))])
    out["create-model"] = req("session.create", [SESSION, ("model", s("asr"))])
    out["ingest-replace"] = req("ingest.replace", [SESSION, ("from_version", u(3)),
                                                   ("text", s("the corrected tail"))])
    out["ingest-replace-empty"] = req("ingest.replace", [SESSION, ("from_version", u(1, 4)),
                                                         ("text", s(""))])
    out["bad-replace-zero"] = req("ingest.replace", [SESSION, ("from_version", u(0)),
                                                     ("text", s("x"))])
    out["ingest-ticks"] = req("ingest.ticks", [SESSION, ("ticks", a([
        tick(), tick("MSFT", TS + 1000, f64(374.5), u(50), s("S")),
        tick("EURUSD", TS + 2000, b"\xca" + struct.pack(">f", 1.0942), u(100000, 3), None),
        tick("BTC-USD", TS + 3000, u(42850), u(2), NIL)]))])
    out["ingest-ticks-empty"] = req("ingest.ticks", [SESSION, ("ticks", a([]))])
    out["ingest-ticks-mixed"] = req("ingest.ticks", [SESSION, ("ticks", a([
        tick(), tick(price=s("high")), u(5), NIL, tick(sym=""), m([("symbol", s("X"))])]))])
    out["ask"] = req("ask", [SESSION, Q], rid=7)
    out["ask-max"] = req("ask", [SESSION, Q, ("max_tokens", u(1024, 2))], rid=8)
    out["standing-register"] = req("standing.register", [SESSION, Q, ("max_tokens", u(8))])
    out["standing-unregister"] = req("standing.unregister", [SESSION, ("qid", u(3))])
    out["standing-list"] = req("standing.list", [SESSION])
    out["server-stats"] = req("server.stats", rid=2 ** 40)
    out["server-metrics"] = req("server.metrics")
    # wide encodings of the same
    out["wide-ask"] = m([(s("v", 2), u(1, 4)), (s("id", 3), u(9, 4)), (s("cmd", 1), s("ask", 3)),
                         (s("args", 2), m([(s("session", 3), s("alpha", 2)),
                                           (s("question", 1), s("Why?", 3)),
                                           (s("max_tokens", 1), u(16, 2))], wide=True))],
                       wide=True)
    out["wide-create"] = req("session.create", [("session", s("b", 1)), ("window", u(2048, 3)),
                                                ("sinks", u(16, 4))], rid=2 ** 62)
    out["order"] = m([("args", m([Q, SESSION])), ("cmd", s("ask")), ("id", u(5)), ("v", u(1))])
    # near-valid: each breaks one rule
    out["bad-version"] = req("server.stats", v=2)
    out["bad-version-extra-key"] = req("server.stats", v=2, extra=[("trace", s("x"))])
    out["bad-envelope-key"] = req("server.stats", extra=[("trace", s("x"))])
    out["bad-double-id"] = m([("v", u(1)), ("id", u(1)), ("id", u(2)), ("cmd", s("session.list"))])
    out["bad-no-id"] = m([("v", u(1)), ("cmd", s("session.list"))])
    out["bad-id-neg"] = m([("v", u(1)), ("id", i64(-1)), ("cmd", s("session.list"))])
    out["bad-id-2p63"] = m([("v", u(1)), ("id", u(2 ** 63, 4)), ("cmd", s("session.list"))])
    out["bad-no-v"] = m([("id", u(1)), ("cmd", s("session.list"))])
    out["bad-cmd"] = req("session.frobnicate")
    out["bad-cmd-type"] = m([("v", u(1)), ("id", u(1)), ("cmd", u(3))])
    out["bad-args-type"] = req("session.list", extra=[("args", a([]))])
    out["bad-unknown-arg"] = req("session.stats", [SESSION, ("bogus", u(1))])
    out["bad-arg-twice"] = req("session.stats", [SESSION, SESSION])
    out["bad-arg-not-taken"] = req("session.list", [SESSION])
    out["bad-missing-arg"] = req("ask", [SESSION])
    out["bad-name"] = req("session.stats", [("session", s("a b/c"))])
    out["bad-name-long"] = req("session.stats", [("session", s("x" * 65))])
    out["bad-name-empty"] = req("session.stats", [("session", s(""))])
    out["bad-question-empty"] = req("ask", [SESSION, ("question", s(""))])
    out["bad-max-tokens"] = req("ask", [SESSION, Q, ("max_tokens", u(1025, 2))])
    out["bad-max-tokens-zero"] = req("ask", [SESSION, Q, ("max_tokens", u(0))])
    out["bad-window"] = req("session.create", [("window", u(2 ** 20 + 1, 3))])
    out["bad-sinks-neg"] = req("session.create", [("sinks", i64(-4))])
    out["bad-flush-int"] = req("ingest.text", [SESSION, ("text", s("x")), ("flush", u(1))])
    out["bad-text-bin"] = req("ingest.text", [SESSION, ("text", b"\xc4\x02hi")])
    out["bad-qid-zero"] = req("standing.unregister", [SESSION, ("qid", u(0))])
    out["bad-qid-float"] = req("standing.unregister", [SESSION, ("qid", f64(3.0))])
    out["bad-ticks-map"] = req("ingest.ticks", [SESSION, ("ticks", tick())])
    out["bad-ticks-deep"] = req("ingest.ticks", [SESSION, ("ticks", b"\x91" * 9 + NIL)])
    out["bad-key-int"] = m([(u(1), u(1))])
    out["bad-not-map"] = a([u(1), s("ask")])
    out["bad-trailing"] = req("session.list") + NIL
    out["bad-two"] = req("session.list") + req("server.stats")
    out["bad-count"] = b"\xdf\xff\xff\xff\xff" + s("v") + u(1)
    out["bad-str-count"] = m([("v", u(1)), ("id", u(1)), ("cmd", b"\xdb\x7f\xff\xff\xffask")])
    out["bad-truncated"] = req("ask", [SESSION, Q])[:-3]
    out["bad-reserved"] = b"\xc1"
    out["bad-deep"] = b"\x81\xa1k" * 12 + NIL
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "request")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(out_dir, "seed-" + name), "wb") as f:
            f.write(data)
    print(f"{len(seeds())} seeds in {out_dir}")


if __name__ == "__main__":
    main()
