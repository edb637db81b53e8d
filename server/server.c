/*
 * server.c - rilld (contract: rill_server.h; wire: docs/protocol.md): start-up, the socket
 * thread's loop, shutdown. The jobs are in the other files of server/ (server_internal.h lists
 * them): the models and the scheduler (models.c), the command layer (commands.c, queries.c),
 * the engine's events (events.c), the state directory (state.c), the ZeroMQ door (door_zmq.c).
 *
 * Order at start: the state directory, the models and scheduler, the sessions of the state
 * directory (so no request sees a half-restored daemon), then the sockets; the ready file last,
 * once requests can be taken. At stop: every session snapshotted, the scheduler stopped (its
 * logs synced), then sockets and models freed.
 */
#include "rill_server.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

rill_server_params_t rill_server_default_params(void) {
    return (rill_server_params_t){ .n_models = 0,
                                   .threads = 0,
                                   .kv_cells = 65536,
                                   .request_ep = "tcp://127.0.0.1:7781",
                                   .event_ep = "tcp://127.0.0.1:7782",
                                   .curve_dir = NULL,
                                   .insecure_bind = false,
                                   .state_dir = "rill-state",
                                   .hwm = 10000,
                                   .max_msg = 1 << 20,
                                   .question_format = NULL,
                                   .tick_rate = 20,
                                   .default_window = 2048,
                                   .default_sinks = 16,
                                   .max_sessions = 256,
                                   .fsync = RILL_SESSION_FSYNC_EVERYSEC,
                                   .ready_file = NULL,
                                   .max_delay_ms = 50,
                                   .standing_interval_ms = 250,
                                   .standing_share = 0.5,
                                   .sleep_idle_s = 300,
                                   .sleep_disk = 0,
                                   .attn = RILL_ATTN_FLASH,
                                   .kv_type_k = RILL_DTYPE_F16,
                                   .kv_type_v = RILL_DTYPE_F16,
                                   .http_ep = NULL,
                                   .http_tokens = NULL,
                                   .http_replay = 256,
                                   .http_stream_max = 1 << 20 };
}

static int start(srv_t *s) {
    const rill_server_params_t *p = &s->p;
    if (mkdir(p->state_dir, 0700) != 0 && errno != EEXIST) {
        RILL_LOGE("rilld: cannot create state directory %s: %s", p->state_dir, strerror(errno));
        return -1;
    }
    if (srv_sleep_dir_prepare(s) != 0 || srv_models_start(s) != 0) {
        return -1;
    }
    rill_tick_decoder_params_t tp = rill_tick_decoder_default_params();
    tp.max_batch = SRV_MAX_TICKS;
    rill_err_t err = rill_proto_dec_new((size_t)p->max_msg, &s->dec);
    err = err == RILL_OK ? rill_tick_decoder_new(&tp, &s->tdec) : err;
    s->ticks =
        err == RILL_OK ? rill_malloc(RILL_MEM_SERVER, SRV_MAX_TICKS * sizeof *s->ticks) : NULL;
    if (s->ticks == NULL) {
        RILL_LOGE("rilld: start-up failed: %s", rill_strerror(err != RILL_OK ? err : RILL_ENOMEM));
        return -1;
    }
    srv_restore_all(s);
    if (srv_zmq_start(s) != 0 || srv_http_start(s) != 0) {
        return -1;
    }
    for (int32_t i = 0; i < s->n_models; i++) {
        const srv_model_t *m = &s->models[i];
        RILL_LOGI("rilld: model %s%s: %s, questions %s", m->name, i == 0 ? " (default)" : "",
                  m->path,
                  p->question_format == NULL && m->chat != NULL
                      ? rill_chat_template_name(rill_chat_kind(m->chat))
                      : "in the fixed format");
    }
    RILL_LOGI("rilld: serving %d model%s (requests %s, events %s), %s, state in %s, %s backend, "
              "%s attention, %d threads",
              (int)s->n_models, s->n_models == 1 ? "" : "s", p->request_ep, p->event_ep,
              s->curve           ? "CURVE: only listed client keys"
              : p->insecure_bind ? "INSECURE: no authentication, any address"
                                 : "no authentication (loopback only)",
              p->state_dir, rill_backend_name(s->be), rill_attn_name(rill_backend_attn(s->be)),
              rill_backend_n_threads(s->be));
    if (p->ready_file != NULL) {
        FILE *f = fopen(p->ready_file, "w");
        if (f != NULL) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    return 0;
}

static void shutdown_all(srv_t *s) {
    if (s->sch != NULL) {
        for (srv_sess_t *x = s->sessions; x != NULL; x = x->next) {
            srv_speech_detach(s, x);    /* before the models: recognizers use a model's whisper */
            srv_translation_stop(s, x); /* and its worker, which uses the scheduler */
            if (x->sid == 0) {
                continue; /* transcript-only: no state to keep */
            }
            rill_sched_session_info_t info;
            if (rill_sched_session_info(s->sch, x->sid, &info) == RILL_OK && info.asleep) {
                continue; /* its log (and the snapshot it continues) rebuild it: no wake */
            }
            char path[4096];
            srv_state_path(s, x->name, ".snap", path, sizeof path);
            rill_err_t err = rill_sched_session_snapshot(s->sch, x->sid, path);
            if (err != RILL_OK) {
                RILL_LOGE("rilld: snapshot of %s failed: %s %s (its log still holds it)", x->name,
                          rill_err_name(err), rill_last_error(err));
            }
        }
    }
    if (s->sch != NULL) {
        srv_complete_stop(s);
    }
    srv_models_stop(s); /* the scheduler first: no callback runs after this */
    while (s->pends != NULL) {
        srv_drop_pend(s, s->pends);
    }
    while (s->sessions != NULL) {
        srv_sess_t *x = s->sessions;
        s->sessions = x->next;
        srv_free_sess(x);
    }
    while (s->tombs != NULL) {
        tomb_t *t = s->tombs;
        s->tombs = t->next;
        rill_free(t);
    }
    srv_http_stop(s);
    srv_zmq_stop(s);
    rill_free(s->ticks);
    rill_tick_decoder_destroy(&s->tdec);
    rill_proto_dec_destroy(&s->dec);
    srv_events_deinit(s);
    msgpack_sbuffer_destroy(&s->out);
}

int rill_server_run(const rill_server_params_t *params, volatile sig_atomic_t *stop) {
    srv_t *s = rill_calloc(RILL_MEM_SERVER, 1, sizeof *s);
    if (s == NULL) {
        RILL_LOGE("rilld: out of memory");
        return 1;
    }
    s->p = params != NULL ? *params : rill_server_default_params();
    s->efd = -1;
    s->started_s = (int64_t)time(NULL);
    rill_hist_init(&s->ttft);
    msgpack_sbuffer_init(&s->out);
    if (srv_events_init(s) != 0 || start(s) != 0) {
        shutdown_all(s);
        rill_free(s);
        return 1;
    }
    while (!*stop && srv_zmq_poll(s, 200) == 0) {
    }
    RILL_LOGI("rilld: stopping: snapshotting sessions");
    shutdown_all(s);
    rill_free(s);
    RILL_LOGI("rilld: stopped");
    return 0;
}
