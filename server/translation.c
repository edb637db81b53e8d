/*
 * translation.c - rilld's translation sessions (contract: server_internal.h; wire:
 * docs/protocol.md, "Translation sessions"): a speech session whose committed transcript is
 * translated as it arrives (scheduler/rill_translate.h), publishing <session>/translation
 * events beside its <session>/transcript events.
 *
 * Shape. `session.create {model: LLM, asr: WHISPER, translate: POLICY}` makes a session with a
 * transcript-only recognizer (no consumer: the transcript is not fed to a language-model
 * session of its own) and a rill_translate_t on the language model, whose own scheduler
 * session holds the instruction and the turns. The socket thread hands every transcript
 * update's committed delta to the translation as it publishes the transcript event
 * (srv_translation_feed); a final update (the client's flush: the end of an utterance) is a
 * pause, which closes the open sentence.
 *
 * Threads. rill_translate blocks on the scheduler for every draft and turn (up to seconds on a
 * 1.5B model), so it cannot run on the socket thread, which must keep answering every client.
 * Each translation session has one worker thread that owns its rill_translate_t from creation
 * to destruction; it waits on a condition variable for text. Chosen over one worker for all
 * translations (a slow talk would hold up the others: the scheduler batches their drafts only
 * when they are in flight together) and over a state machine on the socket thread driving the
 * non-blocking requests (rill_translate's policy is written as blocking calls; re-writing it
 * as callbacks would duplicate it). The cost is a thread per translation session, which a
 * daemon with a handful of talks can afford.
 *
 * Queue. The committed text waiting for the worker is one byte buffer under the mutex,
 * bounded (SRV_TL_MAX_QUEUE): the recognizer commits a few words a second, far below what
 * it holds; text beyond it is dropped and reported (an event with status EFULL), never blocking
 * the socket thread. Emissions go back to the socket thread through a lock-free list (one
 * record per emission, never dropped: a caption missing words is wrong forever) and are
 * published by the socket thread, which finds the session by its key, as transcript updates
 * are (server/speech.c).
 *
 * Stop. srv_translation_stop interrupts the worker (rill_translate_interrupt: the request in
 * flight is cancelled, every later call returns ECANCELED at once), wakes and joins it, then
 * destroys the translation on the socket thread; so session.close and shutdown wait at most
 * about one engine step for a worker in a draft.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_translate.h"
#include "server_internal.h"

#define SRV_TL_MAX_QUEUE (256 * 1024) /* bytes of committed text waiting for the worker */

struct srv_tl {
    srv_t *s;
    uint64_t key; /* the session's srv_sess_t.key */
    rill_translate_t *t;
    char policy[32];
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu: */
    char *q; /* committed text waiting */
    size_t qlen, qcap;
    bool pause; /* a pause after q */
    bool stop;
    int64_t dropped;
    /* the worker's own */
    char *work;
    size_t work_cap;
    _Atomic(int64_t) audio_ms; /* audio the recognizer had taken at the latest update */
    _Atomic(int64_t) emitted, emissions;
};

/* One emission or error for the socket thread. */
typedef struct srv_tle {
    struct srv_tle *next;
    uint64_t key;
    rill_err_t status;
    char message[160];
    int64_t audio_ms, src_words, segment, compute_ns;
    bool segment_end;
    size_t len;
    char text[]; /* len bytes and a NUL */
} srv_tle_t;

static void push(srv_t *s, srv_tle_t *e) {
    srv_tle_t *head = atomic_load(&s->tles);
    do {
        e->next = head;
    } while (!atomic_compare_exchange_weak(&s->tles, &head, e));
    srv_events_wake(s);
}

static void push_error(srv_tl_t *tl, rill_err_t err, const char *msg) {
    srv_tle_t *e = rill_calloc(RILL_MEM_SERVER, 1, sizeof *e + 1);
    if (e == NULL) {
        RILL_LOGE("rilld: out of memory reporting a translation error");
        return;
    }
    e->key = tl->key;
    e->status = err;
    snprintf(e->message, sizeof e->message, "%s", msg);
    e->audio_ms = atomic_load(&tl->audio_ms);
    e->segment = -1;
    push(tl->s, e);
}

