/*
 * rill_client.h - the C client of rilld (the wire protocol is docs/protocol.md).
 *
 * A client holds a DEALER socket for requests and a SUB socket for events, both connected at
 * creation; ZeroMQ reconnects them by itself. Every request is synchronous: the call sends it,
 * waits for the reply that carries its request id, and returns the reply's status as a
 * rill_err_t (the status name is mapped back with rill_err_from_name). Replies with another id
 * (late replies of calls that timed out) are discarded and counted.
 *
 * Errors of every request call:
 *   RILL_OK and the server's statuses (RILL_ENOTFOUND "no such session", RILL_EPERM "not your
 *     session", RILL_EINVAL, RILL_EFULL, ...), with the server's message in
 *     rill_last_error(err) (core/rill_err.h: the detail of every rill error, on the calling
 *     thread); a status name this client does not know is RILL_EINTERNAL;
 *   RILL_ETIMEDOUT  no connection, or no reply, within timeout_ms (the message says which);
 *   RILL_EPERM      CURVE: the server refused this client's key, or the handshake failed;
 *   RILL_EFORMAT    the reply was not a well-formed protocol reply (it is checked with
 *                   rill_msgpack_check_utf8 before it is unpacked, then field by field): a
 *                   str that is not valid UTF-8 anywhere in it makes the whole reply
 *                   malformed, its status and message included (rilld sends only UTF-8);
 *   RILL_EUNSUPPORTED  the reply speaks another protocol version;
 *   RILL_EINVAL     bad arguments (NULL handle, a session name that is not
 *                   [A-Za-z0-9_.-]{1,64}, ...); nothing was sent;
 *   RILL_ERANGE     also: the request is larger than params.max_request; nothing was sent;
 *   RILL_ENOMEM, RILL_EIO (a ZeroMQ error).
 * On error the out-parameters are untouched unless said otherwise.
 *
 * Memory: results that hold strings or arrays are borrowed from the client: they stay valid
 * until the next call on it (any function below but rill_client_stats) or its destruction. Decoded
 * replies and events live in msgpack-c zones (libc malloc: msgpack-c has no allocator hook); the
 * handle and queued events are charged to RILL_MEM_CLIENT.
 *
 * Thread safety: one thread at a time per client (the ZeroMQ sockets are not thread-safe; a
 * client may move between threads with a full memory barrier, e.g. a mutex). Different
 * clients are independent. All calls block for at most timeout_ms unless said otherwise.
 */
#ifndef RILL_CLIENT_H
#define RILL_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_tick.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_CLIENT_DEFAULT_REQUESTS "tcp://127.0.0.1:7781"
#define RILL_CLIENT_DEFAULT_EVENTS   "tcp://127.0.0.1:7782"

typedef struct rill_client rill_client_t;

typedef struct rill_client_params {
    const char *request_ep; /* rilld's ROUTER; default RILL_CLIENT_DEFAULT_REQUESTS */
    const char *event_ep;   /* rilld's XPUB; default RILL_CLIENT_DEFAULT_EVENTS */
    /* CURVE (all three, or none): each is a Z85 key (40 characters) or the path of a file
     * holding one, as `rill keygen PREFIX` writes them (PREFIX.pub, PREFIX.key). */
    const char *curve_server_key; /* the server's public key; NULL: no CURVE (default) */
    const char *curve_public_key; /* this client's public key (listed in the server's
                                     --curve-keys DIR/clients/) */
    const char *curve_secret_key; /* this client's secret key */
    int32_t timeout_ms;           /* per request, >= 1; default 30000 */
    int64_t max_msg;              /* largest reply or event frame accepted (bytes, >= 1024);
                                     larger ones are dropped by ZeroMQ; default 16 MiB */
    int64_t max_request;          /* largest request sent (bytes, >= 1024): the server's
                                     --max-msg, beyond which it drops the connection; default
                                     1 MiB */
    int32_t event_queue;          /* events of the subscribed topics that arrive during an
                                     ask, held for rill_client_next_event (the oldest is
                                     dropped beyond); default 10000 */
} rill_client_params_t;

