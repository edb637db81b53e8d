/*
 * server.c - rilld's socket loop (contract: rill_server.h; wire: docs/protocol.md).
 *
 * Design. One thread owns every ZeroMQ socket: it polls the ROUTER (requests), the XPUB
 * (subscriptions, checked by hand in CURVE mode) and an eventfd that the scheduler's engine
 * thread writes when it has queued answer tokens or finished answers. Requests are decoded and
 * validated (proto.c), checked against the caller's ownership, and carried out through the
 * scheduler's API; an ask's reply is sent when its answer completes, to the identity recorded
 * with it. Sessions are named; each has an ingest log, metadata and (at shutdown) a snapshot
 * in the state directory, so a restart restores them.
 *
 * Memory: per request a decode into the decoder's reused zone; per ask a record with the reply
 * envelope; per event one msgpack buffer (reused). Nothing per token beyond the queued event.
 */
#define _GNU_SOURCE
#include "rill_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_market.h"
#include "rill_model.h"
#include "rill_msgpack.h"
#include "rill_proto.h"
#include "rill_scheduler.h"
#include "rill_tokenizer.h"
#include "rill_utf8.h"
#include "server_internal.h"

#define MAX_TICKS 4096
#define OWNER_LEN 41 /* Z85 public key + NUL */
#define ID_MAX    256

typedef struct srv_sess {
    struct srv_sess *next;
    char name[RILL_PROTO_MAX_NAME + 1];
    char owner[OWNER_LEN];
    rill_sched_sid_t sid;
    int32_t window, sinks;
    rill_market_gov_t *gov;
    uint64_t seq_token, seq_answer, seq_standing; /* per-topic event numbers */
} srv_sess_t;

/* An ask or standing query waiting on the engine. */
typedef struct pend {
    struct pend *next;
    rill_sched_rid_t rid;
    bool standing;
    srv_sess_t *sess;
    unsigned char ident[ID_MAX];
    size_t ident_len;
    bool delim; /* the request came with an empty delimiter frame */
    uint64_t req_id;
    char question[512]; /* for display, cut at 511 bytes */
    char *qtext;        /* standing: the whole question and its answer limit, as persisted */
    size_t qlen;
    int32_t n_max;
    bool unlisted; /* standing: being unregistered (left out of the state file) */
    rill_tokenizer_stream_t stream;
    char *answer; /* text so far */
    size_t answer_len, answer_cap;
    int32_t n_tok; /* ask: answer tokens received */
    bool cut;      /* ask: the answer ended (answer_end) and the rest was cancelled */
} pend_t;

/* CURVE: the name and owner of a closed session. An XPUB subscription cannot be taken back
 * from its subscriber, so a closed session's name stays its owner's until rilld restarts (the
 * restart drops every subscription; reconnecting subscribers are checked again): otherwise
 * another key could create a session of that name and its events would reach the old owner's
 * subscribers. */
typedef struct tomb {
    struct tomb *next;
    char name[RILL_PROTO_MAX_NAME + 1];
    char owner[OWNER_LEN];
} tomb_t;

/* What the engine thread hands to the socket thread: answer tokens and finished answers, in the
 * order the engine produced them, in a fixed ring (no allocation per token); a finished answer
 * carries its ev_t (one allocation per answer). When the ring is full, events go to an
 * allocated overflow list, and stay there until it is drained, so the order holds. */
#define EV_RING 4096

typedef struct ev {
    struct ev *next;
    rill_sched_rid_t rid;
    bool done;
    int32_t token;
    rill_sched_answer_t a; /* done: the answer (tokens copied below) */
    int32_t *tokens;
    char message[200];
} ev_t;

typedef struct ev_slot {
    rill_sched_rid_t rid;
    int32_t token;
    ev_t *done; /* a finished answer, or NULL for a token */
} ev_slot_t;

struct srv {
    rill_server_params_t p;
    void *ctx, *router, *xpub;
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool;
    rill_sched_t *sch;
    rill_proto_dec_t *dec;
    rill_tick_decoder_t *tdec;
    rill_tick_t *ticks;
    srv_sess_t *sessions;
    tomb_t *tombs; /* CURVE: names of closed sessions */
    pend_t *pends;
    int efd;
    pthread_mutex_t mu;
    ev_slot_t *ring, *spare; /* [EV_RING] each; ring and ring_n under mu, spare the drainer's */
    int32_t ring_n;
    ev_t *ev_head, *ev_tail; /* (mu) overflow, in order after the ring */
    msgpack_sbuffer out;
    bool curve;
    srv_auth_t *auth;
    uint64_t next_name;
    /* counters */
    int64_t requests, bad_requests, events, event_drops, reply_drops;
    int64_t asks_cut; /* asks answered by their end (on_token_ev) and cancelled in the engine */
};

typedef struct srv srv_t;

rill_server_params_t rill_server_default_params(void) {
    return (rill_server_params_t){ .model_path = NULL,
                                   .threads = 0,
                                   .kv_cells = 65536,
                                   .request_ep = "tcp://127.0.0.1:7781",
                                   .event_ep = "tcp://127.0.0.1:7782",
                                   .curve_dir = NULL,
                                   .insecure_bind = false,
                                   .state_dir = "rill-state",
                                   .hwm = 10000,
                                   .max_msg = 1 << 20,
                                   .question_format = "\nQuestion: %s\nAnswer:",
                                   .tick_rate = 20,
                                   .default_window = 2048,
                                   .default_sinks = 16,
                                   .max_sessions = 256,
                                   .fsync = RILL_SESSION_FSYNC_EVERYSEC,
                                   .ready_file = NULL,
                                   .max_delay_ms = 50,
                                   .attn = RILL_ATTN_FLASH };
}

/* ---- msgpack output ---------------------------------------------------------------------- */

/* Every str rilld sends goes through these two, so it is valid UTF-8 whatever bytes a client
 * sent (docs/protocol.md): rill_msgpack_pack_str escapes what is not. */
static void pk_str(msgpack_packer *pk, const char *s) {
    rill_msgpack_pack_str(pk, s, strlen(s));
}

static void pk_strn(msgpack_packer *pk, const char *s, size_t n) {
    rill_msgpack_pack_str(pk, s, n);
}

static void pk_kv_int(msgpack_packer *pk, const char *k, int64_t v) {
    pk_str(pk, k);
    msgpack_pack_int64(pk, v);
}

static void pk_kv_str(msgpack_packer *pk, const char *k, const char *v) {
    pk_str(pk, k);
    pk_str(pk, v);
}

static void pk_kv_dbl(msgpack_packer *pk, const char *k, double v) {
    pk_str(pk, k);
    msgpack_pack_double(pk, v);
}

