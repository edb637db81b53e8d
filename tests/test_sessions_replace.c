/*
 * test_sessions_replace.c - inputs as records (sessions/record.c) and replace
 * (rill_session_replace_text, issue 15 part 2): a replace against a fresh prefill of the final
 * input, with held-back text, SentencePiece's space prefix, multi-byte UTF-8 at the boundary,
 * flushes, token inputs and generated tokens in the replaced range, a window that has evicted,
 * forks sharing pages, the deferred variant; its log record, replay, snapshots (and version-1
 * files), torn tails, allocation and I/O failures, and every refusal.
 *
 * The oracle. A test keeps the session's effective inputs as a list (text, flush, tokens, each
 * with the version it made); a replace from V drops the entries with version >= V and appends
 * its text. The oracle is a fresh session given that list, every run of consecutive texts in
 * ONE rill_session_append_text() call: "what a fresh session fed the same final text would
 * hold". A token's logits and K/V depend on the batch it was evaluated in (rill_backend.h,
 * Numerics: attention's K.Q and some matmuls take another kernel for one token than for many),
 * and a replace evaluates its tokens in other chunks than the oracle's one call. So the rigs run
 * the forward pass one token at a time (forward max_batch 1): every token then takes the same
 * path in both, the first test checks that premise, and the others compare tokens, held-back
 * text, stats, logits and the K/V bytes of every resident row with memcmp (tolerance: none).
 * One run keeps max_batch 32 (batched chunks) with an F32 KV cache and compares the logits
 * with a tolerance of 1e-4 of the largest |logit|, as test_sessions.c does for chunked appends
 * (differences can only be rounding of the batched kernels; it prints the largest it saw, 0 on
 * the machines this was written on); tokens, held-back text and stats exact.
 *
 * Models: rill-tiny-qwen2-Q8_0.gguf (byte-level BPE) and rill-tiny-llama-Q8_0.gguf
 * (SentencePiece) from tools/make_test_models.py; exit 77 without them. Files live in a fresh
 * directory under /tmp, removed at the end.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "session_internal.h" /* held-back text, the I/O failure hook, the log codec */
#include "test_util.h"

#define QWEN    "rill-tiny-qwen2-Q8_0.gguf"
#define LLAMA   "rill-tiny-llama-Q8_0.gguf"
#define LOG_HDR 128
#define REC_HDR 24

static char g_dir[64];
static bool g_kv_f32; /* the batched run's KV cache (see the top) */

/* ---- the rig -------------------------------------------------------------------------------- */

typedef test_rig_t rig_t;

static void rig_open_ex(rig_t *g, const char *model, int64_t cells, int32_t n_ctx, bool tok,
                        int32_t max_batch) {
    test_rig_params_t p = test_rig_default_params(model);
    p.forward.max_batch = max_batch;
    p.pool.n_cells = cells;
    p.pool.n_ctx = n_ctx;
    p.pool.kv_type = g_kv_f32 ? RILL_DTYPE_F32 : RILL_DTYPE_F16;
    p.pool_tokenizer = tok;
    test_rig_open(g, &p);
}

/* One token per forward pass: see the top. */
static void rig_open(rig_t *g, const char *model) {
    rig_open_ex(g, model, 2048, 0, true, 1);
}

static rill_session_t *new_session(rig_t *g, int32_t sinks, int32_t window) {
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = sinks;
    sp.window = window;
    sp.evict_pages = window > 0 ? 1 : 0;
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g->pool, &sp, &s), RILL_OK);
    return s;
}

/* ---- files ---------------------------------------------------------------------------------- */

/* ---- state of a session --------------------------------------------------------------------- */

typedef test_state_t state_t;

enum { SAME_SEQ = 1, SAME_SHARING = 2 };

/* 0: logits and K/V bit for bit; > 0: logits within g_tol of the largest |logit|, K/V not
 * compared (the batched run, see the top). */
static double g_tol;
static double g_worst; /* the largest relative logits difference seen under g_tol */

/* Asserts a == b: stream, resident tokens, held-back text, logits and K/V bytes bit for bit;
 * with SAME_SEQ the version too; with SAME_SHARING the pages shared with forks too. */
static void state_equal(rig_t *g, const state_t *a, const state_t *b, int how, const char *what) {
    ck_assert_msg(a->st.n_seen == b->st.n_seen && a->st.n_resident == b->st.n_resident &&
                      a->st.n_sink == b->st.n_sink && a->st.kept_from == b->st.kept_from &&
                      a->st.pos_next == b->st.pos_next && a->st.pages == b->st.pages &&
                      a->st.n_evicted == b->st.n_evicted && a->st.n_pending == b->st.n_pending,
                  "%s: stats differ (n_seen %lld / %lld, resident %d / %d, evicted %lld / %lld)",
                  what, (long long)a->st.n_seen, (long long)b->st.n_seen, a->st.n_resident,
                  b->st.n_resident, (long long)a->st.n_evicted, (long long)b->st.n_evicted);
    if (how & SAME_SHARING) {
        ck_assert_int_eq(a->st.pages_shared, b->st.pages_shared);
    }
    if (how & SAME_SEQ) {
        ck_assert_msg(a->seq == b->seq, "%s: seq %lld / %lld", what, (long long)a->seq,
                      (long long)b->seq);
    }
    ck_assert_int_eq(a->n, b->n);
    ck_assert_msg(memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)) == 0,
                  "%s: tokens differ", what);
    ck_assert_msg(a->text_len == b->text_len && memcmp(a->text, b->text, a->text_len) == 0 &&
                      a->text_started == b->text_started,
                  "%s: held-back text differs ('%.*s' %d / '%.*s' %d)", what, (int)a->text_len,
                  a->text, a->text_started, (int)b->text_len, b->text, b->text_started);
    ck_assert_msg((a->logits == NULL) == (b->logits == NULL), "%s: logits", what);
    if (a->logits != NULL && g_tol > 0) {
        double scale = 0, d = 0;
        for (int32_t i = 0; i < g->V; i++) {
            double x = b->logits[i] < 0 ? -b->logits[i] : b->logits[i];
            double e = a->logits[i] - b->logits[i];
            scale = x > scale ? x : scale;
            d = (e < 0 ? -e : e) > d ? (e < 0 ? -e : e) : d;
        }
        ck_assert_msg(d <= g_tol * scale, "%s: logits differ by %g > %g * %g", what, d, g_tol,
                      scale);
        g_worst = d / scale > g_worst ? d / scale : g_worst;
        return;
    }
    if (a->logits != NULL) {
        ck_assert_msg(memcmp(a->logits, b->logits, (size_t)g->V * sizeof(float)) == 0,
                      "%s: logits are not bit-identical", what);
    }
    ck_assert_uint_eq(a->kv_bytes, b->kv_bytes);
    size_t first_diff = 0;
    while (first_diff < a->kv_bytes && a->kv[first_diff] == b->kv[first_diff]) {
        first_diff++;
    }
    ck_assert_msg(memcmp(a->kv, b->kv, a->kv_bytes) == 0, "%s: K/V bytes differ at %zu of %zu",
                  what, first_diff, a->kv_bytes);
}

static void sessions_equal(rig_t *g, rill_session_t *a, rill_session_t *b, int how,
                           const char *what) {
    state_t x, y;
    test_state_capture(g, a, &x);
    test_state_capture(g, b, &y);
    state_equal(g, &x, &y, how, what);
    test_state_free(&x);
    test_state_free(&y);
}

/* ---- the effective inputs and the oracle ---------------------------------------------------- */

enum { OP_TEXT, OP_FLUSH, OP_TOKENS };

typedef struct op {
    int kind;
    int64_t version;
    char *text;
    size_t len;
    int32_t toks[64];
    int32_t n;
} op_t;

typedef struct script {
    op_t ops[256];
    int n;
    int32_t sinks, window;
} script_t;

static void script_drop_from(script_t *sc, int64_t from) {
    while (sc->n > 0 && sc->ops[sc->n - 1].version >= from) {
        free(sc->ops[--sc->n].text);
    }
}

static void script_free(script_t *sc) {
    script_drop_from(sc, 0);
}

static void push_text(script_t *sc, int64_t version, const char *t, size_t len) {
    ck_assert_int_lt(sc->n, 256);
    op_t *o = &sc->ops[sc->n++];
    memset(o, 0, sizeof *o);
    o->kind = OP_TEXT;
    o->version = version;
    o->text = malloc(len + 1);
    memcpy(o->text, t, len);
    o->len = len;
}

