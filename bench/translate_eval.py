#!/usr/bin/env python3
"""Quality and latency of simultaneous translation, rill against the cascade a user has today.

    bench/translate_eval.py [--rill build/cli/rill] [--model FILE] [--split test] [--verses N]
                            [--modes text,audio,cascade,apertium,retranslate] [--policy ...]
                            [--threads 2] [--la-chunk N] [--instruction TEXT]
                            [--translate-args STR] [--generate-args STR]
                            [--json-out FILE] [--keep DIR] [--plot FILE] [--title TEXT]
    bench/translate_eval.py --plot FILE --plot-from ROWS.jsonl [--plot-from ...] [--title TEXT]

Not a test (tests/test_simul_metrics.py checks its parts). Issue 22 item 4.

Data. The split's KJV verses with their RV1909 partners (en-es.kjv-rv1909.align.tsv, canonical
order), one talk per book; --verses N keeps the first N (the quick loop: 60, the first 60 verses
of Ruth). The speech of a talk is tools/synth_talk.py's (espeak-ng en-us at 160 wpm, verses
joined with 0.3 s gaps, each verse's start and duration recorded), cached outside the checkout.
Report on --split test (the default); tune on --split dev only.

Modes (--modes, comma-separated; default: all that can run here):
  text         `rill translate --json --text` per talk (one verse per line), every --policy
               (default local-agreement, wait-3, sentence).
  audio        `rill translate --json --audio BOOK.wav` per talk, every --policy; run only when
               `rill translate --help` offers --audio (it is skipped, and says so, otherwise).
  cascade      pocketsphinx (pocketsphinx_continuous, Debian's en-us models) on the talk, then
               Apertium eng-spa (`apertium -u eng-spa`): "utterance" translates each pocketsphinx
               utterance when it ends (the decoder's sentence-like segments, cut at pauses),
               "per-word" each recognized word alone at its end time (optimistic: the CLI gives
               word times only at the utterance's end, a live decoder would have to wait for
               them to settle). Compute: pocketsphinx's CPU time over the talk, charged in
               proportion to the audio read before each emission, plus Apertium's CPU time
               shared over the words it translated.
  apertium     Apertium alone on the verses as text, each written at its verse's end: the
               cascade's translation with a perfect recognizer (a text row).
  retranslate  every verse re-translated from scratch: one stateless `rill generate --chat`
               per verse (the same instruction, greedy, no session: the instruction and no
               context re-encoded each time), written at the verse's end; its compute (prompt
               plus generation seconds from the summary line) is what the session saves.

Metrics (bench/simul_metrics.py has the definitions, the formulas and the alignment):
  BLEU          sacreBLEU corpus BLEU, 13a tokenizer, default smoothing, against RV1909.
  text rows     per-verse hypotheses: an emission belongs to the verse whose source words it
                had read up to; sentence-level LAAL in source words (delays: the verse's words
                read when each target word was written).
  speech rows   (audio, cascade) the talk's single hypothesis re-segmented to the verses by
                minimum-WER alignment; StreamLAAL in seconds from each verse's audio start, and
                its computation-aware variant (each word's delay plus the compute spent since
                the previous word was written).
  compute       engine seconds over all talks (the last record's compute_s, summed).
Latency is computed from the emission records, never from wall time. Prints a table and one JSON
line per row; --plot writes the quality-latency figure (PNG, matplotlib), from this run's rows or
(--plot-from) from rows that --json-out saved, so rows of runs of different sizes share a figure.

Needs scripts/setup.sh --translate (sacreBLEU, matplotlib, the models, pocketsphinx, Apertium).
The full report (the test split: 4 talks, 261 verses, 43 min of speech; hours on 2 cores):
    .venv/bin/python bench/translate_eval.py --json-out build/translate_eval.jsonl \\
        --plot docs/translation_quality_latency.png          # the 1.5B, every mode
    .venv/bin/python bench/translate_eval.py --modes text,audio,retranslate \\
        --model ~/.cache/rill/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\
        --json-out build/translate_eval.jsonl                # the 0.5B beside it
The quick loop: the same with --verses 60.
"""
import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, 'tools'))
import simul_metrics as sm  # noqa: E402

