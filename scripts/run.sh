#!/usr/bin/env bash
# rill's main job on the default model: sets everything up, builds, runs.
#
# What "main job" means grows with the engine. Today rill has its model runtime and no session
# engine yet, so this asks the default model (SmolLM2-135M-Instruct) a question through its chat
# template and streams the answer, then measures prompt and generation speed. Extra arguments
# replace the question: scripts/run.sh "Why is the sky blue?"
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
question=${1:-"In three sentences: why does a streaming engine keep a KV cache per stream?"}
echo "run: rill generate --chat (default model, greedy, up to 200 tokens)"
echo "question: $question"
echo "answer:"
./build/cli/rill generate --chat --temp 0 -n 200 --prompt "$question"
echo
echo "run: rill bench model (pp512 / tg128, $(nproc) threads)"
./build/cli/rill bench model -p 512 -n 128 -r 3