static void s_text(rill_session_t *s, script_t *sc, const char *t) {
    int64_t v = rill_session_seq(s);
    ck_assert_msg(rill_session_append_text(s, t, strlen(t)) == RILL_OK, "text: %s",
                  rill_last_error(RILL_OK));
    ck_assert_int_eq(rill_session_seq(s), v + 1);
    push_text(sc, v + 1, t, strlen(t));
}

static void s_flush(rill_session_t *s, script_t *sc) {
    int64_t v = rill_session_seq(s);
    ck_assert_int_eq(rill_session_flush_text(s), RILL_OK);
    if (rill_session_seq(s) != v) {
        op_t *o = &sc->ops[sc->n++];
        memset(o, 0, sizeof *o);
        o->kind = OP_FLUSH;
        o->version = v + 1;
    }
}

/* A text that ends itself: one input (one version) standing for a text and its flush. */
static void s_text_end(rill_session_t *s, script_t *sc, const char *t) {
    int64_t v = rill_session_seq(s);
    ck_assert_msg(rill_session_append_text_end(s, t, strlen(t)) == RILL_OK, "text end: %s",
                  rill_last_error(RILL_OK));
    ck_assert_int_eq(rill_session_seq(s), v + 1);
    ck_assert_uint_eq(rill_session_pending_text(s), 0);
    push_text(sc, v + 1, t, strlen(t));
    op_t *o = &sc->ops[sc->n++];
    memset(o, 0, sizeof *o);
    o->kind = OP_FLUSH;
    o->version = v + 1; /* the same input: a replace from it drops both */
}

static void s_tokens(rill_session_t *s, script_t *sc, const int32_t *t, int32_t n) {
    ck_assert_int_eq(rill_session_append(s, t, n), RILL_OK);
    op_t *o = &sc->ops[sc->n++];
    memset(o, 0, sizeof *o);
    o->kind = OP_TOKENS;
    o->version = rill_session_seq(s);
    memcpy(o->toks, t, (size_t)n * sizeof *t);
    o->n = n;
}

/* Generates n tokens greedily: n token inputs. */
static void s_generate(rill_session_t *s, script_t *sc, int32_t n) {
    int32_t out[16];
    rill_session_gen_t gen = { .n_max = n, .out = out };
    int64_t v = rill_session_seq(s);
    ck_assert_int_eq(rill_session_generate(s, &gen), RILL_OK);
    ck_assert_int_eq(gen.n_out, n);
    for (int32_t i = 0; i < n; i++) {
        op_t *o = &sc->ops[sc->n++];
        memset(o, 0, sizeof *o);
        o->kind = OP_TOKENS;
        o->version = v + 1 + i;
        o->toks[0] = out[i];
        o->n = 1;
    }
}

static void s_replace(rill_session_t *s, script_t *sc, int64_t from, const char *t, size_t len) {
    int64_t v = rill_session_seq(s);
    rill_err_t err = rill_session_replace_text(s, from, t, len);
    ck_assert_msg(err == RILL_OK, "replace from %lld: %s: %s", (long long)from, rill_err_name(err),
                  rill_last_error(RILL_OK));
    ck_assert_int_eq(rill_session_seq(s), v + 1);
    script_drop_from(sc, from);
    push_text(sc, v + 1, t, len);
}

static void s_replace_str(rill_session_t *s, script_t *sc, int64_t from, const char *t) {
    s_replace(s, sc, from, t, strlen(t));
}

/* Gives a fresh session the script's inputs, each run of texts in one call. */
static void play(rill_session_t *b, const script_t *sc) {
    for (int i = 0; i < sc->n;) {
        const op_t *o = &sc->ops[i];
        if (o->kind == OP_TEXT) {
            size_t all = 0;
            int j = i;
            for (; j < sc->n && sc->ops[j].kind == OP_TEXT; j++) {
                all += sc->ops[j].len;
            }
            char *t = malloc(all + 1);
            size_t at = 0;
            for (int k = i; k < j; k++) {
                memcpy(t + at, sc->ops[k].text, sc->ops[k].len);
                at += sc->ops[k].len;
            }
            ck_assert_int_eq(rill_session_append_text(b, t, all), RILL_OK);
            free(t);
            i = j;
            continue;
        }
        if (o->kind == OP_FLUSH) {
            ck_assert_int_eq(rill_session_flush_text(b), RILL_OK);
        } else {
            ck_assert_int_eq(rill_session_append(b, o->toks, o->n), RILL_OK);
        }
        i++;
    }
}

static rill_session_t *fresh(rig_t *g, const script_t *sc) {
    rill_session_t *b = new_session(g, sc->sinks, sc->window);
    play(b, sc);
    return b;
}

/* s equals a fresh session given the script (the version aside: the fresh one made fewer). */
static void check_fresh(rig_t *g, rill_session_t *s, const script_t *sc, const char *what) {
    rill_session_t *b = fresh(g, sc);
    sessions_equal(g, s, b, 0, what);
    rill_session_destroy(&b);
}

/* ---- the premise ---------------------------------------------------------------------------- */

/* The bit-for-bit comparisons rest on this: with one token per forward pass, how a stream is
 * given (one call or many) does not change a token's K/V or logits. */
START_TEST(chunking_does_not_change_the_bits) {
    const char *models[] = { QWEN, LLAMA };
    for (int m = 0; m < 2; m++) {
        rig_t g;
        rig_open(&g, models[m]);
        int32_t t[150];
        for (int i = 0; i < 150; i++) {
            t[i] = (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)g.V);
        }
        rill_session_t *one = new_session(&g, 0, 0);
        ck_assert_int_eq(rill_session_append(one, t, 150), RILL_OK);
        int chunks[] = { 1, 5, 17, 31 };
        for (int c = 0; c < 4; c++) {
            rill_session_t *s = new_session(&g, 0, 0);
            for (int i = 0; i < 150; i += chunks[c]) {
                int k = 150 - i < chunks[c] ? 150 - i : chunks[c];
                ck_assert_int_eq(rill_session_append(s, t + i, k), RILL_OK);
            }
            sessions_equal(&g, s, one, 0, "chunked against one shot");
            rill_session_destroy(&s);
        }
        rill_session_destroy(&one);
        test_rig_close(&g);
    }
}
END_TEST

/* rill_session_version_at: the newest version wholly within a stream prefix, as a fork rolled
 * back to evaluated tokens sees it (its inputs queued, not evaluated: the stream indices are what
 * matter). */
START_TEST(version_at_a_stream_length) {
    rig_t g;
    rig_open(&g, QWEN);
    rill_session_t *s = new_session(&g, 0, 0);
    int32_t t[16];
    for (int i = 0; i < 16; i++) {
        t[i] = i + 1;
    }
    ck_assert_int_eq(rill_session_version_at(s, 0), 0);
    ck_assert_int_eq(rill_session_feed(s, t, 5), RILL_OK); /* v1: stream [0, 5) */
    ck_assert_int_eq(rill_session_feed(s, t, 3), RILL_OK); /* v2: [5, 8) */
    ck_assert_int_eq(rill_session_feed(s, t, 4), RILL_OK); /* v3: [8, 12) */
    const int64_t want[][2] = { { 0, 0 },  { 4, 0 },  { 5, 1 },  { 7, 1 },   { 8, 2 },
                                { 11, 2 }, { 12, 3 }, { 13, 3 }, { 1000, 3 } };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ck_assert_msg(rill_session_version_at(s, want[i][0]) == want[i][1],
                      "len %lld: version %lld, want %lld", (long long)want[i][0],
                      (long long)rill_session_version_at(s, want[i][0]), (long long)want[i][1]);
    }
    ck_assert_int_eq(rill_session_version_at(s, -1), -1);
    ck_assert_int_eq(rill_session_version_at(NULL, 3), -1);
    ck_assert_int_eq(rill_session_seq(s), 3);
    /* older than the window remembers: unknown */
    for (int i = 0; i < RILL_SESSION_REPLACE_INPUTS + 2; i++) {
        ck_assert_int_eq(rill_session_feed(s, t, 1), RILL_OK);
    }
    ck_assert_int_eq(rill_session_version_at(s, 3), -1);
    int64_t end = 12 + RILL_SESSION_REPLACE_INPUTS + 2;
    ck_assert_int_eq(rill_session_version_at(s, end - 1), rill_session_seq(s) - 1);
    ck_assert_int_eq(rill_session_version_at(s, end), rill_session_seq(s));
    rill_session_destroy(&s);
    test_rig_close(&g);
}
END_TEST

