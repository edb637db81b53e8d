/*
 * admission.c - the scheduler's sessions: cell-budget admission, shared-prompt templates, and
 * creating, restoring and closing sessions (engine thread; contract: rill_scheduler.h).
 *
 * Admission reserves the pages a session's window can occupy when it is created and never
 * lets reservations exceed the pool less the overflow kept for forks, so a session's own data
 * always fits and exhaustion can only ever fail forks. A creation with a system prompt finds
 * or starts the template for (prompt, window policy): the template's session evaluates the
 * prompt at INGEST class, the creation waits on the template's list (its reservation already
 * held) and becomes a fork of it once the prompt is evaluated (rill__sched_templates_ready
 * after each step). The template reserves its own pages and lives while a session made from
 * it (or a waiting creation) does. Reservations count awake sessions only: when a creation or a
 * restore does not fit, least recently used sessions sleep first (sleep.c), and each session
 * remembers the files that rebuild it (its log and the snapshot the log continues) for the
 * log tier of sleeping.
 */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "sched_internal.h"

sess_t *rill__sched_find_sess(rill_sched_t *sch, rill_sched_sid_t id) {
    for (sess_t *x = sch->sessions; x != NULL; x = x->next) {
        if (x->id == id) {
            return x;
        }
    }
    return NULL;
}

int32_t rill__sched_reservation(const model_t *m, int32_t sinks, int32_t window) {
    int32_t P = m->P;
    if (window <= 0) {
        return rill__sched_ceil_div(m->n_ctx, P);
    }
    return rill__sched_ceil_div(sinks, P) + rill__sched_ceil_div(window, P);
}

static int32_t budget(const model_t *m) {
    return m->n_pages - m->overflow;
}

static void tmpl_release(rill_sched_t *sch, tmpl_t *t) {
    if (--t->refs > 0 || t->waiting != NULL) {
        return;
    }
    for (tmpl_t **pp = &sch->templates; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    t->m->reserved -= t->reserved;
    rill_session_destroy(&t->s);
    rill_free(t->prompt);
    rill_free(t);
}

void rill__sched_close_sess(rill_sched_t *sch, sess_t *x) {
    for (req_t *r = sch->reqs, *nx; r != NULL; r = nx) {
        nx = r->next;
        if (r->sess == x) {
            rill__sched_finish(sch, r, RILL_ECANCELED, "session closed", false);
        }
    }
    for (sess_t **pp = &sch->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    }
    if (!x->asleep) {
        x->m->reserved -= x->reserved;
    }
    x->m->n_sessions--;
    sch->n_sessions--;
    rill_session_destroy(&x->s);
    rill__sched_sleep_forget(sch, x); /* its sleep file, off the sleeping list, its paths */
    if (x->tmpl != NULL) {
        tmpl_release(sch, x->tmpl);
    }
    rill_free(x);
}

/* How a session is rebuilt from its files (the log tier of sleeping), and whether it is pinned.
 */
typedef struct durable {
    const char *log, *base;
    rill_session_fsync_t fsync;
    bool pin;
} durable_t;

/* Registers s as a new session of m (admission already checked). */
static rill_err_t add_sess(rill_sched_t *sch, model_t *m, rill_session_t *s, int32_t reserved,
                           tmpl_t *t, rill_sched_end_watch_t *watch, const durable_t *d,
                           rill_sched_sid_t *out) {
    sess_t *x = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *x);
    if (x == NULL) {
        return RILL_ENOMEM;
    }
    if (!rill__sched_set_paths(x, d->log, d->base, d->fsync)) {
        rill_free(x);
        return RILL_ENOMEM;
    }
    x->pinned = d->pin;
    x->tier = -1;
    rill__sched_touch(sch, x);
    x->id = ++sch->next_sid;
    x->m = m;
    x->s = s;
    x->reserved = reserved;
    x->tmpl = t;
    x->end_watch = watch;
    sess_t **pp = &sch->sessions;
    while (*pp != NULL) {
        pp = &(*pp)->next;
    }
    *pp = x;
    m->reserved += reserved;
    m->n_sessions++;
    sch->n_sessions++;
    if (t != NULL) {
        t->refs++;
    }
    *out = x->id;
    return RILL_OK;
}

static rill_err_t admit(rill_sched_t *sch, model_t *m, int32_t need, cmd_t *c) {
    if (sch->n_sessions >= sch->prm.max_sessions) {
        sch->st.admission_rejects++;
        rill__sched_msg(c, "%d sessions open (max_sessions)", sch->n_sessions);
        return RILL_EFULL;
    }
    if (m->reserved + need > budget(m) && !rill__sched_make_room(sch, m, need)) {
        sch->st.admission_rejects++;
        rill__sched_msg(c,
                        "KV budget of model %s: the session needs %d page(s) of %d positions, "
                        "%d of %d reservable pages are reserved (%d more held back for forks)",
                        m->name, need, m->P, m->reserved, budget(m), m->overflow);
        return RILL_EFULL;
    }
    return RILL_OK;
}

