/*
 * server_internal.h - the parts of server/ shared between its files. Private to the module.
 *
 * The files, one job each:
 *   server.c    rill_server_run: start-up, the socket thread's poll loop, shutdown
 *   models.c    the model registry: every --model loaded once (tokenizer, chat template,
 *               forward, session pool; a Whisper model: its rill_whisper_t) over one backend
 *   metrics.c   server.metrics: the figures in the Prometheus text format
 *   commands.c  the transport-neutral command layer: a request frame in (decoded and checked by
 *               wire/'s rill_proto_decode), ownership checked, the command carried out through
 *               the scheduler, its reply and events encoded once and handed to the door the
 *               request came through (replies) or to every door (events)
 *   queries.c   questions and standing queries: putting them to the model (chat template or the
 *               fixed format), their answers as tokens arrive and when they end
 *   events.c    the engine thread's callbacks and the bounded queue that carries their events
 *               to the socket thread
 *   speech.c    speech sessions: a session's recognizer, ingest.audio, transcript events
 *   translation.c  translation sessions: a worker thread per session translating its
 *               committed transcript (rill_translate), translation events
 *   state.c     the state directory: session metadata, standing queries, restore at start-up
 *   door_zmq.c  the ZeroMQ front door: ROUTER requests, XPUB events, CURVE subscriptions
 *   auth.c      CURVE keys and the ZAP handler
 *
 * Threads: everything in srv_t belongs to the socket thread, except the event queue (events.c:
 * the engine thread is its only producer), the translation emissions list (translation.c: the
 * translation workers push, the socket thread drains) and the scheduler (thread-safe). A
 * translation worker touches only its own srv_tl_t (its queue under its mutex) and its
 * rill_translate_t.
 */
#ifndef RILL_SERVER_INTERNAL_H
#define RILL_SERVER_INTERNAL_H

#include <jansson.h>
#include <msgpack.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_audio.h"
#include "rill_chat.h"
#include "rill_forward.h"
#include "rill_hist.h"
#include "rill_market.h"
#include "rill_model.h"
#include "rill_proto.h"
#include "rill_ring.h"
#include "rill_scheduler.h"
#include "rill_server.h"
#include "rill_tokenizer.h"
#include "rill_whisper.h"

#define SRV_OWNER_LEN   41  /* an owner name (1..40 bytes) + NUL; "" for the anonymous owner */
#define SRV_ADDR_MAX    264 /* bytes of a door's reply address */
#define SRV_MAX_TICKS   4096
#define SRV_CMD_INVALID RILL_PROTO_N_CMDS       /* the command label of undecodable frames */
#define SRV_CMD_LABELS  (RILL_PROTO_N_CMDS + 1) /* commands, and "invalid" */

typedef struct srv srv_t;
typedef struct srv_door srv_door_t;

/* Where a reply goes: the door a request came through and an address only that door reads
 * (ZeroMQ: the peer's routing identity and whether it sent a delimiter frame). */
typedef struct srv_addr {
    srv_door_t *door;
    size_t len;
    unsigned char b[SRV_ADDR_MAX];
} srv_addr_t;

/* A front door. Replies and events are encoded once, as msgpack (the protocol's own encoding,
 * docs/protocol.md); a door sends them as they are or re-encodes them for its transport. */
struct srv_door {
    const char *name;
    /* Sends the encoded reply buf[0, len) to `to`. Never blocks; a reply it cannot send is
     * counted in srv_t.reply_drops. */
    void (*reply)(srv_t *s, srv_door_t *d, const srv_addr_t *to, const void *buf, size_t len);
    /* Publishes the encoded event buf[0, len) under topic "<session>/<kind>". Never blocks; an
     * event it cannot send is counted in srv_t.event_drops. */
    void (*publish)(srv_t *s, srv_door_t *d, const char *topic, const void *buf, size_t len);
    /* Optional (NULL: not wanted). An answer token of a request this door sent, as the encoded
     * map buf[0, len) holding at least "piece" (the ask's token event, or complete's progress),
     * for the address the request came from. Never blocks. */
    void (*progress)(srv_t *s, srv_door_t *d, const srv_addr_t *to, const void *buf, size_t len);
};

