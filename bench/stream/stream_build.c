/*
 * stream_build.c - the stream benchmark's workload, built whole before anything runs (see
 * stream_internal.h): each session's synthetic market rendered as text lines and tokenized,
 * the questions placed every --every ticks, the context buckets; and --export's JSON of it
 * for bench/stream_llama.py, so that llama.cpp replays exactly the same stream. Each session's
 * lines also go into its market truth (chunk c at version c + 1), which scores the answers.
 */
#include <errno.h>
#include <string.h>

#include "cli.h"
#include "rill_alloc.h"
#include "rill_chat.h"
#include "rill_market.h"
#include "rill_market_prompt.h"
#include "rill_model.h"
#include "stream_internal.h"

/* The questions as a user asks them (the market truth's template table classifies them);
 * how they are put to the model - the chat template, the answer-form instruction, the system
 * prompt - is rill_market_prompt.h's, and prompt_text() below. */
static const char *const QUESTIONS[] = {
    "Which symbol moved most in the last minute, and by how much? Answer with the symbol and "
    "its change.",
    "Is AAPL above its open? Answer yes or no, then give the last AAPL price from the feed.",
    "What was the last MSFT price in the feed above, and was that trade a buy or a sell?",
    "Which symbol traded the largest size in the last minute? Answer with the symbol and the "
    "size.",
    "Is NVDA going up or down over its last ten trades? Answer up, down or flat, with its last "
    "price.",
    "How many of the last ten BTC-USD trades were sells? Answer with one number only.",
};
_Static_assert(sizeof QUESTIONS / sizeof QUESTIONS[0] == N_QUESTIONS, "N_QUESTIONS");

static const char *const STANDING = "What is the latest price of each symbol in the feed above? "
                                    "Answer as a list of symbol and price pairs.";

/* The fixed form for a model without a chat template (or --no-chat), as rilld's
 * --question-format default (RILL_SERVER_QUESTION_FORMAT). */
#define PLAIN_BEFORE "\nQuestion: "
#define PLAIN_AFTER  "\nAnswer:"