/* Opens the session's log (and the base snapshot of a shared-prompt session, whose path goes to
 * base; "" when there is none). */
static rill_err_t open_log(rill_session_t *s, const rill_sched_session_params_t *sp, cmd_t *c,
                           char *base, size_t base_cap) {
    base[0] = '\0';
    if (sp->log_path == NULL) {
        return RILL_OK;
    }
    rill_err_t err = rill_session_open_log(s, sp->log_path, sp->fsync);
    if (err != RILL_OK) {
        rill__sched_msg(c, "log %s: %s", sp->log_path, rill_last_error(err));
        return err;
    }
    if (rill_session_seq(s) > 0) { /* started from a shared prompt: the log cannot rebuild it */
        char path[4096];
        if (snprintf(path, sizeof path, "%s.base", sp->log_path) >= (int)sizeof path) {
            rill__sched_msg(c, "log path too long");
            return RILL_EINVAL;
        }
        err = rill_session_snapshot(s, path);
        if (err != RILL_OK) {
            rill__sched_msg(c, "base snapshot %s: %s", path, rill_last_error(err));
        } else {
            snprintf(base, base_cap, "%s", path);
        }
    }
    return err;
}

/* Finishes a creation from template t (its prompt is evaluated). */
static void create_from(rill_sched_t *sch, tmpl_t *t, cmd_t *c) {
    rill_session_t *s = NULL;
    rill_err_t err = rill_session_fork(t->s, &s);
    if (err != RILL_OK) {
        rill__sched_msg(c, "fork of the shared prompt: %s", rill_last_error(err));
    }
    char base[4096];
    if (err == RILL_OK) {
        err = open_log(s, c->u.create.sp, c, base, sizeof base);
    }
    if (err == RILL_OK) {
        const rill_sched_session_params_t *sp = c->u.create.sp;
        durable_t d = { sp->log_path, base[0] != '\0' ? base : NULL, sp->fsync, sp->pin };
        err = add_sess(sch, t->m, s, rill__sched_reservation(t->m, t->sinks, t->window), t,
                       sp->end_watch, &d, c->u.create.out);
    }
    /* the reservation was taken when it waited; add_sess counted it again */
    t->m->reserved -= rill__sched_reservation(t->m, t->sinks, t->window);
    if (err != RILL_OK) {
        rill_session_destroy(&s);
    } else {
        int32_t n_pg = 0;
        (void)rill_session_pages(s, &n_pg);
        sch->st.prefix_shared_pages += n_pg;
    }
    c->err = err;
}

/* The template of this prompt and policy, started when there is none. NULL with c->err set
 * when it cannot be. */
static tmpl_t *find_template(rill_sched_t *sch, model_t *m, const rill_session_params_t *pp,
                             int32_t need, cmd_t *c) {
    for (tmpl_t *t = sch->templates; t != NULL; t = t->next) {
        if (t->m == m && t->n_prompt == pp->n_prompt && t->sinks == pp->n_sink &&
            t->window == pp->window && t->evict == pp->evict_pages &&
            memcmp(t->prompt, pp->prompt, (size_t)pp->n_prompt * sizeof *pp->prompt) == 0) {
            return t;
        }
    }
    int32_t tneed = rill__sched_ceil_div(pp->n_prompt, m->P);
    if (m->reserved + need + tneed > budget(m) && !rill__sched_make_room(sch, m, need + tneed)) {
        c->err = admit(sch, m, need + tneed, c);
        return NULL;
    }
    tmpl_t *t = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *t);
    int32_t *prompt = rill_malloc(RILL_MEM_SCHEDULER, (size_t)pp->n_prompt * sizeof *prompt);
    rill_session_params_t np = *pp;
    np.prompt = NULL;
    np.n_prompt = 0;
    rill_session_t *s = NULL;
    rill_err_t err = t != NULL && prompt != NULL ? RILL_OK : RILL_ENOMEM;
    if (err == RILL_OK) {
        err = rill_session_new(m->pool, &np, &s);
        if (err != RILL_OK) {
            rill__sched_msg(c, "system prompt's session: %s", rill_last_error(err));
        }
    }
    if (err == RILL_OK) {
        err = rill_session_feed(s, pp->prompt, pp->n_prompt);
        if (err != RILL_OK) {
            rill__sched_msg(c, "system prompt: %s", rill_last_error(err));
        }
    }
    if (err != RILL_OK) {
        rill_session_destroy(&s);
        rill_free(prompt);
        rill_free(t);
        c->err = err;
        return NULL;
    }
    memcpy(prompt, pp->prompt, (size_t)pp->n_prompt * sizeof *prompt);
    *t = (tmpl_t){ .next = sch->templates,
                   .m = m,
                   .prompt = prompt,
                   .n_prompt = pp->n_prompt,
                   .sinks = pp->n_sink,
                   .window = pp->window,
                   .evict = pp->evict_pages,
                   .s = s,
                   .reserved = tneed };
    sch->templates = t;
    m->reserved += tneed;
    return t;
}