/* ---- replace against a fresh prefill -------------------------------------------------------- */

static void replace_script(const char *model, int32_t max_batch) {
    rig_t g;
    rig_open_ex(&g, model, 2048, 0, true, max_batch);
    script_t sc = { .n = 0 };
    rill_session_t *a = new_session(&g, 0, 0);
    s_text(a, &sc, "the quick brown fo");
    ck_assert_uint_gt(rill_session_pending_text(a), 0); /* " fo" is held back */
    s_text(a, &sc, "x jumps ov");
    check_fresh(&g, a, &sc, "two texts");
    /* Rewriting mid-word: the held " fo" continues with the new text. */
    s_replace_str(a, &sc, 2, "x jumped over the");
    check_fresh(&g, a, &sc, "replace mid-word");
    /* From the replace's own version, shorter; then from the replaced version 2 (gone: the
     * same point as the replace that took its place). */
    s_replace_str(a, &sc, 3, "x");
    check_fresh(&g, a, &sc, "replace shorter, from the replace's version");
    {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(a, 4, "xes ran", 7), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(f, 2, "xes ran", 7), RILL_OK);
        sessions_equal(&g, a, f, SAME_SEQ, "from a replaced version = from its replacement");
        rill_session_destroy(&f);
        script_drop_from(&sc, 4);
        push_text(&sc, rill_session_seq(a), "xes ran", 7);
    }
    s_text(a, &sc, " and the lazy dog sle");
    int64_t lazy = rill_session_seq(a);
    s_text(a, &sc, "eps");
    s_replace_str(a, &sc, rill_session_seq(a), "eping now"); /* the latest input only */
    check_fresh(&g, a, &sc, "replace the latest input");
    static const char longer[] = " and a much longer text than before, with more words in it, "
                                 "numbers 12345 and 6.78, and punctuation; all of it new ";
    s_replace(a, &sc, lazy, longer, strlen(longer));
    check_fresh(&g, a, &sc, "replace longer");
    /* A multi-byte character split across inputs, and the replace's boundary inside it. */
    s_text(a, &sc, "caf\xc3");
    s_text(a, &sc, "\xa9 au lait ");
    s_replace_str(a, &sc, rill_session_seq(a), "\xa9s \xe2\x82\xac au lait");
    check_fresh(&g, a, &sc, "replace inside a UTF-8 character");
    int64_t cafe = rill_session_seq(a) - 1;
    /* A flush, text after it; then a replace from before the flush removes the boundary. */
    s_flush(a, &sc);
    ck_assert_uint_eq(rill_session_pending_text(a), 0);
    s_text(a, &sc, "New text after a flush ");
    check_fresh(&g, a, &sc, "flush and a new text");
    s_replace_str(a, &sc, cafe, " cafe again and on");
    check_fresh(&g, a, &sc, "replace across a flush");
    /* Token inputs and generated tokens in the replaced range go with it. */
    int32_t toks[5] = { 7, 11, 13, 17, 19 };
    s_tokens(a, &sc, toks, 5);
    int64_t tv = rill_session_seq(a);
    s_text(a, &sc, " after the tokens ");
    check_fresh(&g, a, &sc, "tokens then text");
    s_replace_str(a, &sc, tv, " no tokens now ");
    check_fresh(&g, a, &sc, "replace from a token input");
    s_generate(a, &sc, 3);
    check_fresh(&g, a, &sc, "generated");
    s_replace_str(a, &sc, rill_session_seq(a) - 2, "and again");
    check_fresh(&g, a, &sc, "replace generated tokens");
    /* A text that ends itself is one input: a replace from its version takes the text too,
     * and the text after it starts anew. */
    s_text(a, &sc, " held ba");
    int64_t ended = rill_session_seq(a) + 1;
    s_text_end(a, &sc, "ck, then ended mid-wo");
    check_fresh(&g, a, &sc, "a text that ends itself");
    s_text(a, &sc, "rd");
    check_fresh(&g, a, &sc, "text after a text that ended");
    s_replace_str(a, &sc, ended, "ck and rewri");
    check_fresh(&g, a, &sc, "replace from a text that ended");
    ck_assert_uint_gt(rill_session_pending_text(a), 0); /* the replace holds back again */
    /* Empty text from the very first input: nothing is left. */
    s_replace_str(a, &sc, 1, "");
    check_fresh(&g, a, &sc, "replace everything by nothing");
    rill_session_stats_t st;
    rill_session_stats(a, &st);
    ck_assert_int_eq(st.n_seen, 0);
    ck_assert_int_eq(st.pages, 0);
    s_text(a, &sc, "start over with this ");
    check_fresh(&g, a, &sc, "text after an empty replace");
    s_replace_str(a, &sc, rill_session_seq(a), "start over with that one");
    check_fresh(&g, a, &sc, "replace with no held-back text before");
    rill_session_destroy(&a);
    script_free(&sc);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_rig_close(&g);
}

START_TEST(replace_equals_fresh_prefill_bpe) {
    replace_script(QWEN, 1);
}
END_TEST

START_TEST(replace_equals_fresh_prefill_spm) {
    replace_script(LLAMA, 1);
}
END_TEST

/* The same with batched chunks (F32 KV): the tokens exact, the logits within the tolerance. */
START_TEST(replace_equals_fresh_prefill_batched) {
    g_tol = 1e-4;
    g_kv_f32 = true;
    g_worst = 0;
    replace_script(QWEN, 32);
    replace_script(LLAMA, 32);
    fprintf(stderr, "batched replace: largest logits difference %.3g of the largest |logit|\n",
            g_worst);
    g_tol = 0;
    g_kv_f32 = false;
}
END_TEST

/* Only the tokens after the longest common prefix are evaluated: a replace that keeps the
 * stream costs nothing, one that changes the last word costs that word. */
START_TEST(replace_evaluates_only_what_changed) {
    rig_t g;
    rig_open(&g, QWEN);
    rill_session_t *a = new_session(&g, 0, 0);
    static const char t1[] = "one two three four five six seven eight nine ten ";
    ck_assert_int_eq(rill_session_append_text(a, t1, strlen(t1)), RILL_OK);
    rill_session_stats_t st1, st;
    rill_session_stats(a, &st1);
    ck_assert_uint_eq(rill_session_pending_text(a), 1); /* " " */
    ck_assert_int_eq(rill_session_append_text(a, "eleven twelve ", 14), RILL_OK);
    rill_session_stats_t st0;
    rill_session_stats(a, &st0);
    /* What a replace of the second input must keep and evaluate (byte-level BPE). */
    int32_t old[32], neu[32];
    int64_t n_old = rill_tokenizer_encode(g.tok, " eleven twelve", 14, false, false, old, 32);
    int64_t n_new = rill_tokenizer_encode(g.tok, " eleven thirteen", 16, false, false, neu, 32);
    int32_t k = 0;
    while (k < n_old && k < n_new && old[k] == neu[k]) {
        k++;
    }
    ck_assert_int_gt(k, 0);
    ck_assert_int_lt(k, n_new);
    ck_assert_int_eq(st0.n_resident, st1.n_resident + n_old);
    /* The same text again: the stream is kept whole, nothing is cut or queued. */
    ck_assert_int_eq(rill_session_feed_replace_text(a, 2, "eleven twelve ", 14), RILL_OK);
    rill_session_stats(a, &st);
    ck_assert_int_eq(st.n_resident, st0.n_resident);
    ck_assert_int_eq(st.n_pending, 0);
    /* Another last word: the deferred replace cuts after the common prefix at once and queues
     * only the rest. */
    ck_assert_int_eq(rill_session_feed_replace_text(a, 3, "eleven thirteen ", 16), RILL_OK);
    rill_session_stats(a, &st);
    ck_assert_int_eq(st.n_resident, st1.n_resident + k);
    ck_assert_int_eq(st.n_pending, n_new - k);
    ck_assert_int_eq(rill_session_drain(a), RILL_OK);
    script_t sc = { .n = 0 };
    push_text(&sc, 1, t1, strlen(t1));
    push_text(&sc, 4, "eleven thirteen ", 16);
    check_fresh(&g, a, &sc, "deferred replace, drained");
    script_free(&sc);
    rill_session_destroy(&a);
    test_rig_close(&g);
}
END_TEST

