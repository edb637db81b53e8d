/*
 * session_internal.h - the pool and session structs and the page operations shared by the
 * files of sessions/, and the durability plumbing (durable_io.c, log.c, snapshot.c). Private to
 * the module; tests may include it for the I/O failure hook.
 */
#ifndef RILL_SESSION_INTERNAL_H
#define RILL_SESSION_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    /* text held back (text.c) */
    char *text;
    size_t text_len, text_cap;
    bool text_started; /* a text is in progress: held-back text continues it */
    int32_t *tbuf;     /* token scratch of text append */
    int64_t tbuf_cap;
    /* durability (log.c, snapshot.c) */
    uint64_t uid;     /* identity of the input stream: fresh at new and fork, kept by restore */
    int64_t seq;      /* sequence number of the last input operation applied (0: none) */
    rill__log_t *log; /* the ingest log, or NULL */
    char err[256];
};

/* Records a message on s and returns err. */
rill_err_t rill__session_fail(rill_session_t *s, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Pops a free page; the caller has checked the budget (asserted). refs = 1. */
int32_t rill__pool_take(rill_session_pool_t *p);

/* Drops one reference; the page returns to the free list at zero. */
void rill__pool_release(rill_session_pool_t *p, int32_t page);

/* Copies page src to page dst in every layer. */
rill_err_t rill__pool_copy_page(rill_session_pool_t *p, int32_t dst, int32_t src);

/* Allocates an empty session with the given (validated) geometry, a fresh uid and seq 0.
 * Errors: RILL_ENOMEM (nothing allocated). */
rill_err_t rill__session_alloc(rill_session_pool_t *p, int32_t sink_slots, int32_t window_slots,
                               int32_t evict_pages, rill_session_t **out);

/* The input operations without the log (replay uses them; the public functions are these plus
 * the log record). Same contracts as the public functions; with defer the tokens are queued
 * (rill_session_feed) instead of evaluated. */
rill_err_t rill__session_append(rill_session_t *s, const int32_t *tokens, int32_t n);
rill_err_t rill__session_take(rill_session_t *s, const int32_t *tokens, int32_t n, bool defer);
rill_err_t rill__session_append_text(rill_session_t *s, const char *text, size_t len, bool defer);
rill_err_t rill__session_flush_text(rill_session_t *s, bool defer);

/* Evaluates every queued token (chunks of max_batch). Errors: as rill_session_step(). */
rill_err_t rill__session_drain(rill_session_t *s);
rill_err_t rill__session_rollback(rill_session_t *s, int32_t pos);

/* ---- the ingest log (log.c) ------------------------------------------------------------------ */

enum {
    RILL__REC_TOKENS = 1,   /* payload: int32 ids */
    RILL__REC_TEXT = 2,     /* payload: the text bytes */
    RILL__REC_FLUSH = 3,    /* payload: none */
    RILL__REC_ROLLBACK = 4, /* payload: int32 pos */
};

#define RILL__LOG_MAX_PAYLOAD (1u << 30)

/* Writes record s->seq + 1 of `type` (and fsyncs it under RILL_SESSION_FSYNC_ALWAYS) before the
 * operation is applied. No-op without a log. Errors: RILL_EIO (file unchanged), RILL_ERANGE
 * (payload above RILL__LOG_MAX_PAYLOAD). */
rill_err_t rill__log_write(rill_session_t *s, uint32_t type, const void *payload, size_t len);

/* Ends an operation that rill__log_write() began: on err == RILL_OK counts it (s->seq++) and
 * applies the every-second fsync policy; otherwise removes the record again. Returns err. */
rill_err_t rill__log_settle(rill_session_t *s, rill_err_t err);

/* Closes s's log (fsynced first unless the policy is NEVER or it is unusable). RILL_OK
 * without a log; RILL_EIO when that fsync failed (closed anyway; the error is also logged). */
rill_err_t rill__log_close(rill_session_t *s);

/* Restore's half: validates the log at path against the pool and, when *sp is a session (from
 * a snapshot), against it (same uid and window policy, no records missing after its seq);
 * when *sp is NULL, creates the session from the log's header (its first record must be 1).
 * Then replays the records after the session's seq, drops a torn tail (warning), and leaves the
 * log open on the session for appending with `policy`. Errors: as rill_session_restore(), with
 * the detail in msg. On error a session it created is destroyed (*sp stays NULL), a given one
 * may hold replayed records (the caller destroys it), and the file is unchanged. */
rill_err_t rill__log_restore(rill_session_pool_t *p, rill_session_t **sp, const char *path,
                             rill_session_fsync_t policy, char *msg, size_t msglen);

/* ---- durable_io.c ---------------------------------------------------------------------------- */

/* CRC-32C of data[0, n) continuing crc (0 to start). */
uint32_t rill__crc32c(uint32_t crc, const void *data, size_t n);

void rill__put_u32(unsigned char *p, uint32_t v);
void rill__put_u64(unsigned char *p, uint64_t v);
uint32_t rill__get_u32(const unsigned char *p);
uint64_t rill__get_u64(const unsigned char *p);

/* The model fingerprint: architecture and hyper-parameters, the pool's KV element type and page
 * size, and the GGUF file size. RILL__FP_BYTES bytes. */
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
