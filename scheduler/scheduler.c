/*
 * scheduler.c - the callers' side of the scheduler (contract: rill_scheduler.h): creation and
 * teardown, and every public call turned into a command for the engine thread (engine.c).
 *
 * Blocking calls put a command on their own stack, queue it and wait on the `done` condition
 * until the engine marks it carried out; asynchronous calls (ask, turn, standing registration,
 * speculation, cancel, commit, async ingest) copy their tokens into a heap command and return
 * at once, the engine freeing it. Request ids are handed out here (an atomic counter), so a
 * caller has its id before the engine sees the request and can cancel it at any time. A
 * question queued while a step of lower work runs stops that step's forward pass (the preempt
 * flag), so it waits about one layer, not one step.
 *
 * Memory: one command per asynchronous call (never per token or step).
 */
#include "rill_scheduler.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "sched_internal.h"

int64_t rill__sched_now(void) {
    return (int64_t)rill_now_ns();
}

void rill__sched_msg(cmd_t *c, const char *fmt, ...) {
    if (c == NULL || c->msg == NULL || c->msglen == 0) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msglen, fmt, ap);
    va_end(ap);
}

int32_t rill__sched_ceil_div(int64_t a, int32_t b) {
    return (int32_t)((a + b - 1) / b);
}

bool rill__sched_is_question(const cmd_t *c) {
    return c->kind == CMD_ASK || c->kind == CMD_TURN;
}

void rill__sched_cmd_free(cmd_t *c) {
    switch (c->kind) {
    case CMD_ASK:
    case CMD_TURN:
    case CMD_STANDING:
    case CMD_SPEC:
        rill_free(c->u.ask.toks);
        break;
    case CMD_COMMIT:
        rill_free(c->u.commit.toks);
        break;
    case CMD_INGEST:
        rill_free(c->u.ingest.owned);
        break;
    case CMD_REPLACE:
        rill_free(c->u.replace.owned);
        break;
    default:
        break;
    }
    rill_free(c);
}

void rill__sched_finished(rill_sched_t *sch, cmd_t *c) {
    c->wait_next = sch->finished;
    sch->finished = c;
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
                                  .max_sessions = 1024,
                                  .model_steps = RILL_SCHED_EVERY_MODEL,
                                  .standing_min_interval_ns = 250 * 1000 * 1000,
                                  .standing_max_share = 0.5 };
}

rill_sched_session_params_t rill_sched_session_default_params(void) {
    return (rill_sched_session_params_t){ .session = rill_session_default_params(),
                                          .log_path = NULL,
                                          .fsync = RILL_SESSION_FSYNC_EVERYSEC };
}

/* ---- the queue ------------------------------------------------------------------------------ */

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

/* Runs a blocking command to completion; its detail becomes the caller's rill_last_error. */
rill_err_t rill__sched_call(rill_sched_t *sch, cmd_t *c) {
    char detail[RILL_ERR_DETAIL] = "";
    c->msg = detail;
    c->msglen = sizeof detail;
    c->blocking = true;
    c->done = false;
    pthread_mutex_lock(&sch->mu);
    if (sch->stop) {
        pthread_mutex_unlock(&sch->mu);
        return rill__error(RILL_ECLOSED, "the scheduler is stopping");
    }
    push(sch, c);
    while (!c->done) {
        pthread_cond_wait(&sch->done, &sch->mu);
    }
    pthread_mutex_unlock(&sch->mu);
    c->msg = NULL; /* the caller's frame and this one end together; keep no pointer into it */
    return rill__error_str(c->err, detail);
}

/* A heap copy of toks[0, n) for an asynchronous command (NULL for n == 0 or no memory). */
static int32_t *copy_tokens(const int32_t *toks, int32_t n) {
    int32_t *copy = n > 0 ? rill_malloc(RILL_MEM_SCHEDULER, (size_t)n * sizeof *copy) : NULL;
    if (copy != NULL) {
        memcpy(copy, toks, (size_t)n * sizeof *copy);
    }
    return copy;
}

