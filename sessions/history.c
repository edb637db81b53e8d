/*
 * history.c - the replace window: what a session remembers of its recent inputs so that
 * rill_session_replace_text() can return to the state just before one of them.
 *
 * Design. The state before an input is (the token stream up to its start, the text held back
 * then, whether a text was in progress). The token stream up to the start is the session's own
 * stream as long as nothing later cut below it, so an entry needs only the start (a stream
 * index, which eviction does not move), the held text and the flag: 32 bytes and a few bytes of
 * text, not the input's tokens or text. The input's own text is never needed again: a replace
 * re-tokenizes the held text before it followed by the new text.
 *
 * Entries live in a fixed ring of RILL_SESSION_REPLACE_INPUTS (allocated with the session);
 * the held texts lie back to back in one store that grows to at most twice
 * RILL_SESSION_REPLACE_HELD (the kept bytes, plus one staged copy), with absolute offsets so
 * that dropping the oldest entries never rewrites the others. An entry whose held text equals
 * the previous one's (token inputs, generated tokens) shares its bytes. Sequence numbers,
 * starts and offsets are non-decreasing from oldest to newest, which is what makes "the oldest
 * entry with seq >= V" the state a replace from V returns to, and the front of the store the
 * only place bytes are freed.
 *
 * Invariants: n_hist > 0 implies the newest entry's seq == the session's seq; n_hist == 0
 * implies hist_floor == seq + 1. Forgetting the oldest entry raises hist_floor past it.
 *
 * What a replace may not reach. An entry is marked lost when a later rollback cut the stream
 * below its start, or when its held text was too long to keep. Tokens a window evicted are
 * gone; but which tokens are evicted depends on when queued input was evaluated, which the log
 * does not record. So reach is judged against n_evicted_sync, the evictions of a session that
 * took the same input synchronously (as replay does): it is a function of the input alone and
 * never below the live eviction count, so a replace the live session accepted is accepted by
 * its replay too.
 *
 * Rejected: keeping each input's raw text and tokens (a replace needs neither, and they would
 * make the bound depend on input sizes); an unbounded history (a session runs for days).
 */
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "session_internal.h"

#define HIST_MAX RILL_SESSION_REPLACE_INPUTS
#define HELD_MAX ((uint64_t)RILL_SESSION_REPLACE_HELD)

rill_err_t rill__hist_new(rill_session_t *s) {
    s->hist = rill_malloc(RILL_MEM_SESSIONS, HIST_MAX * sizeof *s->hist);
    if (s->hist == NULL) {
        return RILL_ENOMEM;
    }
    s->hist_head = 0;
    s->n_hist = 0;
    s->hist_floor = s->seq + 1;
    return RILL_OK;
}

void rill__hist_free(rill_session_t *s) {
    rill_free(s->hist);
    rill_free(s->held);
    s->hist = NULL;
    s->held = NULL;
    s->n_hist = 0;
    s->held_cap = 0;
}

rill__input_t *rill__hist_at(rill_session_t *s, int32_t i) {
    return &s->hist[(s->hist_head + i) % HIST_MAX];
}

static const rill__input_t *at_c(const rill_session_t *s, int32_t i) {
    return &s->hist[(s->hist_head + i) % HIST_MAX];
}

const char *rill__hist_held(const rill_session_t *s, const rill__input_t *in) {
    return s->held + (in->held_at - s->held_base);
}

rill_err_t rill__hist_copy(rill_session_t *dst, const rill_session_t *src) {
    uint64_t from = src->n_hist > 0 ? at_c(src, 0)->held_at : src->held_end;
    size_t live = (size_t)(src->held_end - from);
    if (live > 0) {
        char *held = rill_malloc(RILL_MEM_SESSIONS, live);
        if (held == NULL) {
            return RILL_ENOMEM;
        }
        memcpy(held, src->held + (from - src->held_base), live);
        rill_free(dst->held);
        dst->held = held;
        dst->held_cap = live;
    }
    for (int32_t i = 0; i < src->n_hist; i++) {
        dst->hist[i] = *at_c(src, i);
    }
    dst->hist_head = 0;
    dst->n_hist = src->n_hist;
    dst->hist_floor = src->hist_floor;
    dst->held_base = from;
    dst->held_end = src->held_end;
    dst->n_evicted_sync = src->n_evicted_sync;
    return RILL_OK;
}

rill_err_t rill__hist_stage(rill_session_t *s, rill__input_t *in) {
    *in = (rill__input_t){ .seq = s->seq + 1,
                           .start = rill__stream_len(s),
                           .held_at = s->held_end,
                           .started = s->text_started };
    size_t h = s->text_len;
    if (h == 0) {
        return RILL_OK;
    }
    if (h > HELD_MAX) {
        in->lost = RILL__LOST_HELD;
        return RILL_OK;
    }
    if (s->n_hist > 0) {
        const rill__input_t *last = at_c(s, s->n_hist - 1);
        if (last->held_len == h && memcmp(rill__hist_held(s, last), s->text, h) == 0) {
            in->held_at = last->held_at;
            in->held_len = (uint32_t)h;
            return RILL_OK;
        }
    }
    /* Bytes before the oldest entry's are nobody's: move the kept ones to the front. */
    uint64_t from = s->n_hist > 0 ? at_c(s, 0)->held_at : s->held_end;
    size_t live = (size_t)(s->held_end - from);
    if (from > s->held_base && s->held != NULL) {
        memmove(s->held, s->held + (from - s->held_base), live);
        s->held_base = from;
    }
    if (live + h > s->held_cap) {
        size_t cap = s->held_cap * 2 > live + h ? s->held_cap * 2 : live + h;
        cap = cap < 256 ? 256 : cap;
        char *grown = rill_realloc(RILL_MEM_SESSIONS, s->held, cap);
        if (grown == NULL) {
            return rill__session_fail(s, RILL_ENOMEM, "replace window: out of memory");
        }
        s->held = grown;
        s->held_cap = cap;
    }
    memcpy(s->held + live, s->text, h);
    in->held_len = (uint32_t)h;
    return RILL_OK;
}