/* Deferred input and a deferred replace before anything was evaluated. */
START_TEST(fed_replace_equals_fresh_prefill) {
    rig_t g;
    rig_open(&g, LLAMA);
    script_t sc = { .n = 0 };
    rill_session_t *a = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_feed_text(a, "a stream of words that ", 23), RILL_OK);
    push_text(&sc, 1, "a stream of words that ", 23);
    ck_assert_int_eq(rill_session_feed_text(a, "keeps comi", 10), RILL_OK);
    push_text(&sc, 2, "keeps comi", 10);
    ck_assert_int_gt(rill_session_pending(a), 0);
    ck_assert_int_eq(rill_session_feed_replace_text(a, 2, "kept coming in ", 15), RILL_OK);
    script_drop_from(&sc, 2);
    push_text(&sc, 3, "kept coming in ", 15);
    ck_assert_int_eq(rill_session_drain(a), RILL_OK);
    check_fresh(&g, a, &sc, "fed, replaced, drained");
    /* Half evaluated: resident tokens and a queue, a replace cutting into both. */
    ck_assert_int_eq(rill_session_feed_text(a, "and more words here ", 20), RILL_OK);
    push_text(&sc, 4, "and more words here ", 20);
    for (int i = 0; i < 2; i++) {
        rill_session_step_t it = { .s = a, .n = 1, .logits = true };
        ck_assert_int_eq(rill_session_step(rill_session_pool(a), &it, 1), RILL_OK);
    }
    ck_assert_int_gt(rill_session_pending(a), 0);
    ck_assert_int_eq(rill_session_feed_replace_text(a, 3, "kept going ", 11), RILL_OK);
    script_drop_from(&sc, 3);
    push_text(&sc, 5, "kept going ", 11);
    ck_assert_int_eq(rill_session_drain(a), RILL_OK);
    check_fresh(&g, a, &sc, "replace cutting into the queue");
    script_free(&sc);
    rill_session_destroy(&a);
    test_rig_close(&g);
}
END_TEST

/* Forks share pages with the session; a replace on it leaves them bit-identical, copies what it
 * writes, and a fork can replace with its own copy of the remembered inputs. */
START_TEST(replace_with_forks_sharing_pages) {
    rig_t g;
    rig_open(&g, QWEN);
    script_t sc = { .n = 0 };
    rill_session_t *a = new_session(&g, 0, 0);
    s_text(a, &sc, "words for the first page and then some more words to fill pages, ");
    s_text(a, &sc, "the second input with its own words ");
    s_text(a, &sc, "and a third one that is replac");
    rill_session_t *f = NULL, *u = NULL;
    ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
    ck_assert_int_eq(rill_session_fork_unwindowed(a, &u), RILL_OK);
    state_t fb, ub;
    test_state_capture(&g, f, &fb);
    test_state_capture(&g, u, &ub);
    script_t fsc = { .n = 0 };
    for (int i = 0; i < sc.n; i++) {
        push_text(&fsc, sc.ops[i].version, sc.ops[i].text, sc.ops[i].len);
    }
    s_replace_str(a, &sc, 2, "a different second input");
    check_fresh(&g, a, &sc, "replace with forks alive");
    rill_session_t *all[3] = { a, f, u };
    test_pool_check(g.pool, all, 3);
    state_t fa, ua;
    test_state_capture(&g, f, &fa);
    test_state_capture(&g, u, &ua);
    state_equal(&g, &fb, &fa, SAME_SEQ, "the fork after the session's replace");
    state_equal(&g, &ub, &ua, SAME_SEQ, "the unwindowed fork after the session's replace");
    s_replace_str(f, &fsc, 3, "and the third one, replaced on the fork ");
    check_fresh(&g, f, &fsc, "replace on a fork");
    test_pool_check(g.pool, all, 3);
    test_state_free(&fb);
    test_state_free(&ub);
    test_state_free(&fa);
    test_state_free(&ua);
    rill_session_destroy(&f);
    rill_session_destroy(&u);
    rill_session_destroy(&a);
    script_free(&sc);
    script_free(&fsc);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_rig_close(&g);
}
END_TEST

/* A number of words (a text of about 1.3 tokens per word in these models). */
static char *words(int first, int n) {
    char *t = malloc((size_t)n * 12 + 1);
    size_t at = 0;
    for (int i = first; i < first + n; i++) {
        at += (size_t)sprintf(t + at, "w%d ", i);
    }
    return t;
}

/* With a window that has evicted: a replace inside the kept part equals a fresh session with
 * the same window (same evictions); one that starts in evicted tokens is RILL_ERANGE; a replace
 * of inputs that caused evictions keeps the exact stream, with fewer tokens resident. */
START_TEST(replace_in_a_window_that_has_evicted) {
    rig_t g;
    rig_open(&g, QWEN);
    script_t sc = { .n = 0, .sinks = 16, .window = 64 };
    rill_session_t *a = new_session(&g, 16, 64);
    char *w = words(0, 40);
    s_text(a, &sc, w);
    free(w);
    rill_session_stats_t st;
    rill_session_stats(a, &st);
    ck_assert_int_gt(st.n_evicted, 0);
    int64_t evicted = st.n_evicted;
    int64_t first = rill_session_seq(a);
    /* Short enough that neither these inputs nor their replacement evict (the K/V of a token
     * depends on what was in the window when it was evaluated, so the fresh session must see
     * the same evictions at the same points). */
    s_text(a, &sc, "x1 x");
    s_text(a, &sc, "2 ");
    check_fresh(&g, a, &sc, "window: before the replace");
    s_replace_str(a, &sc, first + 1, "y1 y2 y3 ");
    rill_session_stats(a, &st);
    ck_assert_int_eq(st.n_evicted, evicted);
    check_fresh(&g, a, &sc, "window: replace in the kept part"); /* evictions compared too */
    /* The first input starts in evicted tokens. */
    state_t before, after;
    test_state_capture(&g, a, &before);
    ck_assert_int_eq(rill_session_replace_text(a, first, "z", 1), RILL_ERANGE);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_ERANGE), "evicted"));
    test_state_capture(&g, a, &after);
    state_equal(&g, &before, &after, SAME_SEQ | SAME_SHARING, "an evicted replace");
    test_state_free(&before);
    test_state_free(&after);
    /* A longer input evicts more (not past its own start); replacing it by a short text gives
     * the fresh stream. */
    int64_t v = rill_session_seq(a);
    w = words(100, 8);
    s_text(a, &sc, w);
    free(w);
    rill_session_stats(a, &st);
    ck_assert_int_gt(st.n_evicted, evicted);
    s_replace_str(a, &sc, v + 1, "short ");
    rill_session_t *b = fresh(&g, &sc);
    rill_session_stats_t sa, sb;
    rill_session_stats(a, &sa);
    rill_session_stats(b, &sb);
    ck_assert_int_eq(sa.n_seen, sb.n_seen);
    ck_assert_int_gt(sa.n_evicted, sb.n_evicted); /* not undone, as with rollback */
    int32_t na = 0, nb = 0;
    const int32_t *ta = rill_session_tokens(a, &na), *tb = rill_session_tokens(b, &nb);
    ck_assert_int_lt(na, nb);
    ck_assert_mem_eq(ta, tb, 16 * sizeof *ta);                                      /* the sinks */
    ck_assert_mem_eq(ta + 16, tb + nb - (na - 16), (size_t)(na - 16) * sizeof *ta); /* the tail */
    ck_assert_uint_eq(rill_session_pending_text(a), rill_session_pending_text(b));
    rill_session_destroy(&b);
    rill_session_destroy(&a);
    script_free(&sc);
    test_rig_close(&g);
}
END_TEST

/* Reach is judged as if every input had been evaluated at once (as replay does): queued tokens
 * that a synchronous session would already have evicted count as evicted. */