INSTRUCTION = ('You are a simultaneous interpreter. Translate each English message into Spanish. '
               'Reply with the Spanish translation only.')  # RILL_TRANSLATE_INSTRUCTION
APERTIUM_MODE = 'eng-spa'
PS_FILLERS = re.compile(r'^(<s>|</s>|<sil>|\[.*\]|\+\+.*\+\+)$')


def default_model():
    base = os.environ.get('RILL_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'rill')
    return os.path.join(base, 'models', 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf')


def fail(msg):
    sys.exit(f'translate_eval: {msg}')


# ---- the engine --------------------------------------------------------------------------------
def help_supports_audio(help_text):
    """Whether `rill translate --help` offers --audio (in its usage line or its options)."""
    return bool(re.search(r'^usage:.*--audio', help_text, re.M) or
                re.search(r'^\s+--audio\b', help_text, re.M))


def rill_json(cmd):
    """Runs a `rill translate --json` command; returns (records, wall seconds)."""
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        fail(f'{" ".join(cmd)} failed ({p.returncode}):\n{p.stderr}')
    try:
        recs = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        fail(f'{" ".join(cmd)}: a line is not JSON ({e})')
    if not recs or not recs[-1].get('final'):
        fail(f'{" ".join(cmd)}: no final line')
    return recs, wall


def generate_compute_s(stderr):
    """Prompt plus generation seconds from `rill generate`'s summary line."""
    m = re.search(r'(\d+) prompt tokens in ([\d.]+) s.*?(\d+) generated in ([\d.]+) s', stderr)
    if not m:
        raise ValueError(f'no rill generate summary in: {stderr.strip()[-300:]}')
    return float(m.group(2)) + float(m.group(4))


def retranslate_records(rill, model, threads, verses, extra=(), instruction=INSTRUCTION):
    """One stateless `rill generate --chat` per verse; records in `rill translate --text`'s form
    (src_words: the talk's source words read, i.e. the verse's end; compute_s: cumulative)."""
    recs, read, compute = [], 0, 0.0
    for v in verses:
        cmd = [rill, 'generate', '--model', model, '--chat', '--system', instruction,
               '--prompt', v['en'], '--temp', '0', '-n', '256', '-t', str(threads), *extra]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            fail(f'{" ".join(cmd[:3])} ... failed ({p.returncode}):\n{p.stderr}')
        compute += generate_compute_s(p.stderr)
        read += len(v['en'].split())
        lines = [x.strip() for x in p.stdout.strip().split('\n') if x.strip()]
        recs.append({'emit': lines[0] if lines else '', 'src_words': read,
                     'compute_s': round(compute, 3)})
    recs.append({'final': True, 'text': ' '.join(r['emit'] for r in recs),
                 'compute_s': round(compute, 3)})
    return recs


# ---- the cascade -------------------------------------------------------------------------------
def parse_pocketsphinx(out):
    """pocketsphinx_continuous -time yes output -> [{"words": [(word, end_s)], "end_s"}]: a line
    per utterance (its text), then one line per segment: WORD START END PROB (seconds in the
    file). Fillers (<s>, </s>, <sil>, [NOISE], ++...++) are dropped, "word(2)" is "word"."""
    utts = []
    for line in out.splitlines():
        f = line.split()
        seg = len(f) == 4
        if seg:
            try:
                end = float(f[2])
                float(f[1])
            except ValueError:
                seg = False
        if not seg:
            utts.append({'words': [], 'end_s': None})
            continue
        if not utts:
            utts.append({'words': [], 'end_s': None})
        u = utts[-1]
        u['end_s'] = end
        if not PS_FILLERS.match(f[0]):
            u['words'].append((re.sub(r'\(\d+\)$', '', f[0]), end))
    return [u for u in utts if u['words']]


def pocketsphinx(wav):
    """Runs pocketsphinx_continuous on wav once (cached beside it); returns (utterances, CPU s)."""
    cache = wav + '.pocketsphinx.json'
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(wav):
        with open(cache, encoding='utf-8') as f:
            c = json.load(f)
        return parse_pocketsphinx(c['stdout']), c['cpu_s']
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(['pocketsphinx_continuous', '-infile', wav, '-time', 'yes',
                        '-logfn', '/dev/null'], capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        fail(f'pocketsphinx_continuous -infile {wav}: exit {p.returncode}\n{p.stderr}')
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    with open(cache + '.tmp', 'w', encoding='utf-8') as f:
        json.dump({'stdout': p.stdout, 'cpu_s': cpu}, f)
    os.replace(cache + '.tmp', cache)
    return parse_pocketsphinx(p.stdout), cpu


def apertium(segments):
    """Translates each segment on its own with one `apertium -u eng-spa` run (a line holding "."
    between segments ends a sentence, so no transfer rule joins two); returns (translations,
    CPU seconds of the run)."""
    if not segments:
        return [], 0.0
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(['apertium', '-u', APERTIUM_MODE], capture_output=True, text=True,
                       input=''.join(s + '\n.\n' for s in segments))
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        fail(f'apertium -u {APERTIUM_MODE}: exit {p.returncode}\n{p.stderr}')
    parts = p.stdout.split('\n.\n')
    if len(parts) != len(segments) + 1 or parts[-1].strip():
        fail(f'apertium: {len(segments)} segments in, {len(parts) - 1} out')
    out = [re.sub(r'(?<!\S)[#@*](?=\S)', '', x).replace('\n', ' ').strip() for x in parts[:-1]]
    return out, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def cascade_records(utts, translate, asr_rate, per_word):
    """Emission records {"emit", "src_s", "compute_s"} of the cascade on one talk: an emission
    per utterance at its end, or (per_word) per word at its end, translated by
    translate(segments) -> (texts, seconds). compute_s: asr_rate x the audio read so far plus
    the translator's seconds, shared over the segments by their word counts."""
    if per_word:
        segs = [(w, t) for u in utts for w, t in u['words']]
    else:
        segs = [(' '.join(w for w, _ in u['words']), u['end_s']) for u in utts]
    texts, cost = translate([s for s, _ in segs])
    n_words = sum(len(s.split()) for s, _ in segs) or 1
    recs, spent = [], 0.0
    for (src, t), out in zip(segs, texts):
        spent += cost * len(src.split()) / n_words
        if per_word and out:
            out = out[0].lower() + out[1:]  # the separator made every word a sentence start
        recs.append({'emit': out, 'src_s': t, 'compute_s': round(asr_rate * t + spent, 4)})
    return recs


# ---- scoring -----------------------------------------------------------------------------------
def score_text(verses, recs):
    """Per-verse hypotheses and sentence-level LAAL (source words) of one text-mode talk."""
    bounds, at = [], 0
    for v in verses:
        n = len(v['en'].split())
        bounds.append((at, at + n))
        at += n
    words = [[] for _ in verses]
    delays = [[] for _ in verses]
    k = 0
    for r in recs:
        if 'emit' not in r:
            continue
        while k < len(verses) - 1 and r['src_words'] > bounds[k][1]:
            k += 1
        ws = r['emit'].split()
        words[k] += ws
        delays[k] += [r['src_words'] - bounds[k][0]] * len(ws)
    lags = [sm.laal(d, b - a, len(v['es'].split()))
            for d, (a, b), v in zip(delays, bounds, verses)]
    return [' '.join(w) for w in words], lags, at


def bleu(hyps, refs):
    import sacrebleu
    metric = sacrebleu.BLEU(tokenize='13a')
    return round(metric.corpus_score(hyps, [refs]).score, 2), str(metric.get_signature())


def finish_row(row, hyps, refs, lags, lags_ca=None):
    row['bleu'], row['bleu_signature'] = bleu(hyps, refs)
    lag, skipped = sm.mean_scored(lags)
    row['verses_without_output'] = skipped
    if lags_ca is None:
        row['laal_words'] = round(lag, 3) if lag is not None else None
    else:
        row['stream_laal_s'] = round(lag, 3) if lag is not None else None
        lag_ca, _ = sm.mean_scored(lags_ca)
        row['stream_laal_ca_s'] = round(lag_ca, 3) if lag_ca is not None else None
    return row


# ---- the figure --------------------------------------------------------------------------------
def plot(rows, path, title):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    speech = [r for r in rows if r['mode'] in ('audio', 'cascade')]
    text = [r for r in rows if r['mode'] in ('text', 'retranslate', 'text-cascade')]
    panels = [p for p in (('speech', speech), ('text', text)) if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.4), squeeze=False)
    for ax, (kind, rs) in zip(axes[0], panels):
        sizes = len({r['verses'] for r in rs}) > 1
        for r in rs:
            label = r['system'] + (f' ({r["verses"]} verses)' if sizes else '')
            if kind == 'speech':
                x, x_ca = r.get('stream_laal_s'), r.get('stream_laal_ca_s')
                if x is None:
                    continue
                line, = ax.plot([x], [r['bleu']], 'o', mfc='none', ms=8)
                ax.plot([x_ca], [r['bleu']], 'o', color=line.get_color(), ms=8, label=label)
                ax.plot([x, x_ca], [r['bleu']] * 2, '-', color=line.get_color(), lw=1)
            else:
                if r.get('laal_words') is None:
                    continue
                ax.plot([r['laal_words']], [r['bleu']], 'o', ms=8, label=label)
        if kind == 'speech':
            ax.set_xlabel('StreamLAAL (s): hollow ideal, filled computation-aware')
            ax.set_title('speech in (espeak-ng talk)')
        else:
            ax.set_xlabel('LAAL (source words)')
            ax.set_title('text in (verses as text)')
        ax.set_ylabel('BLEU (sacreBLEU 13a, RV1909)')
        xs = [v for r in rs for v in (r.get('stream_laal_s'), r.get('stream_laal_ca_s'),
                                      r.get('laal_words')) if v is not None]
        ax.set_xlim(min([0.0] + xs) * 1.1, max(xs + [1.0]) * 1.12)
        ax.set_ylim(0, max([r['bleu'] for r in rs] + [1.0]) * 1.2)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc='upper center', bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main --------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--rill', default=os.path.join(ROOT, 'build', 'cli', 'rill'))
    ap.add_argument('--model', default=default_model())
    ap.add_argument('--split', default='test', choices=['dev', 'test'])
    ap.add_argument('--verses', type=int, help='the first N verses only (quick loop: 60)')
    ap.add_argument('--modes', help='comma-separated: text, audio, cascade, apertium, retranslate '
                    '(default: all; audio only when rill translate offers --audio)')
    ap.add_argument('--policy', action='append', help='repeatable; default: local-agreement, '
                    'wait-3, sentence')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--la-chunk', type=int, default=None)
    ap.add_argument('--instruction', default=INSTRUCTION, help='the system message, for rill '
                    'translate and the retranslate rows (default: rill translate\'s own)')
    ap.add_argument('--translate-args', default='', help='more options for rill translate '
                    '(one string, e.g. "--window 512")')
    ap.add_argument('--generate-args', default='', help='more options for rill generate '
                    '(retranslate)')
    ap.add_argument('--json-out', help='append the JSON lines to this file')
    ap.add_argument('--keep', help='write each row\'s hypotheses to DIR/ROW.txt')
    ap.add_argument('--plot', help='write the quality-latency figure (PNG) here')
    ap.add_argument('--plot-from', action='append', metavar='JSONL',
                    help='repeatable: only draw --plot from rows written by --json-out (runs '
                    'nothing)')
    ap.add_argument('--title', help='the figure\'s title (default: the run\'s split, size, '
                    'model and date)')
    a = ap.parse_args()
    if a.plot_from:
        if not a.plot:
            fail('--plot-from needs --plot')
        rows = []
        for path in a.plot_from:
            try:
                with open(path, encoding='utf-8') as f:
                    rows += [json.loads(line) for line in f if line.strip()]
            except (OSError, json.JSONDecodeError) as e:
                fail(f'{path}: {e}')
        plot(rows, a.plot, a.title or f'{len(rows)} rows from {", ".join(a.plot_from)}')
        return
    known = ['text', 'audio', 'cascade', 'apertium', 'retranslate']
    modes = a.modes.split(',') if a.modes else known
    for m in modes:
        if m not in known:
            fail(f'unknown mode "{m}" ({", ".join(known)})')
    if a.verses is not None and a.verses < 1:
        fail('--verses must be at least 1')
    engine = [m for m in modes if m in ('text', 'audio', 'retranslate')]
    if engine:
        if not os.access(a.rill, os.X_OK):
            fail(f'{a.rill} is not an executable (build it, or --rill)')
        if not os.path.exists(a.model):
            fail(f'{a.model}: no such model (tools/fetch_model.py, or --model)')
    if 'audio' in modes:
        h = subprocess.run([a.rill, 'translate', '--help'], capture_output=True, text=True)
        if not help_supports_audio(h.stdout + h.stderr):
            print('translate_eval: this rill translate has no --audio; the audio mode is skipped',
                  file=sys.stderr)
            modes.remove('audio')
    import synth_talk
    manifest = synth_talk.synthesize(a.split, a.verses)
    talks = manifest['talks']
    refs = [v['es'] for t in talks for v in t['verses']]
    policies = a.policy or ['local-agreement', 'wait-3', 'sentence']
    extra = (['--la-chunk', str(a.la_chunk)] if a.la_chunk else []) + \
        shlex.split(a.translate_args) + ['--instruction', a.instruction]
    base = {'split': a.split, 'verses': len(refs), 'talks': len(talks), 'threads': a.threads}
    model = os.path.basename(a.model)
    rows = []

    def emit(row, hyps):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            with open(os.path.join(a.keep, row['system'].replace(' ', '_') + '.txt'), 'w',
                      encoding='utf-8') as f:
                f.write(''.join(h + '\n' for h in hyps))
        if a.json_out:
            with open(a.json_out, 'a', encoding='utf-8') as f:
                f.write(json.dumps(row) + '\n')

    with tempfile.TemporaryDirectory(prefix='rill-translate-') as tmp:
        for pol in policies if 'text' in modes else []:
            hyps, lags, compute, wall, n_src = [], [], 0.0, 0.0, 0
            for t in talks:
                src = os.path.join(tmp, t['book'] + '.en')
                with open(src, 'w', encoding='utf-8') as f:
                    f.write(''.join(v['en'] + '\n' for v in t['verses']))
                recs, w = rill_json([a.rill, 'translate', '--model', a.model, '--policy', pol,
                                     '--json', '--text', src, '-t', str(a.threads)] + extra)
                h, lg, n = score_text(t['verses'], recs)
                hyps += h
                lags += lg
                n_src += n
                compute += recs[-1]['compute_s']
                wall += w
            emit(finish_row(dict(base, system=f'rill text {pol}', mode='text', policy=pol,
                                 model=model, la_chunk=a.la_chunk, compute_s=round(compute, 2),
                                 compute_s_per_src_word=round(compute / max(1, n_src), 4),
                                 wall_s=round(wall, 1)), hyps, refs, lags), hyps)
        if 'retranslate' in modes:
            hyps, lags, compute, wall, n_src = [], [], 0.0, 0.0, 0
            for t in talks:
                t0 = time.time()
                recs = retranslate_records(a.rill, a.model, a.threads, t['verses'],
                                           shlex.split(a.generate_args), a.instruction)
                wall += time.time() - t0
                h, lg, n = score_text(t['verses'], recs)
                hyps += h
                lags += lg
                n_src += n
                compute += recs[-1]['compute_s']
            emit(finish_row(dict(base, system='retranslate from scratch', mode='retranslate',
                                 policy='sentence', model=model, compute_s=round(compute, 2),
                                 compute_s_per_src_word=round(compute / max(1, n_src), 4),
                                 wall_s=round(wall, 1)), hyps, refs, lags), hyps)
        for pol in policies if 'audio' in modes else []:
            hyps, lags, lags_ca, compute, wall, audio = [], [], [], 0.0, 0.0, 0.0
            for t in talks:
                recs, w = rill_json([a.rill, 'translate', '--model', a.model, '--policy', pol,
                                     '--json', '--audio', t['wav'], '-t', str(a.threads)] + extra)
                s = sm.stream_laal(recs, t['verses'])
                hyps += s['hyps']
                lags += s['laal']
                lags_ca += s['laal_ca']
                compute += recs[-1]['compute_s']
                wall += w
                audio += t['audio_s']
            emit(finish_row(dict(base, system=f'rill audio {pol}', mode='audio', policy=pol,
                                 model=model, la_chunk=a.la_chunk, compute_s=round(compute, 2),
                                 compute_s_per_audio_s=round(compute / audio, 4),
                                 wall_s=round(wall, 1)), hyps, refs, lags, lags_ca), hyps)
        if 'cascade' in modes:
            asr = [(t, *pocketsphinx(t['wav'])) for t in talks]
            for per_word in (False, True):
                hyps, lags, lags_ca, compute, audio = [], [], [], 0.0, 0.0
                for t, utts, cpu in asr:
                    recs = cascade_records(utts, apertium, cpu / t['audio_s'], per_word)
                    s = sm.stream_laal(recs, t['verses'])
                    hyps += s['hyps']
                    lags += s['laal']
                    lags_ca += s['laal_ca']
                    compute += recs[-1]['compute_s'] if recs else 0.0
                    audio += t['audio_s']
                name = 'per-word' if per_word else 'utterance'
                emit(finish_row(dict(base, system=f'pocketsphinx+apertium {name}',
                                     mode='cascade', policy=name, model='pocketsphinx en-us, '
                                     f'apertium {APERTIUM_MODE}', compute_s=round(compute, 2),
                                     compute_s_per_audio_s=round(compute / audio, 4)),
                                hyps, refs, lags, lags_ca), hyps)
        if 'apertium' in modes:
            # Apertium alone on the verses as text, each written at its verse's end: the
            # cascade's translation with a perfect recognizer (where the cascade's quality goes)
            hyps, lags, n_src = [], [], 0
            compute = 0.0
            for t in talks:
                texts, cpu = apertium([v['en'] for v in t['verses']])
                recs, read = [], 0
                for v, out in zip(t['verses'], texts):
                    read += len(v['en'].split())
                    recs.append({'emit': out, 'src_words': read})
                h, lg, n = score_text(t['verses'], recs)
                hyps += h
                lags += lg
                n_src += n
                compute += cpu
            emit(finish_row(dict(base, system='apertium on the text', mode='text-cascade',
                                 policy='sentence', model=f'apertium {APERTIUM_MODE}',
                                 compute_s=round(compute, 2),
                                 compute_s_per_src_word=round(compute / max(1, n_src), 4)),
                            hyps, refs, lags), hyps)
    print(f'\n{"system":<34} {"BLEU":>6} {"LAAL words":>10} {"StreamLAAL s":>12} '
          f'{"CA s":>7} {"compute s":>10}')
    for r in rows:
        def f(k):
            return f'{r[k]:.2f}' if r.get(k) is not None else '-'
        print(f'{r["system"]:<34} {r["bleu"]:>6.2f} {f("laal_words"):>10} '
              f'{f("stream_laal_s"):>12} {f("stream_laal_ca_s"):>7} {r["compute_s"]:>10.1f}')
    if a.plot and rows:
        plot(rows, a.plot, a.title or f'{a.split} split, {len(refs)} verses in {len(talks)} '
             f'talk(s); {model}, {a.threads} threads; {time.strftime("%Y-%m-%d")}')
        print(f'translate_eval: wrote {a.plot}', file=sys.stderr)


if __name__ == '__main__':
    main()
