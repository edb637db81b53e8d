#!/usr/bin/env python3
"""bench/simul_metrics.py (issue 22 item 4) on hand-made cases with known answers: LAAL of single
sentences worked out by hand, the minimum-WER re-segmentation (exact cuts on constructed talks,
its cost equal to a brute-force minimum over every segmentation on random small cases, ties),
the computation-aware delays from emission records, StreamLAAL of a two-verse talk computed by
hand, and the cascade and record helpers of bench/translate_eval.py that need no engine.

Usage: test_simul_metrics.py SOURCE_DIR. Needs numpy (the .venv); exits 77 without it.
Prints 'N passed, N failed' last.
"""
import itertools
import os
import random
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
sys.path.insert(0, os.path.join(SRC, 'bench'))
try:
    import numpy  # noqa: F401
except ImportError:
    print('test_simul_metrics: numpy missing (the .venv); skipped')
    sys.exit(77)
import simul_metrics as sm  # noqa: E402
import translate_eval as te  # noqa: E402

results = []


def check(name, fn):
    try:
        fn()
        results.append((name, None))
        print(f'ok   {name}')
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        results.append((name, e))
        print(f'FAIL {name}: {type(e).__name__}: {e}')


def close(a, b, tol=1e-9):
    assert a is not None and abs(a - b) <= tol, f'{a} != {b}'


# ---- LAAL ------------------------------------------------------------------------------------
def laal_wait_k():
    # |X| = 6 source words, wait-2 writing one word per source word, |Y| = |Y*| = 6:
    # d = 2,3,4,5,6,6 -> tau = 5 (first d >= 6), rate 1: (2+2+2+2+2)/5 = 2 (k, as for AL).
    close(sm.laal([2, 3, 4, 5, 6, 6], 6, 6), 2.0)


def laal_longer_hypothesis():
    # over-generation: |Y| = 8 > |Y*| = 4 sets the rate to 4/8; d = 1,1,2,2,4,... tau = 5:
    # (1 - 0) + (1 - .5) + (2 - 1) + (2 - 1.5) + (4 - 2) = 5 / 5 = 1.0
    close(sm.laal([1, 1, 2, 2, 4, 4, 4, 4], 4, 4), 1.0)


def laal_longer_reference():
    # |Y| = 2 < |Y*| = 4: rate 4/4 = 1; d = 3,4 -> tau 2: (3 + 3) / 2 = 3
    close(sm.laal([3, 4], 4, 4), 3.0)


def laal_whole_sentence_and_late_start():
    close(sm.laal([5.0, 5.0, 5.0], 5.0, 3), 5.0)  # everything at the end: tau 1, LAAL = |X|
    close(sm.laal([7.5, 8.0], 5.0, 2), 7.5)       # first word after the source: LAAL = d_1
    assert sm.laal([], 5.0, 3) is None
    try:
        sm.laal([1.0], 0.0, 1)
    except ValueError:
        pass
    else:
        raise AssertionError('a zero source length was accepted')


def laal_seconds():
    # audio: |X| = 4.0 s, |Y*| = 4, |Y| = 4, rate 1 s per word; delays 1.5, 1.5, 3, 4.2:
    # (1.5 - 0) + (1.5 - 1) + (3 - 2) + (4.2 - 3) = 4.2 / 4 = 1.05
    close(sm.laal([1.5, 1.5, 3.0, 4.2], 4.0, 4), 1.05)


# ---- re-segmentation --------------------------------------------------------------------------
def segment_exact():
    refs = [['a', 'b', 'c'], ['d', 'e'], ['f', 'g', 'h']]
    hyp = 'A b, c d e f g h.'.split()
    pieces, cost = sm.mwer_segment(hyp, refs)
    assert pieces == [(0, 3), (3, 5), (5, 8)], pieces
    assert cost == 0, cost


def segment_errors():
    refs = [['el', 'principio', 'crió'], ['y', 'la', 'tierra'], ['dijo', 'dios']]
    # a substitution in verse 1, verse 2's "la" missing, an extra word in verse 3
    hyp = 'el comienzo crió y tierra dijo dios amén'.split()
    pieces, cost = sm.mwer_segment(hyp, refs)
    assert pieces == [(0, 3), (3, 5), (5, 8)], pieces
    assert cost == 3, cost


