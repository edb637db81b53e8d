/*
 * test_translate.c - the simultaneous translation session (scheduler/rill_translate.h) on the
 * tiny qwen2 model (byte-level BPE with a ChatML template; random weights, so its "translations"
 * are noise: the tests check the mechanics, which hold for any output): wait-k's and local
 * agreement's emission rules, emitted words never taken back (the session's turns hold exactly
 * what was emitted), a source revision rolling the open turn back exactly, a long talk in
 * bounded memory with the instruction kept as sinks, bad arguments and failed allocations.
 * Skipped without tests/data/models (exit 77).
 */
#include <check.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_chat.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "rill_translate.h"
#include "test_util.h"

#define QWEN "rill-tiny-qwen2-F32.gguf"
#define SEC  1000000000LL

/* A short instruction: the tiny vocabulary spends a token per byte on most text. */
#define INSTRUCTION "Translate into Spanish."

typedef struct rig {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_chat_t *chat;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool;
    rill_sched_t *sch;
} rig_t;

static void rig_open(rig_t *g) {
    memset(g, 0, sizeof *g);
    g->model = test_model_load(QWEN);
    ck_assert_int_eq(rill_tokenizer_new(rill_model_gguf(g->model), &g->tok), RILL_OK);
    ck_assert_int_eq(rill_chat_new_gguf(rill_model_gguf(g->model), RILL_CHAT_AUTO, &g->chat),
                     RILL_OK);
    test_rig_params_t p = test_rig_default_params(QWEN);
    p.backend.cpu.n_threads = 1;
    p.forward.max_batch = 64;
    p.pool.n_cells = 4096;
    p.pool.kv_type = RILL_DTYPE_F32;
    test_engine_open(g->model, g->tok, &p, &g->be, &g->fw, &g->pool);
    ck_assert_int_eq(rill_sched_new(g->pool, NULL, &g->sch), RILL_OK);
}

static void rig_close(rig_t *g) {
    rill_sched_destroy(&g->sch);
    test_engine_close(&g->pool, &g->fw, &g->be);
    rill_chat_destroy(&g->chat);
    rill_tokenizer_destroy(&g->tok);
    rill_model_destroy(&g->model);
}

/* ---- what a talk emitted -----------------------------------------------------------------------
 */

#define MAXE 512
#define MAXT 8192

typedef struct rec {
    int n_emit;
    rill_translate_emit_t e[MAXE]; /* text points into texts */
    char texts[MAXT];
    size_t used;
    /* the current segment as the test sees it */
    int64_t seg;
    char seg_emitted[2048]; /* words emitted for it */
    char drafts[2][2048];   /* its last two hypotheses, newest in [1] */
    int n_drafts;           /* of the current segment */
    int min_draft_words;    /* fewest source words of the segment a draft was made on */
    int bad;                /* rule violations seen in callbacks (asserted by the test) */
    char why[256];
    int k;         /* wait-k's k */
    bool check_la; /* check local agreement's rule */
    rill_translate_policy_t policy;
    int64_t mid_emissions; /* emissions before their segment ended */
} rec_t;

static void rec_init(rec_t *r, rill_translate_policy_t policy, int k) {
    memset(r, 0, sizeof *r);
    r->policy = policy;
    r->k = k;
    r->min_draft_words = 1 << 30;
}

