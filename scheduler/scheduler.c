/*
 * scheduler.c - the engine thread and its step loop (contract: rill_scheduler.h).
 *
 * Design. Callers never touch sessions: every call becomes a command on one mutex-protected
 * queue. The engine thread takes the whole queue between steps, carries the commands out
 * (blocking callers wait on a condition variable for their command's `done`), then builds one
 * step: for each class from DECODE down, the sessions and forks with work of that class, round
 * robin from a rotating start so no session starves within a class, until the step's token
 * cap (adaptive, see the header) or RILL_SESSION_STEP_MAX_LOGITS rows of logits are used. One
 * rill_session_step() evaluates it; then every item that asked for logits picks its next token
 * (arg-max) and moves on. All engine state below the queue belongs to the engine thread alone.
 *
 * A request (question, turn, standing query, speculation) runs on a fork of its session: it
 * waits while the session has queued data (the session is boosted to PREFILL class), forks,
 * feeds its tokens onto the fork (PREFILL phase: the fork's queue), decodes (each picked token
 * is fed back and evaluated in the next step), and ends by delivering its answer and dropping
 * the fork - or, for turns and speculation, by evaluating the last token and letting the
 * session adopt the fork (rill_session_adopt).
 *
 * Memory: commands of blocking calls live on the caller's stack; asynchronous ones (ask,
 * cancel, commit, async ingest) and requests are allocated per request (never per token or
 * step). Answer buffers are sized n_max at submission.
 *
 * Rejected: one lock per session with callers stepping sessions themselves (a step must see
 * every session, and the pool's free list is shared); a lock-free queue (commands are rare
 * next to steps; a mutex is simpler to get right and to check under TSan).
 */
#include "rill_scheduler.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rill_alloc.h"
#include "rill_log.h"

typedef enum cmd_kind {
    CMD_CREATE,
    CMD_RESTORE,
    CMD_CLOSE,
    CMD_INFO,
    CMD_SNAPSHOT,
    CMD_LIST,
    CMD_INGEST,
    CMD_INGEST_TEXT,
    CMD_ASK,
    CMD_TURN,
    CMD_STANDING,
    CMD_SPEC,
    CMD_CANCEL,
    CMD_UNREGISTER,
    CMD_STANDING_LIST,
    CMD_COMMIT,
    CMD_STATS,
    CMD_TOKENS
} cmd_kind_t;

typedef struct cmd {
    struct cmd *next;
    cmd_kind_t kind;
    bool blocking, done;
    rill_sched_sid_t sid;
    rill_sched_rid_t rid;
    /* inputs (blocking: borrowed from the caller; async: owned) */
    const rill_sched_session_params_t *sp;
    const char *path, *path2;
    rill_session_fsync_t fsync;
    const void *data;
    size_t len;
    bool flush;
    int32_t *toks; /* async: owned copy (question, guess, commit input, ingested tokens) */
    int32_t n_toks;
    rill_sched_ack_fn on_ack; /* async ingest */
    void *ack_user;
    rill_sched_ask_t ask;
    /* outputs */
    rill_err_t err;
    char *msg;
    size_t msglen;
    void *out;
    int64_t cap, ret;
    struct cmd *wait_next; /* on a template's waiting list */
} cmd_t;

typedef struct tmpl {
    struct tmpl *next;
    int32_t *prompt;
    int32_t n_prompt;
    int32_t sinks, window, evict;
    rill_session_t *s;
    int32_t refs;     /* sessions made from it */
    int32_t reserved; /* pages it reserves */
    cmd_t *waiting;   /* creations waiting for its prompt */
} tmpl_t;

typedef struct sess {
    struct sess *next;
    rill_sched_sid_t id;
    rill_session_t *s;
    int32_t reserved;
    tmpl_t *tmpl;
    int32_t n_waiting; /* requests waiting for its queued data */
} sess_t;

typedef enum req_kind { REQ_ASK, REQ_TURN, REQ_STANDING, REQ_SPEC } req_kind_t;

typedef enum phase {
    PH_WAIT,    /* waits for the session's queued data */
    PH_PREFILL, /* the fork's queue holds its input */
    PH_DECODE,  /* the fork's queue holds the last picked token */
    PH_LAST,    /* turn / committed speculation: the last token is being evaluated */
    PH_HELD,    /* speculation: reply complete, waiting for the commit */
    PH_IDLE     /* standing query between refreshes */
} phase_t;

typedef struct req {
    struct req *next;
    rill_sched_rid_t id;
    req_kind_t kind;
    sess_t *sess;
    rill_sched_ask_t ask;
    int32_t *question; /* owned: question, turn input, or the speculation's guess */
    int32_t n_question;
    rill_session_t *fork;
    phase_t phase;
    int32_t *out; /* [n_max] */
    int32_t n_out;
    int64_t version;
    int32_t n_context, base_n;
    int64_t submit_ns, first_ns, compute_ns;
    int64_t backlog, ttft_compute_ns; /* rill_sched_answer_t's */
    bool committed;                   /* speculation: the real input arrived */
    int64_t computed; /* speculation: tokens evaluated on the branch while speculative */
    int64_t target;   /* stream position (tokens) the request must see: the session's tokens
                         acknowledged when it was asked; data that came later is not waited for */
    /* standing queries */
    bool stale;
    int64_t retry_step; /* no refresh before this step (after a reclaim) */
    int32_t *cache;     /* [n_max] */
    int32_t n_cache;
    int64_t cache_version, cache_done_ns, cache_compute_ns;
    int64_t refreshes, abandoned, hits;
    int32_t step_tokens; /* tokens of it in the current step */
} req_t;

struct rill_sched {
    rill_session_pool_t *pool;
    rill_sched_params_t prm;
    int32_t P, n_pages, max_batch, n_ctx;
    const rill_tokenizer_t *tok;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    cmd_t *head, *tail; /* command queue (mu) */
    bool stop;          /* (mu) */
    bool idle;          /* (mu) engine asleep with nothing to do */
    bool preemptible;   /* (mu) the step running carries no question work */
    atomic_int preempt; /* set to stop that step's forward pass (rill_forward_set_cancel) */
    _Atomic uint64_t next_rid;
    /* engine-thread state */
    sess_t *sessions;
    tmpl_t *templates;
    req_t *reqs;
    uint64_t next_sid;
    int32_t n_sessions, reserved;
    uint64_t rr; /* round-robin rotation */
    /* step time model t = a + b * tokens, fitted by least squares with exponential forgetting
     * (weights decay by FORGET per step): sums of w, w*T, w*t, w*T^2, w*T*t */
    double fw, ft, fy, ftt, fty;
    double ns_per_tok, ns_fixed; /* b and a */
    rill_sched_stats_t st;
    bool step_questions; /* the step built last carries question work */
    rill_session_step_t *items;
    req_t **item_req;
    sess_t **item_sess;
    rill_sched_class_t *item_class;
    cmd_t *finished; /* blocking commands carried out, to be marked done under mu */
};

static int64_t now_ns(void) {
    return (int64_t)rill_now_ns();
}

static void set_msg(cmd_t *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void set_msg(cmd_t *c, const char *fmt, ...) {
    if (c->msg == NULL || c->msglen == 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msglen, fmt, ap);
    va_end(ap);
}

const char *rill_sched_class_name(rill_sched_class_t c) {
    static const char *const names[] = { "decode", "prefill", "ingest", "standing", "spec" };
    return (unsigned)c < (unsigned)RILL_SCHED_N_CLASSES ? names[c] : "?";
}

rill_sched_params_t rill_sched_default_params(void) {
    return (rill_sched_params_t){ .step_tokens = 0,
                                  .min_chunk = 16,
                                  .max_delay_ns = 50 * 1000 * 1000,
                                  .overflow_pages = -1,
                                  .max_sessions = 1024 };
}

rill_sched_session_params_t rill_sched_session_default_params(void) {
    return (rill_sched_session_params_t){ .session = rill_session_default_params(),
                                          .log_path = NULL,
                                          .fsync = RILL_SESSION_FSYNC_EVERYSEC };
}

/* ---- lookups and bookkeeping (engine thread) ------------------------------------------------ */

static sess_t *find_sess(rill_sched_t *sch, rill_sched_sid_t id) {
    for (sess_t *x = sch->sessions; x != NULL; x = x->next) {
        if (x->id == id) {
            return x;
        }
    }
    return NULL;
}

static req_t *find_req(rill_sched_t *sch, rill_sched_rid_t id) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->id == id) {
            return r;
        }
    }
    return NULL;
}

static int32_t ceil_div(int64_t a, int32_t b) {
    return (int32_t)((a + b - 1) / b);
}