def segment_empty_and_missing_verse():
    refs = [['a', 'b'], ['c', 'd', 'e'], ['f']]
    pieces, cost = sm.mwer_segment([], refs)
    assert pieces == [(0, 0)] * 3 and cost == 6, (pieces, cost)
    # the middle verse was never translated: it gets nothing
    pieces, cost = sm.mwer_segment('a b f'.split(), refs)
    assert pieces == [(0, 2), (2, 2), (2, 3)], pieces
    assert cost == 3


def segment_insertion_at_boundary_goes_earlier():
    # "x" matches nothing; between verse 1 and 2 it goes to verse 1
    pieces, cost = sm.mwer_segment('a b x c d'.split(), [['a', 'b'], ['c', 'd']])
    assert pieces == [(0, 3), (3, 5)] and cost == 1, (pieces, cost)


def segment_matches_brute_force():
    rng = random.Random(22)
    for _ in range(150):
        k = rng.randint(1, 4)
        refs = [[rng.choice('abcde') for _ in range(rng.randint(1, 4))] for _ in range(k)]
        hyp = [rng.choice('abcdef') for _ in range(rng.randint(0, 9))]
        pieces, cost = sm.mwer_segment(hyp, refs)
        assert pieces[0][0] == 0 and pieces[-1][1] == len(hyp)
        assert all(p[1] == q[0] for p, q in zip(pieces, pieces[1:]))
        got = sum(sm.edit_distance(hyp[a:b], r) for (a, b), r in zip(pieces, refs))
        assert got == cost, (hyp, refs, pieces, got, cost)
        best = min(
            sum(sm.edit_distance(hyp[a:b], r)
                for (a, b), r in zip(zip((0,) + cuts, cuts + (len(hyp),)), refs))
            for cuts in itertools.combinations_with_replacement(range(len(hyp) + 1), k - 1))
        assert cost == best, (hyp, refs, cost, best)


def segment_no_refs_is_an_error():
    try:
        sm.mwer_segment(['a'], [])
    except ValueError:
        pass
    else:
        raise AssertionError('no references was accepted')


# ---- delays from records, StreamLAAL -------------------------------------------------------------
RECS = [
    {'emit': 'En el', 'src_s': 1.0, 'compute_s': 0.5},
    {'emit': '', 'src_s': 1.5, 'compute_s': 0.9},        # a step that wrote nothing
    {'emit': 'principio', 'src_s': 2.0, 'compute_s': 1.2},
    {'emit': 'creó Dios.', 'src_s': 3.0, 'compute_s': 2.0},
    {'emit': 'Y la', 'src_s': 4.5, 'compute_s': 2.1},
    {'emit': 'tierra', 'src_s': 6.0, 'compute_s': 3.1},
    {'final': True, 'text': 'En el principio creó Dios. Y la tierra', 'src_s': 6.0,
     'compute_s': 3.2},
]
VERSES = [{'es': 'En el principio crió Dios.', 'start_s': 0.0, 'duration_s': 3.0},
          {'es': 'Y la tierra era', 'start_s': 3.5, 'duration_s': 2.5}]


def delays_from_records():
    words, d, ca = sm.emission_delays(RECS)
    assert words == 'En el principio creó Dios. Y la tierra'.split()
    assert d == [1.0, 1.0, 2.0, 3.0, 3.0, 4.5, 4.5, 6.0], d
    # increments: 0.5; 1.2 - 0.5 (the empty step's compute goes to the next word); 0.8; 0.1; 1.0
    want = [1.5, 1.5, 2.7, 3.8, 3.8, 4.6, 4.6, 7.0]
    assert all(abs(a - b) < 1e-9 for a, b in zip(ca, want)), ca


