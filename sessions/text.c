/*
 * text.c - boundary-safe text append: chunks of a text give the tokens of the whole text.
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
 * Everything after the cut is held in the session until more text or a flush arrives.
 *
 * Memory: the held text and a token buffer grow (rill_realloc) when a chunk needs more than any
 * chunk before; steady-state streaming allocates nothing.
 *
 * The public calls write the raw text (or the flush) to the session's ingest log first (log.c);
 * replay calls the rill__ halves with the same chunks, which hold back the same tails.
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

/* The last cut point in t[0, len), or 0 when there is none. */
static size_t find_cut(const char *t, size_t len) {
    for (size_t i = len; i-- > 1;) {
        if (t[i] == ' ' && alnum_ascii(t[i - 1])) {
            return i;
        }
    }
    return 0;
}

/* Tokenizes seg[0, len) as a (continuation of a) text and appends the tokens. */
static rill_err_t tokenize_append(rill_session_t *s, const char *seg, size_t len, bool continuation,
                                  bool defer) {
    rill_session_pool_t *p = s->pool;
    const rill_tokenizer_special_t *sp = rill_tokenizer_special(p->tok);
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
    return rill__session_take(s, s->tbuf, (int32_t)n, defer);
}

rill_err_t rill__session_append_text(rill_session_t *s, const char *text, size_t len, bool defer) {
    if (s == NULL || (text == NULL && len > 0)) {
        return RILL_EINVAL;
    }
    if (s->pool->tok == NULL) {
        return rill__session_fail(s, RILL_EUNSUPPORTED, "the pool has no tokenizer");
    }
    if (len == 0) {
        return RILL_OK;
    }
    size_t old = s->text_len;
    if (len > SIZE_MAX / 2 - old) {
        return rill__session_fail(s, RILL_ENOMEM, "text too long");
    }
    if (old + len > s->text_cap) {
        size_t cap = s->text_cap * 2 > old + len ? s->text_cap * 2 : old + len;
        char *grown = rill_realloc(RILL_MEM_SESSIONS, s->text, cap);
        if (grown == NULL) {
            return rill__session_fail(s, RILL_ENOMEM, "text buffer: out of memory");
        }
        s->text = grown;
        s->text_cap = cap;
    }
    memcpy(s->text + old, text, len);
    size_t all = old + len;
    size_t cut = find_cut(s->text, all);
    if (cut > 0) {
        rill_err_t err = tokenize_append(s, s->text, cut, s->text_started, defer);
        if (err != RILL_OK) {
            return err; /* text_len unchanged: the new bytes are not taken */
        }
        memmove(s->text, s->text + cut, all - cut);
        all -= cut;
        s->text_started = true;
    }
    s->text_len = all;
    return RILL_OK;
}

rill_err_t rill__session_flush_text(rill_session_t *s, bool defer) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    if (s->text_len > 0) {
        if (s->pool->tok == NULL) {
            return rill__session_fail(s, RILL_EUNSUPPORTED, "the pool has no tokenizer");
        }
        rill_err_t err = tokenize_append(s, s->text, s->text_len, s->text_started, defer);
        if (err != RILL_OK) {
            return err;
        }
    }
    s->text_len = 0;
    s->text_started = false;
    return RILL_OK;
}

/* The public calls: the record holds the raw text (log.c), written before the text is taken. */
static rill_err_t text_logged(rill_session_t *s, const char *text, size_t len, bool defer) {
    if (s == NULL || (text == NULL && len > 0)) {
        return RILL_EINVAL;
    }
    if (s->pool->tok == NULL) {
        return rill__session_fail(s, RILL_EUNSUPPORTED, "the pool has no tokenizer");
    }
    if (len == 0) {
        return RILL_OK;
    }
    rill_err_t err = rill__log_write(s, RILL__REC_TEXT, text, len);
    if (err == RILL_OK) {
        err = rill__log_settle(s, rill__session_append_text(s, text, len, defer));
    }
    return err;
}

rill_err_t rill_session_append_text(rill_session_t *s, const char *text, size_t len) {
    return text_logged(s, text, len, false);
}

rill_err_t rill_session_feed_text(rill_session_t *s, const char *text, size_t len) {
    return text_logged(s, text, len, true);
}

static rill_err_t flush_logged(rill_session_t *s, bool defer) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    if (s->text_len == 0 && !s->text_started) {
        return RILL_OK; /* nothing held, no text in progress: not an input call */
    }
    if (s->text_len > 0 && s->pool->tok == NULL) {
        return rill__session_fail(s, RILL_EUNSUPPORTED, "the pool has no tokenizer");
    }
    rill_err_t err = rill__log_write(s, RILL__REC_FLUSH, NULL, 0);
    if (err == RILL_OK) {
        err = rill__log_settle(s, rill__session_flush_text(s, defer));
    }
    return err;
}

size_t rill_session_pending_text(const rill_session_t *s) {
    return s->text_len;
}

rill_err_t rill_session_flush_text(rill_session_t *s) {
    return flush_logged(s, false);
}

rill_err_t rill_session_feed_flush(rill_session_t *s) {
    return flush_logged(s, true);
}