/* Pages a session with this window policy can occupy (as rill_session_new rounds it). */
static int32_t reservation(const rill_sched_t *sch, int32_t sinks, int32_t window) {
    int32_t P = sch->P;
    if (window <= 0) {
        return ceil_div(sch->n_ctx, P);
    }
    return ceil_div(sinks, P) + ceil_div(window, P);
}

static int32_t budget(const rill_sched_t *sch) {
    return sch->n_pages - sch->prm.overflow_pages;
}

static rill_sched_class_t req_class(const req_t *r) {
    switch (r->kind) {
    case REQ_STANDING:
        return RILL_SCHED_STANDING;
    case REQ_SPEC:
        if (!r->committed) {
            return RILL_SCHED_SPEC;
        }
        /* fall through */
    default:
        return r->phase == PH_PREFILL ? RILL_SCHED_PREFILL : RILL_SCHED_DECODE;
    }
}

static void drop_fork(req_t *r) {
    if (r->fork != NULL) {
        rill_session_destroy(&r->fork);
    }
}

static void unlink_req(rill_sched_t *sch, req_t *r) {
    for (req_t **pp = &sch->reqs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    if (r->phase == PH_WAIT && r->sess != NULL) {
        r->sess->n_waiting--;
    }
}

static void free_req(req_t *r) {
    drop_fork(r);
    rill_free(r->question);
    rill_free(r->out);
    rill_free(r->cache);
    rill_free(r);
}

/* Delivers the end of a request (on_done) and frees it. */
static void finish(rill_sched_t *sch, req_t *r, rill_err_t status, const char *message,
                   bool adopted) {
    unlink_req(sch, r);
    int64_t t = now_ns();
    rill_sched_answer_t a = {
        .status = status,
        .message = message != NULL ? message : "",
        .tokens = r->out,
        .n_tokens = status == RILL_OK ? r->n_out : 0,
        .version = r->version,
        .n_context = r->n_context,
        .adopted = adopted,
        .submit_ns = r->submit_ns,
        .ttft_ns = r->first_ns > 0 ? r->first_ns - r->submit_ns : 0,
        .total_ns = t - r->submit_ns,
        .compute_ns = r->compute_ns,
        .done_ns = t,
        .backlog = r->backlog,
        .ttft_compute_ns = r->ttft_compute_ns,
    };
    if (status == RILL_OK) {
        sch->st.questions += r->kind != REQ_SPEC || r->committed;
    } else if (status != RILL_ECANCELED) {
        sch->st.questions_failed++;
    }
    if (r->kind == REQ_SPEC) {
        sch->st.spec_tokens_wasted += status == RILL_OK ? 0 : r->computed;
    }
    if (r->ask.on_done != NULL) {
        r->ask.on_done(r->ask.user, r->id, &a);
    }
    free_req(r);
}

/* Ends a refresh of a standing query without an answer (it stays registered). */
static void abandon(rill_sched_t *sch, req_t *r) {
    drop_fork(r);
    if (r->phase == PH_WAIT && r->sess != NULL) {
        r->sess->n_waiting--;
    }
    r->phase = PH_IDLE;
    r->stale = true;
    r->abandoned++;
    sch->st.standing_abandoned++;
}

/* The session's data changed: standing answers are stale; refreshes still prefilling go. */
static void data_changed(rill_sched_t *sch, sess_t *x) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->kind == REQ_STANDING) {
            r->stale = true;
            if (r->phase == PH_PREFILL) {
                abandon(sch, r);
            }
        }
    }
}

/* ---- sessions ------------------------------------------------------------------------------- */

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
    sch->reserved -= t->reserved;
    rill_session_destroy(&t->s);
    rill_free(t->prompt);
    rill_free(t);
}

static void close_sess(rill_sched_t *sch, sess_t *x) {
    for (req_t *r = sch->reqs, *nx; r != NULL; r = nx) {
        nx = r->next;
        if (r->sess == x) {
            finish(sch, r, RILL_ECANCELED, "session closed", false);
        }
    }
    for (sess_t **pp = &sch->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    }
    sch->reserved -= x->reserved;
    sch->n_sessions--;
    rill_session_destroy(&x->s);
    if (x->tmpl != NULL) {
        tmpl_release(sch, x->tmpl);
    }
    rill_free(x);
}

/* Registers s as a new session (admission already checked). */
static rill_err_t add_sess(rill_sched_t *sch, rill_session_t *s, int32_t reserved, tmpl_t *t,
                           rill_sched_sid_t *out) {
    sess_t *x = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *x);
    if (x == NULL) {
        return RILL_ENOMEM;
    }
    x->id = ++sch->next_sid;
    x->s = s;
    x->reserved = reserved;
    x->tmpl = t;
    sess_t **pp = &sch->sessions;
    while (*pp != NULL) {
        pp = &(*pp)->next;
    }
    *pp = x;
    sch->reserved += reserved;
    sch->n_sessions++;
    if (t != NULL) {
        t->refs++;
    }
    *out = x->id;
    return RILL_OK;
}

static rill_err_t admit(rill_sched_t *sch, int32_t need, cmd_t *c) {
    if (sch->n_sessions >= sch->prm.max_sessions) {
        sch->st.admission_rejects++;
        set_msg(c, "%d sessions open (max_sessions)", sch->n_sessions);
        return RILL_EFULL;
    }
    if (sch->reserved + need > budget(sch)) {
        sch->st.admission_rejects++;
        set_msg(c,
                "KV budget: the session needs %d page(s) of %d positions, %d of %d reservable "
                "pages are reserved (%d more held back for forks)",
                need, sch->P, sch->reserved, budget(sch), sch->prm.overflow_pages);
        return RILL_EFULL;
    }
    return RILL_OK;
}

/* Opens the session's log (and the base snapshot of a shared-prompt session). */
static rill_err_t open_log(rill_session_t *s, const rill_sched_session_params_t *sp, cmd_t *c) {
    if (sp->log_path == NULL) {
        return RILL_OK;
    }
    rill_err_t err = rill_session_open_log(s, sp->log_path, sp->fsync);
    if (err != RILL_OK) {
        set_msg(c, "log %s: %s", sp->log_path, rill_session_last_error(s));
        return err;
    }
    if (rill_session_seq(s) > 0) { /* started from a shared prompt: the log cannot rebuild it */
        char path[4096];
        if (snprintf(path, sizeof path, "%s.base", sp->log_path) >= (int)sizeof path) {
            set_msg(c, "log path too long");
            return RILL_EINVAL;
        }
        err = rill_session_snapshot(s, path);
        if (err != RILL_OK) {
            set_msg(c, "base snapshot %s: %s", path, rill_session_last_error(s));
        }
    }
    return err;
}

/* Finishes a creation from template t (its prompt is evaluated). */
static void create_from(rill_sched_t *sch, tmpl_t *t, cmd_t *c) {
    rill_session_t *s = NULL;
    rill_err_t err = rill_session_fork(t->s, &s);
    if (err != RILL_OK) {
        set_msg(c, "fork of the shared prompt: %s", rill_session_last_error(t->s));
    }
    if (err == RILL_OK) {
        err = open_log(s, c->sp, c);
    }
    if (err == RILL_OK) {
        err = add_sess(sch, s, reservation(sch, t->sinks, t->window), t, c->out);
    }
    if (err != RILL_OK) {
        rill_session_destroy(&s);
        sch->reserved -= reservation(sch, t->sinks, t->window); /* taken when it waited */
    } else {
        sch->reserved -= reservation(sch, t->sinks, t->window); /* add_sess counted it again */
        int32_t n_pg = 0;
        (void)rill_session_pages(s, &n_pg);
        sch->st.prefix_shared_pages += n_pg;
    }
    c->err = err;
}

