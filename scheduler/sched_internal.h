/*
 * sched_internal.h - the scheduler's state and the calls its files make to each other. Private to
 * scheduler/ (contract of the module: rill_scheduler.h).
 *
 * The files, one job each:
 *   scheduler.c  the callers' side: every public call becomes a command (cmd_t) on one
 *                mutex-protected queue; blocking calls wait for theirs; creation and teardown
 *   engine.c     the engine thread: takes the queue between steps, carries commands out
 *                (run_cmd), steps, sleeps when there is nothing to do
 *   admission.c  sessions: cell-budget admission, shared-prompt templates, create / restore /
 *                close
 *   requests.c   the four request state machines (question, turn, standing query, speculation):
 *                waiting for data, forking, decoding, finishing, commits
 *   step.c       the step: the batch builder by class, the step-time model and its cap,
 *                reclaiming forks at exhaustion, one forward pass and what follows it
 *   speech.c     recognizers (rill_asr) as a work class: their audio queues, one recognizer
 *                step per engine loop, the transcript written into consumer sessions
 *
 * Threads: everything below `mu` in rill_sched belongs to the engine thread alone, except the
 * fields marked (mu) and the atomics. Commands of blocking calls live on the caller's stack;
 * asynchronous ones are heap-allocated by post() and freed by the engine (cmd_free).
 */
#ifndef RILL_SCHED_INTERNAL_H
#define RILL_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_ring.h"
#include "rill_scheduler.h"

/* ---- commands ------------------------------------------------------------------------------ */

typedef enum cmd_kind {
    CMD_CREATE,
    CMD_RESTORE,
    CMD_CLOSE,
    CMD_INFO,
    CMD_SNAPSHOT,
    CMD_LIST,
    CMD_INGEST,
    CMD_INGEST_TEXT,
    CMD_REPLACE,
    CMD_ASK, /* the four request kinds share the `ask` member */
    CMD_TURN,
    CMD_STANDING,
    CMD_SPEC,
    CMD_CANCEL,
    CMD_UNREGISTER,
    CMD_STANDING_LIST,
    CMD_COMMIT,
    CMD_STATS,
    CMD_MODEL_INFO,
    CMD_TOKENS,
    CMD_SLEEP, /* sleep.c */
    CMD_PIN,
    CMD_ASR_ATTACH, /* speech.c */
    CMD_ASR_DETACH,
    CMD_ASR_STATS
} cmd_kind_t;

/* One call of the public API on its way to the engine: a tagged union (kind selects the member
 * of u). Inputs of blocking commands are borrowed from the caller; asynchronous commands own
 * their token copies (freed by cmd_free unless a request took them over). */
