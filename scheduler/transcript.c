/*
 * transcript.c - local agreement over a rolling window's hypotheses (contract:
 * rill_transcript.h).
 *
 * State: the committed text (one buffer, words joined by single spaces, its dropped head
 * counted in `dropped`), the end time of the last committed word, and the previous hypothesis'
 * uncommitted words (their bytes in a buffer of their own, with absolute end times). An update
 * splits the new hypothesis into words with interpolated times (into a second word buffer),
 * skips its re-transcription of committed words, commits the common prefix with the previous
 * words, and swaps the buffers so that the uncommitted rest becomes the previous hypothesis.
 *
 * Failure atomicity: every buffer an update might need is grown before anything is changed, so
 * RILL_ENOMEM leaves the transcript as it was.
 */
#include <string.h>

#include "rill_alloc.h"
#include "rill_transcript.h"

#define NGRAM 5 /* longest repeat of committed words looked for at a hypothesis' start */

typedef struct word {
    size_t off, len; /* in its hypothesis buffer */
    int64_t end_ms;  /* absolute */
    int32_t seg;     /* index of its segment in the update that made it */
} word_t;

/* A committed word that may lie inside the current window: where its bytes end in the committed
 * stream (dropped bytes counted) and when it ends. */
typedef struct cword {
    int64_t byte_end;
    int64_t end_ms;
} cword_t;

typedef struct hyp {
    char *text; /* the words' bytes, back to back */
    size_t text_len, text_cap;
    word_t *w;
    int32_t n, cap;
} hyp_t;

struct rill_transcript {
    rill_transcript_params_t prm;
    char *com; /* committed text kept (the head before `dropped` bytes is gone) */
    size_t com_len, com_cap;
    int64_t dropped;     /* committed bytes dropped by rill_transcript_drop_committed */
    int64_t n_words;     /* committed words ever */
    int64_t last_end_ms; /* end of the last committed word; -1 before the first */
    int64_t window_start;
    hyp_t prev, cur; /* prev: the uncommitted words of the last hypothesis */
    char *tent;      /* the tentative tail, joined */
    size_t tent_len, tent_cap;
    size_t added_off; /* where this update's committed words start in com */
    cword_t *cw;      /* committed words not yet known to lie before the window, in order */
    int32_t n_cw, cap_cw;
    int64_t before_end; /* committed bytes (dropped counted) that lie before the window */
};

rill_transcript_params_t rill_transcript_default_params(void) {
    return (
        rill_transcript_params_t){ .max_window_ms = 24000, .margin_ms = 200, .prompt_bytes = 600 };
}

static bool grow_bytes(char **p, size_t *cap, size_t need) {
    if (need <= *cap) {
        return true;
    }
    size_t c = *cap < 64 ? 64 : *cap;
    while (c < need) {
        c *= 2;
    }
    char *g = rill_realloc(RILL_MEM_SCHEDULER, *p, c);
    if (g == NULL) {
        return false;
    }
    *p = g;
    *cap = c;
    return true;
}

static bool grow_cwords(rill_transcript_t *t, int32_t need) {
    if (need <= t->cap_cw) {
        return true;
    }
    int32_t c = t->cap_cw < 16 ? 16 : t->cap_cw;
    while (c < need) {
        c *= 2;
    }
    cword_t *g = rill_realloc(RILL_MEM_SCHEDULER, t->cw, (size_t)c * sizeof *g);
    if (g == NULL) {
        return false;
    }
    t->cw = g;
    t->cap_cw = c;
    return true;
}

static bool grow_words(hyp_t *h, int32_t need) {
    if (need <= h->cap) {
        return true;
    }
    int32_t c = h->cap < 16 ? 16 : h->cap;
    while (c < need) {
        c *= 2;
    }
    word_t *g = rill_realloc(RILL_MEM_SCHEDULER, h->w, (size_t)c * sizeof *g);
    if (g == NULL) {
        return false;
    }
    h->w = g;
    h->cap = c;
    return true;
}

rill_err_t rill_transcript_new(const rill_transcript_params_t *params, rill_transcript_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    rill_transcript_params_t p = params != NULL ? *params : rill_transcript_default_params();
    if (p.max_window_ms < 1000 || p.margin_ms < 0 || p.prompt_bytes < 16) {
        return RILL_EINVAL;
    }
    rill_transcript_t *t = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *t);
    if (t == NULL) {
        return RILL_ENOMEM;
    }
    t->prm = p;
    t->last_end_ms = -1;
    if (!grow_bytes(&t->com, &t->com_cap, 1) || !grow_bytes(&t->tent, &t->tent_cap, 1)) {
        rill_transcript_destroy(&t);
        return RILL_ENOMEM;
    }
    t->com[0] = '\0';
    t->tent[0] = '\0';
    *out = t;
    return RILL_OK;
}