/* Creates a session; false when the creation waits for a shared prompt (answered later). */
static bool do_create(rill_sched_t *sch, cmd_t *c) {
    const rill_sched_session_params_t *sp = c->sp;
    const rill_session_params_t *pp = &sp->session;
    if (pp->n_sink < 0 || pp->window < 0 || pp->n_prompt < 0 ||
        (pp->n_prompt > 0 && pp->prompt == NULL)) {
        set_msg(c, "invalid session parameters");
        c->err = RILL_EINVAL;
        return true;
    }
    int32_t need = reservation(sch, pp->n_sink, pp->window);
    if ((c->err = admit(sch, need, c)) != RILL_OK) {
        return true;
    }
    if (pp->n_prompt == 0) {
        rill_session_t *s = NULL;
        c->err = rill_session_new(sch->pool, pp, &s);
        if (c->err != RILL_OK) {
            set_msg(c, "%s", rill_strerror(c->err));
            return true;
        }
        c->err = open_log(s, sp, c);
        if (c->err == RILL_OK) {
            c->err = add_sess(sch, s, need, NULL, c->out);
        }
        if (c->err != RILL_OK) {
            rill_session_destroy(&s);
        }
        return true;
    }
    tmpl_t *t = sch->templates;
    for (; t != NULL; t = t->next) {
        if (t->n_prompt == pp->n_prompt && t->sinks == pp->n_sink && t->window == pp->window &&
            t->evict == pp->evict_pages &&
            memcmp(t->prompt, pp->prompt, (size_t)pp->n_prompt * sizeof *pp->prompt) == 0) {
            break;
        }
    }
    if (t == NULL) {
        int32_t tneed = ceil_div(pp->n_prompt, sch->P);
        if (sch->reserved + need + tneed > budget(sch)) {
            c->err = admit(sch, need + tneed, c);
            return true;
        }
        t = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *t);
        int32_t *prompt = rill_malloc(RILL_MEM_SCHEDULER, (size_t)pp->n_prompt * sizeof *prompt);
        rill_session_params_t np = *pp;
        np.prompt = NULL;
        np.n_prompt = 0;
        rill_session_t *s = NULL;
        rill_err_t err = t != NULL && prompt != NULL ? RILL_OK : RILL_ENOMEM;
        if (err == RILL_OK) {
            err = rill_session_new(sch->pool, &np, &s);
        }
        if (err == RILL_OK) {
            err = rill_session_feed(s, pp->prompt, pp->n_prompt);
            if (err != RILL_OK) {
                set_msg(c, "system prompt: %s", rill_session_last_error(s));
            }
        }
        if (err != RILL_OK) {
            rill_session_destroy(&s);
            rill_free(prompt);
            rill_free(t);
            c->err = err;
            return true;
        }
        memcpy(prompt, pp->prompt, (size_t)pp->n_prompt * sizeof *prompt);
        *t = (tmpl_t){ .next = sch->templates,
                       .prompt = prompt,
                       .n_prompt = pp->n_prompt,
                       .sinks = pp->n_sink,
                       .window = pp->window,
                       .evict = pp->evict_pages,
                       .s = s,
                       .reserved = tneed };
        sch->templates = t;
        sch->reserved += tneed;
    }
    sch->reserved += need; /* held while it waits */
    if (rill_session_pending(t->s) == 0) {
        create_from(sch, t, c);
        return true;
    }
    c->wait_next = t->waiting;
    t->waiting = c;
    return false; /* answered when the template is ready */
}

static void templates_ready(rill_sched_t *sch) {
    for (tmpl_t *t = sch->templates; t != NULL; t = t->next) {
        if (t->waiting != NULL && rill_session_pending(t->s) == 0) {
            for (cmd_t *c = t->waiting, *nx; c != NULL; c = nx) {
                nx = c->wait_next;
                create_from(sch, t, c);
                c->wait_next = sch->finished;
                sch->finished = c;
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

static void do_restore(rill_sched_t *sch, cmd_t *c) {
    rill_session_t *s = NULL;
    c->err = rill_session_restore(sch->pool, c->path, c->path2, c->fsync, &s, c->msg, c->msglen);
    if (c->err != RILL_OK) {
        return;
    }
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    int32_t need = reservation(sch, st.n_sink_cfg, st.window_cfg);
    c->err = admit(sch, need, c);
    if (c->err == RILL_OK) {
        c->err = add_sess(sch, s, need, NULL, c->out);
    }
    if (c->err != RILL_OK) {
        rill_session_destroy(&s);
    }
}

/* ---- requests ------------------------------------------------------------------------------- */

/* Tokens of the session's stream acknowledged so far: evaluated (evicted ones included) and
 * queued. */
static int64_t acknowledged(const sess_t *x) {
    rill_session_stats_t st;
    rill_session_stats(x->s, &st);
    return st.n_seen + st.n_pending;
}

/* True when every token a waiting request must see has been evaluated. */
static bool data_ready(const req_t *r) {
    rill_session_stats_t st;
    rill_session_stats(r->sess->s, &st);
    return st.n_seen >= r->target;
}

/* Moves a waiting request onto a fork of its session once the session's queue is empty. */
static void start_fork(rill_sched_t *sch, req_t *r) {
    rill_session_t *s = r->sess->s;
    /* questions and refreshes are dropped afterwards: they may use the whole context without
     * evicting (no copy of the window's shared pages); turns and speculation keep the window
     * because the session adopts them */
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    bool dropped = (r->kind == REQ_ASK || r->kind == REQ_STANDING) &&
                   (int64_t)st.n_resident + r->n_question + r->ask.n_max <= sch->n_ctx;
    rill_err_t err =
        dropped ? rill_session_fork_unwindowed(s, &r->fork) : rill_session_fork(s, &r->fork);
    if (err == RILL_OK && st.n_pending > 0) {
        /* data acknowledged after the request: not its business (the fork drops its copy) */
        err = rill_session_rollback(r->fork, st.n_resident);
    }
    if (err == RILL_OK) {
        err = rill_session_feed(r->fork, r->question, r->n_question);
    }
    r->sess->n_waiting--;
    if (err != RILL_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "fork: %s",
                 r->fork != NULL ? rill_session_last_error(r->fork) : rill_session_last_error(s));
        if (r->kind == REQ_STANDING) {
            r->phase = PH_IDLE;
            r->stale = true;
            drop_fork(r);
            r->retry_step = sch->st.steps + 64;
            return;
        }
        r->phase = PH_IDLE; /* not waiting any more (finish must not decrement) */
        finish(sch, r, err, msg, false);
        return;
    }
    r->version = rill_session_seq(s);
    r->n_context = st.n_resident;
    r->base_n = st.n_resident;
    r->phase = PH_PREFILL;
}

static rill_err_t new_req(rill_sched_t *sch, cmd_t *c, req_kind_t kind, req_t **out) {
    *out = NULL;
    sess_t *x = find_sess(sch, c->sid);
    req_t *r = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *r);
    int32_t *ans = rill_malloc(RILL_MEM_SCHEDULER, (size_t)c->ask.n_max * sizeof *ans);
    int32_t *cache = kind == REQ_STANDING
                         ? rill_malloc(RILL_MEM_SCHEDULER, (size_t)c->ask.n_max * sizeof *cache)
                         : NULL;
    if (r == NULL || ans == NULL || (kind == REQ_STANDING && cache == NULL) || x == NULL) {
        rill_free(r);
        rill_free(ans);
        rill_free(cache);
        return x == NULL ? RILL_ENOTFOUND : RILL_ENOMEM;
    }
    r->id = c->rid;
    r->kind = kind;
    r->sess = x;
    r->ask = c->ask;
    r->question = c->toks; /* taken over */
    r->n_question = c->n_toks;
    c->toks = NULL;
    r->out = ans;
    r->cache = cache;
    r->cache_version = -1;
    r->submit_ns = (int64_t)c->ret; /* the caller's clock at submission */
    r->phase = PH_WAIT;
    r->stale = true;
    r->target = acknowledged(x);
    r->backlog = rill_session_pending(x->s);
    x->n_waiting++;
    r->next = sch->reqs;
    sch->reqs = r;
    *out = r;
    return RILL_OK;
}

/* Cached answer of a standing query for this question, if fresh. */
static req_t *cached_answer(rill_sched_t *sch, sess_t *x, const cmd_t *c) {
    if (rill_session_pending(x->s) > 0) {
        return NULL;
    }
    int64_t v = rill_session_seq(x->s);
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->kind == REQ_STANDING && r->cache_version == v &&
            r->n_question == c->n_toks && r->ask.n_max == c->ask.n_max &&
            memcmp(r->question, c->toks, (size_t)c->n_toks * sizeof *c->toks) == 0) {
            return r;
        }
    }
    return NULL;
}

static void fail_async(cmd_t *c, rill_err_t err, const char *msg) {
    if (c->ask.on_done != NULL) {
        static const int32_t none[1];
        rill_sched_answer_t a = {
            .status = err, .message = msg, .tokens = none, .submit_ns = (int64_t)c->ret
        };
        a.done_ns = now_ns();
        a.total_ns = a.done_ns - a.submit_ns;
        c->ask.on_done(c->ask.user, c->rid, &a);
    }
}

