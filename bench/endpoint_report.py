#!/usr/bin/env python3
"""Table and plot of endpoint anticipation from bench_endpoint's output (issue 17, item 4).

    bench/endpoint_report.py --events OUT.jsonl --turns DIR/turns.json [--png FILE] [--md FILE]

OUT.jsonl is `bench_endpoint --json`: one line per endpoint of each run (the runs with threshold
-1 are the fixed 700 ms silence endpoint alone, made before and after the others; the rest one
threshold each) and one summary line per run.
Every endpoint is classed with the corpus's truth (turns.json): a turn end when it falls in the
gap after a turn, a cut when it falls inside a turn (a hesitation the fixed rule took for an
end: the baseline's own error, which anticipation shares, since it ends turns by the same rule).
Turn ends the fixed rule never saw (the next turn started within the 700 ms) are counted too.

Per threshold: latency saved per turn end (the baseline runs' mean reply latency at that
endpoint minus this run's; median and p90; the reply's last token and its first token), the head start
per turn end (wall time a kept speculation computed before its commit, 0 where none was kept:
on an otherwise idle engine the saving cannot exceed it, and unlike the saving it does not
compare two runs made at different moments of a shared machine's load), speculations
started and kept, and the compute wasted on misses: tokens evaluated on speculative branches
that were rolled back or cancelled, as a percentage of the tokens of the replies actually
delivered (each reply's turn suffix and reply tokens). Prints a Markdown table (and writes it
with --md) and plots saved latency against extra compute (--png).
"""
import argparse
import json
import re
import statistics
import sys


