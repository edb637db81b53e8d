/*
 * tokenizer_encode.c - the encode driver: special tokens, BOS/EOS, scratch memory.
 *
 * llama.cpp's llama_vocab::impl::tokenize in three steps:
 *   1. Partition (tokenizer_st_partition): the special tokens are taken one after the other in
 *      partition order (longest text first); each cuts every occurrence of its text out of the
 *      text fragments left so far, leaving a token fragment in its place (with the whitespace
 *      next to it eaten when the token has LSTRIP/RSTRIP). User-defined tokens always take
 *      part, control and unknown-type tokens only with parse_special. The fragments live in two
 *      arrays of the work object, swapped per special token; a special token whose first byte
 *      never occurs in the input, or whose text is nowhere in it, costs nothing more.
 *   2. BOS when add_special and the vocabulary says add_bos.
 *   3. Each text fragment through the model: SPM gets a leading space when the fragment is the
 *      first or follows a special token (llama.cpp's is_prev_special) and spaces escaped to
 *      U+2581; BPE gets the raw fragment. Then EOS when add_special and add_eos.
 *
 * Tokens are counted even when they do not fit, so one call both fills and measures. Scratch
 * grows through rill__tok_reserve(), which keeps the old block when growing fails: a work
 * object that saw RILL_ENOMEM is still valid. No state survives between calls except buffer
 * capacity, so results never depend on what was encoded before.
 */
#include <ctype.h>
#include <string.h>

#include "rill_alloc.h"
#include "tokenizer_internal.h"

rill_err_t rill_tokenizer_work_new(rill_tokenizer_work_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    rill_tokenizer_work_t *w = rill_calloc(RILL_MEM_MODEL, 1, sizeof(*w));
    if (w == NULL) {
        return RILL_ENOMEM;
    }
    w->gctx = rill__tok_pcre2_context();
    if (w->gctx != NULL) {
        w->md = pcre2_match_data_create(1, w->gctx);
    }
    if (w->md == NULL) {
        rill_tokenizer_work_destroy(&w);
        return RILL_ENOMEM;
    }
    *out = w;
    return RILL_OK;
}

void rill_tokenizer_work_destroy(rill_tokenizer_work_t **wp) {
    if (wp == NULL || *wp == NULL) {
        return;
    }
    rill_tokenizer_work_t *w = *wp;
    pcre2_match_data_free(w->md);
    pcre2_general_context_free(w->gctx);
    rill_free(w->buf);
    rill_free(w->subj);
    rill_free(w->word);
    rill_free(w->syms);
    rill_free(w->heap);
    rill_free(w->frags[0]);
    rill_free(w->frags[1]);
    rill_free(w);
    *wp = NULL;
}

size_t rill_tokenizer_work_bytes(const rill_tokenizer_work_t *w) {
    if (w == NULL) {
        return 0;
    }
    return w->buf_cap + w->subj_cap + w->word_cap + w->syms_cap * sizeof(tok_sym_t) +
           w->heap_cap * sizeof(tok_bigram_t) +
           (w->frags_cap[0] + w->frags_cap[1]) * sizeof(tok_frag_t);
}

/* First occurrence of t[0, tl) in s[from, to), or SIZE_MAX. */
static size_t find_in(const char *s, size_t from, size_t to, const char *t, size_t tl) {
    if (tl == 0 || to - from < tl) {
        return SIZE_MAX;
    }
    const char *p = s + from;
    const char *end = s + to - tl + 1; /* last possible start + 1 */
    while (p < end) {
        const char *q = memchr(p, t[0], (size_t)(end - p));
        if (q == NULL) {
            return SIZE_MAX;
        }
        if (memcmp(q, t, tl) == 0) {
            return (size_t)(q - s);
        }
        p = q + 1;
    }
    return SIZE_MAX;
}

static rill_err_t frag_push(rill_tokenizer_work_t *w, int k, size_t *n, tok_frag_t f) {
    rill_err_t e =
        rill__tok_reserve((void **)&w->frags[k], &w->frags_cap[k], *n + 1, sizeof(tok_frag_t));
    if (e != RILL_OK) {
        return e;
    }
    w->frags[k][(*n)++] = f;
    return RILL_OK;
}

/* llama.cpp's tokenizer_st_partition: special texts cut out, one special token after the
 * other. Leaves the fragments in w->frags[*which][0, *nf). */
