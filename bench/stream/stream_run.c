/*
 * stream_run.c - the stream benchmark's two modes (see stream_internal.h): "rill", K feeder
 * threads ingesting their sessions' chunks at the chunks' arrival times and asking the
 * questions due, on one scheduler; then "stateless" (a), each sampled question as one request
 * that re-prefills its whole context on a fresh scheduler over the same, now empty, pool.
 *
 * Threads: the main thread, one feeder per session, and the scheduler's engine thread, whose
 * callbacks (on_token, on_done, on_standing, on_ack) write a question's result or a chunk's
 * acknowledgement; the main thread reads them after the run (on_done publishes under b->mu,
 * and the engine is idle before anything is read).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "stream_internal.h"

static cpu_time_t cpu_time(void) {
    cpu_time_t c = { false, 0, 0 };
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) {
        return c;
    }
    unsigned long long v[8] = { 0 };
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) == 8) {
        c.ok = true;
        for (int i = 0; i < 8; i++) {
            c.total += v[i];
        }
        c.steal = v[7];
    }
    fclose(f);
    return c;
}

static void sleep_until(int64_t t_ns) {
    struct timespec ts = { (time_t)(t_ns / 1000000000), (long)(t_ns % 1000000000) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static int64_t now_ns(void) {
    return (int64_t)rill_now_ns();
}

static void on_token(void *user, rill_sched_rid_t rid, int32_t token) {
    (void)rid;
    result_t *r = user;
    if (r->n_answer == 0) {
        r->first_ns = now_ns();
    }
    if (r->n_answer < (int32_t)r->b->o.answer) {
        r->answer[r->n_answer] = token;
    }
    r->n_answer++;
}

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    result_t *r = user;
    bench_t *b = r->b;
    int64_t t = now_ns();
    pthread_mutex_lock(&b->mu);
    r->done_ns = t;
    r->status = a->status;
    r->engine_ttft_ns = a->ttft_ns;
    r->engine_total_ns = a->total_ns;
    r->backlog = a->backlog;
    r->ttft_compute_ns = a->ttft_compute_ns;
    r->engine_context = a->n_context;
    r->version = a->version;
    r->done = true;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void on_standing(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    standing_t *st = user;
    if (a->status != RILL_OK) {
        return; /* cancelled when the scheduler is destroyed */
    }
    bench_t *b = st->b;
    pthread_mutex_lock(&b->mu);
    st->done_ns = a->done_ns > 0 ? a->done_ns : now_ns();
    st->answers++;
    if (st->n_kept < st->cap_kept) { /* room for one per version: never short */
        sanswer_t *k = &st->kept[st->n_kept++];
        k->version = a->version;
        k->n_context = a->n_context;
        int32_t cap = (int32_t)b->o.standing_answer;
        k->n_tokens = a->n_tokens < cap ? a->n_tokens : cap;
        memcpy(k->tokens, a->tokens, (size_t)k->n_tokens * sizeof *k->tokens);
    }
    pthread_mutex_unlock(&b->mu);
}

static void finish(result_t *r, rill_err_t err) {
    bench_t *b = r->b;
    pthread_mutex_lock(&b->mu);
    r->status = err;
    r->done = true;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* on_ack of a chunk's rill_sched_ingest_async (engine thread; the feeder reads the chunk only
 * after the run). */
static void on_ack(void *user, rill_err_t status, const char *message) {
    (void)message;
    chunk_t *ch = user;
    ch->ack_ns = now_ns() - ch->call_ns;
    ch->err = status;
}

typedef struct feeder {
    bench_t *b;
    int32_t s;
    pthread_t th;
} feeder_t;

