#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [libFuzzer options...]
#
# Builds the GGUF fuzzer (fuzz/fuzz_gguf.c) with clang, libFuzzer, ASan and UBSan in build-fuzz/,
# then fuzzes for SECONDS (default 60). New inputs go to fuzz/corpus-run/gguf (not checked in);
# the seeds and regressions in fuzz/corpus/gguf are read as well. Crashes are written to
# build-fuzz/crashes/: copy each one into fuzz/corpus/gguf/ as a regression once it is fixed.
# Extra arguments go to libFuzzer, e.g. `scripts/fuzz.sh 600 -jobs=2`.
set -euo pipefail

secs=${1:-60}
if [ $# -gt 0 ]; then
    shift
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
cc=${CC:-clang}

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DRILL_FUZZ=ON -DRILL_SANITIZE=address \
    -DRILL_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
make -C "$build" -j2 fuzz_gguf

run=$root/fuzz/corpus-run/gguf
mkdir -p "$run" "$build/crashes"
exec "$build/fuzz/fuzz_gguf" "$run" "$root/fuzz/corpus/gguf" \
    -dict="$root/fuzz/gguf.dict" -max_total_time="$secs" -max_len=16384 -timeout=10 \
    -artifact_prefix="$build/crashes/" -print_final_stats=1 "$@"