/* Defaults as documented per field. */
rill_client_params_t rill_client_default_params(void);

/* Creates a client and connects its sockets (the connection itself is made in the
 * background; the first request waits for it). params NULL: the defaults. Caller owns *out;
 * destroy with rill_client_destroy(). The strings of params are not kept. Errors (the detail in
 * rill_last_error): RILL_EINVAL (a parameter out of range, half a CURVE
 * configuration, a key that is neither Z85 nor a readable key file, a malformed endpoint),
 * RILL_EUNSUPPORTED (CURVE asked of a libzmq without it), RILL_ENOMEM, RILL_EIO. Does not
 * block. */
rill_err_t rill_client_new(const rill_client_params_t *params, rill_client_t **out);

/* Closes the sockets (unsent requests are dropped) and frees *cp; sets *cp = NULL.
 * NULL-safe. */
void rill_client_destroy(rill_client_t **cp);

typedef struct rill_client_stats {
    int64_t requests;       /* requests sent */
    int64_t timeouts;       /* calls that ended in RILL_ETIMEDOUT */
    int64_t stale_replies;  /* replies for no waiting call (discarded) */
    int64_t bad_replies;    /* malformed replies (the call got RILL_EFORMAT or
                               RILL_EUNSUPPORTED; one of more frames than a reply has is
                               dropped) */
    int64_t events;         /* events handed out by rill_client_next_event */
    int64_t bad_events;     /* malformed events (skipped) */
    int64_t events_dropped; /* events dropped here: the queue was full */
    int64_t events_missed;  /* events the server's sequence numbers say were lost */
} rill_client_stats_t;

/* Counters since creation (zeros for NULL). */
rill_client_stats_t rill_client_stats(const rill_client_t *c);

/* ---- sessions ----------------------------------------------------------------------------- */

/* session.create. name NULL: the server picks one ("s<N>"). window: tokens kept (0: no
 * window), or -1 for the server's default; sinks likewise (-1: the server's default). system:
 * a system prompt, or NULL. *session (optional) receives the session's name (borrowed).
 * Errors: RILL_EEXIST (the name is taken), RILL_ERANGE (window + sinks too large for the
 * model), RILL_EFULL (no room for another session), and those at the top. */
rill_err_t rill_client_session_create(rill_client_t *c, const char *name, int64_t window,
                                      int64_t sinks, const char *system, const char **session);

/* As rill_client_session_create(), on the daemon's model named model (NULL: its default; the
 * names are in rill_client_server_stats' models). Errors: those above, RILL_ENOTFOUND (no such
 * model), RILL_EINVAL (a malformed model name, checked before sending). */
rill_err_t rill_client_session_create_on(rill_client_t *c, const char *model, const char *name,
                                         int64_t window, int64_t sinks, const char *system,
                                         const char **session);

/* session.close: the session's open questions end with RILL_ECANCELED, its files are removed.
 * Errors: RILL_ENOTFOUND, RILL_EPERM, and those at the top. */
rill_err_t rill_client_session_close(rill_client_t *c, const char *session);

/* session.list: the caller's sessions. Sets *names to an array of *n names (borrowed).
 * Returns RILL_OK or an error from the top. */
rill_err_t rill_client_session_list(rill_client_t *c, const char *const **names, int64_t *n);

typedef struct rill_client_session_stats {
    int64_t version;    /* the session's data version (grows with every ingest) */
    int64_t n_seen;     /* tokens ever ingested */
    int64_t n_resident; /* tokens in the KV cache now */
    int64_t n_pending;  /* tokens queued, not yet evaluated */
    int64_t pages;      /* KV pages held */
    int64_t bytes;      /* bytes of those pages */
    int64_t window;     /* window (0: none) */
    int64_t sinks;      /* sink tokens */
    int64_t standing;   /* standing queries registered */
    int64_t held_text;  /* bytes of text held back at an unstable end (-1: not reported) */
    char model[64];     /* the model it is on ("": not reported) */
} rill_client_session_stats_t;

