/*
 * engine.c - the engine thread (contract: rill_scheduler.h): it takes the whole command queue
 * between steps, carries the commands out (blocking callers are woken once theirs is done, before
 * the next step starts), runs a step, and sleeps on a condition variable when there is neither a
 * command nor work. Everything it touches below the queue is its own; the only shared state is
 * the queue and the flags under the mutex. When a step had nothing to run but held a standing
 * refresh back (the standing budget), the engine sleeps only until that refresh may start
 * (sch->wake_at, a timed wait on the `wake` condition, whose clock is CLOCK_MONOTONIC like
 * rill_now_ns) and is not idle meanwhile, so rill_sched_wait_idle() waits for the refresh.
 * After the passes of each loop it runs at most one recognizer step (speech.c); a feed wakes it
 * through sch->asr_kick, since a feed queues audio, not a command. Then the sessions idle past
 * the sleep time go to sleep (sleep.c), and the engine's wait ends no later than the next one's
 * turn. A command that names a sleeping session wakes it (target()).
 *
 * Rejected: one lock per session with callers stepping sessions themselves (a step must see
 * every session, and the pool's free list is shared); a lock-free queue (commands are rare next
 * to steps; a mutex is simpler to get right and to check under TSan).
 */
#include <string.h>
#include <time.h>

#include "rill_alloc.h"
#include "sched_internal.h"

static void fill_info(rill_sched_t *sch, sess_t *x, rill_sched_session_info_t *o) {
    if (x->asleep) {
        *o = x->zzz; /* as it fell asleep (sleep.c) */
        o->asleep = true;
        o->pinned = x->pinned;
        o->tier = x->tier;
        o->sleep_bytes = x->sleep_bytes;
        o->sleeps = x->sleeps;
        o->wakes = x->wakes;
        o->last_wake_ns = x->last_wake_ns;
        return;
    }
    memset(o, 0, sizeof *o);
    o->pinned = x->pinned;
    o->tier = -1;
    o->sleeps = x->sleeps;
    o->wakes = x->wakes;
    o->last_wake_ns = x->last_wake_ns;
    o->model = x->m->index;
    rill_session_stats(x->s, &o->st);
    o->version = rill_session_seq(x->s);
    o->reserved_pages = x->reserved;
    o->held_text = rill_session_pending_text(x->s);
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x) {
            o->n_standing += r->kind == REQ_STANDING;
            o->n_requests += r->kind != REQ_STANDING;
        }
    }
}

static void fill_stats(rill_sched_t *sch, rill_sched_stats_t *o) {
    *o = sch->st;
    const model_t *m0 = &sch->models[0];
    o->ns_per_token = m0->ns_per_tok;
    o->ns_per_step = m0->ns_fixed;
    o->chunk_cap = rill__sched_step_cap(sch, m0);
    o->standing_share = rill__sched_share(sch, rill__sched_now());
    o->n_sessions = sch->n_sessions;
    o->backlog = 0;
    o->awake = o->asleep = o->asleep_log = 0;
    for (const sess_t *x = sch->sessions; x != NULL; x = x->next) {
        o->backlog += rill_session_pending(x->s);
        o->awake++;
    }
    for (const sess_t *x = sch->sleeping; x != NULL; x = x->next) {
        o->asleep++;
        o->asleep_log += x->tier == RILL_SCHED_TIER_LOG;
    }
    o->sleep_disk_bytes = sch->sleep_disk;
    for (int32_t i = 0; i < sch->n_models; i++) {
        const model_t *m = &sch->models[i];
        o->reserved_pages += m->reserved;
        o->overflow_pages += m->overflow;
        o->free_pages += rill_session_pool_n_free(m->pool);
        o->total_pages += m->n_pages;
    }
}