/* rill_translate's callback, on the worker thread. */
static void on_emit(void *user, const rill_translate_emit_t *em) {
    srv_tl_t *tl = user;
    srv_tle_t *e = rill_malloc(RILL_MEM_SERVER, sizeof *e + em->len + 1);
    if (e == NULL) {
        RILL_LOGE("rilld: out of memory delivering a translation");
        return;
    }
    memset(e, 0, sizeof *e);
    e->key = tl->key;
    e->status = RILL_OK;
    e->audio_ms = atomic_load(&tl->audio_ms);
    e->src_words = em->src_words;
    e->segment = em->segment;
    e->segment_end = em->segment_end;
    e->compute_ns = em->compute_ns;
    e->len = em->len;
    memcpy(e->text, em->text, em->len);
    e->text[em->len] = '\0';
    atomic_fetch_add(&tl->emitted, em->n_words);
    atomic_fetch_add(&tl->emissions, 1);
    push(tl->s, e);
}

static void *worker(void *arg) {
    srv_tl_t *tl = arg;
    pthread_mutex_lock(&tl->mu);
    for (;;) {
        while (!tl->stop && tl->qlen == 0 && !tl->pause) {
            pthread_cond_wait(&tl->cv, &tl->mu);
        }
        if (tl->stop) {
            break;
        }
        /* take the text: swap the buffers so the socket thread appends to an empty one */
        char *w = tl->q;
        size_t wcap = tl->qcap, n = tl->qlen;
        bool pause = tl->pause;
        tl->q = tl->work;
        tl->qcap = tl->work_cap;
        tl->qlen = 0;
        tl->pause = false;
        tl->work = w;
        tl->work_cap = wcap;
        pthread_mutex_unlock(&tl->mu);
        rill_err_t err = rill_translate_feed_text(tl->t, w, n, pause, NULL);
        if (err != RILL_OK && err != RILL_ECANCELED) {
            char msg[160];
            snprintf(msg, sizeof msg, "translation: %s", rill_last_error(err));
            push_error(tl, err, msg);
        }
        pthread_mutex_lock(&tl->mu);
    }
    pthread_mutex_unlock(&tl->mu);
    return NULL;
}