/* One request as the command layer sees it: who sent it and where its reply goes. */
typedef struct srv_call {
    srv_addr_t from;
    const char *owner; /* the caller's owner name ("" anonymous); checked against sessions */
} srv_call_t;

/* ---- models.c ----------------------------------------------------------------------------- */

typedef struct srv_model {
    char name[RILL_SCHED_MODEL_NAME];
    const char *path;
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_chat_t *chat; /* NULL: the model has no chat template rill renders */
    rill_forward_t *fw;
    rill_session_pool_t *pool;
    bool is_asr;             /* a Whisper model: a recognizer (whisper), no fw, pool, tok */
    rill_whisper_t *whisper; /* recognizers only; used by the engine thread alone */
    int32_t sched;           /* its index in the scheduler's models (-1: a recognizer) */
} srv_model_t;

/* Loads every model of s->p over one backend and starts the scheduler over their pools.
 * 0, or -1 with the reason logged. */
int srv_models_start(srv_t *s);

/* Stops the scheduler and frees the models (after the sessions' snapshots). */
void srv_models_stop(srv_t *s);

/* The index of the model named name[0, len), or -1. */
int32_t srv_model_find(const srv_t *s, const char *name, size_t len);

/* ---- sessions and queries ------------------------------------------------------------------ */

typedef struct srv_sess {
    struct srv_sess *next;
    char name[RILL_PROTO_MAX_NAME + 1];
    char owner[SRV_OWNER_LEN];
    int32_t model; /* index in s->models */
    rill_sched_sid_t sid;
    int32_t window, sinks;
    rill_market_gov_t *gov;
    uint64_t seq_token, seq_answer, seq_standing; /* per-topic event numbers */
    /* speech (server/speech.c); sid 0: a transcript-only session (created on a recognizer) */
    uint64_t key;                      /* unique per record: transcript events find it by it */
    int32_t asr_model;                 /* index in s->models of its recognizer (-1: none) */
    rill_sched_asr_t *asr;             /* its recognizer (NULL: none) */
    struct srv_asr_ctx *asr_ctx;       /* the recognizer's callback argument */
    rill_audio_packet_decoder_t *pdec; /* the current stream's packets (NULL: none yet) */
    float *pcm;                        /* [pcm_cap] decoded samples of one packet */
    size_t pcm_cap;
    rill_audio_stats_t audio; /* counters of the streams before pdec's */
    uint64_t seq_transcript;
    /* translation (server/translation.c): NULL when the session does not translate */
    struct srv_tl *tl;
    uint64_t seq_translation;
} srv_sess_t;

/* complete's shared prompts: a session no client sees, per model and system prompt, that
 * completions fork (an ask on it), so a system prompt is evaluated once for all of them. */
typedef struct srv_tmpl {
    struct srv_tmpl *next;
    int32_t model;
    char *system; /* the rendered system prompt ("" for a plain completion) */
    size_t len;
    rill_sched_sid_t sid;
    int32_t n_tokens;  /* its tokens (BOS included) */
    int32_t in_flight; /* completions running on it */
    uint64_t last_used;
} srv_tmpl_t;

#define SRV_MAX_TMPLS 8

/* An ask, standing query or completion waiting on the engine. */
typedef struct pend {
    struct pend *next;
    rill_sched_rid_t rid;
    bool standing;
    srv_sess_t *sess;
    srv_addr_t to; /* ask: where the reply goes */
    uint64_t req_id;
    char question[512]; /* for display, cut at a character boundary within 511 bytes */
    char *qtext;        /* standing: the whole question and its answer limit, as persisted */
    char *last;         /* standing: the latest answer published (NULL: none yet) */
    size_t last_len;
    int64_t last_version; /* its data version */
    size_t qlen;
    int32_t n_max;
    bool fixed_format; /* put in the fixed question format: the answer ends at a blank line */
    bool evaluated;    /* ask: consistency "evaluated" (answers on what the engine evaluated) */
    bool unlisted;     /* standing: being unregistered (left out of the state file) */
    rill_tokenizer_stream_t stream;
    char *answer; /* ask: the text streamed so far */
    size_t answer_len, answer_cap;
    bool cut; /* ask: the answer ended (fixed format) and the rest was cancelled */
    /* complete (tmpl != NULL; sess is NULL): */
    srv_tmpl_t *tmpl;
    int32_t model;
    int32_t n_prompt;  /* prompt tokens, the template's included */
    int32_t n_decoded; /* answer tokens decoded */
    bool eog;          /* it ended with an end-of-generation token */
    char stop[RILL_PROTO_MAX_STOP][RILL_PROTO_MAX_STOP_LEN + 1];
    int32_t n_stop;
    size_t sent; /* bytes of answer handed to the door's progress hook */
} pend_t;

