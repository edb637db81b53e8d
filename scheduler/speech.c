/*
 * speech.c - streaming recognizers as one of the engine's work classes (contract:
 * rill_scheduler.h, "speech recognizers"; the recognizer itself: rill_asr.h).
 *
 * Design. A recognizer step is one Whisper encode and greedy decode (tens of ms to a second), far
 * longer than a token step, and it cannot be batched with the language models' passes (another
 * model, another shape). So it is not a class inside the batch builder: the engine runs at most
 * one recognizer step after each loop's passes (engine.c), taking ready recognizers in rotation
 * (sch->asr_rr), which bounds what a question waits for to about one encode whatever the number
 * of recognizers, and keeps transcripts moving while questions are answered. Rejected: running
 * every ready recognizer per loop (N encodes in front of a waiting question) and running them
 * only when the engine is otherwise idle (a caption would stop for as long as questions come).
 *
 * Audio goes from the feeding thread to the engine through core's SPSC ring (floats, sized at
 * attach), so a feed never takes a lock held across a decode and never allocates; the only lock
 * it takes is the engine's queue mutex, for a moment, to set sch->asr_kick and wake the engine.
 * A finish is a sample count (finish_at: "finish once the engine has taken this much"), which
 * orders it after the audio fed before it without a marker in the ring.
 *
 * The consumer. Committed text goes in as flushed text inputs; the tentative tail as one flushed
 * input that each change replaces (rill__sched_input_replace from tail_from, the version of the
 * tail's latest input, then a flush): so the session rolls back exactly to where the old and the
 * new tail part ways, and a question sees the tail at once (nothing held back). Committed words
 * replace the tail inputs they settle (the replace then carries the committed text), and the new
 * tail follows as a new input. tail_from is the version of the newest tail input rather than the
 * first one's: the session remembers its last 64 inputs (sessions/history.c), and a replace's
 * inputs leave the session, so this version always lies two inputs back.
 *
 * Invariant (tested by test_scheduler's speech tests): after each update the consumer's text
 * after its earlier input is the committed transcript + (" " + tail when there is a tail).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "sched_internal.h"

#define SPEECH_SCRATCH 16000 /* samples moved from the queue per pop (1 s) */

rill_sched_asr_params_t rill_sched_asr_default_params(void) {
    rill_sched_asr_params_t p = { 0 };
    p.asr = rill_asr_default_params();
    p.asr.keep_committed = false;
    p.queue_ms = 30000;
    return p;
}

static void wake(rill_sched_t *sch) {
    pthread_mutex_lock(&sch->mu);
    sch->asr_kick = true;
    pthread_cond_signal(&sch->wake);
    pthread_mutex_unlock(&sch->mu);
}

static void free_asr(rill_sched_asr_t *a) {
    rill_asr_destroy(&a->asr);
    rill_ring_deinit(&a->q);
    rill_free(a->scratch);
    rill_free(a->tail);
    rill_free(a->text);
    rill_free(a);
}

rill_err_t rill_sched_asr_attach(rill_sched_t *sch, const rill_sched_asr_params_t *p,
                                 rill_sched_asr_t **out) {
    if (sch == NULL || p == NULL || out == NULL || p->whisper == NULL || p->model == NULL) {
        return rill__error(RILL_EINVAL, "NULL argument");
    }
    if (p->queue_ms < 100 || p->queue_ms > 120000) {
        return rill__error(RILL_EINVAL, "queue_ms %d outside [100, 120000]", p->queue_ms);
    }
    const char *lang = p->asr.language != NULL ? p->asr.language : "en";
    rill_sched_asr_t *a = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *a);
    if (a == NULL) {
        return rill__error(RILL_ENOMEM, "out of memory (recognizer)");
    }
    if (strlen(lang) >= sizeof a->language) {
        rill_free(a);
        return rill__error(RILL_EINVAL, "language code too long");
    }
    a->sch = sch;
    a->w = p->whisper;
    a->model = p->model;
    a->ap = p->asr;
    snprintf(a->language, sizeof a->language, "%s", lang);
    a->ap.language = a->language;
    a->consumer = p->consumer;
    a->on_update = p->on_update;
    a->user = p->user;
    a->tail_from = -1;
    atomic_init(&a->queued, 0);
    atomic_init(&a->finish_at, -1);
    atomic_init(&a->finish_gen, 0);
    atomic_init(&a->closed, false);
    a->scratch = rill_malloc(RILL_MEM_SCHEDULER, SPEECH_SCRATCH * sizeof *a->scratch);
    rill_err_t err = a->scratch == NULL ? RILL_ENOMEM
                                        : rill_ring_init(&a->q, RILL_MEM_SCHEDULER, sizeof(float),
                                                         (size_t)p->queue_ms * 16);
    if (err != RILL_OK) {
        free_asr(a);
        return rill__error(err, "out of memory (recognizer queue of %d ms)", p->queue_ms);
    }
    cmd_t c = { .kind = CMD_ASR_ATTACH, .u.asr.a = a };
    err = rill__sched_call(sch, &c);
    if (err != RILL_OK) {
        free_asr(a);
        return err;
    }
    *out = a;
    return RILL_OK;
}