static void drop_oldest(rill_session_t *s) {
    s->hist_floor = at_c(s, 0)->seq + 1;
    s->hist_head = (s->hist_head + 1) % HIST_MAX;
    s->n_hist--;
}

void rill__hist_push(rill_session_t *s, const rill__input_t *in) {
    RILL_ASSERT(in->seq == s->seq + 1);
    uint64_t end = in->held_at + in->held_len;
    if (end > s->held_end) {
        s->held_end = end;
    }
    if (s->n_hist == HIST_MAX) {
        drop_oldest(s);
    }
    *rill__hist_at(s, s->n_hist) = *in;
    s->n_hist++;
    while (s->held_end - at_c(s, 0)->held_at > HELD_MAX) {
        drop_oldest(s); /* never the newest: its own text is at most HELD_MAX */
    }
}

void rill__hist_rolled_back(rill_session_t *s, int64_t len) {
    for (int32_t i = s->n_hist; i-- > 0;) {
        rill__input_t *in = rill__hist_at(s, i);
        if (in->start > len && in->lost == RILL__LOST_NONE) {
            in->lost = RILL__LOST_ROLLED_BACK;
        }
    }
}

rill_err_t rill__hist_reach(rill_session_t *s, int64_t from, int32_t *idx) {
    if (from < 1 || from > s->seq) {
        return rill__session_fail(s, RILL_EINVAL,
                                  "replace from version %lld: the session's versions are "
                                  "[1, %lld]",
                                  (long long)from, (long long)s->seq);
    }
    if (from < s->hist_floor) {
        return rill__session_fail(s, RILL_ERANGE,
                                  "replace from version %lld: the session remembers its inputs "
                                  "from version %lld on (at most the last %d; none from before "
                                  "a restore of a version-1 snapshot)",
                                  (long long)from, (long long)s->hist_floor,
                                  RILL_SESSION_REPLACE_INPUTS);
    }
    int32_t i = s->n_hist - 1;
    while (i > 0 && at_c(s, i - 1)->seq >= from) {
        i--;
    }
    RILL_ASSERT(i >= 0 && at_c(s, i)->seq >= from); /* from <= seq == the newest entry's */
    const rill__input_t *in = at_c(s, i);
    if (in->lost != RILL__LOST_NONE) {
        return rill__session_fail(
            s, RILL_ERANGE, "replace from version %lld: %s", (long long)from,
            in->lost == RILL__LOST_ROLLED_BACK
                ? "a later rollback removed tokens given before that input"
                : "the text held back before that input is longer than a replace can keep");
    }
    int64_t evicted = s->n_evicted_sync > s->n_evicted ? s->n_evicted_sync : s->n_evicted;
    if (evicted > 0 && in->start < s->sink_slots + evicted) {
        return rill__session_fail(s, RILL_ERANGE,
                                  "replace from version %lld: that input starts at token %lld, "
                                  "the window has evicted the tokens before %lld",
                                  (long long)from, (long long)in->start,
                                  (long long)(s->sink_slots + evicted));
    }
    *idx = i;
    return RILL_OK;
}

void rill__hist_replace(rill_session_t *s, int32_t i) {
    rill__input_t *in = rill__hist_at(s, i);
    in->seq = s->seq + 1;
    s->n_hist = i + 1;
    s->held_end = in->held_at + in->held_len;
}

void rill__hist_track_evictions(rill_session_t *s) {
    if (s->window_slots > 0) {
        int64_t over = rill__stream_len(s) - s->n_evicted_sync - s->cap_slots;
        int64_t step = (int64_t)s->evict_pages * s->pool->P;
        if (over > 0) {
            s->n_evicted_sync += (over + step - 1) / step * step;
        }
    }
    if (s->n_evicted_sync < s->n_evicted) {
        s->n_evicted_sync = s->n_evicted;
    }
}

int64_t rill_session_version_at(const rill_session_t *s, int64_t len) {
    if (s == NULL || len < 0) {
        return -1;
    }
    if (len >= rill__stream_len(s)) {
        return s->seq; /* every input's tokens lie within it */
    }
    /* the newest input that starts within len ends where the next one starts: the version
     * before it is the newest whose inputs lie wholly within len */
    for (int32_t i = s->n_hist - 1; i >= 0; i--) {
        const rill__input_t *in = at_c(s, i);
        if (in->lost != RILL__LOST_ROLLED_BACK && in->start <= len) {
            int64_t next_start = i + 1 < s->n_hist ? at_c(s, i + 1)->start : rill__stream_len(s);
            return next_start <= len ? in->seq : in->seq - 1;
        }
    }
    return -1;
}