/* session.stats. Errors: RILL_ENOTFOUND, RILL_EPERM, and those at the top. */
rill_err_t rill_client_session_stats(rill_client_t *c, const char *session,
                                     rill_client_session_stats_t *out);

/* session.snapshot: *path (optional, borrowed) receives the snapshot's path on the server's
 * machine. Errors: RILL_ENOTFOUND, RILL_EPERM, RILL_EIO, and those at the top. */
rill_err_t rill_client_session_snapshot(rill_client_t *c, const char *session, const char **path);

/* ---- ingest ------------------------------------------------------------------------------- */

/* ingest.text: text[0, len) (UTF-8; a chunk may end inside a character: the server holds an
 * unstable end back until more comes, or until flush). Acknowledged once in the session's log.
 * *version (optional) receives the session's data version. len is at most 1 MiB less a few
 * bytes of envelope (params.max_request). Errors: RILL_ERANGE (too long: nothing sent),
 * RILL_ENOTFOUND, RILL_EPERM, RILL_EFULL (the session's budget), and those at the top. */
rill_err_t rill_client_ingest_text(rill_client_t *c, const char *session, const char *text,
                                   size_t len, bool flush, int64_t *version);

/* ingest.replace: from the input that made data version from_version on, the session's text is
 * text[0, len) (UTF-8, complete; may be empty) - for a producer that revises what it sent, such
 * as a speech recognizer rewriting its tentative tail. The server rolls back to the longest
 * common token prefix and evaluates only the rest (docs/protocol.md). *version (optional)
 * receives the replace's own data version. Errors: RILL_EINVAL (from_version < 1: nothing sent;
 * or not one of the session's versions), RILL_ERANGE (too long: nothing sent; or the session no
 * longer reaches back to from_version), RILL_ENOTFOUND, RILL_EPERM, RILL_EFULL, and those at
 * the top. */
rill_err_t rill_client_ingest_replace(rill_client_t *c, const char *session, int64_t from_version,
                                      const char *text, size_t len, int64_t *version);

typedef struct rill_client_ticks_result {
    int64_t version;  /* the session's data version after the batch */
    int64_t accepted; /* ticks taken */
    int64_t rejected; /* ticks refused by the server (malformed or invalid; skipped) */
    int64_t lines;    /* text lines the rate governor made of them */
} rill_client_ticks_result_t;

/* ingest.ticks: ticks[0, n) (1 <= n <= 4096, each valid per rill_tick_check; encoded with
 * rill_tick_encode). Errors: RILL_EINVAL (an invalid tick, named in the message, or n out of
 * range: nothing sent), RILL_ENOTFOUND, RILL_EPERM, and those at the top. */
rill_err_t rill_client_ingest_ticks(rill_client_t *c, const char *session, const rill_tick_t *ticks,
                                    int64_t n, rill_client_ticks_result_t *out);

/* ingest.ticks with a batch already encoded as msgpack: batch[0, len) must be one msgpack
 * array (of tick maps, wire/rill_tick.h); its records are not checked here, the server
 * skips bad ones and counts them in out->rejected. Errors: RILL_EFORMAT (not one array), and
 * as rill_client_ingest_ticks. */
rill_err_t rill_client_ingest_ticks_msgpack(rill_client_t *c, const char *session,
                                            const void *batch, size_t len,
                                            rill_client_ticks_result_t *out);

typedef struct rill_client_audio_result {
    int64_t samples;      /* 16 kHz samples the packet and any concealment before it gave */
    const char *packet;   /* "ok", "gap" (after concealed or lost packets), "resync",
                             "duplicate", "late" (both dropped, not errors), "none" (a flush
                             alone); borrowed until the next call */
    int64_t lost;         /* packets the gap before this one skipped */
    int64_t concealed_ms; /* audio made up for them */
    int64_t expected;     /* the seq the stream expects next (-1 after a flush) */
    int64_t queue_free;   /* 16 kHz samples the recognizer's queue can take now */
} rill_client_audio_result_t;