static bool grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    int64_t n = *cap > 0 ? *cap : 64;
    while (n < need) {
        n *= 2;
    }
    void *q = rill_realloc(RILL_MEM_OTHER, *p, (size_t)n * elem);
    if (q == NULL) {
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

/* Tokenizes text (bos/eos only when add_special; chat markers as special tokens when the
 * prompts are chat turns) into a new array. */
static int tokenize(bench_t *b, const char *text, size_t len, bool add_special, int32_t **out,
                    int32_t *n) {
    bool special = b->chat != NULL;
    int64_t cnt = rill_tokenizer_encode(b->l.tok, text, len, add_special, special, NULL, 0);
    if (cnt < 0) {
        fprintf(stderr, "rill bench stream: tokenizer: %s\n", rill_strerror((rill_err_t)cnt));
        return 1;
    }
    *out = rill_malloc(RILL_MEM_OTHER, (size_t)(cnt > 0 ? cnt : 1) * sizeof **out);
    if (*out == NULL) {
        return 1;
    }
    *n = (int32_t)rill_tokenizer_encode(b->l.tok, text, len, add_special, special, *out, cnt);
    return *n == cnt ? 0 : 1;
}

/* The text put to the model for question q (NUL-terminated, into buf[0..cap)): with a chat
 * template a user turn continuing the session (rill_chat_apply_turns) and the assistant's
 * header, as rilld puts a question; else the fixed form. The question carries its kind's
 * instruction when --instruct says so. Returns the length, or -1 when it does not fit. */
static int64_t question_text(const bench_t *b, const char *q, char *buf, size_t cap) {
    char with[1024];
    int64_t n = rill_market_prompt_question(q, strlen(q), b->o.instruct, with, sizeof with);
    if (n < 0) {
        return -1;
    }
    if (b->chat != NULL) {
        rill_chat_msg_t m = { .role = "user", .content = with };
        n = rill_chat_apply_turns(b->chat, &m, 1, true, buf, cap);
    } else {
        n = snprintf(buf, cap, PLAIN_BEFORE "%s" PLAIN_AFTER, with);
    }
    return n >= 0 && (size_t)n < cap ? n : -1;
}

/* The session's system prompt (the shared prompt every session starts with): the feed's
 * description and, by --instruct, the answer rules; a system turn with a chat template. */
static int64_t system_text(const bench_t *b, char *buf, size_t cap) {
    const char *sys = rill_market_prompt_system(b->o.instruct);
    int64_t n;
    if (b->chat != NULL) {
        rill_chat_msg_t m = { .role = "system", .content = sys };
        n = rill_chat_apply(b->chat, &m, 1, false, buf, cap);
    } else {
        n = snprintf(buf, cap, "%s", sys);
    }
    return n >= 0 && (size_t)n < cap ? n : -1;
}

/* ---- the stream ------------------------------------------------------------------------- */

static int bucket_of(const bench_t *b, int32_t context) {
    for (int i = 0; i < b->n_buckets; i++) {
        if (context <= b->buckets[i]) {
            return i;
        }
    }
    return b->n_buckets - 1;
}

/* One session's chunks and questions, until its context would pass --context or the time
 * --duration. */
static int build_session(bench_t *b, int32_t s, rill_tokenizer_work_t *work) {
    sstream_t *ss = &b->ss[s];
    rill_market_synth_params_t sp = rill_market_synth_default_params();
    sp.seed = (uint64_t)b->o.seed + (uint64_t)s;
    sp.n_symbols = N_SYMBOLS;
    sp.rate_hz = b->o.rate;
    sp.burst_prob = 0.02; /* short bursts every ~50 ticks, 4x the rate, 4x the volatility */
    sp.burst_ticks = 12;
    sp.burst_rate_mult = 4;
    sp.burst_vol_mult = 4;
    rill_market_synth_t *syn = NULL;
    rill_market_fmt_t *fmt = NULL;
    rill_err_t err = rill_market_synth_new(&sp, &syn);
    if (err == RILL_OK) {
        err = rill_market_fmt_new(NULL, &fmt);
    }
    if (err == RILL_OK) {
        err = rill_market_truth_new(NULL, &ss->truth);
    }
    for (int64_t i = 0; err == RILL_OK && i < rill_market_synth_n_symbols(syn); i++) {
        const char *name = NULL;
        int32_t dec = 0;
        err = rill_market_synth_symbol(syn, i, &name, &dec);
        if (err == RILL_OK) {
            err = rill_market_fmt_set_decimals(fmt, name, dec);
        }
    }
    int64_t dur_ns = b->o.duration > 0 ? (int64_t)(b->o.duration * 1e9) : INT64_MAX;
    int32_t context = b->n_prompt;
    ss->q_first = (int32_t)b->n_qs;
    while (err == RILL_OK) {
        rill_tick_t t;
        char line[RILL_MARKET_LINE_MAX];
        if ((err = rill_market_synth_next(syn, &t)) != RILL_OK) {
            break;
        }
        int64_t t_ns = t.ts_ns - sp.start_ts_ns;
        if (t_ns > dur_ns) {
            break;
        }
        int64_t len = rill_market_fmt_tick(fmt, &t, line, sizeof line);
        if (len < 0) {
            err = (rill_err_t)len;
            break;
        }
        if (!grow((void **)&ss->tokens, &ss->cap_tokens, ss->n_tokens + len + 8, sizeof(int32_t))) {
            err = RILL_ENOMEM;
            break;
        }
        int64_t n = rill_tokenizer_encode_with(b->l.tok, work, line, (size_t)len, false, false,
                                               ss->tokens + ss->n_tokens,
                                               ss->cap_tokens - ss->n_tokens, NULL);
        if (n < 0) {
            err = (rill_err_t)n;
            break;
        }
        if (context + n > b->o.context) {
            break;
        }
        if (!grow((void **)&ss->chunks, &ss->cap_chunks, ss->n_chunks + 1, sizeof(chunk_t)) ||
            !grow((void **)&b->text, &b->text_cap, b->text_len + len + 1, 1)) {
            err = RILL_ENOMEM;
            break;
        }
        chunk_t *c = &ss->chunks[ss->n_chunks++];
        memset(c, 0, sizeof *c);
        c->t_ns = t_ns;
        c->text_off = b->text_len;
        c->text_len = (int32_t)len;
        c->tok_off = ss->n_tokens;
        c->n_tok = (int32_t)n;
        memcpy(b->text + b->text_len, line, (size_t)len);
        b->text_len += len;
        if ((err = rill_market_truth_feed(ss->truth, line, (size_t)len, ss->n_chunks, t_ns)) !=
            RILL_OK) {
            break;
        }
        ss->n_tokens += n;
        context += (int32_t)n;
        if (++ss->ticks % b->o.every == 0) {
            if (!grow((void **)&b->qs, &b->cap_qs, b->n_qs + 1, sizeof(question_t))) {
                err = RILL_ENOMEM;
                break;
            }
            question_t *q = &b->qs[b->n_qs++];
            memset(q, 0, sizeof *q);
            q->session = s;
            q->index = ss->n_q++;
            q->kind = (s + q->index) % N_QUESTIONS;
            q->consistency = !b->o.consistency_both                        ? b->o.consistency
                             : ((s + q->index) / N_QUESTIONS + s) % 2 == 0 ? RILL_SCHED_ACKNOWLEDGED
                                                                           : RILL_SCHED_EVALUATED;
            q->after = (int32_t)ss->n_chunks;
            q->context = context;
            q->t_ns = t_ns;
        }
    }
    rill_market_fmt_destroy(&fmt);
    rill_market_synth_destroy(&syn);
    if (err != RILL_OK) {
        fprintf(stderr, "rill bench stream: building the stream of session %d: %s\n", s,
                rill_strerror(err));
        return 1;
    }
    return 0;
}

int rill__stream_build(bench_t *b) {
    if (!b->o.no_chat &&
        rill_chat_new_gguf(rill_model_gguf(b->l.model), RILL_CHAT_AUTO, &b->chat) != RILL_OK) {
        b->chat = NULL; /* no template rill renders: the fixed form */
    }
    int64_t n = b->o.no_prompt ? 0 : system_text(b, b->prompt_text, sizeof b->prompt_text);
    if (n < 0) {
        fprintf(stderr, "rill bench stream: the system prompt does not fit\n");
        return 1;
    }
    b->prompt_text[n] = '\0';
    n = question_text(b, STANDING, b->stand_text, sizeof b->stand_text);
    if (n < 0 ||
        tokenize(b, b->prompt_text, strlen(b->prompt_text), !b->o.no_prompt, &b->prompt,
                 &b->n_prompt) != 0 ||
        tokenize(b, b->stand_text, (size_t)n, false, &b->stok, &b->n_stok) != 0) {
        return 1;
    }
    b->max_q = b->n_stok;
    rill_market_question_parse(STANDING, strlen(STANDING), &b->sq);
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        n = question_text(b, QUESTIONS[k], b->q_text[k], sizeof b->q_text[k]);
        if (n < 0 || tokenize(b, b->q_text[k], (size_t)n, false, &b->qtok[k], &b->n_qtok[k]) != 0) {
            return 1;
        }
        b->max_q = b->n_qtok[k] > b->max_q ? b->n_qtok[k] : b->max_q;
        rill_market_question_parse(QUESTIONS[k], strlen(QUESTIONS[k]), &b->qq[k]);
    }
    b->ss = rill_calloc(RILL_MEM_OTHER, (size_t)b->o.sessions, sizeof *b->ss);
    rill_tokenizer_work_t *work = NULL;
    if (b->ss == NULL || rill_tokenizer_work_new(&work) != RILL_OK) {
        fprintf(stderr, "rill bench stream: out of memory\n");
        return 1;
    }
    for (int32_t e = MIN_BUCKET; b->n_buckets < MAX_BUCKETS; e *= 2) {
        b->buckets[b->n_buckets++] = e;
        if (e >= b->o.context) {
            break;
        }
    }
    int rc = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions && rc == 0; s++) {
        rc = build_session(b, s, work);
    }
    rill_tokenizer_work_destroy(&work);
    if (rc != 0) {
        return rc;
    }
    for (int64_t i = 0; i < b->n_qs; i++) {
        b->qs[i].bucket = bucket_of(b, b->qs[i].context);
    }
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        b->ss[s].n_q = 0;
    }
    for (int64_t i = 0; i < b->n_qs; i++) {
        b->ss[b->qs[i].session].n_q++;
    }
    if (b->n_qs == 0) {
        fprintf(stderr, "rill bench stream: the stream holds no question (raise --context or "
                        "--duration, or lower --every)\n");
        return 1;
    }
    return 0;
}