START_TEST(reach_does_not_depend_on_when_input_is_evaluated) {
    rig_t g;
    rig_open(&g, QWEN);
    rill_session_t *a = new_session(&g, 16, 64), *b = new_session(&g, 16, 64);
    char *w1 = words(500, 12), *w2 = words(0, 60);
    for (int i = 0; i < 2; i++) {
        rill_session_t *s = i == 0 ? a : b;
        rill_err_t (*in)(rill_session_t *, const char *, size_t) =
            i == 0 ? rill_session_feed_text : rill_session_append_text;
        ck_assert_int_eq(rill_session_append_text(s, w1, strlen(w1)), RILL_OK);
        ck_assert_int_eq(in(s, w2, strlen(w2)), RILL_OK);
        ck_assert_int_eq(in(s, "t1 ", 3), RILL_OK);
    }
    free(w1);
    free(w2);
    rill_session_stats_t sa, sb;
    rill_session_stats(a, &sa);
    rill_session_stats(b, &sb);
    ck_assert_int_eq(sa.n_evicted, 0); /* a has evaluated nothing of inputs 2 and 3 */
    ck_assert_int_gt(sa.n_pending, 0);
    ck_assert_int_gt(sb.n_evicted, 0);
    ck_assert_int_gt(sb.kept_from, 16 + 20); /* input 2 starts in evicted tokens */
    ck_assert_int_eq(rill_session_feed_replace_text(a, 2, "z ", 2), RILL_ERANGE);
    ck_assert_int_eq(rill_session_replace_text(b, 2, "z ", 2), RILL_ERANGE);
    rill_session_stats_t sa2;
    rill_session_stats(a, &sa2);
    ck_assert_int_eq(sa2.n_pending, sa.n_pending);
    ck_assert_int_eq(sa2.n_resident, sa.n_resident);
    ck_assert_int_eq(rill_session_seq(a), 3);
    /* Input 3 starts in kept tokens for both. */
    ck_assert_int_eq(rill_session_feed_replace_text(a, 3, "t1 t2 t3 ", 9), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(b, 3, "t1 t2 t3 ", 9), RILL_OK);
    ck_assert_int_eq(rill_session_drain(a), RILL_OK);
    sessions_equal(&g, a, b, SAME_SEQ, "deferred and synchronous");
    rill_session_destroy(&a);
    rill_session_destroy(&b);
    test_rig_close(&g);
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------------- */

/* Calls a replace that must fail with want and checks that nothing changed: state, version,
 * pool, and the log's size when there is one; then the deferred variant, which must fail alike
 * (but for RILL_EFULL: it does not check the budget, and succeeds). */
static void refused(rig_t *g, rill_session_t *s, int64_t from, const char *t, size_t len,
                    rill_err_t want, const char *needle, const char *log) {
    state_t before, after;
    test_state_capture(g, s, &before);
    test_pool_view_t pv;
    test_pool_view(g->pool, &pv);
    int64_t size = log != NULL ? test_file_size(log) : 0;
    for (int fed = 0; fed < 2; fed++) {
        rill_err_t err = fed ? rill_session_feed_replace_text(s, from, t, len)
                             : rill_session_replace_text(s, from, t, len);
        if (fed && want == RILL_EFULL) {
            ck_assert_int_eq(err, RILL_OK);
            break;
        }
        ck_assert_msg(err == want, "%sreplace from %lld: %s, expected %s (%s)", fed ? "fed " : "",
                      (long long)from, rill_err_name(err), rill_err_name(want),
                      rill_last_error(RILL_OK));
        if (needle != NULL) {
            ck_assert_msg(strstr(rill_last_error(RILL_OK), needle) != NULL, "'%s' lacks '%s'",
                          rill_last_error(RILL_OK), needle);
        }
        test_state_capture(g, s, &after);
        state_equal(g, &before, &after, SAME_SEQ | SAME_SHARING, "a refused replace");
        test_state_free(&after);
        test_pool_same(g->pool, &pv);
        if (log != NULL) {
            ck_assert_int_eq(test_file_size(log), size);
        }
    }
    test_state_free(&before);
}

START_TEST(refused_replaces_change_nothing) {
    rig_t g;
    rig_open(&g, QWEN);
    const char *log = test_path_in(g_dir, "refused.log");
    rill_session_t *a = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(a, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(NULL, 1, "x", 1), RILL_EINVAL);
    ck_assert_int_eq(rill_session_feed_replace_text(NULL, 1, "x", 1), RILL_EINVAL);
    refused(&g, a, 1, "x", 1, RILL_EINVAL, "versions", log); /* no input yet */
    ck_assert_int_eq(rill_session_append_text(a, "one two thr", 11), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(a, "ee four fi", 10), RILL_OK);
    refused(&g, a, 1, NULL, 3, RILL_EINVAL, NULL, log);
    refused(&g, a, 0, "x", 1, RILL_EINVAL, "versions", log);
    refused(&g, a, -3, "x", 1, RILL_EINVAL, "versions", log);
    refused(&g, a, 3, "x", 1, RILL_EINVAL, "versions", log); /* not made yet */
    /* A rollback below the second input's start: inputs from 2 on cannot be returned to. */
    ck_assert_int_eq(rill_session_rollback(a, 1), RILL_OK); /* version 3 */
    refused(&g, a, 2, "x", 1, RILL_ERANGE, "rollback", log);
    refused(&g, a, 3, "x", 1, RILL_ERANGE, "rollback", log);
    {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(f, 1, "one more ", 9), RILL_OK);
        rill_session_destroy(&f);
    }
    /* Held-back text longer than a replace keeps: the input after it cannot be replaced, the
     * one that brought it can. */
    size_t big = RILL_SESSION_REPLACE_HELD + 10;
    char *t = malloc(big);
    memset(t, 'a', big); /* no cut point: all of it is held back */
    ck_assert_int_eq(rill_session_append_text(a, t, big), RILL_OK); /* version 4 */
    ck_assert_int_eq(rill_session_append_text(a, "b", 1), RILL_OK); /* version 5 */
    refused(&g, a, 5, "x", 1, RILL_ERANGE, "held back", log);
    {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(f, 4, "short ", 6), RILL_OK);
        ck_assert_uint_eq(rill_session_pending_text(f), 1); /* "short" taken, " " held */
        rill_session_destroy(&f);
    }
    free(t);
    /* More inputs than the session remembers (the rollback drops the held text first). */
    ck_assert_int_eq(rill_session_rollback(a, 0), RILL_OK);
    int64_t v0 = rill_session_seq(a);
    for (int i = 0; i < RILL_SESSION_REPLACE_INPUTS; i++) {
        int32_t tok = 100 + i;
        ck_assert_int_eq(rill_session_append(a, &tok, 1), RILL_OK);
    }
    refused(&g, a, v0, "x", 1, RILL_ERANGE, "remembers", log);
    {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(f, v0 + 1, "x", 1), RILL_OK);
        rill_session_destroy(&f);
    }
    /* The context, without a window. */
    rill_session_destroy(&a);
    test_rig_close(&g);
    rig_open_ex(&g, QWEN, 2048, 64, true, 1);
    a = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_append_text(a, "a short text ", 13), RILL_OK);
    char *w = words(0, 60);
    refused(&g, a, 1, w, strlen(w), RILL_ERANGE, "context", NULL);
    free(w);
    rill_session_destroy(&a);
    test_rig_close(&g);
    /* The budget: a fork holds the pages a replace cannot free. */
    rig_open_ex(&g, QWEN, 96, 0, true, 1);
    a = new_session(&g, 0, 0);
    w = words(0, 24);
    ck_assert_int_eq(rill_session_append_text(a, w, strlen(w)), RILL_OK);
    free(w);
    rill_session_t *f = NULL;
    ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
    w = words(50, 60);
    refused(&g, a, 1, w, strlen(w), RILL_EFULL, "budget", NULL);
    free(w);
    rill_session_destroy(&f);
    rill_session_destroy(&a);
    test_rig_close(&g);
    /* No tokenizer. */
    rig_open_ex(&g, QWEN, 256, 0, false, 1);
    a = new_session(&g, 0, 0);
    int32_t tok = 5;
    ck_assert_int_eq(rill_session_append(a, &tok, 1), RILL_OK);
    refused(&g, a, 1, "x", 1, RILL_EUNSUPPORTED, "tokenizer", NULL);
    rill_session_destroy(&a);
    test_rig_close(&g);
    test_dir_clear(g_dir);
}
END_TEST

/* The N-th allocation failing anywhere in a replace: RILL_ENOMEM and the session exactly as it
 * was (every point is walked), nothing leaked once the session is gone. */