/* Queues an asynchronous command (heap, owned by the engine from here; freed on error). */
static rill_err_t post(rill_sched_t *sch, cmd_t *c) {
    c->submit_ns = rill__sched_now();
    pthread_mutex_lock(&sch->mu);
    if (sch->stop) {
        pthread_mutex_unlock(&sch->mu);
        rill__sched_cmd_free(c);
        return RILL_ECLOSED;
    }
    push(sch, c);
    if (rill__sched_is_question(c) && sch->preemptible) {
        atomic_store(&sch->preempt, 1);
    }
    pthread_mutex_unlock(&sch->mu);
    return RILL_OK;
}

/* A zeroed command of kind: every byte of the union too, so a member's unset fields (callbacks
 * among them) read as NULL / 0 whichever member a call fills in. */
static void cmd_init(cmd_t *c, cmd_kind_t kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
}

static cmd_t *new_cmd(cmd_kind_t kind) {
    cmd_t *c = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *c);
    if (c != NULL) {
        c->kind = kind;
    }
    return c;
}

/* ---- creation and teardown ------------------------------------------------------------------ */

/* Resolves the parameters for every model; false (logged) when they do not fit one. */
static bool resolve(rill_sched_params_t *p, model_t *models, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        model_t *m = &models[i];
        m->step_tokens = p->step_tokens == 0 ? m->max_batch : p->step_tokens;
        m->overflow = p->overflow_pages;
        if (m->overflow == -1) {
            int32_t lo = 2 * rill__sched_ceil_div(m->step_tokens, m->P);
            m->overflow = m->n_pages / 8 > lo ? m->n_pages / 8 : lo;
            m->overflow = m->overflow < m->n_pages ? m->overflow : m->n_pages - 1;
        }
        if (m->step_tokens < 1 || m->step_tokens > m->max_batch || p->min_chunk < 1 ||
            p->min_chunk > m->step_tokens || p->max_delay_ns < 0 || m->overflow < 0 ||
            m->overflow >= m->n_pages || p->max_sessions < 1 ||
            (unsigned)p->model_steps > (unsigned)RILL_SCHED_TOP_MODEL ||
            p->standing_min_interval_ns < 0 ||
            !(p->standing_max_share > 0 && p->standing_max_share <= 1) || p->sleep_idle_ns < 0 ||
            p->sleep_disk_bytes < 0 || (p->sleep_dir != NULL && strlen(p->sleep_dir) > 3800)) {
            RILL_LOGE("scheduler: invalid parameters for model %s (step %d of max %d, min_chunk "
                      "%d, overflow %d of %d pages, max_sessions %d, model_steps %d, standing "
                      "interval %lld ns, standing share %g, sleep idle %lld ns, sleep disk %lld "
                      "bytes, sleep_dir of at most 3800 bytes)",
                      m->name, m->step_tokens, m->max_batch, p->min_chunk, m->overflow, m->n_pages,
                      p->max_sessions, (int)p->model_steps, (long long)p->standing_min_interval_ns,
                      p->standing_max_share, (long long)p->sleep_idle_ns,
                      (long long)p->sleep_disk_bytes);
            return false;
        }
    }
    return true;
}

/* Checks the model list: names, pools and forwards distinct and valid. */
static bool models_ok(const rill_sched_model_t *models, int32_t n) {
    if (models == NULL || n < 1 || n > RILL_SCHED_MAX_MODELS) {
        return false;
    }
    for (int32_t i = 0; i < n; i++) {
        size_t len = models[i].name != NULL ? strlen(models[i].name) : 0;
        if (models[i].pool == NULL || len < 1 || len >= RILL_SCHED_MODEL_NAME) {
            return false;
        }
        for (int32_t j = 0; j < i; j++) {
            if (strcmp(models[i].name, models[j].name) == 0 || models[i].pool == models[j].pool ||
                rill_session_pool_forward(models[i].pool) ==
                    rill_session_pool_forward(models[j].pool)) {
                return false;
            }
        }
    }
    return true;
}