static void hyp_free(hyp_t *h) {
    rill_free(h->text);
    rill_free(h->w);
}

void rill_transcript_destroy(rill_transcript_t **tp) {
    if (tp == NULL || *tp == NULL) {
        return;
    }
    rill_transcript_t *t = *tp;
    rill_free(t->com);
    rill_free(t->tent);
    rill_free(t->cw);
    hyp_free(&t->prev);
    hyp_free(&t->cur);
    rill_free(t);
    *tp = NULL;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Words and bytes of segs (an upper bound on the bytes: every word's own). */
static void count_words(const rill_transcript_seg_t *segs, int32_t n_segs, int32_t *n_words,
                        size_t *bytes) {
    *n_words = 0;
    *bytes = 0;
    for (int32_t s = 0; s < n_segs; s++) {
        for (size_t i = 0; i < segs[s].len; i++) {
            if (!is_space(segs[s].text[i])) {
                *bytes += 1;
                *n_words += i == 0 || is_space(segs[s].text[i - 1]);
            }
        }
    }
}

/* Splits segs into t->cur with absolute, interpolated end times. Buffers are grown already. */
static void split(rill_transcript_t *t, const rill_transcript_seg_t *segs, int32_t n_segs,
                  int64_t window_ms) {
    hyp_t *h = &t->cur;
    h->n = 0;
    h->text_len = 0;
    for (int32_t s = 0; s < n_segs; s++) {
        const rill_transcript_seg_t *g = &segs[s];
        int64_t t1 = g->t1_ms >= 0 ? g->t1_ms : (window_ms > g->t0_ms ? window_ms : g->t0_ms);
        size_t i = 0;
        while (i < g->len) {
            while (i < g->len && is_space(g->text[i])) {
                i++;
            }
            size_t b = i;
            while (i < g->len && !is_space(g->text[i])) {
                i++;
            }
            if (i == b) {
                break;
            }
            word_t *w = &h->w[h->n++];
            w->off = h->text_len;
            w->len = i - b;
            w->seg = s;
            /* the word ends where its last byte lies within the segment's span */
            w->end_ms = t->window_start + g->t0_ms + (t1 - g->t0_ms) * (int64_t)i / (int64_t)g->len;
            memcpy(h->text + h->text_len, g->text + b, w->len);
            h->text_len += w->len;
        }
    }
}

static bool word_eq(const hyp_t *a, int32_t i, const hyp_t *b, int32_t j) {
    return a->w[i].len == b->w[j].len &&
           memcmp(a->text + a->w[i].off, b->text + b->w[j].off, a->w[i].len) == 0;
}

/* The k-th committed word from the end (k >= 1) as [*p, *p + *n); false when there are fewer
 * kept. */
static bool committed_word(const rill_transcript_t *t, int k, const char **p, size_t *n) {
    size_t e = t->com_len;
    for (int i = 1; i <= k; i++) {
        while (e > 0 && t->com[e - 1] == ' ') {
            e--;
        }
        size_t b = e;
        while (b > 0 && t->com[b - 1] != ' ') {
            b--;
        }
        if (b == e) {
            return false;
        }
        if (i == k) {
            *p = t->com + b;
            *n = e - b;
            return true;
        }
        e = b;
    }
    return false;
}

/* How many words at cur's start from `from` repeat the last committed words (up to NGRAM). */
static int32_t repeat_len(const rill_transcript_t *t, int32_t from) {
    const hyp_t *h = &t->cur;
    for (int k = NGRAM; k >= 1; k--) {
        if (from + k > h->n) {
            continue;
        }
        bool same = true;
        for (int j = 0; j < k && same; j++) {
            const char *p;
            size_t n;
            /* committed word k - j from the end against cur word from + j */
            same = committed_word(t, k - j, &p, &n) && n == h->w[from + j].len &&
                   memcmp(p, h->text + h->w[from + j].off, n) == 0;
        }
        if (same) {
            return k;
        }
    }
    return 0;
}

/* Appends cur's words [b, e) to com (com has room). */
static void commit_words(rill_transcript_t *t, const hyp_t *h, int32_t b, int32_t e) {
    for (int32_t i = b; i < e; i++) {
        if (t->com_len > 0 || t->dropped > 0) {
            t->com[t->com_len++] = ' ';
        }
        memcpy(t->com + t->com_len, h->text + h->w[i].off, h->w[i].len);
        t->com_len += h->w[i].len;
        t->last_end_ms = h->w[i].end_ms;
        t->n_words++;
        t->cw[t->n_cw++] = (cword_t){ t->dropped + (int64_t)t->com_len, h->w[i].end_ms };
    }
    t->com[t->com_len] = '\0';
}

/* tent = h's words [b, e) joined (tent has room). */
static void set_tentative(rill_transcript_t *t, const hyp_t *h, int32_t b, int32_t e) {
    t->tent_len = 0;
    for (int32_t i = b; i < e; i++) {
        if (t->tent_len > 0) {
            t->tent[t->tent_len++] = ' ';
        }
        memcpy(t->tent + t->tent_len, h->text + h->w[i].off, h->w[i].len);
        t->tent_len += h->w[i].len;
    }
    t->tent[t->tent_len] = '\0';
}

/* prev = h's words [b, e): copies them into prev's buffers (which have room). */
static void keep_prev(rill_transcript_t *t, const hyp_t *h, int32_t b, int32_t e) {
    hyp_t *p = &t->prev;
    p->n = 0;
    p->text_len = 0;
    for (int32_t i = b; i < e; i++) {
        word_t w = h->w[i];
        memcpy(p->text + p->text_len, h->text + w.off, w.len);
        w.off = p->text_len;
        p->text_len += w.len;
        p->w[p->n++] = w;
    }
}

static void report(rill_transcript_t *t, int32_t n_committed, int64_t trim_ms,
                   rill_transcript_update_t *out) {
    if (out == NULL) {
        return;
    }
    *out = (rill_transcript_update_t){ .committed = t->com + t->added_off,
                                       .committed_len = t->com_len - t->added_off,
                                       .tentative = t->tent,
                                       .tentative_len = t->tent_len,
                                       .trim_ms = trim_ms,
                                       .n_committed = n_committed,
                                       .n_tentative = 0 };
    for (size_t i = 0; i < t->tent_len; i++) {
        out->n_tentative += i == 0 || t->tent[i - 1] == ' ';
    }
}

rill_err_t rill_transcript_update(rill_transcript_t *t, const rill_transcript_seg_t *segs,
                                  int32_t n_segs, int64_t window_ms,
                                  rill_transcript_update_t *out) {
    if (t == NULL || n_segs < 0 || (n_segs > 0 && segs == NULL) || window_ms < 0) {
        return RILL_EINVAL;
    }
    for (int32_t s = 0; s < n_segs; s++) {
        if ((segs[s].text == NULL && segs[s].len > 0) || segs[s].t0_ms < 0 ||
            (segs[s].t1_ms >= 0 && segs[s].t1_ms < segs[s].t0_ms) ||
            (s > 0 && segs[s].t0_ms < segs[s - 1].t0_ms)) {
            return RILL_EINVAL;
        }
    }
    int32_t nw;
    size_t bytes;
    count_words(segs, n_segs, &nw, &bytes);
    /* room for everything this update may write: cur, prev (a suffix of cur), com and tent
     * (all of cur's words and their separators) */
    size_t joined = bytes + (size_t)nw + 1;
    if (!grow_words(&t->cur, nw) || !grow_bytes(&t->cur.text, &t->cur.text_cap, bytes + 1) ||
        !grow_words(&t->prev, nw) || !grow_bytes(&t->prev.text, &t->prev.text_cap, bytes + 1) ||
        !grow_bytes(&t->com, &t->com_cap, t->com_len + joined + 1) ||
        !grow_bytes(&t->tent, &t->tent_cap, joined + 1) || !grow_cwords(t, t->n_cw + nw)) {
        return RILL_ENOMEM;
    }
    split(t, segs, n_segs, window_ms);
    const hyp_t *h = &t->cur;
    /* 1. skip the re-transcription of committed words: those ending well before the last
     * committed word's end, then a repeat of the last committed words */
    int32_t i = 0;
    if (t->last_end_ms >= 0) {
        while (i < h->n && h->w[i].end_ms <= t->last_end_ms - t->prm.margin_ms) {
            i++;
        }
        i += repeat_len(t, i);
    }
    /* 2. LocalAgreement-2: the common prefix with the previous hypothesis' uncommitted words */
    int32_t p = 0;
    while (p < t->prev.n && i + p < h->n && word_eq(&t->prev, p, h, i + p)) {
        p++;
    }
    t->added_off = t->com_len;
    commit_words(t, h, i, i + p);
    int32_t done = i + p; /* cur's words [0, done) are committed (now or before) */
    /* 3. what audio is no longer needed: the end of the last segment wholly committed that is
     * not the hypothesis' last (a segment that ends where the window ends may end there only
     * because the audio does: whisper_streaming's rule too) */
    int64_t trim_ms = -1;
    for (int32_t s = 0; s + 1 < n_segs; s++) {
        int32_t last = -1; /* its last word */
        for (int32_t k = 0; k < h->n; k++) {
            last = h->w[k].seg == s ? k : last;
        }
        if (last >= 0 && last < done && segs[s].t1_ms > 0) {
            trim_ms = t->window_start + segs[s].t1_ms; /* always past the window's start */
        }
    }
    int32_t forced = 0;
    if (trim_ms < 0 && window_ms > t->prm.max_window_ms) {
        if (t->last_end_ms < t->window_start) {
            /* nothing settles in this window: commit what it heard rather than grow it */
            forced = h->n - done;
            commit_words(t, h, done, h->n);
            done = h->n;
        }
        trim_ms = t->last_end_ms > t->window_start ? t->last_end_ms : t->window_start + window_ms;
    }
    set_tentative(t, h, done, h->n);
    keep_prev(t, h, done, h->n);
    report(t, p + forced, trim_ms, out);
    return RILL_OK;
}

rill_err_t rill_transcript_trim(rill_transcript_t *t, int64_t start_ms) {
    if (t == NULL || start_ms < t->window_start) {
        return RILL_EINVAL;
    }
    t->window_start = start_ms;
    /* the committed words that end by the new start are before the window now */
    int32_t k = 0;
    while (k < t->n_cw && t->cw[k].end_ms <= start_ms) {
        t->before_end = t->cw[k].byte_end;
        k++;
    }
    if (k > 0) { /* (cw is NULL before the first commit) */
        memmove(t->cw, t->cw + k, (size_t)(t->n_cw - k) * sizeof *t->cw);
        t->n_cw -= k;
    }
    return RILL_OK;
}

rill_err_t rill_transcript_finish(rill_transcript_t *t, rill_transcript_update_t *out) {
    if (t == NULL) {
        return RILL_EINVAL;
    }
    if (!grow_bytes(&t->com, &t->com_cap, t->com_len + t->prev.text_len + (size_t)t->prev.n + 1) ||
        !grow_cwords(t, t->n_cw + t->prev.n)) {
        return RILL_ENOMEM;
    }
    t->added_off = t->com_len;
    int32_t n = t->prev.n;
    commit_words(t, &t->prev, 0, n);
    t->prev.n = 0;
    t->prev.text_len = 0;
    t->tent_len = 0;
    t->tent[0] = '\0';
    report(t, n, -1, out);
    return RILL_OK;
}

const char *rill_transcript_committed(const rill_transcript_t *t, size_t *len) {
    if (len != NULL) {
        *len = t->com_len;
    }
    return t->com;
}

const char *rill_transcript_tentative(const rill_transcript_t *t, size_t *len) {
    if (len != NULL) {
        *len = t->tent_len;
    }
    return t->tent;
}

int64_t rill_transcript_committed_total(const rill_transcript_t *t) {
    return t->dropped + (int64_t)t->com_len;
}

int64_t rill_transcript_n_words(const rill_transcript_t *t) {
    return t->n_words;
}

int64_t rill_transcript_window_start(const rill_transcript_t *t) {
    return t->window_start;
}

/* Where a prompt ending at com[end] starts: the first word within its last prompt_bytes. */
static size_t prompt_start(const rill_transcript_t *t, size_t end) {
    if (end <= t->prm.prompt_bytes) {
        size_t b = 0;
        while (b < end && t->com[b] == ' ') {
            b++;
        }
        return b;
    }
    size_t b = end - t->prm.prompt_bytes;
    while (b < end && t->com[b - 1] != ' ') {
        b++; /* inside a word: on to the next one */
    }
    return b;
}

/* Where the committed text before the window ends in com. */
static size_t before_end(const rill_transcript_t *t) {
    const int64_t e = t->before_end - t->dropped;
    return e <= 0 ? 0 : (size_t)e;
}

const char *rill_transcript_prompt(const rill_transcript_t *t, size_t *len) {
    size_t b = prompt_start(t, t->com_len);
    if (len != NULL) {
        *len = t->com_len - b;
    }
    return t->com + b;
}

const char *rill_transcript_prompt_before(const rill_transcript_t *t, size_t *len) {
    const size_t e = before_end(t);
    size_t b = prompt_start(t, e);
    if (len != NULL) {
        *len = e - b;
    }
    return t->com + b;
}

void rill_transcript_drop_committed(rill_transcript_t *t) {
    /* both prompts must survive: the one before the window starts no later */
    const size_t b0 = prompt_start(t, t->com_len), b1 = prompt_start(t, before_end(t));
    const size_t b = b0 < b1 ? b0 : b1;
    if (b == 0) {
        return;
    }
    /* the tail starts at a word; the next committed word still gets its separator (dropped > 0) */
    memmove(t->com, t->com + b, t->com_len - b + 1);
    t->dropped += (int64_t)b;
    t->com_len -= b;
    t->added_off = t->added_off > b ? t->added_off - b : 0;
}
