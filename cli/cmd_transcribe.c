/*
 * cmd_transcribe.c - `rill transcribe`: streaming speech recognition of a file or the
 * microphone (INTERFACES.md, "Speech"), the streaming recognizer of scheduler/rill_asr.h driven
 * in-process.
 *
 * The loop: read 100 ms of 16 kHz audio from the source (ingest/rill_audio.h), feed it, and run a
 * recognizer step whenever a second of new audio has come (rill_asr_ready). A file is read as
 * fast as the machine allows, or at --pace times real time (the reader sleeps until the wall
 * clock reaches audio / pace). --offline is the whole-file baseline: no step until the window
 * is full, so a clip shorter than the window is decoded once, at the end. --timestamps decodes
 * with Whisper's timestamps and trims the window at committed segment ends (not the default
 * yet: docs/architecture.md).
 *
 * Output. --json: a line per change (new committed words or a different tentative tail), with
 * the whole committed text so far, then the final line; the committed text is kept here (the
 * recognizer runs with keep_committed false, so hours of speech keep it bounded; this text is
 * the program's output, which grows with the speech as any transcript does). Without --json on
 * a terminal: committed text is printed as it comes, the tentative tail after it dimmed and
 * rewritten in place (cursor saved before it, restored and cleared at the next change); not on a
 * terminal: only committed text. A summary goes to stderr.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "rill_alloc.h"
#include "rill_asr.h"
#include "rill_audio.h"
#include "rill_backend.h"
#include "rill_log.h"
#include "rill_model.h"
#include "rill_whisper.h"

#define CHUNK       (RILL_AUDIO_RATE / 10) /* samples read per loop (100 ms) */
#define DEFAULT_ASR "whisper-tiny.en.gguf"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct out_state {
    bool json, tty;
    uint64_t t0;
    char *committed; /* the whole committed text */
    size_t len, cap;
    char *tent; /* the last tentative tail shown */
    size_t tent_len, tent_cap;
    bool tent_shown; /* a tentative tail is on the terminal after the saved cursor */
} out_state_t;

static double wall_s(const out_state_t *o) {
    return (double)(rill_now_ns() - o->t0) * 1e-9;
}

/* Shows one update; returns false when out of memory. */
static bool show(out_state_t *o, const rill_asr_update_t *u) {
    const bool changed = u->committed_len > 0 || u->tentative_len != o->tent_len ||
                         memcmp(u->tentative, o->tent != NULL ? o->tent : "", o->tent_len) != 0;
    if (!changed) {
        return true;
    }
    if (!cli_buf_append(&o->committed, &o->len, &o->cap, u->committed, u->committed_len)) {
        return false;
    }
    o->tent_len = 0;
    if (!cli_buf_append(&o->tent, &o->tent_len, &o->tent_cap, u->tentative, u->tentative_len)) {
        return false;
    }
    if (o->json) {
        printf("{\"audio_s\": %.2f, \"wall_s\": %.2f, \"committed\": ", (double)u->audio_ms / 1000,
               wall_s(o));
        cli_json_str(stdout, o->committed, o->len);
        printf(", \"tentative\": ");
        cli_json_str(stdout, u->tentative, u->tentative_len);
        printf("}\n");
    } else if (o->tty) {
        if (o->tent_shown) {
            fputs("\0338\033[J", stdout); /* back to before the old tail, clear it */
        }
        const char *c = u->committed;
        size_t n = u->committed_len;
        if (o->len == n && n > 0 && c[0] == ' ') {
            c++, n--; /* the first words: no leading space */
        }
        fwrite(c, 1, n, stdout);
        fputs("\0337", stdout);
        o->tent_shown = u->tentative_len > 0;
        if (o->tent_shown) {
            fputs(o->len > 0 ? " \033[2m" : "\033[2m", stdout);
            fwrite(u->tentative, 1, u->tentative_len, stdout);
            fputs("\033[0m", stdout);
        }
    } else if (u->committed_len > 0) {
        const char *c = u->committed;
        size_t n = u->committed_len;
        if (o->len == n && c[0] == ' ') {
            c++, n--;
        }
        fwrite(c, 1, n, stdout);
    }
    fflush(stdout);
    return true;
}