static void free_models(rill_sched_t *sch) {
    for (int32_t i = 0; sch->models != NULL && i < sch->n_models; i++) {
        model_t *m = &sch->models[i];
        /* the forward outlives the scheduler (the engine thread is gone: no step reads it) */
        rill_forward_set_cancel(rill_session_pool_forward(m->pool), NULL);
        rill_free(m->items);
        rill_free(m->item_req);
        rill_free(m->item_sess);
        rill_free(m->item_class);
    }
    rill_free(sch->models);
    rill_free(sch->order);
}

rill_err_t rill_sched_new_models(const rill_sched_model_t *models, int32_t n_models,
                                 const rill_sched_params_t *params, rill_sched_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (!models_ok(models, n_models)) {
        RILL_LOGE("scheduler: invalid model list (1..%d models, distinct names of 1..%d bytes, "
                  "distinct pools over distinct forwards)",
                  RILL_SCHED_MAX_MODELS, RILL_SCHED_MODEL_NAME - 1);
        return RILL_EINVAL;
    }
    rill_sched_t *sch = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *sch);
    if (sch == NULL) {
        return RILL_ENOMEM;
    }
    sch->prm = params != NULL ? *params : rill_sched_default_params();
    rill_hist_init(&sch->st.step_ns);
    rill_hist_init(&sch->st.wake_ns);
    rill_hist_init(&sch->st.wake_log_ns);
    sch->models = rill_calloc(RILL_MEM_SCHEDULER, (size_t)n_models, sizeof *sch->models);
    sch->order = rill_calloc(RILL_MEM_SCHEDULER, (size_t)n_models, sizeof *sch->order);
    if (sch->models == NULL || sch->order == NULL) {
        free_models(sch);
        rill_free(sch);
        return RILL_ENOMEM;
    }
    sch->n_models = n_models;
    for (int32_t i = 0; i < n_models; i++) {
        model_t *m = &sch->models[i];
        rill_session_pool_t *pool = models[i].pool;
        snprintf(m->name, sizeof m->name, "%s", models[i].name);
        m->index = i;
        m->pool = pool;
        m->P = rill_session_pool_page_size(pool);
        m->n_pages = rill_session_pool_n_pages(pool);
        m->max_batch = rill_session_pool_max_batch(pool);
        m->n_ctx = rill_session_pool_n_ctx(pool);
        m->tok = rill_session_pool_tokenizer(pool);
    }
    if (!resolve(&sch->prm, sch->models, n_models)) {
        free_models(sch);
        rill_free(sch);
        return RILL_EINVAL;
    }
    if (sch->prm.sleep_dir != NULL) {
        snprintf(sch->sleep_dir, sizeof sch->sleep_dir, "%s", sch->prm.sleep_dir);
        sch->prm.sleep_dir = sch->sleep_dir;
    }
    atomic_init(&sch->next_rid, 1);
    atomic_init(&sch->preempt, 0);
    for (int32_t i = 0; i < n_models; i++) {
        model_t *m = &sch->models[i];
        size_t mb = (size_t)m->max_batch;
        m->items = rill_malloc(RILL_MEM_SCHEDULER, mb * sizeof *m->items);
        m->item_req = rill_malloc(RILL_MEM_SCHEDULER, mb * sizeof *m->item_req);
        m->item_sess = rill_malloc(RILL_MEM_SCHEDULER, mb * sizeof *m->item_sess);
        m->item_class = rill_malloc(RILL_MEM_SCHEDULER, mb * sizeof *m->item_class);
        if (m->items == NULL || m->item_req == NULL || m->item_sess == NULL ||
            m->item_class == NULL) {
            free_models(sch);
            rill_free(sch);
            return RILL_ENOMEM;
        }
        rill_forward_set_cancel(rill_session_pool_forward(m->pool), &sch->preempt);
    }
    sch->sh_t = rill__sched_now(); /* the share's window starts full of idle time */
    sch->sh_w = (double)RILL_SCHED_SHARE_TAU_NS;
    pthread_mutex_init(&sch->mu, NULL);
    /* the engine's timed waits (the standing budget) are on rill_now_ns's clock */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sch->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&sch->done, NULL);
    if (pthread_create(&sch->thread, NULL, rill__sched_engine, sch) != 0) {
        rill_sched_destroy(&sch);
        return RILL_EINTERNAL;
    }
    sch->thread_started = true;
    *out = sch;
    return RILL_OK;
}