static void fill_model_info(rill_sched_t *sch, const model_t *m, rill_sched_model_info_t *o) {
    *o = (rill_sched_model_info_t){ .name = m->name,
                                    .steps = m->steps,
                                    .busy_ns = m->busy_ns,
                                    .ns_per_token = m->ns_per_tok,
                                    .ns_per_step = m->ns_fixed,
                                    .chunk_cap = rill__sched_step_cap(sch, m),
                                    .n_sessions = m->n_sessions,
                                    .reserved_pages = m->reserved,
                                    .overflow_pages = m->overflow,
                                    .free_pages = rill_session_pool_n_free(m->pool),
                                    .total_pages = m->n_pages };
    memcpy(o->tokens, m->tokens, sizeof o->tokens);
    for (const sess_t *x = sch->sessions; x != NULL; x = x->next) {
        o->backlog += x->m == m ? rill_session_pending(x->s) : 0;
    }
}

/* The session a session-addressed command names, woken if asleep (except for info and close,
 * which take it as it is: sleep.c); NULL (reported to its caller) when there is none or its
 * wake failed. */
static sess_t *target(rill_sched_t *sch, cmd_t *c, rill_sched_sid_t sid) {
    rill_err_t err = RILL_ENOTFOUND;
    sess_t *x = c->kind == CMD_INFO || c->kind == CMD_CLOSE ? rill__sched_find_any(sch, sid)
                                                            : rill__sched_use(sch, c, sid, &err);
    if (x == NULL) {
        c->err = err;
        const char *why = err == RILL_ENOTFOUND ? "no such session" : rill_last_error(err);
        if (err == RILL_ENOTFOUND) {
            rill__sched_msg(c, "no session %llu", (unsigned long long)sid);
        }
        if (c->kind == CMD_INGEST && c->u.ingest.on_ack != NULL) {
            c->u.ingest.on_ack(c->u.ingest.user, err, why);
        } else if (c->kind == CMD_REPLACE && c->u.replace.on_ack != NULL) {
            c->u.replace.on_ack(c->u.replace.user, err, -1, why);
        }
    }
    return x;
}

rill_err_t rill__sched_input_text(rill_sched_t *sch, sess_t *x, const char *text, size_t len,
                                  bool flush) {
    int64_t v = rill_session_seq(x->s);
    rill_err_t err;
    if (len > 0 && rill_session_pending(x->s) > RILL_SCHED_MAX_QUEUED) {
        err = rill__error(RILL_EFULL, "too many tokens already queued on the session");
    } else {
        /* with flush one input, so that the version it makes names the text for a replace */
        err = flush ? rill_session_feed_text_end(x->s, text, len)
                    : rill_session_feed_text(x->s, text, len);
    }
    if (rill_session_seq(x->s) != v) {
        rill__sched_data_changed(sch, x);
    }
    return err;
}

rill_err_t rill__sched_input_replace(rill_sched_t *sch, sess_t *x, int64_t from, const char *text,
                                     size_t len) {
    int64_t v = rill_session_seq(x->s);
    rill_err_t err;
    if (rill_session_pending(x->s) > RILL_SCHED_MAX_QUEUED) {
        err = rill__error(RILL_EFULL, "too many tokens already queued on the session");
    } else {
        err = rill_session_feed_replace_text(x->s, from, text, len);
    }
    if (rill_session_seq(x->s) != v) {
        int64_t ack = rill__sched_acknowledged(x);
        for (req_t *r = sch->reqs; r != NULL; r = r->next) {
            if (r->sess == x && r->phase == PH_WAIT && r->target > ack) {
                r->target = ack;
            }
        }
        rill__sched_data_changed(sch, x);
    }
    return err;
}