void rill_sched_asr_detach(rill_sched_t *sch, rill_sched_asr_t **ap) {
    if (sch == NULL || ap == NULL || *ap == NULL) {
        return;
    }
    cmd_t c = { .kind = CMD_ASR_DETACH, .u.asr.a = *ap };
    if (rill__sched_call(sch, &c) == RILL_OK) {
        free_asr(*ap); /* the engine has unlinked it and dropped its rill_asr_t */
    }
    *ap = NULL;
}

int64_t rill_sched_asr_room(const rill_sched_asr_t *a) {
    if (a == NULL) {
        return 0;
    }
    return (int64_t)(rill_ring_capacity(&a->q) - rill_ring_size(&a->q));
}

rill_err_t rill_sched_asr_feed(rill_sched_asr_t *a, const float *x, int64_t n) {
    if (a == NULL || n < 0 || (x == NULL && n > 0)) {
        return rill__error(RILL_EINVAL, "NULL recognizer or samples, or a negative count");
    }
    if (atomic_load(&a->closed)) {
        return rill__error(RILL_ECLOSED, "the recognizer failed to start a new stream");
    }
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            return rill__error(RILL_EINVAL, "sample %lld is not finite", (long long)i);
        }
    }
    const int64_t room = rill_sched_asr_room(a);
    if (n > room) {
        return rill__error(RILL_EFULL, "%lld samples do not fit the recognizer's queue (%lld free)",
                           (long long)n, (long long)room);
    }
    if (n == 0) {
        return RILL_OK;
    }
    size_t k = rill_ring_push_n(&a->q, x, (size_t)n);
    RILL_ASSERT(k == (size_t)n); /* the room was checked by the only producer */
    atomic_fetch_add(&a->queued, n);
    wake(a->sch);
    return RILL_OK;
}

rill_err_t rill_sched_asr_finish(rill_sched_asr_t *a) {
    if (a == NULL) {
        return rill__error(RILL_EINVAL, "NULL recognizer");
    }
    if (atomic_load(&a->closed)) {
        return rill__error(RILL_ECLOSED, "the recognizer failed to start a new stream");
    }
    atomic_store(&a->finish_at, atomic_load(&a->queued));
    atomic_fetch_add(&a->finish_gen, 1);
    wake(a->sch);
    return RILL_OK;
}

rill_err_t rill_sched_asr_stats(rill_sched_t *sch, rill_sched_asr_t *a,
                                rill_sched_asr_stats_t *out) {
    if (sch == NULL || a == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "NULL argument");
    }
    cmd_t c = { .kind = CMD_ASR_STATS, .u.asr = { .a = a, .out = out } };
    return rill__sched_call(sch, &c);
}

/* ---- the engine's side ------------------------------------------------------------------- */

/* t += u (window_samples: u's; max_window_samples: the larger). */
static void add_stats(rill_asr_stats_t *t, rill_asr_stats_t u) {
    t->samples_fed += u.samples_fed;
    t->decodes += u.decodes;
    t->tokens += u.tokens;
    t->skipped_silence += u.skipped_silence;
    t->skipped_settled += u.skipped_settled;
    t->no_speech += u.no_speech;
    t->hit_limit += u.hit_limit;
    t->prompt_resets += u.prompt_resets;
    t->samples_dropped += u.samples_dropped;
    t->window_samples = u.window_samples;
    t->max_window_samples =
        u.max_window_samples > t->max_window_samples ? u.max_window_samples : t->max_window_samples;
}

