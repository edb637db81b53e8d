/*
 * record.c - a session's inputs as records (DESIGN.md section 7, "Inputs are records"): one
 * record type per kind of input, one apply for them all, used alike by the live calls, their
 * deferred (feed) variants and log replay.
 *
 * Design. Every public input call builds a record and submits it:
 *   check   everything that can refuse the record, and every allocation its effect needs, with
 *           nothing observable changed (arguments, the tokenizer's output, context, budget, room
 *           in the queue and the text buffers, the replace window's entry);
 *   write   the record to the ingest log when one is open (log.c), before the effect, so that
 *           a crash in the middle finds the input;
 *   commit  the effect: cut the stream, queue the tokens, and for a synchronous call evaluate
 *           them; then the held text and the replace window. Only the forward pass can fail
 *           here;
 *   settle  count the call (its sequence number is the version it made), or cut its record
 *           off the log again when commit failed: the log holds exactly the calls that
 *           returned RILL_OK.
 * Replay (rill__record_replay) decodes each logged record and runs check and commit, the same
 * two halves, without the write and with the sequence number the record carries; so replay can
 * never take another path than the call that wrote the record. Deferred and immediate calls
 * differ only in commit evaluating or not (and check planning the budget or not).
 *
 * Records. tokens (append, feed, and each generated token), text (held-back tail kept in the
 * session, text.c), flush (ends a text), text-end (a text and its end as one input, so that one
 * request of "this text, final" is one version a replace can name), rollback (cut at a slot), adopt
 * (a branch's state; in the log it is the tokens record of what the branch added, which replays to
 * the same stream), and replace: "from the input that made version V on, the text is T". A replace
 * returns to the state just before that input (history.c remembers it: the stream length then, the
 * held text, whether a text was in progress), tokenizes the held text followed by T exactly as a
 * text input would, and keeps the longest common prefix of the stream it returns to and the new
 * tokens: it cuts the stream after that prefix and queues only the rest. Versions count calls: the
 * replace makes the next version; the inputs it replaced are no longer part of the session, so
 * a later replace from any of their versions returns to the same state as one from V.
 *
 * Dependencies, one way: each file calls only files after it in this order: compose.c (new,
 * generate, query), snapshot.c (snapshot, restore), record.c, session.c (pages, queue, steps,
 * fork, cut), then the leaves log.c (which uses durable_io.c), history.c, text.c and pool.c,
 * which call nothing else of the module. Before, session.c, text.c and log.c called each other
 * (replay called back into the session's halves); now the log only moves bytes and the records
 * own what they mean.
 *
 * Rejected: a record per token chunk (the log holds calls, not evaluation steps); making
 * replace a rollback plus a text record (it would log the tokenizer's decision, and a later
 * replace could not return behind it); replays that evaluate lazily (the budget and the
 * window's evictions would then depend on when the log is read).
 */
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "session_internal.h"

#define REC_ADOPT 100u /* in memory only: written as RILL__REC_TOKENS */

typedef struct record {
    uint32_t type; /* RILL__REC_* or REC_ADOPT */
    const int32_t *tokens;
    int32_t n_tokens;
    const char *text; /* text, replace */
    size_t len;
    int32_t pos;                  /* rollback */
    int64_t from;                 /* replace: from_version */
    const rill_session_t *branch; /* adopt */
} record_t;

/* What check() worked out for commit(). */
typedef struct plan {
    int32_t keep;          /* cut the stream at this slot first (n + n_pend: no cut) */
    const int32_t *tokens; /* then queue these */
    int32_t n_tokens;
    size_t text_all, cut; /* text: held + new bytes in s->text; replace: in s->xbuf */
    bool started;         /* a text is in progress afterwards */
    rill__input_t in;     /* the replace window's entry of this input */
    int32_t hist_idx;     /* replace: the entry it returns to */
} plan_t;

/* ---- check ----------------------------------------------------------------------------------- */

static rill_err_t need_tokenizer(rill_session_t *s) {
    return s->pool->tok != NULL
               ? RILL_OK
               : rill__session_fail(s, RILL_EUNSUPPORTED, "the pool has no tokenizer");
}

/* text and text-end: the held text and r's, cut where a later byte could change the tokens
 * (text) or all of it (text-end, which ends the text). */