/* Starts a reply {v, id, status, message, result: ...}; the caller packs the result value. */
static void reply_begin(srv_t *s, msgpack_packer *pk, uint64_t id, rill_err_t st,
                        const char *message) {
    msgpack_sbuffer_clear(&s->out);
    msgpack_packer_init(pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(pk, 5);
    pk_kv_int(pk, "v", RILL_PROTO_VERSION);
    pk_str(pk, "id");
    msgpack_pack_uint64(pk, id);
    pk_kv_str(pk, "status", rill_err_name(st));
    pk_kv_str(pk, "message", message != NULL ? message : "");
    pk_str(pk, "result");
}

static void send_reply(srv_t *s, const unsigned char *ident, size_t ident_len, bool delim) {
    int flags = ZMQ_DONTWAIT;
    if (zmq_send(s->router, ident, ident_len, flags | ZMQ_SNDMORE) < 0) {
        s->reply_drops++;
        return;
    }
    if (delim) {
        zmq_send(s->router, "", 0, flags | ZMQ_SNDMORE);
    }
    if (zmq_send(s->router, s->out.data, s->out.size, flags) < 0) {
        s->reply_drops++;
    }
}

static void publish(srv_t *s, const char *topic) {
    if (zmq_send(s->xpub, topic, strlen(topic), ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
        zmq_send(s->xpub, s->out.data, s->out.size, ZMQ_DONTWAIT) < 0) {
        s->event_drops++;
        return;
    }
    s->events++;
}

/* ---- sessions ------------------------------------------------------------------------------ */

static srv_sess_t *find_sess(srv_t *s, const char *name, size_t len) {
    for (srv_sess_t *x = s->sessions; x != NULL; x = x->next) {
        if (strlen(x->name) == len && memcmp(x->name, name, len) == 0) {
            return x;
        }
    }
    return NULL;
}

static void state_path(const srv_t *s, const char *name, const char *ext, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s%s", s->p.state_dir, name, ext);
}

static rill_err_t new_gov(srv_t *s, srv_sess_t *x) {
    rill_market_gov_params_t gp = rill_market_gov_default_params();
    gp.target_lines_per_s = s->p.tick_rate;
    return rill_market_gov_new(&gp, &x->gov);
}

static void free_sess(srv_sess_t *x) {
    rill_market_gov_destroy(&x->gov);
    rill_free(x);
}

/* Metadata: "owner window sinks\n" (owner "-" for anonymous). */
static rill_err_t write_meta(srv_t *s, const srv_sess_t *x) {
    char path[4096], tmp[4200];
    state_path(s, x->name, ".meta", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        return RILL_EIO;
    }
    fprintf(f, "%s %d %d\n", x->owner[0] != '\0' ? x->owner : "-", x->window, x->sinks);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0 ? RILL_OK : RILL_EIO;
}

static void link_sess(srv_t *s, srv_sess_t *x) {
    srv_sess_t **pp = &s->sessions;
    while (*pp != NULL) {
        pp = &(*pp)->next;
    }
    *pp = x;
}

static int restore_standing(srv_t *s, srv_sess_t *x);

/* Restores every session of the state directory (start-up). */
static void restore_all(srv_t *s) {
    DIR *dir = opendir(s->p.state_dir);
    if (dir == NULL) {
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".meta") != 0 || n - 5 > RILL_PROTO_MAX_NAME) {
            continue;
        }
        srv_sess_t *x = rill_calloc(RILL_MEM_SERVER, 1, sizeof *x);
        if (x == NULL) {
            break;
        }
        memcpy(x->name, e->d_name, n - 5);
        char path[4096], snap[4096], logp[4096], owner[64] = "";
        state_path(s, x->name, ".meta", path, sizeof path);
        FILE *f = fopen(path, "r");
        int ok = f != NULL && fscanf(f, "%63s %d %d", owner, &x->window, &x->sinks) == 3;
        if (f != NULL) {
            fclose(f);
        }
        if (!ok || new_gov(s, x) != RILL_OK) {
            fprintf(stderr, "rilld: %s: unreadable metadata, session skipped\n", path);
            free_sess(x);
            continue;
        }
        snprintf(x->owner, sizeof x->owner, "%s", strcmp(owner, "-") == 0 ? "" : owner);
        state_path(s, x->name, ".snap", snap, sizeof snap);
        state_path(s, x->name, ".log", logp, sizeof logp);
        if (access(snap, F_OK) != 0) {
            state_path(s, x->name, ".log.base", snap, sizeof snap);
        }
        char msg[300] = "";
        rill_err_t err = rill_sched_session_restore(s->sch, 0, access(snap, F_OK) == 0 ? snap : NULL,
                                                    access(logp, F_OK) == 0 ? logp : NULL,
                                                    s->p.fsync, &x->sid, msg, sizeof msg);
        if (err != RILL_OK) {
            fprintf(stderr, "rilld: session %s not restored: %s %s\n", x->name, rill_err_name(err),
                    msg);
            free_sess(x);
            continue;
        }
        link_sess(s, x);
        int n_standing = restore_standing(s, x);
        if (n_standing < 0) {
            fprintf(stderr,
                    "rilld: session %s: unreadable %s.standing, its later standing "
                    "queries not restored\n",
                    x->name, x->name);
        }
        fprintf(stderr, "rilld: restored session %s (%d standing queries)\n", x->name,
                n_standing > 0 ? n_standing : 0);
    }
    closedir(dir);
}

/* ---- the engine's callbacks (engine thread) ------------------------------------------------- */

/* Queues a token (done NULL) or a finished answer for the socket thread and wakes it when the
 * queue was empty. */
static void push_ev(srv_t *s, rill_sched_rid_t rid, int32_t token, ev_t *done) {
    pthread_mutex_lock(&s->mu);
    bool was_empty = s->ring_n == 0 && s->ev_head == NULL;
    if (s->ev_head == NULL && s->ring_n < EV_RING) {
        s->ring[s->ring_n++] = (ev_slot_t){ .rid = rid, .token = token, .done = done };
    } else {
        ev_t *e = done;
        if (e == NULL && (e = rill_calloc(RILL_MEM_SERVER, 1, sizeof *e)) != NULL) {
            e->rid = rid;
            e->token = token;
        }
        if (e != NULL) { /* a token lost to memory: the answer event still has the text */
            if (s->ev_tail != NULL) {
                s->ev_tail->next = e;
            } else {
                s->ev_head = e;
            }
            s->ev_tail = e;
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(s->efd, &one, sizeof one);
        (void)w;
    }
}

static void cb_token(void *user, rill_sched_rid_t rid, int32_t token) {
    push_ev(user, rid, token, NULL);
}

static void cb_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    srv_t *s = user;
    ev_t *e = rill_calloc(RILL_MEM_SERVER, 1, sizeof *e);
    int32_t *t = a->n_tokens > 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)a->n_tokens * 4) : NULL;
    if (e == NULL || (a->n_tokens > 0 && t == NULL)) {
        rill_free(e);
        rill_free(t);
        RILL_LOGE("rilld: out of memory delivering an answer");
        return;
    }
    e->rid = rid;
    e->done = true;
    e->a = *a;
    if (a->n_tokens > 0) {
        memcpy(t, a->tokens, (size_t)a->n_tokens * 4);
    }
    e->tokens = t;
    e->a.tokens = NULL;
    snprintf(e->message, sizeof e->message, "%s", a->message != NULL ? a->message : "");
    e->a.message = NULL;
    push_ev(s, rid, 0, e);
}

/* ---- events (socket thread) ---------------------------------------------------------------- */

static pend_t *find_pend(srv_t *s, rill_sched_rid_t rid) {
    for (pend_t *p = s->pends; p != NULL; p = p->next) {
        if (p->rid == rid) {
            return p;
        }
    }
    return NULL;
}