/* ---- export ------------------------------------------------------------------------------ */

void rill__stream_json_str(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

void rill__stream_json_ids(FILE *f, const int32_t *ids, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        fprintf(f, i ? ",%d" : "%d", ids[i]);
    }
    fputc(']', f);
}

const char *rill__stream_model_name(const bench_t *b) {
    const char *p = b->o.lo.model_path != NULL ? b->o.lo.model_path : cli_default_model();
    return p != NULL ? p : "?";
}

/* The stream as bench/stream_llama.py reads it (its docstring describes the format). */
int rill__stream_export(const bench_t *b, const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "rill bench stream: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\"format\":\"rill-stream\",\"version\":1,\"model\":");
    rill__stream_json_str(f, rill__stream_model_name(b), strlen(rill__stream_model_name(b)));
    fprintf(f,
            ",\"seed\":%lld,\"sessions\":%lld,\"rate\":%g,\"every\":%lld,\"answer\":%lld,"
            "\"context\":%lld,\"n_ctx\":%d,\"threads\":%d,\"attn\":\"%s\",\"max_delay_ms\":%g,"
            "\"standing\":%s,\n",
            (long long)b->o.seed, (long long)b->o.sessions, b->o.rate, (long long)b->o.every,
            (long long)b->o.answer, (long long)b->o.context, b->n_ctx,
            rill_backend_n_threads(b->l.be), rill_attn_name(rill_backend_attn(b->l.be)),
            b->o.max_delay_ms, b->o.no_standing ? "false" : "true");
    fprintf(f, "\"prompt_text\":");
    rill__stream_json_str(f, b->prompt_text, strlen(b->prompt_text));
    fprintf(f, ",\"prompt\":");
    rill__stream_json_ids(f, b->prompt, b->n_prompt);
    fprintf(f, ",\n\"standing_text\":");
    rill__stream_json_str(f, b->stand_text, strlen(b->stand_text));
    fprintf(f, ",\"standing_tokens\":");
    rill__stream_json_ids(f, b->stok, b->n_stok);
    fprintf(f, ",\n\"question_texts\":[");
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        fprintf(f, k ? "," : "");
        rill__stream_json_str(f, b->q_text[k], strlen(b->q_text[k]));
    }
    fprintf(f, "],\n\"question_tokens\":[");
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        fprintf(f, k ? "," : "");
        rill__stream_json_ids(f, b->qtok[k], b->n_qtok[k]);
    }
    fprintf(f, "],\n\"streams\":[");
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        const sstream_t *ss = &b->ss[s];
        fprintf(f, "%s\n{\"session\":%d,\"chunks\":[", s ? "," : "", s);
        for (int64_t c = 0; c < ss->n_chunks; c++) {
            const chunk_t *ch = &ss->chunks[c];
            fprintf(f, "%s\n{\"t_ns\":%lld,\"text\":", c ? "," : "", (long long)ch->t_ns);
            rill__stream_json_str(f, b->text + ch->text_off, (size_t)ch->text_len);
            fprintf(f, ",\"tokens\":");
            rill__stream_json_ids(f, ss->tokens + ch->tok_off, ch->n_tok);
            fputc('}', f);
        }
        fprintf(f, "],\n\"questions\":[");
        for (int32_t j = 0; j < ss->n_q; j++) {
            const question_t *q = &b->qs[ss->q_first + j];
            fprintf(f,
                    "%s\n{\"q\":%d,\"kind\":%d,\"t_ns\":%lld,\"after\":%d,\"context\":%d,"
                    "\"consistency\":\"%s\"}",
                    j ? "," : "", q->index, q->kind, (long long)q->t_ns, q->after, q->context,
                    rill_sched_consistency_name(q->consistency));
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "rill bench stream: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}
