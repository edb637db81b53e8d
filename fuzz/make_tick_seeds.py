#!/usr/bin/env python3
"""Writes the seed corpus of the tick fuzzer (fuzz/corpus/ticks/seed-*), deterministically.

Python standard library only (msgpack is written by hand with struct: only what seeds need).
Seeds: valid single ticks and batches in every accepted spelling, near-valid ones that each break
one rule (a type, a range, a missing or doubled field, a cut, deep nesting, a lying count), CSV
files, and raw text with multibyte UTF-8, CRLF and invalid bytes. Regression inputs found by
fuzzing are added next to them as crash-*/regress-* files.

Usage: fuzz/make_tick_seeds.py [OUT_DIR]   (default: fuzz/corpus/ticks next to this script)
"""

import os
import struct
import sys


def s(x):
    b = x.encode() if isinstance(x, str) else x
    if len(b) < 32:
        return bytes([0xA0 | len(b)]) + b
    return b"\xd9" + bytes([len(b)]) + b


def i(v):
    if 0 <= v < 128:
        return bytes([v])
    if -32 <= v < 0:
        return struct.pack(">b", v)
    if v >= 0:
        return b"\xcf" + struct.pack(">Q", v)
    return b"\xd3" + struct.pack(">q", v)


def f64(v):
    return b"\xcb" + struct.pack(">d", v)


def f32(v):
    return b"\xca" + struct.pack(">f", v)


NIL = b"\xc0"


def m(pairs):
    out = bytes([0x80 | len(pairs)]) if len(pairs) < 16 else b"\xde" + struct.pack(">H", len(pairs))
    for k, v in pairs:
        out += s(k) + v
    return out


def a(items):
    out = bytes([0x90 | len(items)]) if len(items) < 16 else b"\xdc" + struct.pack(">H", len(items))
    return out + b"".join(items)


TS = 1704205800000000000


def tick(sym="AAPL", ts=TS, price=f64(187.32), size=i(200), side=s("B"), extra=()):
    pairs = [("symbol", s(sym)), ("ts", i(ts)), ("price", price), ("size", size)]
    if side is not None:
        pairs.append(("side", side))
    pairs.extend(extra)
    return m(pairs)


def seeds():
    out = {}
    out["single"] = tick()
    out["batch"] = a([
        tick(),
        tick("MSFT", TS + 1000, f64(374.58), i(100), s("S")),
        tick("EURUSD", TS + 2000, f64(1.0942), i(100000), s("b")),
        tick("BTC-USD", TS + 3000, i(42850), i(2), NIL),
        tick("NVDA", TS + 4000, f32(495.25), i(300), None),
        tick("SPY", TS + 5000, f64(475.31), i(1), s("")),
    ])
    out["unknown-keys"] = a([tick(extra=[("venue", s("XNAS")), ("seq", a([i(1), m([("k", NIL)])])),
                                         ("blob", b"\xc4\x03abc"), ("ext", b"\xd4\x01\x02")])])
    out["empty-batch"] = a([])
    # One rule broken each.
    out["bad-symbol-lower"] = a([tick("aapl")])
    out["bad-symbol-long"] = a([tick("ABCDEFGHIJKLMNOP")])
    out["bad-ts-zero"] = a([tick(ts=0)])
    out["bad-ts-neg"] = a([tick(ts=-5)])
    out["bad-ts-float"] = a([m([("symbol", s("A")), ("ts", f64(1e18)), ("price", f64(1.0)),
                                ("size", i(1))])])
    out["bad-price-nan"] = a([tick(price=f64(float("nan")))])
    out["bad-price-str"] = a([tick(price=s("1.5"))])
    out["bad-size-zero"] = a([tick(size=i(0))])
    out["bad-size-float"] = a([tick(size=f64(1.0))])
    out["bad-side"] = a([tick(side=s("X"))])
    out["missing-price"] = a([m([("symbol", s("A")), ("ts", i(1)), ("size", i(1))])])
    out["twice-size"] = a([tick(extra=[("size", i(3))])])
    out["int-key"] = a([b"\x81\x07\x01"])
    out["mixed"] = a([tick(), tick(size=i(0)), tick("MSFT", TS + 7), b"\x01"])
    out["cut"] = out["batch"][: len(out["batch"]) // 2]
    out["trailing"] = tick() + b"\xc0"
    out["deep"] = a([tick(extra=[("x", b"\x91" * 10 + b"\xc0")])])
    out["huge-array"] = b"\xdd\xff\xff\xff\xff"
    out["huge-map"] = b"\x91\xdf\xff\xff\xff\xff\x00"
    out["huge-str"] = b"\x81\xa1x\xdb\xff\xff\xff\xf0ab"
    out["reserved"] = b"\x91\xc1"
    # Many ticks of a few symbols, fast: the governor writes bars.
    out["burst"] = a([tick(["AAPL", "MSFT", "NVDA"][k % 3], TS + k * 1000000,
                           f64(100 + (k * 7 % 13) / 100), i(1 + k % 5)) for k in range(60)])
    # CSV and text.
    out["csv"] = (b"# ticks\nsymbol,ts,price,size,side\r\nAAPL,1704205800000000000,187.32,200,B\n"
                  b"EURUSD,1704205800000001000,1.08423,100000,s\nBTC-USD,5,.5,3,\n"
                  b"bad,1,1,1,B\nX,1,1e5,1,B\nY,-1,1,1,S\n")
    out["csv-reordered"] = b"ts,venue,size,price,symbol\n42,XNAS,300,99.5,MSFT\n43,,1,99.25,MSFT"
    out["text"] = ("caf\u00e9 \u4e2d\u6587 \U0001F600\r\nline two\rthree\n\ttab".encode()
                   + b"\xff\xc3(\xe2\x82\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf\x00\x1b[0m\x7f\xf0\x9f")
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "ticks")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(out_dir, "seed-" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
