#!/usr/bin/env python3
"""One table and one plot from the JSON lines of `rill bench stream --json` and
bench/stream_llama.py: question TTFT per context bucket for every mode found, with ratios.

Modes: rill (persistent sessions on the scheduler), stateless = (a) (re-prefill per question),
llama_persistent = (b) (llama.cpp, one KV sequence per session, data decoded as it arrives),
llama_prefix = (c) (llama.cpp, prompt-prefix reuse only). A question is identified by (session,
q), the same in every file made from one export. "x rill" is the median over the bucket's
questions of (that mode's TTFT / rill's TTFT for the same question), so a mode that answered only
some questions, like (a), is compared on exactly those.

A file given as PATH:TAG has its modes renamed MODE:TAG, so that two runs of one mode (say rill
with and without standing queries, both made from the same export) can be compared; --base
names the mode the ratios are taken against (default rill).

Writes PREFIX.md (the table and the target checks) and PREFIX.png (TTFT against context, log y,
every question a point, the bucket medians joined, each at its questions' median context), PREFIX defaulting to the first file's path
without its extension plus "_report". The plot needs matplotlib (tools/requirements-llama.txt);
without it only the table is written.

Usage: bench/stream_report.py RILL.jsonl[:TAG] [LLAMA.jsonl ...] [--base MODE] [--out PREFIX]
"""
import argparse
import json
import math
import os
import sys

MODES = [("rill", "rill"), ("stateless", "(a) stateless"),
         ("llama_persistent", "(b) llama.cpp persistent"),
         ("llama_prefix", "(c) llama.cpp prefix cache")]
LABEL = dict(MODES)


def label(m):
    mode, _, tag = m.partition(":")
    return LABEL.get(mode, mode) + (f" ({tag})" if tag else "")


def pct(values, p):
    v = sorted(values)
    if not v:
        return None
    k = math.ceil(p * len(v))
    return v[min(max(k, 1), len(v)) - 1]