static void drop_pend(srv_t *s, pend_t *p) {
    for (pend_t **pp = &s->pends; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    rill_free(p->answer);
    rill_free(p->qtext);
    rill_free(p);
}

static void append_text(pend_t *p, const char *t, size_t n) {
    if (p->answer_len + n + 1 > p->answer_cap) {
        size_t cap = (p->answer_len + n + 1) * 2;
        char *g = rill_realloc(RILL_MEM_SERVER, p->answer, cap);
        if (g == NULL) {
            return;
        }
        p->answer = g;
        p->answer_cap = cap;
    }
    memcpy(p->answer + p->answer_len, t, n);
    p->answer_len += n;
    p->answer[p->answer_len] = '\0';
}

static void topic_of(const srv_sess_t *x, const char *kind, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", x->name, kind);
}

static void ev_header(srv_t *s, msgpack_packer *pk, int n_fields, uint64_t seq, const srv_sess_t *x,
                      const char *kind) {
    msgpack_sbuffer_clear(&s->out);
    msgpack_packer_init(pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(pk, (size_t)(4 + n_fields));
    pk_kv_int(pk, "v", RILL_PROTO_VERSION);
    pk_kv_int(pk, "seq", (int64_t)seq);
    pk_kv_str(pk, "session", x->name);
    pk_kv_str(pk, "kind", kind);
}

/* Trims the model's continuation at the end of an answer ("\n\n" or a new "Question:"); a
 * starts after the leading blanks (answer_skip). */
static size_t answer_len(const char *a, size_t n) {
    const char *cut = memmem(a, n, "\n\n", 2);
    const char *q = memmem(a, n, "\nQuestion:", 10);
    size_t m = n;
    m = cut != NULL && (size_t)(cut - a) < m ? (size_t)(cut - a) : m;
    m = q != NULL && (size_t)(q - a) < m ? (size_t)(q - a) : m;
    return m;
}

/* Leading spaces and newlines of an answer, which are not part of it. */
static size_t answer_skip(const char *a, size_t n) {
    size_t skip = 0;
    while (skip < n && (a[skip] == ' ' || a[skip] == '\n')) {
        skip++;
    }
    return skip;
}

/* Where the answer so far ends in p->answer, or SIZE_MAX while it goes on. */
static size_t answer_end(const pend_t *p) {
    if (p->answer == NULL) {
        return SIZE_MAX;
    }
    size_t skip = answer_skip(p->answer, p->answer_len);
    size_t len = answer_len(p->answer + skip, p->answer_len - skip);
    return skip + len < p->answer_len ? skip + len : SIZE_MAX;
}

static void on_token_ev(srv_t *s, pend_t *p, int32_t token) {
    if (p->cut) {
        return; /* decoded before the cancel reached the engine */
    }
    p->n_tok++;
    char piece[64];
    int64_t n = rill_tokenizer_stream_feed(s->tok, &p->stream, token, piece, sizeof piece);
    if (n <= 0) {
        return;
    }
    size_t before = p->answer_len;
    append_text(p, piece, (size_t)n);
    if (p->standing) {
        return; /* standing answers are published whole */
    }
    size_t end = answer_end(p);
    if (end != SIZE_MAX) {
        /* the answer ended with this piece: the engine need not decode the rest (the doc's
           "stopping at ... a newline pair"); publish what of the piece is still answer. The
           stream detokenizer hands out whole characters only and the end is an ASCII byte, so
           the part published is whole characters too. */
        p->cut = true;
        rill_sched_cancel(s->sch, p->rid);
        n = end > before ? (int64_t)(end - before < (size_t)n ? end - before : (size_t)n) : 0;
        if (n == 0) {
            return;
        }
    }
    msgpack_packer pk;
    ev_header(s, &pk, 2, ++p->sess->seq_token, p->sess, "token");
    pk_kv_int(&pk, "rid", (int64_t)p->req_id); /* the ask's request id, as the client knows it */
    pk_str(&pk, "piece");
    pk_strn(&pk, piece, (size_t)n);
    char topic[128];
    topic_of(p->sess, "token", topic, sizeof topic);
    publish(s, topic);
}

static void on_done_ev(srv_t *s, pend_t *p, ev_t *e) {
    char tail[8];
    int64_t n = rill_tokenizer_stream_flush(&p->stream, tail, sizeof tail);
    if (n > 0) {
        append_text(p, tail, (size_t)n);
    }
    const char *text = p->answer != NULL ? p->answer : "";
    size_t skip = answer_skip(text, p->answer_len);
    size_t len = answer_len(text + skip, p->answer_len - skip);
    rill_sched_answer_t *a = &e->a;
    if (p->cut) {
        /* cancelled by on_token_ev once the answer was complete (or finished meanwhile) */
        if (a->status == RILL_ECANCELED) {
            a->status = RILL_OK;
            s->asks_cut++; /* the engine counts it as cancelled, not as answered */
        }
        a->n_tokens = p->n_tok;
    }
    msgpack_packer pk;
    char topic[128];
    if (p->standing) {
        if (a->status == RILL_OK) {
            rill_sched_session_info_t info;
            int64_t dv = rill_sched_session_info(s->sch, p->sess->sid, &info) == RILL_OK
                             ? info.version
                             : a->version;
            ev_header(s, &pk, 7, ++p->sess->seq_standing, p->sess, "standing");
            pk_kv_int(&pk, "qid", (int64_t)p->rid);
            pk_kv_str(&pk, "question", p->question);
            pk_str(&pk, "answer");
            pk_strn(&pk, text + skip, len);
            pk_kv_int(&pk, "version", a->version);
            pk_kv_dbl(&pk, "compute_ms", (double)a->compute_ns / 1e6);
            pk_kv_dbl(&pk, "age_ms", (double)(rill_now_ns() - (uint64_t)a->done_ns) / 1e6);
            pk_kv_int(&pk, "data_version", dv);
            topic_of(p->sess, "standing", topic, sizeof topic);
            publish(s, topic);
        }
        p->answer_len = 0; /* the next refresh starts afresh */
        rill_tokenizer_stream_init(&p->stream, 0);
        return;
    }
    if (a->status == RILL_OK) {
        ev_header(s, &pk, 7, ++p->sess->seq_answer, p->sess, "answer");
        pk_kv_int(&pk, "rid", (int64_t)p->req_id);
        pk_str(&pk, "answer");
        pk_strn(&pk, text + skip, len);
        pk_kv_dbl(&pk, "ttft_ms", (double)a->ttft_ns / 1e6);
        pk_kv_dbl(&pk, "total_ms", (double)a->total_ns / 1e6);
        pk_kv_int(&pk, "version", a->version);
        pk_kv_int(&pk, "backlog", a->backlog);
        pk_kv_dbl(&pk, "ttft_compute_ms", (double)a->ttft_compute_ns / 1e6);
        topic_of(p->sess, "answer", topic, sizeof topic);
        publish(s, topic);
    }
    reply_begin(s, &pk, p->req_id, a->status, a->status == RILL_OK ? "" : e->message);
    if (a->status == RILL_OK) {
        msgpack_pack_map(&pk, 9);
        pk_str(&pk, "answer");
        pk_strn(&pk, text + skip, len);
        pk_kv_int(&pk, "tokens", a->n_tokens);
        pk_kv_int(&pk, "version", a->version);
        pk_kv_int(&pk, "context", a->n_context);
        pk_kv_dbl(&pk, "ttft_ms", (double)a->ttft_ns / 1e6);
        pk_kv_dbl(&pk, "total_ms", (double)a->total_ns / 1e6);
        pk_kv_int(&pk, "backlog", a->backlog);
        pk_kv_dbl(&pk, "ttft_compute_ms", (double)a->ttft_compute_ns / 1e6);
        pk_str(&pk, "cached");
        a->cached ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    } else {
        msgpack_pack_nil(&pk);
    }
    send_reply(s, p->ident, p->ident_len, p->delim);
    drop_pend(s, p);
}

static void handle_ev(srv_t *s, rill_sched_rid_t rid, int32_t token, ev_t *done) {
    pend_t *p = find_pend(s, rid);
    if (p != NULL) {
        if (done != NULL) {
            on_done_ev(s, p, done);
        } else {
            on_token_ev(s, p, token);
        }
    }
    if (done != NULL) {
        rill_free(done->tokens);
        rill_free(done);
    }
}

static void drain_events(srv_t *s) {
    uint64_t cnt;
    ssize_t r = read(s->efd, &cnt, sizeof cnt);
    (void)r;
    pthread_mutex_lock(&s->mu);
    ev_slot_t *slots = s->ring;
    int32_t n = s->ring_n;
    s->ring = s->spare;
    s->spare = slots;
    s->ring_n = 0;
    ev_t *e = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    for (int32_t i = 0; i < n; i++) {
        handle_ev(s, slots[i].rid, slots[i].token, slots[i].done);
    }
    while (e != NULL) {
        ev_t *nx = e->next;
        handle_ev(s, e->rid, e->token, e->done ? e : NULL);
        if (!e->done) {
            rill_free(e);
        }
        e = nx;
    }
}

/* ---- requests ------------------------------------------------------------------------------- */

typedef struct call {
    const unsigned char *ident;
    size_t ident_len;
    bool delim;
    const char *owner; /* the caller's key ("" anonymous) */
} call_t;

static void reply_err(srv_t *s, const call_t *c, uint64_t id, rill_err_t err, const char *msg) {
    msgpack_packer pk;
    reply_begin(s, &pk, id, err, msg);
    msgpack_pack_nil(&pk);
    send_reply(s, c->ident, c->ident_len, c->delim);
}

/* The session a request names, owned by the caller; replies with the error otherwise. */
static srv_sess_t *own_sess(srv_t *s, const call_t *c, const rill_proto_req_t *r) {
    srv_sess_t *x = find_sess(s, r->session.p, r->session.len);
    if (x == NULL) {
        reply_err(s, c, r->id, RILL_ENOTFOUND, "no such session");
        return NULL;
    }
    if (strcmp(x->owner, c->owner) != 0) {
        reply_err(s, c, r->id, RILL_EPERM, "not your session");
        return NULL;
    }
    return x;
}

static void do_create(srv_t *s, const call_t *c, const rill_proto_req_t *r) {
    char name[RILL_PROTO_MAX_NAME + 1];
    if (r->present & RILL_PROTO_HAS_SESSION) {
        snprintf(name, sizeof name, "%.*s", (int)r->session.len, r->session.p);
    } else {
        do {
            snprintf(name, sizeof name, "s%llu", (unsigned long long)++s->next_name);
        } while (find_sess(s, name, strlen(name)) != NULL);
    }
    if (find_sess(s, name, strlen(name)) != NULL) {
        reply_err(s, c, r->id, RILL_EEXIST, "a session of that name exists");
        return;
    }
    for (const tomb_t *t = s->tombs; t != NULL; t = t->next) {
        if (strcmp(t->name, name) == 0 && strcmp(t->owner, c->owner) != 0) {
            reply_err(s, c, r->id, RILL_EEXIST,
                      "another key's session had that name (reserved until rilld restarts)");
            return;
        }
    }
    srv_sess_t *x = rill_calloc(RILL_MEM_SERVER, 1, sizeof *x);
    if (x == NULL || new_gov(s, x) != RILL_OK) {
        if (x != NULL) {
            free_sess(x);
        }
        reply_err(s, c, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->owner, sizeof x->owner, "%s", c->owner);
    x->window = r->present & RILL_PROTO_HAS_WINDOW ? (int32_t)r->window : s->p.default_window;
    x->sinks = r->present & RILL_PROTO_HAS_SINKS ? (int32_t)r->sinks
               : x->window > 0                   ? s->p.default_sinks
                                                 : 0;
    int32_t n_ctx = rill_session_pool_n_ctx(s->pool);
    if (x->window > 0 && x->sinks + x->window > n_ctx - 256) {
        char msg[160];
        snprintf(msg, sizeof msg, "sinks %d + window %d exceed the model's context %d less 256",
                 x->sinks, x->window, n_ctx);
        free_sess(x);
        reply_err(s, c, r->id, RILL_ERANGE, msg);
        return;
    }
    int32_t *prompt = NULL;
    int64_t n_prompt = 0;
    if (r->present & RILL_PROTO_HAS_SYSTEM) {
        n_prompt = rill_tokenizer_encode(s->tok, r->system.p, r->system.len, true, false, NULL, 0);
        prompt = n_prompt > 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)n_prompt * 4) : NULL;
        if (n_prompt > 0 &&
            (prompt == NULL || rill_tokenizer_encode(s->tok, r->system.p, r->system.len, true,
                                                     false, prompt, n_prompt) != n_prompt)) {
            rill_free(prompt);
            free_sess(x);
            reply_err(s, c, r->id, RILL_ENOMEM, "system prompt: tokenizing failed");
            return;
        }
    }
    char logp[4096], msg[300] = "";
    state_path(s, name, ".log", logp, sizeof logp);
    unlink(logp); /* a leftover of a session that was closed */
    char base[4200];
    snprintf(base, sizeof base, "%s.base", logp);
    unlink(base);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.session.window = x->window;
    sp.session.n_sink = x->window > 0 ? x->sinks : 0;
    sp.session.prompt = prompt;
    sp.session.n_prompt = (int32_t)n_prompt;
    sp.log_path = logp;
    sp.fsync = s->p.fsync;
    rill_err_t err = rill_sched_session_create(s->sch, &sp, &x->sid, msg, sizeof msg);
    rill_free(prompt);
    if (err == RILL_OK) {
        err = write_meta(s, x);
        if (err != RILL_OK) {
            snprintf(msg, sizeof msg, "writing the session's metadata failed");
            rill_sched_session_close(s->sch, x->sid);
        }
    }
    if (err != RILL_OK) {
        free_sess(x);
        reply_err(s, c, r->id, err, msg);
        return;
    }
    link_sess(s, x);
    msgpack_packer pk;
    reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 1);
    pk_kv_str(&pk, "session", x->name);
    send_reply(s, c->ident, c->ident_len, c->delim);
}

