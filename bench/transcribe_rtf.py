#!/usr/bin/env python3
"""Real-time factor of `rill transcribe` (offline: --offline, one decode per clip; streaming: a
re-decode per second) beside faster-whisper's (beam 1, language en, no VAD, float32, 2 CPU
threads, the same tiny.en weights from the CTranslate2 folder) on the five LibriVox clips of
pocketsphinx-testdata. Not a test. Each figure is wall time / audio time over all five clips;
rill's includes loading the model (its --json rtf), faster-whisper's is given both ways.

Usage: .venv/bin/python bench/transcribe_rtf.py RILL_BINARY [CT2_DIR]
"""
import glob, json, os, subprocess, sys, time

rill = sys.argv[1]
ct2 = sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser("~/.cache/rill/models/whisper-tiny.en-ct2")
clips = sorted(glob.glob("/usr/share/pocketsphinx/test/data/librivox/*.wav"))
rows = {}
for mode, extra in (("offline", ["--offline"]), ("streaming", [])):
    audio = wall = 0.0
    for c in clips:
        out = subprocess.run([rill, "transcribe", "--json", "--threads", "2", *extra, c],
                             capture_output=True, text=True, check=True).stdout
        final = json.loads(out.splitlines()[-1])
        audio += final["audio_s"]
        wall += final["wall_s"]
    rows["rill " + mode] = (audio, wall)
from faster_whisper import WhisperModel
t0 = time.monotonic()
m = WhisperModel(ct2, device="cpu", compute_type="float32", cpu_threads=2, local_files_only=True)
load = time.monotonic() - t0
audio = wall = 0.0
for c in clips:
    t0 = time.monotonic()
    segs, info = m.transcribe(c, beam_size=1, language="en", vad_filter=False)
    "".join(s.text for s in segs)
    wall += time.monotonic() - t0
    audio += info.duration
rows["faster-whisper (model loaded)"] = (audio, wall)
rows["faster-whisper (+ load per clip)"] = (audio, wall + load * len(clips))
print(f"{'what':36s} {'audio s':>8s} {'wall s':>8s} {'rtf':>6s}")
for k, (a, w) in rows.items():
    print(f"{k:36s} {a:8.2f} {w:8.2f} {w / a:6.3f}")
print(json.dumps({k: round(w / a, 4) for k, (a, w) in rows.items()}))