void rill__sched_asr_cmd(rill_sched_t *sch, cmd_t *c) {
    rill_sched_asr_t *a = c->u.asr.a;
    switch (c->kind) {
    case CMD_ASR_ATTACH:
        if (a->consumer != 0 && rill__sched_find_sess(sch, a->consumer) == NULL) {
            c->err = RILL_ENOTFOUND;
            rill__sched_msg(c, "no consumer session %llu", (unsigned long long)a->consumer);
            break;
        }
        c->err = rill_asr_new(a->w, a->model, &a->ap, &a->asr);
        if (c->err != RILL_OK) {
            rill__sched_msg(c, "%s", rill_last_error(c->err));
            break;
        }
        a->st.has_consumer = a->consumer != 0;
        a->next = NULL;
        rill_sched_asr_t **end = &sch->asrs;
        while (*end != NULL) {
            end = &(*end)->next;
        }
        *end = a;
        break;
    case CMD_ASR_DETACH:
    case CMD_ASR_STATS: {
        rill_sched_asr_t **pp = &sch->asrs;
        while (*pp != NULL && *pp != a) {
            pp = &(*pp)->next;
        }
        if (*pp == NULL) {
            c->err = RILL_EINVAL;
            rill__sched_msg(c, "not a recognizer of this scheduler");
            break;
        }
        if (c->kind == CMD_ASR_DETACH) {
            *pp = a->next;
            rill_asr_destroy(&a->asr);
            break;
        }
        rill_sched_asr_stats_t *o = c->u.asr.out;
        *o = a->st;
        o->asr = a->done;
        add_stats(&o->asr, rill_asr_stats(a->asr));
        o->samples_queued = atomic_load(&a->queued);
        o->samples_taken = a->taken;
        o->queue_samples = (int64_t)rill_ring_size(&a->q);
        break;
    }
    default:
        break;
    }
}

void rill__sched_speech_free(rill_sched_t *sch) {
    while (sch->asrs != NULL) {
        rill_sched_asr_t *a = sch->asrs;
        sch->asrs = a->next;
        free_asr(a);
    }
}

/* Moves queued audio into the recognizer's window as far as it has room; true when any moved. */
static bool take_audio(rill_sched_asr_t *a) {
    bool moved = false;
    while (a->asr != NULL) {
        int64_t room = rill_asr_room(a->asr);
        int64_t k = (int64_t)rill_ring_size(&a->q);
        k = k < room ? k : room;
        k = k < SPEECH_SCRATCH ? k : SPEECH_SCRATCH;
        if (k <= 0) {
            break;
        }
        size_t got = rill_ring_pop_n(&a->q, a->scratch, (size_t)k);
        /* samples were checked finite by feed, and fit the room: rill_asr_feed cannot refuse
         * them but for a sample rill_mel refuses (ERANGE), which is dropped with its chunk */
        if (rill_asr_feed(a->asr, a->scratch, (int64_t)got) != RILL_OK) {
            a->st.step_errors++;
        }
        a->taken += (int64_t)got;
        moved = true;
    }
    return moved;
}

static bool finish_due(const rill_sched_asr_t *a) {
    int64_t at = atomic_load(&a->finish_at);
    return at >= 0 && a->taken >= at;
}

static bool is_ready(const rill_sched_asr_t *a) {
    if (a->asr == NULL) {
        return false;
    }
    if (a->stalled && a->taken == a->stalled_taken &&
        atomic_load(&a->finish_gen) == a->stalled_gen) {
        return false;
    }
    return finish_due(a) || rill_asr_ready(a->asr) ||
           (rill_ring_size(&a->q) > 0 && rill_asr_room(a->asr) == 0);
}

/* a->text = a[0, an) + b[0, bn); false when out of memory. */
static bool build(rill_sched_asr_t *a, const char *p, size_t pn, const char *q, size_t qn) {
    if (pn + qn + 1 > a->text_cap) {
        size_t cap = a->text_cap < 256 ? 256 : a->text_cap;
        while (cap < pn + qn + 1) {
            cap *= 2;
        }
        char *t = rill_realloc(RILL_MEM_SCHEDULER, a->text, cap);
        if (t == NULL) {
            return false;
        }
        a->text = t;
        a->text_cap = cap;
    }
    memcpy(a->text, p, pn);
    memcpy(a->text + pn, q, qn);
    a->text[pn + qn] = '\0';
    return true;
}