/* Whitespace as the session splits words. */
static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int words_of(const char *s) {
    int n = 0;
    bool in = false;
    for (; *s; s++) {
        bool sp = is_ws(*s);
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

/* s[0, len) NUL-terminated into out, NUL bytes (which random models emit) turned into 0x01:
 * not whitespace either, so words stay as they are. */
static void copy_text(char *out, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        out[i] = s[i] == '\0' ? '\x01' : s[i];
    }
    out[len] = '\0';
}

static int words_of_n(const char *s, size_t len) {
    char buf[2048];
    if (len >= sizeof buf) {
        return -1;
    }
    copy_text(buf, s, len);
    return words_of(buf);
}

/* Whether the words of p are a prefix of the words of s (single spaces in p). */
static bool word_prefix(const char *p, const char *s) {
    size_t n = strlen(p);
    if (n == 0) {
        return true;
    }
    while (is_ws(*s)) {
        s++;
    }
    /* compare word by word with s's whitespace collapsed */
    char buf[4096];
    size_t m = 0;
    bool in = false;
    for (; *s && m + 1 < sizeof buf; s++) {
        bool sp = is_ws(*s);
        if (sp) {
            if (in) {
                buf[m++] = ' ';
            }
            in = false;
        } else {
            buf[m++] = *s;
            in = true;
        }
    }
    buf[m] = '\0';
    return strncmp(buf, p, n) == 0 && (buf[n] == '\0' || buf[n] == ' ');
}

static void violation(rec_t *r, const char *why) {
    if (r->bad++ == 0) {
        snprintf(r->why, sizeof r->why, "%s", why);
    }
}

/* A new segment: nothing emitted, no draft yet. */
static void new_segment(rec_t *r, int64_t seg) {
    if (seg != r->seg) {
        r->seg = seg;
        r->seg_emitted[0] = '\0';
        r->n_drafts = 0;
    }
}

static void on_draft(void *user, int64_t segment, const char *text, size_t len, int32_t seg_words) {
    rec_t *r = user;
    new_segment(r, segment);
    if (seg_words < r->min_draft_words) {
        r->min_draft_words = seg_words;
    }
    if (len >= sizeof r->drafts[0]) {
        violation(r, "draft too long for the test");
        return;
    }
    /* every hypothesis continues what was emitted */
    char h[2048];
    copy_text(h, text, len);
    if (!word_prefix(r->seg_emitted, h)) {
        violation(r, "a draft does not start with the emitted words");
    }
    memcpy(r->drafts[0], r->drafts[1], sizeof r->drafts[0]);
    memcpy(r->drafts[1], h, len + 1);
    r->n_drafts++;
}

static void on_emit(void *user, const rill_translate_emit_t *e) {
    rec_t *r = user;
    new_segment(r, e->segment);
    if (e->len == 0 || e->n_words != words_of_n(e->text, e->len)) {
        violation(r, "emission's n_words");
    }
    size_t have = strlen(r->seg_emitted);
    if (have + e->len + 2 >= sizeof r->seg_emitted || r->used + e->len + 1 > MAXT ||
        r->n_emit == MAXE) {
        violation(r, "talk too long for the test");
        return;
    }
    if (have > 0) {
        r->seg_emitted[have++] = ' ';
    }
    copy_text(r->seg_emitted + have, e->text, e->len);
    int n_em = words_of(r->seg_emitted);
    int64_t read = e->src_words - e->seg_start;
    if (!e->segment_end) {
        r->mid_emissions++;
        if (r->policy == RILL_TRANSLATE_SENTENCE) {
            violation(r, "the sentence policy emitted before the segment ended");
        }
        if (r->policy == RILL_TRANSLATE_WAIT_K && n_em > read - r->k + 1) {
            violation(r, "wait-k emitted more than n - k + 1 words");
        }
        if (r->policy == RILL_TRANSLATE_LOCAL_AGREEMENT &&
            (r->n_drafts < 2 || !word_prefix(r->seg_emitted, r->drafts[0]) ||
             !word_prefix(r->seg_emitted, r->drafts[1]))) {
            violation(r, "local agreement emitted words the last two drafts do not share");
        }
    }
    r->e[r->n_emit] = *e;
    copy_text(r->texts + r->used, e->text, e->len);
    r->e[r->n_emit].text = r->texts + r->used;
    r->used += e->len + 1;
    r->n_emit++;
}

/* ---- driving a talk ---------------------------------------------------------------------------
 */

static void drain(rill_translate_t *t) {
    rill_err_t err;
    int guard = 0;
    while ((err = rill_translate_step(t)) == RILL_OK) {
        ck_assert_int_lt(++guard, 10000);
    }
    ck_assert_msg(err == RILL_EAGAIN, "step: %s", rill_last_error(err));
}

static void say(rill_translate_t *t, const char *sentence) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", sentence);
    char *save = NULL;
    for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
        ck_assert_int_eq(rill_translate_word(t, w, strlen(w)), RILL_OK);
        drain(t);
    }
    ck_assert_int_eq(rill_translate_end_sentence(t), RILL_OK);
    drain(t);
}

static rill_translate_params_t params(rig_t *g, rill_translate_policy_t policy, rec_t *r) {
    rill_translate_params_t p = rill_translate_default_params();
    p.tok = g->tok;
    p.chat = g->chat;
    p.policy = policy;
    p.instruction = INSTRUCTION;
    p.window = 128;
    p.max_reply_tokens = 24;
    p.on_emit = on_emit;
    p.on_draft = on_draft;
    p.user = r;
    return p;
}

static const char *talk[] = {
    "the cat sat on the mat and the dog ran",
    "a bird sang in the tall green tree",
    "we walk to the river every day",
    "the sun is warm and the sky is blue today",
};
#define N_TALK ((int)(sizeof talk / sizeof talk[0]))

/* The resident tokens of t's session into out (cap), count returned. */
static int64_t session_tokens(rig_t *g, rill_translate_t *t, int32_t *out, int64_t cap) {
    ck_assert_int_eq(rill_sched_wait_idle(g->sch, 30 * SEC), RILL_OK);
    int64_t n = rill_sched_session_tokens(g->sch, rill_translate_sid(t), out, cap);
    ck_assert_int_ge(n, 0);
    ck_assert_int_le(n, cap);
    return n;
}

/* The assistant messages of the session, decoded, each into out[i]: what the turns hold. */
static int assistant_turns(rig_t *g, const int32_t *toks, int64_t n, char out[][1024], int max) {
    int32_t start = rill_tokenizer_find(g->tok, "<|im_start|>", 12);
    int32_t end = rill_tokenizer_find(g->tok, "<|im_end|>", 10);
    int m = 0;
    for (int64_t i = 0; i + 2 < n && m < max; i++) {
        if (toks[i] != start) {
            continue;
        }
        size_t len = 0;
        char role[64] = "";
        size_t rl = 0;
        int64_t j = i + 1;
        for (; j < n && rl < sizeof role - 1; j++) {
            const char *pc = rill_tokenizer_piece(g->tok, toks[j], false, &len);
            if (len > 0 && pc[0] == '\n') {
                j++;
                break;
            }
            memcpy(role + rl, pc, len);
            rl += len;
        }
        role[rl] = '\0';
        if (strcmp(role, "assistant") != 0) {
            continue;
        }
        size_t ol = 0;
        for (; j < n && toks[j] != end; j++) {
            const char *pc = rill_tokenizer_piece(g->tok, toks[j], false, &len);
            ck_assert_uint_lt(ol + len, 1024);
            copy_text(out[m] + ol, pc, len);
            ol += len;
        }
        out[m][ol] = '\0';
        m++;
    }
    return m;
}