static rill_err_t check_text(rill_session_t *s, const record_t *r, bool defer, plan_t *pl) {
    rill_err_t err = need_tokenizer(s);
    size_t old = s->text_len;
    if (err == RILL_OK && r->len > SIZE_MAX / 2 - old) {
        err = rill__session_fail(s, RILL_ENOMEM, "text too long");
    }
    if (err == RILL_OK) {
        err = rill__text_reserve(s, &s->text, &s->text_cap, old + r->len);
    }
    if (err != RILL_OK) {
        return err;
    }
    /* staged after the held text; text_len still says what is held until commit */
    memcpy(s->text + old, r->text, r->len);
    pl->text_all = old + r->len;
    bool end = r->type == RILL__REC_TEXT_END;
    pl->cut = end ? pl->text_all : rill__text_cut(s->text, pl->text_all);
    pl->started = !end && (s->text_started || pl->cut > 0);
    if (pl->cut > 0) {
        err = rill__text_tokenize(s, s->text, pl->cut, s->text_started, &pl->n_tokens);
        pl->tokens = s->tbuf;
    }
    return err == RILL_OK ? rill__session_check_take(s, pl->keep, pl->tokens, pl->n_tokens, defer)
                          : err;
}

static rill_err_t check_flush(rill_session_t *s, bool defer, plan_t *pl) {
    rill_err_t err = RILL_OK;
    if (s->text_len > 0) {
        err = need_tokenizer(s);
        if (err == RILL_OK) {
            err = rill__text_tokenize(s, s->text, s->text_len, s->text_started, &pl->n_tokens);
            pl->tokens = s->tbuf;
        }
    }
    pl->started = false;
    return err == RILL_OK ? rill__session_check_take(s, pl->keep, pl->tokens, pl->n_tokens, defer)
                          : err;
}

static rill_err_t check_replace(rill_session_t *s, const record_t *r, bool defer, plan_t *pl) {
    rill_err_t err = need_tokenizer(s);
    if (err == RILL_OK) {
        err = rill__hist_reach(s, r->from, &pl->hist_idx);
    }
    if (err != RILL_OK) {
        return err;
    }
    const rill__input_t *e = rill__hist_at(s, pl->hist_idx);
    size_t hl = e->held_len;
    if (r->len > SIZE_MAX / 2 - hl) {
        return rill__session_fail(s, RILL_ENOMEM, "text too long");
    }
    err = rill__text_reserve(s, &s->xbuf, &s->xbuf_cap, hl + r->len);
    if (err != RILL_OK) {
        return err;
    }
    if (hl > 0) {
        memcpy(s->xbuf, rill__hist_held(s, e), hl);
    }
    if (r->len > 0) {
        memcpy(s->xbuf + hl, r->text, r->len);
    }
    pl->text_all = hl + r->len;
    pl->cut = rill__text_cut(s->xbuf, pl->text_all);
    pl->started = e->started || pl->cut > 0;
    int32_t n = 0;
    if (pl->cut > 0) {
        err = rill__text_tokenize(s, s->xbuf, pl->cut, e->started, &n);
        if (err != RILL_OK) {
            return err;
        }
    }
    /* the longest common prefix of the stream after e's start and the new tokens */
    int64_t len = rill__stream_len(s);
    int32_t k = 0;
    while (k < n && e->start + k < len &&
           rill__slot_token(s, (int32_t)(e->start + k - s->n_evicted)) == s->tbuf[k]) {
        k++;
    }
    pl->keep = (int32_t)(e->start + k - s->n_evicted);
    pl->tokens = n > 0 ? s->tbuf + k : NULL; /* tbuf may not exist yet */
    pl->n_tokens = n - k;
    return rill__session_check_take(s, pl->keep, pl->tokens, pl->n_tokens, defer);
}

static rill_err_t check(rill_session_t *s, const record_t *r, bool defer, plan_t *pl) {
    memset(pl, 0, sizeof *pl);
    pl->keep = s->n + s->n_pend;
    pl->started = s->text_started;
    rill_err_t err = RILL_OK;
    switch (r->type) {
    case RILL__REC_TOKENS:
        pl->tokens = r->tokens;
        pl->n_tokens = r->n_tokens;
        err = rill__session_check_take(s, pl->keep, r->tokens, r->n_tokens, defer);
        break;
    case RILL__REC_TEXT:
    case RILL__REC_TEXT_END:
        err = check_text(s, r, defer, pl);
        break;
    case RILL__REC_FLUSH:
        err = check_flush(s, defer, pl);
        break;
    case RILL__REC_ROLLBACK:
        if (r->pos < 0 || r->pos > s->n + s->n_pend) {
            err = rill__session_fail(s, RILL_EINVAL, "rollback to %d outside [0, %d]", r->pos,
                                     s->n + s->n_pend);
        }
        pl->keep = r->pos;
        pl->started = false;
        break;
    case RILL__REC_REPLACE:
        return check_replace(s, r, defer, pl); /* its entry is the one it returns to */
    default: {
        int64_t n_new = 0;
        err = rill__session_check_adopt(s, r->branch, &n_new);
        break;
    }
    }
    return err == RILL_OK ? rill__hist_stage(s, &pl->in) : err;
}