rill_err_t srv_translation_start(srv_t *s, srv_sess_t *x, const rill_proto_req_t *r, char *why,
                                 size_t why_cap) {
    const rill_proto_str_t *policy = &r->translate;
    const srv_model_t *m = &s->models[x->model];
    if (m->is_asr || m->chat == NULL) {
        snprintf(why, why_cap,
                 m->is_asr ? "args.translate: the session's model (%s) is a recognizer; name the "
                             "language model that translates with model: NAME"
                           : "args.translate: model %s has no chat template rill renders (an "
                             "instruct GGUF with ChatML or Llama 3 is needed)",
                 m->name);
        return m->is_asr ? RILL_EINVAL : RILL_EUNSUPPORTED;
    }
    rill_translate_params_t tp = rill_translate_default_params();
    char name[32];
    if (policy->len >= sizeof name) {
        snprintf(why, why_cap,
                 "args.translate: unknown policy (local-agreement, wait-k, "
                 "wait-N, sentence)");
        return RILL_EINVAL;
    }
    memcpy(name, policy->p, policy->len);
    name[policy->len] = '\0';
    if (rill_translate_policy_parse(&tp, name) != RILL_OK) {
        snprintf(why, why_cap,
                 "args.translate: unknown policy \"%s\" (local-agreement, wait-k, wait-N, "
                 "sentence)",
                 name);
        return RILL_EINVAL;
    }
    srv_tl_t *tl = rill_calloc(RILL_MEM_SERVER, 1, sizeof *tl);
    if (tl == NULL) {
        snprintf(why, why_cap, "out of memory");
        return RILL_ENOMEM;
    }
    tl->s = s;
    tl->key = x->key;
    snprintf(tl->policy, sizeof tl->policy, "%s", name);
    atomic_init(&tl->audio_ms, 0);
    atomic_init(&tl->emitted, 0);
    atomic_init(&tl->emissions, 0);
    pthread_mutex_init(&tl->mu, NULL);
    pthread_cond_init(&tl->cv, NULL);
    tp.tok = m->tok;
    tp.chat = m->chat;
    tp.model = m->sched;
    int32_t n_ctx = rill_session_pool_n_ctx(m->pool);
    /* the window must leave the instruction and a draft room in the model's context */
    if (tp.window + tp.max_reply_tokens + 128 > n_ctx) {
        tp.window = n_ctx - tp.max_reply_tokens - 128;
        if (tp.window < tp.max_reply_tokens + 64) { /* a small model: share what there is */
            tp.max_reply_tokens = (n_ctx - 192) / 2;
            tp.window = n_ctx - tp.max_reply_tokens - 128;
        }
    }
    char *instruction = NULL;
    if (r->present & RILL_PROTO_HAS_WINDOW) {
        tp.window = (int32_t)r->window; /* rill_translate_new judges it */
    }
    if (r->present & RILL_PROTO_HAS_SYSTEM) {
        instruction = rill_malloc(RILL_MEM_SERVER, r->system.len + 1);
        if (instruction == NULL) {
            snprintf(why, why_cap, "out of memory");
            pthread_mutex_destroy(&tl->mu);
            pthread_cond_destroy(&tl->cv);
            rill_free(tl);
            return RILL_ENOMEM;
        }
        memcpy(instruction, r->system.p, r->system.len);
        instruction[r->system.len] = '\0';
        tp.instruction = instruction; /* copied by rill_translate_new */
    }
    tp.on_emit = on_emit;
    tp.user = tl;
    const bool tiny = !(r->present & RILL_PROTO_HAS_WINDOW) &&
                      (tp.max_reply_tokens < 1 || tp.window < tp.max_reply_tokens + 64);
    rill_err_t err = tiny ? RILL_ERANGE : rill_translate_new(s->sch, &tp, &tl->t);
    rill_free(instruction);
    if (err != RILL_OK) {
        snprintf(why, why_cap, "translation: %s",
                 tiny ? "the model's context is too small" : rill_last_error(err));
        pthread_mutex_destroy(&tl->mu);
        pthread_cond_destroy(&tl->cv);
        rill_free(tl);
        return err;
    }
    if (pthread_create(&tl->th, NULL, worker, tl) != 0) {
        snprintf(why, why_cap, "translation: cannot start its thread");
        rill_translate_destroy(&tl->t);
        pthread_mutex_destroy(&tl->mu);
        pthread_cond_destroy(&tl->cv);
        rill_free(tl);
        return RILL_ENOMEM;
    }
    tl->started = true;
    x->tl = tl;
    return RILL_OK;
}

void srv_translation_feed(srv_t *s, srv_sess_t *x, const char *text, size_t len, bool pause,
                          int64_t audio_ms) {
    (void)s;
    srv_tl_t *tl = x->tl;
    if (tl == NULL) {
        return;
    }
    atomic_store(&tl->audio_ms, audio_ms);
    if (len == 0 && !pause) {
        return;
    }
    bool full = false;
    pthread_mutex_lock(&tl->mu);
    if (tl->qlen + len + 2 > SRV_TL_MAX_QUEUE) {
        full = true;
        tl->dropped += (int64_t)len;
    } else if (len > 0) {
        if (tl->qlen + len + 2 > tl->qcap) {
            size_t cap = tl->qcap < 1024 ? 1024 : tl->qcap;
            while (cap < tl->qlen + len + 2) {
                cap *= 2;
            }
            char *q = rill_realloc(RILL_MEM_SERVER, tl->q, cap);
            if (q == NULL) {
                full = true;
                tl->dropped += (int64_t)len;
            } else {
                tl->q = q;
                tl->qcap = cap;
            }
        }
        if (!full) {
            /* deltas are led by a space when text came before; keep words apart anyway */
            tl->q[tl->qlen++] = ' ';
            memcpy(tl->q + tl->qlen, text, len);
            tl->qlen += len;
        }
    }
    tl->pause = tl->pause || pause;
    pthread_cond_broadcast(&tl->cv);
    pthread_mutex_unlock(&tl->mu);
    if (full) {
        push_error(tl, RILL_EFULL,
                   "translation: the committed text waiting for the translation exceeds its "
                   "queue; words were dropped");
    }
}