/* ---- tests -------------------------------------------------------------------------------------
 */

START_TEST(wait_k_emits_k_words_behind) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_WAIT_K, 3);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_WAIT_K, &r);
    p.k = 3;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    for (int i = 0; i < N_TALK; i++) {
        say(t, talk[i]);
    }
    ck_assert_msg(r.bad == 0, "%s", r.why);
    /* no draft before k words of a segment; and the policy did write before segments ended */
    ck_assert_int_eq(r.min_draft_words, 3);
    ck_assert_int_gt(r.mid_emissions, 0);
    /* the first emission of a segment comes once k of its words are read, not before */
    for (int i = 0; i < r.n_emit; i++) {
        if (!r.e[i].segment_end) {
            ck_assert_int_ge(r.e[i].src_words - r.e[i].seg_start, 3);
        }
    }
    rill_translate_stats_t st;
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, N_TALK);
    ck_assert_int_gt(st.drafts, 0);
    rill_translate_destroy(&t);
    ck_assert_ptr_null(t);
    rig_close(&g);
}
END_TEST

START_TEST(local_agreement_emits_agreed_prefixes) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_LOCAL_AGREEMENT, 0);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_LOCAL_AGREEMENT, &r);
    p.la_chunk = 1;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    for (int i = 0; i < N_TALK; i++) {
        say(t, talk[i]);
    }
    ck_assert_msg(r.bad == 0, "%s", r.why);
    /* The random model's drafts seldom agree; two drafts of the same source do, wholly: a
     * revision of the last word by itself makes the second one, and what the first draft held
     * (less a last word it may have cut) is emitted at once. */
    int64_t at = 0;
    rill_translate_stats_t st;
    rill_translate_stats(t, &st);
    at = st.src_words;
    /* words until the newest draft holds words not emitted yet */
    const char *w[] = { "the", "cat", "sat", "on", "a", "mat", "and", "we", "walk", "to" };
    int n_fed = 0;
    while (n_fed < 40 && (r.n_drafts == 0 || words_of(r.drafts[1]) <= words_of(r.seg_emitted))) {
        const char *x = w[n_fed % 10];
        ck_assert_int_eq(rill_translate_word(t, x, strlen(x)), RILL_OK);
        drain(t);
        n_fed++;
    }
    ck_assert_int_lt(n_fed, 40);
    int before = r.n_emit;
    char hyp[2048];
    snprintf(hyp, sizeof hyp, "%s", r.drafts[1]);
    const char *last = w[(n_fed - 1) % 10];
    ck_assert_int_eq(rill_translate_replace(t, at + n_fed - 1, last, strlen(last)), RILL_OK);
    drain(t);
    ck_assert_msg(r.bad == 0, "%s", r.why);
    ck_assert_str_eq(r.drafts[1], hyp); /* the same draft again */
    ck_assert_int_gt(words_of(hyp), 0);
    ck_assert_msg(r.n_emit > before, "agreed words \"%s\" were not emitted", hyp);
    ck_assert_int_eq(words_of(r.seg_emitted), words_of(hyp));
    ck_assert(word_prefix(r.seg_emitted, hyp));
    rill_translate_destroy(&t);
    rig_close(&g);
}
END_TEST

/* s without whitespace into out (1024 bytes). */
static void squeeze(char *out, const char *s) {
    size_t n = 0;
    for (; *s && n + 1 < 1024; s++) {
        if (!is_ws(*s)) {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

/* Whatever the policy, each segment's emissions, joined, are what the session's assistant turn
 * holds: the closing turn continued after them, nothing was taken back. */
static void check_never_retracted(rill_translate_policy_t policy) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, policy, 2);
    rill_translate_params_t p = params(&g, policy, &r);
    p.k = 2;
    p.max_reply_tokens = 16;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    static char per_seg[N_TALK][1024];
    memset(per_seg, 0, sizeof per_seg);
    int from = 0;
    for (int i = 0; i < N_TALK; i++) {
        say(t, talk[i]);
        for (; from < r.n_emit; from++) {
            ck_assert_int_eq(r.e[from].segment, i);
            size_t l = strlen(per_seg[i]);
            snprintf(per_seg[i] + l, sizeof per_seg[i] - l, "%s%s", l ? " " : "", r.e[from].text);
        }
    }
    ck_assert_msg(r.bad == 0, "%s", r.why);
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 30 * SEC), RILL_OK);
    static int32_t toks[4096];
    int64_t n = session_tokens(&g, t, toks, 4096);
    static char turns[N_TALK][1024];
    int m = assistant_turns(&g, toks, n, turns, N_TALK);
    /* the window keeps the last turns whole (older ones are evicted, the oldest kept one
     * may have lost its start): compare those */
    ck_assert_int_ge(m, 1);
    for (int j = 0; j < m; j++) {
        const char *em = per_seg[N_TALK - 1 - j], *turn = turns[m - 1 - j];
        /* the letters, in order: where the model continued a word across an emission the
         * output shows a space the turn lacks */
        char a[1024], b[1024];
        squeeze(a, em);
        squeeze(b, turn);
        ck_assert_msg(strcmp(a, b) == 0, "segment %d: emitted \"%s\", the turn holds \"%s\"",
                      N_TALK - 1 - j, em, turn);
    }
    rill_translate_destroy(&t);
    rig_close(&g);
}