/* ingest.audio: one packet of a session's audio stream (a session with a recognizer:
 * session.create on a Whisper model, or with asr; docs/protocol.md, "Speech sessions").
 * codec "opus" (one Opus packet; rate 8000, 12000, 16000, 24000 or 48000; channels 1 or 2) or
 * "pcm16" (little-endian 16-bit interleaved frames, 1 ms to 1 s; rate 8000..384000, channels
 * 1..32); seq counts the stream's packets (the first sets where it starts; gaps are concealed,
 * repeats dropped). data[0, len) is the packet, at most 1 MiB; data NULL with len 0 sends no
 * packet, only the flush (then flush must be true, and codec, rate, channels and seq are not
 * sent). flush true ends the stream after the packet: the recognizer commits its tail (a final
 * transcript event) and the next packet starts a new stream. *out (optional) gets the reply.
 * Errors, nothing sent: RILL_EINVAL (a NULL or empty codec with a packet, rate, channels or seq
 * negative or out of uint32 range, data NULL with len > 0, neither a packet nor flush),
 * RILL_ERANGE (len over 1 MiB). From the server, nothing changed: RILL_EUNSUPPORTED (no
 * recognizer, another codec), RILL_EINVAL (a packet that does not match its stream), RILL_ERANGE
 * (a rate or channel count the codec does not take), RILL_EFORMAT (a malformed packet),
 * RILL_EFULL (the recognizer's queue is full: send the same packet again later), RILL_ENOTFOUND,
 * RILL_EPERM, and those at the top. */
rill_err_t rill_client_ingest_audio(rill_client_t *c, const char *session, const char *codec,
                                    int64_t rate, int64_t channels, int64_t seq, const void *data,
                                    size_t len, bool flush, rill_client_audio_result_t *out);

/* ---- questions ---------------------------------------------------------------------------- */

/* Called with each piece of the answer as the server streams it (UTF-8, complete characters;
 * piece[0, len) is not NUL-terminated and is borrowed for the call). Runs on the caller's
 * thread, inside rill_client_ask. */
typedef void (*rill_client_token_fn)(void *user, const char *piece, size_t len);

typedef struct rill_client_answer {
    const char *answer; /* the answer, trimmed by the server (NUL-terminated; borrowed) */
    size_t answer_len;
    int64_t tokens;  /* tokens generated */
    int64_t version; /* the data version the answer saw */
    int64_t context; /* tokens resident in the session when it was answered */
    double ttft_ms;  /* time to the first token, server side */
    double total_ms; /* time to the whole answer, server side */
    bool cached;     /* served from a standing query's cache */
    int64_t pieces;  /* pieces handed to on_token */
    /* what ttft_ms was made of (rill_sched_answer_t); -1 and NAN from a server without them */
    int64_t backlog;        /* session tokens not yet evaluated when asked, waited for */
    double ttft_compute_ms; /* engine time of its own steps (the backlog's and the question's) */
    bool evaluated;         /* answered with consistency "evaluated" (see rill_client_ask_with) */
} rill_client_answer_t;

/* ask: asks question on the session and waits for the whole answer. max_tokens: 1..1024, or 0
 * for the server's default (48). With on_token, the call subscribes to "<session>/token" and
 * "<session>/answer" for its length and feeds on_token the pieces of this question (the token
 * events whose rid is the request's id) as they arrive; after the reply it waits, at most 1 s,
 * for the answer event that ends the stream. The stream is best effort (events published
 * before the server saw the subscription, or dropped at a high-water mark, are missing); the
 * reply's answer is always whole. With on_token the timeout counts from the last piece.
 * Errors: RILL_ECANCELED (the session was closed), RILL_EFULL, RILL_ENOTFOUND, RILL_EPERM, and
 * those at the top; out is set only on success. */