static void remove_files(srv_t *s, const char *name) {
    static const char *const ext[] = { ".log", ".log.base", ".snap", ".meta", ".standing" };
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        char path[4200];
        state_path(s, name, ext[i], path, sizeof path);
        unlink(path);
    }
}

static void do_close(srv_t *s, const call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    /* pending requests of it end through the engine (ECANCELED) */
    rill_err_t err = rill_sched_session_close(s->sch, x->sid);
    drain_events(s);
    for (srv_sess_t **pp = &s->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    }
    for (pend_t *p = s->pends, *nx; p != NULL; p = nx) {
        nx = p->next;
        if (p->sess == x) {
            drop_pend(s, p);
        }
    }
    remove_files(s, x->name);
    if (s->curve) {
        bool known = false;
        for (const tomb_t *t = s->tombs; t != NULL && !known; t = t->next) {
            known = strcmp(t->name, x->name) == 0; /* then its owner is x's too */
        }
        tomb_t *t = known ? NULL : rill_calloc(RILL_MEM_SERVER, 1, sizeof *t);
        if (t != NULL) {
            snprintf(t->name, sizeof t->name, "%s", x->name);
            snprintf(t->owner, sizeof t->owner, "%s", x->owner);
            t->next = s->tombs;
            s->tombs = t;
        } else if (!known) {
            RILL_LOGE("rilld: out of memory: the name %s is not reserved", x->name);
        }
    }
    free_sess(x);
    reply_err(s, c, r->id, err, "");
}