START_TEST(emitted_words_are_never_taken_back) {
    check_never_retracted(RILL_TRANSLATE_WAIT_K);
    check_never_retracted(RILL_TRANSLATE_LOCAL_AGREEMENT);
    check_never_retracted(RILL_TRANSLATE_SENTENCE);
}
END_TEST

static void feed_words(rill_translate_t *t, const char *s) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
        ck_assert_int_eq(rill_translate_word(t, w, strlen(w)), RILL_OK);
        drain(t);
    }
}

START_TEST(revision_rolls_the_turn_back_exactly) {
    rig_t g;
    rig_open(&g);
    static rec_t ra, rb;
    rec_init(&ra, RILL_TRANSLATE_SENTENCE, 0);
    rec_init(&rb, RILL_TRANSLATE_SENTENCE, 0);
    rill_translate_params_t pa = params(&g, RILL_TRANSLATE_SENTENCE, &ra);
    pa.window = 192; /* no eviction: a fresh session and a revised one hold the same tokens */
    pa.max_reply_tokens = 8;
    rill_translate_params_t pb = pa;
    pb.user = &rb;
    rill_translate_t *a = NULL, *b = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &pa, &a), RILL_OK);
    ck_assert_int_eq(rill_translate_new(g.sch, &pb, &b), RILL_OK);
    say(a, talk[0]);
    say(b, talk[0]);
    int64_t base = words_of(talk[0]);
    /* a hears "we walk to the river" then revises from word 2 ("to") on; b hears the result */
    feed_words(a, "we walk to the river");
    ck_assert_int_eq(rill_translate_replace(a, base + 2, "into the tall green", 19), RILL_OK);
    feed_words(b, "we walk into the tall green");
    static int32_t ta[4096], tb[4096];
    int64_t na = session_tokens(&g, a, ta, 4096), nb = session_tokens(&g, b, tb, 4096);
    ck_assert_int_eq(na, nb);
    ck_assert_mem_eq(ta, tb, (size_t)na * sizeof *ta);
    /* a second revision inside the first one's words, then more words */
    ck_assert_int_eq(rill_translate_replace(a, base + 4, "sky", 3), RILL_OK);
    feed_words(a, "today");
    ck_assert_int_eq(rill_translate_replace(b, base + 4, "sky today", 9), RILL_OK);
    na = session_tokens(&g, a, ta, 4096);
    nb = session_tokens(&g, b, tb, 4096);
    ck_assert_int_eq(na, nb);
    ck_assert_mem_eq(ta, tb, (size_t)na * sizeof *ta);
    /* shortening to fewer words than were read */
    ck_assert_int_eq(rill_translate_replace(a, base + 1, "ran", 3), RILL_OK);
    ck_assert_int_eq(rill_translate_replace(b, base + 1, "ran", 3), RILL_OK);
    rill_translate_stats_t st;
    rill_translate_stats(a, &st);
    ck_assert_int_eq(st.src_words, base + 2);
    ck_assert_int_eq(st.revisions, 3);
    /* both close the segment alike */
    ck_assert_int_eq(rill_translate_end_sentence(a), RILL_OK);
    ck_assert_int_eq(rill_translate_end_sentence(b), RILL_OK);
    drain(a);
    drain(b);
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 30 * SEC), RILL_OK);
    na = session_tokens(&g, a, ta, 4096);
    nb = session_tokens(&g, b, tb, 4096);
    ck_assert_int_eq(na, nb);
    ck_assert_mem_eq(ta, tb, (size_t)na * sizeof *ta);
    /* refused revisions change nothing: a closed segment, a word not read yet */
    feed_words(a, "new words");
    na = session_tokens(&g, a, ta, 4096);
    ck_assert_int_eq(rill_translate_replace(a, base, "x", 1), RILL_ERANGE);
    ck_assert_int_eq(rill_translate_replace(a, base + 2 + 3, "x", 1), RILL_EINVAL);
    ck_assert_int_eq(rill_translate_replace(a, -1, "x", 1), RILL_EINVAL);
    ck_assert_int_eq(rill_translate_replace(a, base + 2, NULL, 1), RILL_EINVAL);
    int64_t n2 = session_tokens(&g, a, tb, 4096);
    ck_assert_int_eq(n2, na);
    ck_assert_mem_eq(ta, tb, (size_t)na * sizeof *ta);
    rill_translate_stats(a, &st);
    ck_assert_int_eq(st.revisions, 3);
    rill_translate_destroy(&a);
    rill_translate_destroy(&b);
    rig_close(&g);
}
END_TEST

