/*
 * rill_server.h - rilld: the daemon that serves sessions over ZeroMQ and HTTP (DESIGN.md
 * section 6; the wire contract is docs/protocol.md).
 *
 * rill_server_run() loads its models (one or more, e.g. a speech recognizer and a language model;
 * each language model gets its own KV pool, a Whisper model a recognizer binding, all share one
 * backend; at least one language model is required), starts the scheduler over them
 * (scheduler/rill_scheduler.h), restores the sessions of the state directory, binds a ROUTER
 * socket for requests and an XPUB socket for events, and serves until *stop becomes non-zero (a
 * signal handler sets it); then it stops taking requests, snapshots every session, closes their
 * logs and returns. Every command is carried out once, by a transport-neutral command layer
 * behind the front doors (ZeroMQ today), which also checks ownership.
 *
 * Messages (start-up, restored sessions, errors) go through rill_log (core/rill_log.h) with the
 * prefix "rilld: "; the program installs the sink.
 *
 * Threads: the calling thread runs the socket loop (all ZeroMQ sockets live there); the
 * scheduler's engine thread runs the model and hands answer tokens back through a queue the
 * loop drains (woken through an eventfd it polls); with CURVE a ZAP handler thread
 * authenticates connections.
 */
#ifndef RILL_SERVER_H
#define RILL_SERVER_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "rill_backend.h"
#include "rill_err.h"
#include "rill_session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most models one daemon loads. */
#define RILL_SERVER_MAX_MODELS 8

typedef struct rill_server_model {
    const char *name; /* 1..63 bytes of [A-Za-z0-9_.-], unique; NULL: the file's name without
                         its directory and ".gguf", other characters turned into '_' */
    const char *path; /* GGUF file */
} rill_server_model_t;

typedef struct rill_server_params {
    rill_server_model_t models[RILL_SERVER_MAX_MODELS]; /* models[0] is the default: sessions
                                                           created without a model use it */
    int32_t n_models;                                   /* 1..RILL_SERVER_MAX_MODELS */
    int32_t threads;             /* compute threads; 0 (default): one per CPU */
    int64_t kv_cells;            /* KV budget of each model's pool in token cells; default 65536 */
    const char *request_ep;      /* default "tcp://127.0.0.1:7781" */
    const char *event_ep;        /* default "tcp://127.0.0.1:7782" */
    const char *curve_dir;       /* CURVE keys (docs/protocol.md, Security); NULL: none */
    bool insecure_bind;          /* allow non-loopback endpoints without CURVE */
    const char *state_dir;       /* logs, snapshots, metadata; default "rill-state" */
    int32_t hwm;                 /* send high-water mark of both sockets; default 10000 */
    int64_t max_msg;             /* largest request frame; default 1 MiB */
    const char *question_format; /* how a question is put to a model: NULL (default) renders it
                                    as a user turn of the model's chat template where rill has
                                    one for it (model/rill_chat.h) and uses
                                    RILL_SERVER_QUESTION_FORMAT otherwise; a format with one %s
                                    is used for every model */
    double tick_rate;            /* lines per second per session before ticks become bars;
                                    default 20 */
    int32_t default_window;      /* window of a session created without one; default 2048 */
    int32_t default_sinks;       /* sinks of such a session; default 16 */
    int32_t max_sessions;        /* default 256 */
    rill_session_fsync_t fsync;  /* ingest logs; default RILL_SESSION_FSYNC_EVERYSEC */
    const char *ready_file;      /* written (with the pid) once both sockets are bound; optional */
    int64_t max_delay_ms;        /* scheduler step bound; default 50 */
    rill_attn_t attn;            /* attention kernel; default RILL_ATTN_FLASH: a question on a
                                    long stream is mostly attention, which flash does 1.3-1.8x
                                    faster, with no length limit (RILL_ATTN_EXACT: llama.cpp's
                                    non-flash bits) */
    const char *http_ep;         /* HTTP front end "HOST:PORT" (docs/protocol.md, HTTP); NULL
                                    (default): none. Loopback only unless http_tokens or
                                    insecure_bind */
    const char *http_tokens;     /* bearer tokens file, lines "TOKEN OWNER"; NULL: every HTTP
                                    caller is the anonymous owner */
    int32_t http_replay;         /* events kept per session for Last-Event-ID; default 256 */
    int64_t http_stream_max;     /* bytes an SSE stream may hold for a client that reads slower
                                    than events come (>= 4096); past it the stream is ended and
                                    counted in event_drops. Default 1 MiB */

    /* The standing budget (rill_scheduler.h, "Standing budget"; docs/protocol.md): */
    int64_t standing_interval_ms; /* least time between a standing query's refresh starts
                                     (standing_min_interval_ns); 0: none; default 250 */
    double standing_share;        /* most share of engine time for refreshes, (0, 1]
                                     (standing_max_share); 1: no cap; default 0.5 */
    rill_dtype_t kv_type_k;       /* K cache type of every model's pool: RILL_DTYPE_F16 (default),
                                     _F32, _Q8_0 or _Q4_0 (rill_session.h, kv_type) */
    rill_dtype_t kv_type_v;       /* V cache type, the same four; default RILL_DTYPE_F16 */
    /* Sleeping sessions (scheduler/rill_scheduler.h "Sleeping sessions"; files under
     * <state_dir>/sleep): */
    int64_t sleep_idle_s; /* a session untouched this long sleeps; 0: only under memory
                             pressure; default 300 */
    int64_t sleep_disk;   /* most bytes of sleep files; past it the coldest keep only their
                             log; 0 (default): no limit */
} rill_server_params_t;

/* The fixed question format (an answer ends at a blank line or a new "Question:"). */
#define RILL_SERVER_QUESTION_FORMAT "\nQuestion: %s\nAnswer:"

/* Defaults as documented per field (no models). */
rill_server_params_t rill_server_default_params(void);

/* Runs the daemon until *stop != 0. Messages go to stderr (start-up mode, errors). Returns 0
 * after a clean shutdown; non-zero when start-up failed (the reason printed). */
int rill_server_run(const rill_server_params_t *params, volatile sig_atomic_t *stop);

#ifdef __cplusplus
}
#endif
#endif /* RILL_SERVER_H */
