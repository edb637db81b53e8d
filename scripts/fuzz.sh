#!/usr/bin/env bash
# scripts/fuzz.sh [TARGET] [SECONDS] [libFuzzer options...]
#
# Builds a libFuzzer target with clang, ASan and UBSan in build-fuzz/ (or $FUZZ_BUILD), then
# fuzzes for SECONDS (default 60). TARGET is one of
#   gguf     fuzz/fuzz_gguf.c     the GGUF reader and model loader (the default)
#   ticks    fuzz/fuzz_ticks.c    market ticks (msgpack, CSV), the rate governor, the text cleaner
#   request  fuzz/fuzz_request.c  rilld's request decoder (wire/proto.c)
#   http_json fuzz/fuzz_http_json.c  the HTTP door's JSON bodies into that decoder (server/json.c)
#   audio    fuzz/fuzz_audio.c    the ingest.audio packet decoder (Opus, pcm16; ingest/audio_packet.c)
# (the fuzz_ prefix may be given too). New inputs go to fuzz/corpus-run/TARGET (not checked in);
# the seeds and regressions in fuzz/corpus/TARGET are read as well. Crashes are written to
# BUILD/crashes/TARGET/: copy each one into fuzz/corpus/TARGET/ as a regression once it is fixed.
# Extra arguments go to libFuzzer, e.g. `scripts/fuzz.sh request 600 -jobs=2`.
set -euo pipefail

target=gguf
case "${1:-}" in
gguf | ticks | request | http_json | audio | fuzz_gguf | fuzz_ticks | fuzz_request | \
    fuzz_http_json | fuzz_audio)
    target=${1#fuzz_}
    shift
    ;;
esac
secs=${1:-60}
if [ $# -gt 0 ]; then
    shift
fi
case "$target" in
gguf) max_len=16384 ;;
ticks) max_len=8192 ;;
request) max_len=4096 ;;
http_json) max_len=4096 ;;
audio) max_len=8192 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
cc=${CC:-clang}

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DRILL_FUZZ=ON -DRILL_SANITIZE=address \
    -DRILL_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
make -C "$build" -j2 "fuzz_$target"

run=$root/fuzz/corpus-run/$target
mkdir -p "$run" "$build/crashes/$target"
exec "$build/fuzz/fuzz_$target" "$run" "$root/fuzz/corpus/$target" \
    -dict="$root/fuzz/$target.dict" -max_total_time="$secs" -max_len="$max_len" -timeout=10 \
    -artifact_prefix="$build/crashes/$target/" -print_final_stats=1 "$@"