/* CMD_INGEST and CMD_INGEST_TEXT: check, log, queue; standing answers go stale. */
static void ingest(rill_sched_t *sch, cmd_t *c, sess_t *x) {
    if (c->kind == CMD_INGEST_TEXT) {
        c->err = rill__sched_input_text(sch, x, c->u.ingest_text.text, c->u.ingest_text.len,
                                        c->u.ingest_text.flush);
        if (c->err != RILL_OK && c->err != RILL_EFULL) {
            rill__sched_msg(c, "%s", rill_last_error(c->err));
        } else if (c->err == RILL_EFULL) {
            rill__sched_msg(c, "%d tokens already queued on the session",
                            rill_session_pending(x->s));
        }
        c->u.ingest_text.version = rill_session_seq(x->s);
        return;
    }
    int64_t v = rill_session_seq(x->s);
    if (c->u.ingest.n > 0 && rill_session_pending(x->s) > RILL_SCHED_MAX_QUEUED) {
        c->err = RILL_EFULL;
        rill__sched_msg(c, "%d tokens already queued on the session", rill_session_pending(x->s));
    } else {
        c->err = rill_session_feed(x->s, c->u.ingest.tokens, c->u.ingest.n);
    }
    if (c->err != RILL_OK && c->err != RILL_EFULL) {
        rill__sched_msg(c, "%s", rill_last_error(c->err));
    }
    if (rill_session_seq(x->s) != v) {
        rill__sched_data_changed(sch, x);
    }
    if (c->u.ingest.on_ack != NULL) {
        c->u.ingest.on_ack(c->u.ingest.user, c->err,
                           c->err == RILL_OK      ? ""
                           : c->err == RILL_EFULL ? "too many tokens already queued on the session"
                                                  : rill_last_error(c->err));
    }
}

/* CMD_REPLACE: check, log, roll back, queue; requests waiting for the session's data wait for
 * what is acknowledged now (the stream may have got shorter); standing answers go stale. */
static void replace(rill_sched_t *sch, cmd_t *c, sess_t *x) {
    c->err =
        rill__sched_input_replace(sch, x, c->u.replace.from, c->u.replace.text, c->u.replace.len);
    const char *why = c->err == RILL_OK ? "" : rill_last_error(c->err);
    rill__sched_msg(c, "%s", why);
    c->u.replace.version = c->err == RILL_OK ? rill_session_seq(x->s) : -1;
    if (c->u.replace.on_ack != NULL) {
        c->u.replace.on_ack(c->u.replace.user, c->err, c->u.replace.version, why);
    }
}

static void standing_list(rill_sched_t *sch, cmd_t *c, sess_t *x) {
    int64_t n = 0;
    rill_sched_standing_info_t *o = c->u.standing_list.out;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        n += r->sess == x && r->kind == REQ_STANDING;
    }
    /* reqs are newest first: fill registration order from the back */
    int64_t i = n;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->kind == REQ_STANDING && --i < c->u.standing_list.cap) {
            o[i] = (rill_sched_standing_info_t){
                .qid = r->id,
                .version = r->cache_version,
                .done_ns = r->cache_done_ns,
                .compute_ns = r->cache_compute_ns,
                .refreshes = r->refreshes,
                .abandoned = r->abandoned,
                .cache_hits = r->hits,
                .in_flight = r->phase != PH_IDLE,
            };
        }
    }
    c->u.standing_list.n = n;
}

