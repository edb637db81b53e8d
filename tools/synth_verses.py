#!/usr/bin/env python3
"""Speaks Bible verses of one split with espeak-ng, for measuring recognizers (bench/).

    tools/synth_verses.py [--split dev] [--verses 12] [--out DIR]

Takes the World English Bible verses (../shared/testdata/bible/en-web.tsv) of the split's books
(splits.tsv) that have 8 to 40 words, keeps --verses of them evenly spaced in canonical order, and
speaks each with espeak-ng (voice en-us, 160 words per minute, fixed here so that every run hears
the same audio). espeak-ng writes 22,050 Hz; each clip is resampled to 16 kHz 16-bit mono
(libswresample through PyAV, of tools/requirements-speech.txt) so that every recognizer, including
pocketsphinx (16 kHz only), reads the same samples.

The text spoken is the reference: quotation marks are removed, and the typographic apostrophe
(U+2019) inside a word becomes "'" (elsewhere it closes a quotation and is removed).

Writes DIR/VERSE.wav (VERSE: the reference with ' ' and ':' as '_', e.g. Titus_1_1.wav) and
DIR/verses.json: {"split", "voice", "wpm", "rate", "espeak_ng", "verses": [{"ref", "text",
"wav", "audio_s"}]}. DIR defaults to $RILL_CACHE/bench/verses-SPLIT-N (RILL_CACHE defaults to
~/.cache/rill), outside the checkout. A DIR whose verses.json matches the request is reused as it
is. Prints DIR/verses.json.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import wave

import numpy as np

BIBLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared',
                     'testdata', 'bible')
VOICE = 'en-us'
WPM = 160
RATE = 16000


def espeak_version():
    out = subprocess.run(['espeak-ng', '--version'], capture_output=True, text=True, check=True)
    return out.stdout.split('Data at')[0].strip()


def spoken(text):
    """The verse as spoken and as the reference: no quotation marks, ASCII apostrophes."""
    text = re.sub(r"(?<=\w)\u2019(?=\w)", "'", text)
    text = re.sub(r'[\u201c\u201d\u2018\u2019"]', '', text)
    return re.sub(r'\s+', ' ', text).strip()


def pick(split, n):
    books = set()
    with open(os.path.join(BIBLE, 'splits.tsv'), encoding='utf-8') as f:
        for line in f:
            book, s = line.rstrip('\n').split('\t')
            if s == split:
                books.add(book)
    if not books:
        sys.exit(f'synth_verses: no books in split {split!r}')
    cands = []
    with open(os.path.join(BIBLE, 'en-web.tsv'), encoding='utf-8') as f:
        for line in f:
            ref, text = line.rstrip('\n').split('\t')
            if ref.rsplit(' ', 1)[0] in books and 8 <= len(text.split()) <= 40:
                cands.append((ref, spoken(text)))
    if len(cands) < n:
        sys.exit(f'synth_verses: split {split!r} has {len(cands)} verses of 8-40 words, '
                 f'{n} asked')
    return [cands[i * len(cands) // n] for i in range(n)]


def to_16k(src, dst):
    """Resamples espeak-ng's WAV to 16 kHz mono 16-bit PCM with libswresample (PyAV)."""
    import av
    from av.audio.resampler import AudioResampler
    rs = AudioResampler(format='s16', layout='mono', rate=RATE)
    chunks = []
    with av.open(src) as c:
        for frame in c.decode(audio=0):
            chunks += [f.to_ndarray().reshape(-1) for f in rs.resample(frame)]
    chunks += [f.to_ndarray().reshape(-1) for f in rs.resample(None)]
    x = np.concatenate(chunks).astype('<i2')
    with wave.open(dst, 'wb') as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(x.tobytes())
    return len(x) / RATE


def synthesize(split='dev', n=12, out=None):
    """Returns the manifest (as verses.json holds it), synthesizing what is not there yet."""
    if out is None:
        cache = os.environ.get('RILL_CACHE', os.path.expanduser('~/.cache/rill'))
        out = os.path.join(cache, 'bench', f'verses-{split}-{n}')
    manifest = os.path.join(out, 'verses.json')
    want = {'split': split, 'voice': VOICE, 'wpm': WPM, 'rate': RATE,
            'espeak_ng': espeak_version()}
    if os.path.exists(manifest):
        with open(manifest, encoding='utf-8') as f:
            have = json.load(f)
        if ({k: have.get(k) for k in want} == want and len(have['verses']) == n and
                all(os.path.exists(v['wav']) for v in have['verses'])):
            return have
    os.makedirs(out, exist_ok=True)
    verses = []
    with tempfile.TemporaryDirectory() as tmp:
        for ref, text in pick(split, n):
            raw = os.path.join(tmp, 'raw.wav')
            subprocess.run(['espeak-ng', '-v', VOICE, '-s', str(WPM), '-w', raw, text],
                           check=True)
            wav = os.path.join(out, re.sub(r'[ :]', '_', ref) + '.wav')
            verses.append({'ref': ref, 'text': text, 'wav': wav,
                           'audio_s': round(to_16k(raw, wav), 4)})
    have = dict(want, verses=verses)
    with open(manifest + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(have, f, indent=1, ensure_ascii=False)
    os.replace(manifest + '.tmp', manifest)
    return have


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--split', default='dev')
    ap.add_argument('--verses', type=int, default=12)
    ap.add_argument('--out')
    a = ap.parse_args()
    if a.verses < 1:
        sys.exit('synth_verses: --verses must be at least 1')
    m = synthesize(a.split, a.verses, a.out)
    print(os.path.join(os.path.dirname(m['verses'][0]['wav']), 'verses.json'))


if __name__ == '__main__':
    main()