static void do_ask(rill_sched_t *sch, cmd_t *c, req_kind_t kind) {
    sess_t *x = find_sess(sch, c->sid);
    if (x == NULL) {
        fail_async(c, RILL_ENOTFOUND, "no such session");
        return;
    }
    if (kind == REQ_ASK) {
        req_t *hit = cached_answer(sch, x, c);
        if (hit != NULL) {
            hit->hits++;
            sch->st.standing_cache_hits++;
            for (int32_t i = 0; i < hit->n_cache && c->ask.on_token != NULL; i++) {
                c->ask.on_token(c->ask.user, c->rid, hit->cache[i]);
            }
            int64_t t = now_ns();
            rill_sched_answer_t a = { .status = RILL_OK,
                                      .message = "",
                                      .tokens = hit->cache,
                                      .n_tokens = hit->n_cache,
                                      .version = hit->cache_version,
                                      .cached = true,
                                      .submit_ns = (int64_t)c->ret,
                                      .ttft_ns = t - (int64_t)c->ret,
                                      .total_ns = t - (int64_t)c->ret,
                                      .compute_ns = 0,
                                      .done_ns = hit->cache_done_ns };
            sch->st.questions++;
            if (c->ask.on_done != NULL) {
                c->ask.on_done(c->ask.user, c->rid, &a);
            }
            return;
        }
    }
    req_t *r = NULL;
    rill_err_t err = new_req(sch, c, kind, &r);
    if (err != RILL_OK) {
        fail_async(c, err, err == RILL_ENOMEM ? "out of memory" : "no such session");
        return;
    }
    if (kind == REQ_SPEC) {
        sch->st.spec_started++;
    }
    if (kind == REQ_STANDING) {
        /* registered: waits for its first refresh */
        r->sess->n_waiting--;
        r->phase = PH_IDLE;
    }
}

static void do_cancel(rill_sched_t *sch, cmd_t *c) {
    req_t *r = find_req(sch, c->rid);
    if (r == NULL) {
        return; /* finished already */
    }
    if (r->kind == REQ_STANDING) {
        unlink_req(sch, r);
        free_req(r);
        return;
    }
    finish(sch, r, RILL_ECANCELED, "cancelled", false);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) {
        i++;
    }
    return i;
}

static void do_commit(rill_sched_t *sch, cmd_t *c) {
    req_t *r = find_req(sch, c->rid);
    if (r == NULL || r->kind != REQ_SPEC || r->committed) {
        return; /* finished, reclaimed or committed: the caller learns it from on_done */
    }
    r->committed = true;
    sch->st.spec_committed++;
    int32_t L = common_prefix(r->question, r->n_question, c->toks, c->n_toks);
    bool hit = L == r->n_question && L == c->n_toks;
    bool stale = r->fork != NULL && rill_session_seq(r->sess->s) != r->version;
    if (hit && !stale) {
        sch->st.spec_hits++;
        sch->st.spec_tokens_kept += r->computed;
        r->computed = 0;
        for (int32_t i = 0; i < r->n_out && r->ask.on_token != NULL; i++) {
            r->ask.on_token(r->ask.user, r->id, r->out[i]);
        }
        if (r->phase == PH_HELD) {
            if (rill_session_feed(r->fork, &r->out[r->n_out - 1], 1) != RILL_OK) {
                finish(sch, r, RILL_ENOMEM, "feeding the last reply token failed", false);
                return;
            }
            r->phase = PH_LAST;
        }
        return;
    }
    /* the guess was wrong: keep what still matches */
    rill_free(r->question);
    r->question = c->toks;
    r->n_question = c->n_toks;
    c->toks = NULL;
    r->n_out = 0;
    r->first_ns = 0;
    if (r->fork == NULL) {
        return; /* still waiting for the session's data: it simply runs as a turn */
    }
    if (stale) {
        sch->st.spec_tokens_wasted += r->computed;
        r->computed = 0;
        drop_fork(r);
        r->phase = PH_WAIT;
        r->target = acknowledged(r->sess);
        r->sess->n_waiting++;
        return;
    }
    int32_t keep = L > 0 && L == r->n_question ? L - 1 : L; /* at least one token to evaluate */
    rill_err_t err = rill_session_rollback(r->fork, r->base_n + keep);
    rill_session_stats_t st;
    rill_session_stats(r->fork, &st);
    int64_t kept = st.n_resident - r->base_n;
    sch->st.spec_tokens_kept += kept;
    sch->st.spec_tokens_wasted += r->computed - kept;
    r->computed = 0;
    if (err == RILL_OK) {
        err = rill_session_feed(r->fork, r->question + keep, r->n_question - keep);
    }
    if (err != RILL_OK) {
        finish(sch, r, err, rill_session_last_error(r->fork), false);
        return;
    }
    r->phase = PH_PREFILL;
}

/* ---- commands ------------------------------------------------------------------------------- */

