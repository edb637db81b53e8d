/*
 * tokenizer_spm.c - SentencePiece-style BPE with scores (tokenizer.ggml.model = "llama"), as
 * llama.cpp's llm_tokenizer_spm_session.
 *
 * The escaped fragment (spaces already U+2581, caller's job) is cut into symbols of one UTF-8
 * character each, with llama.cpp's rule: the length comes from the lead byte's high nibble
 * alone (continuation bytes are not checked) and is clipped at the end of the text. Every
 * adjacent pair whose concatenation is a token is a candidate; the candidate with the highest
 * score of that token is merged first (ties: leftmost), new candidates are formed with the
 * neighbours, stale heap entries are skipped by their recorded size. A binary heap makes it
 * O(n log n) over the whole fragment (SPM has no pre-tokenizer, so a fragment can be the whole
 * input).
 *
 * Each final symbol is its token, or, when its text is no token (only possible for single
 * characters), one byte-fallback token per byte. llama.cpp's resegment() also consults a map of
 * past merges, but a merged symbol is always a token by construction, so that path never runs.
 * A byte without a fallback token (llama.cpp would throw) is emitted as unk, or dropped when
 * the vocabulary has no unk either.
 */
#include "tokenizer_internal.h"

static bool spm_before(const tok_bigram_t *a, const tok_bigram_t *b) {
    return a->u.score > b->u.score || (a->u.score == b->u.score && a->left < b->left);
}

/* The candidate (l, l.next) when its text is a token; false otherwise. */
static bool make_pair(const rill_tokenizer_t *tok, const char *s, const tok_sym_t *sy, int32_t l,
                      tok_bigram_t *b) {
    if (l < 0 || sy[l].next < 0) {
        return false;
    }
    uint32_t size = sy[l].n + sy[sy[l].next].n;
    int32_t id = rill__tok_lookup(tok, s + sy[l].off, size);
    if (id < 0) {
        return false;
    }
    b->left = l;
    b->size = size;
    b->u.score = tok->scores[id];
    return true;
}

static rill_err_t push_pair(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w, const char *s,
                            const tok_sym_t *sy, size_t *nh, int32_t l) {
    tok_bigram_t b;
    if (!make_pair(tok, s, sy, l, &b)) {
        return RILL_OK;
    }
    return rill__tok_heap_push(w, nh, b, spm_before);
}

rill_err_t rill__tok_spm(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w, const char *s,
                         size_t n, tok_out_t *o) {
    static const unsigned char utf8_len[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    if (n == 0) {
        return RILL_OK;
    }
    if (n > UINT32_MAX / 2) {
        return RILL_EINVAL;
    }
    size_t nc = 0; /* symbols: one per character */
    for (size_t off = 0; off < n; nc++) {
        off += utf8_len[(unsigned char)s[off] >> 4];
    }
    rill_err_t e = rill__tok_reserve((void **)&w->syms, &w->syms_cap, nc, sizeof(tok_sym_t));
    if (e == RILL_OK) {
        e = rill__tok_reserve((void **)&w->heap, &w->heap_cap, nc, sizeof(tok_bigram_t));
    }
    if (e != RILL_OK) {
        return e;
    }
    tok_sym_t *sy = w->syms;
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t len = utf8_len[(unsigned char)s[off] >> 4];
        if (len > n - off) {
            len = n - off;
        }
        sy[ns].prev = ns - 1;
        sy[ns].off = (uint32_t)off;
        sy[ns].n = (uint32_t)len;
        sy[ns].id = -1;
        off += len;
        sy[ns].next = off == n ? -1 : ns + 1;
        ns++;
    }

    /* initial candidates, heapified in O(n) */
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < ns; i++) {
        if (make_pair(tok, s, sy, i, &w->heap[nh])) {
            nh++;
        }
    }
    for (size_t i = nh / 2; i-- > 0;) {
        rill__tok_heap_sift_down(w->heap, nh, i, spm_before);
    }
    while (nh > 0) {
        tok_bigram_t b = rill__tok_heap_pop(w->heap, &nh, spm_before);
        tok_sym_t *l = &sy[b.left];
        if (l->n == 0 || l->next < 0) {
            continue;
        }
        tok_sym_t *r = &sy[l->next];
        if (l->n + r->n != b.size) {
            continue; /* stale: one of the two has merged since */
        }
        l->n += r->n;
        l->id = -1; /* looked up once at the end */
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) {
            sy[r->next].prev = b.left;
        }
        e = push_pair(tok, w, s, sy, &nh, l->prev);
        if (e == RILL_OK) {
            e = push_pair(tok, w, s, sy, &nh, b.left);
        }
        if (e != RILL_OK) {
            return e;
        }
    }

    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        int32_t id = rill__tok_lookup(tok, s + sy[i].off, sy[i].n);
        if (id >= 0) {
            tok_push(o, id);
            continue;
        }
        for (uint32_t k = 0; k < sy[i].n; k++) {
            int32_t bid = tok->spm_byte_id[(unsigned char)s[sy[i].off + k]];
            if (bid < 0) {
                bid = tok->sp.unk;
            }
            if (bid >= 0) {
                tok_push(o, bid);
            }
        }
    }
    return RILL_OK;
}
