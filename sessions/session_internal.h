/*
 * session_internal.h - the pool and session structs and the page operations shared by the
 * files of sessions/, the records' halves (session.c, text.c, history.c), and the durability
 * plumbing (durable_io.c, log.c). Private to the module; tests may include it for the I/O
 * failure hook and to read a session's held-back text. The files call each other one way
 * only; the order is in record.c's design note.
 */
#ifndef RILL_SESSION_INTERNAL_H
#define RILL_SESSION_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rill_session.h"

struct iovec;
typedef struct rill__log rill__log_t; /* log.c */

struct rill_session_pool {
    rill_forward_t *fw; /* borrowed */
    rill_backend_t *be; /* fw's */
    rill_kv_cache_t *kv;
    rill_kv_layout_t layout; /* n_pages = budget + 1 (the scratch page) */
    rill_rope_t rope;
    int32_t n_layer, n_vocab, n_ctx, P, max_batch;
    int32_t n_pages;      /* budget */
    int32_t scratch_page; /* == n_pages: outside the budget */
    int64_t page_bytes;   /* one page of one layer */
    int32_t *refs;        /* [n_pages] */
    int32_t *free_list;   /* [n_pages] stack of free pages */
    int32_t n_free;
    int32_t max_table;           /* ceil(n_ctx / P): longest page table */
    int32_t *tmp_pages;          /* [max_table] */
    rill_batch_token_t *btok;    /* [max_batch] */
    int32_t *bids;               /* [max_batch] token ids of a step */
    rill_page_table_t *bpt;      /* [max_batch] page tables of a step */
    int32_t *brow;               /* [RILL_SESSION_STEP_MAX_LOGITS] logits rows of a step */
    float *blogits;              /* [RILL_SESSION_STEP_MAX_LOGITS * n_vocab] */
    char err[256];               /* detail of the last rill_session_step() error */
    const rill_tokenizer_t *tok; /* borrowed, optional */
    rill_tokenizer_work_t *work; /* when tok */
    int32_t n_sessions;
};

/* One input a session remembers for rill_session_replace_text() (history.c): what its state
 * was just before that input, which is what a replace from it returns to. */
typedef struct rill__input {
    int64_t seq;       /* the version the input made (its sequence number) */
    int64_t start;     /* stream index of its first token: the stream length before it */
    uint64_t held_at;  /* where the text held back before it lies in the held store (absolute) */
    uint32_t held_len; /* bytes of that text */
    bool started;      /* a text was in progress before it */
    uint8_t lost;      /* RILL__LOST_*: why the state before it cannot be returned to */
} rill__input_t;

enum {
    RILL__LOST_NONE = 0,
    RILL__LOST_ROLLED_BACK = 1, /* a later input rolled the stream back below its start */
    RILL__LOST_HELD = 2, /* the text held back before it exceeded RILL_SESSION_REPLACE_HELD */
};