static void run_cmd(rill_sched_t *sch, cmd_t *c) {
    sess_t *x = NULL;
    c->err = RILL_OK;
    switch (c->kind) {
    case CMD_CREATE:
        if (!rill__sched_create(sch, c)) {
            return; /* waits for its template: rill__sched_templates_ready finishes it */
        }
        break;
    case CMD_RESTORE:
        rill__sched_restore(sch, c);
        break;
    case CMD_CLOSE:
        if ((x = target(sch, c, c->u.close.sid)) != NULL) {
            rill__sched_close_sess(sch, x);
        }
        break;
    case CMD_INFO:
        if ((x = target(sch, c, c->u.info.sid)) != NULL) {
            fill_info(sch, x, c->u.info.out);
        }
        break;
    case CMD_SNAPSHOT:
        if ((x = target(sch, c, c->u.snapshot.sid)) != NULL) {
            c->err = rill_session_drain(x->s);
            if (c->err == RILL_OK) {
                c->err = rill_session_snapshot(x->s, c->u.snapshot.path);
            }
            if (c->err != RILL_OK) {
                rill__sched_msg(c, "%s", rill_last_error(c->err));
            }
        }
        break;
    case CMD_TOKENS:
        if ((x = target(sch, c, c->u.tokens.sid)) != NULL) {
            int32_t n = 0;
            const int32_t *t = rill_session_tokens(x->s, &n);
            int64_t cap = c->u.tokens.cap;
            if (cap > 0) {
                memcpy(c->u.tokens.out, t, (size_t)(n < cap ? n : cap) * sizeof *t);
            }
            c->u.tokens.n = n;
        }
        break;
    case CMD_INGEST:
    case CMD_INGEST_TEXT:
        x = target(sch, c, c->kind == CMD_INGEST ? c->u.ingest.sid : c->u.ingest_text.sid);
        if (x != NULL) {
            ingest(sch, c, x);
        }
        break;
    case CMD_REPLACE:
        if ((x = target(sch, c, c->u.replace.sid)) != NULL) {
            replace(sch, c, x);
        }
        break;
    case CMD_STANDING_LIST:
        if ((x = target(sch, c, c->u.standing_list.sid)) != NULL) {
            standing_list(sch, c, x);
        }
        break;
    case CMD_LIST: { /* awake and asleep, both in id (creation) order: merged */
        int64_t n = 0;
        for (sess_t *a = sch->sessions, *z = sch->sleeping; a != NULL || z != NULL; n++) {
            sess_t **y = z == NULL || (a != NULL && a->id < z->id) ? &a : &z;
            if (n < c->u.list.cap) {
                c->u.list.out[n] = (*y)->id;
            }
            *y = (*y)->next;
        }
        c->u.list.n = n;
        break;
    }
    case CMD_SLEEP:
    case CMD_PIN:
        rill__sched_sleep_cmd(sch, c);
        break;
    case CMD_ASK:
    case CMD_TURN:
    case CMD_STANDING:
    case CMD_SPEC:
        rill__sched_submit(sch, c);
        break;
    case CMD_CANCEL:
        rill__sched_cancel(sch, c);
        break;
    case CMD_UNREGISTER: {
        req_t *r = rill__sched_find_req(sch, c->u.cancel.rid);
        if (r == NULL || r->kind != REQ_STANDING) {
            c->err = RILL_ENOTFOUND;
        } else {
            rill__sched_drop_standing(sch, r);
        }
        break;
    }
    case CMD_COMMIT:
        rill__sched_commit(sch, c);
        break;
    case CMD_STATS:
        fill_stats(sch, c->u.stats.out);
        break;
    case CMD_MODEL_INFO:
        fill_model_info(sch, &sch->models[c->u.model_info.model], c->u.model_info.out);
        break;
    case CMD_ASR_ATTACH:
        if (c->u.asr.a->consumer != 0) { /* a consumer is awake (and stays: sleep.c) */
            rill_err_t err;
            (void)rill__sched_use(sch, c, c->u.asr.a->consumer, &err);
        }
        rill__sched_asr_cmd(sch, c);
        break;
    case CMD_ASR_DETACH:
    case CMD_ASR_STATS:
        rill__sched_asr_cmd(sch, c);
        break;
    }
    if (c->blocking) {
        rill__sched_finished(sch, c);
    }
}

/* Marks the carried-out blocking commands done (under mu) and wakes their callers. */
static void release_finished(rill_sched_t *sch) {
    if (sch->finished == NULL) {
        return;
    }
    for (cmd_t *c = sch->finished, *nx; c != NULL; c = nx) {
        nx = c->wait_next;
        c->done = true; /* the caller's stack frame: not touched after this */
    }
    sch->finished = NULL;
    pthread_cond_broadcast(&sch->done);
}