static void *feed(void *arg) {
    feeder_t *fd = arg;
    bench_t *b = fd->b;
    sstream_t *ss = &b->ss[fd->s];
    int32_t qi = 0;
    rill_err_t bad = RILL_OK;
    for (int64_t c = 0; c < ss->n_chunks; c++) {
        chunk_t *ch = &ss->chunks[c];
        int64_t due = b->t0 + ch->t_ns;
        sleep_until(due);
        ch->call_ns = now_ns();
        ch->late_ns = ch->call_ns - due;
        rill_err_t err = rill_sched_ingest_async(b->sch, b->sid[fd->s], ss->tokens + ch->tok_off,
                                                 ch->n_tok, on_ack, ch);
        if (err != RILL_OK && bad == RILL_OK) {
            bad = err;
        }
        for (; qi < ss->n_q && b->qs[ss->q_first + qi].after == c + 1; qi++) {
            question_t *q = &b->qs[ss->q_first + qi];
            result_t *r = &q->rill;
            r->arrival_ns = due;
            pthread_mutex_lock(&b->mu);
            int64_t sd = b->st[fd->s].done_ns;
            pthread_mutex_unlock(&b->mu);
            r->standing_age_ns = b->o.no_standing || sd == 0 ? -1 : now_ns() - sd;
            rill_sched_ask_t a = { .question = b->qtok[q->kind],
                                   .n_question = b->n_qtok[q->kind],
                                   .n_max = (int32_t)b->o.answer,
                                   .stop_at_eog = !b->o.no_stop,
                                   .stop_at_newline = !b->o.no_stop,
                                   .consistency = q->consistency,
                                   .on_token = on_token,
                                   .on_done = on_done,
                                   .user = r };
            rill_sched_rid_t rid = 0;
            err = rill_sched_ask(b->sch, b->sid[fd->s], &a, &rid);
            if (err != RILL_OK) {
                finish(r, err);
            }
        }
    }
    pthread_mutex_lock(&b->mu);
    if (bad != RILL_OK && b->feed_err == RILL_OK) {
        b->feed_err = bad;
    }
    b->feeders_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Waits until *counter (guarded by b->mu) reaches target, printing progress every 10 s;
 * false when timeout_ns passes first. */
static bool wait_count(bench_t *b, const int64_t *counter, int64_t target, int64_t timeout_ns,
                       const char *what) {
    int64_t start = now_ns(), last = start;
    pthread_mutex_lock(&b->mu);
    while (*counter < target) {
        int64_t t = now_ns();
        if (t - start > timeout_ns) {
            pthread_mutex_unlock(&b->mu);
            return false;
        }
        if (t - last >= 10000000000LL) {
            fprintf(stderr, "rill bench stream: %s: %.0f s, %lld of %lld done\n", what,
                    (double)(t - start) / 1e9, (long long)*counter, (long long)target);
            last = t;
        }
        struct timespec ts; /* the condition variable's clock is CLOCK_REALTIME */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
    pthread_mutex_unlock(&b->mu);
    return true;
}

static int sched_error(const char *what, rill_err_t err) {
    fprintf(stderr, "rill bench stream: %s: %s\n", what, rill_last_error(err));
    return 1;
}

int rill__stream_run_rill(bench_t *b) {
    int32_t K = (int32_t)b->o.sessions;
    rill_sched_params_t sp = rill_sched_default_params();
    sp.overflow_pages = b->overflow;
    sp.max_delay_ns = (int64_t)(b->o.max_delay_ms * 1e6);
    sp.standing_min_interval_ns = (int64_t)(b->o.standing_interval_ms * 1e6);
    sp.standing_max_share = b->o.standing_share;
    rill_err_t err = rill_sched_new(b->pool, &sp, &b->sch);
    if (err != RILL_OK) {
        return sched_error("scheduler", err);
    }
    int rc = 1;
    feeder_t *fds = rill_calloc(RILL_MEM_OTHER, (size_t)K, sizeof *fds);
    if (fds == NULL) {
        goto done;
    }
    for (int32_t s = 0; s < K; s++) {
        rill_sched_session_params_t ps = rill_sched_session_default_params();
        ps.session.prompt = b->n_prompt > 0 ? b->prompt : NULL;
        ps.session.n_prompt = b->n_prompt;
        err = rill_sched_session_create(b->sch, &ps, &b->sid[s]);
        if (err != RILL_OK) {
            sched_error("session", err);
            goto done;
        }
        if (!b->o.no_standing) {
            b->st[s].b = b;
            rill_sched_ask_t a = { .question = b->stok,
                                   .n_question = b->n_stok,
                                   .n_max = (int32_t)b->o.standing_answer,
                                   .stop_at_eog = !b->o.no_stop,
                                   .stop_at_newline = !b->o.no_stop,
                                   .on_done = on_standing,
                                   .user = &b->st[s] };
            rill_sched_rid_t qid = 0;
            if ((err = rill_sched_standing_register(b->sch, b->sid[s], &a, &qid)) != RILL_OK) {
                sched_error("standing query", err);
                goto done;
            }
        }
    }
    if (rill_sched_wait_idle(b->sch, 120000000000LL) != RILL_OK) {
        fprintf(stderr, "rill bench stream: the engine did not settle before the stream\n");
        goto done;
    }
    rill_sched_stats(b->sch, &b->s0);
    b->c0 = cpu_time();
    b->t0 = now_ns() + 100000000; /* the feeders start together */
    int32_t started = 0;
    for (; started < K; started++) {
        fds[started] = (feeder_t){ b, started, 0 };
        if (pthread_create(&fds[started].th, NULL, feed, &fds[started]) != 0) {
            fprintf(stderr, "rill bench stream: cannot start a feeder thread\n");
            break;
        }
    }
    /* Feeders always end: their calls do not wait for the engine. */
    wait_count(b, &b->feeders_done, started, INT64_MAX, "streaming (sessions done)");
    for (int32_t s = 0; s < started; s++) {
        pthread_join(fds[s].th, NULL);
    }
    int64_t t_end = now_ns();
    b->stream_ns = t_end - b->t0;
    rill_sched_stats(b->sch, &b->s1);
    b->c1 = cpu_time();
    if (started < K) {
        goto done;
    }
    if (b->feed_err != RILL_OK) {
        sched_error("ingest", b->feed_err);
        goto done;
    }
    if (!wait_count(b, &b->n_done, b->n_qs, 600000000000LL, "answering")) {
        fprintf(stderr, "rill bench stream: questions still open after 600 s\n");
        goto done;
    }
    if (rill_sched_wait_idle(b->sch, 600000000000LL) != RILL_OK) {
        fprintf(stderr, "rill bench stream: the engine did not go idle after the stream\n");
        goto done;
    }
    b->drain_ns = now_ns() - t_end;
    for (int32_t s = 0; s < K; s++) { /* every chunk acknowledged (on_ack has run: idle) */
        for (int64_t c = 0; c < b->ss[s].n_chunks; c++) {
            if (b->ss[s].chunks[c].err != RILL_OK) {
                sched_error("ingest", b->ss[s].chunks[c].err);
                goto done;
            }
        }
    }
    for (int32_t s = 0; s < K && !b->o.no_standing; s++) {
        if (rill_sched_standing_list(b->sch, b->sid[s], &b->sinfo[s], 1) < 1) {
            memset(&b->sinfo[s], 0, sizeof b->sinfo[s]);
        }
    }
    rc = 0;
done:
    rill_free(fds);
    rill_sched_destroy(&b->sch); /* ends the standing queries, closes every session */
    return rc;
}

/* (a): each sampled question as one request on a fresh session of an otherwise idle engine. */
int rill__stream_run_stateless(bench_t *b) {
    int64_t n = 0;
    for (int32_t k = 0; k < b->n_buckets; k++) {
        /* the --stateless questions with the largest contexts of the bucket */
        for (int64_t pick = 0; pick < b->o.stateless; pick++) {
            question_t *best = NULL;
            for (int64_t i = 0; i < b->n_qs; i++) {
                question_t *q = &b->qs[i];
                if (q->bucket == k && !q->sampled && (best == NULL || q->context > best->context)) {
                    best = q;
                }
            }
            if (best == NULL) {
                break;
            }
            best->sampled = true;
            n++;
        }
    }
    if (n == 0) {
        return 0;
    }
    rill_sched_params_t sp = rill_sched_default_params();
    sp.max_delay_ns = 0;                           /* whole 512-token steps: nothing waits */
    sp.overflow_pages = b->n_pages - b->res_pages; /* the request's fork takes the rest */
    rill_err_t err = rill_sched_new(b->pool, &sp, &b->sch);
    if (err != RILL_OK) {
        return sched_error("scheduler (stateless)", err);
    }
    int32_t *req = rill_malloc(RILL_MEM_OTHER, (size_t)b->n_ctx * sizeof *req);
    int rc = req == NULL;
    int64_t done_before = b->n_done;
    fprintf(stderr, "rill bench stream: stateless: %lld questions\n", (long long)n);
    for (int64_t i = 0; i < b->n_qs && rc == 0; i++) {
        question_t *q = &b->qs[i];
        if (!q->sampled) {
            continue;
        }
        const sstream_t *ss = &b->ss[q->session];
        int64_t data =
            q->after > 0 ? ss->chunks[q->after - 1].tok_off + ss->chunks[q->after - 1].n_tok : 0;
        int32_t len = 0;
        memcpy(req, b->prompt, (size_t)b->n_prompt * sizeof *req);
        len += b->n_prompt;
        memcpy(req + len, ss->tokens, (size_t)data * sizeof *req);
        len += (int32_t)data;
        memcpy(req + len, b->qtok[q->kind], (size_t)b->n_qtok[q->kind] * sizeof *req);
        len += b->n_qtok[q->kind];
        rill_sched_session_params_t ps = rill_sched_session_default_params();
        rill_sched_sid_t sid = 0;
        err = rill_sched_session_create(b->sch, &ps, &sid);
        if (err != RILL_OK) {
            rc = sched_error("stateless session", err);
            break;
        }
        result_t *r = &q->stateless;
        rill_sched_ask_t a = { .question = req,
                               .n_question = len,
                               .n_max = (int32_t)b->o.answer,
                               .stop_at_eog = !b->o.no_stop,
                               .stop_at_newline = !b->o.no_stop,
                               .on_token = on_token,
                               .on_done = on_done,
                               .user = r };
        rill_sched_rid_t rid = 0;
        r->arrival_ns = now_ns();
        err = rill_sched_ask(b->sch, sid, &a, &rid);
        if (err != RILL_OK) {
            finish(r, err);
        }
        done_before++;
        if (!wait_count(b, &b->n_done, done_before, 600000000000LL, "stateless")) {
            fprintf(stderr, "rill bench stream: a stateless question took over 600 s\n");
            rc = 1;
        }
        rill_sched_session_close(b->sch, sid);
    }
    rill_free(req);
    rill_sched_destroy(&b->sch);
    return rc;
}