static void do_ingest_text(srv_t *s, const call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    int64_t version = 0;
    rill_err_t err =
        rill_sched_ingest_text(s->sch, x->sid, r->text.p, r->text.len, r->flush, &version);
    if (err != RILL_OK) {
        reply_err(s, c, r->id, err, "ingest refused");
        return;
    }
    msgpack_packer pk;
    reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 1);
    pk_kv_int(&pk, "version", version);
    send_reply(s, c->ident, c->ident_len, c->delim);
}

static void do_ingest_ticks(srv_t *s, const call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    rill_tick_decoder_stats_t st0 = rill_tick_decoder_stats(s->tdec);
    int64_t n = rill_tick_decode(s->tdec, r->ticks, r->ticks_len, s->ticks, MAX_TICKS);
    if (n < 0) {
        reply_err(s, c, r->id, (rill_err_t)n, rill_tick_decoder_last_error(s->tdec));
        return;
    }
    int64_t rejected = rill_tick_decoder_stats(s->tdec).rejected - st0.rejected, accepted = 0;
    /* the governor's lines, concatenated: at most one tick line and a bar per symbol each */
    size_t cap = (size_t)(n + 1) * RILL_MARKET_LINE_MAX * 2;
    char *text = rill_malloc(RILL_MEM_SERVER, cap);
    if (text == NULL) {
        reply_err(s, c, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    size_t len = 0;
    int64_t lines = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *t = NULL;
        int64_t m = rill_market_gov_push(x->gov, &s->ticks[i], &t);
        if (m < 0 || len + (size_t)m > cap) {
            rejected++;
            continue;
        }
        accepted++;
        memcpy(text + len, t, (size_t)m);
        len += (size_t)m;
        for (int64_t j = 0; j < m; j++) {
            lines += t[j] == '\n';
        }
    }
    /* nothing accepted: the version is read with an empty input, in one engine pass too */
    int64_t version = 0;
    rill_err_t err = rill_sched_ingest_text(s->sch, x->sid, text, len, false, &version);
    rill_free(text);
    if (err != RILL_OK) {
        reply_err(s, c, r->id, err, "ingest refused");
        return;
    }
    msgpack_packer pk;
    reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 4);
    pk_kv_int(&pk, "version", version);
    pk_kv_int(&pk, "accepted", accepted);
    pk_kv_int(&pk, "rejected", rejected);
    pk_kv_int(&pk, "lines", lines);
    send_reply(s, c->ident, c->ident_len, c->delim);
}

/* Tokenizes the question in the server's format. Returns the count or a negative error. */
static int64_t question_tokens(srv_t *s, const rill_proto_str_t *q, int32_t **out) {
    size_t cap = q->len + strlen(s->p.question_format) + 1;
    char *text = rill_malloc(RILL_MEM_SERVER, cap);
    if (text == NULL) {
        return RILL_ENOMEM;
    }
    const char *pct = strstr(s->p.question_format, "%s");
    size_t a = pct != NULL ? (size_t)(pct - s->p.question_format) : strlen(s->p.question_format);
    memcpy(text, s->p.question_format, a);
    memcpy(text + a, q->p, q->len);
    size_t len = a + q->len;
    if (pct != NULL) {
        size_t b = strlen(pct + 2);
        memcpy(text + len, pct + 2, b);
        len += b;
    }
    int64_t n = rill_tokenizer_encode(s->tok, text, len, false, false, NULL, 0);
    *out = n > 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)n * 4) : NULL;
    if (n > 0 && *out == NULL) {
        n = RILL_ENOMEM;
    } else if (n > 0) {
        n = rill_tokenizer_encode(s->tok, text, len, false, false, *out, n);
    }
    rill_free(text);
    return n;
}

/* Tokenizes question q and asks it (standing false) or registers it as a standing query of p's
 * session; on success p->rid is set and p is linked. p->sess, standing and the reply address
 * are the caller's; a standing query keeps a copy of q for the state file. On failure nothing
 * is linked and *why says which step failed. */
static rill_err_t submit_query(srv_t *s, pend_t *p, const rill_proto_str_t *q, int32_t n_max,
                               const char **why) {
    int32_t *ids = NULL;
    int64_t n = question_tokens(s, q, &ids);
    if (n <= 0) {
        rill_free(ids);
        *why = "question: tokenizing failed";
        return n < 0 ? (rill_err_t)n : RILL_EINVAL;
    }
    if (p->standing && (p->qtext = rill_malloc(RILL_MEM_SERVER, q->len + 1)) == NULL) {
        rill_free(ids);
        *why = "out of memory";
        return RILL_ENOMEM;
    }
    if (p->standing) {
        memcpy(p->qtext, q->p, q->len);
        p->qtext[q->len] = '\0';
        p->qlen = q->len;
    }
    p->n_max = n_max;
    snprintf(p->question, sizeof p->question, "%.*s",
             (int)rill_utf8_cut(q->p, q->len, sizeof p->question - 1), q->p);
    rill_tokenizer_stream_init(&p->stream, 0);
    rill_sched_ask_t a = { .question = ids,
                           .n_question = (int32_t)n,
                           .n_max = n_max,
                           .stop_at_eog = true,
                           .on_token = cb_token,
                           .on_done = cb_done,
                           .user = s };
    rill_err_t err = p->standing ? rill_sched_standing_register(s->sch, p->sess->sid, &a, &p->rid)
                                 : rill_sched_ask(s->sch, p->sess->sid, &a, &p->rid);
    rill_free(ids);
    if (err != RILL_OK) {
        rill_free(p->qtext);
        p->qtext = NULL;
        *why = "the engine refused the question";
        return err;
    }
    p->next = s->pends;
    s->pends = p;
    return RILL_OK;
}

/* The state file of a session's standing queries, `<name>.standing`: per query, oldest first,
 * a line "<max_tokens> <bytes>" and then the question's bytes and a newline. Replaced
 * atomically; removed when the session has none. */
static rill_err_t write_standing(srv_t *s, const srv_sess_t *x) {
    char path[4096], tmp[4200];
    state_path(s, x->name, ".standing", path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    size_t n = 0;
    for (const pend_t *p = s->pends; p != NULL; p = p->next) {
        n += p->standing && p->sess == x && !p->unlisted;
    }
    if (n == 0) {
        return unlink(path) == 0 || errno == ENOENT ? RILL_OK : RILL_EIO;
    }
    const pend_t **qs = rill_malloc(RILL_MEM_SERVER, n * sizeof *qs);
    FILE *f = qs != NULL ? fopen(tmp, "w") : NULL;
    if (f == NULL) {
        rill_free(qs);
        return qs == NULL ? RILL_ENOMEM : RILL_EIO;
    }
    size_t k = n; /* the list is newest first */
    for (const pend_t *p = s->pends; p != NULL; p = p->next) {
        if (p->standing && p->sess == x && !p->unlisted) {
            qs[--k] = p;
        }
    }
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ok = fprintf(f, "%d %zu\n", qs[i]->n_max, qs[i]->qlen) > 0 &&
             fwrite(qs[i]->qtext, 1, qs[i]->qlen, f) == qs[i]->qlen && fputc('\n', f) != EOF;
    }
    rill_free(qs);
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return RILL_EIO;
    }
    return RILL_OK;
}

/* Registers the standing queries of a restored session from its state file; returns how many
 * were registered, or -1 when the file is unreadable (those before the damage are kept). */