typedef struct cmd {
    struct cmd *next; /* queue (mu) */
    cmd_kind_t kind;
    bool blocking, done; /* done: set under mu once the engine carried it out */
    rill_err_t err;      /* outcome of a blocking command */
    char *msg;           /* optional detail buffer of a blocking command (caller's) */
    size_t msglen;
    int64_t submit_ns;     /* rill_now_ns() when the caller made it */
    struct cmd *wait_next; /* on a template's waiting list, then on sch->finished */
    union {
        struct {
            const rill_sched_session_params_t *sp;
            rill_sched_sid_t *out;
        } create;
        struct {
            int32_t model;
            const char *snapshot, *log;
            rill_session_fsync_t fsync;
            rill_sched_sid_t *out;
        } restore;
        struct {
            rill_sched_sid_t sid;
        } close;
        struct {
            rill_sched_sid_t sid;
            rill_sched_session_info_t *out;
        } info;
        struct {
            rill_sched_sid_t sid;
            const char *path;
        } snapshot;
        struct { /* CMD_SLEEP, CMD_PIN */
            rill_sched_sid_t sid;
            bool pin;
        } sleep;
        struct {
            rill_sched_sid_t *out;
            int64_t cap, n;
        } list;
        struct {
            rill_sched_sid_t sid;
            int32_t *out;
            int64_t cap, n;
        } tokens;
        struct {
            rill_sched_sid_t sid;
            const int32_t *tokens; /* borrowed (blocking) or == owned (async) */
            int32_t n;
            int32_t *owned;
            rill_sched_ack_fn on_ack; /* async only */
            void *user;
        } ingest;
        struct {
            rill_sched_sid_t sid;
            const char *text;
            size_t len;
            bool flush;
            int64_t version; /* out: the session's version after it */
        } ingest_text;
        struct {
            rill_sched_sid_t sid;
            int64_t from;
            const char *text; /* borrowed (blocking) or == owned (async) */
            size_t len;
            char *owned;
            rill_sched_replace_fn on_ack; /* async only */
            void *user;
            int64_t version; /* out: the session's version after it */
        } replace;
        struct { /* CMD_ASK, CMD_TURN, CMD_STANDING, CMD_SPEC */
            rill_sched_sid_t sid;
            rill_sched_rid_t rid;
            int32_t *toks; /* owned: question, turn input or guess (NULL once taken over) */
            int32_t n;
            rill_sched_ask_t ask;           /* ask.sampling is NULL: see the two below */
            bool sampled;                   /* the caller asked for temp > 0 */
            rill_sampler_params_t sampling; /* its copy of the parameters, when sampled */
        } ask;
        struct { /* CMD_CANCEL, CMD_UNREGISTER */
            rill_sched_rid_t rid;
        } cancel;
        struct {
            rill_sched_rid_t rid;
            int32_t *toks; /* owned: the real input (NULL once taken over) */
            int32_t n;
        } commit;
        struct {
            rill_sched_sid_t sid;
            rill_sched_standing_info_t *out;
            int64_t cap, n;
        } standing_list;
        struct {
            rill_sched_stats_t *out;
        } stats;
        struct {
            int32_t model;
            rill_sched_model_info_t *out;
        } model_info;
        struct { /* CMD_ASR_ATTACH, _DETACH, _STATS */
            rill_sched_asr_t *a;
            rill_sched_asr_stats_t *out;
        } asr;
    } u;
} cmd_t;

/* ---- engine state -------------------------------------------------------------------------- */

typedef struct model model_t;

/* A shared system prompt: evaluated once in its own session, which sessions fork. */
typedef struct tmpl {
    struct tmpl *next;
    model_t *m;
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
    model_t *m;
    rill_session_t *s;
    int32_t reserved;
    tmpl_t *tmpl;
    int32_t n_waiting;                 /* requests waiting for its queued data */
    rill_sched_end_watch_t *end_watch; /* borrowed, NULL: none (end_watch.c) */
    /* sleeping (sleep.c) */
    bool pinned;
    bool asleep;     /* on sch->sleeping with s == NULL */
    int32_t tier;    /* asleep: RILL_SCHED_TIER_*; the sleep file exists for TIER_SNAPSHOT */
    uint64_t used;   /* sch->use_clock when a command last touched it (LRU order) */
    int64_t used_ns; /* rill__sched_now() then (idle sleeping) */
    char *log_path;  /* owned: its ingest log (NULL: none) */
    char *base_path; /* owned: the snapshot its log continues (NULL: the log starts at 1) */
    rill_session_fsync_t fsync;
    int64_t sleep_bytes;           /* its sleep file's size (0: none) */
    rill_sched_session_info_t zzz; /* the info as it fell asleep */
    int64_t sleeps, wakes, last_wake_ns;
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
    rill_sampler_t *sampler; /* owned; NULL: greedy. Has accepted question and answer so far */
    int32_t *question;       /* owned: question, turn input, or the speculation's guess */
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
    int64_t last_start_ns; /* rill__sched_now() its latest refresh started (0: none yet) */
    uint8_t held;          /* HELD_* of the budget limits that have held back its next refresh
                              (each counted once in the stats), cleared when it starts */
} req_t;

/* req_t.held bits: the limits of the standing budget (rill_scheduler.h, "Standing budget"). */
#define HELD_INTERVAL 1u
#define HELD_SHARE    2u

/* One model: its pool (forward, backend), its admission budget, and its step state. Engine
 * thread, except the immutable fields set at creation (name .. tok). */
