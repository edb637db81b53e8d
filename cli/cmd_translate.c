/*
 * cmd_translate.c - `rill translate`: simultaneous translation of a text file read as a stream
 * of words, or of speech (INTERFACES.md, "Translation"), the translation session of
 * scheduler/rill_translate.h on an in-process scheduler.
 *
 * --text: every line is one source sentence; each of its words is given to the session
 * (rill_translate_word) and the policy is stepped until it waits for more source; at the line's
 * end the sentence is ended and stepped once more (its turn closes).
 *
 * --audio: the streaming recognizer (scheduler/rill_asr.h) runs in this thread exactly as
 * `rill transcribe` runs it (100 ms read per loop, a step per second of new audio, its own CPU
 * backend), and each step's newly committed text goes to rill_translate_feed_text, which reads
 * its words, ends segments at sentence-ending punctuation and steps the policy; the end of the
 * file is a pause (the recognizer's finish commits the tail, the open segment is closed). The
 * recognizer and the translation take turns on one thread: on a 2-core machine two engines at
 * once would only slow each other, and the records stay exact (src_s is the audio the
 * recognizer had consumed when the words were written; compute_s the translation engine's busy
 * time plus the recognizer's step time, both spent before that line). Rejected: the scheduler's
 * own recognizer class (rill_sched_asr_attach) feeding a session, which suits rilld (server/
 * translation.c): here it would add a thread hand-off for no gain in a file-driven command.
 *
 * Files are read as fast as the machine allows (or at --pace times real time for --audio):
 * latency is computed from the emission records (src_words or src_s, compute_s), not wall time.
 *
 * Output. --json: one line per emission {"emit", "src_words", "compute_s"} (--audio: {"emit",
 * "src_s", "src_words", "compute_s"}), then {"final": true, "text", "compute_s"} (--audio: with
 * "src_s" and "transcript", the recognizer's committed text); the whole translation (and
 * transcript) is kept here for that final line (it is the program's output and grows with the
 * talk; the session's memory does not). Without --json the words are printed as they are
 * emitted, a line per sentence, and a summary goes to stderr.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_alloc.h"
#include "rill_asr.h"
#include "rill_audio.h"
#include "rill_backend.h"
#include "rill_chat.h"
#include "rill_log.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_translate.h"

#define DEFAULT_TRANSLATE_MODEL "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
#define DEFAULT_TRANSLATE_FETCH "qwen2.5-coder-1.5b-instruct"
#define DEFAULT_ASR             "whisper-tiny.en.gguf"
#define CHUNK                   (RILL_AUDIO_RATE / 10) /* samples read per loop (100 ms) */

typedef struct out {
    bool json;
    bool oom;
    char *text; /* the whole translation */
    size_t len, cap;
    int64_t compute_ns;
    int64_t emissions;
    bool audio;        /* --audio: the records carry src_s */
    int64_t audio_fed; /* 16 kHz samples the recognizer has consumed */
    int64_t asr_ns;    /* the recognizer's step time so far */
    char *src;         /* --audio: the committed transcript (the final line's "transcript") */
    size_t src_len, src_cap;
} out_t;

static bool text_add(out_t *o, const char *s, size_t n) {
    return cli_buf_append(&o->text, &o->len, &o->cap, s, n);
}

static void on_emit(void *user, const rill_translate_emit_t *e) {
    out_t *o = user;
    o->emissions++;
    o->compute_ns = e->compute_ns + o->asr_ns;
    if ((o->len > 0 && !text_add(o, " ", 1)) || !text_add(o, e->text, e->len)) {
        o->oom = true;
    }
    if (o->json) {
        fputs("{\"emit\": ", stdout);
        cli_json_str(stdout, e->text, e->len);
        if (o->audio) {
            printf(", \"src_s\": %.3f", (double)o->audio_fed / RILL_AUDIO_RATE);
        }
        printf(", \"src_words\": %lld, \"compute_s\": %.3f}\n", (long long)e->src_words,
               (double)o->compute_ns / 1e9);
    } else {
        printf("%.*s%s", (int)e->len, e->text, e->segment_end ? "\n" : " ");
    }
    fflush(stdout);
}