/* A closed session's name and owner (CURVE): an XPUB subscription cannot be taken back from
 * its subscriber, so the name stays its owner's until rilld restarts. */
typedef struct tomb {
    struct tomb *next;
    char name[RILL_PROTO_MAX_NAME + 1];
    char owner[SRV_OWNER_LEN];
} tomb_t;

/* ---- events.c: engine -> socket thread ----------------------------------------------------- */

/* A finished answer (one per answer: never dropped). */
typedef struct srv_done {
    struct srv_done *next;
    rill_sched_rid_t rid;
    rill_sched_answer_t a; /* tokens and message point into the record */
    int32_t *tokens;
    char message[200];
} srv_done_t;

/* An answer token. */
typedef struct srv_tok {
    rill_sched_rid_t rid;
    int32_t token;
} srv_tok_t;

#define SRV_TOKEN_RING 8192

/* A transcript update (speech.c: the recognizer's callback), one per update: never dropped;
 * bounded by the updates the engine makes, at most one per recognizer step. */
typedef struct srv_tr {
    struct srv_tr *next;
    uint64_t key; /* the session's srv_sess_t.key */
    rill_err_t status, consumer_status;
    bool final;
    int64_t audio_ms, version;
    char *committed, *tentative; /* into the record's own allocation */
    size_t committed_len, tentative_len;
    char message[160];
} srv_tr_t;

/* ---- the server ---------------------------------------------------------------------------- */

struct srv {
    rill_server_params_t p;
    srv_model_t models[RILL_SERVER_MAX_MODELS];
    int32_t n_models;
    int32_t default_llm; /* the first language model (complete's default) */
    rill_backend_t *be;
    rill_sched_t *sch;
    rill_proto_dec_t *dec;
    rill_tick_decoder_t *tdec;
    rill_tick_t *ticks; /* [SRV_MAX_TICKS] */
    srv_sess_t *sessions;
    char sleep_dir[4096]; /* "<state_dir>/sleep": sleeping sessions' files (state.c) */
    tomb_t *tombs;
    pend_t *pends;
    uint64_t next_name;
    msgpack_sbuffer out; /* the reply or event being encoded */
    srv_door_t *doors[2];
    int n_doors;
    void *zmq;         /* door_zmq.c's state */
    void *http;        /* door_http.c's state; NULL without --http */
    int64_t started_s; /* wall-clock time of start-up (Unix seconds) */
    bool curve;
    /* the event queue (events.c) */
    int efd;
    rill_ring_t tok_ring;           /* engine -> socket: answer tokens (bounded) */
    _Atomic(srv_done_t *) dones;    /* engine -> socket: finished answers, newest first */
    _Atomic(srv_tr_t *) trs;        /* engine -> socket: transcript updates, newest first */
    _Atomic(struct srv_tle *) tles; /* translation workers -> socket: emissions, newest first */
    uint64_t next_key;              /* srv_sess_t.key */
    atomic_int signalled;           /* the socket thread has been woken and not drained yet */
    _Atomic(int64_t) engine_drops;  /* tokens the full ring refused */
    /* counters */
    int64_t requests, bad_requests, events, event_drops, reply_drops;
    int64_t asks_cut; /* asks answered by their end (fixed format) and cancelled in the engine */
    /* per command (rill_proto_cmd_t; [SRV_CMD_INVALID]: frames that did not decode): requests
     * received, and replies with a status other than OK (srv_reply_begin counts them) */
    int64_t cmd_requests[SRV_CMD_LABELS], cmd_errors[SRV_CMD_LABELS];
    int replying;      /* 1 + the index in cmd_errors of the command being answered; 0: none */
    rill_hist_t ttft;  /* asks answered (status OK, cached ones too): their ttft_ns */
    srv_tmpl_t *tmpls; /* complete's shared prompts (complete.c), at most SRV_MAX_TMPLS */
    uint64_t tmpl_clock;
};

