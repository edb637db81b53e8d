#!/usr/bin/env python3
"""The live translation demo's client (demos/translate/run.sh): creates a translation session on
a running rilld (session.create {model: llm, asr: asr, translate: POLICY}), prints the captions
page's address, streams an audio file at real time as 20 ms pcm16 ingest.audio packets, prints
the transcript and the captions as the <session>/translation events arrive, and ends with a
summary: audio, words, captions, and the delays computed from the events (the caption delay is
the wall time from the transcript event that committed a caption's last source word to the
caption; src_s and compute_s are the engine's records).

Usage: stream.py --connect tcp://... --events tcp://... --http HOST:PORT [--policy NAME]
                 [--system TEXT] [--session NAME] [--pace X] AUDIO
AUDIO: a 16-bit WAV (read with the standard library) or anything PyAV decodes.
"""
import argparse
import os
import re
import statistics
import sys
import time
import wave

import msgpack
import zmq

WORD = re.compile(r"[^ \t\n\r\v\f]+")  # words as rill counts them
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown(text):
    """text for the terminal: control characters a model may write become '?'."""
    return CONTROL.sub("?", text)


def read_audio(path):
    """(rate, mono 16-bit little-endian bytes)."""
    try:
        with wave.open(path) as w:
            if w.getsampwidth() == 2 and w.getnchannels() == 1:
                return w.getframerate(), w.readframes(w.getnframes())
    except (wave.Error, EOFError):
        pass
    import av  # the .venv's PyAV: other formats, resampled to 16 kHz mono s16

    out = bytearray()
    with av.open(path) as f:
        rs = av.AudioResampler(format="s16", layout="mono", rate=16000)
        for frame in f.decode(audio=0):
            for r in rs.resample(frame):
                out += bytes(r.planes[0])[:r.samples * 2]
        for r in rs.resample(None):
            out += bytes(r.planes[0])[:r.samples * 2]
    return 16000, bytes(out)


class Rilld:
    def __init__(self, ctx, ep):
        self.s = ctx.socket(zmq.DEALER)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(ep)
        self.id = 0

    def req(self, cmd, **args):
        self.id += 1
        self.s.send(msgpack.packb({"v": 1, "id": self.id, "cmd": cmd, "args": args}))
        if not self.s.poll(120000):
            raise SystemExit(f"stream.py: rilld did not answer {cmd}")
        return msgpack.unpackb(self.s.recv_multipart()[-1], raw=False)

    def call(self, cmd, **args):
        r = self.req(cmd, **args)
        if r["status"] != "OK":
            raise SystemExit(f"stream.py: {cmd}: {r['status']} {r['message']}")
        return r["result"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connect", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--policy", default="local-agreement")
    ap.add_argument("--system", help="the translation's instruction (default: rill's)")
    ap.add_argument("--session", default="talk")
    ap.add_argument("--pace", type=float, default=1.0, help="times real time (1: real time)")
    ap.add_argument("audio")
    a = ap.parse_args()
    rate, pcm = read_audio(a.audio)
    audio_s = len(pcm) / 2 / rate
    ctx = zmq.Context()
    c = Rilld(ctx, a.connect)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(a.events)
    sub.setsockopt(zmq.SUBSCRIBE, f"{a.session}/".encode())
    time.sleep(0.3)  # the subscription reaches rilld
    create = dict(session=a.session, model="llm", asr="asr", translate=a.policy)
    if a.system:
        create["system"] = a.system
    c.call("session.create", **create)
    print(f"captions page: http://{a.http}/captions/{a.session}", flush=True)
    print(f"streaming {a.audio} ({audio_s:.1f} s) at {a.pace:g}x real time, policy {a.policy}",
          flush=True)

    commit_at, delays, caps, transcript = [], [], [], []
    last = {"src_words": -1, "end": False, "final": False}

    def poll(timeout_ms):
        while sub.poll(timeout_ms):
            timeout_ms = 0
            topic, payload = sub.recv_multipart()
            e = msgpack.unpackb(payload, raw=False)
            now = time.time()
            if e["kind"] == "transcript":
                last["final"] = last["final"] or e["final"]
            if e["kind"] == "transcript" and e["committed"]:
                transcript.append(e["committed"])
                commit_at.extend([now] * len(WORD.findall(e["committed"])))
                print(f"  [en {e['audio_s']:6.1f} s] {shown(e['committed'].strip())}", flush=True)
            elif e["kind"] == "translation":
                if e["status"] != "OK":
                    print(f"  [es] error: {e['message']}", flush=True)
                    continue
                caps.append(e)
                if 0 < e["src_words"] <= len(commit_at):
                    delays.append(now - commit_at[e["src_words"] - 1])
                last.update(src_words=e["src_words"], end=e["segment_end"])
                print(f"  [es {e['src_s']:6.1f} s] {shown(e['emit'])}", flush=True)

    step = int(rate * 0.02) * 2
    t0 = time.time()
    for i in range(0, len(pcm), step):
        seq = i // step
        while True:
            r = c.req("ingest.audio", session=a.session, codec="pcm16", rate=rate, channels=1,
                      seq=seq, data=pcm[i:i + step])
            if r["status"] != "EFULL":
                break
            poll(50)
        if r["status"] != "OK":
            raise SystemExit(f"stream.py: ingest.audio: {r['status']} {r['message']}")
        due = t0 + (seq + 1) * 0.02 / a.pace
        poll(max(0, int((due - time.time()) * 1000)))
    c.call("ingest.audio", session=a.session, flush=True)
    # the rest: the recognizer's last words, then the translation of the last sentence
    deadline = time.time() + 600
    while time.time() < deadline:
        poll(500)
        st = c.call("session.stats", session=a.session)
        tr, asr = st["translation"], st["asr"]
        words = len(commit_at)
        if last["final"] and asr["finishes"] >= 1 and tr["queued_bytes"] == 0 \
                and len(caps) == tr["emissions"] \
                and (words == 0 or (last["src_words"] == words and last["end"])):
            break
    wall = time.time() - t0
    text = " ".join(e["emit"] for e in caps)
    print("\nsummary")
    print(f"  audio        {audio_s:.1f} s streamed in {wall:.1f} s")
    print(f"  transcript   {len(commit_at)} words: {''.join(transcript).strip()}")
    print(f"  captions     {len(WORD.findall(text))} words in {len(caps)} emissions: {shown(text)}")
    if delays:
        print(f"  caption delay after the words were recognized: median "
              f"{statistics.median(delays):.2f} s, max {max(delays):.2f} s")
    if caps:
        print(f"  engine time  {caps[-1]['compute_s']:.1f} s (compute_s of the last caption)")
    print(f"  page         http://{a.http}/captions/{a.session}")
    if sys.stdin.isatty() and os.environ.get("RILL_DEMO_NO_WAIT") != "1":
        try:
            input("press Enter to stop rilld (the page stays live until then) ")
        except EOFError:
            pass
    c.call("session.close", session=a.session)
    ctx.destroy(0)


if __name__ == "__main__":
    main()