/* $RILL_CACHE/models, else ${XDG_CACHE_HOME:-~/.cache}/rill/models (tools/fetch_model.py). */
static const char *cached_model(char *buf, size_t cap, const char *file) {
    const char *rc = getenv("RILL_CACHE");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (rc != NULL && rc[0] != '\0') {
        n = snprintf(buf, cap, "%s/models/%s", rc, file);
    } else if (xdg != NULL && xdg[0] != '\0') {
        n = snprintf(buf, cap, "%s/rill/models/%s", xdg, file);
    } else {
        n = snprintf(buf, cap, "%s/.cache/rill/models/%s", home != NULL ? home : "", file);
    }
    return n > 0 && (size_t)n < cap ? buf : NULL;
}

/* Steps until the policy waits; returns 0 or prints the error and returns 1. */
static int drain(rill_translate_t *t) {
    for (;;) {
        rill_err_t err = rill_translate_step(t);
        if (err == RILL_EAGAIN) {
            return 0;
        }
        if (err != RILL_OK) {
            fprintf(stderr, "rill translate: %s\n", rill_last_error(err));
            return 1;
        }
    }
}

/* The recognizer of --audio: the file, the Whisper model on its own backend, the recognizer. */
typedef struct speech {
    rill_audio_file_t *file;
    rill_model_t *model;
    rill_backend_t *be;
    rill_whisper_t *w;
    rill_asr_t *asr;
} speech_t;

static void speech_close(speech_t *sp) {
    rill_audio_file_close(&sp->file);
    rill_asr_destroy(&sp->asr);
    rill_whisper_destroy(&sp->w);
    rill_backend_destroy(&sp->be);
    rill_model_destroy(&sp->model);
}

/* Opens the audio first (a missing file should not wait for a model), then the recognizer as
 * `rill transcribe` makes it. 0, or 1 with the reason printed (sp then holds what was opened:
 * speech_close it). */