/* ---- commands.c ---------------------------------------------------------------------------- */

/* Carries out one request frame buf[0, len) from c and sends its reply (now, or when its
 * answer is complete). */
void srv_handle(srv_t *s, const srv_call_t *c, const void *buf, size_t len);

/* A request that could not be decoded at all (the door's own check, e.g. a frame count, or
 * rill_proto_decode's): counted in requests, bad_requests and under the command label
 * "invalid"; replies err with msg and id (0 when unknown). */
void srv_handle_bad(srv_t *s, const srv_call_t *c, uint64_t id, rill_err_t err, const char *msg);

/* Encoding into s->out. A reply is {v, id, status, message, result}: reply_begin packs all
 * but the result's value, which the caller packs, then srv_reply_send sends it. */
void srv_reply_begin(srv_t *s, msgpack_packer *pk, uint64_t id, rill_err_t st, const char *message);
void srv_reply_send(srv_t *s, const srv_addr_t *to);
/* A reply with status err, message msg and a nil result, sent at once. */
void srv_reply_err(srv_t *s, const srv_addr_t *to, uint64_t id, rill_err_t err, const char *msg);

/* An event {v, seq, session, kind, ...n_fields more}: the caller packs the fields, then
 * srv_publish hands it to every door under "<session>/<kind>". */
void srv_event_begin(srv_t *s, msgpack_packer *pk, int n_fields, uint64_t seq, const srv_sess_t *x,
                     const char *kind);
void srv_publish(srv_t *s, const srv_sess_t *x, const char *kind);

/* Strings: always valid UTF-8 on the wire (rill_msgpack_pack_str escapes what is not). */
void srv_pk_str(msgpack_packer *pk, const char *str);
void srv_pk_strn(msgpack_packer *pk, const char *str, size_t n);
void srv_pk_kv_int(msgpack_packer *pk, const char *k, int64_t v);
void srv_pk_kv_str(msgpack_packer *pk, const char *k, const char *v);
void srv_pk_kv_dbl(msgpack_packer *pk, const char *k, double v);

srv_sess_t *srv_find_sess(srv_t *s, const char *name, size_t len);
void srv_link_sess(srv_t *s, srv_sess_t *x);
/* A new session record (its rate governor made); NULL when out of memory. */
srv_sess_t *srv_new_sess(srv_t *s);
void srv_free_sess(srv_sess_t *x);

/* ---- metrics.c ----------------------------------------------------------------------------- */

#define SRV_METRICS_N_LE 15 /* the histograms' `le` bounds below +Inf: 0.001 .. 60 s */

/* One model's figures. */
typedef struct srv_metrics_model {
    const char *name; /* borrowed */
    int64_t sessions, steps, busy_ns;
    int64_t tokens[RILL_SCHED_N_CLASSES];
    int64_t pages_total, pages_used, pages_free, pages_reserved;
    int64_t backlog;
} srv_metrics_model_t;

/* Everything server.metrics exports, as plain figures (about 32 KiB: allocate it). */
typedef struct srv_metrics {
    rill_hist_t ttft; /* asks' time to first token, ns */
    rill_hist_t step; /* forward passes' durations, ns */
    int64_t requests[SRV_CMD_LABELS], errors[SRV_CMD_LABELS];
    int64_t event_drops, reply_drops, engine_drops;
    int64_t standing_refreshes, standing_abandoned, standing_cache_hits;
    int64_t standing_deferred_interval, standing_deferred_share;
    int64_t spec_tokens_computed, spec_tokens_kept, spec_tokens_wasted;
    rill_hist_t wake; /* sleeping sessions' wakes (both tiers), ns */
    int64_t sessions_awake, sessions_asleep, sessions_asleep_log, sleep_disk_bytes;
    int64_t sleeps, wakes, wakes_log, wake_fallbacks, wake_errors, sleep_errors;
    int32_t n_models;
    srv_metrics_model_t models[RILL_SERVER_MAX_MODELS];
} srv_metrics_t;