START_TEST(long_talk_runs_in_bounded_memory) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_WAIT_K, 2);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_WAIT_K, &r);
    p.k = 2;
    p.window = 96;
    p.max_reply_tokens = 12;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    /* the instruction's tokens, as the session must keep them */
    rill_chat_msg_t m = { .role = "system", .content = INSTRUCTION };
    char sys[1024];
    int64_t sl = rill_chat_apply(g.chat, &m, 1, false, sys, sizeof sys);
    ck_assert_int_gt(sl, 0);
    ck_assert_int_lt(sl, (int64_t)sizeof sys);
    static int32_t want[1024], toks[4096];
    int64_t nsys = rill_tokenizer_encode(g.tok, sys, (size_t)sl, true, true, want, 1024);
    ck_assert_int_gt(nsys, 0);
    rill_sched_session_info_t info;
    ck_assert_int_eq(rill_sched_session_info(g.sch, rill_translate_sid(t), &info), RILL_OK);
    const int32_t cap = info.st.n_sink_cfg + info.st.window_cfg;
    ck_assert_int_ge(info.st.n_sink_cfg, (int32_t)nsys);
    int64_t bytes_at_10 = 0;
    const int N = 60;
    for (int i = 0; i < N; i++) {
        say(t, talk[i % N_TALK]);
        ck_assert_int_eq(rill_sched_wait_idle(g.sch, 30 * SEC), RILL_OK);
        ck_assert_int_eq(rill_sched_session_info(g.sch, rill_translate_sid(t), &info), RILL_OK);
        ck_assert_int_le(info.st.n_resident, cap);
        /* evictions are whole pages of the recent part */
        ck_assert_int_eq(info.st.n_evicted % rill_session_pool_page_size(g.pool), 0);
        int64_t n = session_tokens(&g, t, toks, 4096);
        ck_assert_int_ge(n, nsys);
        ck_assert_mem_eq(toks, want, (size_t)nsys * sizeof *want); /* sinks kept */
        if (i == 10) {
            bytes_at_10 = rill_mem_stats(RILL_MEM_SCHEDULER).bytes;
        }
    }
    ck_assert_msg(r.bad == 0, "%s", r.why);
    ck_assert_int_gt(info.st.n_evicted, 10 * cap); /* the talk was many windows long */
    ck_assert_int_le(rill_mem_stats(RILL_MEM_SCHEDULER).bytes, bytes_at_10);
    rill_translate_stats_t st;
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, N);
    /* the last segments were still translated (emissions after many evictions) */
    ck_assert_int_ge(r.n_emit, 1);
    ck_assert_int_ge(r.e[r.n_emit - 1].segment, N - 4);
    rill_translate_destroy(&t);
    rig_close(&g);
}
END_TEST

START_TEST(long_segments_are_closed_at_the_word_limit) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_SENTENCE, 0);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_SENTENCE, &r);
    p.max_segment_words = 4;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    feed_words(t, "one two three four five six seven eight nine");
    rill_translate_stats_t st;
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 2); /* closed before words 5 and 9 */
    ck_assert_int_eq(st.src_words, 9);
    ck_assert_int_eq(rill_translate_replace(t, 8, "a b c d e", 9), RILL_EFULL);
    ck_assert_int_eq(rill_translate_replace(t, 7, "x", 1), RILL_ERANGE);
    rill_translate_destroy(&t);
    rig_close(&g);
}
END_TEST

/* ---- a streaming transcript (rill_translate_feed_text) ----------------------------------------
 */

/* What a recognizer commits, delta by delta (split inside sentences, several sentences in one,
 * leading spaces as rill_asr_update_t gives them). */
static const char *deltas[] = { "The cat sat",   " on the mat.",    " A bird sang in",
                                " the tree! We", " walk \"home.\"", " The sun is warm" };
/* The same words as runs: read together, the policy stepped after each (a delta's words up to a
 * sentence end, or to the delta's end), the sentence ended first where it ends. */
static const struct {
    const char *words;
    bool end;
} runs[] = { { "The cat sat", false },    { "on the mat.", true }, { "A bird sang in", false },
             { "the tree!", true },       { "We", false },         { "walk \"home.\"", true },
             { "The sun is warm", false } };

static void copy_rec(rec_t *dst, const rec_t *src) {
    memcpy(dst, src, sizeof *dst);
    for (int i = 0; i < dst->n_emit; i++) {
        dst->e[i].text = dst->texts + (src->e[i].text - src->texts);
    }
}

