#!/usr/bin/env python3
"""The CI size of bench/transcribe_eval.py (issue 17 item 5): `--small --check` on the LibriVox
clips 0880 and 0930 with tiny.en. Checks what the program writes, recomputed here from its own
parts: the JSON's fields and types; rill's offline and streamed transcripts within one word of
faster-whisper's recorded ones (tests/data/ref/whisper/transcripts.tsv) on each clip; the WER
figures against the clips' human transcription; the commit times (one per word, never going back,
within the audio) and the delays made of them against the recorded word ends
(tests/data/ref/whisper/word_ends.tsv); the Markdown table. Then that --check fails on a clip
whose reference is two words off, and that bad arguments are clear errors.
test_transcribe_cli.py checks `rill transcribe` itself; this checks the evaluation program.

Usage: test_transcribe_eval.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without
models/whisper-tiny.en.gguf, the LibriVox clips or jiwer. Prints 'N passed, N failed' last.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import wave

RILL, SRC = sys.argv[1], sys.argv[2]
PROG = os.path.join(SRC, 'bench', 'transcribe_eval.py')
REF = os.path.join(SRC, 'tests', 'data', 'ref', 'whisper')
LV = '/usr/share/pocketsphinx/test/data/librivox'
CLIPS = {'lv0880': 'sense_and_sensibility_01_austen_64kb-0880',
         'lv0930': 'sense_and_sensibility_01_austen_64kb-0930'}
results = []


def words(text):
    return re.sub(r"[^a-z0-9']+", ' ', text.lower()).split()


def edits(ref, hyp):
    import jiwer
    o = jiwer.process_words(' '.join(words(ref)), ' '.join(words(hyp)))
    return o.substitutions + o.deletions + o.insertions


def run(out, *extra, ok=(0,)):
    p = subprocess.run([sys.executable, PROG, '--rill', RILL, '--small', '--check', '--out', out,
                        *extra], capture_output=True, text=True, timeout=400)
    if p.returncode not in ok:
        raise AssertionError(f'transcribe_eval.py {" ".join(extra)}: exit {p.returncode}\n'
                             f'{p.stdout}\n{p.stderr}')
    return p


def recorded():
    texts = {}
    with open(os.path.join(REF, 'transcripts.tsv'), encoding='utf-8') as f:
        for line in f:
            c = line.rstrip('\n').split('\t')
            if c[0] == 'whisper-tiny.en' and c[1] in CLIPS:
                texts[c[1]] = bytes.fromhex(c[3]).decode()
    ends = {}
    with open(os.path.join(REF, 'word_ends.tsv'), encoding='utf-8') as f:
        for line in f:
            c = line.rstrip('\n').split('\t')
            if c[0] == 'whisper-tiny.en':
                ends.setdefault(c[1], []).append((c[2], float(c[3])))
    return texts, ends


def human():
    refs = {}
    with open(os.path.join(LV, 'transcription'), encoding='utf-8') as f:
        for line in f:
            for name, stem in CLIPS.items():
                if f'({stem})' in line:
                    refs[name] = line.split('(')[0].replace('<s>', ' ').replace('</s>', ' ')
    return refs


def duration(name):
    with wave.open(os.path.join(LV, CLIPS[name] + '.wav')) as w:
        return w.getnframes() / w.getframerate()


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check(name, fn):
    try:
        fn()
        results.append((name, None))
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        results.append((name, e))


def t_small_run():
    with tempfile.TemporaryDirectory() as out:
        p = run(out)
        doc = json.load(open(os.path.join(out, 'transcribe_eval.json'), encoding='utf-8'))
        md = open(os.path.join(out, 'transcribe_eval.md'), encoding='utf-8').read()
    assert p.stdout.strip() == md.strip(), 'stdout is not the Markdown written'
    for k in ('date', 'machine', 'threads', 'command', 'versions', 'summaries', 'clips'):
        assert k in doc, k
    assert doc['threads'] == 2 and doc['versions']['rill'], doc
    texts, ends = recorded()
    refs = human()
    ps = shutil.which('pocketsphinx_continuous') is not None
    assert sorted(c['clip'] for c in doc['clips']) == sorted(CLIPS), doc['clips']
    for c in doc['clips']:
        n = c['clip']
        assert c['model'] == 'tiny.en' and c['set'] == 'librivox', c
        assert words(c['reference']) == words(refs[n]), (c['reference'], refs[n])
        assert c['fw_offline']['text'] == texts[n], c['fw_offline']
        assert [tuple(x) for x in c['fw_word_ends']] == ends[n], c['fw_word_ends']
        for e in ('rill_offline', 'rill_streaming'):
            r = c[e]
            e_fw = edits(texts[n], r['text'])
            print(f'{n} {e}: {r["text"]!r}, {e_fw} word edits from faster-whisper')
            assert e_fw <= 1, (n, e, r['text'], texts[n])
            assert c['edits_vs_fw'][e] == e_fw, (c['edits_vs_fw'], e, e_fw)
            assert abs(r['audio_s'] - duration(n)) < 0.02, (r['audio_s'], duration(n))
            assert finite(r['wall_s']) and r['wall_s'] > 0, r
        st = c['rill_streaming']
        at = st['commit_s']
        assert len(at) == len(words(st['text'])), (at, st['text'])
        assert all(finite(a) and 0 < a <= st['audio_s'] + 1e-6 for a in at), at
        assert at == sorted(at), f'commit times go back: {at}'
        if words(st['text']) == [w for w, _ in ends[n]]:  # every word pairs with its own end
            want = [round(a - e, 3) for a, (_, e) in zip(at, ends[n])]
            assert st['delays_s'] == want, (st['delays_s'], want)
        else:  # one word off: all but a word or two pair, each delay a commit less an end
            assert len(st['delays_s']) >= len(ends[n]) - 2, (st['delays_s'], ends[n])
            pairs = {round(a - e, 3) for a in at for _, e in ends[n]}
            assert set(st['delays_s']) <= pairs, (st['delays_s'], pairs)
        if ps:
            assert isinstance(c['pocketsphinx']['text'], str) and c['pocketsphinx']['text'], c
            assert 0 < c['pocketsphinx']['decode_s'] <= c['pocketsphinx']['wall_s'], c
    [s] = doc['summaries']
    rows = doc['clips']
    assert s['model'] == 'tiny.en' and s['set'] == 'librivox' and s['clips'] == 2, s
    assert abs(s['audio_s'] - sum(duration(n) for n in CLIPS)) < 0.04, s
    assert s['reference_words'] == sum(len(words(refs[n])) for n in CLIPS), s
    assert finite(s['load_1min']['min']) and s['load_1min']['min'] <= s['load_1min']['max'], s
    engines = ['rill_offline', 'rill_streaming', 'fw_offline'] + (['pocketsphinx'] if ps else [])
    assert sorted(s['wer']) == sorted(engines), s['wer']
    for e in engines:
        want = sum(edits(c['reference'], c[e]['text']) for c in rows) / s['reference_words']
        assert abs(s['wer'][e] - want) < 1e-3, (e, s['wer'][e], want)
    for e in ('rill_offline', 'rill_streaming'):
        want = sum(c[e]['wall_s'] for c in rows) / s['audio_s']
        assert abs(s['rtf'][e] - want) < 1e-3, (e, s['rtf'][e], want)
    if ps:
        assert 0 < s['rtf']['pocketsphinx_decode'] <= s['rtf']['pocketsphinx'], s['rtf']
    d = s['delay_s']['rill_streaming']
    every = sorted(x for c in rows for x in c['rill_streaming']['delays_s'])
    assert d['words'] == len(every) > 0, (d, every)
    assert every[0] <= d['median'] <= d['p90'] <= every[-1], (d, every)
    assert s['max_edits_vs_fw'] == {e: max(c['edits_vs_fw'][e] for c in rows)
                                    for e in ('rill_offline', 'rill_streaming')}, s
    assert '**tiny.en, librivox** (2 clips' in md, md
    assert '| engine | WER % | rtf | commit delay median s | p90 s |' in md, md
    for label in ('rill --offline', 'rill streaming', 'faster-whisper'):
        assert re.search(rf'^\| {label} \| [0-9.]+ \|', md, re.M), (label, md)
    assert '- transcripts within one word of faster-whisper per clip: met' in md, md
    assert 'offline rtf no worse than faster-whisper: not measured' in md, md


def t_check_fails_two_words_off():
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(os.path.join(REF, 'word_ends.tsv'), d)
        with open(os.path.join(REF, 'transcripts.tsv'), encoding='utf-8') as f, \
                open(os.path.join(d, 'transcripts.tsv'), 'w', encoding='utf-8') as g:
            for line in f:
                c = line.rstrip('\n').split('\t')
                if c[0] == 'whisper-tiny.en' and c[1] == 'lv0930':
                    text = bytes.fromhex(c[3]).decode().replace('He might', 'She could')
                    c[3] = text.encode().hex()
                g.write('\t'.join(c) + '\n')
        p = run(os.path.join(d, 'out'), '--ref-dir', d, ok=(1,))
        assert re.search(r"CHECK FAILED: tiny\.en lv0930: .*'rill_offline': 2", p.stdout), p.stdout
        assert 'lv0880' not in p.stdout.split('CHECK FAILED', 1)[1], p.stdout


def t_bad_arguments():
    with tempfile.TemporaryDirectory() as d:
        for args, msg in ((['--models', 'large'], "unknown model 'large'"),
                          (['--models', 'tiny.en', '--sets', 'news'], "unknown set 'news'"),
                          (['--base-gguf', '/nonexistent.gguf', '--models', 'base'],
                           '/nonexistent.gguf is missing')):
            p = subprocess.run([sys.executable, PROG, '--rill', RILL, '--out', d, *args],
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 1 and msg in p.stderr, (args, p.returncode, p.stderr)
        assert not os.listdir(d), os.listdir(d)  # nothing written


def main():
    if not os.path.exists(os.path.join(SRC, 'models', 'whisper-tiny.en.gguf')):
        print('SKIP: models/whisper-tiny.en.gguf is missing: run scripts/setup.sh')
        return 77
    if not all(os.path.exists(os.path.join(LV, s + '.wav')) for s in CLIPS.values()):
        print(f'SKIP: the LibriVox clips are missing from {LV}: run scripts/setup.sh')
        return 77
    try:
        import jiwer  # noqa: F401
    except ImportError:
        print('SKIP: jiwer is missing: run scripts/setup.sh')
        return 77
    for name, fn in list(globals().items()):
        if name.startswith('t_') and callable(fn):
            check(name, fn)
    failed = [(n, e) for n, e in results if e is not None]
    for n, e in failed:
        print(f'FAIL {n}: {e!r}')
    print(f'{len(results) - len(failed)} passed, {len(failed)} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