static int restore_standing(srv_t *s, srv_sess_t *x) {
    char path[4096];
    state_path(s, x->name, ".standing", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return errno == ENOENT ? 0 : -1;
    }
    int count = 0, n_max;
    size_t len;
    char *q = NULL;
    for (int got; (got = fscanf(f, "%d %zu", &n_max, &len)) != EOF;) {
        if (got != 2 || fgetc(f) != '\n' || n_max < 1 || n_max > RILL_PROTO_MAX_TOKENS ||
            len == 0 || len > RILL_PROTO_MAX_STR) {
            count = -1;
            break;
        }
        q = rill_malloc(RILL_MEM_SERVER, len);
        pend_t *p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p);
        const char *why = "";
        rill_proto_str_t qs = { q, len };
        if (q == NULL || p == NULL || fread(q, 1, len, f) != len || fgetc(f) != '\n') {
            rill_free(p);
            count = -1;
            break;
        }
        p->standing = true;
        p->sess = x;
        rill_err_t err = submit_query(s, p, &qs, n_max, &why);
        if (err == RILL_OK) {
            count++;
        } else {
            fprintf(stderr, "rilld: session %s: standing query not restored: %s (%s)\n", x->name,
                    why, rill_err_name(err));
            rill_free(p);
        }
        rill_free(q);
        q = NULL;
    }
    rill_free(q);
    fclose(f);
    return count;
}

static void do_ask(srv_t *s, const call_t *c, const rill_proto_req_t *r, srv_sess_t *x,
                   bool standing) {
    if (c->ident_len > ID_MAX) {
        reply_err(s, c, r->id, RILL_EINVAL, "identity too long");
        return;
    }
    pend_t *p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p);
    if (p == NULL) {
        reply_err(s, c, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    p->standing = standing;
    p->sess = x;
    memcpy(p->ident, c->ident, c->ident_len);
    p->ident_len = c->ident_len;
    p->delim = c->delim;
    p->req_id = r->id;
    const char *why = "";
    rill_err_t err = submit_query(
        s, p, &r->question, r->present & RILL_PROTO_HAS_MAX_TOKENS ? r->max_tokens : 48, &why);
    if (err != RILL_OK) {
        rill_free(p);
        reply_err(s, c, r->id, err, why);
        return;
    }
    if (standing) {
        /* registered only once the state file lists it: a restart must not lose it */
        if ((err = write_standing(s, x)) != RILL_OK) {
            (void)rill_sched_standing_unregister(s->sch, p->rid);
            drain_events(s);
            drop_pend(s, p);
            reply_err(s, c, r->id, err, "writing the session's standing queries failed");
            return;
        }
        msgpack_packer pk;
        reply_begin(s, &pk, r->id, RILL_OK, "");
        msgpack_pack_map(&pk, 1);
        pk_kv_int(&pk, "qid", (int64_t)p->rid);
        send_reply(s, c->ident, c->ident_len, c->delim);
    }
}

static void do_stats(srv_t *s, const call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    rill_sched_session_info_t info;
    rill_err_t err = rill_sched_session_info(s->sch, x->sid, &info);
    if (err != RILL_OK) {
        reply_err(s, c, r->id, err, "");
        return;
    }
    msgpack_packer pk;
    reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 10);
    pk_kv_int(&pk, "version", info.version);
    pk_kv_int(&pk, "n_seen", info.st.n_seen);
    pk_kv_int(&pk, "n_resident", info.st.n_resident);
    pk_kv_int(&pk, "n_pending", info.st.n_pending);
    pk_kv_int(&pk, "pages", info.st.pages);
    pk_kv_int(&pk, "bytes", info.st.bytes);
    pk_kv_int(&pk, "window", x->window);
    pk_kv_int(&pk, "sinks", x->sinks);
    pk_kv_int(&pk, "standing", info.n_standing);
    pk_kv_int(&pk, "held_text", (int64_t)info.held_text);
    send_reply(s, c->ident, c->ident_len, c->delim);
}

static void do_standing_list(srv_t *s, const call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    rill_sched_standing_info_t info[64];
    int64_t n = rill_sched_standing_list(s->sch, x->sid, info, 64);
    if (n < 0) {
        reply_err(s, c, r->id, (rill_err_t)n, "");
        return;
    }
    n = n < 64 ? n : 64;
    msgpack_packer pk;
    reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_array(&pk, (size_t)n);
    uint64_t now = rill_now_ns();
    for (int64_t i = 0; i < n; i++) {
        pend_t *p = find_pend(s, info[i].qid);
        msgpack_pack_map(&pk, 7);
        pk_kv_int(&pk, "qid", (int64_t)info[i].qid);
        pk_kv_str(&pk, "question", p != NULL ? p->question : "");
        pk_kv_int(&pk, "version", info[i].version);
        pk_kv_dbl(&pk, "age_ms",
                  info[i].done_ns > 0 ? (double)(now - (uint64_t)info[i].done_ns) / 1e6 : -1);
        pk_kv_int(&pk, "refreshes", info[i].refreshes);
        pk_kv_int(&pk, "abandoned", info[i].abandoned);
        pk_kv_int(&pk, "cache_hits", info[i].cache_hits);
    }
    send_reply(s, c->ident, c->ident_len, c->delim);
}

static void do_server_stats(srv_t *s, const call_t *c, const rill_proto_req_t *r) {
    rill_sched_stats_t st;
    rill_sched_stats(s->sch, &st);
    int n_sess = 0;
    for (srv_sess_t *x = s->sessions; x != NULL; x = x->next) {
        n_sess++;
    }
    msgpack_packer pk;
    reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 20);
    pk_kv_int(&pk, "sessions", n_sess);
    pk_kv_int(&pk, "requests", s->requests);
    pk_kv_int(&pk, "bad_requests", s->bad_requests);
    pk_kv_int(&pk, "events", s->events);
    pk_kv_int(&pk, "event_drops", s->event_drops);
    pk_kv_int(&pk, "reply_drops", s->reply_drops);
    pk_kv_int(&pk, "steps", st.steps);
    pk_kv_dbl(&pk, "busy_ms", (double)st.busy_ns / 1e6);
    pk_kv_dbl(&pk, "idle_ms", (double)st.idle_ns / 1e6);
    pk_kv_int(&pk, "tokens_decode", st.tokens[RILL_SCHED_DECODE]);
    pk_kv_int(&pk, "tokens_prefill", st.tokens[RILL_SCHED_PREFILL]);
    pk_kv_int(&pk, "tokens_ingest", st.tokens[RILL_SCHED_INGEST]);
    pk_kv_int(&pk, "tokens_standing", st.tokens[RILL_SCHED_STANDING]);
    pk_kv_int(&pk, "free_pages", st.free_pages);
    pk_kv_int(&pk, "total_pages", st.total_pages);
    pk_kv_int(&pk, "reserved_pages", st.reserved_pages);
    pk_kv_int(&pk, "questions", st.questions + s->asks_cut);
    pk_kv_int(&pk, "standing_refreshes", st.standing_refreshes);
    pk_kv_int(&pk, "standing_cache_hits", st.standing_cache_hits);
    pk_kv_int(&pk, "admission_rejects", st.admission_rejects);
    send_reply(s, c->ident, c->ident_len, c->delim);
}

