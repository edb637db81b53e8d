#!/usr/bin/env bash
# The market demo end to end: starts rilld on the default model (loopback, a fresh state
# directory, free ports), runs market-demo against it, stops rilld (SIGTERM: it snapshots its
# sessions) and leaves the daemon's log in the state directory. Extra arguments go to
# market-demo (build/demos/market/market-demo --help), e.g. --duration 20 --sessions 2, or
# --csv FILE to replay your own ticks. Expects a build in build/ (scripts/run.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${RILL_BUILD:-build}
rilld=$build/cli/rilld
demo=$build/demos/market/market-demo
for f in "$rilld" "$demo"; do
    [ -x "$f" ] || { echo "run.sh: $f is missing: build first (scripts/run.sh does)" >&2; exit 1; }
done
state=$(mktemp -d /tmp/rill-market-demo.XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
req=tcp://127.0.0.1:$(port)
ev=tcp://127.0.0.1:$(port)
tick_rate=20
threads=$(nproc)
"$rilld" --state "$state" --listen "$req" --events "$ev" --threads "$threads" \
    --kv-cells 65536 --tick-rate "$tick_rate" --ready-file "$state/ready" >"$state/rilld.log" 2>&1 &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; }
trap stop EXIT
for _ in $(seq 1 300); do
    [ -s "$state/ready" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$state/rilld.log" >&2; exit 1; }
    sleep 0.1
done
[ -s "$state/ready" ] || { echo "run.sh: rilld did not start" >&2; cat "$state/rilld.log" >&2; exit 1; }
head -1 "$state/rilld.log"
"$demo" --connect "$req" --events "$ev" --tick-rate "$tick_rate" "$@"
stop
trap - EXIT
echo "rilld stopped; its log and the sessions' logs and snapshots are in $state"