/* ---- write, commit --------------------------------------------------------------------------- */

static rill_err_t write_record(rill_session_t *s, const record_t *r) {
    switch (r->type) {
    case RILL__REC_TOKENS:
        return rill__log_write(s, r->type, r->tokens, (size_t)r->n_tokens * sizeof *r->tokens, NULL,
                               0);
    case RILL__REC_TEXT:
    case RILL__REC_TEXT_END:
        return rill__log_write(s, r->type, r->text, r->len, NULL, 0);
    case RILL__REC_FLUSH:
        return rill__log_write(s, r->type, NULL, 0, NULL, 0);
    case RILL__REC_ROLLBACK:
        return rill__log_write(s, r->type, &r->pos, sizeof r->pos, NULL, 0);
    case RILL__REC_REPLACE: {
        unsigned char from[8];
        rill__put_u64(from, (uint64_t)r->from);
        return rill__log_write(s, r->type, from, sizeof from, r->text, r->len);
    }
    default: { /* adopt: what the branch added (checked: resident on the branch) */
        const rill_session_t *b = r->branch;
        int64_t n_new = b->n_evicted + b->n - (s->n_evicted + s->n);
        return rill__log_write(s, RILL__REC_TOKENS, b->tokens + b->n - n_new,
                               (size_t)n_new * sizeof *b->tokens, NULL, 0);
    }
    }
}

static void clear_text(rill_session_t *s) {
    s->text_len = 0;
    s->text_started = false;
}

static rill_err_t commit(rill_session_t *s, const record_t *r, const plan_t *pl, bool defer) {
    int64_t cut_to = s->n_evicted + pl->keep; /* stream length after the cut */
    bool cut = pl->keep < s->n + s->n_pend;
    if (r->type == REC_ADOPT) {
        rill__session_adopt(s, r->branch);
    } else {
        if (cut) {
            rill__session_cut(s, pl->keep);
        }
        rill__session_queue(s, pl->tokens, pl->n_tokens);
        if (!defer && pl->n_tokens > 0) {
            rill_err_t err = rill__session_evaluate(s, pl->n_tokens);
            if (err != RILL_OK) {
                /* Not taken: the text stays as it was, unless the stream was cut under it. */
                if (cut) {
                    clear_text(s);
                    rill__hist_rolled_back(s, cut_to);
                }
                rill__hist_track_evictions(s);
                return err;
            }
        }
    }
    switch (r->type) {
    case RILL__REC_TEXT:
    case RILL__REC_TEXT_END: /* cut == text_all: nothing stays held */
        memmove(s->text, s->text + pl->cut, pl->text_all - pl->cut);
        s->text_len = pl->text_all - pl->cut;
        s->text_started = pl->started;
        break;
    case RILL__REC_FLUSH:
    case RILL__REC_ROLLBACK:
        clear_text(s);
        break;
    case RILL__REC_REPLACE: {
        char *t = s->text;
        size_t cap = s->text_cap;
        s->text = s->xbuf;
        s->text_cap = s->xbuf_cap;
        s->xbuf = t;
        s->xbuf_cap = cap;
        if (pl->text_all > pl->cut) { /* an empty replace with nothing held may have no buffer */
            memmove(s->text, s->text + pl->cut, pl->text_all - pl->cut);
        }
        s->text_len = pl->text_all - pl->cut;
        s->text_started = pl->started;
        break;
    }
    default:
        break;
    }
    if (r->type == RILL__REC_REPLACE) {
        rill__hist_replace(s, pl->hist_idx);
    } else {
        rill__hist_push(s, &pl->in);
        if (r->type == RILL__REC_ROLLBACK) {
            rill__hist_rolled_back(s, cut_to);
        }
    }
    rill__hist_track_evictions(s);
    return RILL_OK;
}

static rill_err_t submit(rill_session_t *s, const record_t *r, bool defer) {
    plan_t pl;
    rill_err_t err = check(s, r, defer, &pl);
    if (err == RILL_OK) {
        err = write_record(s, r);
    }
    if (err == RILL_OK) {
        err = rill__log_settle(s, commit(s, r, &pl, defer));
    }
    return err;
}