static int speech_open(speech_t *sp, const char *asr_path, const char *audio_path,
                       int64_t threads) {
    rill_err_t err = rill_audio_file_open(audio_path, &sp->file);
    if (err != RILL_OK) {
        fprintf(stderr, "rill translate: %s: %s\n", audio_path, rill_last_error(err));
        return 1;
    }
    err = rill_model_load(asr_path, rill_model_default_params(), &sp->model);
    if (err != RILL_OK) {
        fprintf(stderr, "rill translate: cannot load %s: %s\n", asr_path, rill_last_error(err));
        return 1;
    }
    if (rill_model_whisper_hparams(sp->model) == NULL) {
        fprintf(stderr,
                "rill translate: %s is not a Whisper model (architecture \"%s\"); --asr takes a "
                "GGUF of tools/whisper_to_gguf.py\n",
                asr_path, rill_arch_name(rill_model_hparams(sp->model)->arch));
        return 1;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = (int)threads;
    if ((err = rill_backend_new(&bp, &sp->be)) != RILL_OK ||
        (err = rill_whisper_new(sp->model, sp->be, NULL, &sp->w)) != RILL_OK) {
        fprintf(stderr, "rill translate: recognizer: %s\n", rill_last_error(err));
        return 1;
    }
    rill_asr_params_t ap = rill_asr_default_params();
    ap.language = "en";
    ap.keep_committed = false; /* the translation has each committed delta */
    if (ap.transcript.max_window_ms > ap.window_ms - ap.step_ms) {
        ap.transcript.max_window_ms = ap.window_ms - ap.step_ms;
    }
    if ((err = rill_asr_new(sp->w, sp->model, &ap, &sp->asr)) != RILL_OK) {
        fprintf(stderr, "rill translate: recognizer: %s\n", rill_last_error(err));
        return 1;
    }
    return 0;
}

/* One recognizer step (finish: the end of the stream) and its committed words into t. 0, or 1
 * with the reason printed. */
static int asr_step(speech_t *sp, rill_translate_t *t, out_t *o, bool finish) {
    rill_asr_update_t u;
    uint64_t t0 = rill_now_ns();
    rill_err_t err = finish ? rill_asr_finish(sp->asr, &u) : rill_asr_step(sp->asr, &u);
    o->asr_ns += (int64_t)(rill_now_ns() - t0);
    if (err != RILL_OK) {
        fprintf(stderr, "rill translate: recognizer: %s\n", rill_last_error(err));
        return 1;
    }
    if (u.committed_len > 0) {
        const char *c = u.committed;
        size_t n = u.committed_len;
        if (o->src_len == 0 && c[0] == ' ') {
            c++, n--;
        }
        if (!cli_buf_append(&o->src, &o->src_len, &o->src_cap, c, n)) {
            o->oom = true;
        }
    }
    err = rill_translate_feed_text(t, u.committed, u.committed_len, finish, NULL);
    if (err != RILL_OK) {
        fprintf(stderr, "rill translate: %s\n", rill_last_error(err));
        return 1;
    }
    return 0;
}

/* --audio: the recognizer's committed words into t as the file is read. 0 or 1. */
static int translate_audio(speech_t *sp, rill_translate_t *t, out_t *o, const char *path,
                           double pace, uint64_t t0) {
    float *buf = rill_malloc(RILL_MEM_OTHER, CHUNK * sizeof *buf);
    if (buf == NULL) {
        fprintf(stderr, "rill translate: out of memory\n");
        return 1;
    }
    int status = 0;
    for (;;) {
        cli_pace_to(t0, o->audio_fed, RILL_AUDIO_RATE, pace, NULL);
        int64_t n = rill_audio_file_read(sp->file, buf, CHUNK);
        if (n == 0) {
            break;
        }
        if (n < 0) {
            fprintf(stderr, "rill translate: %s: %s\n", path, rill_last_error((rill_err_t)n));
            status = 1;
            break;
        }
        /* a step per second of new audio keeps the window under its maximum (as transcribe) */
        while (status == 0 && (n > rill_asr_room(sp->asr) || rill_asr_ready(sp->asr))) {
            status = asr_step(sp, t, o, false);
            if (n > rill_asr_room(sp->asr) && !rill_asr_ready(sp->asr)) {
                break;
            }
        }
        rill_err_t err = status == 0 ? rill_asr_feed(sp->asr, buf, n) : RILL_OK;
        if (err != RILL_OK) {
            fprintf(stderr, "rill translate: recognizer: %s\n", rill_last_error(err));
            status = 1;
        }
        if (status != 0) {
            break;
        }
        o->audio_fed += n;
    }
    if (status == 0) {
        status = asr_step(sp, t, o, true);
    }
    rill_free(buf);
    return status;
}

/* --text: a line is a sentence, read a word at a time. 0 or 1. */
static int translate_text(FILE *f, rill_translate_t *t, const char *path) {
    char *line = NULL;
    size_t line_cap = 0;
    int status = 0;
    while (status == 0 && getline(&line, &line_cap, f) >= 0) {
        char *save = NULL;
        for (char *w = strtok_r(line, " \t\r\n\v\f", &save); w != NULL && status == 0;
             w = strtok_r(NULL, " \t\r\n\v\f", &save)) {
            rill_err_t err = rill_translate_word(t, w, strlen(w));
            if (err != RILL_OK) {
                fprintf(stderr, "rill translate: %s\n", rill_last_error(err));
                status = 1;
                break;
            }
            status = drain(t);
        }
        if (status == 0) {
            (void)rill_translate_end_sentence(t);
            status = drain(t);
        }
    }
    if (status == 0 && ferror(f)) {
        fprintf(stderr, "rill translate: %s: read error\n", path);
        status = 1;
    }
    free(line);
    return status;
}

int cmd_translate(int argc, char **argv) {
    const char *model_path = NULL, *policy = "local-agreement", *text_path = NULL;
    const char *instruction = NULL, *audio_path = NULL, *asr_path = NULL;
    bool json = false;
    int64_t threads = 0, window = 1024, ctx = 2048, la_chunk = 4, max_reply = 256;
    double pace = 0;
    const cli_opt_t opts[] = {
        { "model", NULL, CLI_STRING, &model_path,
          "an instruct GGUF with a chat template; default " DEFAULT_TRANSLATE_MODEL
          " in rill's model cache (tools/fetch_model.py " DEFAULT_TRANSLATE_FETCH ")",
          0, -1 },
        { "policy", NULL, CLI_STRING, &policy,
          "when to write: local-agreement (words two consecutive drafts agree on), wait-k "
          "(k = 3) or wait-N (N source words ahead), sentence (whole sentences)",
          0, -1 },
        { "json", NULL, CLI_FLAG, &json,
          "one JSON line per emission {emit, src_words, compute_s}, then {final, text, "
          "compute_s}",
          0, -1 },
        { "text", NULL, CLI_STRING, &text_path,
          "source text, one sentence per line, read as a stream of words", 0, -1 },
        { "audio", NULL, CLI_STRING, &audio_path,
          "source speech (WAV, FLAC, Ogg Opus), transcribed as it is read; its committed words "
          "are translated, a sentence ending at its punctuation",
          0, -1 },
        { "asr", NULL, CLI_STRING, &asr_path,
          "with --audio: the Whisper model (GGUF); default models/" DEFAULT_ASR, 0, -1 },
        { "pace", NULL, CLI_FLOAT, &pace,
          "with --audio: read at this many times real time (1 = real time); 0 = as fast as "
          "possible",
          0, 1000 },
        { "instruction", NULL, CLI_STRING, &instruction,
          "the system message (default: English into Spanish, the translation only)", 0, -1 },
        { "la-chunk", NULL, CLI_INT, &la_chunk, "local agreement: new source words between drafts",
          1, 64 },
        { "window", NULL, CLI_INT, &window,
          "recent tokens the session keeps beside the instruction (its attention sinks)", 16,
          1 << 20 },
        { "max-reply", NULL, CLI_INT, &max_reply, "most tokens of one sentence's translation", 1,
          4096 },
        { "ctx", NULL, CLI_INT, &ctx, "most positions of the session (window, sinks, a turn)", 256,
          1 << 20 },
        { "threads", "-t", CLI_INT, &threads, "compute threads, 0 = one per CPU", 0, 512 },
        { 0 },
    };
    int n_pos = 0;
    int rc = cli_parse(
        argc, argv, 1, opts,
        "rill translate [--model FILE] [--asr FILE] [--policy NAME] [--json] (--audio FILE | "
        "--text FILE)",
        "Translates English text into Spanish as it is read, word by word, on one session "
        "(the instruction kept as attention sinks, then alternating source and translation "
        "turns in a window, so a talk of any length runs in bounded memory). Emitted words are "
        "never taken back. Speech (--audio) is transcribed as it is read and its committed words "
        "are translated. Files are processed as fast as the machine allows; latency comes from "
        "the emission records (src_words or src_s, compute_s).",
        NULL, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if ((text_path == NULL) == (audio_path == NULL)) {
        fprintf(stderr,
                "rill translate: give the source with either --text FILE or --audio FILE\n");
        return 2;
    }
    if (audio_path == NULL && (asr_path != NULL || pace > 0)) {
        fprintf(stderr, "rill translate: --asr and --pace go with --audio\n");
        return 2;
    }
    if (audio_path != NULL && asr_path == NULL) {
        asr_path = cli_find_model(DEFAULT_ASR, NULL);
        if (asr_path == NULL) {
            fprintf(stderr,
                    "rill translate: no --asr given and the default model (models/%s) was not "
                    "found; run scripts/setup.sh, which converts it (tools/whisper_to_gguf.py)\n",
                    DEFAULT_ASR);
            return 1;
        }
    }
    rill_translate_params_t tp = rill_translate_default_params();
    if (rill_translate_policy_parse(&tp, policy) != RILL_OK) {
        fprintf(stderr,
                "rill translate: unknown --policy \"%s\" (local-agreement, wait-k, wait-N, "
                "sentence)\n",
                policy);
        return 2;
    }
    if (window < max_reply + 64 || window + max_reply + 64 > ctx) {
        fprintf(stderr,
                "rill translate: --window %lld must hold a turn (at least --max-reply %lld + 64) "
                "and --ctx %lld the window, the instruction and a draft (at least window + "
                "max-reply + 64)\n",
                (long long)window, (long long)max_reply, (long long)ctx);
        return 2;
    }
    FILE *f = NULL;
    speech_t sp;
    memset(&sp, 0, sizeof sp);
    if (text_path != NULL && (f = fopen(text_path, "r")) == NULL) {
        fprintf(stderr, "rill translate: %s: %s\n", text_path, strerror(errno));
        return 1;
    }
    if (audio_path != NULL && speech_open(&sp, asr_path, audio_path, threads) != 0) {
        speech_close(&sp);
        return 1;
    }
    char mbuf[4096];
    if (model_path == NULL) {
        model_path = cached_model(mbuf, sizeof mbuf, DEFAULT_TRANSLATE_MODEL);
        FILE *probe = model_path != NULL ? fopen(model_path, "rb") : NULL;
        if (probe == NULL) {
            fprintf(stderr,
                    "rill translate: no --model given and the default model (%s) is not in "
                    "rill's model cache (%s); fetch it with `tools/fetch_model.py %s`\n",
                    DEFAULT_TRANSLATE_MODEL, model_path != NULL ? model_path : "?",
                    DEFAULT_TRANSLATE_FETCH);
            if (f != NULL) {
                fclose(f);
            }
            speech_close(&sp);
            return 1;
        }
        fclose(probe);
    }
    int status = 1;
    local_t l;
    memset(&l, 0, sizeof l);
    rill_chat_t *chat = NULL;
    rill_session_pool_t *pool = NULL;
    rill_sched_t *sch = NULL;
    rill_translate_t *t = NULL;
    out_t o = { .json = json, .audio = audio_path != NULL };
    local_opts_t lo = { .model_path = model_path, .threads = threads, .n_ctx = 256 };
    if (local_open(&l, &lo) != 0) {
        goto done;
    }
    if (ctx > l.hp->n_ctx_train) {
        fprintf(stderr, "rill translate: --ctx %lld exceeds the model's training context %d\n",
                (long long)ctx, l.hp->n_ctx_train);
        goto done;
    }
    rill_err_t err = rill_chat_new_gguf(rill_model_gguf(l.model), RILL_CHAT_AUTO, &chat);
    if (err != RILL_OK) {
        fprintf(stderr,
                "rill translate: %s: no chat template rill can render (%s); --model takes an "
                "instruct GGUF (ChatML or Llama 3)\n",
                model_path, rill_last_error(err));
        goto done;
    }
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_ctx = (int32_t)ctx;
    pp.n_cells = 2 * ctx + 2048; /* the window, forks of drafts and the overflow pages a step
                                    holds back (2 * ceil(step_tokens / P)) */
    pp.tokenizer = l.tok;
    err = rill_session_pool_new(l.fw, &pp, &pool);
    if (err == RILL_OK) {
        err = rill_sched_new(pool, NULL, &sch);
    }
    if (err != RILL_OK) {
        fprintf(stderr, "rill translate: engine: %s\n", rill_last_error(err));
        goto done;
    }
    tp.tok = l.tok;
    tp.chat = chat;
    tp.window = (int32_t)window;
    tp.la_chunk = (int32_t)la_chunk;
    tp.instruction = instruction;
    tp.max_reply_tokens = (int32_t)max_reply;
    tp.on_emit = on_emit;
    tp.user = &o;
    err = rill_translate_new(sch, &tp, &t);
    if (err != RILL_OK) {
        fprintf(stderr, "rill translate: session: %s\n", rill_last_error(err));
        goto done;
    }
    uint64_t t0 = rill_now_ns();
    status = f != NULL ? translate_text(f, t, text_path)
                       : translate_audio(&sp, t, &o, audio_path, pace, t0);
    if (status == 0 && o.oom) {
        fprintf(stderr, "rill translate: out of memory\n");
        status = 1;
    }
    if (status == 0) {
        rill_translate_stats_t st;
        rill_translate_stats(t, &st);
        const double compute_s = (double)(st.compute_ns + o.asr_ns) / 1e9;
        if (json) {
            fputs("{\"final\": true, \"text\": ", stdout);
            cli_json_str(stdout, o.text != NULL ? o.text : "", o.len);
            if (o.audio) {
                printf(", \"src_s\": %.3f, \"transcript\": ",
                       (double)o.audio_fed / RILL_AUDIO_RATE);
                cli_json_str(stdout, o.src != NULL ? o.src : "", o.src_len);
            }
            printf(", \"compute_s\": %.3f}\n", compute_s);
        }
        fprintf(stderr,
                "rill translate: %lld source words, %lld sentences, %lld words emitted in %lld "
                "emissions; %lld drafts (%lld tokens); engine %.2f s, wall %.2f s (policy %s)\n",
                (long long)st.src_words, (long long)st.segments, (long long)st.emitted,
                (long long)o.emissions, (long long)st.drafts, (long long)st.draft_tokens, compute_s,
                (double)(rill_now_ns() - t0) / 1e9, policy);
        if (o.audio) {
            fprintf(stderr, "rill translate: %.2f s of audio, recognizer %.2f s of that compute\n",
                    (double)o.audio_fed / RILL_AUDIO_RATE, (double)o.asr_ns / 1e9);
        }
    }
done:
    rill_translate_destroy(&t);
    rill_sched_destroy(&sch);
    rill_session_pool_destroy(&pool);
    rill_chat_destroy(&chat);
    local_close(&l);
    speech_close(&sp);
    rill_free(o.text);
    rill_free(o.src);
    if (f != NULL) {
        fclose(f);
    }
    return status;
}