int cmd_transcribe(int argc, char **argv) {
    const char *asr_path = NULL, *language = "en";
    bool json = false, mic = false, offline = false, timestamps = false;
    int64_t device = -1, threads = 0, step_ms = 1000;
    double pace = 0;
    const cli_opt_t opts[] = {
        { "asr", NULL, CLI_STRING, &asr_path,
          "Whisper model (GGUF, tools/whisper_to_gguf.py); default models/" DEFAULT_ASR, 0, -1 },
        { "language", NULL, CLI_STRING, &language,
          "spoken language, a code of the model (English-only models: en)", 0, -1 },
        { "json", NULL, CLI_FLAG, &json,
          "one JSON line per change {audio_s, wall_s, committed, tentative}, then "
          "{final, text, audio_s, wall_s, rtf}",
          0, -1 },
        { "mic", NULL, CLI_FLAG, &mic, "transcribe the microphone until Ctrl-C (PortAudio)", 0,
          -1 },
        { "device", NULL, CLI_INT, &device,
          "with --mic: input device index (`rill devices`), -1 = the default input", -1, 1e6 },
        { "pace", NULL, CLI_FLOAT, &pace,
          "read a file at this many times real time (1 = real time); 0 = as fast as possible", 0,
          1000 },
        { "offline", NULL, CLI_FLAG, &offline,
          "decode a file in whole windows (once per 30 s) instead of every step: the offline "
          "baseline",
          0, -1 },
        { "step-ms", NULL, CLI_INT, &step_ms, "new audio between re-decodes, ms", 100, 10000 },
        { "timestamps", NULL, CLI_FLAG, &timestamps,
          "decode with Whisper's timestamps and trim the window at committed segment ends "
          "(experimental: docs/architecture.md, the streaming recognizer)",
          0, -1 },
        { "threads", "-t", CLI_INT, &threads, "compute threads, 0 = one per CPU", 0, 512 },
        { 0 },
    };
    const char *pos[1] = { NULL };
    int n_pos = 0;
    int rc = cli_parse(
        argc, argv, 1, opts,
        "rill transcribe [--asr FILE] [--language en] [--json] [--pace X] (FILE | --mic "
        "[--device N])",
        "Transcribes speech from an audio file (WAV, FLAC: libsndfile; Ogg Opus: libopusfile; any "
        "rate and channels, resampled to 16 kHz) or the microphone, with Whisper run on rill's "
        "kernels. The window is re-decoded about every second; words two consecutive decodes "
        "agree on are committed (never taken back), the rest is tentative and may change. Silence "
        "is skipped (energy detector, then Whisper's no-speech probability). Without --json the "
        "text is printed as it settles (on a terminal the tentative tail is shown dimmed and "
        "rewritten); a summary goes to stderr.",
        pos, 1, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if (mic == (n_pos == 1)) {
        fprintf(stderr, "rill transcribe: give either an audio FILE or --mic\n");
        return 2;
    }
    if (device != -1 && !mic) {
        fprintf(stderr, "rill transcribe: --device goes with --mic\n");
        return 2;
    }
    if (mic && (offline || pace > 0)) {
        fprintf(stderr, "rill transcribe: --offline and --pace are for files\n");
        return 2;
    }
    if (asr_path == NULL) {
        asr_path = cli_find_model(DEFAULT_ASR, NULL);
        if (asr_path == NULL) {
            fprintf(stderr,
                    "rill transcribe: no --asr given and the default model (models/%s) was not "
                    "found; run scripts/setup.sh, which converts it (tools/whisper_to_gguf.py)\n",
                    DEFAULT_ASR);
            return 1;
        }
    }
    out_state_t o = { .json = json, .tty = !json && isatty(STDOUT_FILENO), .t0 = rill_now_ns() };
    int status = 1;
    rill_model_t *model = NULL;
    rill_backend_t *be = NULL;
    rill_whisper_t *w = NULL;
    rill_asr_t *asr = NULL;
    rill_audio_file_t *file = NULL;
    rill_audio_capture_t *cap = NULL;
    float *buf = NULL;
    const char *src = mic ? "the microphone" : pos[0];

    /* The audio first: a missing or unreadable file should not wait for the model. */
    rill_err_t err = RILL_OK;
    if (!mic) {
        err = rill_audio_file_open(pos[0], &file);
        if (err != RILL_OK) {
            fprintf(stderr, "rill transcribe: %s: %s\n", pos[0], rill_last_error(err));
            goto done;
        }
    }
    err = rill_model_load(asr_path, rill_model_default_params(), &model);
    if (err != RILL_OK) {
        fprintf(stderr, "rill transcribe: cannot load %s: %s\n", asr_path, rill_last_error(err));
        goto done;
    }
    if (rill_model_whisper_hparams(model) == NULL) {
        fprintf(stderr,
                "rill transcribe: %s is not a Whisper model (architecture \"%s\"); --asr takes a "
                "GGUF of tools/whisper_to_gguf.py\n",
                asr_path, rill_arch_name(rill_model_hparams(model)->arch));
        goto done;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = (int)threads;
    if ((err = rill_backend_new(&bp, &be)) != RILL_OK) {
        fprintf(stderr, "rill transcribe: backend: %s\n", rill_last_error(err));
        goto done;
    }
    if ((err = rill_whisper_new(model, be, NULL, &w)) != RILL_OK) {
        fprintf(stderr, "rill transcribe: %s: %s\n", asr_path, rill_last_error(err));
        goto done;
    }
    rill_asr_params_t ap = rill_asr_default_params();
    ap.language = language;
    ap.step_ms = (int32_t)step_ms;
    ap.keep_committed = false;
    ap.timestamps = timestamps;
    if (ap.transcript.max_window_ms > ap.window_ms - ap.step_ms) {
        ap.transcript.max_window_ms = ap.window_ms - ap.step_ms;
    }
    if ((err = rill_asr_new(w, model, &ap, &asr)) != RILL_OK) {
        if (err == RILL_ENOTFOUND) {
            fprintf(stderr, "rill transcribe: %s has no language \"%s\"\n", asr_path, language);
        } else {
            fprintf(stderr, "rill transcribe: %s\n", rill_last_error(err));
        }
        goto done;
    }
    if (mic) {
        rill_audio_capture_params_t cp = rill_audio_capture_default_params();
        cp.device = (int32_t)device;
        if ((err = rill_audio_capture_new(&cp, &cap)) != RILL_OK ||
            (err = rill_audio_capture_start(cap)) != RILL_OK) {
            fprintf(stderr, "rill transcribe: microphone: %s\n", rill_last_error(err));
            goto done;
        }
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
    }
    buf = rill_malloc(RILL_MEM_OTHER, CHUNK * sizeof *buf);
    if (buf == NULL) {
        fprintf(stderr, "rill transcribe: out of memory\n");
        goto done;
    }
    int64_t fed = 0;
    rill_asr_update_t u;
    for (;;) {
        int64_t n;
        if (mic) {
            if (g_stop) {
                break;
            }
            n = rill_audio_capture_read(cap, buf, CHUNK);
            if (n == 0) {
                struct timespec ts = { 0, 20 * 1000 * 1000 };
                nanosleep(&ts, NULL);
                continue;
            }
        } else {
            cli_pace_to(o.t0, fed, RILL_AUDIO_RATE, pace, &g_stop);
            n = rill_audio_file_read(file, buf, CHUNK);
            if (n == 0 || g_stop) {
                break;
            }
        }
        if (n < 0) {
            fprintf(stderr, "rill transcribe: %s: %s\n", src, rill_last_error((rill_err_t)n));
            goto done;
        }
        /* Offline: step only when the window cannot take the chunk; a live step every second
         * keeps the window under max_window_ms, so there the room always suffices. */
        while (n > rill_asr_room(asr) || (!offline && rill_asr_ready(asr))) {
            if ((err = rill_asr_step(asr, &u)) != RILL_OK) {
                fprintf(stderr, "rill transcribe: recognizer: %s\n", rill_last_error(err));
                goto done;
            }
            if (!show(&o, &u)) {
                fprintf(stderr, "rill transcribe: out of memory\n");
                goto done;
            }
            if (n > rill_asr_room(asr) && !rill_asr_ready(asr)) {
                break; /* nothing left to decode, and still no room: cannot happen (see asr) */
            }
        }
        if ((err = rill_asr_feed(asr, buf, n)) != RILL_OK) {
            fprintf(stderr, "rill transcribe: recognizer: %s\n", rill_last_error(err));
            goto done;
        }
        fed += n;
    }
    if ((err = rill_asr_finish(asr, &u)) != RILL_OK) {
        fprintf(stderr, "rill transcribe: recognizer: %s\n", rill_last_error(err));
        goto done;
    }
    if (!show(&o, &u)) {
        fprintf(stderr, "rill transcribe: out of memory\n");
        goto done;
    }
    const double audio_s = (double)fed / RILL_AUDIO_RATE;
    const double wall = wall_s(&o);
    const char *text = o.committed != NULL ? o.committed : "";
    size_t text_len = o.len;
    if (text_len > 0 && text[0] == ' ') {
        text++, text_len--;
    }
    if (json) {
        printf("{\"final\": true, \"text\": ");
        cli_json_str(stdout, text, text_len);
        printf(", \"audio_s\": %.2f, \"wall_s\": %.2f, \"rtf\": %.3f}\n", audio_s, wall,
               audio_s > 0 ? wall / audio_s : 0.0);
    } else if (o.len > 0) {
        printf("\n");
    }
    fflush(stdout);
    const rill_asr_stats_t st = rill_asr_stats(asr);
    fprintf(stderr,
            "rill transcribe: %.2f s of audio in %.2f s (rtf %.3f), %lld decodes, %lld tokens, "
            "%lld silent steps skipped, %lld no-speech windows; %s, %d threads\n",
            audio_s, wall, audio_s > 0 ? wall / audio_s : 0.0, (long long)st.decodes,
            (long long)st.tokens, (long long)(st.skipped_silence + st.skipped_settled),
            (long long)st.no_speech, rill_backend_name(be), rill_backend_n_threads(be));
    status = 0;
done:
    if (cap != NULL) {
        rill_audio_capture_stop(cap);
    }
    rill_audio_capture_destroy(&cap);
    rill_audio_file_close(&file);
    rill_asr_destroy(&asr);
    rill_whisper_destroy(&w);
    rill_backend_destroy(&be);
    rill_model_destroy(&model);
    rill_free(buf);
    rill_free(o.committed);
    rill_free(o.tent);
    return status;
}
