/*
 * tokenizer_bpe.c - byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's
 * llm_tokenizer_bpe_session.
 *
 * A fragment of text goes through three steps:
 *   1. UTF-8 clean-up exactly as llama.cpp's decoder sees the text (tokenizer_utf8.c); clean
 *      input, the usual case, is used in place without a copy.
 *   2. The pre-tokenizer splits it into words (tokenizer_pretok.c).
 *   3. Each word is mapped byte by byte to the GPT-2 byte-level alphabet (bytes that are
 *      printable Latin-1 stand for themselves, the other 68 are shifted to U+0100..U+0143), one
 *      symbol per byte, and adjacent symbols are merged lowest merge rank first (ties: leftmost
 *      pair), with a binary heap of candidate pairs, so a word of n bytes costs O(n log n).
 *
 * Merges are looked up by token ids: creation checks that both parts and the result of every
 * merge are tokens, so (left id, right id) -> (rank, result id) in one hash probe is the same
 * relation as llama.cpp's lookup by strings. A stale heap entry (one of its symbols has merged
 * since) is recognised by its recorded byte size, which is equivalent to llama.cpp's string
 * comparison because a symbol only ever grows to the right.
 *
 * A symbol that is no token at the end (a byte whose byte-level character is missing from the
 * vocabulary) is emitted the way llama.cpp does: each byte of its byte-level UTF-8 looked up as
 * a one-byte token text, skipped when absent.
 */
#include <string.h>

#include "tokenizer_internal.h"

/* The GPT-2 bytes_to_unicode() table: bytes in ! .. ~, ¡ .. ¬, ® .. ÿ map to themselves, the
 * others to 256, 257, ... in byte order. */
static uint32_t byte_to_cpt(int b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
        return (uint32_t)b;
    }
    int n = 0;
    for (int x = 0; x < b; x++) {
        if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) {
            n++;
        }
    }
    return 256u + (uint32_t)n;
}

void rill__tok_bpe_init_bytes(rill_tokenizer_t *tok) {
    for (int b = 0; b < 256; b++) {
        uint32_t c = byte_to_cpt(b);
        if (c < 0x80) {
            tok->bl_utf8[b][0] = (unsigned char)c;
            tok->bl_len[b] = 1;
        } else {
            tok->bl_utf8[b][0] = (unsigned char)(0xc0 | (c >> 6));
            tok->bl_utf8[b][1] = (unsigned char)(0x80 | (c & 0x3f));
            tok->bl_len[b] = 2;
        }
        tok->bl_id[b] = rill__tok_lookup(tok, (const char *)tok->bl_utf8[b], tok->bl_len[b]);
        char raw = (char)b;
        tok->raw_byte_id[b] = rill__tok_lookup(tok, &raw, 1);
    }
}