rill_err_t rill_client_ask(rill_client_t *c, const char *session, const char *question,
                           int32_t max_tokens, rill_client_token_fn on_token, void *user,
                           rill_client_answer_t *out);

/* Options of rill_client_ask_with. */
typedef struct rill_client_ask_opts {
    int32_t max_tokens; /* 1..1024, or 0 for the server's default (48) */
    bool evaluated;     /* consistency "evaluated": answer at once on what the engine has
                           evaluated, not waiting for data acknowledged but still queued (the
                           answer's version and backlog say what it saw); false: "acknowledged",
                           every input acknowledged before the question (the default) */
} rill_client_ask_opts_t;

/* ask with options; rill_client_ask(c, s, q, n, ...) is this with { .max_tokens = n }. Errors:
 * RILL_EINVAL (opts NULL), and those of rill_client_ask. */
rill_err_t rill_client_ask_with(rill_client_t *c, const char *session, const char *question,
                                const rill_client_ask_opts_t *opts, rill_client_token_fn on_token,
                                void *user, rill_client_answer_t *out);

/* standing.register: the server re-answers question after data updates and publishes each
 * answer as a "<session>/standing" event. max_tokens as for rill_client_ask. *qid (optional)
 * receives the query's id. Errors: RILL_ENOTFOUND, RILL_EPERM, RILL_EFULL, and those at the
 * top. */
rill_err_t rill_client_standing_register(rill_client_t *c, const char *session,
                                         const char *question, int32_t max_tokens, uint64_t *qid);

/* standing.unregister. Errors: RILL_ENOTFOUND (no such query on the session), and those at the
 * top. */
rill_err_t rill_client_standing_unregister(rill_client_t *c, const char *session, uint64_t qid);

typedef struct rill_client_standing {
    uint64_t qid;
    const char *question; /* borrowed */
    int64_t version;      /* data version of the last answer */
    double age_ms;        /* since the last answer was computed (-1: none yet) */
    int64_t refreshes, abandoned, cache_hits;
} rill_client_standing_t;

/* standing.list: sets *items to an array of *n queries (borrowed). */
rill_err_t rill_client_standing_list(rill_client_t *c, const char *session,
                                     const rill_client_standing_t **items, int64_t *n);

/* ---- the server --------------------------------------------------------------------------- */

/* One model of the daemon (server.stats' "models"). */
typedef struct rill_client_model_stats {
    char name[64];
    int64_t sessions, steps, tokens_ingest, tokens_decode;
} rill_client_model_stats_t;

#define RILL_CLIENT_MAX_MODELS 8

typedef struct rill_client_server_stats {
    int64_t sessions, requests, bad_requests, events, event_drops, reply_drops;
    int64_t engine_drops; /* answer-token events the daemon's full event queue dropped */
    int64_t steps;
    double busy_ms, idle_ms;
    int64_t tokens_decode, tokens_prefill, tokens_ingest, tokens_standing;
    int64_t free_pages, total_pages, reserved_pages;
    int64_t questions, standing_refreshes, standing_cache_hits, admission_rejects;
    int32_t n_models; /* the loaded models, the default first (0 from an older server) */
    rill_client_model_stats_t models[RILL_CLIENT_MAX_MODELS];
} rill_client_server_stats_t;

/* server.stats. Fields the server does not send are 0; fields this client does not know are
 * ignored (rill_client_call gives the whole map). */
rill_err_t rill_client_server_stats(rill_client_t *c, rill_client_server_stats_t *out);

/* Any command: sends {v, id, cmd, args} where args[0, args_len) is one msgpack map (NULL / 0:
 * no args), and sets *result / *result_len (optional, borrowed) to the reply's result value
 * re-encoded as msgpack. For commands this header does not wrap, and for tests. Errors: those
 * at the top; RILL_EFORMAT when args is not one msgpack map. */
rill_err_t rill_client_call(rill_client_t *c, const char *cmd, const void *args, size_t args_len,
                            const void **result, size_t *result_len);