/* One consumer input, counted; a failure is recorded in *status (the first one kept). */
static bool counted(rill_sched_asr_t *a, rill_err_t err, rill_err_t *status, bool replace) {
    a->st.consumer_inputs++;
    a->st.consumer_replaces += replace;
    if (err != RILL_OK) {
        a->st.consumer_errors++;
        if (*status == RILL_OK) {
            *status = err;
        }
        return false;
    }
    return true;
}

/* After a failed consumer input: a transient one (a full queue, memory) leaves the tail input
 * to be replaced by the next update; any other (the session no longer reaches back to it) lets
 * it go: its text stays in the session, and the next tail is a new input. */
static void give_up_tail(rill_sched_asr_t *a, rill_err_t err) {
    if (err != RILL_OK && err != RILL_EFULL && err != RILL_ENOMEM) {
        a->tail_from = -1;
    }
}

/* Writes committed text d[0, dn) and the tail t[0, tn) (changed: it differs from the last) into
 * the consumer (rill_scheduler.h, "speech recognizers"). Returns the consumer's version after it
 * (-1 without one); *status gets the first input's error. */
static int64_t to_consumer(rill_sched_t *sch, rill_sched_asr_t *a, const char *d, size_t dn,
                           const char *t, size_t tn, bool tail_changed, rill_err_t *status) {
    *status = RILL_OK;
    if (a->consumer == 0) {
        return -1;
    }
    sess_t *x = rill__sched_find_sess(sch, a->consumer);
    if (x == NULL) { /* closed: go on transcript-only */
        a->consumer = 0;
        a->st.has_consumer = false;
        return -1;
    }
    if (dn > 0) {
        rill_err_t err;
        if (a->tail_from > 0) {
            err = rill__sched_input_replace(sch, x, a->tail_from, d, dn);
            if (counted(a, err, status, true)) {
                err = rill__sched_input_text(sch, x, "", 0, true);
                counted(a, err, status, false);
            }
        } else {
            err = rill__sched_input_text(sch, x, d, dn, true);
            counted(a, err, status, false);
        }
        if (*status != RILL_OK) {
            give_up_tail(a, *status);
            return rill_session_seq(x->s);
        }
        a->tail_from = -1;
        tail_changed = true; /* the tail inputs went with the replace: a new one follows */
    }
    if (!tail_changed) {
        return rill_session_seq(x->s);
    }
    if (tn == 0) {
        if (a->tail_from > 0 &&
            counted(a, rill__sched_input_replace(sch, x, a->tail_from, "", 0), status, true)) {
            a->tail_from = -1;
        }
        return rill_session_seq(x->s);
    }
    const bool space = a->any_committed || dn > 0;
    if (!build(a, " ", space ? 1 : 0, t, tn)) {
        counted(a, RILL_ENOMEM, status, false);
        return rill_session_seq(x->s);
    }
    const size_t len = tn + (space ? 1 : 0);
    if (a->tail_from > 0) {
        if (counted(a, rill__sched_input_replace(sch, x, a->tail_from, a->text, len), status,
                    true)) {
            a->tail_from = rill_session_seq(x->s);
            counted(a, rill__sched_input_text(sch, x, "", 0, true), status, false);
        }
    } else if (counted(a, rill__sched_input_text(sch, x, a->text, len, true), status, false)) {
        a->tail_from = rill_session_seq(x->s);
    }
    give_up_tail(a, *status);
    return rill_session_seq(x->s);
}

static void report(rill_sched_asr_t *a, rill_sched_asr_update_t *u) {
    a->st.updates++;
    if (a->on_update != NULL) {
        a->on_update(a->user, u);
    }
}

