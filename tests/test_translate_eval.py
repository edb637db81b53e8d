#!/usr/bin/env python3
"""The CI size of bench/translate_eval.py (issue 22 item 4): the first 3 dev verses (Obadiah) as
one talk, text mode (wait-3) and retranslate on the tiny qwen2 model (random weights: the words
are noise, the figures are what is checked), the pocketsphinx + Apertium cascade on the
espeak-ng talk and Apertium on the text. Checks the talk tools/synth_talk.py writes (verse starts, durations and gaps
adding up to the WAV's length), every row's fields, its BLEU recomputed with sacreBLEU from the
hypotheses the program kept, the PNG figure, the audio mode's rows with a stand-in engine
whose answers are known (the real `--audio` is not in every tree) and its skip without it, and
that bad arguments are clear errors that write nothing.
tests/test_simul_metrics.py checks the metrics themselves on hand-made cases.

Usage: test_translate_eval.py RILL_BINARY SOURCE_DIR. Exits 77 (skip) without the tiny models,
sacreBLEU, matplotlib, PyAV, espeak-ng, pocketsphinx_continuous or apertium.
Prints 'N passed, N failed' last.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import wave

RILL, SRC = sys.argv[1], sys.argv[2]
PROG = os.path.join(SRC, 'bench', 'translate_eval.py')
QWEN = os.path.join(SRC, 'tests', 'data', 'models', 'rill-tiny-qwen2-F32.gguf')
results = []

missing = [m for m in ('sacrebleu', 'matplotlib', 'av', 'numpy')
           if importlib.util.find_spec(m) is None]
missing += [c for c in ('espeak-ng', 'pocketsphinx_continuous', 'apertium')
            if shutil.which(c) is None]
if not os.path.exists(QWEN):
    missing.append(QWEN)
if missing:
    print(f'test_translate_eval: missing {", ".join(missing)}; skipped')
    sys.exit(77)


def check(name, fn):
    try:
        fn()
        results.append((name, None))
        print(f'ok   {name}')
    except Exception as e:  # noqa: BLE001 - report every failure and go on
        results.append((name, e))
        print(f'FAIL {name}: {type(e).__name__}: {e}')


tmp = tempfile.mkdtemp(prefix='rill-test-translate-eval-')
env = dict(os.environ, RILL_CACHE=os.path.join(tmp, 'cache'))
ARGS = ['--rill', RILL, '--model', QWEN, '--split', 'dev', '--verses', '3', '--threads', '1',
        '--translate-args', '--ctx 256 --window 128 --max-reply 24',
        '--generate-args', '-c 256 -n 24', '--instruction', 'Translate into Spanish.']


def run(*extra, ok=(0,)):
    p = subprocess.run([sys.executable, PROG, *ARGS, *extra], capture_output=True, text=True,
                       env=env, timeout=500)
    if p.returncode not in ok:
        raise AssertionError(f'translate_eval.py {" ".join(extra)}: exit {p.returncode}\n'
                             f'{p.stdout}\n{p.stderr}')
    return p


keep, rows_path, png = (os.path.join(tmp, n) for n in ('hyps', 'rows.jsonl', 'fig.png'))
main = run('--modes', 'text,retranslate,cascade,apertium', '--policy', 'wait-3', '--keep', keep,
           '--json-out', rows_path, '--plot', png)
rows = [json.loads(line) for line in open(rows_path, encoding='utf-8')]
talks = json.load(open(os.path.join(env['RILL_CACHE'], 'bench', 'talks-dev-3', 'talks.json'),
                       encoding='utf-8'))
refs = [v['es'] for t in talks['talks'] for v in t['verses']]


def the_talk():
    assert talks['split'] == 'dev' and talks['voice'] == 'en-us' and talks['wpm'] == 160
    assert len(talks['talks']) == 1 and talks['talks'][0]['book'] == 'Obad'
    t = talks['talks'][0]
    assert [v['ref'] for v in t['verses']] == ['Obad 1:1', 'Obad 1:2', 'Obad 1:3']
    at = 0.0
    for v in t['verses']:
        assert abs(v['start_s'] - at) < 1e-3, (v['start_s'], at)
        assert v['duration_s'] > 1.0
        at = v['start_s'] + v['duration_s'] + talks['gap_s']
    with wave.open(t['wav'], 'rb') as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1
        n = w.getnframes() / 16000
    assert abs(n - t['audio_s']) < 1e-3 and abs(n - at) < 1e-3, (n, t['audio_s'], at)
    assert refs[0].startswith('VISIÓN de Abdías'), refs[0]


def the_rows():
    assert [r['system'] for r in rows] == [
        'rill text wait-3', 'retranslate from scratch', 'pocketsphinx+apertium utterance',
        'pocketsphinx+apertium per-word', 'apertium on the text'], [r['system'] for r in rows]
    printed = [json.loads(line) for line in main.stdout.splitlines() if line.startswith('{')]
    assert printed == rows
    for r in rows:
        assert r['verses'] == 3 and r['talks'] == 1 and r['split'] == 'dev'
        assert r['bleu_signature'].startswith('nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|')
        assert r['compute_s'] > 0
        if r['mode'] in ('text', 'retranslate', 'text-cascade'):
            assert r['laal_words'] is None or 0 < r['laal_words'] <= 40, r
        else:
            # LAAL may be negative (words written ahead of the rate |X| / max(|Y|, |Y*|), or
            # given by the alignment to a verse whose audio had not begun: delay 0)
            for k in ('stream_laal_s', 'stream_laal_ca_s'):
                assert isinstance(r[k], float) and -60 < r[k] < 60, r
            assert r['compute_s_per_audio_s'] > 0, r
    # the retranslate and Apertium rows write each verse at its end: LAAL = the verse's length
    want = sum(len(v['en'].split()) for t in talks['talks'] for v in t['verses']) / 3
    for r in (rows[1], rows[4]):
        if r['verses_without_output'] == 0:
            assert abs(r['laal_words'] - want) < 1e-3, (r['system'], r['laal_words'], want)
    assert rows[4]['verses_without_output'] == 0 and rows[4]['bleu'] > 1, rows[4]  # 3.4 here


def bleu_recomputed():
    import sacrebleu
    for r in rows:
        path = os.path.join(keep, r['system'].replace(' ', '_') + '.txt')
        hyps = open(path, encoding='utf-8').read().split('\n')[:-1]
        assert len(hyps) == 3, (path, hyps)
        got = round(sacrebleu.corpus_bleu(hyps, [refs], tokenize='13a').score, 2)
        assert got == r['bleu'], (r['system'], got, r['bleu'])
    # the cascade recognised English and Apertium wrote Spanish: not empty, and it shares words
    utt = open(os.path.join(keep, 'pocketsphinx+apertium_utterance.txt'), encoding='utf-8').read()
    assert len(utt.split()) > 20, utt


def the_figure():
    with open(png, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    assert os.path.getsize(png) > 10000


def bad_arguments():
    for extra, text in ((['--modes', 'text,speech'], 'unknown mode "speech"'),
                        (['--verses', '0'], '--verses must be at least 1'),
                        (['--model', os.path.join(tmp, 'none.gguf')], 'no such model'),
                        (['--plot-from', rows_path], '--plot-from needs --plot'),
                        (['--plot', os.path.join(tmp, 'bad.png'), '--plot-from',
                          os.path.join(tmp, 'none.jsonl')], 'none.jsonl')):
        out = os.path.join(tmp, 'bad.jsonl')
        p = run(*extra, '--json-out', out, ok=(1,))
        assert text in p.stderr, p.stderr
        assert not os.path.exists(out)
        assert not os.path.exists(os.path.join(tmp, 'bad.png'))


FAKE = r"""#!PYTHON
# A stand-in for `rill translate --audio` as INTERFACES.md gives it: writes each verse's
# reference 0.01 s after the verse's end (src_s), 0.5 s of compute per emission.
import json, os, sys
args = sys.argv[1:]
if args[:2] == ['translate', '--help']:
    print('usage: rill translate [--model FILE] [--json] (--audio FILE | --text FILE)')
    sys.exit(0)