static void fill_info(rill_sched_t *sch, sess_t *x, rill_sched_session_info_t *o) {
    memset(o, 0, sizeof *o);
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

static int32_t step_cap(const rill_sched_t *sch);

static void fill_stats(rill_sched_t *sch, rill_sched_stats_t *o) {
    *o = sch->st;
    o->ns_per_token = sch->ns_per_tok;
    o->ns_per_step = sch->ns_fixed;
    o->chunk_cap = step_cap(sch);
    o->n_sessions = sch->n_sessions;
    o->reserved_pages = sch->reserved;
    o->overflow_pages = sch->prm.overflow_pages;
    o->free_pages = rill_session_pool_n_free(sch->pool);
    o->total_pages = sch->n_pages;
}

static void run_cmd(rill_sched_t *sch, cmd_t *c) {
    sess_t *x = NULL;
    c->err = RILL_OK;
    switch (c->kind) {
    case CMD_CREATE:
        if (!do_create(sch, c)) {
            return; /* create_from() finishes it */
        }
        break;
    case CMD_RESTORE:
        do_restore(sch, c);
        break;
    case CMD_CLOSE:
    case CMD_INFO:
    case CMD_SNAPSHOT:
    case CMD_INGEST:
    case CMD_INGEST_TEXT:
    case CMD_STANDING_LIST:
    case CMD_TOKENS:
        x = find_sess(sch, c->sid);
        if (x == NULL) {
            c->err = RILL_ENOTFOUND;
            c->ret = RILL_ENOTFOUND;
            set_msg(c, "no session %llu", (unsigned long long)c->sid);
            if (c->on_ack != NULL) {
                c->on_ack(c->ack_user, RILL_ENOTFOUND, "no such session");
            }
            break;
        }
        if (c->kind == CMD_CLOSE) {
            close_sess(sch, x);
        } else if (c->kind == CMD_TOKENS) {
            int32_t n = 0;
            const int32_t *t = rill_session_tokens(x->s, &n);
            if (c->cap > 0) {
                memcpy(c->out, t, (size_t)(n < c->cap ? n : c->cap) * sizeof *t);
            }
            c->ret = n;
        } else if (c->kind == CMD_INFO) {
            fill_info(sch, x, c->out);
        } else if (c->kind == CMD_SNAPSHOT) {
            c->err = rill_session_drain(x->s);
            if (c->err == RILL_OK) {
                c->err = rill_session_snapshot(x->s, c->path);
            }
            if (c->err != RILL_OK) {
                set_msg(c, "%s", rill_session_last_error(x->s));
            }
        } else if (c->kind == CMD_INGEST || c->kind == CMD_INGEST_TEXT) {
            int64_t v = rill_session_seq(x->s);
            if (c->len > 0 && rill_session_pending(x->s) > RILL_SCHED_MAX_QUEUED) {
                c->err = RILL_EFULL;
                set_msg(c, "%d tokens already queued on the session", rill_session_pending(x->s));
            } else if (c->kind == CMD_INGEST) {
                c->err = rill_session_feed(x->s, c->data, (int32_t)c->len);
            } else {
                c->err = rill_session_feed_text(x->s, c->data, c->len);
                if (c->err == RILL_OK && c->flush) {
                    c->err = rill_session_feed_flush(x->s);
                }
            }
            if (c->err != RILL_OK && c->err != RILL_EFULL) {
                set_msg(c, "%s", rill_session_last_error(x->s));
            }
            if (rill_session_seq(x->s) != v) {
                data_changed(sch, x);
            }
            c->ret = rill_session_seq(x->s);
            if (c->on_ack != NULL) {
                c->on_ack(c->ack_user, c->err,
                          c->err == RILL_OK      ? ""
                          : c->err == RILL_EFULL ? "too many tokens already queued on the session"
                                                 : rill_session_last_error(x->s));
            }
        } else {
            int64_t n = 0;
            rill_sched_standing_info_t *o = c->out;
            for (req_t *r = sch->reqs; r != NULL; r = r->next) {
                if (r->sess == x && r->kind == REQ_STANDING) {
                    n++;
                }
            }
            /* reqs are newest first: fill registration order from the back */
            int64_t i = n;
            for (req_t *r = sch->reqs; r != NULL; r = r->next) {
                if (r->sess == x && r->kind == REQ_STANDING && --i < c->cap) {
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
            c->ret = n;
        }
        break;
    case CMD_LIST: {
        int64_t n = 0;
        for (sess_t *y = sch->sessions; y != NULL; y = y->next, n++) {
            if (n < c->cap) {
                ((rill_sched_sid_t *)c->out)[n] = y->id;
            }
        }
        c->ret = n;
        break;
    }
    case CMD_ASK:
        do_ask(sch, c, REQ_ASK);
        break;
    case CMD_TURN:
        do_ask(sch, c, REQ_TURN);
        break;
    case CMD_STANDING:
        do_ask(sch, c, REQ_STANDING);
        break;
    case CMD_SPEC:
        do_ask(sch, c, REQ_SPEC);
        break;
    case CMD_CANCEL:
        do_cancel(sch, c);
        break;
    case CMD_UNREGISTER: {
        req_t *r = find_req(sch, c->rid);
        if (r == NULL || r->kind != REQ_STANDING) {
            c->err = RILL_ENOTFOUND;
        } else {
            unlink_req(sch, r);
            free_req(r);
        }
        break;
    }
    case CMD_COMMIT:
        do_commit(sch, c);
        break;
    case CMD_STATS:
        fill_stats(sch, c->out);
        break;
    }
    if (c->blocking) {
        c->wait_next = sch->finished;
        sch->finished = c;
    }
}

/* ---- the step ------------------------------------------------------------------------------- */

static bool is_question_cmd(const cmd_t *c) {
    return c->kind == CMD_ASK || c->kind == CMD_TURN;
}

typedef struct builder {
    int32_t n_items, tokens, cap, logits;
    bool questions; /* the step carries question work (decode, prefill, data a question awaits) */
} builder_t;

static bool room_for(const rill_sched_t *sch, const builder_t *b, bool logits) {
    return b->tokens < b->cap && b->n_items < sch->max_batch &&
           (!logits || b->logits < RILL_SESSION_STEP_MAX_LOGITS);
}

/* Adds up to want tokens of s; logits on the last queued token when `logits`. */
static void add_item(rill_sched_t *sch, builder_t *b, rill_session_t *s, req_t *r, sess_t *x,
                     rill_sched_class_t cls, bool want_logits) {
    int32_t room = rill_session_step_room(s);
    int32_t n = room < b->cap - b->tokens ? room : b->cap - b->tokens;
    if (n < 1) {
        return;
    }
    bool logits = want_logits && n == rill_session_pending(s);
    if (logits && b->logits >= RILL_SESSION_STEP_MAX_LOGITS) {
        if (n == 1) {
            return;
        }
        n--; /* the last token in a later step */
        logits = false;
    }
    int32_t i = b->n_items++;
    sch->items[i] = (rill_session_step_t){ .s = s, .n = n, .logits = logits };
    sch->item_req[i] = r;
    sch->item_sess[i] = x;
    sch->item_class[i] = cls;
    b->tokens += n;
    b->logits += logits;
    b->questions |= cls == RILL_SCHED_DECODE || cls == RILL_SCHED_PREFILL;
}

static bool req_runs(const req_t *r) {
    return r->fork != NULL &&
           (r->phase == PH_PREFILL || r->phase == PH_DECODE || r->phase == PH_LAST) &&
           rill_session_pending(r->fork) > 0;
}

#define FORGET 0.97

/* Adds a step of T tokens that took ns to the time model and refits it. */
static void learn(rill_sched_t *sch, int32_t T, int64_t ns) {
    double x = T, y = (double)ns;
    sch->fw = FORGET * sch->fw + 1;
    sch->ft = FORGET * sch->ft + x;
    sch->fy = FORGET * sch->fy + y;
    sch->ftt = FORGET * sch->ftt + x * x;
    sch->fty = FORGET * sch->fty + x * y;
    double mt = sch->ft / sch->fw, my = sch->fy / sch->fw;
    double var = sch->ftt / sch->fw - mt * mt, cov = sch->fty / sch->fw - mt * my;
    if (var > 1.0 && cov > 0) { /* steps of different sizes seen: slope and intercept */
        sch->ns_per_tok = cov / var;
        sch->ns_fixed = my - sch->ns_per_tok * mt;
        sch->ns_fixed = sch->ns_fixed > 0 ? sch->ns_fixed : 0;
    } else if (mt > 0) { /* all alike so far: charge everything per token (conservative) */
        sch->ns_per_tok = my / mt;
        sch->ns_fixed = 0;
    }
}

/* Tokens a step of max_delay_ns holds by the time model (0 when not even one does);
 * step_tokens when there is no bound or no model yet. */
static int32_t delay_tokens(const rill_sched_t *sch) {
    int32_t cap = sch->prm.step_tokens;
    if (sch->prm.max_delay_ns > 0 && sch->ns_per_tok > 0) {
        double c = ((double)sch->prm.max_delay_ns - sch->ns_fixed) / sch->ns_per_tok;
        cap = c < cap ? (c > 0 ? (int32_t)c : 0) : cap;
    }
    return cap;
}

static int32_t step_cap(const rill_sched_t *sch) {
    int32_t cap = delay_tokens(sch);
    if (sch->prm.max_delay_ns > 0 && sch->ns_per_tok > 0) {
        cap = cap < sch->prm.min_chunk ? sch->prm.min_chunk : cap;
        cap = cap > sch->prm.step_tokens ? sch->prm.step_tokens : cap;
    }
    return cap;
}

/* Builds the step in class order; returns the number of items. */
static int32_t build_step(rill_sched_t *sch) {
    builder_t b = { .cap = step_cap(sch) };
    /* waiting requests whose session has no queued data move onto forks */
    for (req_t *r = sch->reqs, *nx; r != NULL; r = nx) {
        nx = r->next;
        if (r->phase == PH_WAIT && data_ready(r)) {
            start_fork(sch, r);
        }
    }
    for (int cls = RILL_SCHED_DECODE; cls < RILL_SCHED_N_CLASSES; cls++) {
        if (cls >= RILL_SCHED_STANDING && b.questions) {
            break; /* refreshes and speculation would lengthen a step questions are in */
        }
        if (cls == RILL_SCHED_INGEST && b.questions) {
            /* answers wait for this step: ingest fills it only as far as the delay bound
             * reaches, without min_chunk's floor (which exists so that ingest progresses in
             * steps of its own) */
            int32_t fill = delay_tokens(sch);
            b.cap = fill < b.cap ? (fill > b.tokens ? fill : b.tokens) : b.cap;
        }
        if (cls == RILL_SCHED_PREFILL || cls == RILL_SCHED_INGEST) {
            /* sessions' own queued data: PREFILL when a request waits for it */
            int32_t n = sch->n_sessions, k = 0;
            uint64_t start = n > 0 ? sch->rr % (uint64_t)n : 0;
            for (int pass = 0; pass < 2; pass++) {
                k = 0;
                for (sess_t *x = sch->sessions; x != NULL; x = x->next, k++) {
                    if ((pass == 0) != ((uint64_t)k >= start)) {
                        continue;
                    }
                    bool boosted = x->n_waiting > 0;
                    if (rill_session_pending(x->s) > 0 && (cls == RILL_SCHED_PREFILL) == boosted &&
                        room_for(sch, &b, false)) {
                        add_item(sch, &b, x->s, NULL, x, (rill_sched_class_t)cls, false);
                    }
                }
            }
            if (cls == RILL_SCHED_INGEST) {
                for (tmpl_t *t = sch->templates; t != NULL; t = t->next) {
                    if (rill_session_pending(t->s) > 0 && room_for(sch, &b, false)) {
                        add_item(sch, &b, t->s, NULL, NULL, RILL_SCHED_INGEST, false);
                    }
                }
            }
        }
        if (cls == RILL_SCHED_STANDING && room_for(sch, &b, true)) {
            /* idle capacity: start refreshes of stale standing queries */
            for (req_t *r = sch->reqs; r != NULL; r = r->next) {
                if (r->kind == REQ_STANDING && r->phase == PH_IDLE && r->stale &&
                    sch->st.steps >= r->retry_step && rill_session_pending(r->sess->s) == 0) {
                    r->stale = false;
                    r->target = acknowledged(r->sess);
                    r->sess->n_waiting++;
                    r->n_out = 0;
                    r->first_ns = 0;
                    r->compute_ns = 0;
                    r->ttft_compute_ns = 0;
                    r->backlog = 0; /* refreshes start on evaluated data only */
                    r->submit_ns = now_ns();
                    start_fork(sch, r);
                }
            }
        }
        for (req_t *r = sch->reqs; r != NULL; r = r->next) {
            if (req_runs(r) && (int)req_class(r) == cls && room_for(sch, &b, true)) {
                add_item(sch, &b, r->fork, r, r->sess, (rill_sched_class_t)cls, true);
            }
        }
    }
    sch->rr++;
    sch->step_questions = b.questions;
    return b.n_items;
}

/* At exhaustion: frees the fork of the lowest-class request. False when none is left. */
static bool reclaim(rill_sched_t *sch) {
    req_t *victim = NULL;
    int best = -1;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->fork == NULL) {
            continue;
        }
        int rank = r->kind == REQ_SPEC && !r->committed ? 3 : r->kind == REQ_STANDING ? 2 : 1;
        if (rank >= best) { /* newest first within a rank: the list is newest first */
            if (rank > best) {
                victim = r;
                best = rank;
            }
        }
    }
    if (victim == NULL) {
        return false;
    }
    sch->st.reclaimed++;
    if (victim->kind == REQ_STANDING) {
        abandon(sch, victim);
        victim->retry_step = sch->st.steps + 16;
    } else {
        char msg[200];
        snprintf(msg, sizeof msg, "KV budget exhausted (%d free of %d pages): fork reclaimed",
                 rill_session_pool_n_free(sch->pool), sch->n_pages);
        finish(sch, victim,
               victim->kind == REQ_SPEC && !victim->committed ? RILL_ECANCELED : RILL_EFULL, msg,
               false);
    }
    return true;
}

/* A picked token of a request's answer. */
static void on_pick(rill_sched_t *sch, req_t *r, int32_t tok, int64_t t) {
    if (r->first_ns == 0) {
        r->first_ns = t;
    }
    r->out[r->n_out++] = tok;
    bool spec = r->kind == REQ_SPEC && !r->committed;
    if (!spec && r->ask.on_token != NULL) {
        r->ask.on_token(r->ask.user, r->id, tok);
    }
    bool done = r->n_out == r->ask.n_max ||
                (r->ask.stop_at_eog && sch->tok != NULL && rill_tokenizer_is_eog(sch->tok, tok));
    bool adopt = r->kind == REQ_TURN || r->kind == REQ_SPEC;
    if (done && !adopt) {
        if (r->kind == REQ_STANDING) {
            memcpy(r->cache, r->out, (size_t)r->n_out * sizeof *r->out);
            r->n_cache = r->n_out;
            r->cache_version = r->version;
            r->cache_done_ns = t;
            r->cache_compute_ns = r->compute_ns;
            r->refreshes++;
            sch->st.standing_refreshes++;
            drop_fork(r);
            r->phase = PH_IDLE;
            r->stale = rill_session_seq(r->sess->s) != r->version;
            rill_sched_answer_t a = { .status = RILL_OK,
                                      .message = "",
                                      .tokens = r->cache,
                                      .n_tokens = r->n_cache,
                                      .version = r->version,
                                      .n_context = r->n_context,
                                      .submit_ns = r->submit_ns,
                                      .ttft_ns = r->first_ns - r->submit_ns,
                                      .total_ns = t - r->submit_ns,
                                      .compute_ns = r->compute_ns,
                                      .done_ns = t,
                                      .backlog = r->backlog,
                                      .ttft_compute_ns = r->ttft_compute_ns };
            if (r->ask.on_done != NULL) {
                r->ask.on_done(r->ask.user, r->id, &a);
            }
            return;
        }
        finish(sch, r, RILL_OK, NULL, false);
        return;
    }
    if (done && spec) {
        r->phase = PH_HELD;
        return;
    }
    if (rill_session_feed(r->fork, &tok, 1) != RILL_OK) {
        finish(sch, r, RILL_ENOMEM, rill_session_last_error(r->fork), false);
        return;
    }
    r->phase = done ? PH_LAST : PH_DECODE;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            best = i;
        }
    }
    return best;
}

