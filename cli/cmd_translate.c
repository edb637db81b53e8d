/*
 * cmd_translate.c - `rill translate`: simultaneous translation of a text file read as a stream
 * of words (INTERFACES.md, "Translation"), the translation session of scheduler/rill_translate.h
 * on an in-process scheduler.
 *
 * The loop: every line of --text is one source sentence; each of its words is given to the
 * session (rill_translate_word) and the policy is stepped until it waits for more source; at the
 * line's end the sentence is ended and stepped once more (its turn closes). The file is read as
 * fast as the machine allows: latency is computed from the emission records (src_words,
 * compute_s), not from wall time.
 *
 * Output. --json: one line per emission {"emit", "src_words", "compute_s"}, then {"final": true,
 * "text", "compute_s"}; the whole translation is kept here for that final line (it is the
 * program's output and grows with the talk; the session's memory does not). Without --json the
 * words are printed as they are emitted, a line per sentence, and a summary goes to stderr.
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
#include "rill_chat.h"
#include "rill_log.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_translate.h"

#define DEFAULT_TRANSLATE_MODEL "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
#define DEFAULT_TRANSLATE_FETCH "qwen2.5-coder-1.5b-instruct"

typedef struct out {
    bool json;
    bool oom;
    char *text; /* the whole translation */
    size_t len, cap;
    int64_t compute_ns;
    int64_t emissions;
} out_t;

/* Bytes of the valid UTF-8 sequence at s[0, n), or 0 when it is not one (overlong forms,
 * surrogates and values past U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xE0) == 0xC0 ? 2
                 : (s[0] & 0xF0) == 0xE0 ? 3
                 : (s[0] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || len > n) {
        return 0;
    }
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return 0;
    }
    return len;
}

/* A JSON string of s[0, n); bytes that are not valid UTF-8 (a model may emit any) become
 * U+FFFD, so every line is valid JSON. */
static void json_str(FILE *f, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        const unsigned char c = u[i];
        size_t len = utf8_len(u + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", f);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else {
            fwrite(u + i, 1, len, f);
            i += len;
        }
    }
    fputc('"', f);
}

static bool text_add(out_t *o, const char *s, size_t n) {
    if (o->len + n + 2 > o->cap) {
        size_t cap = o->cap < 256 ? 256 : o->cap;
        while (cap < o->len + n + 2) {
            cap *= 2;
        }
        char *p = rill_realloc(RILL_MEM_OTHER, o->text, cap);
        if (p == NULL) {
            return false;
        }
        o->text = p;
        o->cap = cap;
    }
    memcpy(o->text + o->len, s, n);
    o->len += n;
    o->text[o->len] = '\0';
    return true;
}

static void on_emit(void *user, const rill_translate_emit_t *e) {
    out_t *o = user;
    o->emissions++;
    o->compute_ns = e->compute_ns;
    if ((o->len > 0 && !text_add(o, " ", 1)) || !text_add(o, e->text, e->len)) {
        o->oom = true;
    }
    if (o->json) {
        fputs("{\"emit\": ", stdout);
        json_str(stdout, e->text, e->len);
        printf(", \"src_words\": %lld, \"compute_s\": %.3f}\n", (long long)e->src_words,
               (double)e->compute_ns / 1e9);
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

int cmd_translate(int argc, char **argv) {
    const char *model_path = NULL, *policy = "local-agreement", *text_path = NULL;
    const char *instruction = NULL;
    bool json = false;
    int64_t threads = 0, window = 1024, ctx = 2048, la_chunk = 4, max_reply = 256;
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
        argc, argv, 1, opts, "rill translate [--model FILE] [--policy NAME] [--json] --text FILE",
        "Translates English text into Spanish as it is read, word by word, on one session "
        "(the instruction kept as attention sinks, then alternating source and translation "
        "turns in a window, so a talk of any length runs in bounded memory). Emitted words are "
        "never taken back. The file is processed as fast as the machine allows; latency comes "
        "from the emission records (src_words, compute_s). Speech input (--audio) is not built "
        "yet.",
        NULL, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if (text_path == NULL) {
        fprintf(stderr, "rill translate: give the source with --text FILE\n");
        return 2;
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
    FILE *f = fopen(text_path, "r");
    if (f == NULL) {
        fprintf(stderr, "rill translate: %s: %s\n", text_path, strerror(errno));
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
            fclose(f);
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
    char *line = NULL;
    size_t line_cap = 0;
    out_t o = { .json = json };
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
    ssize_t got;
    status = 0;
    while (status == 0 && (got = getline(&line, &line_cap, f)) >= 0) {
        char *save = NULL;
        for (char *w = strtok_r(line, " \t\r\n\v\f", &save); w != NULL && status == 0;
             w = strtok_r(NULL, " \t\r\n\v\f", &save)) {
            err = rill_translate_word(t, w, strlen(w));
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
        fprintf(stderr, "rill translate: %s: read error\n", text_path);
        status = 1;
    }
    if (status == 0 && o.oom) {
        fprintf(stderr, "rill translate: out of memory\n");
        status = 1;
    }
    if (status == 0) {
        rill_translate_stats_t st;
        rill_translate_stats(t, &st);
        if (json) {
            fputs("{\"final\": true, \"text\": ", stdout);
            json_str(stdout, o.text != NULL ? o.text : "", o.len);
            printf(", \"compute_s\": %.3f}\n", (double)st.compute_ns / 1e9);
        }
        fprintf(stderr,
                "rill translate: %lld source words, %lld sentences, %lld words emitted in %lld "
                "emissions; %lld drafts (%lld tokens); engine %.2f s, wall %.2f s (policy %s)\n",
                (long long)st.src_words, (long long)st.segments, (long long)st.emitted,
                (long long)o.emissions, (long long)st.drafts, (long long)st.draft_tokens,
                (double)st.compute_ns / 1e9, (double)(rill_now_ns() - t0) / 1e9, policy);
    }
done:
    rill_translate_destroy(&t);
    rill_sched_destroy(&sch);
    rill_session_pool_destroy(&pool);
    rill_chat_destroy(&chat);
    local_close(&l);
    free(line);
    rill_free(o.text);
    fclose(f);
    return status;
}