void srv_translation_stop(srv_t *s, srv_sess_t *x) {
    srv_tl_t *tl = x->tl;
    if (tl == NULL) {
        return;
    }
    pthread_mutex_lock(&tl->mu);
    tl->stop = true;
    pthread_cond_broadcast(&tl->cv);
    pthread_mutex_unlock(&tl->mu);
    rill_translate_interrupt(tl->t);
    if (tl->started) {
        pthread_join(tl->th, NULL);
    }
    rill_translate_destroy(&tl->t);
    srv_translations_drain(s); /* its last emissions, while the session is still listed */
    pthread_mutex_destroy(&tl->mu);
    pthread_cond_destroy(&tl->cv);
    rill_free(tl->q);
    rill_free(tl->work);
    rill_free(tl);
    x->tl = NULL;
}

void srv_translation_pack_stats(srv_sess_t *x, msgpack_packer *pk) {
    srv_pk_str(pk, "translation");
    srv_tl_t *tl = x->tl;
    if (tl == NULL) {
        msgpack_pack_nil(pk);
        return;
    }
    pthread_mutex_lock(&tl->mu);
    int64_t queued = (int64_t)tl->qlen, dropped = tl->dropped;
    pthread_mutex_unlock(&tl->mu);
    msgpack_pack_map(pk, 5);
    srv_pk_kv_str(pk, "policy", tl->policy);
    srv_pk_kv_int(pk, "emitted_words", atomic_load(&tl->emitted));
    srv_pk_kv_int(pk, "emissions", atomic_load(&tl->emissions));
    srv_pk_kv_int(pk, "queued_bytes", queued);
    srv_pk_kv_int(pk, "dropped_bytes", dropped);
}

void srv_translations_drain(srv_t *s) {
    srv_tle_t *list = atomic_exchange(&s->tles, NULL), *order = NULL;
    while (list != NULL) { /* newest first: publish in the order they were made */
        srv_tle_t *nx = list->next;
        list->next = order;
        order = list;
        list = nx;
    }
    while (order != NULL) {
        srv_tle_t *nx = order->next;
        srv_sess_t *x = s->sessions;
        while (x != NULL && x->key != order->key) {
            x = x->next;
        }
        if (x != NULL) {
            msgpack_packer pk;
            srv_event_begin(s, &pk, 8, ++x->seq_translation, x, "translation");
            srv_pk_str(&pk, "emit");
            srv_pk_strn(&pk, order->text, order->len);
            srv_pk_kv_dbl(&pk, "src_s", (double)order->audio_ms / 1000);
            srv_pk_kv_int(&pk, "src_words", order->src_words);
            srv_pk_kv_dbl(&pk, "compute_s", (double)order->compute_ns / 1e9);
            srv_pk_kv_int(&pk, "segment", order->segment);
            srv_pk_str(&pk, "segment_end");
            if (order->segment_end) {
                msgpack_pack_true(&pk);
            } else {
                msgpack_pack_false(&pk);
            }
            srv_pk_kv_str(&pk, "status", rill_err_name(order->status));
            srv_pk_kv_str(&pk, "message", order->message);
            srv_publish(s, x, "translation");
        }
        rill_free(order);
        order = nx;
    }
}

void srv_translations_free(srv_t *s) {
    srv_tle_t *e = atomic_exchange(&s->tles, NULL);
    while (e != NULL) {
        srv_tle_t *nx = e->next;
        rill_free(e);
        e = nx;
    }
}