/* The talk through feed_text (by_deltas) or as its runs of words with the sentence ends said. */
static void transcript_talk(rill_translate_policy_t policy, bool by_deltas, rec_t *out) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, policy, 2);
    rill_translate_params_t p = params(&g, policy, &r);
    p.k = 2;
    p.la_chunk = 2;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    rill_translate_stats_t st;
    if (by_deltas) {
        const int64_t segs_after[] = { 0, 1, 1, 2, 3, 3 }; /* segments closed after each delta */
        for (size_t i = 0; i < sizeof deltas / sizeof deltas[0]; i++) {
            size_t used = 1234;
            ck_assert_int_eq(
                rill_translate_feed_text(t, deltas[i], strlen(deltas[i]), false, &used), RILL_OK);
            ck_assert_uint_eq(used, strlen(deltas[i]));
            rill_translate_stats(t, &st);
            ck_assert_int_eq(st.segments, segs_after[i]);
        }
        /* the utterance ends: the open segment is closed */
        ck_assert_int_eq(rill_translate_feed_text(t, "", 0, true, NULL), RILL_OK);
    } else {
        /* the words of each delta read, the policy stepped after a sentence's last word (which
         * ends it first: no draft on it, the closing turn writes the rest) and after the
         * delta's last word */
        for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", runs[i].words);
            char *save = NULL;
            for (char *w = strtok_r(buf, " ", &save); w != NULL; w = strtok_r(NULL, " ", &save)) {
                ck_assert_int_eq(rill_translate_word(t, w, strlen(w)), RILL_OK);
            }
            if (runs[i].end) {
                ck_assert_int_eq(rill_translate_end_sentence(t), RILL_OK);
            }
            drain(t);
        }
        ck_assert_int_eq(rill_translate_end_sentence(t), RILL_OK);
        drain(t);
    }
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 4);
    ck_assert_int_eq(st.src_words, 19);
    ck_assert_msg(r.bad == 0, "%s", r.why);
    copy_rec(out, &r);
    rill_translate_destroy(&t);
    rig_close(&g);
}

START_TEST(a_transcript_is_read_as_its_sentences) {
    static rec_t a, b;
    const rill_translate_policy_t pol[] = { RILL_TRANSLATE_WAIT_K, RILL_TRANSLATE_LOCAL_AGREEMENT,
                                            RILL_TRANSLATE_SENTENCE };
    for (int k = 0; k < 3; k++) {
        transcript_talk(pol[k], true, &a);
        transcript_talk(pol[k], false, &b);
        /* the same emissions at the same source positions: the deltas' split points, leading
         * spaces and punctuation change nothing but where segments end */
        ck_assert_int_gt(a.n_emit, 0);
        ck_assert_int_eq(a.n_emit, b.n_emit);
        int ends = 0;
        for (int i = 0; i < a.n_emit; i++) {
            ck_assert_str_eq(a.e[i].text, b.e[i].text);
            ck_assert_int_eq(a.e[i].src_words, b.e[i].src_words);
            ck_assert_int_eq(a.e[i].segment, b.e[i].segment);
            ck_assert_int_eq(a.e[i].segment_end, b.e[i].segment_end);
            ends += a.e[i].segment_end;
        }
        ck_assert_int_le(ends, 4);
        if (pol[k] == RILL_TRANSLATE_SENTENCE) {
            /* whole sentences: emissions only at the ends, at words 6, 12, 15 and 19 */
            const int64_t at[] = { 6, 12, 15, 19 };
            for (int i = 0; i < a.n_emit; i++) {
                ck_assert(a.e[i].segment_end);
                ck_assert_int_eq(a.e[i].src_words, at[a.e[i].segment]);
            }
        }
    }
}
END_TEST

START_TEST(a_pause_ends_the_sentence) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_SENTENCE, 0);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_SENTENCE, &r);
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    rill_translate_stats_t st;
    /* no punctuation: the words wait; an abbreviation-free "Mr" does not end anything */
    ck_assert_int_eq(rill_translate_feed_text(t, "so Mr smith said", 16, false, NULL), RILL_OK);
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 0);
    ck_assert_int_eq(r.n_emit, 0);
    /* a pause with no text closes the open segment once; another pause does nothing */
    ck_assert_int_eq(rill_translate_feed_text(t, NULL, 0, true, NULL), RILL_OK);
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 1);
    ck_assert_int_eq(st.src_words, 4);
    ck_assert_int_eq(rill_translate_feed_text(t, "", 0, true, NULL), RILL_OK);
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 1);
    /* words and a pause in one call: one segment; sentence ends inside closers end it too */
    ck_assert_int_eq(rill_translate_feed_text(t, " it (rained.) then", 18, true, NULL), RILL_OK);
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 3);
    ck_assert_int_eq(st.src_words, 7);
    /* UTF-8 enders */
    ck_assert_int_eq(
        rill_translate_feed_text(t, "wait\xe2\x80\xa6 ok\xef\xbc\x81", 13, false, NULL), RILL_OK);
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.segments, 5);
    ck_assert_msg(r.bad == 0, "%s", r.why);
    /* bad arguments change nothing */
    size_t used = 99;
    ck_assert_int_eq(rill_translate_feed_text(NULL, "a", 1, false, &used), RILL_EINVAL);
    ck_assert_uint_eq(used, 0);
    ck_assert_int_eq(rill_translate_feed_text(t, NULL, 3, false, &used), RILL_EINVAL);
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.src_words, 9);
    rill_translate_destroy(&t);
    rig_close(&g);
}
END_TEST

typedef struct interrupter {
    rill_translate_t *t;
    int delay_ms;
} interrupter_t;

static void *interrupt_later(void *arg) {
    interrupter_t *x = arg;
    struct timespec ts = { 0, (long)x->delay_ms * 1000000L };
    nanosleep(&ts, NULL);
    rill_translate_interrupt(x->t);
    return NULL;
}

