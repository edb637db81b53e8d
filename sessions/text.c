/*
 * text.c - boundary-safe tokenization: chunks of a text give the tokens of the whole text.
 *
 * Design. A tokenizer's output for a prefix of a text is only final up to a point that no later
 * byte can move. rill cuts before the last space that follows an ASCII letter or digit:
 *   - byte-level BPE: every pre-tokenizer rill supports (GPT-2, Llama 3, Qwen2, ... regexes)
 *     ends a letter or digit run at a space and starts the next pre-token with that space, and
 *     none looks behind, so pre-tokens (hence BPE merges, which never cross them) on both sides
 *     of the cut are those of the whole text;
 *   - SentencePiece (model "llama"): merges run over the whole text, so the cut is exact when no
 *     vocabulary piece has U+2581 after its first character (SentencePiece splits on whitespace
 *     when training, so its vocabularies have this property). The part after the cut starts
 *     with the space; the tokenizer turns a text's first character into U+2581 through its
 *     space prefix, so that space is dropped before tokenizing it (tokenize(" x") would give
 *     "__x" with two U+2581, the whole text has one).
 * Everything after the cut is held in the session until more text or a flush arrives. The
 * records (record.c) decide what is tokenized when: a text input tokenizes the held text and
 * the new bytes up to the last cut, a flush all of it, a replace the text held before the input
 * it returns to and the new text. This file only finds cuts and tokenizes; it changes no state
 * but its scratch buffers.
 *
 * Memory: the held text and the token buffer grow (rill_realloc) when an input needs more than
 * any before; steady-state streaming allocates nothing.
 *
 * Rejected: re-tokenizing the last N tokens' worth of text and diffing (needs the text of
 * committed tokens and is still not exact at SPM boundaries).
 */
#include <string.h>

#include "rill_alloc.h"
#include "session_internal.h"

static bool alnum_ascii(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

size_t rill__text_cut(const char *t, size_t len) {
    for (size_t i = len; i-- > 1;) {
        if (t[i] == ' ' && alnum_ascii(t[i - 1])) {
            return i;
        }
    }
    return 0;
}

rill_err_t rill__text_tokenize(rill_session_t *s, const char *seg, size_t len, bool continuation,
                               int32_t *n_out) {
    rill_session_pool_t *p = s->pool;
    const rill_tokenizer_special_t *sp = rill_tokenizer_special(p->tok);
    *n_out = 0;
    if (continuation && rill_tokenizer_kind(p->tok) == RILL_TOKENIZER_SPM && sp->add_space_prefix &&
        len > 0 && seg[0] == ' ') {
        seg++;
        len--;
    }
    if (len == 0) {
        return RILL_OK;
    }
    int64_t total = 0;
    int64_t n = rill_tokenizer_encode_with(p->tok, p->work, seg, len, false, false, s->tbuf,
                                           s->tbuf_cap, &total);
    if (n == RILL_EFULL) {
        if (total > INT32_MAX) {
            return rill__session_fail(s, RILL_ERANGE, "text chunk of %lld tokens is too long",
                                      (long long)total);
        }
        int32_t *grown = rill_realloc(RILL_MEM_SESSIONS, s->tbuf, (size_t)total * sizeof *grown);
        if (grown == NULL) {
            return rill__session_fail(s, RILL_ENOMEM, "token buffer: out of memory");
        }
        s->tbuf = grown;
        s->tbuf_cap = total;
        n = rill_tokenizer_encode_with(p->tok, p->work, seg, len, false, false, s->tbuf,
                                       s->tbuf_cap, &total);
    }
    if (n < 0) {
        return rill__session_fail(s, (rill_err_t)n, "tokenizer: %s", rill_strerror((rill_err_t)n));
    }
    *n_out = (int32_t)n;
    return RILL_OK;
}

rill_err_t rill__text_reserve(rill_session_t *s, char **buf, size_t *cap, size_t need) {
    if (need <= *cap) {
        return RILL_OK;
    }
    size_t grow = *cap * 2 > need ? *cap * 2 : need;
    char *grown = rill_realloc(RILL_MEM_SESSIONS, *buf, grow);
    if (grown == NULL) {
        return rill__session_fail(s, RILL_ENOMEM, "text buffer: out of memory");
    }
    *buf = grown;
    *cap = grow;
    return RILL_OK;
}

size_t rill_session_pending_text(const rill_session_t *s) {
    return s->text_len;
}
