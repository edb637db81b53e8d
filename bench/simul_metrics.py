"""Latency metrics of simultaneous translation: LAAL, StreamLAAL and its computation-aware variant.

Used by bench/translate_eval.py; tested by tests/test_simul_metrics.py (hand-made cases with known
answers). Pure Python and numpy; implemented here from the published definitions, no code taken.

LAAL (Papi et al., 2022, "Over-Generation Cannot Be Rewarded: Length-Adaptive Average Lagging"),
as SimulEval and FBK compute it on one sentence: for delays d_1..d_|Y| of the hypothesis' words
(how much source had been read when word i was written), source length |X| (words, or seconds of
audio) and reference length |Y*| (words),

    LAAL = d_1                                              if d_1 > |X|
    LAAL = 1/tau * sum_{i=1..tau} (d_i - (i - 1) * |X| / max(|Y|, |Y*|))   otherwise,

tau being the first i with d_i >= |X| (|Y| if none).

StreamLAAL (Papi et al., 2024, "StreamAtt", the StreamLAAL 2.0 script of FBK-fairseq) scores one
unsegmented hypothesis per talk: the hypothesis is re-segmented to the reference sentences by
minimum-WER alignment (mwerSegmenter, Matusov et al. 2005), each word keeping its delay; a
sentence's delays are then taken from its own audio start, max(0, d - start), and LAAL is computed
per sentence with |X| = the sentence's audio duration; StreamLAAL is the mean over the sentences
that received words (the others are counted, not scored). Its computation-aware variant uses, for
word i written by an emission at source time s_i after total engine compute C_i (seconds since the
talk began), the delay

    d_i^CA = s_i + (C_i - C_prev(i)),

C_prev(i) being the total compute when the previous word was written (0 before the first word),
so words of one emission share its compute increment: FBK's correction of SimulEval's elapsed
times, whose cumulative compute would grow without bound over a long talk. rill's emission records
carry s_i as src_s and C_i as compute_s.

The alignment (mwer_segment) is implemented here, not taken from mwerSegmenter: one Levenshtein
DP of the hypothesis words against the concatenation of the reference sentences' words. Every
path through that grid crosses each sentence boundary at some hypothesis position, so cutting the
optimal path at the boundaries gives a segmentation whose summed per-sentence edit distances equal
the minimum over all segmentations (and the DP is O(|hyp| * |ref|), not one DP per cut). Words
compare case-folded with punctuation stripped (a Spanish word with and without its comma is the
same word); hypothesis words the path inserts between two sentences go to the earlier one.
"""
import re

import numpy as np

_PUNCT = re.compile(r"[^\w]+", re.UNICODE)


def norm(word):
    """The form words are compared in: case-folded, punctuation removed (kept if nothing else)."""
    w = _PUNCT.sub('', word.casefold())
    return w or word


def laal(delays, src_len, ref_len):
    """LAAL of one sentence (module docstring); None when there are no delays (nothing written)."""
    if not delays:
        return None
    if src_len <= 0:
        raise ValueError('laal: the source length must be positive')
    if delays[0] > src_len:
        return float(delays[0])
    rate = src_len / max(len(delays), ref_len)
    total, tau = 0.0, 0
    for i, d in enumerate(delays):
        total += d - i * rate
        tau = i + 1
        if d >= src_len:
            break
    return total / tau


def edit_distance(a, b):
    """Levenshtein distance between two word lists, compared through norm() (for the tests)."""
    a, b = [norm(w) for w in a], [norm(w) for w in b]
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def mwer_segment(hyp, refs):
    """Splits the word list hyp into len(refs) consecutive pieces (refs: a list of word lists) with
    the least total edit distance to them (module docstring). Returns (pieces, cost): pieces a
    list of (start, end) index ranges into hyp, covering it in order (a piece may be empty)."""
    if not refs:
        raise ValueError('mwer_segment: no reference sentences')
    vocab = {}
    r_ids = np.array([vocab.setdefault(norm(w), len(vocab)) for ref in refs for w in ref],
                     dtype=np.int64)
    h_ids = [vocab.setdefault(norm(w), len(vocab)) for w in hyp]
    verse_of = np.repeat(np.arange(len(refs)), [len(r) for r in refs])
    n, m = len(h_ids), len(r_ids)
    cols = np.arange(m + 1, dtype=np.int64)
    d = np.empty((n + 1, m + 1), dtype=np.int32)
    d[0] = cols
    for j in range(1, n + 1):
        prev = d[j - 1].astype(np.int64)
        e = np.empty(m + 1, dtype=np.int64)
        e[0] = j
        e[1:] = np.minimum(prev[:-1] + (r_ids != h_ids[j - 1]), prev[1:] + 1)
        # a deletion moves along the row: d[j][i] = min_k<=i e[k] + (i - k)
        d[j] = np.minimum.accumulate(e - cols) + cols
    owner = [0] * n  # the reference sentence each hypothesis word goes to
    j, i = n, m
    while j > 0:
        if i > 0 and d[j, i] == d[j - 1, i - 1] + (r_ids[i - 1] != h_ids[j - 1]):
            owner[j - 1] = int(verse_of[i - 1])
            j, i = j - 1, i - 1
        elif d[j, i] == d[j - 1, i] + 1:
            owner[j - 1] = int(verse_of[i - 1]) if i > 0 else 0
            j -= 1
        else:
            i -= 1
    pieces, at = [], 0
    for k in range(len(refs)):
        end = at
        while end < n and owner[end] == k:
            end += 1
        pieces.append((at, end))
        at = end
    assert at == n
    return pieces, int(d[n, m])


def emission_delays(records, src_key='src_s'):
    """Per hypothesis word of one talk: (words, delays, ca_delays) from rill's emission records
    ({"emit", src_key, "compute_s"}; records without "emit" are skipped). delays[i] is the
    emission's src_key; ca_delays[i] adds the compute spent since the previous word was written
    (module docstring)."""
    words, delays, ca = [], [], []
    prev_c = 0.0
    for r in records:
        if 'emit' not in r:
            continue
        ws = r['emit'].split()
        if not ws:
            continue
        inc = r['compute_s'] - prev_c
        prev_c = r['compute_s']
        words += ws
        delays += [r[src_key]] * len(ws)
        ca += [r[src_key] + inc] * len(ws)
    return words, delays, ca


def stream_laal(records, verses):
    """StreamLAAL of one talk. verses: [{"es": reference text, "start_s", "duration_s"}] in order.
    Returns {"hyps": the re-segmented hypothesis per verse, "laal": [per verse or None],
    "laal_ca": [...], "align_cost": edit distance of the alignment}."""
    words, delays, ca = emission_delays(records)
    pieces, cost = mwer_segment(words, [v['es'].split() for v in verses])
    hyps, lags, lags_ca = [], [], []
    for (a, b), v in zip(pieces, verses):
        hyps.append(' '.join(words[a:b]))
        n_ref = len(v['es'].split())
        rel = [max(0.0, x - v['start_s']) for x in delays[a:b]]
        rel_ca = [max(0.0, x - v['start_s']) for x in ca[a:b]]
        lags.append(laal(rel, v['duration_s'], n_ref))
        lags_ca.append(laal(rel_ca, v['duration_s'], n_ref))
    return {'hyps': hyps, 'laal': lags, 'laal_ca': lags_ca, 'align_cost': cost}


def mean_scored(values):
    """(mean of the values that are not None or None, how many are None)."""
    got = [v for v in values if v is not None]
    return (sum(got) / len(got) if got else None), len(values) - len(got)
