#!/usr/bin/env python3
"""Writes the seed corpus of the audio packet fuzzer (fuzz/corpus/audio/seed-*), deterministically.

Python standard library only. The input format is fuzz/fuzz_audio.c's: a 2-byte header (codec,
rate, channels; max_gap, max_conceal_ms) and records (op byte: sequence step and the two refusal
flags; 2-byte little-endian length; payload). Opus payloads are hand-made: a TOC byte for each of
the SILK, hybrid and CELT configurations and frame-count codes 0-3, with seeded pseudo-random
frame bytes (libopus's range decoder accepts any bytes, so these decode), plus packets that break
the framing rules (code 3 with zero or too many frames, a code-1 packet of odd length, a code-2
length past the end). pcm16 payloads are whole frames of a sine, plus odd lengths.

Usage: fuzz/make_audio_seeds.py [OUT_DIR]   (default: fuzz/corpus/audio next to this script)
"""

import math
import os
import random
import struct
import sys

RATES = [8000, 12000, 16000, 24000, 48000, 44100, 22050, 96000]


def header(opus, rate, stereo, max_gap=10, conceal=1):
    b0 = (1 if opus else 0) | (RATES.index(rate) << 1) | ((1 if stereo else 0) << 4)
    return bytes([b0, (max_gap - 1) & 63 | (conceal & 3) << 6])


def rec(step, payload, small=False, wrong_rate=False):
    op = ((step + 32) & 63) | (64 if small else 0) | (128 if wrong_rate else 0)
    return bytes([op]) + struct.pack("<H", len(payload)) + payload


def opus_packet(rng, config, stereo, code, nbytes):
    toc = config << 3 | (4 if stereo else 0) | code
    body = bytes(rng.randrange(256) for _ in range(nbytes))
    if code == 0:
        return bytes([toc]) + body
    if code == 1:
        return bytes([toc]) + body[: len(body) // 2 * 2]
    if code == 2:
        first = min(len(body), 20)
        return bytes([toc, first]) + body
    return bytes([toc, 0x02]) + body[: len(body) // 2 * 2]  # code 3: two CBR frames


def pcm(rate, ch, frames, start, amp=0.4):
    out = bytearray()
    for i in range(frames):
        v = int(32767 * amp * math.sin(2 * math.pi * 440 * (start + i) / rate))
        for _ in range(ch):
            out += struct.pack("<h", v)
    return bytes(out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "audio")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0xA0D10)
    seeds = {}
    # Opus: every mode's configurations (0-11 SILK, 12-15 hybrid, 16-31 CELT), codes 0-3.
    for config in (1, 3, 9, 13, 15, 19, 27, 31):
        for code in range(4):
            pkts = b"".join(rec(1, opus_packet(rng, config, False, code, 40 + 8 * k)) for k in range(6))
            seeds[f"opus-c{config}-code{code}"] = header(True, 48000, False) + pkts
    # Loss, a late packet, a duplicate, a jump beyond max_gap, a backward jump.
    pk = [opus_packet(rng, 31, False, 0, 60) for _ in range(10)]
    seeds["opus-loss-late-dup"] = header(True, 16000, False, 8, 3) + b"".join(
        [rec(1, pk[0]), rec(3, pk[1]), rec(-1, pk[2]), rec(0, pk[3]), rec(1, pk[4]), rec(31, pk[5]),
         rec(-20, pk[6]), rec(1, pk[7])])
    seeds["opus-stereo-24k"] = header(True, 24000, True) + b"".join(
        rec(1, opus_packet(rng, 29, True, k % 4, 50)) for k in range(8))
    # Refusals: framing errors, a small buffer, the wrong rate, an empty packet.
    bad = [bytes([0x03, 0x00]), bytes([0x03, 0xFF]), bytes([0x01, 0xAA]), bytes([0x02, 0xFC, 0xFF, 0x01]),
           bytes([0x0B, 0xFB, 0x01, 0x02]), b""]
    seeds["opus-bad"] = header(True, 48000, False) + b"".join(
        rec(1, pk[0]) + rec(1, b) + rec(0, pk[1]) for b in bad) + rec(1, pk[2], small=True) + rec(1, pk[3], wrong_rate=True)
    # pcm16 at several rates, whole frames and not.
    for rate, ch in ((16000, 1), (48000, 2), (44100, 1), (8000, 2)):
        f = rate // 50
        body = b"".join(rec(1 if k != 3 else 2, pcm(rate, ch, f, k * f)) for k in range(6))
        seeds[f"pcm16-{rate}-{ch}"] = header(False, rate, ch == 2) + body
    seeds["pcm16-bad"] = header(False, 16000, False) + rec(1, b"\x01\x02\x03") + rec(1, pcm(16000, 1, 1601, 0)) \
        + rec(1, b"") + rec(1, pcm(16000, 1, 320, 0), small=True) + rec(1, pcm(16000, 1, 320, 0), wrong_rate=True) \
        + rec(1, pcm(16000, 1, 320, 0))
    for name, data in sorted(seeds.items()):
        with open(os.path.join(out, "seed-" + name), "wb") as fh:
            fh.write(data)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