wav = args[args.index('--audio') + 1]
talks = json.load(open(os.path.join(os.path.dirname(wav), 'talks.json'), encoding='utf-8'))
talk = next(t for t in talks['talks'] if t['wav'] == wav)
c = 0.0
for v in talk['verses']:
    c += 0.5
    print(json.dumps({'emit': v['es'], 'src_s': v['start_s'] + v['duration_s'] + 0.01,
                      'src_words': 0, 'compute_s': c}))
print(json.dumps({'final': True, 'text': '', 'src_s': talk['audio_s'], 'compute_s': c}))
"""


def audio_mode_with_a_fake_engine():
    # the audio rows' plumbing (the --help check, the command, the records, StreamLAAL) with a
    # fake engine whose answers are known: every verse's reference just after its end -> BLEU
    # 100, each verse's LAAL = d_1 = its duration + 0.01 (d_1 > |X|), computation-aware + 0.5
    fake = os.path.join(tmp, 'fake-rill')
    with open(fake, 'w', encoding='utf-8') as f:
        f.write(FAKE.replace('PYTHON', sys.executable, 1))
    os.chmod(fake, 0o755)
    out = os.path.join(tmp, 'audio.jsonl')
    p = subprocess.run([sys.executable, PROG, *ARGS, '--rill', fake, '--modes', 'audio',
                        '--policy', 'sentence', '--json-out', out], capture_output=True,
                       text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    (r,) = [json.loads(line) for line in open(out, encoding='utf-8')]
    assert r['system'] == 'rill audio sentence' and r['mode'] == 'audio', r
    assert r['bleu'] == 100.0, r
    durs = [v['duration_s'] for t in talks['talks'] for v in t['verses']]
    assert abs(r['stream_laal_s'] - (sum(durs) / 3 + 0.01)) < 2e-3, (r, durs)
    assert abs(r['stream_laal_ca_s'] - (sum(durs) / 3 + 0.51)) < 2e-3, (r, durs)
    assert abs(r['compute_s'] - 1.5) < 1e-9 and r['verses_without_output'] == 0, r


def audio_skipped_without_the_option():
    # the real binary of this tree: skipped with a note when its --help lacks --audio
    h = subprocess.run([RILL, 'translate', '--help'], capture_output=True, text=True)
    if '--audio FILE' in h.stdout:
        return  # the option landed: nothing to skip
    p = run('--modes', 'audio', '--policy', 'sentence')
    assert 'the audio mode is skipped' in p.stderr, p.stderr
    assert not [line for line in p.stdout.splitlines() if line.startswith('{')], p.stdout


check('the_talk', the_talk)
check('the_rows', the_rows)
check('bleu_recomputed', bleu_recomputed)
check('the_figure', the_figure)
check('bad_arguments', bad_arguments)
check('audio_mode_with_a_fake_engine', audio_mode_with_a_fake_engine)
check('audio_skipped_without_the_option', audio_skipped_without_the_option)
shutil.rmtree(tmp, ignore_errors=True)
bad = [n for n, e in results if e]
print(f'{len(results) - len(bad)} passed, {len(bad)} failed')
sys.exit(1 if bad else 0)