static void handle(srv_t *s, const call_t *c, const void *buf, size_t len) {
    s->requests++;
    rill_proto_req_t r;
    char msg[300];
    rill_err_t err = rill_proto_decode(s->dec, buf, len, &r, msg, sizeof msg);
    if (err != RILL_OK) {
        s->bad_requests++;
        reply_err(s, c, r.id, err, msg);
        return;
    }
    srv_sess_t *x = NULL;
    if (r.cmd != RILL_PROTO_SESSION_CREATE && r.cmd != RILL_PROTO_SESSION_LIST &&
        r.cmd != RILL_PROTO_SERVER_STATS) {
        x = own_sess(s, c, &r);
        if (x == NULL) {
            return;
        }
    }
    switch (r.cmd) {
    case RILL_PROTO_SESSION_CREATE:
        do_create(s, c, &r);
        break;
    case RILL_PROTO_SESSION_CLOSE:
        do_close(s, c, &r, x);
        break;
    case RILL_PROTO_SESSION_LIST: {
        int n = 0;
        for (srv_sess_t *y = s->sessions; y != NULL; y = y->next) {
            n += strcmp(y->owner, c->owner) == 0;
        }
        msgpack_packer pk;
        reply_begin(s, &pk, r.id, RILL_OK, "");
        msgpack_pack_array(&pk, (size_t)n);
        for (srv_sess_t *y = s->sessions; y != NULL; y = y->next) {
            if (strcmp(y->owner, c->owner) == 0) {
                pk_str(&pk, y->name);
            }
        }
        send_reply(s, c->ident, c->ident_len, c->delim);
        break;
    }
    case RILL_PROTO_SESSION_STATS:
        do_stats(s, c, &r, x);
        break;
    case RILL_PROTO_SESSION_SNAPSHOT: {
        char path[4096];
        state_path(s, x->name, ".snap", path, sizeof path);
        err = rill_sched_session_snapshot(s->sch, x->sid, path, msg, sizeof msg);
        if (err != RILL_OK) {
            reply_err(s, c, r.id, err, msg);
            break;
        }
        msgpack_packer pk;
        reply_begin(s, &pk, r.id, RILL_OK, "");
        msgpack_pack_map(&pk, 1);
        pk_kv_str(&pk, "path", path);
        send_reply(s, c->ident, c->ident_len, c->delim);
        break;
    }
    case RILL_PROTO_INGEST_TEXT:
        do_ingest_text(s, c, &r, x);
        break;
    case RILL_PROTO_INGEST_TICKS:
        do_ingest_ticks(s, c, &r, x);
        break;
    case RILL_PROTO_ASK:
        do_ask(s, c, &r, x, false);
        break;
    case RILL_PROTO_STANDING_REGISTER:
        do_ask(s, c, &r, x, true);
        break;
    case RILL_PROTO_STANDING_UNREGISTER: {
        pend_t *p = find_pend(s, r.qid);
        if (p == NULL || !p->standing || p->sess != x) {
            reply_err(s, c, r.id, RILL_ENOTFOUND, "no such standing query on the session");
            break;
        }
        p->unlisted = true; /* the state file first: a restart must not bring it back */
        if ((err = write_standing(s, x)) != RILL_OK) {
            p->unlisted = false;
            reply_err(s, c, r.id, err, "writing the session's standing queries failed");
            break;
        }
        err = rill_sched_standing_unregister(s->sch, r.qid);
        drain_events(s);
        drop_pend(s, p);
        reply_err(s, c, r.id, err, "");
        break;
    }
    case RILL_PROTO_STANDING_LIST:
        do_standing_list(s, c, &r, x);
        break;
    case RILL_PROTO_SERVER_STATS:
        do_server_stats(s, c, &r);
        break;
    case RILL_PROTO_N_CMDS:
        break;
    }
}

/* Reads one request message (identity, optional delimiter, payload) and handles it. */
static void recv_request(srv_t *s) {
    zmq_msg_t parts[3];
    int n = 0, more = 1;
    bool bad = false;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 3) {
            /* a zmq_msg_t is moved, never copied by assignment (zmq_msg_init(3)) */
            zmq_msg_init(&parts[n]);
            zmq_msg_move(&parts[n++], &m);
        } else {
            bad = true; /* more frames than a request has */
        }
        zmq_msg_close(&m);
    }
    if (n >= 2) {
        const char *owner = "";
        const char *uid = s->curve ? zmq_msg_gets(&parts[n - 1], "User-Id") : NULL;
        owner = uid != NULL ? uid : "";
        call_t c = { .ident = zmq_msg_data(&parts[0]),
                     .ident_len = zmq_msg_size(&parts[0]),
                     .delim = n == 3,
                     .owner = owner };
        if (bad || (n == 3 && zmq_msg_size(&parts[1]) != 0)) {
            s->requests++;
            s->bad_requests++;
            reply_err(s, &c, 0, RILL_EFORMAT,
                      "a request is one frame (after an optional empty "
                      "delimiter)");
        } else {
            handle(s, &c, zmq_msg_data(&parts[n - 1]), zmq_msg_size(&parts[n - 1]));
        }
    }
    for (int i = 0; i < n; i++) {
        zmq_msg_close(&parts[i]);
    }
}

/* A subscription message on the XPUB (manual mode with CURVE): accepts it when the subscriber
 * owns the session its topic names. */
static void recv_subscription(srv_t *s) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, s->xpub, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return;
    }
    const unsigned char *d = zmq_msg_data(&m);
    size_t n = zmq_msg_size(&m);
    if (s->curve && n >= 1 && (d[0] == 1 || d[0] == 0)) {
        const char *uid = zmq_msg_gets(&m, "User-Id");
        const char *topic = (const char *)d + 1;
        size_t tl = n - 1;
        const char *slash = memchr(topic, '/', tl);
        srv_sess_t *x = slash != NULL ? find_sess(s, topic, (size_t)(slash - topic)) : NULL;
        bool ok = x != NULL && uid != NULL && strcmp(x->owner, uid) == 0;
        if (ok || d[0] == 0) {
            zmq_setsockopt(s->xpub, d[0] == 1 ? ZMQ_SUBSCRIBE : ZMQ_UNSUBSCRIBE, topic, tl);
        }
    }
    zmq_msg_close(&m);
}

/* ---- start and stop ---------------------------------------------------------------------------
 */

static bool loopback(const char *ep) {
    return strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "inproc://", 9) == 0 ||
           strncmp(ep, "tcp://127.", 10) == 0 || strncmp(ep, "tcp://localhost:", 16) == 0 ||
           strncmp(ep, "tcp://[::1]:", 12) == 0;
}