struct rill_session {
    rill_session_pool_t *pool;
    int32_t sink_slots;   /* S' */
    int32_t window_slots; /* W' (0: none) */
    int32_t evict_pages;
    int32_t cap_slots; /* S' + W', or n_ctx */
    int32_t cap_pages; /* ceil(cap_slots / P) */
    int32_t *pages;    /* [cap_pages]; n_pages == ceil(n / P) */
    int32_t n_pages;
    int32_t *tokens; /* [cap_slots] resident ids by slot */
    bool *shared;    /* [cap_pages] scratch of the page planner */
    int32_t n;       /* resident tokens == next position */
    int64_t n_evicted;
    /* tokens taken (logged) but not evaluated yet, in order: pend[pend_head, pend_head + n_pend) */
    int32_t *pend;
    int32_t pend_head, n_pend, pend_cap;
    /* the session this one was forked from (0: none) and its seq then (rill_session_adopt) */
    uint64_t parent_uid;
    int64_t parent_seq;
    bool in_step;  /* set while rill_session_step() validates (duplicate check) */
    float *logits; /* [n_vocab] */
    bool logits_valid;
    /* text held back (text.c, record.c) */
    char *text;
    size_t text_len, text_cap;
    bool text_started; /* a text is in progress: held-back text continues it */
    int32_t *tbuf;     /* token scratch of text input */
    int64_t tbuf_cap;
    char *xbuf; /* scratch of replace: the held text it returns to, then the new text */
    size_t xbuf_cap;
    /* the replace window (history.c): the last n_hist inputs, oldest first from hist_head */
    rill__input_t *hist; /* [RILL_SESSION_REPLACE_INPUTS] ring */
    int32_t hist_head, n_hist;
    int64_t hist_floor; /* oldest version a replace may name (older inputs are forgotten) */
    char *held;         /* the held store: texts held back before remembered inputs */
    size_t held_cap;
    uint64_t held_base, held_end; /* held[0] is byte held_base of the store; it ends at held_end */
    int64_t n_evicted_sync;       /* tokens a session given the same input synchronously would
                                     have evicted (>= n_evicted): what replace may not reach */
    /* durability (log.c, snapshot.c) */
    uint64_t uid;     /* identity of the input stream: fresh at new and fork, kept by restore */
    int64_t seq;      /* sequence number of the last input operation applied (0: none) */
    rill__log_t *log; /* the ingest log, or NULL */
    char err[256];
};

/* Records the detail of err (rill_last_error; s->err keeps a copy for the module's own
 * messages) and returns err. Inline so that every file of the module can use it
 * without calling into session.c (the files depend on each other one way, see record.c). */
