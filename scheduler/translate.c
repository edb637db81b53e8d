/*
 * translate.c - simultaneous translation on one scheduler session (rill_translate.h).
 *
 * Design. The object is a client of the scheduler's public API only: one session created with
 * the instruction as its system prompt and sinks, source words fed as flushed text inputs, drafts
 * as questions (forks: the session never sees a draft), and the end of a segment as one turn
 * whose input is the end of the user message, the assistant header and the words already
 * emitted, so the adopted reply continues exactly what the user saw. The chat template's pieces
 * (user header, "end of user + assistant header", end of assistant message) are found once by
 * rendering messages around a one-byte sentinel with rill_chat_apply_turns, so any family
 * rill_chat renders works.
 *
 * Invariants. While a segment is open the session holds: the past turns, the user header, and
 * the segment's fed words (nothing held back: every word is flushed). fed[] is that text exactly
 * as fed, word j at [off[j], off[j + 1]); rec[] lists the inputs that brought the words (their
 * versions, the first word of each), so a revision from word i replaces from the input of the
 * last record starting at or before i, with the fed text of the words between as the start of
 * its text. emitted[] is the segment's emitted words; a draft's hypothesis is emitted[] followed
 * by its continuation, so what is emitted is always a prefix of every later hypothesis.
 *
 * Waiting. Requests complete on the engine thread (on_done); the calling thread waits on a
 * condition variable. Wait-k's drafts stop as soon as they hold the words wanted: on_token counts
 * completed words and cancels the question (rill_sched_cancel is callable from callbacks), whose
 * on_done then carries the tokens decoded.
 *
 * A streaming transcript (rill_translate_feed_text) is the word loop a text file gets, with the
 * segment ended at sentence-ending punctuation or a pause the caller reports, and the policy
 * stepped once per run of words a delta brings (up to a sentence end, or its end), not per word:
 * those words were committed at the same moment, so a draft between them would only be outdated
 * by the next word already in hand (wait-k would draft once per word for nothing). The recognizer
 * commits words only once two decodes agree, so a committed word is as final as a word of a
 * file, and the tentative tail is never read (a policy stepped on it would write words the
 * recognizer may take back, and emitted words cannot be). Feeding tentative words through
 * rill_translate_replace was rejected for that reason: it costs drafts on words that change.
 *
 * Interrupt. A daemon's worker thread blocks in these calls; rill_translate_interrupt (any
 * thread) sets a flag every entry point checks and cancels the request in flight, whose rid is
 * published in an atomic while the caller waits, so the worker returns within one engine step.
 *
 * Rejected: turn-boundary eviction (sessions/ evicts whole pages when the window is full; a
 * sessions change to cut at a chosen token would make every eviction a page copy, for a fragment
 * of an old turn the model reads past anyway); re-translating the segment's prefix from scratch
 * per draft (the source words are in the session already: only the emitted prefix is re-encoded).
 */
#include "rill_translate.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"

typedef struct seg_input {
    int64_t version; /* the session version of the input that brought the words */
    int32_t first;   /* the segment's index of its first word */
} seg_input_t;

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

typedef struct toks {
    int32_t *p;
    int32_t n, cap;
} toks_t;

struct rill_translate {
    rill_sched_t *sch;
    rill_sched_sid_t sid;
    rill_translate_params_t p;
    char *instruction;
    bool spm;
    rill_tokenizer_work_t *work;
    toks_t user_open;  /* "<|im_start|>user\n" */
    toks_t asst_open;  /* "<|im_end|>\n<|im_start|>assistant\n" */
    toks_t asst_close; /* "<|im_end|>\n" */
    toks_t after_eot;  /* what follows the end-of-turn marker in asst_close ("\n") */
    /* the open segment */
    buf_t fed;
    int32_t *off; /* max_segment_words + 1 */
    int32_t n_words;
    seg_input_t *rec; /* max_segment_words */
    int32_t n_rec;
    int64_t seg_start, segment;
    bool ended;
    int64_t src_gen, drafted_gen;
    int32_t la_last_n;
    buf_t emitted;
    int32_t n_emitted;
    toks_t em_toks; /* the tokens of the emitted words, as the drafts decoded them */
    toks_t tail;    /* a closed turn's end and the next user header, until they are fed */
    buf_t prev;     /* local agreement: the previous hypothesis */
    bool have_prev;
    buf_t text; /* scratch: a draft's continuation, an emission */
    buf_t tmp;  /* scratch: a revised segment */
    toks_t q;   /* scratch: question tokens */
    /* the request in flight */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    rill_err_t status;
    bool adopted, cancelled;
    int32_t *ans; /* max_reply_tokens */
    int32_t n_ans;
    char msg[256];
    int32_t need, complete;
    bool in_word;
    /* rill_translate_interrupt (any thread) */
    atomic_bool stop;
    _Atomic(rill_sched_rid_t) in_flight; /* 0: none */
    /* time */
    rill_sched_stats_t *st;
    int64_t busy0;
    rill_translate_stats_t stats;
};

rill_translate_params_t rill_translate_default_params(void) {
    rill_translate_params_t p;
    memset(&p, 0, sizeof p);
    p.policy = RILL_TRANSLATE_LOCAL_AGREEMENT;
    p.k = 3;
    p.la_chunk = 4;
    p.window = 1024;
    p.max_segment_words = 96;
    p.max_reply_tokens = 256;
    return p;
}

const char *rill_translate_policy_name(rill_translate_policy_t policy) {
    switch (policy) {
    case RILL_TRANSLATE_WAIT_K:
        return "wait-k";
    case RILL_TRANSLATE_LOCAL_AGREEMENT:
        return "local-agreement";
    case RILL_TRANSLATE_SENTENCE:
        return "sentence";
    }
    return NULL;
}