size_t rill__tok_bpe_decode_text(const char *s, size_t n, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
#define PUT(ch)                       \
    do {                              \
        if (o < cap && out != NULL) { \
            out[o] = (char)(ch);      \
        }                             \
        o++;                          \
    } while (0)
    size_t i = 0;
    while (i < n) {
        /* llama.cpp walks code points (its lenient decoder), maps each back to a byte, and
         * writes "[UNK_BYTE_0x<hex of the code point's UTF-8><whole token text>]" for code
         * points outside the byte-level alphabet */
        uint32_t c = 0xfffd;
        size_t adv = 1;
        unsigned char b = p[i];
        if (b < 0x80) {
            c = b;
        } else if (b >= 0xc0 && b < 0xe0 && i + 1 < n && (p[i + 1] & 0xc0) == 0x80) {
            c = ((uint32_t)(b & 0x1f) << 6) | (p[i + 1] & 0x3f);
            adv = 2;
        } else if (b >= 0xe0 && b < 0xf0 && i + 2 < n && (p[i + 1] & 0xc0) == 0x80 &&
                   (p[i + 2] & 0xc0) == 0x80) {
            c = ((uint32_t)(b & 0x0f) << 12) | ((uint32_t)(p[i + 1] & 0x3f) << 6) |
                (p[i + 2] & 0x3f);
            adv = 3;
        } else if (b >= 0xf0 && b < 0xf8 && i + 3 < n && (p[i + 1] & 0xc0) == 0x80 &&
                   (p[i + 2] & 0xc0) == 0x80 && (p[i + 3] & 0xc0) == 0x80) {
            c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(p[i + 1] & 0x3f) << 12) |
                ((uint32_t)(p[i + 2] & 0x3f) << 6) | (p[i + 3] & 0x3f);
            adv = 4;
        }
        int byte = -1;
        if ((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff)) {
            byte = (int)c;
        } else if (c >= 256 && c < 256 + 68) {
            int k = (int)(c - 256);
            for (int x = 0; x < 256; x++) {
                if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) ||
                      (x >= 0xae && x <= 0xff)) &&
                    k-- == 0) {
                    byte = x;
                    break;
                }
            }
        }
        if (byte >= 0) {
            PUT(byte);
        } else {
            /* re-encoded UTF-8 of c, as llama.cpp formats it */
            unsigned char u[4];
            size_t ul;
            if (c <= 0x7f) {
                u[0] = (unsigned char)c;
                ul = 1;
            } else if (c <= 0x7ff) {
                u[0] = (unsigned char)(0xc0 | (c >> 6));
                u[1] = (unsigned char)(0x80 | (c & 0x3f));
                ul = 2;
            } else if (c <= 0xffff) {
                u[0] = (unsigned char)(0xe0 | (c >> 12));
                u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
                u[2] = (unsigned char)(0x80 | (c & 0x3f));
                ul = 3;
            } else {
                u[0] = (unsigned char)(0xf0 | ((c >> 18) & 0x07));
                u[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
                u[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
                u[3] = (unsigned char)(0x80 | (c & 0x3f));
                ul = 4;
            }
            const char *pre = "[UNK_BYTE_0x";
            for (const char *q = pre; *q != '\0'; q++) {
                PUT(*q);
            }
            for (size_t k = 0; k < ul; k++) {
                PUT(hex[u[k] >> 4]);
                PUT(hex[u[k] & 15]);
            }
            for (size_t k = 0; k < n; k++) {
                PUT(s[k]);
            }
            PUT(']');
        }
        i += adv;
    }
#undef PUT
    return o;
}

static const tok_pair_t *pair_find(const rill_tokenizer_t *tok, int32_t l, int32_t r) {
    uint64_t key = tok_pair_key(l, r);
    uint64_t i = tok_pair_home(key, tok->pair_mask);
    for (;;) {
        const tok_pair_t *p = &tok->pairs[i];
        if (p->rank < 0) {
            return NULL;
        }
        if (p->key == key) {
            return p;
        }
        i = (i + 1) & tok->pair_mask;
    }
}

/* Min-heap on (rank, left). */
static bool bpe_before(const tok_bigram_t *a, const tok_bigram_t *b) {
    return a->u.rank < b->u.rank || (a->u.rank == b->u.rank && a->left < b->left);
}

/* The merge of (l, l.next) when there is one. */
static const tok_pair_t *pair_of(const rill_tokenizer_t *tok, const tok_sym_t *sy, int32_t l) {
    if (l < 0 || sy[l].next < 0 || sy[l].id < 0 || sy[sy[l].next].id < 0) {
        return NULL;
    }
    return pair_find(tok, sy[l].id, sy[sy[l].next].id);
}

static rill_err_t push_pair(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w,
                            const tok_sym_t *sy, size_t *nh, int32_t l) {
    const tok_pair_t *p = pair_of(tok, sy, l);
    if (p == NULL) {
        return RILL_OK;
    }
    tok_bigram_t b = { .left = l, .size = sy[l].n + sy[sy[l].next].n };
    b.u.rank = p->rank;
    return rill__tok_heap_push(w, nh, b, bpe_before);
}

typedef struct bpe_ctx {
    const rill_tokenizer_t *tok;
    rill_tokenizer_work_t *w;
    const char *text; /* the cleaned text the words index into */
    tok_out_t *o;
} bpe_ctx_t;