struct model {
    char name[RILL_SCHED_MODEL_NAME];
    int32_t index;
    rill_session_pool_t *pool;
    int32_t P, n_pages, max_batch, n_ctx;
    int32_t step_tokens, overflow; /* the parameters as resolved for this pool */
    const rill_tokenizer_t *tok;
    int32_t n_sessions, reserved;
    uint64_t rr; /* round-robin rotation */
    /* step time model t = a + b * tokens, fitted by least squares with exponential forgetting
     * (weights decay by FORGET per step): sums of w, w*T, w*t, w*T^2, w*T*t */
    double fw, ft, fy, ftt, fty;
    double ns_per_tok, ns_fixed; /* b and a */
    /* the batch built for the next pass */
    int32_t n_items;
    bool questions;         /* it carries question work */
    rill_sched_class_t top; /* its highest class */
    rill_session_step_t *items;
    req_t **item_req;
    sess_t **item_sess;
    rill_sched_class_t *item_class;
    bool stuck; /* its pool is exhausted with nothing to reclaim: no pass until a command */
    /* counters of rill_sched_model_info_t */
    int64_t steps, busy_ns, tokens[RILL_SCHED_N_CLASSES];
};

struct rill_sched {
    model_t *models; /* [n_models], fixed at creation */
    int32_t n_models;
    rill_sched_params_t prm;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    cmd_t *head, *tail; /* command queue (mu) */
    bool stop;          /* (mu) */
    bool idle;          /* (mu) engine asleep with nothing to do */
    bool preemptible;   /* (mu) the pass running carries no question work */
    atomic_int preempt; /* set to stop that pass (rill_forward_set_cancel on every forward) */
    _Atomic uint64_t next_rid;
    /* engine-thread state */
    sess_t *sessions;
    sess_t *sleeping; /* asleep sessions (sleep.c), in id order; sessions holds the awake */
    uint64_t use_clock;
    int64_t sleep_disk;   /* bytes of sleep files now */
    char sleep_dir[3840]; /* prm.sleep_dir's copy ("" : no sleeping) */
    tmpl_t *templates;
    req_t *reqs;
    uint64_t next_sid;
    int32_t n_sessions;
    uint64_t rr;     /* rotation among models of equal priority */
    model_t **order; /* [n_models] scratch: the models of a step in the order they run */
    rill_sched_stats_t st;
    cmd_t *finished; /* blocking commands carried out, to be marked done under mu */
    /* the standing share's decayed sums at sh_t (ns): refresh time S and wall weight W */
    double sh_s, sh_w;
    int64_t sh_t;
    int64_t wake_at;        /* set by a step that held a refresh back: when it may start (0: none);
                               the engine sleeps no longer than that */
    bool asr_kick;          /* (mu) a recognizer was fed or finished since the engine last looked */
    rill_sched_asr_t *asrs; /* attached recognizers (speech.c), in attach order */
    uint64_t asr_rr;        /* rotation among ready recognizers */
};

/* A recognizer (speech.c). The producer side (feed, finish) touches only q's producer end and
 * the atomics; everything from `asr` on is the engine thread's. */
struct rill_sched_asr {
    rill_sched_t *sch;
    rill_ring_t q;                /* float samples, producer: the feeding thread */
    _Atomic(int64_t) queued;      /* samples accepted by feed */
    _Atomic(int64_t) finish_at;   /* finish once this many samples are taken (-1: none) */
    _Atomic(uint64_t) finish_gen; /* finishes asked */
    atomic_bool closed;           /* a restart failed: feeds are refused */
    /* engine thread */
    struct rill_sched_asr *next;
    rill_asr_t *asr;
    rill_whisper_t *w;
    const rill_model_t *model;
    rill_asr_params_t ap;
    char language[32];
    rill_sched_sid_t consumer;
    rill_sched_asr_fn on_update;
    void *user;
    int64_t taken;      /* samples moved into rill_asr (all streams) */
    int64_t base_ms;    /* audio of the streams before this one */
    int64_t tail_from;  /* consumer version of the tentative tail's input (-1: none) */
    bool any_committed; /* text was committed (for the joining space) */
    bool stalled;       /* the last step failed: wait for more audio or a new finish */
    int64_t stalled_taken;
    uint64_t stalled_gen;
    float *scratch; /* [SPEECH_SCRATCH] */
    char *tail;     /* the last tentative tail reported */
    size_t tail_len, tail_cap;
    char *text; /* consumer text being built */
    size_t text_cap;
    rill_sched_asr_stats_t st;
    rill_asr_stats_t done; /* counters of the finished streams' recognizers, summed */
};