rill_err_t rill_translate_policy_parse(rill_translate_params_t *p, const char *name) {
    if (p == NULL || name == NULL) {
        return rill__error(RILL_EINVAL, "NULL argument");
    }
    if (strcmp(name, "wait-k") == 0) {
        p->policy = RILL_TRANSLATE_WAIT_K;
        return RILL_OK;
    }
    if (strcmp(name, "local-agreement") == 0 || strcmp(name, "la") == 0) {
        p->policy = RILL_TRANSLATE_LOCAL_AGREEMENT;
        return RILL_OK;
    }
    if (strcmp(name, "sentence") == 0) {
        p->policy = RILL_TRANSLATE_SENTENCE;
        return RILL_OK;
    }
    if (strncmp(name, "wait-", 5) == 0 && name[5] >= '1' && name[5] <= '9') {
        char *end = NULL;
        long k = strtol(name + 5, &end, 10);
        if (*end == '\0' && k >= 1 && k <= 1000) {
            p->policy = RILL_TRANSLATE_WAIT_K;
            p->k = (int32_t)k;
            return RILL_OK;
        }
    }
    return rill__error(RILL_EINVAL,
                       "unknown policy \"%s\" (wait-k, wait-N, local-agreement, sentence)", name);
}

/* ---- small buffers ----------------------------------------------------------------------------
 */

static rill_err_t buf_reserve(buf_t *b, size_t n) {
    if (n <= b->cap) {
        return RILL_OK;
    }
    size_t cap = b->cap < 64 ? 64 : b->cap;
    while (cap < n) {
        cap *= 2;
    }
    char *q = rill_realloc(RILL_MEM_SCHEDULER, b->p, cap);
    if (q == NULL) {
        return rill__error(RILL_ENOMEM, "translation: %zu bytes", cap);
    }
    b->p = q;
    b->cap = cap;
    return RILL_OK;
}

