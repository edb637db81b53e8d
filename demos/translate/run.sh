#!/usr/bin/env bash
# The live translation demo (issue 22; INTERFACES.md "Translation"): `scripts/run.sh translate
# [FILE]` builds, then runs this. It starts rilld with the recognizer (whisper-tiny.en, set-up's)
# and the language model (Qwen2.5-Coder-1.5B-Instruct from rill's model cache, fetched by
# `scripts/setup.sh --translate`; RILL_MODEL=FILE for another instruct GGUF, e.g. the 0.5B),
# serves the captions page at http://127.0.0.1:8080/captions/talk (RILL_HTTP=HOST:PORT moves
# it), streams FILE (any format PyAV decodes) or the bundled recording at real time through
# ingest.audio (demos/translate/stream.py), prints the captions as they come and a summary.
#
# The bundled recording is made here, deterministically, by espeak-ng (voice en-us, 150 words a
# minute; the text is demos/translate/talk.txt) into build/translate_talk.wav: nothing binary is
# committed. RILL_POLICY picks the policy (default local-agreement), RILL_ASR the recognizer,
# RILL_INSTRUCTION the translation's instruction, RILL_PACE the pace (1: real time).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${RILL_BUILD:-build}
rilld=$build/cli/rilld
die() { echo "run.sh translate: $*" >&2; exit 1; }
[ -x "$rilld" ] || die "$rilld is missing: build first (scripts/run.sh does)"
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
model=${RILL_MODEL:-${RILL_CACHE:-$HOME/.cache/rill}/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf}
[ -f "$model" ] ||
    die "$model is missing: scripts/setup.sh --translate fetches it (or RILL_MODEL=FILE)"
asr=${RILL_ASR:-models/whisper-tiny.en.gguf}
[ -f "$asr" ] || die "$asr is missing: run scripts/setup.sh"
audio=${1:-}
if [ -z "$audio" ]; then
    audio=$build/translate_talk.wav
    command -v espeak-ng >/dev/null || die "espeak-ng is missing (scripts/setup.sh installs it)"
    if [ ! -f "$audio" ] || [ demos/translate/talk.txt -nt "$audio" ]; then
        espeak-ng -v en-us -s 150 -w "$audio" -f demos/translate/talk.txt
    fi
fi
[ -f "$audio" ] || die "$audio: no such file"
http=${RILL_HTTP:-127.0.0.1:8080}
state=$(mktemp -d /tmp/rill-translate-demo.XXXXXX)
port() {
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
req=tcp://127.0.0.1:$(port)
ev=tcp://127.0.0.1:$(port)
"$rilld" --model "llm=$model" --model "asr=$asr" --state "$state" --listen "$req" --events "$ev" \
    --http "$http" --threads "$(nproc)" --ready-file "$state/ready" >"$state/rilld.log" 2>&1 &
pid=$!
stop() { kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; rm -rf "$state"; }
trap stop EXIT
for _ in $(seq 1 1200); do
    [ -s "$state/ready" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$state/rilld.log" >&2; exit 1; }
    sleep 0.1
done
[ -s "$state/ready" ] || { cat "$state/rilld.log" >&2; die "rilld did not start"; }
"$py" demos/translate/stream.py --connect "$req" --events "$ev" --http "$http" \
    --policy "${RILL_POLICY:-local-agreement}" --pace "${RILL_PACE:-1}" \
    ${RILL_INSTRUCTION:+--system "$RILL_INSTRUCTION"} "$audio"