START_TEST(an_interrupt_stops_the_caller) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_LOCAL_AGREEMENT, 0);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_LOCAL_AGREEMENT, &r);
    p.la_chunk = 1;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    /* from another thread while the caller drafts: the caller's call ends with ECANCELED */
    interrupter_t x = { t, 30 };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, interrupt_later, &x), 0);
    rill_err_t err = RILL_OK;
    int calls = 0;
    for (; calls < 2000 && err == RILL_OK; calls++) {
        err = rill_translate_feed_text(t, " one two three", 14, calls % 3 == 2, NULL);
    }
    pthread_join(th, NULL);
    ck_assert_int_eq(err, RILL_ECANCELED);
    ck_assert_int_lt(calls, 2000);
    /* and every later call at once, without touching the engine */
    rill_translate_stats_t st0, st1;
    rill_translate_stats(t, &st0);
    ck_assert_int_eq(rill_translate_word(t, "x", 1), RILL_ECANCELED);
    ck_assert_int_eq(rill_translate_step(t), RILL_ECANCELED);
    ck_assert_int_eq(rill_translate_feed_text(t, "a.", 2, true, NULL), RILL_ECANCELED);
    rill_translate_stats(t, &st1);
    ck_assert_int_eq(st1.src_words, st0.src_words);
    ck_assert_int_eq(st1.drafts, st0.drafts);
    rill_translate_interrupt(t); /* idempotent */
    rill_translate_interrupt(NULL);
    rill_translate_destroy(&t);
    /* the scheduler is sound: a new talk runs */
    rec_init(&r, RILL_TRANSLATE_SENTENCE, 0);
    p = params(&g, RILL_TRANSLATE_SENTENCE, &r);
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    ck_assert_int_eq(rill_translate_feed_text(t, "the cat sat.", 12, false, NULL), RILL_OK);
    ck_assert_int_gt(r.n_emit, 0);
    rill_translate_destroy(&t);
    rig_close(&g);
}
END_TEST

START_TEST(arguments_are_checked) {
    rig_t g;
    rig_open(&g);
    rill_translate_params_t p = rill_translate_default_params();
    ck_assert_int_eq(p.policy, RILL_TRANSLATE_LOCAL_AGREEMENT);
    rill_translate_t *t = (rill_translate_t *)&p;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_EINVAL); /* no tok, chat */
    ck_assert_ptr_null(t);
    p.tok = g.tok;
    p.chat = g.chat;
    const struct {
        int32_t *field;
        int32_t bad;
    } bad[] = { { &p.k, 0 },
                { &p.la_chunk, 0 },
                { &p.window, 0 },
                { &p.evict_pages, -1 },
                { &p.max_segment_words, 0 },
                { &p.max_segment_words, 1025 },
                { &p.max_reply_tokens, 0 },
                { &p.max_reply_tokens, 4097 } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t keep = *bad[i].field;
        *bad[i].field = bad[i].bad;
        ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_EINVAL);
        *bad[i].field = keep;
    }
    p.window = p.max_reply_tokens + 63; /* a turn would not fit */
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_EINVAL);
    p.window = 1024;
    p.policy = (rill_translate_policy_t)7;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_EINVAL);
    ck_assert_ptr_null(rill_translate_policy_name((rill_translate_policy_t)7));
    /* policy names */
    ck_assert_int_eq(rill_translate_policy_parse(&p, "wait-k"), RILL_OK);
    ck_assert_int_eq(p.policy, RILL_TRANSLATE_WAIT_K);
    ck_assert_int_eq(p.k, 3);
    ck_assert_int_eq(rill_translate_policy_parse(&p, "wait-7"), RILL_OK);
    ck_assert_int_eq(p.k, 7);
    ck_assert_int_eq(rill_translate_policy_parse(&p, "la"), RILL_OK);
    ck_assert_int_eq(p.policy, RILL_TRANSLATE_LOCAL_AGREEMENT);
    ck_assert_int_eq(rill_translate_policy_parse(&p, "sentence"), RILL_OK);
    ck_assert_int_eq(p.policy, RILL_TRANSLATE_SENTENCE);
    const char *bad_names[] = { "wait-0", "wait-", "wait-3x", "wait-1001", "greedy", "" };
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        ck_assert_int_eq(rill_translate_policy_parse(&p, bad_names[i]), RILL_EINVAL);
        ck_assert_int_eq(p.policy, RILL_TRANSLATE_SENTENCE);
        ck_assert_int_eq(p.k, 7);
    }
    ck_assert_str_eq(rill_translate_policy_name(RILL_TRANSLATE_WAIT_K), "wait-k");
    /* bad words change nothing */
    p.window = 128;
    p.max_reply_tokens = 24;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    ck_assert_int_eq(rill_translate_word(t, "", 0), RILL_EINVAL);
    ck_assert_int_eq(rill_translate_word(t, "a b", 3), RILL_EINVAL);
    ck_assert_int_eq(rill_translate_word(t, NULL, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_translate_step(t), RILL_EAGAIN);
    ck_assert_int_eq(rill_translate_end_sentence(t), RILL_OK); /* no words: nothing to close */
    ck_assert_int_eq(rill_translate_step(t), RILL_EAGAIN);
    rill_translate_stats_t st;
    rill_translate_stats(t, &st);
    ck_assert_int_eq(st.src_words, 0);
    ck_assert_int_eq(st.segments, 0);
    ck_assert_int_eq(rill_translate_step(NULL), RILL_EINVAL);
    rill_translate_destroy(&t);
    rill_translate_destroy(NULL);
    /* a window the pool cannot reserve */
    p.window = 1 << 20;
    ck_assert_int_ne(rill_translate_new(g.sch, &p, &t), RILL_OK);
    ck_assert_ptr_null(t);
    rill_sched_sid_t ids[4];
    ck_assert_int_eq(rill_sched_session_list(g.sch, ids, 4), 0);
    rig_close(&g);
}
END_TEST