bool rill__sched_create(rill_sched_t *sch, cmd_t *c) {
    const rill_sched_session_params_t *sp = c->u.create.sp;
    const rill_session_params_t *pp = &sp->session;
    if (sp->model < 0 || sp->model >= sch->n_models) {
        rill__sched_msg(c, "no model %d (the scheduler has %d)", sp->model, sch->n_models);
        c->err = RILL_EINVAL;
        return true;
    }
    if (pp->n_sink < 0 || pp->window < 0 || pp->n_prompt < 0 ||
        (pp->n_prompt > 0 && pp->prompt == NULL)) {
        rill__sched_msg(c, "invalid session parameters");
        c->err = RILL_EINVAL;
        return true;
    }
    model_t *m = &sch->models[sp->model];
    const char *bad_watch =
        rill__sched_end_watch_check(sp->end_watch, rill_session_pool_n_vocab(m->pool));
    if (bad_watch != NULL) {
        rill__sched_msg(c, "%s", bad_watch);
        c->err = RILL_EINVAL;
        return true;
    }
    int32_t need = rill__sched_reservation(m, pp->n_sink, pp->window);
    if ((c->err = admit(sch, m, need, c)) != RILL_OK) {
        return true;
    }
    if (pp->n_prompt == 0) {
        rill_session_t *s = NULL;
        c->err = rill_session_new(m->pool, pp, &s);
        if (c->err != RILL_OK) {
            rill__sched_msg(c, "%s", rill_last_error(c->err));
            return true;
        }
        char base[4096];
        c->err = open_log(s, sp, c, base, sizeof base);
        if (c->err == RILL_OK) {
            durable_t d = { sp->log_path, base[0] != '\0' ? base : NULL, sp->fsync, sp->pin };
            c->err = add_sess(sch, m, s, need, NULL, sp->end_watch, &d, c->u.create.out);
        }
        if (c->err != RILL_OK) {
            rill_session_destroy(&s);
        }
        return true;
    }
    tmpl_t *t = find_template(sch, m, pp, need, c);
    if (t == NULL) {
        return true;
    }
    m->reserved += need; /* held while it waits */
    if (rill_session_pending(t->s) == 0) {
        create_from(sch, t, c);
        return true;
    }
    c->wait_next = t->waiting;
    t->waiting = c;
    return false; /* answered when the template is ready */
}

void rill__sched_templates_ready(rill_sched_t *sch) {
    for (tmpl_t *t = sch->templates; t != NULL; t = t->next) {
        if (t->waiting != NULL && rill_session_pending(t->s) == 0) {
            for (cmd_t *c = t->waiting, *nx; c != NULL; c = nx) {
                nx = c->wait_next;
                create_from(sch, t, c);
                rill__sched_finished(sch, c);
            }
            t->waiting = NULL;
        }
    }
    for (tmpl_t *t = sch->templates, *nx; t != NULL; t = nx) {
        nx = t->next;
        if (t->refs == 0 && t->waiting == NULL) { /* every waiting creation failed */
            t->refs = 1;
            tmpl_release(sch, t);
        }
    }
}

void rill__sched_templates_free(rill_sched_t *sch) {
    while (sch->templates != NULL) {
        tmpl_t *t = sch->templates;
        for (cmd_t *c = t->waiting, *nx; c != NULL; c = nx) {
            nx = c->wait_next;
            c->err = RILL_ECLOSED;
            rill__sched_finished(sch, c);
        }
        t->refs = 1;
        t->waiting = NULL;
        tmpl_release(sch, t);
    }
}

void rill__sched_restore(rill_sched_t *sch, cmd_t *c) {
    if (c->u.restore.model < 0 || c->u.restore.model >= sch->n_models) {
        rill__sched_msg(c, "no model %d (the scheduler has %d)", c->u.restore.model, sch->n_models);
        c->err = RILL_EINVAL;
        return;
    }
    model_t *m = &sch->models[c->u.restore.model];
    rill_session_t *s = NULL;
    do {
        c->err = rill_session_restore(m->pool, c->u.restore.snapshot, c->u.restore.log,
                                      c->u.restore.fsync, &s);
        /* the pages are reserved by awake sessions: sleepers free them */
    } while (c->err == RILL_EFULL && rill__sched_sleep_one(sch, m));
    if (c->err != RILL_OK) {
        rill__sched_msg(c, "%s", rill_last_error(c->err));
        return;
    }
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    int32_t need = rill__sched_reservation(m, st.n_sink_cfg, st.window_cfg);
    c->err = admit(sch, m, need, c);
    if (c->err == RILL_OK) {
        durable_t d = { c->u.restore.log, c->u.restore.snapshot, c->u.restore.fsync, false };
        c->err = add_sess(sch, m, s, need, NULL, NULL, &d, c->u.restore.out);
    }
    if (c->err != RILL_OK) {
        rill_session_destroy(&s);
    }
}
