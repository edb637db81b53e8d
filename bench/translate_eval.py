#!/usr/bin/env python3
"""Quality and latency of `rill translate --text` on Bible verses (issue 22's quick loop).

    bench/translate_eval.py [--rill build/cli/rill] [--model FILE] [--verses 60] [--split dev]
                            [--policy local-agreement --policy wait-3 --policy sentence ...]
                            [--json-out FILE] [--keep DIR]

The first --verses verses of the split's books (KJV, in canonical order, joined to RV1909 through
en-es.kjv-rv1909.align.tsv) are one continuous talk: one verse per line of the --text file, so
each verse is one segment (a turn) of one session. Every policy runs on the same talk.

Metrics, per policy:
  BLEU      sacreBLEU corpus BLEU (13a tokenizer, default smoothing) of the verse hypotheses
            against RV1909. A verse's hypothesis is its emissions joined by spaces; an emission
            belongs to the verse whose source words it had read up to (src_words in the verse's
            (start, end] range: a verse's words are all read before the next verse's first one).
  LAAL      sentence-level Length-Adaptive Average Lagging (Papi et al., 2022), in source words,
            implemented here from its definition: for a verse of |X| source words, hypothesis Y
            and reference Y*, with d_i the verse's source words read when target word i was
            emitted, tau the first i with d_i = |X| (|Y| if none),
                LAAL = 1/tau * sum_{i=1..tau} (d_i - (i - 1) * |X| / max(|Y|, |Y*|)),
            averaged over verses (a verse with no output is skipped and counted).
  compute   engine seconds for the talk (the last record's compute_s) and per source word.
The `sentence` policy is the whole-sentence reference point (it writes at each verse's end, in
the same session). Prints a table and one JSON line per policy.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def default_model():
    base = os.environ.get('RILL_CACHE') or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'), 'rill')
    return os.path.join(base, 'models', 'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf')


def read_tsv(path):
    out = {}
    with open(path, encoding='utf-8') as f:
        for line in f:
            k, _, v = line.rstrip('\n').partition('\t')
            out[k] = v
    return out


def talk(data, split, n):
    """[(english, spanish)] of the first n verses of the split, in the align file's order."""
    en = read_tsv(os.path.join(data, 'en-kjv.tsv'))
    es = read_tsv(os.path.join(data, 'es-rv1909.tsv'))
    pairs = []
    with open(os.path.join(data, 'en-es.kjv-rv1909.align.tsv'), encoding='utf-8') as f:
        for line in f:
            ref_en, ref_es, sp = line.rstrip('\n').split('\t')
            if sp == split:
                pairs.append((en[ref_en], es[ref_es]))
    if len(pairs) < n:
        sys.exit(f'translate_eval: the {split} split has {len(pairs)} verses, not {n}')
    return pairs[:n]


def laal(delays, n_src, n_hyp, n_ref):
    """Sentence-level LAAL from per-target-word delays (source words read)."""
    if not delays:
        return None
    tau = next((i + 1 for i, d in enumerate(delays) if d >= n_src), len(delays))
    rate = n_src / max(n_hyp, n_ref)
    return sum(delays[i] - i * rate for i in range(tau)) / tau


def run(rill, model, policy, src_path, threads, extra):
    cmd = [rill, 'translate', '--model', model, '--policy', policy, '--json', '--text', src_path,
           '-t', str(threads)] + extra
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f'translate_eval: {" ".join(cmd)} failed ({p.returncode}):\n{p.stderr}')
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    return recs, wall, p.stderr.strip()


