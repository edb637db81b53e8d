#!/usr/bin/env python3
"""Synthesizes a turn corpus for endpoint anticipation with espeak-ng (issue 17, item 4).

    tools/make_turns.py --split dev --out DIR [--turns 40] [--seed 1] [--voice en-us]

A speaker says turns of one to three sentences (from the World English Bible verses of the
split: tune on dev, report on test) and pauses twice over: inside a turn (hesitations at a comma
or between its sentences, 300-900 ms) and after it (the turn's end; the next turn starts 300-2000
ms later). Pauses of both kinds overlap in length, so a detector that only counts silence cannot
tell them apart: the fixed 700 ms silence endpoint (the baseline) cuts into the hesitations
longer than 700 ms and waits 700 ms after every real end.

Writes DIR/turns.wav (16-bit mono at espeak-ng's rate, 22,050 Hz; rill resamples) and
DIR/turns.json: {"rate", "voice", "espeak_ng", "seed", "split", "turns": [{"start_s", "end_s",
"text", "sentences", "pauses": [{"start_s", "end_s"}]}]} with times of speech (each synthesized
chunk's leading and trailing silence trimmed, so pauses are exactly as listed). Deterministic for
a given espeak-ng version, seed and split.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import wave

import numpy as np

BIBLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                     'testdata', 'bible')
RATE = 22050


def split_books(split):
    books = set()
    with open(os.path.join(BIBLE, 'splits.tsv'), encoding='utf-8') as f:
        for line in f:
            book, s = line.rstrip('\n').split('\t')
            if s == split:
                books.add(book)
    if not books:
        sys.exit('make_turns: no books in split %r' % split)
    return books


def sentences(split):
    """The split's WEB verses as sentences (ending in . ? or !), quotes removed."""
    books = split_books(split)
    out = []
    with open(os.path.join(BIBLE, 'en-web.tsv'), encoding='utf-8') as f:
        for line in f:
            ref, text = line.rstrip('\n').split('\t')
            if ref.rsplit(' ', 1)[0] not in books:
                continue
            text = re.sub(r'[“”‘’"]', '', text).replace("'", '')
            for s in re.split(r'(?<=[.?!])\s+', text):
                s = s.strip()
                if 3 <= len(s.split()) <= 30 and s[-1] in '.?!':
                    out.append(s)
    return out


def espeak_version():
    r = subprocess.run(['espeak-ng', '--version'], capture_output=True, text=True, check=True)
    return r.stdout.split('Data at')[0].strip()


def synth(text, voice, speed):
    """Speech of text as float32 at RATE, its leading and trailing silence trimmed."""
    r = subprocess.run(['espeak-ng', '-v', voice, '-s', str(speed), '--stdout', text],
                       capture_output=True, check=True)
    data = r.stdout
    # a WAV from espeak-ng on stdout: RIFF header then 16-bit mono PCM at 22,050 Hz
    pos = data.find(b'data')
    if data[:4] != b'RIFF' or pos < 0:
        sys.exit('make_turns: espeak-ng did not write a WAV')
    pcm = np.frombuffer(data[pos + 8:], dtype='<i2').astype(np.float32) / 32768.0
    loud = np.nonzero(np.abs(pcm) > 0.01)[0]
    if len(loud) == 0:
        sys.exit('make_turns: espeak-ng gave silence for %r' % text)
    return pcm[loud[0]:loud[-1] + 1]


def silence(ms):
    return np.zeros(int(round(ms * RATE / 1000.0)), dtype=np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--split', choices=('dev', 'test'), required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--turns', type=int, default=40)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--voice', default='en-us')
    ap.add_argument('--speed', type=int, default=165, help='words per minute (espeak-ng -s)')
    args = ap.parse_args()
    rng = random.Random(args.seed)
    pool = sentences(args.split)
    rng.shuffle(pool)
    if len(pool) < args.turns:
        sys.exit('make_turns: the %s split has %d sentences' % (args.split, len(pool)))
    audio = [silence(500)]
    t = 0.5
    turns = []
    k = 0
    for _ in range(args.turns):
        n = rng.choice((1, 1, 2, 2, 3))
        sents = [pool[(k + i) % len(pool)] for i in range(n)]
        k += n
        turn = {'start_s': round(t, 4), 'text': ' '.join(sents), 'sentences': n, 'pauses': []}
        for i, s in enumerate(sents):
            # a hesitation inside a sentence, at a comma, now and then
            parts = [s]
            if ',' in s and rng.random() < 0.5:
                a, b = s.split(',', 1)
                parts = [a + ',', b.strip()]
            for j, p in enumerate(parts):
                pcm = synth(p, args.voice, args.speed)
                audio.append(pcm)
                t += len(pcm) / RATE
                last = i == len(sents) - 1 and j == len(parts) - 1
                if not last:
                    ms = rng.uniform(300, 900)
                    turn['pauses'].append({'start_s': round(t, 4),
                                           'end_s': round(t + ms / 1000.0, 4)})
                    audio.append(silence(ms))
                    t += len(audio[-1]) / RATE
        turn['end_s'] = round(t, 4)
        turns.append(turn)
        gap = rng.uniform(300, 2000)
        audio.append(silence(gap))
        t += len(audio[-1]) / RATE
    pcm = np.concatenate(audio)
    os.makedirs(args.out, exist_ok=True)
    with wave.open(os.path.join(args.out, 'turns.wav'), 'wb') as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype('<i2').tobytes())
    meta = {'rate': RATE, 'voice': args.voice, 'speed': args.speed,
            'espeak_ng': espeak_version(), 'seed': args.seed, 'split': args.split,
            'duration_s': round(len(pcm) / RATE, 4), 'turns': turns}
    with open(os.path.join(args.out, 'turns.json'), 'w', encoding='utf-8') as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    within = [p['end_s'] - p['start_s'] for tr in turns for p in tr['pauses']]
    print('make_turns: %d turns, %.1f s of audio, %d pauses inside turns (%d over 700 ms) -> %s'
          % (len(turns), len(pcm) / RATE, len(within), sum(1 for x in within if x > 0.7),
             args.out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