rill_err_t rill_sched_new(rill_session_pool_t *pool, const rill_sched_params_t *params,
                          rill_sched_t **out) {
    rill_sched_model_t m = { .name = "default", .pool = pool };
    return rill_sched_new_models(&m, 1, params, out);
}

int32_t rill_sched_n_models(const rill_sched_t *sch) {
    return sch != NULL ? sch->n_models : 0;
}

const char *rill_sched_model_name(const rill_sched_t *sch, int32_t model) {
    return sch != NULL && model >= 0 && model < sch->n_models ? sch->models[model].name : NULL;
}

int32_t rill_sched_find_model(const rill_sched_t *sch, const char *name) {
    for (int32_t i = 0; sch != NULL && name != NULL && i < sch->n_models; i++) {
        if (strcmp(sch->models[i].name, name) == 0) {
            return i;
        }
    }
    return RILL_ENOTFOUND;
}

void rill_sched_destroy(rill_sched_t **sp) {
    if (sp == NULL || *sp == NULL) {
        return;
    }
    rill_sched_t *sch = *sp;
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
        if (c->blocking) {
            continue;
        }
        if (c->kind == CMD_ASK || c->kind == CMD_TURN || c->kind == CMD_SPEC ||
            c->kind == CMD_STANDING) {
            rill__sched_fail_async(c, RILL_ECANCELED, "scheduler stopped");
        } else if (c->kind == CMD_INGEST && c->u.ingest.on_ack != NULL) {
            c->u.ingest.on_ack(c->u.ingest.user, RILL_ECANCELED, "scheduler stopped");
        } else if (c->kind == CMD_REPLACE && c->u.replace.on_ack != NULL) {
            c->u.replace.on_ack(c->u.replace.user, RILL_ECANCELED, -1, "scheduler stopped");
        }
        rill__sched_cmd_free(c);
    }
    pthread_mutex_destroy(&sch->mu);
    pthread_cond_destroy(&sch->wake);
    pthread_cond_destroy(&sch->done);
    free_models(sch);
    rill_free(sch);
    *sp = NULL;
}

/* ---- sessions ------------------------------------------------------------------------------- */