START_TEST(allocation_failures_in_replace_change_nothing) {
    rig_t g;
    rig_open(&g, LLAMA);
    rill_session_t *a = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_append_text(a, "some text before the one that is rep", 36),
                     RILL_OK);
    ck_assert_int_eq(rill_session_append_text(a, "laced here ", 11), RILL_OK);
    char *w = words(0, 50); /* longer than any input before: every scratch buffer grows */
    for (int warm = 0; warm < 2; warm++) { /* the pool's tokenizer scratch grows once */
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(f, 2, w, strlen(w)), RILL_OK);
        rill_session_destroy(&f);
    }
    rill_mem_stats_t base = rill_mem_stats_total();
    int64_t points = 0;
    {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        int64_t c0 = rill_mem_calls();
        ck_assert_int_eq(rill_session_replace_text(f, 2, w, strlen(w)), RILL_OK);
        points = rill_mem_calls() - c0;
        rill_session_destroy(&f);
    }
    ck_assert_int_gt(points, 2);
    state_t want;
    {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        test_state_capture(&g, f, &want);
        rill_session_destroy(&f);
    }
    int failed = 0;
    for (int64_t k = 1; k <= points; k++) {
        rill_session_t *f = NULL;
        ck_assert_int_eq(rill_session_fork(a, &f), RILL_OK);
        test_pool_view_t pv;
        test_pool_view(g.pool, &pv);
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_replace_text(f, 2, w, strlen(w));
        rill_mem_fail_nth(0);
        if (err != RILL_OK) {
            ck_assert_int_eq(err, RILL_ENOMEM);
            state_t got;
            test_state_capture(&g, f, &got);
            state_equal(&g, &want, &got, SAME_SEQ, "after a failed allocation");
            test_state_free(&got);
            test_pool_same(g.pool, &pv);
            failed++;
        }
        rill_session_destroy(&f);
        ck_assert_int_eq(rill_mem_stats_total().n_live, base.n_live);
    }
    ck_assert_int_eq(failed, points);
    test_state_free(&want);
    free(w);
    rill_session_destroy(&a);
    test_rig_close(&g);
}
END_TEST

/* ---- the log -------------------------------------------------------------------------------- */

/* A mixed run on s (texts, replaces, tokens, flush, generate), the same on every call; with
 * snap, a snapshot is written in round 1 before a replace that reaches back before it. Returns
 * the from_version of the last replace. */
static int64_t replace_mix(rill_session_t *s, const char *snap) {
    static const char *const texts[] = { "the quick brown fo", "x jumps ov", "er the lazy dog ",
                                         "and then", " some more" };
    int64_t last = 0;
    for (int round = 0; round < 3; round++) {
        int64_t v = rill_session_seq(s);
        for (int i = 0; i < 5; i++) {
            ck_assert_int_eq(rill_session_append_text(s, texts[i], strlen(texts[i])), RILL_OK);
        }
        if (round == 1 && snap != NULL) {
            ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK);
        }
        ck_assert_int_eq(rill_session_replace_text(s, v + 2, "xes jumped ", 11), RILL_OK);
        int32_t toks[3] = { 3, 1, 4 };
        ck_assert_int_eq(rill_session_append(s, toks, 3), RILL_OK);
        int32_t out[2];
        rill_session_gen_t gen = { .n_max = 2, .out = out };
        ck_assert_int_eq(rill_session_generate(s, &gen), RILL_OK);
        ck_assert_int_eq(rill_session_replace_text(s, v + 4, "and a new end", 13), RILL_OK);
        if (round == 0) {
            ck_assert_int_eq(rill_session_flush_text(s), RILL_OK);
        }
        last = v + 4;
    }
    return last;
}

static rill_session_t *restore_ok(rig_t *g, const char *snap, const char *log) {
    rill_session_t *r = NULL;
    rill_err_t err = rill_session_restore(g->pool, snap, log, RILL_SESSION_FSYNC_NEVER, &r);
    ck_assert_msg(err == RILL_OK, "restore: %s: %s", rill_err_name(err), rill_last_error(err));
    return r;
}

/* Walks the records of a log file: the type of each, and of the last. */
static int count_records(const unsigned char *b, size_t len, uint32_t type, size_t *last_off) {
    int n = 0;
    for (size_t off = LOG_HDR; off + REC_HDR <= len;) {
        uint32_t l = rill__get_u32(b + off + 4);
        n += rill__get_u32(b + off + 8) == type;
        *last_off = off;
        off += REC_HDR + l;
    }
    return n;
}

