#!/usr/bin/env python3
"""CTranslate2's Whisper timed as bench/bench_whisper.c times rill's: the encoder over one 30 s
window, and the decoder per token (greedy from the sot sequence, eot suppressed so that exactly
--tokens tokens are generated), compute_type float32, medians of --runs after one warm-up run.
Prints one JSON line. Needs faster-whisper's ctranslate2 in .venv (scripts/setup.sh --speech).

    .venv/bin/python bench/whisper_ct2.py ~/.cache/rill/models/whisper-tiny.en-ct2 --threads 2
"""
import argparse
import json
import statistics
import time
import wave

import numpy as np

CLIP = '/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('folder')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--runs', type=int, default=5)
    ap.add_argument('--tokens', type=int, default=32)
    a = ap.parse_args()
    import ctranslate2
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor
    with wave.open(CLIP, 'rb') as w:
        x = np.frombuffer(w.readframes(w.getnframes()), dtype='<i2').astype(np.float32) / 32768.0
    f = FeatureExtractor(feature_size=80)(x)
    feats = pad_or_trim(f[:, :f.shape[1] - 1]).astype(np.float32)[None]
    m = ctranslate2.models.Whisper(a.folder, device='cpu', compute_type='float32',
                                   intra_threads=a.threads)
    prompt = [50257, 50362] if not m.is_multilingual else [50258, 50259, 50359, 50363]
    eot = 50256 if not m.is_multilingual else 50257
    enc_t, dec_t = [], []
    for r in range(a.runs + 1):
        t0 = time.perf_counter()
        enc = m.encode(ctranslate2.StorageView.from_array(feats), to_cpu=True)
        t1 = time.perf_counter()
        res = m.generate(enc, [prompt], beam_size=1, max_length=len(prompt) + a.tokens,
                         suppress_blank=False, suppress_tokens=[eot])
        t2 = time.perf_counter()
        n = len(res[0].sequences_ids[0])
        if r > 0:
            enc_t.append(t1 - t0)
            dec_t.append((t2 - t1) * 1e3 / max(n, 1))
    print(json.dumps({'bench': 'whisper_ct2', 'folder': a.folder, 'threads': a.threads,
                      'encode_s': round(statistics.median(enc_t), 4),
                      'decode_ms_per_token': round(statistics.median(dec_t), 3),
                      'tokens': n, 'runs': a.runs, 'ctranslate2': ctranslate2.__version__}))


if __name__ == '__main__':
    main()