/* Replay's apply: the same halves, synchronously, no log. */
static rill_err_t apply(rill_session_t *s, const record_t *r) {
    plan_t pl;
    rill_err_t err = check(s, r, false, &pl);
    return err == RILL_OK ? commit(s, r, &pl, false) : err;
}

/* ---- the public input calls ------------------------------------------------------------------ */

static rill_err_t take(rill_session_t *s, const int32_t *tokens, int32_t n, bool defer) {
    if (s == NULL || n < 0 || (n > 0 && tokens == NULL)) {
        return RILL_EINVAL;
    }
    if (n == 0) {
        return RILL_OK;
    }
    record_t r = { .type = RILL__REC_TOKENS, .tokens = tokens, .n_tokens = n };
    return submit(s, &r, defer);
}

rill_err_t rill_session_append(rill_session_t *s, const int32_t *tokens, int32_t n) {
    return take(s, tokens, n, false);
}

rill_err_t rill_session_feed(rill_session_t *s, const int32_t *tokens, int32_t n) {
    return take(s, tokens, n, true);
}

static rill_err_t flush(rill_session_t *s, bool defer);

static rill_err_t text(rill_session_t *s, const char *text, size_t len, bool end, bool defer) {
    if (s == NULL || (text == NULL && len > 0)) {
        return RILL_EINVAL;
    }
    rill_err_t err = need_tokenizer(s);
    if (err != RILL_OK) {
        return err;
    }
    if (len == 0) {
        return end ? flush(s, defer) : RILL_OK;
    }
    record_t r = { .type = end ? RILL__REC_TEXT_END : RILL__REC_TEXT, .text = text, .len = len };
    return submit(s, &r, defer);
}

rill_err_t rill_session_append_text(rill_session_t *s, const char *t, size_t len) {
    return text(s, t, len, false, false);
}

rill_err_t rill_session_feed_text(rill_session_t *s, const char *t, size_t len) {
    return text(s, t, len, false, true);
}

rill_err_t rill_session_append_text_end(rill_session_t *s, const char *t, size_t len) {
    return text(s, t, len, true, false);
}

rill_err_t rill_session_feed_text_end(rill_session_t *s, const char *t, size_t len) {
    return text(s, t, len, true, true);
}

static rill_err_t flush(rill_session_t *s, bool defer) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    if (s->text_len == 0 && !s->text_started) {
        return RILL_OK; /* nothing held, no text in progress: not an input call */
    }
    record_t r = { .type = RILL__REC_FLUSH };
    return submit(s, &r, defer);
}

rill_err_t rill_session_flush_text(rill_session_t *s) {
    return flush(s, false);
}

rill_err_t rill_session_feed_flush(rill_session_t *s) {
    return flush(s, true);
}

rill_err_t rill_session_rollback(rill_session_t *s, int32_t pos) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    if (pos == s->n + s->n_pend) {
        return RILL_OK;
    }
    record_t r = { .type = RILL__REC_ROLLBACK, .pos = pos };
    return submit(s, &r, false);
}

rill_err_t rill_session_adopt(rill_session_t *s, rill_session_t *branch) {
    if (s == NULL || branch == NULL || s == branch || s->pool != branch->pool) {
        return RILL_EINVAL;
    }
    int64_t n_new = 0;
    rill_err_t err = rill__session_check_adopt(s, branch, &n_new);
    if (err != RILL_OK) {
        return err;
    }
    if (n_new == 0) { /* the same stream: not an input call */
        rill__session_adopt(s, branch);
        return RILL_OK;
    }
    record_t r = { .type = REC_ADOPT, .branch = branch };
    return submit(s, &r, false);
}

static rill_err_t replace(rill_session_t *s, int64_t from, const char *text, size_t len,
                          bool defer) {
    if (s == NULL || (text == NULL && len > 0)) {
        return RILL_EINVAL;
    }
    record_t r = { .type = RILL__REC_REPLACE, .text = text, .len = len, .from = from };
    return submit(s, &r, defer);
}

rill_err_t rill_session_replace_text(rill_session_t *s, int64_t from_version, const char *text,
                                     size_t len) {
    return replace(s, from_version, text, len, false);
}

rill_err_t rill_session_feed_replace_text(rill_session_t *s, int64_t from_version, const char *text,
                                          size_t len) {
    return replace(s, from_version, text, len, true);
}

/* ---- replay ---------------------------------------------------------------------------------- */

/* The record a logged one stands for; false when its type is unknown or its payload does not
 * fit the type. The payload stays the reader's. */