/* Writes m in the Prometheus text exposition format 0.0.4 (every metric with its HELP and TYPE
 * lines; the names: docs/protocol.md "Metrics") into buf[0, cap), NUL-terminated when cap > 0,
 * as snprintf does: returns the text's whole length (without the NUL) even when cap is smaller,
 * so a call with cap 0 (buf may then be NULL) sizes the buffer. Pure; any thread. */
int64_t srv_metrics_render(const srv_metrics_t *m, char *buf, size_t cap);

/* The command server.metrics: collects the figures and replies {text}. */
void srv_cmd_metrics(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r);

/* ---- queries.c ----------------------------------------------------------------------------- */

/* Puts question q to p's session (standing false: an ask, true: a standing query), n_max
 * answer tokens; on success p->rid is set and p is linked into s->pends. On failure nothing is
 * linked and *why says which step failed. */
rill_err_t srv_submit_query(srv_t *s, pend_t *p, const rill_proto_str_t *q, int32_t n_max,
                            const char **why);
pend_t *srv_find_pend(srv_t *s, rill_sched_rid_t rid);
void srv_drop_pend(srv_t *s, pend_t *p);

/* The commands ask / standing.register (standing true), standing.unregister, standing.list
 * on the caller's session x. */
void srv_cmd_ask(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x,
                 bool standing);
void srv_cmd_unregister(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x);
void srv_cmd_standing_list(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x);

/* The socket thread's side of an answer token and of a finished answer. */
void srv_on_token(srv_t *s, pend_t *p, int32_t token);
void srv_on_done(srv_t *s, pend_t *p, srv_done_t *e);

/* Appends t[0, n) to p's answer text. false when out of memory (nothing appended). */
bool srv_pend_append(pend_t *p, const char *t, size_t n);

/* ---- complete.c ---------------------------------------------------------------------------- */

/* The command complete: a stateless completion (a prompt, or chat messages through the model's
 * template) on a fork of a shared prompt, with sampling and stop strings; its tokens go to the
 * door's progress hook, its reply is {text, finish_reason, prompt_tokens, completion_tokens,
 * model}. */
void srv_cmd_complete(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r);
void srv_complete_token(srv_t *s, pend_t *p, int32_t token);
void srv_complete_done(srv_t *s, pend_t *p, srv_done_t *e);
/* Closes every shared prompt (shutdown, before the scheduler stops). */
void srv_complete_stop(srv_t *s);
/* rill_sched_session_create for the server (clients' sessions and shared prompts alike): when
 * the KV budget is full it closes the shared prompts no completion runs on, giving their
 * reservations back, and tries once more. */
rill_err_t srv_session_create(srv_t *s, const rill_sched_session_params_t *sp,
                              rill_sched_sid_t *sid);

/* ---- events.c ------------------------------------------------------------------------------ */

/* The queue and its eventfd (the socket thread polls it). 0, or -1 when out of memory. */
int srv_events_init(srv_t *s);
void srv_events_deinit(srv_t *s);

/* Wakes the socket thread (its eventfd), once per drain. Any thread. */
void srv_events_wake(srv_t *s);

/* The scheduler's callbacks (engine thread); user is the srv_t. */
void srv_cb_token(void *user, rill_sched_rid_t rid, int32_t token);
void srv_cb_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a);

/* Hands every queued event to queries.c, tokens before the answers they belong to. Socket
 * thread; call when the eventfd is readable, and after a blocking scheduler call that ends
 * requests (close, unregister) before dropping their records. */
void srv_events_drain(srv_t *s);

/* ---- speech.c: recognizers of sessions, ingest.audio ---------------------------------------- */

/* Attaches a recognizer of model asr_model (a Whisper model) to x; consumer: x's own scheduler
 * session (x->sid; 0 for a transcript-only session). RILL_OK, or the error with *why set. */
