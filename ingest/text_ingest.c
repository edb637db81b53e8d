/*
 * text_ingest.c - the text cleaner (rill_text_ingest.h).
 *
 * A byte-at-a-time state machine: everything that depends on earlier bytes (the bytes of an
 * incomplete UTF-8 sequence and the range the next one must fall in, whether the previous byte
 * was a CR, the length of the current output line) is in the handle, and nothing depends on
 * where a chunk ends. That is the whole argument for chunk invariance: the output is a function
 * of the byte sequence, the chunks only decide when it is written.
 *
 * The UTF-8 ranges are those of Unicode's table 3-7 (well-formed byte sequences): after E0 the
 * next byte is A0..BF (no overlong forms), after ED 80..9F (no surrogates), after F0 90..BF,
 * after F4 80..8F (nothing above U+10FFFF). A byte outside the expected range ends the
 * subsequence (one U+FFFD) and is then read afresh, which is the "maximal subpart" rule.
 *
 * Rejected: holding back a trailing CR until the next byte (as the issue first suggested). Writing
 * the LF at once and dropping a following LF gives the same bytes with less delay: a model
 * sees the end of a line as soon as it arrives.
 */
#include <string.h>

#include "rill_alloc.h"
#include "rill_text_ingest.h"

#define MAX_LINE_LIMIT (1 << 30)

struct rill_text_clean {
    rill_text_clean_params_t params;
    uint8_t pend[4]; /* the incomplete sequence */
    int npend, need; /* bytes held, bytes the sequence needs */
    uint8_t lo, hi;  /* range of the next continuation byte */
    bool was_cr;
    int64_t line_len;
    rill_text_clean_stats_t stats;
};

/* Output cursor of one call. */
typedef struct sink {
    char *p;
    size_t n;
} sink_t;

rill_text_clean_params_t rill_text_clean_default_params(void) {
    rill_text_clean_params_t p = { .max_line = 4096 };
    return p;
}

rill_err_t rill_text_clean_new(const rill_text_clean_params_t *params, rill_text_clean_t **out) {
    rill_text_clean_params_t p = params != NULL ? *params : rill_text_clean_default_params();
    if (out == NULL || p.max_line < 0 || p.max_line > MAX_LINE_LIMIT) {
        return RILL_EINVAL;
    }
    rill_text_clean_t *t = rill_calloc(RILL_MEM_INGEST, 1, sizeof *t);
    if (t == NULL) {
        return RILL_ENOMEM;
    }
    t->params = p;
    *out = t;
    return RILL_OK;
}

void rill_text_clean_destroy(rill_text_clean_t **tp) {
    if (tp != NULL) {
        rill_free(*tp);
        *tp = NULL;
    }
}

void rill_text_clean_reset(rill_text_clean_t *t) {
    if (t != NULL) {
        t->npend = 0;
        t->was_cr = false;
        t->line_len = 0;
    }
}

rill_text_clean_stats_t rill_text_clean_stats(const rill_text_clean_t *t) {
    rill_text_clean_stats_t z = { 0 };
    return t != NULL ? t->stats : z;
}

static void put_newline(rill_text_clean_t *t, sink_t *o) {
    o->p[o->n++] = '\n';
    t->line_len = 0;
}

/* Writes one code point's bytes, splitting the line first when it would pass max_line. */
static void put_cp(rill_text_clean_t *t, sink_t *o, const uint8_t *b, int n) {
    if (t->params.max_line > 0 && t->line_len > 0 && t->line_len + n > t->params.max_line) {
        put_newline(t, o);
        t->stats.lines_split++;
    }
    memcpy(o->p + o->n, b, (size_t)n);
    o->n += (size_t)n;
    t->line_len += n;
}

static void put_fffd(rill_text_clean_t *t, sink_t *o) {
    static const uint8_t k_fffd[3] = { 0xef, 0xbf, 0xbd };
    put_cp(t, o, k_fffd, 3);
    t->stats.replaced++;
}

static void step(rill_text_clean_t *t, sink_t *o, uint8_t b) {
    bool was_cr = t->was_cr;
    t->was_cr = false;
    if (t->npend > 0) {
        if (b >= t->lo && b <= t->hi) {
            t->pend[t->npend++] = b;
            t->lo = 0x80;
            t->hi = 0xbf;
            if (t->npend == t->need) {
                put_cp(t, o, t->pend, t->need);
                t->npend = 0;
            }
            return;
        }
        put_fffd(t, o); /* the subsequence ends here; b is read afresh */
        t->npend = 0;
    }
    if (b < 0x80) {
        if (b == '\n') {
            if (!was_cr) {
                put_newline(t, o);
            }
        } else if (b == '\r') {
            put_newline(t, o);
            t->stats.line_ends++;
            t->was_cr = true;
        } else if (b == '\t' || (b >= 0x20 && b != 0x7f)) {
            put_cp(t, o, &b, 1);
        } else {
            t->stats.dropped++;
        }
        return;
    }
    int need = 0;
    uint8_t lo = 0x80, hi = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) {
        need = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        lo = b == 0xe0 ? 0xa0 : 0x80;
        hi = b == 0xed ? 0x9f : 0xbf;
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        lo = b == 0xf0 ? 0x90 : 0x80;
        hi = b == 0xf4 ? 0x8f : 0xbf;
    }
    if (need == 0) { /* 80..C1 (a stray continuation, an overlong lead) or F5..FF */
        put_fffd(t, o);
        return;
    }
    t->pend[0] = b;
    t->npend = 1;
    t->need = need;
    t->lo = lo;
    t->hi = hi;
}

int64_t rill_text_clean_feed(rill_text_clean_t *t, const void *data, size_t len, char *out,
                             size_t cap) {
    if (t == NULL || out == NULL || (data == NULL && len > 0)) {
        return RILL_EINVAL;
    }
    if (len > (SIZE_MAX - 16) / 4 || cap < RILL_TEXT_CLEAN_BOUND(len)) {
        return RILL_EFULL;
    }
    sink_t o = { out, 0 };
    const uint8_t *b = data;
    for (size_t i = 0; i < len; i++) {
        step(t, &o, b[i]);
    }
    out[o.n] = '\0';
    t->stats.bytes_in += (int64_t)len;
    t->stats.bytes_out += (int64_t)o.n;
    return (int64_t)o.n;
}

int64_t rill_text_clean_flush(rill_text_clean_t *t, char *out, size_t cap) {
    if (t == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    if (cap < 16) {
        return RILL_EFULL;
    }
    sink_t o = { out, 0 };
    if (t->npend > 0) {
        put_fffd(t, &o);
        t->npend = 0;
    }
    out[o.n] = '\0';
    t->stats.bytes_out += (int64_t)o.n;
    return (int64_t)o.n;
}