static bool decode(const rill__log_record_t *lr, record_t *r) {
    memset(r, 0, sizeof *r);
    r->type = lr->type;
    switch (lr->type) {
    case RILL__REC_TOKENS:
        r->tokens = (const int32_t *)(const void *)lr->payload; /* rill_realloc's alignment */
        r->n_tokens = (int32_t)(lr->len / 4);
        return lr->len % 4 == 0 && lr->len > 0;
    case RILL__REC_TEXT:
    case RILL__REC_TEXT_END:
        r->text = (const char *)lr->payload;
        r->len = lr->len;
        return lr->len > 0;
    case RILL__REC_FLUSH:
        return lr->len == 0;
    case RILL__REC_ROLLBACK:
        if (lr->len == 4) {
            memcpy(&r->pos, lr->payload, 4);
        }
        return lr->len == 4;
    case RILL__REC_REPLACE:
        if (lr->len >= 8) {
            uint64_t from = rill__get_u64(lr->payload);
            r->from = from > (uint64_t)INT64_MAX ? -1 : (int64_t)from;
            r->text = (const char *)lr->payload + 8;
            r->len = lr->len - 8;
        }
        return lr->len >= 8;
    default:
        return false;
    }
}

rill_err_t rill__record_replay(rill_session_pool_t *p, rill_session_t **sp, const char *path,
                               rill_session_fsync_t policy, char *msg, size_t msglen) {
    rill_session_t *s = *sp;
    bool created = false;
    rill__log_header_t hd;
    rill__log_reader_t *rd = NULL;
    rill_err_t err = rill__log_reader_open(p, path, &hd, &rd, msg, msglen);
    if (err != RILL_OK) {
        return err;
    }
    if (s == NULL) {
        if (hd.first_seq != 1) {
            err = RILL_EINVAL;
            snprintf(msg, msglen,
                     "log %s begins at record %llu: restoring it needs the snapshot that covers "
                     "the records before",
                     path, (unsigned long long)hd.first_seq);
            goto cleanup;
        }
        RILL_TRY(rill__session_alloc(p, hd.sink_slots, hd.window_slots, hd.evict_pages, &s));
        created = true;
        s->uid = hd.uid;
    } else if (hd.uid != s->uid) {
        err = RILL_EINVAL;
        snprintf(msg, msglen, "log %s belongs to another session (%016llx, snapshot %016llx)", path,
                 (unsigned long long)hd.uid, (unsigned long long)s->uid);
        goto cleanup;
    } else if (hd.sink_slots != s->sink_slots || hd.window_slots != s->window_slots ||
               hd.evict_pages != s->evict_pages) {
        err = RILL_EINVAL;
        snprintf(msg, msglen, "log %s has another window policy than the snapshot", path);
        goto cleanup;
    } else if (hd.first_seq > (uint64_t)s->seq + 1) {
        err = RILL_EINVAL;
        snprintf(msg, msglen,
                 "log %s begins at record %llu but the snapshot covers records up to %lld: "
                 "records in between are missing",
                 path, (unsigned long long)hd.first_seq, (long long)s->seq);
        goto cleanup;
    }
    for (;;) {
        rill__log_record_t lr;
        RILL_TRY(rill__log_reader_next(rd, &lr, msg, msglen));
        if (lr.type == 0) {
            break;
        }
        record_t r;
        if (lr.reserved != 0 || !decode(&lr, &r)) {
            err = lr.type >= RILL__REC_TOKENS && lr.type <= RILL__REC_TEXT_END ? RILL_ECORRUPT
                                                                               : RILL_EUNSUPPORTED;
            snprintf(msg, msglen, "log %s: record at offset %lld: type %u with %u bytes", path,
                     (long long)lr.off, lr.type, lr.len);
            goto cleanup;
        }
        if ((int64_t)lr.seq > s->seq) {
            err = apply(s, &r);
            if (err != RILL_OK) {
                snprintf(msg, msglen, "log %s: replaying record %llu (offset %lld): %s", path,
                         (unsigned long long)lr.seq, (long long)lr.off,
                         s->err[0] ? s->err : rill_strerror(err));
                goto cleanup;
            }
            s->seq = (int64_t)lr.seq;
        }
    }
    RILL_TRY(rill__log_reader_attach(&rd, s, policy, msg, msglen));
    *sp = s;
    return RILL_OK;
cleanup:
    rill__log_reader_close(&rd);
    if (created) {
        rill_session_destroy(&s);
    }
    return err;
}