START_TEST(replace_is_logged_and_replays_bit_for_bit) {
    rig_t g;
    rig_open(&g, QWEN);
    const char *log = test_path_in(g_dir, "r.log");
    rill_session_t *a = new_session(&g, 0, 0), *twin = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(a, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    replace_mix(a, NULL);
    int64_t last_from = replace_mix(twin, NULL);
    sessions_equal(&g, a, twin, SAME_SEQ, "logged and unlogged runs");
    rill_session_destroy(&a);
    /* The records: type 5 with the version and the text, as docs/architecture.md says. */
    size_t len = 0, last = 0;
    unsigned char *b = test_read_file(log, &len);
    ck_assert_int_eq(count_records(b, len, RILL__REC_REPLACE, &last), 6);
    ck_assert_uint_eq(rill__get_u32(b + last + 8), RILL__REC_REPLACE);
    ck_assert_uint_eq(rill__get_u32(b + last + 4), 8 + 13);
    ck_assert_mem_eq(b + last + REC_HDR + 8, "and a new end", 13);
    ck_assert_uint_eq(rill__get_u64(b + last + REC_HDR), (uint64_t)last_from);
    free(b);
    rill_session_t *r = restore_ok(&g, NULL, log);
    sessions_equal(&g, r, twin, SAME_SEQ, "restored from the log");
    /* The remembered inputs came back too: the same replace on both, then more input. */
    for (int i = 0; i < 2; i++) {
        rill_session_t *s = i == 0 ? r : twin;
        ck_assert_int_eq(rill_session_replace_text(s, rill_session_seq(s) - 4, "back ", 5),
                         RILL_OK);
        ck_assert_int_eq(rill_session_append_text(s, "and on ", 7), RILL_OK);
    }
    sessions_equal(&g, r, twin, SAME_SEQ, "restored, then replaced");
    rill_session_destroy(&r);
    r = restore_ok(&g, NULL, log); /* the log went on with those two records */
    sessions_equal(&g, r, twin, SAME_SEQ, "restored twice");
    rill_session_destroy(&r);
    rill_session_destroy(&twin);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* A snapshot stores the remembered inputs: a replace logged after it that reaches back before it
 * replays after a restore, and a restore from the snapshot alone can still replace before it. */
START_TEST(replace_survives_snapshot_and_replay) {
    rig_t g;
    rig_open(&g, LLAMA);
    const char *log = test_path_in(g_dir, "s.log"), *snap = test_path_in(g_dir, "s.snap"),
               *snap_t = test_path_in(g_dir, "t.snap");
    rill_session_t *a = new_session(&g, 16, 96), *twin = new_session(&g, 16, 96);
    ck_assert_int_eq(rill_session_open_log(a, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    replace_mix(a, snap);
    replace_mix(twin, snap_t);
    rill_session_destroy(&a);
    rill_session_t *r = restore_ok(&g, snap, log);
    sessions_equal(&g, r, twin, SAME_SEQ, "snapshot + log");
    rill_session_destroy(&r);
    /* From the snapshot alone: the same as the twin's snapshot, and a replace reaching back
     * before the snapshot's version gives the same on both. */
    r = restore_ok(&g, snap, NULL);
    rill_session_t *t2 = restore_ok(&g, snap_t, NULL);
    sessions_equal(&g, r, t2, SAME_SEQ, "the two snapshots");
    int64_t from = rill_session_seq(r) - 3;
    ck_assert_int_eq(rill_session_replace_text(r, from, "over the lazy cat ", 18), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(t2, from, "over the lazy cat ", 18), RILL_OK);
    sessions_equal(&g, r, t2, SAME_SEQ, "replace before the snapshot, after a restore");
    rill_session_destroy(&r);
    rill_session_destroy(&t2);
    rill_session_destroy(&twin);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* A torn replace record at the tail is dropped like any record; damaged ones are refused. */
START_TEST(torn_and_damaged_replace_records) {
    rig_t g;
    rig_open(&g, QWEN);
    const char *log = test_path_in(g_dir, "t.log");
    rill_session_t *a = new_session(&g, 0, 0), *twin = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(a, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    for (int i = 0; i < 2; i++) {
        rill_session_t *s = i == 0 ? a : twin;
        ck_assert_int_eq(rill_session_append_text(s, "the first input ", 16), RILL_OK);
        ck_assert_int_eq(rill_session_append_text(s, "the second inp", 14), RILL_OK);
    }
    ck_assert_int_eq(rill_session_replace_text(a, 2, "the other input", 15), RILL_OK);
    rill_session_destroy(&a);
    size_t len = 0, last = 0;
    unsigned char *whole = test_read_file(log, &len);
    ck_assert_int_eq(count_records(whole, len, RILL__REC_REPLACE, &last), 1);
    ck_assert_uint_eq(last, len - (REC_HDR + 8 + 15));
    test_pool_view_t pv;
    test_pool_view(g.pool, &pv);
    for (size_t cut = 1; cut < REC_HDR + 8 + 15; cut += 5) {
        test_write_file(log, whole, len - cut);
        rill_session_t *r = restore_ok(&g, NULL, log);
        sessions_equal(&g, r, twin, SAME_SEQ, "the torn replace dropped");
        ck_assert_int_eq(test_file_size(log), (int64_t)last);
        rill_session_destroy(&r);
    }
    /* A replace record too short for its version, and one whose version does not exist. */
    struct {
        uint32_t len;
        uint64_t from;
        rill_err_t want;
        const char *needle;
    } bad[] = {
        { 4, 0, RILL_ECORRUPT, "type 5 with 4 bytes" },
        { 8 + 15, 9, RILL_EINVAL, "replaying record 3" },
        { 8 + 15, 0, RILL_EINVAL, "replaying record 3" },
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        unsigned char *b = malloc(len);
        memcpy(b, whole, len);
        unsigned char *r3 = b + last;
        rill__put_u32(r3 + 4, bad[c].len);
        rill__put_u64(r3 + REC_HDR, bad[c].from);
        rill__put_u32(r3, rill__crc32c(0, r3 + 4, REC_HDR - 4 + bad[c].len));
        test_write_file(log, b, last + REC_HDR + bad[c].len);
        free(b);
        rill_session_t *r = NULL;
        rill_err_t err = rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_NEVER, &r);
        ck_assert_msg(err == bad[c].want && strstr(rill_last_error(err), bad[c].needle) != NULL,
                      "case %zu: %s: %s", c, rill_err_name(err), rill_last_error(err));
        ck_assert_ptr_null(r);
        test_pool_same(g.pool, &pv);
    }
    free(whole);
    rill_session_destroy(&twin);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* rill_session_append_text_end: the stream of append_text then flush_text in one version and
 * one log record (type 6, the text as given) that replays bit for bit; fed, the same queue; with
 * no text, a flush; a type-6 record with no text is corruption. */
START_TEST(text_end_is_one_input_and_one_record) {
    rig_t g;
    rig_open(&g, QWEN);
    const char *log = test_path_in(g_dir, "e.log");
    rill_session_t *a = new_session(&g, 0, 0), *two = new_session(&g, 0, 0);
    rill_session_t *fed = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(a, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    static const char t1[] = "the quick brown fo", t2[] = "x jumps over the la";
    ck_assert_int_eq(rill_session_append_text(a, t1, strlen(t1)), RILL_OK);
    ck_assert_int_eq(rill_session_append_text_end(a, t2, strlen(t2)), RILL_OK);
    ck_assert_int_eq(rill_session_seq(a), 2);
    ck_assert_uint_eq(rill_session_pending_text(a), 0);
    ck_assert_int_eq(rill_session_append_text(two, t1, strlen(t1)), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(two, t2, strlen(t2)), RILL_OK);
    ck_assert_int_eq(rill_session_flush_text(two), RILL_OK);
    ck_assert_int_eq(rill_session_seq(two), 3);
    sessions_equal(&g, a, two, 0, "text_end = text + flush");
    ck_assert_int_eq(rill_session_feed_text(fed, t1, strlen(t1)), RILL_OK);
    ck_assert_int_eq(rill_session_feed_text_end(fed, t2, strlen(t2)), RILL_OK);
    ck_assert_int_eq(rill_session_seq(fed), 2);
    ck_assert_int_gt(rill_session_pending(fed), 0);
    ck_assert_int_eq(rill_session_drain(fed), RILL_OK);
    sessions_equal(&g, fed, a, SAME_SEQ, "fed text_end");
    /* no text: a flush, which with nothing held is no input at all */
    ck_assert_int_eq(rill_session_append_text_end(a, NULL, 0), RILL_OK);
    ck_assert_int_eq(rill_session_seq(a), 2);
    ck_assert_int_eq(rill_session_append_text(a, " zy", 3), RILL_OK);
    ck_assert_int_eq(rill_session_append_text_end(a, "", 0), RILL_OK);
    ck_assert_int_eq(rill_session_seq(a), 4);
    ck_assert_uint_eq(rill_session_pending_text(a), 0);
    ck_assert_int_eq(rill_session_append_text_end(a, NULL, 1), RILL_EINVAL);
    rill_session_destroy(&a);
    size_t len = 0, last = 0;
    unsigned char *whole = test_read_file(log, &len);
    ck_assert_int_eq(count_records(whole, len, RILL__REC_TEXT_END, &last), 1);
    ck_assert_int_eq(count_records(whole, len, RILL__REC_FLUSH, &last), 1);
    ck_assert_int_eq(count_records(whole, len, RILL__REC_TEXT, &last), 2);
    size_t at = LOG_HDR + REC_HDR + strlen(t1); /* record 2 */
    ck_assert_uint_eq(rill__get_u32(whole + at + 8), RILL__REC_TEXT_END);
    ck_assert_uint_eq(rill__get_u32(whole + at + 4), strlen(t2));
    ck_assert_mem_eq(whole + at + REC_HDR, t2, strlen(t2));
    test_write_file(log, whole, at + REC_HDR + strlen(t2)); /* records 1 and 2 */
    rill_session_t *r = restore_ok(&g, NULL, log);
    sessions_equal(&g, r, fed, SAME_SEQ, "text_end replayed");
    /* and a replace from it after the restore */
    ck_assert_int_eq(rill_session_replace_text(r, 2, "xes ran", 7), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(fed, 2, "xes ran", 7), RILL_OK);
    sessions_equal(&g, r, fed, SAME_SEQ, "replaced after the restore");
    rill_session_destroy(&r);
    /* a type-6 record without text */
    unsigned char *rec = whole + at;
    rill__put_u32(rec + 4, 0);
    rill__put_u32(rec, rill__crc32c(0, rec + 4, REC_HDR - 4));
    test_write_file(log, whole, at + REC_HDR);
    test_pool_view_t pv;
    test_pool_view(g.pool, &pv);
    rill_err_t err = rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_NEVER, &r);
    ck_assert_msg(err == RILL_ECORRUPT && strstr(rill_last_error(err), "type 6") != NULL, "%s: %s",
                  rill_err_name(err), rill_last_error(err));
    ck_assert_ptr_null(r);
    test_pool_same(g.pool, &pv);
    free(whole);
    rill_session_destroy(&two);
    rill_session_destroy(&fed);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* Restoring a log with replace records, the N-th allocation failing: RILL_ENOMEM, nothing left
 * allocated, the pool as before. And the N-th file call failing in a logged replace: RILL_EIO
 * and nothing changed. */
START_TEST(failures_while_replaying_and_logging_replace) {
    rig_t g;
    rig_open(&g, QWEN);
    const char *log = test_path_in(g_dir, "f.log");
    rill_session_t *a = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(a, log, RILL_SESSION_FSYNC_ALWAYS), RILL_OK);
    replace_mix(a, NULL);
    /* I/O: the record's write or its fsync fails. */
    for (int64_t nth = 1; nth <= 2; nth++) {
        state_t before, after;
        test_state_capture(&g, a, &before);
        int64_t size = test_file_size(log);
        rill__session_io_fail_nth(nth);
        rill_err_t err = rill_session_replace_text(a, rill_session_seq(a), "io", 2);
        rill__session_io_fail_nth(0);
        ck_assert_int_eq(err, RILL_EIO);
        test_state_capture(&g, a, &after);
        state_equal(&g, &before, &after, SAME_SEQ, "a replace whose record failed");
        ck_assert_int_eq(test_file_size(log), size);
        test_state_free(&before);
        test_state_free(&after);
        rill_session_destroy(&a); /* the log may be unusable now: start again from it */
        ck_assert_int_eq(rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_ALWAYS, &a),
                         RILL_OK);
    }
    state_t want;
    test_state_capture(&g, a, &want);
    rill_session_destroy(&a);
    test_pool_view_t pv;
    test_pool_view(g.pool, &pv);
    int64_t live = rill_mem_stats_total().n_live;
    int64_t c0 = rill_mem_calls();
    a = restore_ok(&g, NULL, log);
    int64_t points = rill_mem_calls() - c0;
    rill_session_destroy(&a);
    int failed = 0;
    for (int64_t k = 1; k <= points; k++) {
        rill_session_t *r = NULL;
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_NEVER, &r);
        rill_mem_fail_nth(0);
        if (err == RILL_OK) {
            state_t got;
            test_state_capture(&g, r, &got);
            state_equal(&g, &want, &got, SAME_SEQ, "restored");
            test_state_free(&got);
            rill_session_destroy(&r);
        } else {
            ck_assert_msg(err == RILL_ENOMEM, "%s: %s", rill_err_name(err), rill_last_error(err));
            ck_assert_ptr_null(r);
            failed++;
        }
        test_pool_same(g.pool, &pv);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }
    ck_assert_int_gt(failed, 0);
    test_state_free(&want);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* ---- version-1 files ------------------------------------------------------------------------ */

static void put_record(unsigned char *b, size_t *len, uint32_t type, uint64_t seq, const void *pl,
                       uint32_t n) {
    unsigned char *r = b + *len;
    rill__put_u32(r + 4, n);
    rill__put_u32(r + 8, type);
    rill__put_u32(r + 12, 0);
    rill__put_u64(r + 16, seq);
    if (n > 0) {
        memcpy(r + REC_HDR, pl, n);
    }
    rill__put_u32(r, rill__crc32c(0, r + 4, REC_HDR - 4 + n));
    *len += REC_HDR + n;
}

/* A log written byte by byte as docs/architecture.md describes version 1 (records 1 to 4)
 * restores to the session the same calls make; and a version-1 snapshot (no replace window)
 * restores too, with replaces limited to versions after it. */
START_TEST(version_1_files_still_restore) {
    rig_t g;
    rig_open(&g, QWEN);
    const char *log = test_path_in(g_dir, "v1.log"), *snap = test_path_in(g_dir, "v2.snap"),
               *snap1 = test_path_in(g_dir, "v1.snap");
    rill_session_t *want = new_session(&g, 16, 64);
    unsigned char *b = calloc(1, 4096);
    memcpy(b, "RILLLOG", 8);
    rill__put_u32(b + 8, 1);
    rill__put_u32(b + 12, LOG_HDR);
    rill__put_u64(b + 16, 0x1234abcdULL);
    rill__put_u64(b + 24, 1);
    rill__fingerprint_put(g.pool, b + 32);
    rill__put_u32(b + 96, 16);
    rill__put_u32(b + 100, 64);
    rill__put_u32(b + 104, 1);
    rill__put_u32(b + 124, rill__crc32c(0, b, 124));
    size_t len = LOG_HDR;
    int32_t toks[6] = { 5, 9, 2, 6, 5, 3 };
    int32_t pos = 7;
    put_record(b, &len, RILL__REC_TOKENS, 1, toks, sizeof toks);
    put_record(b, &len, RILL__REC_TEXT, 2, "hello there wor", 15);
    put_record(b, &len, RILL__REC_TEXT, 3, "ld and more ", 12);
    put_record(b, &len, RILL__REC_FLUSH, 4, NULL, 0);
    put_record(b, &len, RILL__REC_ROLLBACK, 5, &pos, 4);
    put_record(b, &len, RILL__REC_TEXT, 6, "after the roll", 14);
    test_write_file(log, b, len);
    free(b);
    ck_assert_int_eq(rill_session_append(want, toks, 6), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(want, "hello there wor", 15), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(want, "ld and more ", 12), RILL_OK);
    ck_assert_int_eq(rill_session_flush_text(want), RILL_OK);
    ck_assert_int_eq(rill_session_rollback(want, pos), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(want, "after the roll", 14), RILL_OK);
    rill_session_t *r = restore_ok(&g, NULL, log);
    sessions_equal(&g, r, want, SAME_SEQ, "a hand-written version-1 log");
    ck_assert_int_eq(rill_session_replace_text(r, 6, "after the rollback ", 19), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(want, 6, "after the rollback ", 19), RILL_OK);
    sessions_equal(&g, r, want, SAME_SEQ, "then a replace");
    rill_session_destroy(&r);
    /* A version-1 snapshot: this build's snapshot less the replace window section. */
    ck_assert_int_eq(rill_session_snapshot(want, snap), RILL_OK);
    size_t n = 0;
    unsigned char *v2 = test_read_file(snap, &n);
    ck_assert_uint_eq(rill__get_u32(v2 + 8), 2);
    int32_t n_res = (int32_t)rill__get_u32(v2 + 140);
    size_t text_len = (size_t)rill__get_u64(v2 + 112), hist = rill__get_u32(v2 + 152);
    size_t at = 160 + 4 * (size_t)n_res + 4 + text_len + 4; /* the window section */
    unsigned char *v1 = malloc(n);
    memcpy(v1, v2, at);
    memcpy(v1 + at, v2 + at + hist + 4, n - at - hist - 4);
    size_t n1 = n - hist - 4;
    rill__put_u32(v1 + 8, 1);
    rill__put_u32(v1 + 152, 0);
    rill__put_u64(v1 + 16, n1);
    rill__put_u32(v1 + 156, rill__crc32c(0, v1, 156));
    test_write_file(snap1, v1, n1);
    free(v1);
    free(v2);
    r = restore_ok(&g, snap1, NULL);
    sessions_equal(&g, r, want, SAME_SEQ, "a version-1 snapshot");
    int64_t v = rill_session_seq(r);
    ck_assert_int_eq(rill_session_replace_text(r, v, "x", 1), RILL_ERANGE);
    ck_assert_int_eq(rill_session_append_text(r, "more text her", 13), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(want, "more text her", 13), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(r, v + 1, "other text ", 11), RILL_OK);
    ck_assert_int_eq(rill_session_replace_text(want, v + 1, "other text ", 11), RILL_OK);
    sessions_equal(&g, r, want, SAME_SEQ, "a version-1 snapshot, then a replace after it");
    rill_session_destroy(&r);
    rill_session_destroy(&want);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* ---- main ----------------------------------------------------------------------------------- */

int main(void) {
    if (!test_have_models(QWEN, LLAMA, NULL)) {
        return TEST_SKIP;
    }
    if (!test_tmpdir_make(g_dir, sizeof g_dir, "replace")) {
        return EXIT_FAILURE;
    }
    Suite *su = suite_create("sessions_replace");
    TCase *tc = tcase_create("replace");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, chunking_does_not_change_the_bits);
    tcase_add_test(tc, version_at_a_stream_length);
    tcase_add_test(tc, replace_equals_fresh_prefill_bpe);
    tcase_add_test(tc, replace_equals_fresh_prefill_spm);
    tcase_add_test(tc, replace_equals_fresh_prefill_batched);
    tcase_add_test(tc, replace_evaluates_only_what_changed);
    tcase_add_test(tc, fed_replace_equals_fresh_prefill);
    tcase_add_test(tc, replace_with_forks_sharing_pages);
    tcase_add_test(tc, replace_in_a_window_that_has_evicted);
    tcase_add_test(tc, reach_does_not_depend_on_when_input_is_evaluated);
    tcase_add_test(tc, refused_replaces_change_nothing);
    tcase_add_test(tc, allocation_failures_in_replace_change_nothing);
    tcase_add_test(tc, replace_is_logged_and_replays_bit_for_bit);
    tcase_add_test(tc, replace_survives_snapshot_and_replay);
    tcase_add_test(tc, torn_and_damaged_replace_records);
    tcase_add_test(tc, text_end_is_one_input_and_one_record);
    tcase_add_test(tc, failures_while_replaying_and_logging_replace);
    tcase_add_test(tc, version_1_files_still_restore);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    test_dir_remove(g_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
