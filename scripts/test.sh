#!/usr/bin/env bash
# Sets everything up, then builds and runs the whole test suite three times:
#   1. build/        release build (RelWithDebInfo, gcc), all tests
#   2. build-asan/   AddressSanitizer + UndefinedBehaviorSanitizer (clang), all tests
#   3. build-tsan/   ThreadSanitizer (clang), the tests labelled `concurrency`
# Exits non-zero on any failure; the last line is the summary over all three.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# Plain set-up (no --speech) is enough: it installs Whisper tiny.en, the speech tests' model
# (models/whisper-tiny.en.gguf); base and the faster-whisper oracle are for bench/ only.
scripts/setup.sh || { echo "test: set-up failed" >&2; exit 1; }

# The tiny test models are regenerated, not committed; they must be byte-identical to the files
# llama.cpp's reference logits were recorded on (the hashes in tests/data/ref/logits.tsv).
.venv/bin/python tools/make_test_models.py --out tests/data/models >/dev/null ||
    { echo "test: could not generate the test models" >&2; exit 1; }
while IFS=$'\t' read -r _ _ _ _ model sha _; do
    got=$(sha256sum "tests/data/models/$model" | cut -d' ' -f1)
    [ "$got" = "$sha" ] || { echo "test: tests/data/models/$model differs from the model the references were recorded on" >&2; exit 1; }
done < <(grep -v '^#' tests/data/ref/logits.tsv | grep rill-tiny | sort -u -k5,5)

jobs=$(nproc 2>/dev/null || echo 2)
passed=0
failed=0
status=0

run_pass() { # run_pass NAME BUILD_DIR CC CTEST_ARGS... -- CMAKE_ARGS...
    local name=$1 dir=$2 cc=$3
    shift 3
    local ctest_args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        ctest_args+=("$1")
        shift
    done
    shift
    echo "=== $name ==="
    mkdir -p "$dir"
    if ! CC=$cc cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir/configure.log" 2>&1; then
        cat "$dir/configure.log"
        echo "test: $name: configure failed"
        status=1
        failed=$((failed + 1))
        return
    fi
    if ! cmake --build "$dir" -j "$jobs" >"$dir/build.log" 2>&1; then
        grep -E 'error|warning' "$dir/build.log" | head -50
        echo "test: $name: build failed (full log: $dir.build.log)"
        status=1
        failed=$((failed + 1))
        return
    fi
    local log="$dir/ctest.log"
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${ctest_args[@]}" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    # "100% tests passed, 0 tests failed out of 12"
    local line total bad
    line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)
    total=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
    bad=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed.*/\1/')
    if [ -z "$line" ]; then
        echo "test: $name: ctest printed no summary"
        status=1
        failed=$((failed + 1))
        return
    fi
    # A test that skips itself (exit 77) lacks its data; after set-up nothing may be missing.
    local skipped
    skipped=$(grep -c '\*\*\*Skipped' "$log" || true)
    if [ "$skipped" -gt 0 ]; then
        echo "test: $name: $skipped test(s) skipped; set-up should have provided their data"
        bad=$((bad + skipped))
        status=1
    fi
    passed=$((passed + total - bad))
    failed=$((failed + bad))
    [ "$rc" = 0 ] || status=1
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

run_pass "release" build gcc -- -DRILL_SANITIZE=
run_pass "asan+ubsan" build-asan clang -- -DRILL_SANITIZE=address -DRILL_CUDA=OFF
run_pass "tsan" build-tsan clang -L concurrency -- -DRILL_SANITIZE=thread -DRILL_CUDA=OFF

echo
echo "release, asan+ubsan and tsan passes together:"
echo "tests: $passed passed, $failed failed"
exit $status