/* A step of ns evaluated queued data of x that requests wait for: it counts towards their time
 * to the first token. */
static void own_data_step(rill_sched_t *sch, const sess_t *x, int64_t ns) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->phase == PH_WAIT) {
            r->ttft_compute_ns += ns;
        }
    }
}

/* Runs one step; false when there was nothing to do. */
static bool step(rill_sched_t *sch) {
    for (;;) {
        int32_t n = build_step(sch);
        if (n == 0) {
            /* nothing else to do: refreshes backed off after a reclaim may run now */
            bool retry = false;
            for (req_t *r = sch->reqs; r != NULL; r = r->next) {
                if (r->kind == REQ_STANDING && r->stale && r->retry_step > sch->st.steps) {
                    r->retry_step = 0;
                    retry = true;
                }
            }
            n = retry ? build_step(sch) : 0;
            if (n == 0) {
                return false;
            }
        }
        /* a step of lower work alone stops for a question submitted while it runs (post());
         * one already queued stops it before its first layer */
        pthread_mutex_lock(&sch->mu);
        sch->preemptible = !sch->step_questions;
        atomic_store(&sch->preempt, 0);
        for (cmd_t *c = sch->head; c != NULL && sch->preemptible; c = c->next) {
            if (is_question_cmd(c)) {
                atomic_store(&sch->preempt, 1);
            }
        }
        pthread_mutex_unlock(&sch->mu);
        int64_t t0 = now_ns();
        rill_err_t err = rill_session_step(sch->pool, sch->items, n);
        int64_t t1 = now_ns();
        pthread_mutex_lock(&sch->mu);
        sch->preemptible = false;
        bool preempted = atomic_exchange(&sch->preempt, 0) != 0;
        pthread_mutex_unlock(&sch->mu);
        if (err == RILL_ECANCELED && preempted) {
            /* nothing changed but pages trimmed and logits invalidated: the tokens stay
             * queued (rill_session_step's forward-error contract) and run again later */
            sch->st.preempted++;
            sch->st.busy_ns += t1 - t0;
            return true;
        }
        if (err == RILL_EFULL) {
            if (reclaim(sch)) {
                continue;
            }
            RILL_LOGE("scheduler: %s with no fork left to reclaim",
                      rill_session_pool_last_error(sch->pool));
            return false;
        }
        sch->st.busy_ns += t1 - t0;
        sch->st.steps++;
        int32_t T = 0;
        for (int32_t i = 0; i < n; i++) {
            T += sch->items[i].n;
        }
        if (err != RILL_OK) {
            /* forward errors: fail the requests of the step, keep sessions' data queued */
            RILL_LOGE("scheduler: step failed: %s", rill_session_pool_last_error(sch->pool));
            for (int32_t i = 0; i < n; i++) {
                req_t *r = sch->item_req[i];
                if (r != NULL && r->kind != REQ_STANDING) {
                    finish(sch, r, err, rill_session_pool_last_error(sch->pool), false);
                } else if (r != NULL) {
                    abandon(sch, r);
                }
            }
            return true;
        }
        learn(sch, T, t1 - t0);
        const int32_t V = rill_session_pool_n_vocab(sch->pool);
        for (int32_t i = 0; i < n; i++) {
            sch->st.tokens[sch->item_class[i]] += sch->items[i].n;
            if (sch->step_questions && sch->item_class[i] >= RILL_SCHED_INGEST) {
                sch->st.question_step_filler += sch->items[i].n;
            }
            req_t *r = sch->item_req[i];
            if (r == NULL) {
                if (sch->item_class[i] == RILL_SCHED_PREFILL) {
                    own_data_step(sch, sch->item_sess[i], t1 - t0);
                }
                continue;
            }
            if (r->first_ns == 0) {
                r->ttft_compute_ns += t1 - t0;
            }
            r->compute_ns += (t1 - t0) * sch->items[i].n / T;
            if (r->kind == REQ_SPEC && !r->committed) {
                r->computed += sch->items[i].n;
                sch->st.spec_tokens_computed += sch->items[i].n;
            }
        }
        for (int32_t i = 0; i < n; i++) {
            req_t *r = sch->item_req[i];
            if (r == NULL || !sch->items[i].logits || r->fork == NULL ||
                (r->phase != PH_PREFILL && r->phase != PH_DECODE && r->phase != PH_LAST)) {
                continue; /* a standing refresh abandoned by an adoption earlier in this loop */
            }
            if (r->phase == PH_LAST) { /* input and reply evaluated: the session takes them */
                bool adopted = rill_session_adopt(r->sess->s, r->fork) == RILL_OK;
                if (adopted) {
                    data_changed(sch, r->sess);
                }
                finish(sch, r, RILL_OK, NULL, adopted);
                continue;
            }
            const float *logits = NULL;
            if (rill_session_logits(r->fork, &logits) != RILL_OK) {
                finish(sch, r, RILL_EINTERNAL, "logits missing after a step", false);
                continue;
            }
            on_pick(sch, r, argmax(logits, V), t1);
        }
        templates_ready(sch);
        return true;
    }
}

/* ---- the engine thread ---------------------------------------------------------------------- */

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