rill_err_t srv_speech_attach(srv_t *s, srv_sess_t *x, int32_t asr_model, const char **why);

/* Detaches x's recognizer (blocking: no update of it arrives afterwards) and frees its packet
 * decoder; its queued transcript events are published first. NULL-safe parts. */
void srv_speech_detach(srv_t *s, srv_sess_t *x);

/* The command ingest.audio on the caller's session x. */
void srv_cmd_ingest_audio(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x);

/* session.stats' "asr" value: a map of the packet and recognizer counters (nil without one). */
void srv_speech_pack_stats(srv_t *s, msgpack_packer *pk, srv_sess_t *x);

/* The recognizers' callback (engine thread); user is the session's srv_asr_ctx. */
void srv_cb_transcript(void *user, const rill_sched_asr_update_t *u);

/* Publishes every queued transcript update as a <session>/transcript event (socket thread;
 * srv_events_drain calls it). */
void srv_transcripts_drain(srv_t *s);

/* Frees the updates still queued (shutdown). */
void srv_transcripts_free(srv_t *s);

/* ---- translation.c: translation sessions ------------------------------------------------- */

typedef struct srv_tl srv_tl_t;

/* Starts x's translation on x->model (a language model with a chat template) with the policy
 * r->translate names (rill_translate_policy_parse's names), r's system as the instruction and
 * window as the window when given (else rill_translate's defaults, the window cut to fit the
 * model's context), and its worker thread; x->key must be set.
 * RILL_OK, or RILL_EINVAL (the model is a recognizer, an unknown policy), RILL_EUNSUPPORTED (no
 * chat template), RILL_ERANGE (a context too small), RILL_ENOMEM, rill_translate_new's errors,
 * with why[0, why_cap) set; nothing is left on error. Socket thread; blocks (the session's
 * creation). */
rill_err_t srv_translation_start(srv_t *s, srv_sess_t *x, const rill_proto_req_t *r, char *why,
                                 size_t why_cap);

/* Hands committed transcript text[0, len) (a delta) and, with pause, the end of an utterance to
 * x's translation worker; audio_ms: the audio the recognizer had taken (the src_s of later
 * emissions). Never blocks on the worker (a short lock); text beyond the queue's bound is
 * dropped and reported as an EFULL translation event. No-op without a translation. Socket
 * thread. */
void srv_translation_feed(srv_t *s, srv_sess_t *x, const char *text, size_t len, bool pause,
                          int64_t audio_ms);

/* Stops x's translation: interrupts and joins its worker, destroys it, publishes its queued
 * emissions. NULL-safe part (no translation: nothing). Socket thread; blocks (about one engine
 * step). */
void srv_translation_stop(srv_t *s, srv_sess_t *x);

/* session.stats' "translation" value: {policy, emitted_words, emissions, queued_bytes,
 * dropped_bytes}, nil without a translation. */
void srv_translation_pack_stats(srv_sess_t *x, msgpack_packer *pk);

/* Publishes every queued emission as a <session>/translation event (socket thread;
 * srv_events_drain calls it). */
void srv_translations_drain(srv_t *s);

/* Frees the emissions still queued (shutdown). */
void srv_translations_free(srv_t *s);

/* ---- state.c ------------------------------------------------------------------------------- */

/* out = "<state_dir>/<name><ext>". */
void srv_state_path(const srv_t *s, const char *name, const char *ext, char *out, size_t cap);

/* The session's metadata file: "owner window sinks model". */
rill_err_t srv_write_meta(srv_t *s, const srv_sess_t *x);

/* The session's standing queries (replaced atomically; removed when it has none). */
rill_err_t srv_write_standing(srv_t *s, const srv_sess_t *x);

/* Removes every state file of session `name`. */
void srv_remove_files(srv_t *s, const char *name);

/* Restores every session of the state directory (start-up). */
void srv_restore_all(srv_t *s);

/* Creates "<state_dir>/sleep" (s->sleep_dir) for the scheduler's sleep files and deletes what a
 * previous run left there (sleepers do not outlive the process: their logs and snapshots do).
 * -1 (logged) when it cannot be created. */
int srv_sleep_dir_prepare(srv_t *s);

