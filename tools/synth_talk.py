#!/usr/bin/env python3
"""Speaks a split's KJV verses as continuous talks, one per book, for the translation benchmark.

    tools/synth_talk.py [--split test] [--verses N] [--out DIR]

The verses are the split's KJV <-> RV1909 pairs (../shared/testdata/bible/
en-es.kjv-rv1909.align.tsv, in its canonical order; a KJV verse without a checked Spanish partner
is not spoken), the first --verses of them when given (the quick loop: --verses 60 is the first 60
verses of Ruth). Each verse is spoken by espeak-ng (voice en-us, 160 words per minute: fixed here,
so every run hears the same audio) and resampled to 16 kHz mono 16-bit (libswresample through
PyAV, tools/synth_verses.py's to_16k); a book's verses are joined in order with GAP_S of silence
after each into one WAV, the talk. The text spoken is the verse as tools/synth_verses.py speaks
it (quotation marks removed).

Writes DIR/BOOK.wav and DIR/talks.json: {"split", "voice", "wpm", "rate", "gap_s", "espeak_ng",
"verses_limit", "talks": [{"book", "wav", "audio_s", "verses": [{"ref", "ref_es", "en", "es",
"start_s", "duration_s"}]}]}, where start_s is the verse's first sample in the talk (seconds) and
duration_s the length of its clip (espeak-ng's own leading and trailing silence included, the gap
not). DIR defaults to $RILL_CACHE/bench/talks-SPLIT-N (N: the limit, or "all"), RILL_CACHE to
~/.cache/rill: outside the checkout. A DIR whose talks.json matches the request is reused as it
is. Prints DIR/talks.json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import synth_verses  # noqa: E402  (espeak_version, spoken, to_16k, VOICE, WPM, RATE)

BIBLE = os.path.join(HERE, '..', '..', 'shared', 'testdata', 'bible')
GAP_S = 0.3


def read_tsv(path):
    out = {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            k, _, v = line.rstrip('\n').partition('\t')
            out[k] = v
    return out


def verses(split, limit=None, data=BIBLE):
    """[(book, ref_en, ref_es, english, spanish)] of the split, in the pair file's order."""
    en = read_tsv(os.path.join(data, 'en-kjv.tsv'))
    es = read_tsv(os.path.join(data, 'es-rv1909.tsv'))
    out = []
    with open(os.path.join(data, 'en-es.kjv-rv1909.align.tsv'), encoding='utf-8') as f:
        for line in f:
            ref_en, ref_es, sp = line.rstrip('\n').split('\t')
            if sp == split:
                out.append((ref_en.rsplit(' ', 1)[0], ref_en, ref_es,
                            synth_verses.spoken(en[ref_en]), es[ref_es]))
    if not out:
        sys.exit(f'synth_talk: no verse pairs in split {split!r}')
    if limit is not None:
        if limit > len(out):
            sys.exit(f'synth_talk: split {split!r} has {len(out)} verse pairs, {limit} asked')
        out = out[:limit]
    return out


def by_book(vs):
    """Groups verses() into talks, keeping the order: [(book, [verse, ...])]."""
    talks = []
    for v in vs:
        if not talks or talks[-1][0] != v[0]:
            talks.append((v[0], []))
        talks[-1][1].append(v)
    return talks


def read_pcm(path):
    with wave.open(path, 'rb') as w:
        assert w.getframerate() == synth_verses.RATE and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype='<i2')


def synthesize(split='test', limit=None, out=None):
    """Returns the manifest (as talks.json holds it), synthesizing what is not there yet."""
    if out is None:
        cache = os.environ.get('RILL_CACHE', os.path.expanduser('~/.cache/rill'))
        out = os.path.join(cache, 'bench', f'talks-{split}-{limit or "all"}')
    manifest = os.path.join(out, 'talks.json')
    want = {'split': split, 'voice': synth_verses.VOICE, 'wpm': synth_verses.WPM,
            'rate': synth_verses.RATE, 'gap_s': GAP_S,
            'espeak_ng': synth_verses.espeak_version(), 'verses_limit': limit}
    if os.path.exists(manifest):
        with open(manifest, encoding='utf-8') as f:
            have = json.load(f)
        if ({k: have.get(k) for k in want} == want and
                all(os.path.exists(t['wav']) for t in have['talks'])):
            return have
    os.makedirs(out, exist_ok=True)
    rate = synth_verses.RATE
    gap = np.zeros(int(round(GAP_S * rate)), dtype='<i2')
    talks = []
    with tempfile.TemporaryDirectory() as tmp:
        for book, vs in by_book(verses(split, limit)):
            pcm, rows, at = [], [], 0
            for _, ref, ref_es, text, es in vs:
                raw, clip = os.path.join(tmp, 'raw.wav'), os.path.join(tmp, 'clip.wav')
                subprocess.run(['espeak-ng', '-v', synth_verses.VOICE, '-s',
                                str(synth_verses.WPM), '-w', raw, text], check=True)
                synth_verses.to_16k(raw, clip)
                x = read_pcm(clip)
                rows.append({'ref': ref, 'ref_es': ref_es, 'en': text, 'es': es,
                             'start_s': round(at / rate, 4),
                             'duration_s': round(len(x) / rate, 4)})
                pcm += [x, gap]
                at += len(x) + len(gap)
            wav = os.path.join(out, book + '.wav')
            with wave.open(wav + '.tmp', 'wb') as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(rate)
                w.writeframes(np.concatenate(pcm).tobytes())
            os.replace(wav + '.tmp', wav)
            talks.append({'book': book, 'wav': wav, 'audio_s': round(at / rate, 4),
                          'verses': rows})
    have = dict(want, talks=talks)
    with open(manifest + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(have, f, indent=1, ensure_ascii=False)
    os.replace(manifest + '.tmp', manifest)
    return have


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--split', default='test', choices=['train', 'dev', 'test'])
    ap.add_argument('--verses', type=int, help='the first N verses only (quick loop: 60)')
    ap.add_argument('--out')
    a = ap.parse_args()
    if a.verses is not None and a.verses < 1:
        sys.exit('synth_talk: --verses must be at least 1')
    synthesize(a.split, a.verses, a.out)
    out = a.out or os.path.join(os.environ.get('RILL_CACHE', os.path.expanduser('~/.cache/rill')),
                                'bench', f'talks-{a.split}-{a.verses or "all"}')
    print(os.path.join(out, 'talks.json'))


if __name__ == '__main__':
    main()