/* One step (or finish) of a, with its update. */
static void run_step(rill_sched_t *sch, rill_sched_asr_t *a) {
    const bool final = finish_due(a);
    const int64_t fin_at = atomic_load(&a->finish_at);
    const uint64_t gen = atomic_load(&a->finish_gen);
    rill_asr_update_t u;
    memset(&u, 0, sizeof u);
    const int64_t t0 = rill__sched_now();
    rill_err_t err = final ? rill_asr_finish(a->asr, &u) : rill_asr_step(a->asr, &u);
    a->st.step_ns += rill__sched_now() - t0;
    a->st.steps++;
    rill_sched_asr_update_t up = { .status = err,
                                   .message = "",
                                   .committed = "",
                                   .tentative = "",
                                   .consumer_version = -1,
                                   .consumer_status = RILL_OK };
    if (err != RILL_OK) {
        a->st.step_errors++;
        a->stalled = true;
        a->stalled_taken = a->taken;
        a->stalled_gen = gen;
        up.message = rill_last_error(err);
        up.audio_ms = a->base_ms + rill_asr_stats(a->asr).samples_fed / 16;
        a->st.audio_ms = up.audio_ms;
        report(a, &up);
        return;
    }
    a->stalled = false;
    up.audio_ms = a->base_ms + u.audio_ms;
    a->st.audio_ms = up.audio_ms;
    /* committed text is joined with one space across streams too (a new rill_asr_t leads its
     * first words with none) */
    const char *d = u.committed;
    size_t dn = u.committed_len;
    char *joined = NULL;
    if (dn > 0 && d[0] != ' ' && a->any_committed) {
        joined = rill_malloc(RILL_MEM_SCHEDULER, dn + 2);
        if (joined != NULL) {
            joined[0] = ' ';
            memcpy(joined + 1, d, dn);
            joined[dn + 1] = '\0';
            d = joined;
            dn++;
        }
    }
    const bool tail_changed = u.tentative_len != a->tail_len ||
                              (a->tail_len > 0 && memcmp(u.tentative, a->tail, a->tail_len) != 0);
    if (dn > 0 || tail_changed || final) {
        rill_err_t cst = RILL_OK;
        up.consumer_version =
            to_consumer(sch, a, d, dn, u.tentative, u.tentative_len, tail_changed, &cst);
        up.consumer_status = cst;
        a->any_committed = a->any_committed || dn > 0;
        up.committed = d;
        up.committed_len = dn;
        up.tentative = u.tentative;
        up.tentative_len = u.tentative_len;
        up.final = final;
        if (cst != RILL_OK) {
            up.message = rill_last_error(cst);
        }
        /* keep the tail (capacity grows to the longest tail; the recognizer bounds it) */
        if (u.tentative_len + 1 > a->tail_cap) {
            char *g = rill_realloc(RILL_MEM_SCHEDULER, a->tail, u.tentative_len + 1);
            if (g != NULL) {
                a->tail = g;
                a->tail_cap = u.tentative_len + 1;
            }
        }
        if (u.tentative_len + 1 <= a->tail_cap) {
            memcpy(a->tail, u.tentative, u.tentative_len);
            a->tail_len = u.tentative_len;
        } else {
            a->tail_len = (size_t)-1; /* no copy: the next tail counts as changed */
        }
        report(a, &up);
    }
    rill_free(joined);
    if (!final) {
        return;
    }
    /* the stream ended: a fresh recognizer for the next one */
    a->st.finishes++;
    a->base_ms = up.audio_ms;
    a->tail_len = 0;
    a->tail_from = -1;
    int64_t expect = fin_at;
    atomic_compare_exchange_strong(&a->finish_at, &expect, -1); /* a later finish stays */
    add_stats(&a->done, rill_asr_stats(a->asr));
    a->done.window_samples = 0;
    rill_asr_destroy(&a->asr);
    err = rill_asr_new(a->w, a->model, &a->ap, &a->asr);
    if (err != RILL_OK) {
        atomic_store(&a->closed, true);
        a->st.step_errors++;
        rill_sched_asr_update_t fail = { .status = err,
                                         .message = rill_last_error(err),
                                         .committed = "",
                                         .tentative = "",
                                         .audio_ms = a->base_ms,
                                         .consumer_version = -1 };
        report(a, &fail);
    }
}

bool rill__sched_speech_step(rill_sched_t *sch) {
    bool worked = false;
    int32_t n = 0;
    for (rill_sched_asr_t *a = sch->asrs; a != NULL; a = a->next, n++) {
        worked = take_audio(a) || worked;
    }
    if (n == 0) {
        return false;
    }
    /* the first ready recognizer from the rotation's point on */
    const int32_t start = (int32_t)(sch->asr_rr % (uint64_t)n);
    rill_sched_asr_t *pick = NULL;
    int32_t i = 0;
    for (int32_t k = 0; k < n && pick == NULL; k++) {
        i = (start + k) % n;
        rill_sched_asr_t *a = sch->asrs;
        for (int32_t j = 0; j < i; j++) {
            a = a->next;
        }
        pick = is_ready(a) ? a : NULL;
    }
    if (pick == NULL) {
        return worked;
    }
    sch->asr_rr = (uint64_t)i + 1;
    run_step(sch, pick);
    take_audio(pick); /* the step may have made room */
    return true;
}