def score(pairs, recs):
    import sacrebleu
    bounds, at = [], 0
    for en, _ in pairs:
        n = len(en.split())
        bounds.append((at, at + n))
        at += n
    hyp_words = [[] for _ in pairs]
    delays = [[] for _ in pairs]
    v = 0
    for r in recs:
        if r.get('final'):
            continue
        while v < len(pairs) - 1 and r['src_words'] > bounds[v][1]:
            v += 1
        ws = r['emit'].split()
        hyp_words[v] += ws
        delays[v] += [r['src_words'] - bounds[v][0]] * len(ws)
    hyps = [' '.join(w) for w in hyp_words]
    refs = [es for _, es in pairs]
    metric = sacrebleu.BLEU(tokenize='13a')
    bleu = metric.corpus_score(hyps, [refs])
    lags, empty = [], 0
    for i, (en, es) in enumerate(pairs):
        x = laal(delays[i], len(en.split()), len(hyp_words[i]), len(es.split()))
        if x is None:
            empty += 1
        else:
            lags.append(x)
    final = next((r for r in recs if r.get('final')), None)
    compute = final['compute_s'] if final else (recs[-1]['compute_s'] if recs else 0.0)
    return {
        'bleu': round(bleu.score, 2),
        'bleu_signature': str(metric.get_signature()),
        'laal_words': round(sum(lags) / len(lags), 3) if lags else None,
        'verses_without_output': empty,
        'compute_s': compute,
        'compute_s_per_src_word': round(compute / max(1, bounds[-1][1]), 4),
        'src_words': bounds[-1][1],
        'emissions': sum(1 for r in recs if 'emit' in r),
    }, hyps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--rill', default=os.path.join(ROOT, 'build', 'cli', 'rill'))
    ap.add_argument('--model', default=default_model())
    ap.add_argument('--data', default=os.path.join(ROOT, '..', 'shared', 'testdata', 'bible'))
    ap.add_argument('--split', default='dev', choices=['dev', 'test'])
    ap.add_argument('--verses', type=int, default=60)
    ap.add_argument('--policy', action='append', help='repeatable; default: local-agreement, '
                    'wait-3, sentence')
    ap.add_argument('--threads', type=int, default=2)
    ap.add_argument('--la-chunk', type=int, default=None)
    ap.add_argument('--json-out', help='append the JSON lines to this file')
    ap.add_argument('--keep', help='write each policy\'s hypotheses to DIR/POLICY.txt')
    a = ap.parse_args()
    if a.split == 'test':
        print('translate_eval: the test split is for the final report only; tune on dev',
              file=sys.stderr)
    policies = a.policy or ['local-agreement', 'wait-3', 'sentence']
    pairs = talk(a.data, a.split, a.verses)
    extra = ['--la-chunk', str(a.la_chunk)] if a.la_chunk else []
    rows = []
    with tempfile.TemporaryDirectory(prefix='rill-translate-') as tmp:
        src = os.path.join(tmp, 'talk.en')
        with open(src, 'w', encoding='utf-8') as f:
            f.write(''.join(en + '\n' for en, _ in pairs))
        for pol in policies:
            recs, wall, summary = run(a.rill, a.model, pol, src, a.threads, extra)
            m, hyps = score(pairs, recs)
            m.update(policy=pol, model=os.path.basename(a.model), split=a.split,
                     verses=a.verses, wall_s=round(wall, 1), threads=a.threads,
                     la_chunk=a.la_chunk)
            rows.append(m)
            print(json.dumps(m), flush=True)
            if a.keep:
                os.makedirs(a.keep, exist_ok=True)
                with open(os.path.join(a.keep, pol + '.txt'), 'w', encoding='utf-8') as f:
                    f.write(''.join(h + '\n' for h in hyps))
            if a.json_out:
                with open(a.json_out, 'a', encoding='utf-8') as f:
                    f.write(json.dumps(m) + '\n')
    print(f'\n{"policy":<18} {"BLEU":>6} {"LAAL (words)":>13} {"compute s":>10} '
          f'{"s/word":>7} {"wall s":>7}')
    for m in rows:
        lag = f'{m["laal_words"]:.2f}' if m['laal_words'] is not None else '-'
        print(f'{m["policy"]:<18} {m["bleu"]:>6.2f} {lag:>13} {m["compute_s"]:>10.1f} '
              f'{m["compute_s_per_src_word"]:>7.3f} {m["wall_s"]:>7.1f}')


if __name__ == '__main__':
    main()