/* ---- door_zmq.c ---------------------------------------------------------------------------- */

/* Creates the ZeroMQ context, sockets (CURVE when configured) and binds them; registers the
 * door. 0, or -1 with the reason logged. */
int srv_zmq_start(srv_t *s);
void srv_zmq_stop(srv_t *s);

/* Waits up to timeout_ms for a request, a subscription or an engine event, and handles what
 * came. -1 on a poll error other than EINTR. */
int srv_zmq_poll(srv_t *s, int timeout_ms);

/* ---- door_http.c ---------------------------------------------------------------------------- */

/* Starts the HTTP door when p.http_ep is set (else does nothing): loads the tokens file, binds,
 * registers the door. 0, or -1 with the reason logged. */
int srv_http_start(srv_t *s);
void srv_http_stop(srv_t *s);

/* The descriptor the socket thread polls for it (libmicrohttpd's epoll fd), or -1 without HTTP;
 * the poll's timeout bounded by what libmicrohttpd needs; the work to do after the poll (also
 * when the descriptor was not readable: stream keep-alives, streams of closed sessions). */
int srv_http_fd(const srv_t *s);
int srv_http_timeout_ms(const srv_t *s, int max_ms);
void srv_http_run(srv_t *s);

/* The status page (server/status.html, embedded at build time). */
extern const unsigned char srv_status_page[];
extern const size_t srv_status_page_len;
/* The captions page (server/captions.html, likewise): GET /captions/NAME. */
extern const unsigned char srv_captions_page[];
extern const size_t srv_captions_page_len;

/* ---- json.c: JSON <-> msgpack for the HTTP door ------------------------------------------- */

/* A new JSON value for o (nil, bool, ints, floats, valid UTF-8 strings, arrays, maps with str
 * keys; anything else, and a NaN or infinity, is null). NULL when out of memory. */
json_t *srv_json_from_msgpack(const msgpack_object *o);

/* Packs j (depth: its nesting so far; deeper than RILL_PROTO_MAX_DEPTH fails). 0 or -1. */
int srv_json_to_msgpack(msgpack_packer *pk, const json_t *j, int depth);

/* Appends to sb the request frame {v, id, cmd, args} a ZeroMQ client would send, args being
 * the JSON object args (at depth 1). 0, or -1 when it nests too deep or sb's writer failed. */
int srv_json_request(msgpack_sbuffer *sb, uint64_t id, const char *cmd, const json_t *args);

/* The model a request names (its `model` argument; the default without one), or -1 after
 * replying ENOTFOUND. */
int32_t srv_model_of_req(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r);

/* ---- auth.c: CURVE keys and the ZAP handler ------------------------------------------------ */

typedef struct srv_auth srv_auth_t;

/* Loads dir/server.key (the server's Z85 secret key) and dir/clients/\*.pub (the Z85 public keys
 * admitted; both read with rill_curve_key_read, wire/rill_curve.h), and starts the ZAP handler
 * thread on ctx (inproc://zeromq.zap.01). It admits a CURVE connection whose client key is listed,
 * with that key (Z85) as the User-Id the server reads from each message; anything else is refused
 * (status 400). The User-Id is the key's owner name: its file's name without .pub, 1..40 of
 * [A-Za-z0-9_.-] (another name fails the start). Returns 0, or -1 with a message (no thread left
 * running). */
int srv_auth_start(void *ctx, const char *dir, srv_auth_t **out, char *msg, size_t cap);

/* The owner name (key file name without .pub) of the client key z85 (Z85, 40 characters)
 * listed in dir/clients, into name[0, cap). false when no listed key is it. For state written
 * when owners were keys. */
bool srv_auth_name_of_key(const char *dir, const char *z85, char *name, size_t cap);

/* Makes sock a CURVE server with the loaded secret key (call before bind). 0 or -1. */
int srv_auth_server_socket(srv_auth_t *a, void *sock);

/* Stops the handler thread and frees *ap (NULL-safe); sets *ap = NULL. Call before
 * zmq_ctx_term. */
void srv_auth_stop(srv_auth_t **ap);

#endif /* RILL_SERVER_INTERNAL_H */