static inline rill_err_t rill__session_fail(rill_session_t *s, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline rill_err_t rill__session_fail(rill_session_t *s, rill_err_t err, const char *fmt,
                                            ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return rill__error_str(err, s->err); /* the caller reads it with rill_last_error */
}

/* The length of s's token stream: tokens evicted, resident and queued. Stream index i >= the
 * window's kept part is slot i - n_evicted. */
static inline int64_t rill__stream_len(const rill_session_t *s) {
    return s->n_evicted + s->n + s->n_pend;
}

/* The token at slot `slot` of the resident part followed by the queue (slot < n + n_pend). */
static inline int32_t rill__slot_token(const rill_session_t *s, int32_t slot) {
    return slot < s->n ? s->tokens[slot] : s->pend[s->pend_head + slot - s->n];
}

/* ---- pool.c ---------------------------------------------------------------------------------- */

/* Pops a free page; the caller has checked the budget (asserted). refs = 1. */
int32_t rill__pool_take(rill_session_pool_t *p);

/* Drops one reference; the page returns to the free list at zero. */
void rill__pool_release(rill_session_pool_t *p, int32_t page);

/* Copies page src to page dst in every layer. */
rill_err_t rill__pool_copy_page(rill_session_pool_t *p, int32_t dst, int32_t src);

/* ---- session.c: the state a record changes --------------------------------------------------
 * Checking is split from changing so that a record (record.c) can be refused before its log
 * record is written and can then be applied without anything left to fail but the forward
 * pass. */

/* Allocates an empty session with the given (validated) geometry, a fresh uid and seq 0.
 * Errors: RILL_ENOMEM (nothing allocated). */
rill_err_t rill__session_alloc(rill_session_pool_t *p, int32_t sink_slots, int32_t window_slots,
                               int32_t evict_pages, rill_session_t **out);

/* Whether n tokens (n >= 0) could be queued after cutting the stream at slot keep (keep in
 * [0, n_resident + n_pending]; keep == n_resident + n_pending: no cut), and when !defer then
 * evaluated: ids in the vocabulary (RILL_EINVAL), the context without a window (RILL_ERANGE),
 * the free pages for the evaluation, queued tokens kept included (RILL_EFULL); then makes room
 * in the queue (RILL_ENOMEM). Changes nothing else; the message is on s. */
rill_err_t rill__session_check_take(rill_session_t *s, int32_t keep, const int32_t *tokens,
                                    int32_t n, bool defer);

/* Cuts the stream at slot keep (as rill_session_rollback() does, held text aside: the caller
 * owns that). keep <= n_resident + n_pending. */
void rill__session_cut(rill_session_t *s, int32_t keep);

/* Queues tokens[0, n) after the queue; rill__session_check_take() made the room. */
void rill__session_queue(rill_session_t *s, const int32_t *tokens, int32_t n);

/* Evaluates every queued token (chunks of max_batch). Errors: as rill_session_step(). */
rill_err_t rill__session_drain(rill_session_t *s);

/* Drains the queue, of which the last n_new tokens were just queued; on a failure drops those
 * of them that were not evaluated (the ones queued before stay). Errors: as drain. */
rill_err_t rill__session_evaluate(rill_session_t *s, int32_t n_new);

/* Whether s may adopt branch (see rill_session_adopt); *n_new receives the tokens branch added.
 * Errors: RILL_EINVAL, RILL_EUNSUPPORTED, with the message on s. */
rill_err_t rill__session_check_adopt(rill_session_t *s, const rill_session_t *branch,
                                     int64_t *n_new);

/* Makes branch's pages, tokens, counters and logits s's (checked). Allocates nothing. */
void rill__session_adopt(rill_session_t *s, const rill_session_t *branch);

/* ---- text.c: boundary-safe tokenization -------------------------------------------------------
 */

/* The last cut point in t[0, len) (a space after an ASCII letter or digit), or 0 for none. */
size_t rill__text_cut(const char *t, size_t len);

/* Tokenizes seg[0, len) as a text (continuation: as the continuation of one, which drops a
 * leading space for SentencePiece's space prefix) into s->tbuf; *n receives the count. Errors:
 * RILL_ENOMEM (s->tbuf could not grow), RILL_ERANGE (more than INT32_MAX tokens), tokenizer
 * errors; the message is on s. */
rill_err_t rill__text_tokenize(rill_session_t *s, const char *seg, size_t len, bool continuation,
                               int32_t *n);

/* Grows the text buffer *buf (capacity *cap) to hold need bytes, keeping its contents.
 * Errors: RILL_ENOMEM (unchanged; the message is on s). */
rill_err_t rill__text_reserve(rill_session_t *s, char **buf, size_t *cap, size_t need);

/* ---- history.c: the replace window ---------------------------------------------------------- */

/* Allocates s's (empty) ring; frees it and the held store; copies src's into dst (dst's
 * empty). Errors: RILL_ENOMEM (dst unchanged). */
rill_err_t rill__hist_new(rill_session_t *s);
void rill__hist_free(rill_session_t *s);
rill_err_t rill__hist_copy(rill_session_t *dst, const rill_session_t *src);

/* The entry the next input would get, from s's state now (sequence number, stream length, held
 * text, text in progress); the held text is copied to the free end of the held store but not
 * yet kept. Errors: RILL_ENOMEM (the store could not grow; nothing changed). */
rill_err_t rill__hist_stage(rill_session_t *s, rill__input_t *in);

/* Keeps a staged entry as the newest (forgetting the oldest beyond the bounds). */
void rill__hist_push(rill_session_t *s, const rill__input_t *in);

/* Marks the entries whose start lies past stream index `len` as rolled back. */
void rill__hist_rolled_back(rill_session_t *s, int64_t len);

/* The entry a replace from `from` returns to (the oldest with seq >= from), checked: in
 * [1, seq] (RILL_EINVAL), remembered, not rolled back, not in evicted tokens (RILL_ERANGE).
 * *idx receives its index (0: oldest). The message is on s. */
rill_err_t rill__hist_reach(rill_session_t *s, int64_t from, int32_t *idx);

/* Entry i (0: oldest) and the text held back before it (borrowed; valid until the store
 * changes). */
rill__input_t *rill__hist_at(rill_session_t *s, int32_t i);
const char *rill__hist_held(const rill_session_t *s, const rill__input_t *in);

/* Replace's bookkeeping: entry i becomes the input that made version s->seq + 1 (its state
 * before is the replace's too) and the entries after it are dropped. */
void rill__hist_replace(rill_session_t *s, int32_t i);

/* Advances n_evicted_sync past the evictions a synchronous session would have made for the
 * stream's length now (and to at least n_evicted). */
void rill__hist_track_evictions(rill_session_t *s);

/* ---- record.c: records and their apply ------------------------------------------------------- */

/* Restore's half: validates the log at path against the pool and, when *sp is a session (from
 * a snapshot), against it (same uid and window policy, no records missing after its seq);
 * when *sp is NULL, creates the session from the log's header (its first record must be 1).
 * Then replays the records after the session's seq through the same apply as live calls,
 * drops a torn tail (warning), and leaves the log open on the session for appending with
 * `policy`. Errors: as rill_session_restore(), with the detail in msg. On error a session it
 * created is destroyed (*sp stays NULL), a given one may hold replayed records (the caller
 * destroys it), and the file is unchanged. */
rill_err_t rill__record_replay(rill_session_pool_t *p, rill_session_t **sp, const char *path,
                               rill_session_fsync_t policy, char *msg, size_t msglen);

/* ---- the ingest log (log.c) ------------------------------------------------------------------ */

/* Record types in the log (docs/architecture.md, "Ingest log"). */
enum {
    RILL__REC_TOKENS = 1,   /* payload: int32 ids */
    RILL__REC_TEXT = 2,     /* payload: the text bytes */
    RILL__REC_FLUSH = 3,    /* payload: none */
    RILL__REC_ROLLBACK = 4, /* payload: int32 pos */
    RILL__REC_REPLACE = 5,  /* payload: u64 from_version, then the text bytes */
    RILL__REC_TEXT_END = 6, /* payload: the text bytes, then the text ends (text + flush) */
};

#define RILL__LOG_MAX_PAYLOAD (1u << 30)

/* Writes record s->seq + 1 of `type` with the payload a[0, na) then b[0, nb) (and fsyncs it
 * under RILL_SESSION_FSYNC_ALWAYS) before the operation is applied. No-op without a log.
 * Errors: RILL_EIO (file unchanged), RILL_ERANGE (payload above RILL__LOG_MAX_PAYLOAD). */
rill_err_t rill__log_write(rill_session_t *s, uint32_t type, const void *a, size_t na,
                           const void *b, size_t nb);

/* Ends an operation that rill__log_write() began: on err == RILL_OK counts it (s->seq++) and
 * applies the every-second fsync policy; otherwise removes the record again. Returns err. */
rill_err_t rill__log_settle(rill_session_t *s, rill_err_t err);

/* Closes s's log (fsynced first unless the policy is NEVER or it is unusable). RILL_OK
 * without a log; RILL_EIO when that fsync failed (closed anyway; the error is also logged). */
rill_err_t rill__log_close(rill_session_t *s);

/* Reading a log for replay: open (lock, validate the header), then whole records in order,
 * then attach the file to the session as its log. */
typedef struct rill__log_header {
    uint64_t uid, first_seq;
    int32_t sink_slots, window_slots, evict_pages;
} rill__log_header_t;

typedef struct rill__log_reader rill__log_reader_t;

typedef struct rill__log_record {
    uint32_t type, reserved; /* reserved: the zero field of the record header */
    uint64_t seq;
    const unsigned char *payload; /* borrowed until the next read */
    uint32_t len;
    int64_t off; /* of the record in the file */
} rill__log_record_t;

/* Opens the log at path, locks it (RILL_EBUSY when another holder has it) and validates its
 * header against p into *hd. Errors: as rill_session_restore() for the log's header; on error
 * nothing is left open. Caller owns *out: rill__log_reader_attach() or _close(). */
rill_err_t rill__log_reader_open(const rill_session_pool_t *p, const char *path,
                                 rill__log_header_t *hd, rill__log_reader_t **out, char *msg,
                                 size_t msglen);

/* The next whole record with a valid CRC and the next sequence number; type 0 at the end of the
 * file or at a torn tail (remembered for attach). Errors: RILL_ECORRUPT (damage before the tail,
 * a sequence number out of order, an oversized length; with the byte offset), RILL_EIO,
 * RILL_ENOMEM. */
rill_err_t rill__log_reader_next(rill__log_reader_t *rd, rill__log_record_t *rec, char *msg,
                                 size_t msglen);

/* Sequence number of the last record read (first_seq - 1 before any). */
int64_t rill__log_reader_last(const rill__log_reader_t *rd);

/* After the last record: cuts a torn tail (warning), or, when the log ended before s->seq,
 * replaces it atomically with an empty log that continues after s->seq (warning); then makes
 * it s's log with `policy` and frees the reader (*rd = NULL). Errors: RILL_EIO, RILL_ENOMEM (the
 * reader is then still the caller's). */
rill_err_t rill__log_reader_attach(rill__log_reader_t **rd, rill_session_t *s,
                                   rill_session_fsync_t policy, char *msg, size_t msglen);

/* Closes the file and frees the reader; *rd = NULL. NULL-safe. */
void rill__log_reader_close(rill__log_reader_t **rd);

/* ---- durable_io.c ---------------------------------------------------------------------------- */

/* CRC-32C of data[0, n) continuing crc (0 to start). */
uint32_t rill__crc32c(uint32_t crc, const void *data, size_t n);

void rill__put_u32(unsigned char *p, uint32_t v);
void rill__put_u64(unsigned char *p, uint64_t v);
uint32_t rill__get_u32(const unsigned char *p);
uint64_t rill__get_u64(const unsigned char *p);

/* The model fingerprint: architecture and hyper-parameters, the pool's KV cache types (K, V) and
 * page size, and the GGUF file size. RILL__FP_BYTES bytes. */
#define RILL__FP_FIELDS 15
#define RILL__FP_BYTES  64
void rill__fingerprint_put(const rill_session_pool_t *p, unsigned char out[RILL__FP_BYTES]);
/* True when `in` is p's fingerprint; otherwise names the first difference in msg. */
bool rill__fingerprint_check(const rill_session_pool_t *p, const unsigned char *in, char *msg,
                             size_t msglen);

/* File calls that can lose data, counted for failure injection. They return 0 (open: a file
 * descriptor) or -1 with errno set (EIO when injected). Writes loop over short writes. */
int rill__io_open(const char *path, int flags, int mode);
int rill__io_write(int fd, const void *buf, size_t n);
int rill__io_writev(int fd, const struct iovec *iov, int n_iov); /* n_iov <= 4 */
int rill__io_fsync(int fd, bool data_only);
int rill__io_ftruncate(int fd, int64_t size);
int rill__io_rename(const char *from, const char *to);
int rill__io_fsync_dir(const char *path); /* the directory that holds path */
/* Reads exactly n bytes at off: 0, or -1 with errno (0 at end of file). Not injected. */
int rill__io_pread(int fd, void *buf, size_t n, int64_t off);
int64_t rill__io_file_size(int fd);
/* RILL_ENOMEM, RILL_ENOTFOUND, RILL_EEXIST, RILL_EPERM or RILL_EIO for an errno value. */
rill_err_t rill__io_err(int e);

/* Test hook: the n-th counted file call from now fails with EIO, once; n <= 0 disarms. Not for
 * concurrent use. rill__session_io_calls() counts the calls made so far. */
void rill__session_io_fail_nth(int64_t n);
int64_t rill__session_io_calls(void);

#endif /* RILL_SESSION_INTERNAL_H */