/* ---- shared helpers ------------------------------------------------------------------------ */

int64_t rill__sched_now(void);

/* Writes the detail of a blocking command into its caller's buffer (if any). */
void rill__sched_msg(cmd_t *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

int32_t rill__sched_ceil_div(int64_t a, int32_t b);

/* True for the commands that submit question work (ask, turn): they preempt lower steps. */
bool rill__sched_is_question(const cmd_t *c);

/* Runs a blocking command to completion (scheduler.c); its detail becomes the caller's
 * rill_last_error. RILL_ECLOSED when the scheduler is stopping. */
rill_err_t rill__sched_call(rill_sched_t *sch, cmd_t *c);

/* Frees an asynchronous command and whatever it still owns. */
void rill__sched_cmd_free(cmd_t *c);

/* Queues c on the finished list (a blocking command carried out, or a waiting creation). */
void rill__sched_finished(rill_sched_t *sch, cmd_t *c);

/* ---- admission.c --------------------------------------------------------------------------- */

sess_t *rill__sched_find_sess(rill_sched_t *sch, rill_sched_sid_t id);

/* Carries out CMD_CREATE; false when the creation waits for a shared prompt (answered later by
 * rill__sched_templates_ready). */
bool rill__sched_create(rill_sched_t *sch, cmd_t *c);
void rill__sched_restore(rill_sched_t *sch, cmd_t *c);

/* Ends the session's requests (RILL_ECANCELED), destroys it, releases its reservation. */
void rill__sched_close_sess(rill_sched_t *sch, sess_t *x);

/* Finishes the creations waiting for templates whose prompt is now evaluated. */
void rill__sched_templates_ready(rill_sched_t *sch);

/* Fails the creations still waiting and frees every template (engine shutdown). */
void rill__sched_templates_free(rill_sched_t *sch);

/* Pages a session of m with this window policy reserves (as rill_session_new rounds it). */
int32_t rill__sched_reservation(const model_t *m, int32_t sinks, int32_t window);

/* ---- sleep.c ------------------------------------------------------------------------------- */

/* The session id names, awake or asleep (NULL: none). */
sess_t *rill__sched_find_any(rill_sched_t *sch, rill_sched_sid_t id);

/* The session id names, awake: woken first when asleep and marked used (LRU). NULL when there is
 * none (*err RILL_ENOTFOUND) or its wake failed (*err its error; the detail in rill_last_error
 * and in c's message when c is not NULL). */
sess_t *rill__sched_use(rill_sched_t *sch, cmd_t *c, rill_sched_sid_t id, rill_err_t *err);

/* Marks x used now (LRU). */
void rill__sched_touch(rill_sched_t *sch, sess_t *x);

/* Sleeps least recently used sessions of m until need more pages fit its reservable budget.
 * False when they cannot (nothing left that may sleep). */
bool rill__sched_make_room(rill_sched_t *sch, model_t *m, int32_t need);

/* One least recently used awake session of m that may sleep is put to sleep (to free pages a
 * restore needs); false when there is none. */
bool rill__sched_sleep_one(rill_sched_t *sch, model_t *m);

/* Sleeps the sessions idle past prm.sleep_idle_ns; returns when the next one is due
 * (rill__sched_now() clock; 0: none). */
int64_t rill__sched_sleep_idle(rill_sched_t *sch);

/* CMD_SLEEP and CMD_PIN. */
void rill__sched_sleep_cmd(rill_sched_t *sch, cmd_t *c);

/* Remembers how x is rebuilt from durable files (copies; false: out of memory). */
bool rill__sched_set_paths(sess_t *x, const char *log_path, const char *base_path,
                           rill_session_fsync_t fsync);

/* Frees a sleeping session's sleep file and paths (closing or teardown). */
void rill__sched_sleep_forget(rill_sched_t *sch, sess_t *x);

/* ---- requests.c ---------------------------------------------------------------------------- */

req_t *rill__sched_find_req(rill_sched_t *sch, rill_sched_rid_t id);
rill_sched_class_t rill__sched_req_class(const req_t *r);

/* Tokens of the session's stream acknowledged so far (evaluated, evicted included, and
 * queued). */
int64_t rill__sched_acknowledged(const sess_t *x);

/* True when every token a waiting request must see has been evaluated. */
bool rill__sched_data_ready(const req_t *r);

/* Delivers the end of a request (on_done) and frees it. */
void rill__sched_finish(rill_sched_t *sch, req_t *r, rill_err_t status, const char *message,
                        bool adopted);

/* Ends a refresh of a standing query without an answer (it stays registered). */
void rill__sched_abandon(rill_sched_t *sch, req_t *r);

/* Unregisters a standing query (no callback). */
void rill__sched_drop_standing(rill_sched_t *sch, req_t *r);

/* The session's data changed: standing answers are stale; refreshes still prefilling go. */
void rill__sched_data_changed(rill_sched_t *sch, sess_t *x);

/* Moves a waiting request onto a fork of its session (its data is evaluated). */
void rill__sched_start_fork(rill_sched_t *sch, req_t *r);

/* An asynchronous request command that never became a request: on_done with err. */
void rill__sched_fail_async(cmd_t *c, rill_err_t err, const char *msg);

/* CMD_ASK, _TURN, _STANDING, _SPEC; CMD_CANCEL; CMD_COMMIT. */
void rill__sched_submit(rill_sched_t *sch, cmd_t *c);
void rill__sched_cancel(rill_sched_t *sch, cmd_t *c);
void rill__sched_commit(rill_sched_t *sch, cmd_t *c);

/* A picked token of a request's answer at time t. */
void rill__sched_on_pick(rill_sched_t *sch, req_t *r, int32_t tok, int64_t t);

/* ---- step.c -------------------------------------------------------------------------------- */

/* The step cap m's time model gives now (rill_sched_model_info_t.chunk_cap). */
int32_t rill__sched_step_cap(const rill_sched_t *sch, const model_t *m);

/* Runs one step; false when there was nothing to do. */
bool rill__sched_step(rill_sched_t *sch);

/* Holds m's built batch to what a pass may take after an earlier pass of the same step carried
 * question work: its question work whole, INGEST up to max_tokens in all, no STANDING or SPEC
 * (step.c). */
void rill__sched_limit(model_t *m, int32_t max_tokens);

/* The standing share of engine time at time t (rill_scheduler.h, "Standing budget"). */
double rill__sched_share(const rill_sched_t *sch, int64_t t);

/* Lets models stuck on an exhausted pool try again (a command may have freed pages). */
void rill__sched_unstick(rill_sched_t *sch);

/* ---- speech.c ------------------------------------------------------------------------------ */

/* CMD_ASR_ATTACH, _DETACH, _STATS. */
void rill__sched_asr_cmd(rill_sched_t *sch, cmd_t *c);

/* Moves queued audio into every recognizer and runs at most one recognizer step; false when
 * there was nothing to do. */
bool rill__sched_speech_step(rill_sched_t *sch);

/* Frees every recognizer still attached (engine shutdown). */
void rill__sched_speech_free(rill_sched_t *sch);
/* ---- end_watch.c --------------------------------------------------------------------------- */

/* NULL when every id of w is below n_vocab (or w is NULL), else a detail naming the first that
 * is not (thread-local storage, valid until the next call on the thread). */
const char *rill__sched_end_watch_check(const rill_sched_end_watch_t *w, int32_t n_vocab);

/* After m's evaluated pass: updates the end watches of the sessions whose own data items got
 * logits (step.c asks for them on the last queued token of a watched session). */
void rill__sched_end_watch_pass(model_t *m);

/* ---- engine.c ------------------------------------------------------------------------------ */

/* Session input on the engine thread, as the commands give it: text (flush: the text and a
 * flush as one input, rill_session_feed_text_end), and a replace from version `from`. Both
 * refuse with RILL_EFULL beyond RILL_SCHED_MAX_QUEUED queued tokens, lower the waiting requests'
 * targets after a replace, and mark standing answers stale when the version moved. The error's
 * detail is the engine thread's rill_last_error. */
rill_err_t rill__sched_input_text(rill_sched_t *sch, sess_t *x, const char *text, size_t len,
                                  bool flush);
rill_err_t rill__sched_input_replace(rill_sched_t *sch, sess_t *x, int64_t from, const char *text,
                                     size_t len);

/* The engine thread's body (arg: the scheduler). */
void *rill__sched_engine(void *arg);

#endif /* RILL_SCHED_INTERNAL_H */