static rill_err_t buf_add(buf_t *b, const char *s, size_t n) {
    rill_err_t err = buf_reserve(b, b->len + n + 1);
    if (err != RILL_OK) {
        return err;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return RILL_OK;
}

static rill_err_t toks_reserve(toks_t *t, int64_t n) {
    if (n <= t->cap) {
        return RILL_OK;
    }
    int64_t cap = t->cap < 64 ? 64 : t->cap;
    while (cap < n) {
        cap *= 2;
    }
    if (cap > INT32_MAX / 2) {
        return rill__error(RILL_ENOMEM, "translation: %lld tokens", (long long)cap);
    }
    int32_t *q = rill_realloc(RILL_MEM_SCHEDULER, t->p, (size_t)cap * sizeof *q);
    if (q == NULL) {
        return rill__error(RILL_ENOMEM, "translation: %lld tokens", (long long)cap);
    }
    t->p = q;
    t->cap = (int32_t)cap;
    return RILL_OK;
}

/* Appends the tokens of text[0, len) to *t. */
static rill_err_t toks_add_text(rill_translate_t *tr, toks_t *t, const char *text, size_t len,
                                bool add_special, bool parse_special) {
    int64_t total = 0;
    int64_t n = rill_tokenizer_encode_with(tr->p.tok, tr->work, text, len, add_special,
                                           parse_special, NULL, 0, &total);
    if (n < 0 && n != RILL_EFULL) {
        return (rill_err_t)n;
    }
    rill_err_t err = toks_reserve(t, (int64_t)t->n + total);
    if (err != RILL_OK) {
        return err;
    }
    n = rill_tokenizer_encode_with(tr->p.tok, tr->work, text, len, add_special, parse_special,
                                   t->p + t->n, t->cap - t->n, &total);
    if (n < 0) {
        return (rill_err_t)n;
    }
    t->n += (int32_t)n;
    return RILL_OK;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The index of the n-th (0-based) whitespace-separated word of s[0, len) and its length; false
 * when s has fewer words. Advances *pos past it. */
static bool next_word(const char *s, size_t len, size_t *pos, const char **w, size_t *wl) {
    size_t i = *pos;
    while (i < len && is_space(s[i])) {
        i++;
    }
    if (i == len) {
        *pos = i;
        return false;
    }
    size_t j = i;
    while (j < len && !is_space(s[j])) {
        j++;
    }
    *w = s + i;
    *wl = j - i;
    *pos = j;
    return true;
}

static int32_t count_words(const char *s, size_t len) {
    size_t pos = 0;
    const char *w;
    size_t wl;
    int32_t n = 0;
    while (next_word(s, len, &pos, &w, &wl)) {
        n++;
    }
    return n;
}

/* ---- requests ---------------------------------------------------------------------------------
 */

static void on_token(void *user, rill_sched_rid_t rid, int32_t token) {
    rill_translate_t *t = user;
    if (t->need <= 0 || t->cancelled) {
        return;
    }
    size_t len = 0;
    const char *piece = rill_tokenizer_piece(t->p.tok, token, false, &len);
    for (size_t i = 0; i < len; i++) {
        if (is_space(piece[i])) {
            if (t->in_word) {
                t->complete++;
            }
            t->in_word = false;
        } else {
            t->in_word = true;
        }
    }
    if (t->complete >= t->need) {
        t->cancelled = true;
        (void)rill_sched_cancel(t->sch, rid);
    }
}

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    rill_translate_t *t = user;
    pthread_mutex_lock(&t->mu);
    int32_t n = a->n_tokens < t->p.max_reply_tokens ? a->n_tokens : t->p.max_reply_tokens;
    if (n > 0) {
        memcpy(t->ans, a->tokens, (size_t)n * sizeof *t->ans);
    }
    t->n_ans = n;
    t->status = a->status;
    t->adopted = a->adopted;
    snprintf(t->msg, sizeof t->msg, "%s", a->message != NULL ? a->message : "");
    t->done = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void refresh_compute(rill_translate_t *t) {
    rill_sched_stats(t->sch, t->st);
    t->stats.compute_ns = t->st->busy_ns - t->busy0;
}

/* Runs a question (turn false) or a turn on t->q and waits for it. need > 0: stop once the
 * continuation holds that many complete words (a cancel that counts as success). */
static rill_err_t run_request(rill_translate_t *t, bool turn, int32_t n_max, int32_t need) {
    rill_sched_ask_t q;
    memset(&q, 0, sizeof q);
    q.question = t->q.p;
    q.n_question = t->q.n;
    q.n_max = n_max;
    q.stop_at_eog = true;
    q.stop_at_newline = true;
    q.on_token = need > 0 ? on_token : NULL;
    q.on_done = on_done;
    q.user = t;
    t->done = false;
    t->cancelled = false;
    t->need = need;
    t->complete = 0;
    t->in_word = false;
    t->n_ans = 0;
    rill_sched_rid_t rid = 0;
    if (atomic_load(&t->stop)) {
        return rill__error(RILL_ECANCELED, "translation: interrupted");
    }
    rill_err_t err =
        turn ? rill_sched_turn(t->sch, t->sid, &q, &rid) : rill_sched_ask(t->sch, t->sid, &q, &rid);
    if (err != RILL_OK) {
        return err;
    }
    atomic_store(&t->in_flight, rid);
    if (atomic_load(&t->stop)) { /* an interrupt that did not see the rid */
        (void)rill_sched_cancel(t->sch, rid);
    }
    pthread_mutex_lock(&t->mu);
    while (!t->done) {
        pthread_cond_wait(&t->cv, &t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    atomic_store(&t->in_flight, 0);
    refresh_compute(t);
    if (atomic_load(&t->stop)) {
        return rill__error(RILL_ECANCELED, "translation: interrupted");
    }
    if (t->status == RILL_ECANCELED && t->cancelled) {
        return RILL_OK;
    }
    if (t->status != RILL_OK) {
        return rill__error(t->status, "translation: %s", t->msg);
    }
    return RILL_OK;
}

/* The answer's text (pieces up to an end-of-generation token, cut at the first line's end) into
 * t->text; *ended: the model ended it (end of generation or a line end), not a cap or a cancel. */
static rill_err_t answer_text(rill_translate_t *t, bool *ended) {
    t->text.len = 0;
    *ended = false;
    rill_err_t err = buf_reserve(&t->text, 1);
    if (err != RILL_OK) {
        return err;
    }
    t->text.p[0] = '\0';
    for (int32_t i = 0; i < t->n_ans; i++) {
        if (rill_tokenizer_is_eog(t->p.tok, t->ans[i])) {
            *ended = true;
            break;
        }
        size_t len = 0;
        const char *piece = rill_tokenizer_piece(t->p.tok, t->ans[i], false, &len);
        const char *nl = memchr(piece, '\n', len);
        if (nl != NULL &&
            count_words(t->text.p, t->text.len) + count_words(piece, (size_t)(nl - piece)) > 0) {
            err = buf_add(&t->text, piece, (size_t)(nl - piece));
            *ended = true;
            break;
        }
        err = buf_add(&t->text, piece, len);
        if (err != RILL_OK) {
            return err;
        }
    }
    return err;
}

/* Emits words [from, to) of s[0, len) (whitespace-separated). */
static rill_err_t emit_words(rill_translate_t *t, const char *s, size_t len, int32_t from,
                             int32_t to, bool segment_end) {
    if (to <= from && !segment_end) {
        return RILL_OK;
    }
    size_t start_len = t->emitted.len;
    size_t pos = 0;
    const char *w;
    size_t wl;
    int32_t i = 0, n = 0;
    rill_err_t err = RILL_OK;
    while (err == RILL_OK && i < to && next_word(s, len, &pos, &w, &wl)) {
        if (i >= from) {
            if (t->emitted.len > 0) {
                err = buf_add(&t->emitted, " ", 1);
            }
            if (err == RILL_OK) {
                err = buf_add(&t->emitted, w, wl);
            }
            n++;
        }
        i++;
    }
    if (err != RILL_OK) {
        t->emitted.len = start_len;
        return err;
    }
    if (n == 0) {
        return RILL_OK;
    }
    size_t at = start_len > 0 ? start_len + 1 : 0;
    t->n_emitted += n;
    t->stats.emitted += n;
    if (t->p.on_emit != NULL) {
        rill_translate_emit_t e = {
            .text = t->emitted.p + at,
            .len = t->emitted.len - at,
            .n_words = n,
            .src_words = t->seg_start + t->n_words,
            .segment = t->segment,
            .seg_start = t->seg_start,
            .segment_end = segment_end,
            .compute_ns = t->stats.compute_ns,
        };
        t->p.on_emit(t->p.user, &e);
    }
    return RILL_OK;
}

/* t->q = the assistant's opening and the segment's emitted words' tokens. */
static rill_err_t build_question(rill_translate_t *t) {
    t->q.n = 0;
    rill_err_t err = toks_reserve(&t->q, (int64_t)t->asst_open.n + t->em_toks.n);
    if (err != RILL_OK) {
        return err;
    }
    memcpy(t->q.p, t->asst_open.p, (size_t)t->asst_open.n * sizeof *t->q.p);
    if (t->em_toks.n > 0) {
        memcpy(t->q.p + t->asst_open.n, t->em_toks.p, (size_t)t->em_toks.n * sizeof *t->q.p);
    }
    t->q.n = t->asst_open.n + t->em_toks.n;
    return RILL_OK;
}

/* Appends to em_toks the draft tokens that hold the continuation's first m words: those before
 * the token where word m (0-based) starts, or, when it never starts, those before the end of
 * generation or the token that ends the line. Tokens are whole pieces and a byte-level BPE piece
 * never has a space after its first byte's word, so the cut falls between words. */
static rill_err_t keep_tokens(rill_translate_t *t, int32_t m) {
    int32_t words = 0, end = 0;
    bool in_word = false, seen = false;
    for (; end < t->n_ans; end++) {
        if (rill_tokenizer_is_eog(t->p.tok, t->ans[end])) {
            break;
        }
        size_t len = 0;
        const char *piece = rill_tokenizer_piece(t->p.tok, t->ans[end], false, &len);
        bool stop = false;
        for (size_t i = 0; i < len && !stop; i++) {
            if (piece[i] == '\n' && (seen || words > 0)) {
                stop = true; /* the line ends: answer_text cut here */
            } else if (is_space(piece[i])) {
                in_word = false;
            } else {
                if (!in_word) {
                    if (words == m) {
                        stop = true;
                        break;
                    }
                    words++;
                }
                in_word = true;
                seen = true;
            }
        }
        if (stop) {
            break;
        }
    }
    rill_err_t err = toks_reserve(&t->em_toks, (int64_t)t->em_toks.n + end);
    if (err != RILL_OK) {
        return err;
    }
    memcpy(t->em_toks.p + t->em_toks.n, t->ans, (size_t)end * sizeof *t->ans);
    t->em_toks.n += end;
    return RILL_OK;
}

/* The hypothesis of the draft in t->text: emitted words then the continuation, into t->tmp;
 * incomplete: drop the last word when the draft did not end (it may be cut). Returns words. */
static rill_err_t hypothesis(rill_translate_t *t, bool ended, int32_t *n_words) {
    t->tmp.len = 0;
    rill_err_t err = buf_add(&t->tmp, t->emitted.p != NULL ? t->emitted.p : "", t->emitted.len);
    if (err == RILL_OK && t->emitted.len > 0 && t->text.len > 0 && !is_space(t->text.p[0])) {
        err = buf_add(&t->tmp, " ", 1); /* the continuation starts a new word */
    }
    if (err == RILL_OK) {
        err = buf_add(&t->tmp, t->text.p, t->text.len);
    }
    if (err != RILL_OK) {
        return err;
    }
    if (!ended && t->tmp.len > 0 && !is_space(t->tmp.p[t->tmp.len - 1])) {
        size_t e = t->tmp.len;
        while (e > 0 && !is_space(t->tmp.p[e - 1])) {
            e--;
        }
        t->tmp.len = e;
        t->tmp.p[e] = '\0';
    }
    *n_words = count_words(t->tmp.p, t->tmp.len);
    return RILL_OK;
}

/* The longest common prefix, in words, of a[0, al) and b[0, bl). */
static int32_t common_words(const char *a, size_t al, const char *b, size_t bl) {
    size_t pa = 0, pb = 0;
    const char *wa, *wb;
    size_t la, lb;
    int32_t n = 0;
    while (next_word(a, al, &pa, &wa, &la) && next_word(b, bl, &pb, &wb, &lb)) {
        if (la != lb || memcmp(wa, wb, la) != 0) {
            break;
        }
        n++;
    }
    return n;
}

/* Tokens the segment's translation may still take: max_reply_tokens less the emitted words'
 * (t->q must hold build_question's result). */
static int32_t reply_budget(const rill_translate_t *t) {
    return t->p.max_reply_tokens - (t->q.n - t->asst_open.n);
}

static rill_err_t draft(rill_translate_t *t) {
    int32_t need = 0, n_max;
    if (t->p.policy == RILL_TRANSLATE_WAIT_K) {
        need = t->n_words - t->p.k + 1 - t->n_emitted;
        n_max = need * 8 + 8;
    } else {
        n_max = 3 * (t->n_words - t->n_emitted) + 8;
    }
    rill_err_t err = build_question(t);
    if (err != RILL_OK) {
        return err;
    }
    if (n_max > reply_budget(t)) {
        n_max = reply_budget(t);
    }
    if (n_max < 1) { /* the translation's budget is spent: the rest waits for the segment's end */
        t->drafted_gen = t->src_gen;
        return RILL_OK;
    }
    err = run_request(t, false, n_max, need);
    if (err != RILL_OK) {
        return err;
    }
    t->drafted_gen = t->src_gen;
    t->stats.drafts++;
    t->stats.draft_tokens += t->n_ans;
    bool ended = false;
    err = answer_text(t, &ended);
    int32_t n_hyp = 0;
    if (err == RILL_OK) {
        /* a wait-k draft stopped by its word count ended its last complete word */
        err = hypothesis(t, ended, &n_hyp);
    }
    if (err != RILL_OK) {
        return err;
    }
    if (t->p.on_draft != NULL) {
        t->p.on_draft(t->p.user, t->segment, t->tmp.p, t->tmp.len, t->n_words);
    }
    if (t->p.policy == RILL_TRANSLATE_WAIT_K) {
        int32_t to = t->n_emitted + need;
        if (to > n_hyp) {
            to = n_hyp;
        }
        if (to <= t->n_emitted) {
            return RILL_OK;
        }
        err = keep_tokens(t, to - t->n_emitted);
        return err == RILL_OK ? emit_words(t, t->tmp.p, t->tmp.len, t->n_emitted, to, false) : err;
    }
    /* local agreement: the words this hypothesis and the previous agree on */
    t->la_last_n = t->n_words;
    int32_t agreed = t->have_prev ? common_words(t->prev.p, t->prev.len, t->tmp.p, t->tmp.len) : 0;
    t->prev.len = 0;
    err = buf_add(&t->prev, t->tmp.p, t->tmp.len);
    if (err != RILL_OK) {
        t->have_prev = false;
        return err;
    }
    t->have_prev = true;
    if (agreed > t->n_emitted) {
        err = keep_tokens(t, agreed - t->n_emitted);
        return err == RILL_OK ? emit_words(t, t->prev.p, t->prev.len, t->n_emitted, agreed, false)
                              : err;
    }
    return RILL_OK;
}

/* Feeds the closed turn's end and the next user header, if still owed (a failed feed is
 * retried by the next call that feeds the session). */
static rill_err_t feed_tail(rill_translate_t *t) {
    if (t->tail.n == 0) {
        return RILL_OK;
    }
    rill_err_t err = rill_sched_ingest(t->sch, t->sid, t->tail.p, t->tail.n);
    if (err == RILL_OK) {
        t->tail.n = 0;
    }
    return err;
}

static void reset_segment(rill_translate_t *t) {
    t->seg_start += t->n_words;
    t->segment++;
    t->n_words = 0;
    t->off[0] = 0;
    t->fed.len = 0;
    t->n_rec = 0;
    t->ended = false;
    t->emitted.len = 0;
    t->n_emitted = 0;
    t->em_toks.n = 0;
    t->prev.len = 0;
    t->have_prev = false;
    t->la_last_n = 0;
    t->src_gen++;
    t->drafted_gen = t->src_gen;
}

/* The turn that closes an ended segment, its emission, and the next user turn's opening. */
static rill_err_t close_segment(rill_translate_t *t) {
    rill_err_t err = build_question(t);
    if (err == RILL_OK) {
        int32_t budget = reply_budget(t);
        err = run_request(t, true, budget > 1 ? budget : 1, 0);
    }
    if (err != RILL_OK) {
        return err;
    }
    if (!t->adopted) {
        return rill__error(RILL_EINTERNAL, "translation: the session did not adopt its turn");
    }
    t->stats.segments++;
    bool ended = false;
    err = answer_text(t, &ended);
    if (err == RILL_OK) {
        err = emit_words(t, t->text.p, t->text.len, 0, INT32_MAX, true);
    }
    /* the session goes on whatever the emission's memory did: close the assistant turn */
    bool eot = t->n_ans > 0 && rill_tokenizer_is_eog(t->p.tok, t->ans[t->n_ans - 1]);
    const toks_t *close = eot ? &t->after_eot : &t->asst_close;
    /* tail's room was reserved at creation: this cannot fail */
    memcpy(t->tail.p, close->p, (size_t)close->n * sizeof *t->tail.p);
    memcpy(t->tail.p + close->n, t->user_open.p, (size_t)t->user_open.n * sizeof *t->tail.p);
    t->tail.n = close->n + t->user_open.n;
    reset_segment(t);
    rill_err_t e2 = feed_tail(t);
    return e2 != RILL_OK ? e2 : err;
}

rill_err_t rill_translate_step(rill_translate_t *t) {
    if (t == NULL) {
        return rill__error(RILL_EINVAL, "NULL translation");
    }
    if (atomic_load(&t->stop)) {
        return rill__error(RILL_ECANCELED, "translation: interrupted");
    }
    rill_err_t err = feed_tail(t);
    if (err != RILL_OK) {
        return err;
    }
    if (t->ended) {
        return close_segment(t);
    }
    if (t->n_words == 0 || t->src_gen == t->drafted_gen) {
        return RILL_EAGAIN;
    }
    switch (t->p.policy) {
    case RILL_TRANSLATE_WAIT_K:
        if (t->n_words - t->p.k + 1 > t->n_emitted) {
            return draft(t);
        }
        return RILL_EAGAIN;
    case RILL_TRANSLATE_LOCAL_AGREEMENT:
        if (t->n_words - t->la_last_n >= t->p.la_chunk) {
            return draft(t);
        }
        return RILL_EAGAIN;
    case RILL_TRANSLATE_SENTENCE:
        return RILL_EAGAIN;
    }
    return RILL_EAGAIN;
}

rill_err_t rill_translate_end_sentence(rill_translate_t *t) {
    if (t == NULL) {
        return rill__error(RILL_EINVAL, "NULL translation");
    }
    if (t->n_words > 0) {
        t->ended = true;
    }
    return RILL_OK;
}

/* ---- source ------------------------------------------------------------------------------------
 */

static const char *lead(const rill_translate_t *t, int32_t index) {
    return index == 0 || t->spm ? "" : " ";
}

rill_err_t rill_translate_word(rill_translate_t *t, const char *word, size_t len) {
    if (t == NULL || word == NULL || len == 0) {
        return rill__error(RILL_EINVAL, "translation: an empty word");
    }
    for (size_t i = 0; i < len; i++) {
        if (is_space(word[i])) {
            return rill__error(RILL_EINVAL, "translation: whitespace in a word");
        }
    }
    if (atomic_load(&t->stop)) {
        return rill__error(RILL_ECANCELED, "translation: interrupted");
    }
    rill_err_t err = feed_tail(t);
    if (err != RILL_OK) {
        return err;
    }
    if (t->ended || t->n_words == t->p.max_segment_words) {
        t->ended = true;
        err = close_segment(t);
        if (err != RILL_OK) {
            return err;
        }
    }
    size_t at = t->fed.len;
    const char *sp = lead(t, t->n_words);
    err = buf_add(&t->fed, sp, strlen(sp));
    if (err == RILL_OK) {
        err = buf_add(&t->fed, word, len);
    }
    int64_t version = 0;
    if (err == RILL_OK) {
        err =
            rill_sched_ingest_text(t->sch, t->sid, t->fed.p + at, t->fed.len - at, true, &version);
    }
    if (err != RILL_OK) {
        t->fed.len = at;
        return err;
    }
    t->rec[t->n_rec++] = (seg_input_t){ .version = version, .first = t->n_words };
    t->n_words++;
    t->off[t->n_words] = (int32_t)t->fed.len;
    t->src_gen++;
    t->stats.src_words++;
    return RILL_OK;
}

rill_err_t rill_translate_replace(rill_translate_t *t, int64_t from_word, const char *text,
                                  size_t len) {
    if (t == NULL || (text == NULL && len > 0)) {
        return rill__error(RILL_EINVAL, "NULL argument");
    }
    if (from_word > t->seg_start + t->n_words || from_word < 0) {
        return rill__error(RILL_EINVAL, "translation: word %lld not read yet (%lld read)",
                           (long long)from_word, (long long)(t->seg_start + t->n_words));
    }
    if (t->spm) {
        return rill__error(RILL_EUNSUPPORTED,
                           "translation: revisions need a byte-level BPE vocabulary (this one "
                           "is SentencePiece)");
    }
    if (atomic_load(&t->stop)) {
        return rill__error(RILL_ECANCELED, "translation: interrupted");
    }
    if (from_word < t->seg_start || t->ended) {
        return rill__error(RILL_ERANGE,
                           "translation: word %lld is in a closed segment (the open one starts "
                           "at %lld)",
                           (long long)from_word, (long long)t->seg_start);
    }
    rill_err_t err = feed_tail(t);
    if (err != RILL_OK) {
        return err;
    }
    int32_t i = (int32_t)(from_word - t->seg_start);
    int32_t n_new = text != NULL ? count_words(text, len) : 0;
    if (i + n_new > t->p.max_segment_words) {
        return rill__error(RILL_EFULL, "translation: %d words in a segment (most %d)", i + n_new,
                           t->p.max_segment_words);
    }
    if (n_new == 0 && i == t->n_words) {
        return RILL_OK;
    }
    if (i == t->n_words) { /* nothing to replace: read the words */
        size_t pos = 0;
        const char *w;
        size_t wl;
        while (next_word(text, len, &pos, &w, &wl)) {
            err = rill_translate_word(t, w, wl);
            if (err != RILL_OK) {
                return err;
            }
        }
        return RILL_OK;
    }
    int32_t r = t->n_rec - 1;
    while (r > 0 && t->rec[r].first > i) {
        r--;
    }
    /* the new segment text: fed words [0, i), then the new words as they would be fed */
    t->tmp.len = 0;
    err = buf_add(&t->tmp, t->fed.p, (size_t)t->off[i]);
    size_t pos = 0;
    const char *w;
    size_t wl;
    int32_t k = i;
    while (err == RILL_OK && next_word(text, len, &pos, &w, &wl)) {
        const char *sp = lead(t, k);
        err = buf_add(&t->tmp, sp, strlen(sp));
        if (err == RILL_OK) {
            err = buf_add(&t->tmp, w, wl);
        }
        k++;
    }
    if (err == RILL_OK) {
        err = buf_reserve(&t->fed, t->tmp.len + 1);
    }
    if (err != RILL_OK) {
        return err;
    }
    size_t from = (size_t)t->off[t->rec[r].first];
    int64_t version = 0;
    err = rill_sched_ingest_replace(t->sch, t->sid, t->rec[r].version, t->tmp.p + from,
                                    t->tmp.len - from, &version);
    if (err != RILL_OK) {
        return err;
    }
    /* taken: adopt the new text and its word offsets */
    memcpy(t->fed.p, t->tmp.p, t->tmp.len);
    t->fed.len = t->tmp.len;
    t->fed.p[t->fed.len] = '\0';
    int32_t nw = i;
    pos = (size_t)t->off[i];
    while (nw < k) {
        const char *sp = lead(t, nw);
        size_t end = pos + strlen(sp);
        while (end < t->fed.len && !is_space(t->fed.p[end])) {
            end++;
        }
        t->off[++nw] = (int32_t)end;
        pos = end;
    }
    t->n_words = k;
    t->n_rec = r + 1;
    t->rec[r].version = version;
    if (t->la_last_n > i) {
        t->la_last_n = i;
    }
    t->src_gen++;
    t->stats.src_words = t->seg_start + t->n_words;
    t->stats.revisions++;
    /* the replace holds back its text's unstable end: end it so drafts see every word */
    return rill_sched_ingest_text(t->sch, t->sid, "", 0, true, NULL);
}

/* ---- a streaming transcript ------------------------------------------------------------------
 */

/* Whether word[0, len) ends a sentence: its last character, past closing quotes and brackets,
 * is sentence-ending punctuation (see rill_translate_feed_text). */
static bool ends_sentence(const char *word, size_t len) {
    static const char *const closers[] = { "\"",
                                           "'",
                                           ")",
                                           "]",
                                           "}",
                                           "\xc2\xbb" /* >> */,
                                           "\xe2\x80\x9d" /* right double quote */,
                                           "\xe2\x80\x99" /* right single quote */ };
    static const char *const enders[] = { ".",
                                          "?",
                                          "!",
                                          "\xe2\x80\xa6" /* ... */,
                                          "\xe3\x80\x82" /* ideographic full stop */,
                                          "\xef\xbc\x9f" /* fullwidth ? */,
                                          "\xef\xbc\x81" /* fullwidth ! */ };
    bool more = true;
    while (more && len > 0) {
        more = false;
        for (size_t i = 0; i < sizeof closers / sizeof closers[0]; i++) {
            size_t n = strlen(closers[i]);
            if (len > n && memcmp(word + len - n, closers[i], n) == 0) {
                len -= n;
                more = true;
                break;
            }
        }
    }
    for (size_t i = 0; i < sizeof enders / sizeof enders[0]; i++) {
        size_t n = strlen(enders[i]);
        if (len >= n && memcmp(word + len - n, enders[i], n) == 0) {
            return true;
        }
    }
    return false;
}

/* Steps until the policy waits. */
static rill_err_t drain_steps(rill_translate_t *t) {
    for (;;) {
        rill_err_t err = rill_translate_step(t);
        if (err == RILL_EAGAIN) {
            return RILL_OK;
        }
        if (err != RILL_OK) {
            return err;
        }
    }
}

rill_err_t rill_translate_feed_text(rill_translate_t *t, const char *text, size_t len, bool pause,
                                    size_t *used) {
    if (used != NULL) {
        *used = 0;
    }
    if (t == NULL || (text == NULL && len > 0)) {
        return rill__error(RILL_EINVAL, "NULL argument");
    }
    size_t pos = 0;
    const char *w;
    size_t wl;
    /* a step owed from an earlier call (a failed draft, an ended segment) comes first */
    rill_err_t err = drain_steps(t);
    while (err == RILL_OK && text != NULL && next_word(text, len, &pos, &w, &wl)) {
        err = rill_translate_word(t, w, wl);
        if (err != RILL_OK) {
            break;
        }
        if (used != NULL) {
            *used = pos;
        }
        if (ends_sentence(w, wl)) {
            (void)rill_translate_end_sentence(t);
            err = drain_steps(t);
        }
    }
    if (err == RILL_OK) {
        err = drain_steps(t); /* the words after the last sentence end, read together */
    }
    if (err != RILL_OK) {
        return err;
    }
    if (used != NULL) {
        *used = len;
    }
    if (pause) {
        (void)rill_translate_end_sentence(t);
        err = drain_steps(t);
    }
    return err;
}

void rill_translate_interrupt(rill_translate_t *t) {
    if (t == NULL) {
        return;
    }
    atomic_store(&t->stop, true);
    rill_sched_rid_t rid = atomic_load(&t->in_flight);
    if (rid != 0) {
        (void)rill_sched_cancel(t->sch, rid);
    }
}

/* ---- life -------------------------------------------------------------------------------------
 */

/* Renders msgs and splits the text at the sentinel byte: before -> *a, after -> *b (either may be
 * NULL). */
static rill_err_t render_split(rill_translate_t *t, const char *role, bool gen, toks_t *a,
                               toks_t *b) {
    rill_chat_msg_t m = { .role = role, .content = "\x01" };
    char buf[512];
    int64_t n = rill_chat_apply_turns(t->p.chat, &m, 1, gen, buf, sizeof buf);
    if (n < 0) {
        return (rill_err_t)n;
    }
    if ((size_t)n >= sizeof buf) {
        return rill__error(RILL_EUNSUPPORTED, "translation: a chat turn's markers exceed %zu bytes",
                           sizeof buf);
    }
    const char *s = memchr(buf, '\x01', (size_t)n);
    if (s == NULL) {
        return rill__error(RILL_EUNSUPPORTED, "translation: the chat template drops content");
    }
    rill_err_t err = RILL_OK;
    if (a != NULL) {
        err = toks_add_text(t, a, buf, (size_t)(s - buf), false, true);
    }
    if (err == RILL_OK && b != NULL) {
        err = toks_add_text(t, b, s + 1, (size_t)n - (size_t)(s - buf) - 1, false, true);
    }
    return err;
}

static rill_err_t setup_template(rill_translate_t *t, toks_t *sys) {
    rill_chat_msg_t m = { .role = "system", .content = t->instruction };
    int64_t n = rill_chat_apply(t->p.chat, &m, 1, false, NULL, 0);
    if (n < 0) {
        return (rill_err_t)n;
    }
    char *text = rill_malloc(RILL_MEM_SCHEDULER, (size_t)n + 1);
    if (text == NULL) {
        return rill__error(RILL_ENOMEM, "translation: %lld bytes", (long long)n);
    }
    (void)rill_chat_apply(t->p.chat, &m, 1, false, text, (size_t)n + 1);
    rill_err_t err = toks_add_text(t, sys, text, (size_t)n, true, true);
    rill_free(text);
    if (err == RILL_OK) {
        err = render_split(t, "user", true, &t->user_open, &t->asst_open);
    }
    if (err == RILL_OK) {
        err = render_split(t, "assistant", false, NULL, &t->asst_close);
    }
    if (err != RILL_OK) {
        return err;
    }
    /* what follows the end-of-turn marker in the assistant's close ("\n" for ChatML) */
    const char *eot = rill_chat_end_of_turn(t->p.chat);
    int32_t id = eot != NULL ? rill_tokenizer_find(t->p.tok, eot, strlen(eot)) : -1;
    int32_t at = 0;
    while (at < t->asst_close.n && t->asst_close.p[at] != id) {
        at++;
    }
    at = at < t->asst_close.n ? at + 1 : 0;
    err = toks_reserve(&t->after_eot, t->asst_close.n - at + 1);
    if (err == RILL_OK) {
        memcpy(t->after_eot.p, t->asst_close.p + at,
               (size_t)(t->asst_close.n - at) * sizeof *t->after_eot.p);
        t->after_eot.n = t->asst_close.n - at;
    }
    return err;
}

static void free_all(rill_translate_t *t) {
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    rill_tokenizer_work_destroy(&t->work);
    rill_free(t->instruction);
    rill_free(t->user_open.p);
    rill_free(t->asst_open.p);
    rill_free(t->asst_close.p);
    rill_free(t->after_eot.p);
    rill_free(t->fed.p);
    rill_free(t->off);
    rill_free(t->rec);
    rill_free(t->emitted.p);
    rill_free(t->em_toks.p);
    rill_free(t->tail.p);
    rill_free(t->prev.p);
    rill_free(t->text.p);
    rill_free(t->tmp.p);
    rill_free(t->q.p);
    rill_free(t->ans);
    rill_free(t->st);
    rill_free(t);
}

rill_err_t rill_translate_new(rill_sched_t *sch, const rill_translate_params_t *params,
                              rill_translate_t **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (sch == NULL || params == NULL || out == NULL || params->tok == NULL ||
        params->chat == NULL) {
        return rill__error(RILL_EINVAL, "translation: NULL scheduler, params, tokenizer or chat");
    }
    const rill_translate_params_t *p = params;
    if (rill_translate_policy_name(p->policy) == NULL || p->k < 1 || p->la_chunk < 1 ||
        p->window < p->max_reply_tokens + 64 || p->evict_pages < 0 || p->max_segment_words < 1 ||
        p->max_segment_words > 1024 || p->max_reply_tokens < 1 || p->max_reply_tokens > 4096) {
        return rill__error(RILL_EINVAL,
                           "translation: a parameter out of range (policy %d, k %d, la_chunk %d, "
                           "window %d, evict_pages %d, max_segment_words %d, max_reply_tokens %d)",
                           (int)p->policy, p->k, p->la_chunk, p->window, p->evict_pages,
                           p->max_segment_words, p->max_reply_tokens);
    }
    rill_translate_t *t = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *t);
    if (t == NULL) {
        return rill__error(RILL_ENOMEM, "translation: %zu bytes", sizeof *t);
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    atomic_init(&t->stop, false);
    atomic_init(&t->in_flight, 0);
    t->sch = sch;
    t->p = *p;
    t->spm = rill_tokenizer_kind(p->tok) == RILL_TOKENIZER_SPM;
    toks_t sys = { 0 };
    rill_err_t err = RILL_OK;
    t->instruction = rill_strdup(
        RILL_MEM_SCHEDULER, p->instruction != NULL ? p->instruction : RILL_TRANSLATE_INSTRUCTION);
    t->off = rill_calloc(RILL_MEM_SCHEDULER, (size_t)p->max_segment_words + 1, sizeof *t->off);
    t->rec = rill_calloc(RILL_MEM_SCHEDULER, (size_t)p->max_segment_words, sizeof *t->rec);
    t->ans = rill_calloc(RILL_MEM_SCHEDULER, (size_t)p->max_reply_tokens, sizeof *t->ans);
    t->st = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *t->st);
    if (t->instruction == NULL || t->off == NULL || t->rec == NULL || t->ans == NULL ||
        t->st == NULL) {
        err = rill__error(RILL_ENOMEM, "translation: buffers");
        goto fail;
    }
    t->p.instruction = t->instruction;
    err = rill_tokenizer_work_new(&t->work);
    if (err == RILL_OK) {
        err = setup_template(t, &sys);
    }
    if (err == RILL_OK) {
        int32_t close = t->asst_close.n > t->after_eot.n ? t->asst_close.n : t->after_eot.n;
        err = toks_reserve(&t->tail, (int64_t)close + t->user_open.n);
    }
    if (err != RILL_OK) {
        goto fail;
    }
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.model = p->model;
    sp.session.prompt = sys.p;
    sp.session.n_prompt = sys.n;
    sp.session.n_sink = sys.n;
    sp.session.window = p->window;
    sp.session.evict_pages = p->evict_pages;
    err = rill_sched_session_create(sch, &sp, &t->sid);
    if (err != RILL_OK) {
        goto fail;
    }
    err = rill_sched_ingest(sch, t->sid, t->user_open.p, t->user_open.n);
    if (err != RILL_OK) {
        (void)rill_sched_session_close(sch, t->sid);
        goto fail;
    }
    rill_sched_stats(sch, t->st);
    t->busy0 = t->st->busy_ns;
    rill_free(sys.p);
    *out = t;
    return RILL_OK;
fail:
    rill_free(sys.p);
    free_all(t);
    return err;
}

void rill_translate_destroy(rill_translate_t **tp) {
    if (tp == NULL || *tp == NULL) {
        return;
    }
    rill_translate_t *t = *tp;
    (void)rill_sched_session_close(t->sch, t->sid);
    free_all(t);
    *tp = NULL;
}

void rill_translate_stats(const rill_translate_t *t, rill_translate_stats_t *out) {
    if (t == NULL || out == NULL) {
        return;
    }
    *out = t->stats;
}

rill_sched_sid_t rill_translate_sid(const rill_translate_t *t) {
    return t != NULL ? t->sid : 0;
}