static int sock_setup(srv_t *s, void *sock, const char *ep, const char *what) {
    int hwm = s->p.hwm, hb_ivl = 2000, hb_ttl = 6000, hb_to = 6000, zero = 0;
    int64_t maxmsg = s->p.max_msg;
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &hb_ttl, sizeof hb_ttl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_to, sizeof hb_to);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (s->curve && srv_auth_server_socket(s->auth, sock) != 0) {
        fprintf(stderr, "rilld: %s: CURVE set-up failed\n", what);
        return -1;
    }
    if (zmq_bind(sock, ep) != 0) {
        fprintf(stderr, "rilld: cannot bind %s to %s: %s\n", what, ep, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

static int start(srv_t *s) {
    const rill_server_params_t *p = &s->p;
    if (p->model_path == NULL) {
        fprintf(stderr, "rilld: no model\n");
        return -1;
    }
    if (p->curve_dir == NULL && !p->insecure_bind &&
        (!loopback(p->request_ep) || !loopback(p->event_ep))) {
        fprintf(stderr,
                "rilld: refusing to bind %s / %s without CURVE keys (--curve-keys DIR), "
                "or pass --insecure-bind\n",
                p->request_ep, p->event_ep);
        return -1;
    }
    if (mkdir(p->state_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "rilld: cannot create state directory %s: %s\n", p->state_dir,
                strerror(errno));
        return -1;
    }
    char msg[300] = "";
    if (rill_model_load(p->model_path, rill_model_default_params(), &s->model, msg, sizeof msg) !=
        RILL_OK) {
        fprintf(stderr, "rilld: %s: %s\n", p->model_path, msg);
        return -1;
    }
    if (rill_tokenizer_new(rill_model_gguf(s->model), &s->tok, msg, sizeof msg) != RILL_OK) {
        fprintf(stderr, "rilld: tokenizer: %s\n", msg);
        return -1;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = p->threads;
    bp.max_batch = 256;
    bp.attn = p->attn;
    rill_forward_params_t fp = rill_forward_default_params();
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = p->kv_cells;
    pp.tokenizer = s->tok;
    rill_sched_params_t sp = rill_sched_default_params();
    sp.max_delay_ns = p->max_delay_ms * 1000000;
    sp.max_sessions = p->max_sessions;
    rill_tick_decoder_params_t tp = rill_tick_decoder_default_params();
    tp.max_batch = MAX_TICKS;
    rill_err_t err = rill_backend_new(&bp, &s->be);
    err = err == RILL_OK ? rill_forward_new(s->model, s->be, &fp, &s->fw) : err;
    err = err == RILL_OK ? rill_session_pool_new(s->fw, &pp, &s->pool) : err;
    err = err == RILL_OK ? rill_sched_new(s->pool, &sp, &s->sch) : err;
    err = err == RILL_OK ? rill_proto_dec_new((size_t)p->max_msg, &s->dec) : err;
    err = err == RILL_OK ? rill_tick_decoder_new(&tp, &s->tdec) : err;
    s->ticks = err == RILL_OK ? rill_malloc(RILL_MEM_SERVER, MAX_TICKS * sizeof *s->ticks) : NULL;
    if (err != RILL_OK || s->ticks == NULL) {
        const char *why = s->be == NULL && err == RILL_EUNSUPPORTED
                              ? rill_backend_simd_unsupported(bp.cpu.simd)
                              : NULL;
        fprintf(stderr, "rilld: engine start-up failed: %s%s%s\n",
                rill_strerror(err != RILL_OK ? err : RILL_ENOMEM), why ? ": " : "", why ? why : "");
        return -1;
    }
    restore_all(s);
    s->ctx = zmq_ctx_new();
    if (p->curve_dir != NULL) {
        s->curve = true;
        if (srv_auth_start(s->ctx, p->curve_dir, &s->auth, msg, sizeof msg) != 0) {
            fprintf(stderr, "rilld: --curve-keys %s: %s\n", p->curve_dir, msg);
            return -1;
        }
    }
    s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
    s->xpub = zmq_socket(s->ctx, ZMQ_XPUB);
    int one = 1;
    /* Without it a ROUTER drops a reply it cannot queue (the peer's pipe at --hwm, or the peer
     * gone) in silence; with it zmq_send fails (EAGAIN, EHOSTUNREACH: never blocks, the sends
     * are ZMQ_DONTWAIT) and the reply is counted in reply_drops. */
    zmq_setsockopt(s->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (s->curve) {
        zmq_setsockopt(s->xpub, ZMQ_XPUB_MANUAL, &one, sizeof one);
    }
    if (sock_setup(s, s->router, p->request_ep, "requests") != 0 ||
        sock_setup(s, s->xpub, p->event_ep, "events") != 0) {
        return -1;
    }
    fprintf(stderr,
            "rilld: serving %s (requests %s, events %s), %s, state in %s, %s backend, %s "
            "attention, %d threads\n",
            p->model_path, p->request_ep, p->event_ep,
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
            char path[4096], msg[300] = "";
            state_path(s, x->name, ".snap", path, sizeof path);
            rill_err_t err = rill_sched_session_snapshot(s->sch, x->sid, path, msg, sizeof msg);
            if (err != RILL_OK) {
                fprintf(stderr, "rilld: snapshot of %s failed: %s %s (its log still holds it)\n",
                        x->name, rill_err_name(err), msg);
            }
        }
        rill_sched_destroy(&s->sch); /* syncs and closes the logs */
    }
    while (s->pends != NULL) {
        drop_pend(s, s->pends);
    }
    for (int32_t i = 0; i < s->ring_n; i++) {
        if (s->ring[i].done != NULL) {
            rill_free(s->ring[i].done->tokens);
            rill_free(s->ring[i].done);
        }
    }
    rill_free(s->ring);
    rill_free(s->spare);
    for (ev_t *e = s->ev_head, *nx; e != NULL; e = nx) {
        nx = e->next;
        rill_free(e->tokens);
        rill_free(e);
    }
    while (s->sessions != NULL) {
        srv_sess_t *x = s->sessions;
        s->sessions = x->next;
        free_sess(x);
    }
    while (s->tombs != NULL) {
        tomb_t *t = s->tombs;
        s->tombs = t->next;
        rill_free(t);
    }
    if (s->router != NULL) {
        zmq_close(s->router);
    }
    if (s->xpub != NULL) {
        zmq_close(s->xpub);
    }
    srv_auth_stop(&s->auth);
    if (s->ctx != NULL) {
        zmq_ctx_term(s->ctx);
    }
    rill_free(s->ticks);
    rill_tick_decoder_destroy(&s->tdec);
    rill_proto_dec_destroy(&s->dec);
    rill_session_pool_destroy(&s->pool);
    rill_forward_destroy(&s->fw);
    rill_backend_destroy(&s->be);
    rill_tokenizer_destroy(&s->tok);
    rill_model_destroy(&s->model);
    if (s->efd >= 0) {
        close(s->efd);
    }
    pthread_mutex_destroy(&s->mu);
    msgpack_sbuffer_destroy(&s->out);
}

int rill_server_run(const rill_server_params_t *params, volatile sig_atomic_t *stop) {
    srv_t s;
    memset(&s, 0, sizeof s);
    s.p = params != NULL ? *params : rill_server_default_params();
    s.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s.ring = rill_malloc(RILL_MEM_SERVER, EV_RING * sizeof *s.ring);
    s.spare = rill_malloc(RILL_MEM_SERVER, EV_RING * sizeof *s.spare);
    pthread_mutex_init(&s.mu, NULL);
    msgpack_sbuffer_init(&s.out);
    if (s.efd < 0 || s.ring == NULL || s.spare == NULL || start(&s) != 0) {
        shutdown_all(&s);
        return 1;
    }
    while (!*stop) {
        zmq_pollitem_t items[3] = {
            { s.router, 0, ZMQ_POLLIN, 0 },
            { s.xpub, 0, ZMQ_POLLIN, 0 },
            { NULL, s.efd, ZMQ_POLLIN, 0 },
        };
        int rc = zmq_poll(items, 3, 200);
        if (rc < 0) {
            if (errno == EINTR) {
                continue;
            }
            fprintf(stderr, "rilld: poll: %s\n", zmq_strerror(errno));
            break;
        }
        if (items[2].revents & ZMQ_POLLIN) {
            drain_events(&s);
        }
        for (int i = 0; i < 64 && (items[0].revents & ZMQ_POLLIN); i++) {
            int ev = 0;
            size_t sz = sizeof ev;
            zmq_getsockopt(s.router, ZMQ_EVENTS, &ev, &sz);
            if (!(ev & ZMQ_POLLIN)) {
                break;
            }
            recv_request(&s);
        }
        if (items[1].revents & ZMQ_POLLIN) {
            for (int i = 0; i < 64; i++) {
                int ev = 0;
                size_t sz = sizeof ev;
                zmq_getsockopt(s.xpub, ZMQ_EVENTS, &ev, &sz);
                if (!(ev & ZMQ_POLLIN)) {
                    break;
                }
                recv_subscription(&s);
            }
        }
    }
    fprintf(stderr, "rilld: stopping: snapshotting %s\n", "sessions");
    shutdown_all(&s);
    fprintf(stderr, "rilld: stopped\n");
    return 0;
}