/* ---- events ------------------------------------------------------------------------------- */

/* Subscribes to topics that start with prefix (e.g. "s1/standing", or "s1/" for everything of
 * session s1). Subscriptions count: subscribing twice needs two unsubscribes. With CURVE the
 * server accepts only topics of the caller's own sessions, and no prefix shorter than a whole
 * session name; it refuses silently (nothing arrives). The server learns of it asynchronously:
 * events published before it did are not received. Errors: RILL_EINVAL (empty or longer than
 * 256 bytes), RILL_EFULL (256 subscriptions already), RILL_ENOMEM. Does not block. */
rill_err_t rill_client_subscribe(rill_client_t *c, const char *prefix);

/* Ends one subscription to prefix. Errors: RILL_ENOTFOUND (not subscribed), RILL_EINVAL. */
rill_err_t rill_client_unsubscribe(rill_client_t *c, const char *prefix);

typedef enum rill_client_event_kind {
    RILL_CLIENT_EVENT_OTHER = 0, /* a kind this client does not know: common fields only */
    RILL_CLIENT_EVENT_TOKEN,     /* a piece of an answer being streamed */
    RILL_CLIENT_EVENT_ANSWER,    /* the end of an ask */
    RILL_CLIENT_EVENT_STANDING,  /* a standing query's new answer */
    RILL_CLIENT_EVENT_TRANSCRIPT /* a change of a speech session's transcript */
} rill_client_event_kind_t;

/* One event. Strings are NUL-terminated and borrowed (valid until the next call). Fields that
 * the kind does not carry are 0 / NULL. */
typedef struct rill_client_event {
    const char *topic;   /* "<session>/<kind>" */
    const char *session; /* the session's name */
    const char *kind_name;
    rill_client_event_kind_t kind;
    uint64_t seq;      /* per topic, from 1 */
    int64_t missed;    /* events lost on this topic just before this one (seq jumped); 0 for the
                          first event seen on a topic and when seq went back (a server restart) */
    uint64_t rid;      /* token, answer: the question's request id (see rill_client_ask) */
    uint64_t qid;      /* standing */
    const char *piece; /* token */
    size_t piece_len;
    const char *answer; /* answer, standing */
    size_t answer_len;
    const char *committed; /* transcript: the words this update committed (append it to what
                              came before; led by one space when words came before) */
    size_t committed_len;
    const char *tentative; /* transcript: the whole tentative tail now ("" when none) */
    size_t tentative_len;
    double audio_s;     /* transcript: audio the recognizer had taken, seconds */
    bool final;         /* transcript: a flush's update (the tail is committed) */
    const char *status; /* transcript: "OK", or the error's name (message: the detail) */
    const char *message;
    const char *question;      /* standing */
    int64_t version;           /* answer, standing: the data version the answer saw;
                                  transcript: the session's after the update (-1: a
                                  transcript-only session) */
    int64_t data_version;      /* standing: the session's version when it was published */
    double ttft_ms, total_ms;  /* answer */
    int64_t backlog;           /* answer: as rill_client_answer_t's (-1 when absent) */
    double ttft_compute_ms;    /* answer: as rill_client_answer_t's (NAN when absent) */
    double compute_ms, age_ms; /* standing */
} rill_client_event_t;

/* Waits up to timeout_ms (0: only what has arrived) for the next event of the subscribed
 * topics and fills *ev. Malformed events (a str that is not valid UTF-8 among them) are skipped
 * and counted (bad_events). Returns
 * RILL_OK, RILL_EAGAIN when nothing came within timeout_ms (flow control, not a failure),
 * RILL_EINVAL (bad arguments), RILL_EIO. Blocks for at most timeout_ms. */
rill_err_t rill_client_next_event(rill_client_t *c, int32_t timeout_ms, rill_client_event_t *ev);

#ifdef __cplusplus
}
#endif
#endif /* RILL_CLIENT_H */