def stream_laal_by_hand():
    s = sm.stream_laal(RECS, VERSES)
    assert s['hyps'] == ['En el principio creó Dios.', 'Y la tierra'], s['hyps']
    assert s['align_cost'] == 2  # creó/crió, "era" missing
    # verse 1: |X| = 3 s, |Y| = 5 = |Y*|, rate 0.6; d = 1,1,2,3,.. tau 4:
    # (1 - 0) + (1 - .6) + (2 - 1.2) + (3 - 1.8) = 3.4 / 4 = 0.85
    close(s['laal'][0], 0.85)
    # CA: d = 1.5,1.5,2.7,3.8 -> tau 4 (3.8 >= 3): 1.5 + .9 + 1.5 + 2.0 = 5.9 / 4 = 1.475
    close(s['laal_ca'][0], 1.475)
    # verse 2 from 3.5 s: d = 1,1,2.5; |X| 2.5, |Y*| 4 -> rate .625; tau 3:
    # 1 + .375 + 1.25 = 2.625 / 3 = 0.875
    close(s['laal'][1], 0.875)
    # CA: 1.1,1.1,3.5 -> d_1 <= 2.5; 1.1 + .475 + 2.25 = 3.825 / 3 = 1.275
    close(s['laal_ca'][1], 1.275)
    m, skipped = sm.mean_scored(s['laal'] + [None])
    close(m, 0.8625)
    assert skipped == 1


def stream_laal_clamps_before_verse_start():
    # a word the alignment gives to verse 2 but written before verse 2's audio began counts 0
    recs = [{'emit': 'a b', 'src_s': 1.0, 'compute_s': 0.1}]
    verses = [{'es': 'a', 'start_s': 0.0, 'duration_s': 1.0},
              {'es': 'b', 'start_s': 2.0, 'duration_s': 1.0}]
    s = sm.stream_laal(recs, verses)
    assert s['hyps'] == ['a', 'b']
    close(s['laal'][1], 0.0)


# ---- translate_eval's helpers without an engine ------------------------------------------------
def pocketsphinx_parse():
    out = ('and the name\n<s> 0.000 0.100 1.0\nand(2) 0.110 0.300 0.2\nthe 0.31 0.4 1\n'
           '<sil> 0.41 0.6 1\nname 0.61 1.000 0.9\n</s> 1.01 1.2 1\n'
           'was\n<s> 2.000 2.100 1\n[NOISE] 2.1 2.2 1\nwas 2.2 2.5 1\n</s> 2.5 2.9 1\n')
    utts = te.parse_pocketsphinx(out)
    assert [[w for w, _ in u['words']] for u in utts] == [['and', 'the', 'name'], ['was']], utts
    assert [u['end_s'] for u in utts] == [1.2, 2.9]
    assert utts[0]['words'][2][1] == 1.0


def cascade_records():
    utts = [{'words': [('and', 1.0), ('name', 2.0)], 'end_s': 2.5},
            {'words': [('was', 4.0)], 'end_s': 4.4}]
    # a fake translator: title-cases, costs 0.1 s per word
    def tr(segs):
        return [s.title() for s in segs], 0.1 * sum(len(s.split()) for s in segs)
    recs = te.cascade_records(utts, tr, asr_rate=0.5, per_word=False)
    assert [r['emit'] for r in recs] == ['And Name', 'Was']
    assert [r['src_s'] for r in recs] == [2.5, 4.4]
    # compute: ASR 0.5 s per audio second up to each emission, plus the translator's share
    close(recs[0]['compute_s'], 0.5 * 2.5 + 0.2)
    close(recs[1]['compute_s'], 0.5 * 4.4 + 0.3)
    recs = te.cascade_records(utts, tr, asr_rate=0.5, per_word=True)
    assert [r['emit'] for r in recs] == ['and', 'name', 'was']  # first letter lower-cased
    assert [r['src_s'] for r in recs] == [1.0, 2.0, 4.0]
    close(recs[2]['compute_s'], 0.5 * 4.0 + 0.3)


def generate_summary_parse():
    err = ('rill generate: 44 prompt tokens in 3.900 s (11.3 tok/s), 14 generated in 1.403 s '
           '(10.0 tok/s), stopped: end of generation; cpu-avx512, 2 threads, exact attention\n')
    close(te.generate_compute_s(err), 5.303)
    try:
        te.generate_compute_s('nothing here')
    except ValueError:
        pass
    else:
        raise AssertionError('a missing summary was accepted')


def supports_audio():
    assert te.help_supports_audio('usage: rill translate [--json] (--audio FILE | --text FILE)')
    assert not te.help_supports_audio(
        'usage: rill translate [--json] --text FILE\n... Speech input (--audio) is not built yet.')


for name, fn in list(globals().items()):
    if callable(fn) and fn.__module__ == '__main__' and name not in ('check', 'close'):
        check(name, fn)
bad = [n for n, e in results if e]
print(f'{len(results) - len(bad)} passed, {len(bad)} failed')
sys.exit(1 if bad else 0)
