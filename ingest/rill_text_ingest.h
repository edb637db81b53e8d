/*
 * rill_text_ingest.h - raw text bytes in arbitrary chunks to clean text (../shared/DESIGN.md
 * section 2, ingest/: "text").
 *
 * A text producer (a socket, a pipe, a file tailed as it grows) delivers bytes in chunks that
 * split wherever they like: inside a UTF-8 sequence, between the CR and LF of a line end. The
 * cleaner turns them into text a session can take (rill_session_append_text, which tokenizes
 * and holds back its own unstable tail; tokenization is not done here):
 *
 *   - valid UTF-8 passes through; each maximal ill-formed subsequence (Unicode's "maximal subpart"
 *     practice, as in WHATWG's decoder: a bad lead byte, a sequence cut short, an overlong form,
 *     a surrogate, a code point above U+10FFFF) becomes one U+FFFD (EF BF BD);
 *   - CRLF and a lone CR become LF;
 *   - C0 controls other than LF and TAB (NUL, ESC, BEL...) and DEL are dropped;
 *   - a line longer than max_line bytes is split by an inserted LF before the code point that
 *     would pass the limit (never inside a code point; a line of one code point longer than the
 *     limit stays whole).
 *
 * Boundary safety: feeding a text in any chunking produces exactly the bytes that feeding it at
 * once produces. The cleaner holds back at most 3 bytes (an incomplete UTF-8 sequence) until
 * the byte that completes or breaks it arrives, or rill_text_clean_flush(). A CR is written as
 * LF at once; the cleaner remembers it, so an LF arriving next (in the same chunk or the next)
 * is dropped. flush() only ends a held sequence (as U+FFFD) and keeps the rest of the state
 * (line length, the CR), so flushing at a chunk boundary changes the output only when a
 * sequence was incomplete there.
 *
 * Thread safety: one thread at a time per cleaner. Memory: the handle only (RILL_MEM_INGEST);
 * feeding allocates nothing.
 */
#ifndef RILL_TEXT_INGEST_H
#define RILL_TEXT_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Output room that always suffices for feeding len bytes (each input byte, held ones included,
 * gives at most 4 output bytes: U+FFFD plus a split LF), the NUL included. */
#define RILL_TEXT_CLEAN_BOUND(len) ((size_t)(len)*4 + 16)

typedef struct rill_text_clean rill_text_clean_t;

typedef struct rill_text_clean_params {
    int32_t max_line; /* bytes of a line (without its LF) before a split, 1..1<<30; 0: no limit;
                         default 4096 */
} rill_text_clean_params_t;

/* Defaults as documented per field. */
rill_text_clean_params_t rill_text_clean_default_params(void);

typedef struct rill_text_clean_stats {
    int64_t bytes_in;    /* bytes fed */
    int64_t bytes_out;   /* bytes written */
    int64_t replaced;    /* U+FFFD written for ill-formed input */
    int64_t dropped;     /* control bytes dropped */
    int64_t line_ends;   /* CR and CRLF written as LF */
    int64_t lines_split; /* LFs inserted by max_line */
} rill_text_clean_stats_t;

/* Creates a cleaner. params NULL: the defaults. Caller owns *out; destroy with
 * rill_text_clean_destroy(). Errors: RILL_EINVAL (out NULL, max_line out of range),
 * RILL_ENOMEM (*out untouched). */
rill_err_t rill_text_clean_new(const rill_text_clean_params_t *params, rill_text_clean_t **out);

/* Destroys *tp and sets it to NULL. NULL-safe. */
void rill_text_clean_destroy(rill_text_clean_t **tp);

/* Cleans data[0..len) and writes the clean text into out[0..cap), NUL-terminated (the NUL not
 * counted; the text itself never holds a NUL). Returns the bytes written (>= 0; 0 when
 * everything was held back or dropped). Errors, with nothing consumed: RILL_EFULL when cap <
 * RILL_TEXT_CLEAN_BOUND(len); RILL_EINVAL for NULL t or out, or data NULL with len > 0.
 * Does not block or allocate. */
int64_t rill_text_clean_feed(rill_text_clean_t *t, const void *data, size_t len, char *out,
                             size_t cap);

/* Ends an incomplete UTF-8 sequence held back (it becomes U+FFFD) and writes it into out[0..cap),
 * NUL-terminated. Returns the bytes written (0..4); RILL_EFULL when cap < 16; RILL_EINVAL for
 * NULL arguments. */
int64_t rill_text_clean_flush(rill_text_clean_t *t, char *out, size_t cap);

/* Forgets all state (held bytes, a pending CR, the line length) but keeps the counters: the next
 * byte starts a new text. NULL-safe. */
void rill_text_clean_reset(rill_text_clean_t *t);

/* Counters since creation (zeros for NULL). */
rill_text_clean_stats_t rill_text_clean_stats(const rill_text_clean_t *t);

#ifdef __cplusplus
}
#endif
#endif /* RILL_TEXT_INGEST_H */