static rill_err_t partition(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w, const char *text,
                            size_t len, bool parse_special, int *which, size_t *nf) {
    int cur = 0;
    size_t n = 0;
    rill_err_t e = RILL_OK;
    *which = 0;
    *nf = 0;
    if (len == 0) {
        return RILL_OK;
    }
    e = frag_push(w, cur, &n, (tok_frag_t){ 0, len, -1 });
    if (e != RILL_OK) {
        return e;
    }
    bool present[256] = { false };
    bool scanned = false;
    for (int32_t k = 0; k < tok->n_special; k++) {
        int32_t id = special_id(tok, k);
        uint16_t a = tok->attrs[id];
        if (!parse_special &&
            (a & (RILL_TOKENIZER_ATTR_CONTROL | RILL_TOKENIZER_ATTR_UNKNOWN)) != 0) {
            continue;
        }
        size_t tl;
        const char *t = tok_text(tok, id, &tl);
        if (!scanned) {
            for (size_t i = 0; i < len; i++) {
                present[(unsigned char)text[i]] = true;
            }
            scanned = true;
        }
        if (!present[(unsigned char)t[0]] || find_in(text, 0, len, t, tl) == SIZE_MAX) {
            continue;
        }
        int nxt = 1 - cur;
        size_t m = 0;
        for (size_t f = 0; f < n; f++) {
            tok_frag_t fr = w->frags[cur][f];
            if (fr.id >= 0) {
                e = frag_push(w, nxt, &m, fr);
                if (e != RILL_OK) {
                    return e;
                }
                continue;
            }
            size_t base = fr.off, blen = fr.len;
            for (;;) {
                size_t at = find_in(text, base, base + blen, t, tl);
                if (at == SIZE_MAX) {
                    e = frag_push(w, nxt, &m, (tok_frag_t){ base, blen, -1 });
                    break;
                }
                if (at > base) {
                    size_t ll = at - base;
                    if ((a & RILL_TOKENIZER_ATTR_LSTRIP) != 0) {
                        while (ll > 0 && isspace((unsigned char)text[base + ll - 1])) {
                            ll--;
                        }
                    }
                    if (ll > 0) {
                        e = frag_push(w, nxt, &m, (tok_frag_t){ base, ll, -1 });
                        if (e != RILL_OK) {
                            break;
                        }
                    }
                }
                e = frag_push(w, nxt, &m, (tok_frag_t){ 0, 0, id });
                if (e != RILL_OK || at + tl >= base + blen) {
                    break;
                }
                size_t roff = at + tl, rlen = base + blen - roff;
                if ((a & RILL_TOKENIZER_ATTR_RSTRIP) != 0) {
                    while (rlen > 0 && isspace((unsigned char)text[roff])) {
                        roff++;
                        rlen--;
                    }
                }
                if (rlen == 0) {
                    break;
                }
                base = roff;
                blen = rlen;
            }
            if (e != RILL_OK) {
                return e;
            }
        }
        cur = nxt;
        n = m;
    }
    *which = cur;
    *nf = n;
    return RILL_OK;
}

/* SPM: the fragment with a leading space when asked, spaces escaped as U+2581, into w->buf. */
static rill_err_t spm_escape(rill_tokenizer_work_t *w, const char *s, size_t n, bool prefix,
                             size_t *out_len) {
    if (n > (SIZE_MAX - 3) / 3) {
        return RILL_ENOMEM;
    }
    rill_err_t e = rill__tok_reserve((void **)&w->buf, &w->buf_cap, 3 * n + 3, 1);
    if (e != RILL_OK) {
        return e;
    }
    size_t o = 0;
    if (prefix) {
        memcpy(w->buf, SPM_SP, 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w->buf + o, SPM_SP, 3);
            o += 3;
        } else {
            w->buf[o++] = s[i];
        }
    }
    *out_len = o;
    return RILL_OK;
}

int64_t rill_tokenizer_encode_with(const rill_tokenizer_t *tok, rill_tokenizer_work_t *work,
                                   const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t *out, int64_t cap,
                                   int64_t *n_total) {
    if (tok == NULL || work == NULL || (text == NULL && len > 0) || cap < 0 ||
        (out == NULL && cap > 0)) {
        return RILL_EINVAL;
    }
    tok_out_t o = { .ids = out, .cap = cap, .n = 0 };
    int which;
    size_t nf;
    rill_err_t e = partition(tok, work, text, len, parse_special, &which, &nf);
    if (e != RILL_OK) {
        return e;
    }
    const rill_tokenizer_special_t *sp = &tok->sp;
    if (add_special && sp->add_bos) {
        tok_push(&o, sp->bos);
    }
    bool prev_special = true; /* SPM: the first fragment gets the space prefix */
    for (size_t f = 0; f < nf && e == RILL_OK; f++) {
        /* the models grow other work buffers, never frags */
        tok_frag_t fr = work->frags[which][f];
        if (fr.id >= 0) {
            tok_push(&o, fr.id);
            prev_special = true;
            continue;
        }
        if (tok->kind == RILL_TOKENIZER_SPM) {
            size_t n;
            e = spm_escape(work, text + fr.off, fr.len, sp->add_space_prefix && prev_special, &n);
            if (e == RILL_OK) {
                e = rill__tok_spm(tok, work, work->buf, n, &o);
            }
            prev_special = false;
        } else {
            e = rill__tok_bpe(tok, work, text + fr.off, fr.len, &o);
        }
    }
    if (e != RILL_OK) {
        return e;
    }
    if (add_special && sp->add_eos) {
        tok_push(&o, sp->eos);
    }
    if (n_total != NULL) {
        *n_total = o.n;
    }
    return o.n > cap ? RILL_EFULL : o.n;
}

int64_t rill_tokenizer_encode(const rill_tokenizer_t *tok, const char *text, size_t len,
                              bool add_special, bool parse_special, int32_t *out, int64_t cap) {
    if (tok == NULL || (text == NULL && len > 0) || cap < 0 || (out == NULL && cap > 0)) {
        return RILL_EINVAL;
    }
    rill_tokenizer_work_t *w = NULL;
    rill_err_t e = rill_tokenizer_work_new(&w);
    if (e != RILL_OK) {
        return e;
    }
    int64_t total = 0;
    int64_t r =
        rill_tokenizer_encode_with(tok, w, text, len, add_special, parse_special, out, cap, &total);
    rill_tokenizer_work_destroy(&w);
    if (r == RILL_EFULL && out == NULL && cap == 0) {
        return total; /* measuring */
    }
    return r;
}