rill_err_t rill_sched_session_create(rill_sched_t *sch, const rill_sched_session_params_t *params,
                                     rill_sched_sid_t *out) {
    if (sch == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    *out = 0;
    rill_sched_session_params_t d = rill_sched_session_default_params();
    cmd_t c;
    cmd_init(&c, CMD_CREATE);
    c.u.create.sp = params != NULL ? params : &d;
    c.u.create.out = out;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_session_restore(rill_sched_t *sch, int32_t model, const char *snapshot_path,
                                      const char *log_path, rill_session_fsync_t fsync,
                                      rill_sched_sid_t *out) {
    if (sch == NULL || out == NULL || (snapshot_path == NULL && log_path == NULL)) {
        return RILL_EINVAL;
    }
    *out = 0;
    cmd_t c;
    cmd_init(&c, CMD_RESTORE);
    c.u.restore.model = model;
    c.u.restore.snapshot = snapshot_path;
    c.u.restore.log = log_path;
    c.u.restore.fsync = fsync;
    c.u.restore.out = out;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_session_pin(rill_sched_t *sch, rill_sched_sid_t sid, bool pin) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_PIN);
    c.u.sleep.sid = sid;
    c.u.sleep.pin = pin;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_session_sleep(rill_sched_t *sch, rill_sched_sid_t sid) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_SLEEP);
    c.u.sleep.sid = sid;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_session_close(rill_sched_t *sch, rill_sched_sid_t sid) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_CLOSE);
    c.u.close.sid = sid;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_session_info(rill_sched_t *sch, rill_sched_sid_t sid,
                                   rill_sched_session_info_t *out) {
    if (sch == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_INFO);
    c.u.info.sid = sid;
    c.u.info.out = out;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_session_snapshot(rill_sched_t *sch, rill_sched_sid_t sid, const char *path) {
    if (sch == NULL || path == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_SNAPSHOT);
    c.u.snapshot.sid = sid;
    c.u.snapshot.path = path;
    return rill__sched_call(sch, &c);
}

int64_t rill_sched_session_tokens(rill_sched_t *sch, rill_sched_sid_t sid, int32_t *out,
                                  int64_t cap) {
    if (sch == NULL || cap < 0 || (cap > 0 && out == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_TOKENS);
    c.u.tokens.sid = sid;
    c.u.tokens.out = out;
    c.u.tokens.cap = cap;
    rill_err_t err = rill__sched_call(sch, &c);
    return err != RILL_OK ? err : c.u.tokens.n;
}

int64_t rill_sched_session_list(rill_sched_t *sch, rill_sched_sid_t *ids, int64_t cap) {
    if (sch == NULL || cap < 0 || (cap > 0 && ids == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_LIST);
    c.u.list.out = ids;
    c.u.list.cap = cap;
    rill_err_t err = rill__sched_call(sch, &c);
    return err != RILL_OK ? err : c.u.list.n;
}

/* ---- data ----------------------------------------------------------------------------------- */

rill_err_t rill_sched_ingest(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *tokens,
                             int32_t n) {
    if (sch == NULL || n < 0 || (n > 0 && tokens == NULL)) {
        return RILL_EINVAL;
    }
    if (n == 0) {
        return RILL_OK;
    }
    cmd_t c;
    cmd_init(&c, CMD_INGEST);
    c.u.ingest.sid = sid;
    c.u.ingest.tokens = tokens;
    c.u.ingest.n = n;
    return rill__sched_call(sch, &c);
}

rill_err_t rill_sched_ingest_text(rill_sched_t *sch, rill_sched_sid_t sid, const char *text,
                                  size_t len, bool flush, int64_t *version) {
    if (sch == NULL || (len > 0 && text == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_INGEST_TEXT);
    c.u.ingest_text.sid = sid;
    c.u.ingest_text.text = text;
    c.u.ingest_text.len = len;
    c.u.ingest_text.flush = flush;
    rill_err_t err = rill__sched_call(sch, &c);
    if (err == RILL_OK && version != NULL) {
        *version = c.u.ingest_text.version;
    }
    return err;
}

rill_err_t rill_sched_ingest_async(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *tokens,
                                   int32_t n, rill_sched_ack_fn on_ack, void *user) {
    if (sch == NULL || n < 1 || tokens == NULL) {
        return RILL_EINVAL;
    }
    cmd_t *c = new_cmd(CMD_INGEST);
    int32_t *copy = copy_tokens(tokens, n);
    if (c == NULL || copy == NULL) {
        rill_free(c);
        rill_free(copy);
        return RILL_ENOMEM;
    }
    c->u.ingest.sid = sid;
    c->u.ingest.tokens = c->u.ingest.owned = copy;
    c->u.ingest.n = n;
    c->u.ingest.on_ack = on_ack;
    c->u.ingest.user = user;
    return post(sch, c);
}

rill_err_t rill_sched_ingest_replace(rill_sched_t *sch, rill_sched_sid_t sid, int64_t from_version,
                                     const char *text, size_t len, int64_t *version) {
    if (sch == NULL || (len > 0 && text == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_REPLACE);
    c.u.replace.sid = sid;
    c.u.replace.from = from_version;
    c.u.replace.text = text;
    c.u.replace.len = len;
    rill_err_t err = rill__sched_call(sch, &c);
    if (err == RILL_OK && version != NULL) {
        *version = c.u.replace.version;
    }
    return err;
}

rill_err_t rill_sched_ingest_replace_async(rill_sched_t *sch, rill_sched_sid_t sid,
                                           int64_t from_version, const char *text, size_t len,
                                           rill_sched_replace_fn on_ack, void *user) {
    if (sch == NULL || (len > 0 && text == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t *c = new_cmd(CMD_REPLACE);
    char *copy = rill_malloc(RILL_MEM_SCHEDULER, len + 1); /* + 1: len 0 is a valid text */
    if (c == NULL || copy == NULL) {
        rill_free(c);
        rill_free(copy);
        return RILL_ENOMEM;
    }
    if (len > 0) {
        memcpy(copy, text, len);
    }
    c->u.replace.sid = sid;
    c->u.replace.from = from_version;
    c->u.replace.text = c->u.replace.owned = copy;
    c->u.replace.len = len;
    c->u.replace.on_ack = on_ack;
    c->u.replace.user = user;
    return post(sch, c);
}

/* ---- requests ------------------------------------------------------------------------------- */

/* Queues a request (kind CMD_ASK, _TURN, _STANDING or _SPEC) with its own copy of toks. */
static rill_err_t submit(rill_sched_t *sch, cmd_kind_t kind, rill_sched_sid_t sid,
                         const int32_t *toks, int32_t n, const rill_sched_ask_t *q,
                         rill_sched_rid_t *rid) {
    if (rid != NULL) {
        *rid = 0;
    }
    if (sch == NULL || q == NULL || rid == NULL || n < 1 || toks == NULL || q->n_max < 1) {
        return RILL_EINVAL;
    }
    /* the sampler itself is made by the engine, which knows the session's vocabulary; its
     * parameters are checked here so that bad ones are refused before anything is queued */
    if (q->sampling != NULL && !rill_sampler_params_valid(q->sampling)) {
        return RILL_EINVAL;
    }
    if (q->consistency != RILL_SCHED_ACKNOWLEDGED &&
        (kind != CMD_ASK || q->consistency != RILL_SCHED_EVALUATED)) {
        return RILL_EINVAL; /* out of range, or a request that must follow every input */
    }
    bool sampled = q->sampling != NULL && q->sampling->temp > 0;
    if (sampled && kind == CMD_STANDING) {
        return RILL_EINVAL; /* standing answers are cached for every asker: greedy only */
    }
    cmd_t *c = new_cmd(kind);
    int32_t *copy = copy_tokens(toks, n);
    if (c == NULL || copy == NULL) {
        rill_free(c);
        rill_free(copy);
        return RILL_ENOMEM;
    }
    rill_sched_rid_t id = atomic_fetch_add(&sch->next_rid, 1);
    c->u.ask.sid = sid;
    c->u.ask.rid = id;
    c->u.ask.toks = copy;
    c->u.ask.n = n;
    c->u.ask.ask = *q;
    c->u.ask.ask.sampling = NULL; /* borrowed from the caller: the copy below is used */
    c->u.ask.sampled = sampled;
    if (sampled) {
        c->u.ask.sampling = *q->sampling;
    }
    rill_err_t err = post(sch, c);
    if (err == RILL_OK) {
        *rid = id;
    }
    return err;
}

const char *rill_sched_consistency_name(rill_sched_consistency_t c) {
    switch (c) {
    case RILL_SCHED_ACKNOWLEDGED:
        return "acknowledged";
    case RILL_SCHED_EVALUATED:
        return "evaluated";
    }
    return NULL;
}

rill_err_t rill_sched_consistency_parse(const char *name, rill_sched_consistency_t *out) {
    if (name == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    for (int c = RILL_SCHED_ACKNOWLEDGED; c <= RILL_SCHED_EVALUATED; c++) {
        if (strcmp(name, rill_sched_consistency_name((rill_sched_consistency_t)c)) == 0) {
            *out = (rill_sched_consistency_t)c;
            return RILL_OK;
        }
    }
    return RILL_EINVAL;
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
    cmd_t *c = new_cmd(CMD_CANCEL);
    if (c == NULL) {
        return RILL_ENOMEM;
    }
    c->u.cancel.rid = rid;
    return post(sch, c);
}

rill_err_t rill_sched_spec_commit(rill_sched_t *sch, rill_sched_rid_t spec, const int32_t *input,
                                  int32_t n_input) {
    if (sch == NULL || n_input < 1 || input == NULL) {
        return RILL_EINVAL;
    }
    if (spec == 0 || spec >= atomic_load(&sch->next_rid)) {
        return RILL_ENOTFOUND;
    }
    cmd_t *c = new_cmd(CMD_COMMIT);
    int32_t *copy = copy_tokens(input, n_input);
    if (c == NULL || copy == NULL) {
        rill_free(c);
        rill_free(copy);
        return RILL_ENOMEM;
    }
    c->u.commit.rid = spec;
    c->u.commit.toks = copy;
    c->u.commit.n = n_input;
    return post(sch, c);
}

rill_err_t rill_sched_standing_unregister(rill_sched_t *sch, rill_sched_rid_t qid) {
    if (sch == NULL) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_UNREGISTER);
    c.u.cancel.rid = qid;
    return rill__sched_call(sch, &c);
}

int64_t rill_sched_standing_list(rill_sched_t *sch, rill_sched_sid_t sid,
                                 rill_sched_standing_info_t *out, int64_t cap) {
    if (sch == NULL || cap < 0 || (cap > 0 && out == NULL)) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_STANDING_LIST);
    c.u.standing_list.sid = sid;
    c.u.standing_list.out = out;
    c.u.standing_list.cap = cap;
    rill_err_t err = rill__sched_call(sch, &c);
    return err != RILL_OK ? err : c.u.standing_list.n;
}

/* ---- engine statistics ---------------------------------------------------------------------- */

void rill_sched_stats(rill_sched_t *sch, rill_sched_stats_t *out) {
    cmd_t c;
    cmd_init(&c, CMD_STATS);
    c.u.stats.out = out;
    if (rill__sched_call(sch, &c) != RILL_OK) {
        memset(out, 0, sizeof *out);
        rill_hist_init(&out->step_ns);
    }
}

rill_err_t rill_sched_model_info(rill_sched_t *sch, int32_t model, rill_sched_model_info_t *out) {
    if (sch == NULL || out == NULL || model < 0 || model >= sch->n_models) {
        return RILL_EINVAL;
    }
    cmd_t c;
    cmd_init(&c, CMD_MODEL_INFO);
    c.u.model_info.model = model;
    c.u.model_info.out = out;
    return rill__sched_call(sch, &c);
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
    /* a recognizer fed since the engine went idle (asr_kick) is work it has not seen yet */
    while (!(sch->idle && sch->head == NULL && !sch->asr_kick)) {
        if (pthread_cond_timedwait(&sch->done, &sch->mu, &dl) != 0) {
            err = sch->idle && sch->head == NULL && !sch->asr_kick ? RILL_OK : RILL_ETIMEDOUT;
            break;
        }
    }
    pthread_mutex_unlock(&sch->mu);
    return err;
}