static void *engine(void *arg) {
    rill_sched_t *sch = arg;
    pthread_mutex_lock(&sch->mu);
    for (;;) {
        cmd_t *list = sch->head;
        sch->head = sch->tail = NULL;
        bool stop = sch->stop;
        pthread_mutex_unlock(&sch->mu);
        for (cmd_t *c = list, *nx; c != NULL; c = nx) {
            nx = c->next;
            bool blocking = c->blocking;
            run_cmd(sch, c);
            if (!blocking) {
                rill_free(c->toks);
                rill_free(c);
            }
        }
        if (sch->finished != NULL) { /* answer the callers now, not after the next step */
            pthread_mutex_lock(&sch->mu);
            release_finished(sch);
            pthread_mutex_unlock(&sch->mu);
        }
        bool worked = !stop && step(sch);
        pthread_mutex_lock(&sch->mu);
        release_finished(sch);
        if (stop) {
            break;
        }
        if (!worked && sch->head == NULL && !sch->stop) {
            sch->idle = true;
            pthread_cond_broadcast(&sch->done);
            int64_t t0 = now_ns();
            while (sch->head == NULL && !sch->stop) {
                pthread_cond_wait(&sch->wake, &sch->mu);
            }
            sch->st.idle_ns += now_ns() - t0;
            sch->idle = false;
        }
    }
    pthread_mutex_unlock(&sch->mu);
    while (sch->reqs != NULL) {
        req_t *r = sch->reqs;
        if (r->kind == REQ_STANDING) {
            unlink_req(sch, r);
            free_req(r);
        } else {
            finish(sch, r, RILL_ECANCELED, "scheduler stopped", false);
        }
    }
    while (sch->sessions != NULL) {
        close_sess(sch, sch->sessions);
    }
    while (sch->templates != NULL) {
        tmpl_t *t = sch->templates;
        for (cmd_t *c = t->waiting, *nx; c != NULL; c = nx) {
            nx = c->wait_next;
            c->err = RILL_ECLOSED;
            c->wait_next = sch->finished;
            sch->finished = c;
        }
        t->refs = 1;
        t->waiting = NULL;
        tmpl_release(sch, t);
    }
    pthread_mutex_lock(&sch->mu);
    release_finished(sch);
    pthread_mutex_unlock(&sch->mu);
    return NULL;
}

/* ---- the callers' side ---------------------------------------------------------------------- */

static void push(rill_sched_t *sch, cmd_t *c) {
    c->next = NULL;
    if (sch->tail != NULL) {
        sch->tail->next = c;
    } else {
        sch->head = c;
    }
    sch->tail = c;
    pthread_cond_signal(&sch->wake);
}

/* Runs a blocking command to completion. */
static rill_err_t call(rill_sched_t *sch, cmd_t *c) {
    c->blocking = true;
    c->done = false;
    pthread_mutex_lock(&sch->mu);
    if (sch->stop) {
        pthread_mutex_unlock(&sch->mu);
        return RILL_ECLOSED;
    }
    push(sch, c);
    while (!c->done) {
        pthread_cond_wait(&sch->done, &sch->mu);
    }
    pthread_mutex_unlock(&sch->mu);
    return c->err;
}

/* Queues an asynchronous command (heap, owned by the engine from here). */
static rill_err_t post(rill_sched_t *sch, cmd_kind_t kind, rill_sched_sid_t sid,
                       rill_sched_rid_t rid, const int32_t *toks, int32_t n,
                       const rill_sched_ask_t *ask, rill_sched_ack_fn on_ack, void *ack_user) {
    cmd_t *c = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *c);
    int32_t *copy = n > 0 ? rill_malloc(RILL_MEM_SCHEDULER, (size_t)n * sizeof *copy) : NULL;
    if (c == NULL || (n > 0 && copy == NULL)) {
        rill_free(c);
        rill_free(copy);
        return RILL_ENOMEM;
    }
    if (n > 0) {
        memcpy(copy, toks, (size_t)n * sizeof *copy);
    }
    c->kind = kind;
    c->sid = sid;
    c->rid = rid;
    c->toks = copy;
    c->n_toks = n;
    if (kind == CMD_INGEST) { /* run_cmd reads ingest input from data/len */
        c->data = copy;
        c->len = (size_t)n;
    }
    c->on_ack = on_ack;
    c->ack_user = ack_user;
    if (ask != NULL) {
        c->ask = *ask;
    }
    c->ret = now_ns(); /* submission time */
    pthread_mutex_lock(&sch->mu);
    if (sch->stop) {
        pthread_mutex_unlock(&sch->mu);
        rill_free(copy);
        rill_free(c);
        return RILL_ECLOSED;
    }
    push(sch, c);
    if (is_question_cmd(c) && sch->preemptible) {
        atomic_store(&sch->preempt, 1);
    }
    pthread_mutex_unlock(&sch->mu);
    return RILL_OK;
}

rill_err_t rill_sched_new(rill_session_pool_t *pool, const rill_sched_params_t *params,
                          rill_sched_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (pool == NULL) {
        return RILL_EINVAL;
    }
    rill_sched_params_t p = params != NULL ? *params : rill_sched_default_params();
    int32_t max_batch = rill_session_pool_max_batch(pool);
    int32_t P = rill_session_pool_page_size(pool), n_pages = rill_session_pool_n_pages(pool);
    if (p.step_tokens == 0) {
        p.step_tokens = max_batch;
    }
    if (p.overflow_pages == -1) {
        int32_t lo = 2 * ceil_div(p.step_tokens, P);
        p.overflow_pages = n_pages / 8 > lo ? n_pages / 8 : lo;
        p.overflow_pages = p.overflow_pages < n_pages ? p.overflow_pages : n_pages - 1;
    }
    if (p.step_tokens < 1 || p.step_tokens > max_batch || p.min_chunk < 1 ||
        p.min_chunk > p.step_tokens || p.max_delay_ns < 0 || p.overflow_pages < 0 ||
        p.overflow_pages >= n_pages || p.max_sessions < 1) {
        RILL_LOGE("scheduler: invalid parameters (step %d of max %d, min_chunk %d, overflow %d "
                  "of %d pages, max_sessions %d)",
                  p.step_tokens, max_batch, p.min_chunk, p.overflow_pages, n_pages, p.max_sessions);
        return RILL_EINVAL;
    }
    rill_sched_t *sch = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *sch);
    if (sch == NULL) {
        return RILL_ENOMEM;
    }
    sch->pool = pool;
    sch->prm = p;
    sch->P = P;
    sch->n_pages = n_pages;
    sch->max_batch = max_batch;
    sch->n_ctx = rill_session_pool_n_ctx(pool);
    sch->tok = rill_session_pool_tokenizer(pool);
    atomic_init(&sch->next_rid, 1);
    atomic_init(&sch->preempt, 0);
    rill_forward_set_cancel(rill_session_pool_forward(pool), &sch->preempt);
    sch->items = rill_malloc(RILL_MEM_SCHEDULER, (size_t)max_batch * sizeof *sch->items);
    sch->item_req = rill_malloc(RILL_MEM_SCHEDULER, (size_t)max_batch * sizeof *sch->item_req);
    sch->item_sess = rill_malloc(RILL_MEM_SCHEDULER, (size_t)max_batch * sizeof *sch->item_sess);
    sch->item_class = rill_malloc(RILL_MEM_SCHEDULER, (size_t)max_batch * sizeof *sch->item_class);
    if (sch->items == NULL || sch->item_req == NULL || sch->item_sess == NULL ||
        sch->item_class == NULL) {
        rill_sched_destroy(&sch);
        return RILL_ENOMEM;
    }
    pthread_mutex_init(&sch->mu, NULL);
    pthread_cond_init(&sch->wake, NULL);
    pthread_cond_init(&sch->done, NULL);
    if (pthread_create(&sch->thread, NULL, engine, sch) != 0) {
        rill_sched_destroy(&sch);
        return RILL_EINTERNAL;
    }
    sch->thread_started = true;
    *out = sch;
    return RILL_OK;
}

void rill_sched_destroy(rill_sched_t **sp) {
    if (sp == NULL || *sp == NULL) {
        return;
    }
    rill_sched_t *sch = *sp;
    if (sch->items != NULL && sch->item_class != NULL && sch->item_req != NULL &&
        sch->item_sess != NULL) {
        pthread_mutex_lock(&sch->mu);
        sch->stop = true;
        pthread_cond_signal(&sch->wake);
        pthread_mutex_unlock(&sch->mu);
        if (sch->thread_started) {
            pthread_join(sch->thread, NULL);
        }
        /* asynchronous commands that arrived after the last pass */
        for (cmd_t *c = sch->head, *nx; c != NULL; c = nx) {
            nx = c->next;
            if (!c->blocking) {
                if (c->kind == CMD_ASK || c->kind == CMD_TURN || c->kind == CMD_SPEC ||
                    c->kind == CMD_STANDING) {
                    fail_async(c, RILL_ECANCELED, "scheduler stopped");
                } else if (c->on_ack != NULL) {
                    c->on_ack(c->ack_user, RILL_ECANCELED, "scheduler stopped");
                }
                rill_free(c->toks);
                rill_free(c);
            }
        }
        pthread_mutex_destroy(&sch->mu);
        pthread_cond_destroy(&sch->wake);
        pthread_cond_destroy(&sch->done);
    }
    /* the forward outlives the scheduler (the engine thread is gone: no step reads it) */
    rill_forward_set_cancel(rill_session_pool_forward(sch->pool), NULL);
    rill_free(sch->items);
    rill_free(sch->item_req);
    rill_free(sch->item_sess);
    rill_free(sch->item_class);
    rill_free(sch);
    *sp = NULL;
}