/* Ends everything at shutdown: requests, sessions, templates and the creations they hold. */
static void teardown(rill_sched_t *sch) {
    while (sch->reqs != NULL) {
        req_t *r = sch->reqs;
        if (r->kind == REQ_STANDING) {
            rill__sched_drop_standing(sch, r);
        } else {
            rill__sched_finish(sch, r, RILL_ECANCELED, "scheduler stopped", false);
        }
    }
    rill__sched_speech_free(sch);
    while (sch->sessions != NULL) {
        rill__sched_close_sess(sch, sch->sessions);
    }
    while (sch->sleeping != NULL) {
        rill__sched_close_sess(sch, sch->sleeping);
    }
    rill__sched_templates_free(sch);
}

void *rill__sched_engine(void *arg) {
    rill_sched_t *sch = arg;
    pthread_mutex_lock(&sch->mu);
    for (;;) {
        cmd_t *list = sch->head;
        sch->head = sch->tail = NULL;
        sch->asr_kick = false; /* the speech step below sees what was fed */
        bool stop = sch->stop;
        pthread_mutex_unlock(&sch->mu);
        if (list != NULL) {
            rill__sched_unstick(sch);
        }
        for (cmd_t *c = list, *nx; c != NULL; c = nx) {
            nx = c->next;
            bool blocking = c->blocking;
            run_cmd(sch, c);
            if (!blocking) {
                rill__sched_cmd_free(c);
            }
        }
        if (sch->finished != NULL) { /* answer the callers now, not after the next step */
            pthread_mutex_lock(&sch->mu);
            release_finished(sch);
            pthread_mutex_unlock(&sch->mu);
        }
        bool worked = !stop && rill__sched_step(sch);
        /* at most one recognizer step after the passes (rill_scheduler.h "speech
         * recognizers"): a question waits about one encode for it */
        worked = (!stop && rill__sched_speech_step(sch)) || worked;
        int64_t sleep_due = stop ? 0 : rill__sched_sleep_idle(sch); /* sleep.c */
        pthread_mutex_lock(&sch->mu);
        release_finished(sch);
        if (stop) {
            break;
        }
        if (!worked && sch->head == NULL && !sch->stop && !sch->asr_kick) {
            int64_t t0 = rill__sched_now();
            if (sch->wake_at == 0) { /* nothing to do until a command (or a session's sleep) */
                sch->idle = true;
                pthread_cond_broadcast(&sch->done);
                struct timespec dl = { .tv_sec = (time_t)(sleep_due / 1000000000),
                                       .tv_nsec = (long)(sleep_due % 1000000000) };
                while (sch->head == NULL && !sch->stop && !sch->asr_kick &&
                       (sleep_due == 0 ? pthread_cond_wait(&sch->wake, &sch->mu)
                                       : pthread_cond_timedwait(&sch->wake, &sch->mu, &dl)) == 0) {
                }
                sch->idle = false;
            } else { /* a refresh the standing budget holds back: not idle, but asleep */
                int64_t at = sleep_due != 0 && sleep_due < sch->wake_at ? sleep_due : sch->wake_at;
                struct timespec dl = { .tv_sec = (time_t)(at / 1000000000),
                                       .tv_nsec = (long)(at % 1000000000) };
                while (sch->head == NULL && !sch->stop && !sch->asr_kick &&
                       pthread_cond_timedwait(&sch->wake, &sch->mu, &dl) == 0) {
                }
            }
            sch->st.idle_ns += rill__sched_now() - t0;
        }
    }
    pthread_mutex_unlock(&sch->mu);
    teardown(sch);
    pthread_mutex_lock(&sch->mu);
    release_finished(sch);
    pthread_mutex_unlock(&sch->mu);
    return NULL;
}
