/*
 * tokenizer_decode.c - token ids back to text: pieces, detokenize, streaming.
 *
 * Pieces were computed at creation (tokenizer.c), so everything here is copying. The
 * detokenizer is llama.cpp's llama_detokenize: the prefix space SPM added is removed from the
 * first piece (unless a BOS was stripped, exactly as llama.cpp), and clean_up_tokenization_spaces
 * runs its three in-place passes when the vocabulary asks for it.
 *
 * The streaming detokenizer keeps at most 3 bytes between calls (the start of a character that
 * is not complete yet) in the caller's rill_tokenizer_stream_t, and emits only complete, valid
 * characters; ill-formed input becomes U+FFFD per maximal ill-formed subsequence
 * (rill__utf8_unit). A call first computes everything into the caller's buffer and commits the
 * pending bytes only when it fits, so RILL_EFULL leaves the stream untouched.
 */
#include <string.h>

#include "tokenizer_internal.h"

const char *rill_tokenizer_piece(const rill_tokenizer_t *tok, int32_t id, bool special,
                                 size_t *len) {
    if (tok == NULL || id < 0 || id >= tok->n_vocab) {
        if (len != NULL) {
            *len = 0;
        }
        return NULL;
    }
    size_t n = tok->piece_off[id + 1] - tok->piece_off[id];
    if (!special &&
        (tok->attrs[id] & (RILL_TOKENIZER_ATTR_UNKNOWN | RILL_TOKENIZER_ATTR_CONTROL)) != 0) {
        n = 0;
    }
    if (len != NULL) {
        *len = n;
    }
    return tok->piece_blob + tok->piece_off[id];
}

size_t rill_tokenizer_max_piece(const rill_tokenizer_t *tok) {
    return tok->max_piece;
}

/* llama.cpp's clean_up_tokenization_spaces, in place; returns the new length. */
static size_t clean_spaces(char *t, size_t total) {
    /* 1: " ?" " !" " ." " ," lose the space */
    size_t n1 = total, n = total ? 1 : 0;
    for (size_t i = 1; i < n1; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) {
            n--;
        }
        t[n++] = x;
    }
    /* 2: a lone apostrophe " ' " loses the spaces around it */
    size_t n2 = n;
    n = n2 ? 1 : 0;
    for (size_t i = 1; i < n2; i++) {
        char x = t[i];
        if (x == '\'' && i + 1 < n2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
            n--;
            t[++i] = '\0';
        }
        t[n++] = x;
    }
    /* 3: " 's" " 'm" " 're" " 've" lose the space */
    size_t n3 = n;
    n = n3 ? 1 : 0;
    for (size_t i = 1; i < n3; i++) {
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
            char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') {
                n--;
            } else if (x1 != 't' && x1 != 'd' && i + 2 < n3) {
                char x2 = t[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) {
                    n--;
                }
            }
        }
        t[n++] = x;
    }
    return n;
}

int64_t rill_tokenizer_decode(const rill_tokenizer_t *tok, const int32_t *ids, int64_t n,
                              unsigned flags, char *out, size_t cap, size_t *n_needed) {
    if (tok == NULL || n < 0 || (ids == NULL && n > 0) || (out == NULL && cap > 0)) {
        return RILL_EINVAL;
    }
    const bool raw = (flags & RILL_TOKENIZER_DECODE_RAW) != 0;
    const bool special = (flags & RILL_TOKENIZER_DECODE_SPECIAL) != 0;
    bool remove_space = !raw && tok->sp.add_space_prefix;
    if (!raw && (flags & RILL_TOKENIZER_DECODE_REMOVE_SPECIAL) != 0) {
        if (tok->sp.add_bos && n > 0 && ids[0] == tok->sp.bos) {
            remove_space = false;
            ids++;
            n--;
        }
        if (tok->sp.add_eos && n > 0 && ids[n - 1] == tok->sp.eos) {
            n--;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) {
            return RILL_EINVAL;
        }
    }
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = rill_tokenizer_piece(tok, ids[i], special, &pl);
        if (i == 0 && remove_space && pl > 0 && p[0] == ' ') {
            p++;
            pl--;
        }
        if (pl > 0 && total + pl <= cap) {
            memcpy(out + total, p, pl);
        }
        total += pl;
    }
    if (total > cap) {
        if (n_needed != NULL) {
            *n_needed = total;
        }
        return RILL_EFULL;
    }
    if (!raw && tok->sp.clean_spaces) {
        total = clean_spaces(out, total);
    }
    if (n_needed != NULL) {
        *n_needed = total;
    }
    return (int64_t)total;
}

void rill_tokenizer_stream_init(rill_tokenizer_stream_t *s, unsigned flags) {
    if (s != NULL) {
        memset(s, 0, sizeof(*s));
        s->flags = flags;
    }
}

size_t rill_tokenizer_stream_bound(const rill_tokenizer_t *tok) {
    return 3 * (tok->max_piece + 3);
}

int64_t rill_tokenizer_stream_feed(const rill_tokenizer_t *tok, rill_tokenizer_stream_t *s,
                                   int32_t id, char *out, size_t cap) {
    if (tok == NULL || s == NULL || id < 0 || id >= tok->n_vocab || (out == NULL && cap > 0) ||
        s->n_pend > 3) {
        return RILL_EINVAL;
    }
    size_t pl;
    const char *p =
        rill_tokenizer_piece(tok, id, (s->flags & RILL_TOKENIZER_STREAM_SPECIAL) != 0, &pl);
    /* the pending bytes followed by the piece, viewed without copying */
    const size_t n = s->n_pend + pl;
    /* (n_pend <= 3 was checked above; the second bound says so to the compiler, whose
     * -Warray-bounds cannot see it in optimized builds) */
#define AT(i) \
    ((i) < s->n_pend && (i) < sizeof s->pend ? s->pend[(i)] : (unsigned char)p[(i)-s->n_pend])
    size_t i = 0, o = 0;
    unsigned char unit[4];
    while (i < n) {
        size_t k = 0;
        for (; k < 4 && i + k < n; k++) {
            unit[k] = AT(i + k);
        }
        bool valid;
        size_t ul = rill__utf8_unit(unit, k, &valid);
        if (ul == 0) {
            break; /* incomplete tail: keep it */
        }
        size_t wl = valid ? ul : 3;
        if (o + wl > cap) {
            return RILL_EFULL;
        }
        if (valid) {
            memcpy(out + o, unit, ul);
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
        }
        o += wl;
        i += ul;
    }
    /* commit: what is left (at most 3 bytes) becomes the pending tail */
    unsigned char tail[3];
    size_t nt = n - i;
    for (size_t k = 0; k < nt; k++) {
        tail[k] = AT(i + k);
    }
#undef AT
    memcpy(s->pend, tail, nt);
    s->n_pend = (uint8_t)nt;
    return (int64_t)o;
}

int64_t rill_tokenizer_stream_flush(rill_tokenizer_stream_t *s, char *out, size_t cap) {
    if (s == NULL || (out == NULL && cap > 0)) {
        return RILL_EINVAL;
    }
    if (s->n_pend == 0) {
        return 0;
    }
    if (cap < 3) {
        return RILL_EFULL;
    }
    memcpy(out, "\xef\xbf\xbd", 3);
    s->n_pend = 0;
    return 3;
}