rill_err_t rill_sched_session_create(rill_sched_t *sch, const rill_sched_session_params_t *params,
                                     rill_sched_sid_t *out, char *err, size_t errlen) {
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (sch == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    *out = 0;
    rill_sched_session_params_t d = rill_sched_session_default_params();
    cmd_t c = { .kind = CMD_CREATE,
                .sp = params != NULL ? params : &d,
                .out = out,
                .msg = err,
                .msglen = errlen };
    return call(sch, &c);
}

rill_err_t rill_sched_session_restore(rill_sched_t *sch, const char *snapshot_path,
                                      const char *log_path, rill_session_fsync_t fsync,
                                      rill_sched_sid_t *out, char *err, size_t errlen) {
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (sch == NULL || out == NULL || (snapshot_path == NULL && log_path == NULL)) {
        return RILL_EINVAL;
    }
    *out = 0;
    cmd_t c = { .kind = CMD_RESTORE,
                .path = snapshot_path,
                .path2 = log_path,
                .fsync = fsync,
                .out = out,
                .msg = err,
                .msglen = errlen };
    return call(sch, &c);
}

rill_err_t rill_sched_session_close(rill_sched_t *sch, rill_sched_sid_t sid) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_CLOSE, .sid = sid };
    return call(sch, &c);
}

rill_err_t rill_sched_session_info(rill_sched_t *sch, rill_sched_sid_t sid,
                                   rill_sched_session_info_t *out) {
    if (sch == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_INFO, .sid = sid, .out = out };
    return call(sch, &c);
}

rill_err_t rill_sched_session_snapshot(rill_sched_t *sch, rill_sched_sid_t sid, const char *path,
                                       char *err, size_t errlen) {
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (sch == NULL || path == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_SNAPSHOT, .sid = sid, .path = path, .msg = err, .msglen = errlen };
    return call(sch, &c);
}

int64_t rill_sched_session_tokens(rill_sched_t *sch, rill_sched_sid_t sid, int32_t *out,
                                  int64_t cap) {
    if (sch == NULL || cap < 0 || (cap > 0 && out == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_TOKENS, .sid = sid, .out = out, .cap = cap };
    rill_err_t err = call(sch, &c);
    return err != RILL_OK ? err : c.ret;
}

int64_t rill_sched_session_list(rill_sched_t *sch, rill_sched_sid_t *ids, int64_t cap) {
    if (sch == NULL || cap < 0 || (cap > 0 && ids == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_LIST, .out = ids, .cap = cap };
    rill_err_t err = call(sch, &c);
    return err != RILL_OK ? err : c.ret;
}

rill_err_t rill_sched_ingest(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *tokens,
                             int32_t n) {
    if (sch == NULL || n < 0 || (n > 0 && tokens == NULL)) {
        return RILL_EINVAL;
    }
    if (n == 0) {
        return RILL_OK;
    }
    cmd_t c = { .kind = CMD_INGEST, .sid = sid, .data = tokens, .len = (size_t)n };
    return call(sch, &c);
}

rill_err_t rill_sched_ingest_text(rill_sched_t *sch, rill_sched_sid_t sid, const char *text,
                                  size_t len, bool flush, int64_t *version) {
    if (sch == NULL || (len > 0 && text == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_INGEST_TEXT, .sid = sid, .data = text, .len = len, .flush = flush };
    rill_err_t err = call(sch, &c);
    if (err == RILL_OK && version != NULL) {
        *version = c.ret;
    }
    return err;
}

rill_err_t rill_sched_ingest_async(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *tokens,
                                   int32_t n, rill_sched_ack_fn on_ack, void *user) {
    if (sch == NULL || n < 1 || tokens == NULL) {
        return RILL_EINVAL;
    }
    return post(sch, CMD_INGEST, sid, 0, tokens, n, NULL, on_ack, user);
}

static rill_err_t submit(rill_sched_t *sch, cmd_kind_t kind, rill_sched_sid_t sid,
                         const int32_t *toks, int32_t n, const rill_sched_ask_t *q,
                         rill_sched_rid_t *rid) {
    if (rid != NULL) {
        *rid = 0;
    }
    if (sch == NULL || q == NULL || rid == NULL || n < 1 || toks == NULL || q->n_max < 1) {
        return RILL_EINVAL;
    }
    rill_sched_rid_t id = atomic_fetch_add(&sch->next_rid, 1);
    rill_err_t err = post(sch, kind, sid, id, toks, n, q, NULL, NULL);
    if (err == RILL_OK) {
        *rid = id;
    }
    return err;
}

rill_err_t rill_sched_ask(rill_sched_t *sch, rill_sched_sid_t sid, const rill_sched_ask_t *q,
                          rill_sched_rid_t *rid) {
    return submit(sch, CMD_ASK, sid, q != NULL ? q->question : NULL, q != NULL ? q->n_question : 0,
                  q, rid);
}

rill_err_t rill_sched_turn(rill_sched_t *sch, rill_sched_sid_t sid, const rill_sched_ask_t *q,
                           rill_sched_rid_t *rid) {
    return submit(sch, CMD_TURN, sid, q != NULL ? q->question : NULL, q != NULL ? q->n_question : 0,
                  q, rid);
}

rill_err_t rill_sched_standing_register(rill_sched_t *sch, rill_sched_sid_t sid,
                                        const rill_sched_ask_t *q, rill_sched_rid_t *qid) {
    return submit(sch, CMD_STANDING, sid, q != NULL ? q->question : NULL,
                  q != NULL ? q->n_question : 0, q, qid);
}

rill_err_t rill_sched_spec_start(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *guess,
                                 int32_t n_guess, const rill_sched_ask_t *reply,
                                 rill_sched_rid_t *spec) {
    return submit(sch, CMD_SPEC, sid, guess, n_guess, reply, spec);
}

rill_err_t rill_sched_cancel(rill_sched_t *sch, rill_sched_rid_t rid) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    if (rid == 0 || rid >= atomic_load(&sch->next_rid)) {
        return RILL_ENOTFOUND;
    }
    return post(sch, CMD_CANCEL, 0, rid, NULL, 0, NULL, NULL, NULL);
}

rill_err_t rill_sched_spec_commit(rill_sched_t *sch, rill_sched_rid_t spec, const int32_t *input,
                                  int32_t n_input) {
    if (sch == NULL || n_input < 1 || input == NULL) {
        return RILL_EINVAL;
    }
    if (spec == 0 || spec >= atomic_load(&sch->next_rid)) {
        return RILL_ENOTFOUND;
    }
    return post(sch, CMD_COMMIT, 0, spec, input, n_input, NULL, NULL, NULL);
}

rill_err_t rill_sched_standing_unregister(rill_sched_t *sch, rill_sched_rid_t qid) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_UNREGISTER, .rid = qid };
    return call(sch, &c);
}

int64_t rill_sched_standing_list(rill_sched_t *sch, rill_sched_sid_t sid,
                                 rill_sched_standing_info_t *out, int64_t cap) {
    if (sch == NULL || cap < 0 || (cap > 0 && out == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c = { .kind = CMD_STANDING_LIST, .sid = sid, .out = out, .cap = cap };
    rill_err_t err = call(sch, &c);
    return err != RILL_OK ? err : c.ret;
}

void rill_sched_stats(rill_sched_t *sch, rill_sched_stats_t *out) {
    cmd_t c = { .kind = CMD_STATS, .out = out };
    if (call(sch, &c) != RILL_OK) {
        memset(out, 0, sizeof *out);
    }
}

rill_err_t rill_sched_wait_idle(rill_sched_t *sch, int64_t timeout_ns) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t end = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + timeout_ns;
    struct timespec dl = { .tv_sec = end / 1000000000, .tv_nsec = end % 1000000000 };
    rill_err_t err = RILL_OK;
    pthread_mutex_lock(&sch->mu);
    while (!(sch->idle && sch->head == NULL)) {
        if (pthread_cond_timedwait(&sch->done, &sch->mu, &dl) != 0) {
            err = sch->idle && sch->head == NULL ? RILL_OK : RILL_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&sch->mu);
    return err;
}