def fmt(x, unit=""):
    if x is None:
        return "-"
    return f"{x:.1f}{unit}" if x < 1000 else f"{x:.0f}{unit}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default=None)
    ap.add_argument("--base", default="rill", help="the mode ratios are taken against")
    a = ap.parse_args()
    out = a.out or os.path.splitext(a.files[0].split(":")[0])[0] + "_report"

    q = {}  # mode -> {(session, q): row}
    summ = {}
    for arg in a.files:
        path, _, tag = arg.partition(":")
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("bench") != "stream":
                continue
            if tag:
                r["mode"] = f"{r['mode']}:{tag}"
            if r.get("summary"):
                summ[r["mode"]] = r
            elif r.get("ttft_ms") is not None:
                q.setdefault(r["mode"], {})[(r["session"], r["q"])] = r
    modes = sorted(q, key=lambda m: ([k for k, _ in MODES] + [m.split(":")[0]]).index(
        m.split(":")[0]) * 2 + (":" in m))
    base = a.base
    if base not in q:
        sys.exit(f"stream_report: no {base} questions in " + ", ".join(a.files))
    modes.remove(base)
    modes.insert(0, base)
    buckets = sorted({r["bucket"] for m in q for r in q[m].values()})
    rill = q[base]
    cfg = summ.get(base, {})

    lines = []
    say = lines.append
    say(f"Model {os.path.basename(cfg.get('model', '?'))}, {cfg.get('sessions')} sessions, "
        f"{cfg.get('rate')} ticks/s each, a question every {cfg.get('every')} ticks, answers of "
        f"{cfg.get('answer')} tokens, context up to {cfg.get('context')}, "
        f"{cfg.get('threads')} threads, KV F16.")
    say("")
    head = "| context <= | " + " | ".join(
        f"{label(m)} n | p50 ms | p99 ms" + ("" if m == base else f" | x {label(base)}")
        for m in modes) + " |"
    say(head)
    say("|" + "---|" * (1 + sum(3 if m == base else 4 for m in modes)))
    ratio_at = {}
    for b in buckets:
        cells = [str(b)]
        for m in modes:
            v = [r["ttft_ms"] for r in q[m].values() if r["bucket"] == b]
            cells += [str(len(v)), fmt(pct(v, 0.5)), fmt(pct(v, 0.99))]
            if m != base:
                rs = [r["ttft_ms"] / rill[k]["ttft_ms"] for k, r in q[m].items()
                      if r["bucket"] == b and k in rill and rill[k]["ttft_ms"] > 0]
                med = pct(rs, 0.5)
                ratio_at[(m, b)] = med
                cells.append(fmt(med, "x"))
        say("| " + " | ".join(cells) + " |")
    say("")
    for m in modes:
        v = [r["ttft_ms"] for r in q[m].values()]
        s = summ.get(m, {})
        extra = []
        if s.get("utilization") is not None:
            extra.append(f"utilization {100 * s['utilization']:.1f}%")
        if s.get("standing_age_p50_ms") is not None:
            extra.append(f"standing answer age p50 {s['standing_age_p50_ms']:.0f} ms, p99 "
                         f"{s['standing_age_p99_ms']:.0f} ms")
        if s.get("backlog_max_tokens") is not None:
            extra.append(f"data backlog at most {s['backlog_max_tokens']} tokens")
        p50, p99 = pct(v, 0.5), pct(v, 0.99)
        say(f"- {label(m)}: {len(v)} questions, TTFT p50 {fmt(p50)} ms, p90 "
            f"{fmt(pct(v, 0.9))} ms, p99 {fmt(p99)} ms (p99/p50 {p99 / p50:.2f})"
            + ("; " + "; ".join(extra) if extra else ""))
    # Same first answer token where two modes saw the same context.
    for m in modes:
        if m == base:
            continue
        same = [k for k, r in q[m].items() if k in rill and
                rill[k].get("engine_context") == rill[k]["context"] and rill[k]["answer"]
                and r["answer"]]
        agree = sum(1 for k in same if q[m][k]["answer"][0] == rill[k]["answer"][0])
        if same:
            say(f"- first answer token, {label(m)} against {label(base)}: the same in {agree} of "
                f"{len(same)} questions that {label(base)} answered on exactly the acknowledged "
                "context")
    say("")
    top = buckets[-1]
    rv = [r["ttft_ms"] for r in rill.values()]
    rt = [r["ttft_ms"] for r in rill.values() if r["bucket"] == top]
    say(f"Targets (bucket context <= {top}):")

    def target(name, value, want, ok):
        say(f"- {name}: {fmt(value, 'x') if value is not None else 'not measured'} (target "
            f"{want}): {'met' if value is not None and ok(value) else 'NOT met'}")

    B = label(base)
    for m in modes:  # the targets of the scheduler issue, against the base mode
        kind = m.split(":")[0]
        if (m, top) not in ratio_at:
            continue
        if kind == "stateless":
            target(f"{B} TTFT better than {label(m)}", ratio_at[(m, top)], ">= 50x",
                   lambda x: x >= 50)
        elif kind == "llama_persistent":
            target(f"{B} TTFT better than {label(m)}", ratio_at[(m, top)], ">= 2x",
                   lambda x: x >= 2)
        else:
            say(f"- {B} against {label(m)}: {fmt(ratio_at[(m, top)], 'x')} (no target)")
    if rv:
        target(f"{B} p99 / p50 over all questions", pct(rv, 0.99) / pct(rv, 0.5), "<= 2x",
               lambda x: x <= 2)
    if rt:
        target(f"{B} p99 / p50 at context <= {top}", pct(rt, 0.99) / pct(rt, 0.5), "<= 2x",
               lambda x: x <= 2)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(out + ".md", "w") as f:
        f.write(text)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("stream_report: matplotlib not installed (tools/requirements-llama.txt): no plot",
              file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for m in modes:
        rows = sorted(q[m].values(), key=lambda r: r["context"])
        pts = ax.scatter([r["context"] for r in rows], [r["ttft_ms"] for r in rows], s=10,
                         alpha=0.45, label=label(m))
        med = []  # each bucket's median TTFT at its questions' median context
        for b in buckets:
            inb = [r for r in rows if r["bucket"] == b]
            if inb:
                med.append((pct([r["context"] for r in inb], 0.5),
                            pct([r["ttft_ms"] for r in inb], 0.5)))
        ax.plot([b for b, _ in med], [v for _, v in med], "-o", color=pts.get_facecolor()[0],
                alpha=1.0, markersize=4)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens) when the question arrived")
    ax.set_ylabel("time to first token (ms)")
    ax.set_title(f"rill bench stream: {cfg.get('sessions')} sessions, {cfg.get('rate')} ticks/s "
                 f"each, {cfg.get('threads')} threads (lines: bucket medians)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=110)
    print(f"stream_report: wrote {out}.md and {out}.png")


if __name__ == "__main__":
    main()