/* Failed allocations inside feed_text: ENOMEM, and *used lets the caller resume with the rest
 * of the delta, so no word is lost or read twice. */
START_TEST(feed_text_failures_resume_exactly) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_WAIT_K, 2);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_WAIT_K, &r);
    p.k = 2;
    rill_translate_t *t = NULL;
    ck_assert_int_eq(rill_translate_new(g.sch, &p, &t), RILL_OK);
    const char *delta = " one two. three";
    const size_t len = strlen(delta);
    int failures = 0;
    for (int j = 1; j < 80; j++) {
        size_t used = 0;
        rill_mem_fail_nth(j);
        rill_err_t err = rill_translate_feed_text(t, delta, len, j % 5 == 0, &used);
        rill_mem_fail_nth(0);
        ck_assert_msg(err == RILL_OK || err == RILL_ENOMEM, "%s", rill_last_error(err));
        ck_assert_uint_le(used, len);
        if (err != RILL_OK) {
            failures++;
            /* the rest of the delta (and its pause), and any step still owed */
            ck_assert_int_eq(
                rill_translate_feed_text(t, delta + used, len - used, j % 5 == 0, &used), RILL_OK);
        } else {
            ck_assert_uint_eq(used, len);
        }
        rill_translate_stats_t st;
        rill_translate_stats(t, &st);
        ck_assert_int_eq(st.src_words, 3 * j);
        (void)rill_sched_wait_idle(g.sch, 30 * SEC);
    }
    ck_assert_int_gt(failures, 3);
    ck_assert_msg(r.bad == 0, "%s", r.why);
    rill_translate_destroy(&t);
    rig_close(&g);
}
END_TEST

START_TEST(failed_allocations_leave_nothing) {
    rig_t g;
    rig_open(&g);
    static rec_t r;
    rec_init(&r, RILL_TRANSLATE_WAIT_K, 2);
    rill_translate_params_t p = params(&g, RILL_TRANSLATE_WAIT_K, &r);
    p.k = 2;
    bool ok = false;
    int failures = 0;
    for (int k = 1; k < 400 && !ok; k++) {
        rill_translate_t *t = NULL;
        ck_assert_int_eq(rill_sched_wait_idle(g.sch, 30 * SEC), RILL_OK);
        rill_mem_fail_nth(k);
        rill_err_t err = rill_translate_new(g.sch, &p, &t);
        rill_mem_fail_nth(0);
        if (err != RILL_OK) {
            ck_assert_ptr_null(t);
            failures++;
            rill_sched_sid_t ids[4];
            ck_assert_int_eq(rill_sched_session_list(g.sch, ids, 4), 0);
            continue;
        }
        ok = true;
        /* a talk with failures injected into words and steps: errors, never corruption */
        for (int j = 1; j < 60; j++) {
            rill_mem_fail_nth(j);
            rill_err_t e1 = rill_translate_word(t, "word", 4);
            rill_err_t e2 = e1 == RILL_OK ? rill_translate_step(t) : RILL_OK;
            rill_mem_fail_nth(0);
            ck_assert(e1 == RILL_OK || e1 == RILL_ENOMEM);
            ck_assert(e2 == RILL_OK || e2 == RILL_EAGAIN || e2 == RILL_ENOMEM);
            (void)rill_sched_wait_idle(g.sch, 30 * SEC);
        }
        drain(t);
        rill_sched_session_info_t info;
        ck_assert_int_eq(rill_sched_session_info(g.sch, rill_translate_sid(t), &info), RILL_OK);
        ck_assert_uint_eq(info.held_text, 0);
        ck_assert_int_eq(rill_translate_end_sentence(t), RILL_OK);
        drain(t);
        rill_translate_stats_t st;
        rill_translate_stats(t, &st);
        ck_assert_int_ge(st.segments, 1);
        rill_translate_destroy(&t);
    }
    ck_assert(ok);
    ck_assert_int_gt(failures, 3);
    rig_close(&g);
}
END_TEST

int main(void) {
    if (!test_have_models(QWEN, NULL)) {
        return TEST_SKIP;
    }
    Suite *su = suite_create("translate");
    TCase *tc = tcase_create("translate");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, wait_k_emits_k_words_behind);
    tcase_add_test(tc, local_agreement_emits_agreed_prefixes);
    tcase_add_test(tc, emitted_words_are_never_taken_back);
    tcase_add_test(tc, revision_rolls_the_turn_back_exactly);
    tcase_add_test(tc, long_talk_runs_in_bounded_memory);
    tcase_add_test(tc, long_segments_are_closed_at_the_word_limit);
    tcase_add_test(tc, a_transcript_is_read_as_its_sentences);
    tcase_add_test(tc, a_pause_ends_the_sentence);
    tcase_add_test(tc, an_interrupt_stops_the_caller);
    tcase_add_test(tc, arguments_are_checked);
    tcase_add_test(tc, failed_allocations_leave_nothing);
    tcase_add_test(tc, feed_text_failures_resume_exactly);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