static rill_err_t bpe_word(void *user, size_t off, size_t n) {
    bpe_ctx_t *c = user;
    const rill_tokenizer_t *tok = c->tok;
    rill_tokenizer_work_t *w = c->w;
    const unsigned char *s = (const unsigned char *)c->text + off;
    rill_err_t e;

    if (n > UINT32_MAX / 2) {
        return RILL_EINVAL; /* a single 2 GiB word: our 32-bit offsets stop here */
    }
    e = rill__tok_reserve((void **)&w->word, &w->word_cap, 2 * n, 1);
    if (e == RILL_OK) {
        e = rill__tok_reserve((void **)&w->syms, &w->syms_cap, n, sizeof(tok_sym_t));
    }
    if (e == RILL_OK) {
        e = rill__tok_reserve((void **)&w->heap, &w->heap_cap, n, sizeof(tok_bigram_t));
    }
    if (e != RILL_OK) {
        return e;
    }

    tok_sym_t *sy = w->syms;
    uint32_t wl = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = s[i];
        sy[i].prev = (int32_t)i - 1;
        sy[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        sy[i].off = wl;
        sy[i].n = tok->bl_len[b];
        sy[i].id = tok->bl_id[b];
        memcpy(w->word + wl, tok->bl_utf8[b], tok->bl_len[b]);
        wl += tok->bl_len[b];
    }

    if (tok->ignore_merges && n > 1) {
        int32_t id = rill__tok_lookup(tok, w->word, wl);
        if (id >= 0) {
            tok_push(c->o, id);
            return RILL_OK;
        }
    }

    /* initial candidates, heapified in O(n) */
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < (int32_t)n; i++) {
        const tok_pair_t *p = pair_of(tok, sy, i);
        if (p != NULL) {
            tok_bigram_t *b = &w->heap[nh++];
            b->left = i;
            b->size = sy[i].n + sy[i + 1].n;
            b->u.rank = p->rank;
        }
    }
    for (size_t i = nh / 2; i-- > 0;) {
        rill__tok_heap_sift_down(w->heap, nh, i, bpe_before);
    }
    while (nh > 0) {
        tok_bigram_t b = rill__tok_heap_pop(w->heap, &nh, bpe_before);
        tok_sym_t *l = &sy[b.left];
        if (l->n == 0 || l->next < 0) {
            continue;
        }
        tok_sym_t *r = &sy[l->next];
        if (l->n + r->n != b.size) {
            continue; /* stale: one of the two has merged since */
        }
        l->id = pair_find(tok, l->id, r->id)->result;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) {
            sy[r->next].prev = b.left;
        }
        e = push_pair(tok, w, sy, &nh, l->prev);
        if (e == RILL_OK) {
            e = push_pair(tok, w, sy, &nh, b.left);
        }
        if (e != RILL_OK) {
            return e;
        }
    }

    for (int32_t i = 0; i >= 0; i = sy[i].next) {
        if (sy[i].id >= 0) {
            tok_push(c->o, sy[i].id);
            continue;
        }
        for (uint32_t k = 0; k < sy[i].n; k++) {
            int32_t id = tok->raw_byte_id[(unsigned char)w->word[sy[i].off + k]];
            if (id >= 0) {
                tok_push(c->o, id);
            }
        }
    }
    return RILL_OK;
}

rill_err_t rill__tok_bpe(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w, const char *s,
                         size_t n, tok_out_t *o) {
    const char *text = s;
    const char *subj = s;
    size_t len = n;
    if (rill__utf8_clean_prefix(s, n) != n) {
        rill_err_t e = rill__tok_reserve((void **)&w->buf, &w->buf_cap, 3 * n, 1);
        if (e == RILL_OK) {
            e = rill__tok_reserve((void **)&w->subj, &w->subj_cap, 3 * n, 1);
        }
        if (e != RILL_OK) {
            return e;
        }
        bool sur = false;
        len = rill__utf8_llama_clean(s, n, w->buf, w->subj, &sur);
        text = w->buf;
        subj = sur ? w->subj : w->buf;
    }
    bpe_ctx_t c = { .tok = tok, .w = w, .text = text, .o = o };
    return rill__tok_pre_split(tok, w, subj, len, bpe_word, &c);
}
