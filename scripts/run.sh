#!/usr/bin/env bash
# rill's main job on the default model: sets everything up, builds, runs.
#
# What "main job" means grows with the engine. Today rill has its core library and no model
# runtime yet, so this builds everything and runs the one real workload that exists: the thread
# pool's dispatch benchmark, which the forward pass will sit on. It says so when it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
echo "run: rill has no model runtime yet; running the thread-pool dispatch benchmark instead."
./build/bench/bench_pool --threads "$(nproc)"
