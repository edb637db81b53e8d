#!/usr/bin/env python3
"""Fits the end-of-turn predictor of scheduler/rill_endpoint.h (issue 17, item 4).

    tools/fit_endpoint.py --trace TRACE.jsonl --turns DIR/turns.json [--l2 0.01] [--json OUT]

TRACE is what `bench_endpoint --trace` writes for the baseline run over a turn corpus
(tools/make_turns.py): one line per 30 ms detector frame inside a pause, {"t_ms", "pause_ms",
"x": [the seven features in rill_endpoint_feature_t's order], "prob"}. A frame is labelled 1
when its time lies in a gap between two turns (after a turn's end_s and before the next turn's
start_s, from turns.json: the truth of the corpus), 0 when it lies inside a turn (a hesitation
or a gap between words). Frames whose pause is shorter than --min-pause-ms (the driver's
min_pause_ms) or reaches --confirm-ms (the fixed endpoint decides there) are left out: the
predictor is only asked in between.

The model is a logistic regression, fitted by Newton's method on the mean log-loss with an L2
penalty on the weights (not the bias). Prints the coefficients as the C initializers of
scheduler/endpoint.c (FIT_BIAS, FIT_WEIGHTS), the log-loss and, per threshold, the share of
end frames and of inside frames at or above it; --json writes the same as one object.
"""
import argparse
import json
import math
import sys

import numpy as np

FEATURES = ('pause', 'log_p_turn', 'log_p_sentence', 'tentative_empty', 'stable_steps',
            'since_commit', 'ends_sentence')


def load(trace, turns_path, min_pause, confirm):
    with open(turns_path, encoding='utf-8') as f:
        turns = json.load(f)['turns']
    gaps = []
    for i, t in enumerate(turns):
        nxt = turns[i + 1]['start_s'] if i + 1 < len(turns) else float('inf')
        gaps.append((t['end_s'], nxt))
    X, y = [], []
    with open(trace, encoding='utf-8') as f:
        for line in f:
            r = json.loads(line)
            if r['pause_ms'] < min_pause or r['pause_ms'] >= confirm:
                continue
            t = r['t_ms'] / 1000.0
            X.append(r['x'])
            y.append(1.0 if any(a <= t < b for a, b in gaps) else 0.0)
    if len(X) == 0:
        sys.exit('fit_endpoint: no frames in the decision range in %s' % trace)
    X = np.asarray(X, dtype=np.float64)
    if X.shape[1] != len(FEATURES):
        sys.exit('fit_endpoint: %d features per frame, expected %d' % (X.shape[1], len(FEATURES)))
    return X, np.asarray(y)


def fit(X, y, l2, iters=100):
    n, d = X.shape
    A = np.hstack([np.ones((n, 1)), X])
    w = np.zeros(d + 1)
    reg = np.full(d + 1, l2)
    reg[0] = 0.0
    for _ in range(iters):
        z = A @ w
        p = 1.0 / (1.0 + np.exp(-z))
        g = A.T @ (p - y) / n + reg * w
        H = (A * (p * (1 - p))[:, None]).T @ A / n + np.diag(reg) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(H, g)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    p = 1.0 / (1.0 + np.exp(-(A @ w)))
    eps = 1e-12
    loss = -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
    return w, p, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--trace', required=True)
    ap.add_argument('--turns', required=True)
    ap.add_argument('--l2', type=float, default=0.01)
    ap.add_argument('--min-pause-ms', type=int, default=90)
    ap.add_argument('--confirm-ms', type=int, default=700)
    ap.add_argument('--json')
    args = ap.parse_args()
    X, y = load(args.trace, args.turns, args.min_pause_ms, args.confirm_ms)
    w, p, loss = fit(X, y, args.l2)
    base = -np.mean(y * math.log(max(y.mean(), 1e-12)) +
                    (1 - y) * math.log(max(1 - y.mean(), 1e-12)))
    print('fit_endpoint: %d frames (%d at turn ends), log-loss %.4f (constant model %.4f)'
          % (len(y), int(y.sum()), loss, base))
    print('#define FIT_BIAS (%.6ff)' % w[0])
    print('static const float FIT_WEIGHTS[RILL_ENDPOINT_N_FEATURES] = {')
    print('    ' + ', '.join('%.6ff' % v for v in w[1:]) + ',')
    print('};')
    for name, v in zip(FEATURES, w[1:]):
        print('  %-16s %+.4f' % (name, v))
    rows = []
    for thr in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        hit = float(np.mean(p[y == 1] >= thr)) if y.sum() > 0 else float('nan')
        fa = float(np.mean(p[y == 0] >= thr)) if (1 - y).sum() > 0 else float('nan')
        rows.append({'threshold': thr, 'end_frames_above': hit, 'inside_frames_above': fa})
        print('  threshold %.1f: %5.1f %% of end frames, %5.1f %% of inside frames at or above'
              % (thr, 100 * hit, 100 * fa))
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump({'bias': w[0], 'weights': dict(zip(FEATURES, w[1:].tolist())),
                       'frames': len(y), 'end_frames': int(y.sum()), 'log_loss': loss,
                       'constant_log_loss': base, 'l2': args.l2, 'rates': rows}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