def pct(v, q):
    if not v:
        return float('nan')
    v = sorted(v)
    k = q * (len(v) - 1)
    i = int(k)
    return v[i] + (k - i) * (v[i + 1] - v[i]) if i + 1 < len(v) else v[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--events', required=True)
    ap.add_argument('--turns', required=True)
    ap.add_argument('--png')
    ap.add_argument('--md')
    ap.add_argument('--title', default='Endpoint anticipation')
    args = ap.parse_args()
    with open(args.turns, encoding='utf-8') as f:
        corpus = json.load(f)
    turns = corpus['turns']
    gaps = [(t['end_s'], turns[i + 1]['start_s'] if i + 1 < len(turns) else 1e9)
            for i, t in enumerate(turns)]
    runs, summ = {}, {}
    with open(args.events, encoding='utf-8') as f:
        for line in f:
            r = json.loads(line)
            if r.get('summary'):
                summ[r['run']] = r
            else:
                runs.setdefault(r['run'], []).append(r)
    if 0 not in runs:
        sys.exit('endpoint_report: no baseline run (run 0) in %s' % args.events)

    def gap_of(at_ms):
        t = at_ms / 1000.0
        for i, (a, b) in enumerate(gaps):
            if a <= t < b:
                return i
        return -1

    # the baseline runs (threshold -1): run 0 and, from bench_endpoint, a second one after the
    # threshold runs; the baseline latency at an endpoint is their mean
    base_runs = [k for k in sorted(runs) if runs[k] and runs[k][0]['threshold'] < 0]
    base = runs[0]

    def base_latency(at_ms, key):
        v = []
        for k in base_runs:
            near = [x for x in runs[k] if abs(x['at_ms'] - at_ms) <= 60]
            if near:
                v.append(near[0][key])
        return sum(v) / len(v) if v else None

    seen = {gap_of(e['at_ms']) for e in base} - {-1}
    cuts = [e for e in base if gap_of(e['at_ms']) < 0]
    missed = [i for i in range(len(turns) - 1) if i not in seen]
    delay = [e['at_ms'] / 1000.0 - gaps[gap_of(e['at_ms'])][0] for e in base
             if gap_of(e['at_ms']) >= 0]
    within = [p['end_s'] - p['start_s'] for t in turns for p in t['pauses']]
    lines = []
    lines.append('Corpus: %d turns, %.1f s (split %s, espeak-ng %s); %d pauses inside turns, '
                 '%d of them over 700 ms.' % (len(turns), corpus['duration_s'], corpus['split'],
                                              (re.findall(r'\d+\.\d+[\w.-]*',
                                                          corpus['espeak_ng']) or ['?'])[0],
                                              len(within), sum(1 for x in within if x > 0.7)))
    lines.append('Fixed 700 ms endpoint: %d endpoints, %d at turn ends (median %.0f ms after the '
                 'speech ended), %d cuts into hesitations, %d turn ends missed (the next turn '
                 'began within the silence); reply latency after the endpoint median %.0f ms, '
                 'p90 %.0f ms.'
                 % (len(base), len(base) - len(cuts), 1000 * statistics.median(delay)
                    if delay else float('nan'), len(cuts), len(missed),
                    pct([e['latency_ms'] for e in base], 0.5),
                    pct([e['latency_ms'] for e in base], 0.9)))
    if len(base_runs) > 1:
        lines.append('Baseline runs (before and after the threshold runs): reply latency median '
                     + ', '.join('%.0f ms' % pct([e['latency_ms'] for e in runs[k]], 0.5)
                                 for k in base_runs)
                     + ' (the drift is the shared machine\'s load).')
    lines.append('')
    lines.append('| threshold | endpoints | speculations | kept | saved p50 (ms) | saved p90 (ms) '
                 '| first token saved p50 (ms) | head start p50 (ms) | head start p90 (ms) '
                 '| wasted tokens | reply tokens | extra compute |')
    lines.append('|---|---|---|---|---|---|---|---|---|---|---|---|')
    points = []
    for k in sorted(runs):
        if k in base_runs:
            continue
        s = summ.get(k, {})
        saved, first, head = [], [], []
        for e in runs[k]:
            if gap_of(e['at_ms']) < 0:
                continue  # a cut: not a turn end
            head.append(e['spec_ms'] if e['kind'] == 'commit' and e['hit'] else 0.0)
            bl, bf = base_latency(e['at_ms'], 'latency_ms'), base_latency(e['at_ms'], 'first_ms')
            if bl is None:
                continue
            saved.append(bl - e['latency_ms'])
            first.append(bf - e['first_ms'])
        wasted = s.get('spec_tokens_wasted', 0)
        used = s.get('reply_tokens', 0)
        extra = 100.0 * wasted / used if used else float('nan')
        thr = runs[k][0]['threshold'] if runs[k] else s.get('threshold')
        p50, p90 = pct(saved, 0.5), pct(saved, 0.9)
        points.append((thr, extra, p50, p90, pct(head, 0.5)))
        lines.append('| %.2f | %d | %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %d | %.1f %% |'
                     % (thr, len(runs[k]), s.get('spec_started', 0), s.get('spec_hits', 0), p50,
                        p90, pct(first, 0.5), pct(head, 0.5), pct(head, 0.9), wasted, used,
                        extra))
    text = '\n'.join(lines)
    print(text)
    if args.md:
        with open(args.md, 'w', encoding='utf-8') as f:
            f.write(text + '\n')
    if args.png:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        xs = [p[1] for p in points]
        ax.plot(xs, [p[2] for p in points], 'o-', label='median saved per turn')
        ax.plot(xs, [p[3] for p in points], 's--', label='p90 saved per turn')
        ax.plot(xs, [p[4] for p in points], 'd-.', label='median head start (kept speculation)')
        for thr, x, y, _, _ in points:
            ax.annotate('%.2f' % thr, (x, y), textcoords='offset points', xytext=(5, -12))
        ax.axhline(400, color='grey', lw=0.8, ls=':')
        ax.axvline(30, color='grey', lw=0.8, ls=':')
        ax.plot([28.4], [505], 'r*', ms=12, label='paper (505 ms, 28.4 %)')
        ax.set_xlabel('extra compute on misses (% of the delivered replies\' tokens)')
        ax.set_ylabel('latency saved vs the 700 ms endpoint (ms)')
        ax.set_title(args.title)
        ax.grid(alpha=0.3)
        ax.legend(loc='best', fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
    return 0


if __name__ == '__main__':
    sys.exit(main())
