#!/usr/bin/env bash
# rill's main job: sets everything up, builds, and runs the market demo.
#
# The demo (demos/market/run.sh) starts rilld with the better model when it is in rill's model
# cache (Qwen2.5-Coder-1.5B-Instruct), else the default model (SmolLM2-135M-Instruct), and prints
# a line naming it; nothing is downloaded for it unless asked: RILL_FETCH_MODEL=1 scripts/run.sh
# fetches the 1.1 GB model first, RILL_MODEL=default keeps the default, RILL_MODEL=FILE runs a
# GGUF of your own (README.md says what accuracy to expect from each). It
# streams a seeded synthetic market into three sessions in real time, registers standing
# questions that rilld re-answers as the data moves and pushes back, asks interactive questions
# now and then, and ends after about 40 seconds with a summary table: per session the ticks,
# data version, context, pushed answers and their age, question latency, then what re-prefilling
# the context for one question costs a stateless server. Extra arguments go to the demo, e.g.
#   scripts/run.sh --duration 20 --sessions 2      scripts/run.sh --csv my-ticks.csv
#
# `scripts/run.sh translate [FILE]` runs the live translation demo instead
# (demos/translate/run.sh): set-up with --translate (the translation models), then rilld
# transcribes and translates FILE or a bundled espeak-ng recording at real time, serving the
# captions page at http://127.0.0.1:8080/captions/talk, and prints a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = translate ]; then
    shift
    scripts/setup.sh --translate >/dev/null
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build -j "$(nproc)" >/dev/null
    exec demos/translate/run.sh "$@"
fi
scripts/setup.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
exec demos/market/run.sh "$@"
