/*
 * door_http.c - rilld's HTTP front door (contract: server_internal.h; routes:
 * docs/protocol.md, "HTTP").
 *
 * libmicrohttpd runs in its external epoll mode: no thread of its own, its epoll descriptor
 * polled by the socket thread beside the ZeroMQ sockets (door_zmq.c), MHD_run called when it is
 * readable. So every callback below runs on the socket thread and may touch srv_t like the
 * ZeroMQ door does.
 *
 * A request is collected (headers, then a body of at most --max-msg bytes), turned into the
 * protocol's request map - the same msgpack frame a ZeroMQ client sends: a route names the
 * command, the path gives the session (and qid), the JSON body gives the arguments - and handed
 * to srv_handle. The reply comes back through h_reply, at once or when an answer is complete
 * (the connection is suspended meanwhile), and is turned into JSON: the result on success, an
 * error object {"error": {message, type, code}} with a 4xx/5xx status otherwise. So a command
 * is carried out, checked and owned in one place whichever door it came through.
 *
 * Streams (server-sent events): an ask with "stream": true gets its answer's tokens through the
 * door's progress hook (the tokens of asks addressed to this connection only) and ends with the
 * answer event; a completion streams OpenAI's chunks; GET .../events follows every event of one
 * session (the door's publish hook), with a replay buffer of the last --http-replay events per
 * session for Last-Event-ID. A stream's bytes wait in its own buffer of at most
 * --http-stream-buffer bytes; a client that stops reading loses its stream when the buffer is full
 * (counted in event_drops), never the daemon's memory. While a stream has nothing to send its
 * connection is suspended (the content reader suspends it and returns 0) and resumed when bytes
 * arrive; idle streams get a comment line every HTTP_KEEPALIVE_S.
 *
 * Callers: with --http-tokens every request carries "Authorization: Bearer TOKEN" and acts as
 * the token's owner; without, every caller is the anonymous owner and only loopback addresses
 * are bound.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_msgpack.h"
#include "server_internal.h"

#define HTTP_KEEPALIVE_S     15
#define HTTP_SNDBUF          (64 * 1024) /* bytes of a connection's kernel send buffer */
#define HTTP_MAX_CONNECTIONS 4000        /* open at once; more are refused by libmicrohttpd */
#define HTTP_MAX_TOKENS      4096        /* lines of a tokens file */
#define HTTP_TOKEN_MAX       128
#define HTTP_IDLE_TIMEOUT    60 /* seconds a connection may sit without a request */

typedef enum route {
    R_NONE = 0,
    R_STATUS,      /* GET / */
    R_CAPTIONS,    /* GET /captions/NAME */
    R_METRICS,     /* GET /metrics */
    R_MODELS,      /* GET /v1/models */
    R_COMPLETIONS, /* POST /v1/completions */
    R_CHAT,        /* POST /v1/chat/completions */
    R_SESSIONS,    /* POST|GET /v1/sessions */
    R_SESSION,     /* GET|DELETE /v1/sessions/NAME */
    R_INGEST,      /* POST /v1/sessions/NAME/ingest */
    R_ASK,         /* POST /v1/sessions/NAME/ask */
    R_STANDING,    /* POST|GET /v1/sessions/NAME/standing, DELETE .../standing/QID */
    R_EVENTS,      /* GET /v1/sessions/NAME/events */
    R_SNAPSHOT,    /* POST /v1/sessions/NAME/snapshot */
    R_REPLACE,     /* POST /v1/sessions/NAME/replace */
} route_t;

typedef enum stream_kind { S_NONE = 0, S_ASK, S_EVENTS, S_OPENAI } stream_kind_t;

typedef struct htoken {
    char token[HTTP_TOKEN_MAX + 1];
    char owner[SRV_OWNER_LEN];
} htoken_t;

/* One session's replay buffer: its last `cap` events as ready SSE blocks. */
typedef struct hreplay {
    struct hreplay *next;
    char name[RILL_PROTO_MAX_NAME + 1];
    rill_sched_sid_t sid; /* the session it was filled for (a re-created name starts empty) */
    int32_t n, head;      /* blocks held; index of the oldest */
    char **blocks;        /* [cap] */
    char **ids;           /* [cap] their Last-Event-IDs */
} hreplay_t;

typedef struct hreq hreq_t;

typedef struct hdoor {
    srv_door_t door;
    srv_t *s;
    struct MHD_Daemon *d;
    htoken_t *tokens;
    int32_t n_tokens;
    uint64_t next_id;
    hreq_t *reqs; /* every request whose connection is open */
    hreplay_t *replays;
    int64_t last_tick_ns;
} hdoor_t;

struct hreq {
    hreq_t *next;
    hdoor_t *h;
    uint64_t id;
    struct MHD_Connection *mc;
    route_t route;
    const char *method;
    char session[RILL_PROTO_MAX_NAME + 1];
    uint64_t qid;
    bool has_qid;
    char owner[SRV_OWNER_LEN];
    bool authed;
    char *body;
    size_t len, cap;
    bool dispatched, suspended, queued;
    /* a plain response, ready to queue */
    bool have_resp;
    unsigned status;
    char *resp;
    size_t resp_len;
    const char *ctype;
    /* a stream */
    stream_kind_t kind;
    bool want_stream; /* asked for one ("stream": true, or the events route) */
    char *out;
    size_t out_len, out_off, out_cap;
    bool out_end, dead;
    int64_t last_out_ns;
    char last_event_id[160];
    bool replay_all;      /* events: ?replay=1, the whole replay buffer first */
    rill_sched_sid_t sid; /* events: the session followed */
    /* OpenAI */
    bool chat;
    char oid[48];
    int64_t created;
    char model[RILL_SCHED_MODEL_NAME];
    bool role_sent;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- responses ----------------------------------------------------------------------------- */

static rill_err_t err_of_name(const char *name) {
    for (int e = 0; e >= -64; e--) {
        const char *n = rill_err_name((rill_err_t)e);
        if (n != NULL && strcmp(n, name) == 0) {
            return (rill_err_t)e;
        }
    }
    return RILL_EINTERNAL;
}

static unsigned http_status_of(rill_err_t e) {
    switch (e) {
    case RILL_OK:
        return 200;
    case RILL_EINVAL:
    case RILL_EFORMAT:
    case RILL_ERANGE:
    case RILL_EUNSUPPORTED:
        return 400;
    case RILL_EPERM:
        return 403;
    case RILL_ENOTFOUND:
        return 404;
    case RILL_EEXIST:
        return 409;
    case RILL_EFULL:
    case RILL_EAGAIN:
    case RILL_EBUSY:
        return 429;
    case RILL_ETIMEDOUT:
        return 504;
    case RILL_ENOMEM:
    case RILL_ECLOSED:
        return 503;
    default:
        return 500;
    }
}

static const char *error_type_of(unsigned status) {
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 429:
        return "rate_limit_error";
    default:
        return status < 500 ? "invalid_request_error" : "server_error";
    }
}

/* OpenAI's error object for a rill status. Caller frees the text (NULL: out of memory). */
static char *error_json(unsigned status, const char *code, const char *message) {
    json_t *e = json_pack("{s:{s:s, s:s, s:s}}", "error", "message", message, "type",
                          error_type_of(status), "code", code);
    char *t = e != NULL ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    return t;
}

static void set_resp(hreq_t *q, unsigned status, char *body, const char *ctype) {
    free(q->resp);
    q->have_resp = true;
    q->status = status;
    q->resp = body;
    q->resp_len = body != NULL ? strlen(body) : 0;
    q->ctype = ctype;
}

static void set_json(hreq_t *q, unsigned status, json_t *j) {
    char *t =
        j != NULL ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    if (t == NULL) {
        set_resp(q, 503, error_json(503, rill_err_name(RILL_ENOMEM), "out of memory"),
                 "application/json");
        return;
    }
    set_resp(q, status, t, "application/json");
}

static void set_error(hreq_t *q, unsigned status, rill_err_t code, const char *message) {
    set_resp(q, status, error_json(status, rill_err_name(code), message), "application/json");
}

/* A request the door itself refuses (no such route, bad method, token, body): counted as the
 * command layer counts a frame it cannot decode (server.stats bad_requests, the metrics'
 * "invalid" command), then answered with the error. */
static void refuse(hreq_t *q, unsigned status, rill_err_t code, const char *message) {
    srv_t *s = q->h->s;
    s->requests++;
    s->bad_requests++;
    s->cmd_requests[SRV_CMD_INVALID]++;
    s->cmd_errors[SRV_CMD_INVALID]++;
    set_error(q, status, code, message);
}

static void resume(hreq_t *q) {
    if (q->suspended) {
        q->suspended = false;
        MHD_resume_connection(q->mc);
    }
}

/* ---- streams ------------------------------------------------------------------------------- */

/* Appends bytes to q's stream; a stream whose reader fell HTTP_STREAM_MAX behind is ended. */
static void stream_put(hreq_t *q, const char *b, size_t n) {
    if (q->dead || q->out_end) {
        return;
    }
    if (q->out_off > 0 && q->out_off == q->out_len) {
        q->out_off = q->out_len = 0;
    }
    if (q->out_len - q->out_off + n > (size_t)q->h->s->p.http_stream_max) {
        q->dead = true; /* the client stopped reading: end its stream, keep the daemon */
        q->h->s->event_drops++;
        resume(q);
        return;
    }
    if (q->out_len + n > q->out_cap) {
        if (q->out_off > 0) {
            memmove(q->out, q->out + q->out_off, q->out_len - q->out_off);
            q->out_len -= q->out_off;
            q->out_off = 0;
        }
        size_t cap = q->out_cap != 0 ? q->out_cap : 4096;
        while (cap < q->out_len + n) {
            cap *= 2;
        }
        char *o = rill_realloc(RILL_MEM_SERVER, q->out, cap);
        if (o == NULL) {
            q->dead = true;
            q->h->s->event_drops++;
            resume(q);
            return;
        }
        q->out = o;
        q->out_cap = cap;
    }
    memcpy(q->out + q->out_len, b, n);
    q->out_len += n;
    q->last_out_ns = now_ns();
    resume(q);
}

static void stream_puts(hreq_t *q, const char *t) {
    stream_put(q, t, strlen(t));
}

/* "event: KIND\n" (when kind) "data: JSON\n\n" */
static void stream_event(hreq_t *q, const char *kind, json_t *data) {
    char *t = data != NULL
                  ? json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(9))
                  : NULL;
    json_decref(data);
    if (t == NULL) {
        q->dead = true;
        resume(q);
        return;
    }
    if (kind != NULL) {
        stream_puts(q, "event: ");
        stream_puts(q, kind);
        stream_puts(q, "\n");
    }
    stream_puts(q, "data: ");
    stream_puts(q, t);
    stream_puts(q, "\n\n");
    free(t);
}

static void stream_end(hreq_t *q) {
    q->out_end = true;
    resume(q);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    hreq_t *q = cls;
    if (q->dead) {
        return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t have = q->out_len - q->out_off;
    if (have > 0) {
        size_t n = have < max ? have : max;
        memcpy(buf, q->out + q->out_off, n);
        q->out_off += n;
        return (ssize_t)n;
    }
    if (q->out_end) {
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    /* nothing yet: park the connection until stream_put resumes it */
    q->suspended = true;
    MHD_suspend_connection(q->mc);
    return 0;
}

/* ---- replay buffers ------------------------------------------------------------------------ */

static void replay_free(hreplay_t *r, int32_t cap) {
    for (int32_t i = 0; i < cap; i++) {
        rill_free(r->blocks[i]);
        rill_free(r->ids[i]);
    }
    rill_free(r->blocks);
    rill_free(r->ids);
    rill_free(r);
}

static hreplay_t *replay_of(hdoor_t *h, const srv_sess_t *x, bool make) {
    int32_t cap = h->s->p.http_replay;
    hreplay_t **pp = &h->replays;
    for (; *pp != NULL; pp = &(*pp)->next) {
        if (strcmp((*pp)->name, x->name) == 0) {
            break;
        }
    }
    hreplay_t *r = *pp;
    if (r != NULL && r->sid != x->sid) { /* the name was closed and made again */
        *pp = r->next;
        replay_free(r, cap);
        r = NULL;
    }
    if (r != NULL || !make || cap < 1) {
        return r;
    }
    r = rill_calloc(RILL_MEM_SERVER, 1, sizeof *r);
    if (r != NULL) {
        r->blocks = rill_calloc(RILL_MEM_SERVER, (size_t)cap, sizeof *r->blocks);
        r->ids = rill_calloc(RILL_MEM_SERVER, (size_t)cap, sizeof *r->ids);
    }
    if (r == NULL || r->blocks == NULL || r->ids == NULL) {
        if (r != NULL) {
            replay_free(r, 0);
        }
        return NULL;
    }
    snprintf(r->name, sizeof r->name, "%s", x->name);
    r->sid = x->sid;
    r->next = h->replays;
    h->replays = r;
    return r;
}

static void replay_add(hdoor_t *h, hreplay_t *r, const char *block, const char *id) {
    int32_t cap = h->s->p.http_replay;
    char *b = rill_malloc(RILL_MEM_SERVER, strlen(block) + 1);
    char *i = rill_malloc(RILL_MEM_SERVER, strlen(id) + 1);
    if (b == NULL || i == NULL) {
        rill_free(b);
        rill_free(i);
        return; /* the live streams still get it; only a later resume misses it */
    }
    strcpy(b, block);
    strcpy(i, id);
    int32_t at = (r->head + r->n) % cap;
    if (r->n == cap) {
        rill_free(r->blocks[r->head]);
        rill_free(r->ids[r->head]);
        at = r->head;
        r->head = (r->head + 1) % cap;
    } else {
        r->n++;
    }
    r->blocks[at] = b;
    r->ids[at] = i;
}

/* ---- the door's hooks ---------------------------------------------------------------------- */

static hreq_t *find_req(hdoor_t *h, const srv_addr_t *to) {
    uint64_t id;
    if (to->len != sizeof id) {
        return NULL;
    }
    memcpy(&id, to->b, sizeof id);
    for (hreq_t *q = h->reqs; q != NULL; q = q->next) {
        if (q->id == id) {
            return q;
        }
    }
    return NULL;
}

/* Unpacks a reply {v, id, status, message, result}. */
typedef struct reply {
    msgpack_unpacked u;
    rill_err_t status;
    char status_name[40];
    char message[512];
    const msgpack_object *result;
} reply_t;

static bool reply_read(reply_t *r, const void *buf, size_t len) {
    msgpack_unpacked_init(&r->u);
    r->result = NULL;
    r->status = RILL_EINTERNAL;
    snprintf(r->status_name, sizeof r->status_name, "%s", rill_err_name(RILL_EINTERNAL));
    r->message[0] = '\0';
    if (msgpack_unpack_next(&r->u, buf, len, NULL) != MSGPACK_UNPACK_SUCCESS ||
        r->u.data.type != MSGPACK_OBJECT_MAP) {
        return false;
    }
    const msgpack_object_map *m = &r->u.data.via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key, *v = &m->ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR) {
            continue;
        }
        if (rill_msgpack_key_is(k, "status") && v->type == MSGPACK_OBJECT_STR) {
            snprintf(r->status_name, sizeof r->status_name, "%.*s", (int)v->via.str.size,
                     v->via.str.ptr);
            r->status = err_of_name(r->status_name);
        } else if (rill_msgpack_key_is(k, "message") && v->type == MSGPACK_OBJECT_STR) {
            snprintf(r->message, sizeof r->message, "%.*s", (int)v->via.str.size, v->via.str.ptr);
        } else if (rill_msgpack_key_is(k, "result")) {
            r->result = v;
        }
    }
    return true;
}

static void events_begin(hdoor_t *h, hreq_t *q);
static void openai_reply(hreq_t *q, const reply_t *r);
static void openai_models(hreq_t *q, const reply_t *r);

/* A reply of the command layer for request `to`: the response, or the end of its stream. */
static void h_reply(srv_t *s, srv_door_t *d, const srv_addr_t *to, const void *buf, size_t len) {
    hdoor_t *h = (hdoor_t *)d;
    hreq_t *q = find_req(h, to);
    if (q == NULL) {
        s->reply_drops++; /* its client went away */
        return;
    }
    reply_t r;
    if (!reply_read(&r, buf, len)) {
        msgpack_unpacked_destroy(&r.u);
        set_error(q, 500, RILL_EINTERNAL, "unreadable reply");
        resume(q);
        return;
    }
    unsigned st = http_status_of(r.status);
    if (q->want_stream && q->kind == S_NONE && r.status == RILL_OK &&
        (q->route == R_ASK || q->route == R_COMPLETIONS || q->route == R_CHAT)) {
        q->kind = q->route == R_ASK ? S_ASK : S_OPENAI; /* answered at once (a cached answer) */
    }
    if (q->kind == S_ASK || (q->kind == S_OPENAI && r.status != RILL_OK)) {
        if (r.status == RILL_OK) {
            stream_event(q, "answer", srv_json_from_msgpack(r.result));
        } else {
            json_t *e = json_pack("{s:s, s:s, s:s}", "message", r.message, "type",
                                  error_type_of(st), "code", r.status_name);
            stream_event(q, q->kind == S_ASK ? "error" : NULL, json_pack("{s:o}", "error", e));
            if (q->kind == S_OPENAI) {
                stream_puts(q, "data: [DONE]\n\n");
            }
        }
        stream_end(q);
    } else if (q->route == R_COMPLETIONS || q->route == R_CHAT) {
        openai_reply(q, &r);
    } else if (r.status != RILL_OK) {
        set_resp(q, st, error_json(st, r.status_name, r.message), "application/json");
    } else if (q->route == R_EVENTS) {
        events_begin(h, q); /* session.stats said it is the caller's */
    } else if (q->route == R_METRICS) {
        const msgpack_object *t = rill_msgpack_get(r.result, "text");
        char *body = NULL;
        if (t != NULL && t->type == MSGPACK_OBJECT_STR &&
            (body = malloc(t->via.str.size + 1)) != NULL) {
            memcpy(body, t->via.str.ptr, t->via.str.size);
            body[t->via.str.size] = '\0';
        }
        if (body != NULL) {
            set_resp(q, 200, body, "text/plain; version=0.0.4; charset=utf-8");
        } else {
            set_error(q, 500, RILL_EINTERNAL, "metrics unavailable");
        }
    } else if (q->route == R_MODELS) {
        openai_models(q, &r);
    } else {
        json_t *j = srv_json_from_msgpack(r.result);
        if (json_is_null(j)) {
            json_decref(j);
            j = json_object();
        } else if (json_is_array(j)) {
            j = json_pack("{s:o}", q->route == R_STANDING ? "standing" : "sessions", j);
        }
        set_json(q, q->route == R_SESSIONS && strcmp(q->method, "POST") == 0 ? 201 : 200, j);
    }
    msgpack_unpacked_destroy(&r.u);
    resume(q);
}

/* The piece of an encoded token event (or of complete's progress map). */
static void h_progress(srv_t *s, srv_door_t *d, const srv_addr_t *to, const void *buf, size_t len) {
    (void)s;
    hreq_t *q = find_req((hdoor_t *)d, to);
    if (q == NULL || q->kind == S_NONE || q->kind == S_EVENTS) {
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, buf, len, NULL) == MSGPACK_UNPACK_SUCCESS) {
        const msgpack_object *p = rill_msgpack_get(&u.data, "piece");
        if (p != NULL && p->type == MSGPACK_OBJECT_STR) {
            json_t *piece =
                json_stringn(p->via.str.size > 0 ? p->via.str.ptr : "", p->via.str.size);
            if (q->kind == S_ASK) {
                stream_event(q, "token", json_pack("{s:o}", "piece", piece));
            } else if (q->chat) {
                json_t *delta =
                    q->role_sent ? json_pack("{s:o}", "content", piece)
                                 : json_pack("{s:s, s:o}", "role", "assistant", "content", piece);
                q->role_sent = true;
                stream_event(q, NULL,
                             json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n}]}", "id", q->oid,
                                       "object", "chat.completion.chunk", "created",
                                       (json_int_t)q->created, "model", q->model, "choices",
                                       "index", 0, "delta", delta, "finish_reason"));
            } else {
                stream_event(q, NULL,
                             json_pack("{s:s, s:s, s:I, s:s, s:[{s:i, s:o, s:n, s:n}]}", "id",
                                       q->oid, "object", "text_completion", "created",
                                       (json_int_t)q->created, "model", q->model, "choices",
                                       "index", 0, "text", piece, "logprobs", "finish_reason"));
            }
        }
    }
    msgpack_unpacked_destroy(&u);
}

/* An event of some session: to its replay buffer and to every stream that follows it. */
static void h_publish(srv_t *s, srv_door_t *d, const char *topic, const void *buf, size_t len) {
    hdoor_t *h = (hdoor_t *)d;
    const char *slash = strchr(topic, '/');
    srv_sess_t *x = slash != NULL ? srv_find_sess(s, topic, (size_t)(slash - topic)) : NULL;
    if (x == NULL) {
        return;
    }
    hreplay_t *r = replay_of(h, x, true);
    bool followed = false;
    for (hreq_t *q = h->reqs; q != NULL && !followed; q = q->next) {
        followed = q->kind == S_EVENTS && q->sid == x->sid;
    }
    if (r == NULL && !followed) {
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, buf, len, NULL) != MSGPACK_UNPACK_SUCCESS) {
        msgpack_unpacked_destroy(&u);
        return;
    }
    const msgpack_object *seq = rill_msgpack_get(&u.data, "seq");
    json_t *j = srv_json_from_msgpack(&u.data);
    char *t = j != NULL ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(j);
    char id[160];
    snprintf(id, sizeof id, "%s:%llu", topic,
             seq != NULL && seq->type == MSGPACK_OBJECT_POSITIVE_INTEGER
                 ? (unsigned long long)seq->via.u64
                 : 0ULL);
    size_t cap = (t != NULL ? strlen(t) : 0) + strlen(id) + strlen(slash + 1) + 32;
    char *block = t != NULL ? rill_malloc(RILL_MEM_SERVER, cap) : NULL;
    if (block != NULL) {
        snprintf(block, cap, "event: %s\nid: %s\ndata: %s\n\n", slash + 1, id, t);
        if (r != NULL) {
            replay_add(h, r, block, id);
        }
        for (hreq_t *q = h->reqs; q != NULL; q = q->next) {
            if (q->kind == S_EVENTS && q->sid == x->sid) {
                stream_puts(q, block);
            }
        }
    } else {
        s->event_drops++;
    }
    rill_free(block);
    free(t);
    msgpack_unpacked_destroy(&u);
}

/* The events route once the caller's ownership is known: the stream, the replay after
 * Last-Event-ID when there is one. */
static void events_begin(hdoor_t *h, hreq_t *q) {
    srv_sess_t *x = srv_find_sess(h->s, q->session, strlen(q->session));
    if (x == NULL) {
        set_error(q, 404, RILL_ENOTFOUND, "no such session");
        return;
    }
    q->kind = S_EVENTS;
    q->sid = x->sid;
    stream_puts(q, ": rill events\n\n");
    hreplay_t *r = replay_of(h, x, false);
    if ((q->last_event_id[0] == '\0' && !q->replay_all) || r == NULL) {
        return;
    }
    int32_t cap = h->s->p.http_replay, from = q->last_event_id[0] == '\0' ? 0 : -1;
    for (int32_t i = 0; i < r->n; i++) {
        if (strcmp(r->ids[(r->head + i) % cap], q->last_event_id) == 0) {
            from = i + 1;
        }
    }
    if (from < 0) {
        /* older than the buffer (or never sent): say so, then give what it holds */
        json_t *g = json_pack("{s:s, s:s}", "last_event_id", q->last_event_id, "message",
                              "that event is no longer in the replay buffer: events between it "
                              "and the first one below were lost");
        stream_event(q, "gap", g);
        from = 0;
    }
    for (int32_t i = from; i < r->n; i++) {
        stream_puts(q, r->blocks[(r->head + i) % cap]);
    }
}

/* ---- OpenAI shapes ------------------------------------------------------------------------- */

static void openai_models(hreq_t *q, const reply_t *r) {
    const msgpack_object *models = rill_msgpack_get(r->result, "models");
    json_t *data = json_array();
    for (uint32_t i = 0;
         models != NULL && models->type == MSGPACK_OBJECT_ARRAY && i < models->via.array.size;
         i++) {
        const msgpack_object *n = rill_msgpack_get(&models->via.array.ptr[i], "name");
        if (n != NULL && n->type == MSGPACK_OBJECT_STR) {
            json_array_append_new(data,
                                  json_pack("{s:s%, s:s, s:I, s:s}", "id", n->via.str.ptr,
                                            (size_t)n->via.str.size, "object", "model", "created",
                                            (json_int_t)q->h->s->started_s, "owned_by", "rill"));
        }
    }
    set_json(q, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* complete's result {text, finish_reason, prompt_tokens, completion_tokens, model} as OpenAI's
 * completion object, or the last chunk and [DONE] of its stream. */
static void openai_reply(hreq_t *q, const reply_t *r) {
    if (r->status != RILL_OK) {
        unsigned st = http_status_of(r->status);
        set_resp(q, st, error_json(st, r->status_name, r->message), "application/json");
        return;
    }
    const msgpack_object *text = rill_msgpack_get(r->result, "text"),
                         *fin = rill_msgpack_get(r->result, "finish_reason"),
                         *pt = rill_msgpack_get(r->result, "prompt_tokens"),
                         *ct = rill_msgpack_get(r->result, "completion_tokens");
    json_int_t np = pt != NULL ? (json_int_t)pt->via.i64 : 0,
               nc = ct != NULL ? (json_int_t)ct->via.i64 : 0;
    json_t *usage = json_pack("{s:I, s:I, s:I}", "prompt_tokens", np, "completion_tokens", nc,
                              "total_tokens", np + nc);
    json_t *finish = fin != NULL ? srv_json_from_msgpack(fin) : json_string("stop");
    if (q->kind == S_OPENAI) {
        json_t *choice =
            q->chat ? json_pack("{s:i, s:{}, s:o}", "index", 0, "delta", "finish_reason", finish)
                    : json_pack("{s:i, s:s, s:n, s:o}", "index", 0, "text", "", "logprobs",
                                "finish_reason", finish);
        stream_event(q, NULL,
                     json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", q->oid, "object",
                               q->chat ? "chat.completion.chunk" : "text_completion", "created",
                               (json_int_t)q->created, "model", q->model, "choices", choice,
                               "usage", usage));
        stream_puts(q, "data: [DONE]\n\n");
        stream_end(q);
        return;
    }
    json_t *t = text != NULL ? srv_json_from_msgpack(text) : json_string("");
    json_t *choice = q->chat
                         ? json_pack("{s:i, s:{s:s, s:o}, s:n, s:o}", "index", 0, "message", "role",
                                     "assistant", "content", t, "logprobs", "finish_reason", finish)
                         : json_pack("{s:i, s:o, s:n, s:o}", "index", 0, "text", t, "logprobs",
                                     "finish_reason", finish);
    set_json(q, 200,
             json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", q->oid, "object",
                       q->chat ? "chat.completion" : "text_completion", "created",
                       (json_int_t)q->created, "model", q->model, "choices", choice, "usage",
                       usage));
}

/* OpenAI's body -> complete's arguments. Fields rill does not use are accepted only at the
 * value that means "not used"; anything else is a 400 naming it. NULL with the message in q. */
static json_t *openai_args(hreq_t *q, json_t *body) {
    json_t *a = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        bool off =
            json_is_null(v) || json_is_false(v) || (json_is_number(v) && json_number_value(v) == 0);
        if (strcmp(k, "model") == 0 && json_is_string(v)) {
            snprintf(q->model, sizeof q->model, "%s", json_string_value(v));
            json_object_set(a, "model", v);
        } else if (strcmp(k, q->chat ? "messages" : "prompt") == 0) {
            if (!q->chat && json_is_array(v) && json_array_size(v) == 1 &&
                json_is_string(json_array_get(v, 0))) {
                v = json_array_get(v, 0); /* a batch of one prompt */
            }
            json_object_set(a, k, v);
        } else if (strcmp(k, "max_tokens") == 0 || strcmp(k, "max_completion_tokens") == 0) {
            if (!json_is_null(v)) {
                json_object_set(a, "max_tokens", v);
            }
        } else if (strcmp(k, "temperature") == 0 || strcmp(k, "top_p") == 0 ||
                   strcmp(k, "seed") == 0) {
            if (!json_is_null(v)) {
                json_object_set(a, k, v);
            }
        } else if (strcmp(k, "stop") == 0) {
            if (json_is_string(v)) {
                json_object_set_new(a, "stop", json_pack("[O]", v));
            } else if (!json_is_null(v)) {
                json_object_set(a, "stop", v);
            }
        } else if (strcmp(k, "stream") == 0) {
            q->want_stream = json_is_true(v);
        } else if (strcmp(k, "n") == 0 || strcmp(k, "best_of") == 0) {
            if (!json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1)) {
                refuse(q, 400, RILL_EUNSUPPORTED, "only n = 1 is supported");
                json_decref(a);
                return NULL;
            }
        } else if (strcmp(k, "user") == 0 || strcmp(k, "stream_options") == 0 ||
                   (off && (strcmp(k, "frequency_penalty") == 0 ||
                            strcmp(k, "presence_penalty") == 0 || strcmp(k, "logprobs") == 0 ||
                            strcmp(k, "top_logprobs") == 0 || strcmp(k, "echo") == 0 ||
                            strcmp(k, "suffix") == 0 || strcmp(k, "logit_bias") == 0)) ||
                   (strcmp(k, "logit_bias") == 0 && json_is_object(v) &&
                    json_object_size(v) == 0)) {
            /* accepted, and meaningless here */
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unsupported field '%.*s'", 80, k);
            refuse(q, 400, RILL_EINVAL, msg);
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* ---- routing ------------------------------------------------------------------------------- */

static bool name_ok(const char *p, size_t n) {
    if (n < 1 || n > RILL_PROTO_MAX_NAME) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)p[i]) && p[i] != '_' && p[i] != '-' && p[i] != '.') {
            return false;
        }
    }
    return true;
}

/* Parses url into q->route, q->session, q->qid. false: no such route (404). */
static bool parse_route(hreq_t *q, const char *url) {
    if (strcmp(url, "/") == 0) {
        q->route = R_STATUS;
        return true;
    }
    if (strcmp(url, "/metrics") == 0) {
        q->route = R_METRICS;
        return true;
    }
    if (strncmp(url, "/captions/", 10) == 0) {
        /* the page names its session itself (its path); only the name's form is checked here */
        size_t n = strlen(url + 10);
        if (n > 0 && url[10 + n - 1] == '/') {
            n--;
        }
        if (!name_ok(url + 10, n)) {
            return false;
        }
        memcpy(q->session, url + 10, n);
        q->session[n] = '\0';
        q->route = R_CAPTIONS;
        return true;
    }
    if (strcmp(url, "/v1/models") == 0) {
        q->route = R_MODELS;
        return true;
    }
    if (strcmp(url, "/v1/completions") == 0) {
        q->route = R_COMPLETIONS;
        return true;
    }
    if (strcmp(url, "/v1/chat/completions") == 0) {
        q->route = R_CHAT;
        q->chat = true;
        return true;
    }
    const char *pre = "/v1/sessions";
    size_t pl = strlen(pre);
    if (strncmp(url, pre, pl) != 0) {
        return false;
    }
    const char *p = url + pl;
    if (*p == '\0' || strcmp(p, "/") == 0) {
        q->route = R_SESSIONS;
        return true;
    }
    if (*p++ != '/') {
        return false;
    }
    const char *e = strchr(p, '/');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
    if (!name_ok(p, n)) {
        return false;
    }
    memcpy(q->session, p, n);
    q->session[n] = '\0';
    if (e == NULL || strcmp(e, "/") == 0) {
        q->route = R_SESSION;
        return true;
    }
    static const struct {
        const char *sub;
        route_t r;
    } subs[] = { { "/ingest", R_INGEST }, { "/ask", R_ASK },           { "/standing", R_STANDING },
                 { "/events", R_EVENTS }, { "/snapshot", R_SNAPSHOT }, { "/replace", R_REPLACE } };
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        if (strcmp(e, subs[i].sub) == 0) {
            q->route = subs[i].r;
            return true;
        }
    }
    if (strncmp(e, "/standing/", 10) == 0) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(e + 10, &end, 10);
        if (end != e + 10 && *end == '\0' && errno == 0 && isdigit((unsigned char)e[10])) {
            q->route = R_STANDING;
            q->qid = v;
            q->has_qid = true;
            return true;
        }
    }
    return false;
}

/* The command a route and method name; NULL: the method is not allowed there. */
static const char *command_of(const hreq_t *q) {
    const char *m = q->method;
    bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0, del = strcmp(m, "DELETE") == 0;
    switch (q->route) {
    case R_METRICS:
        return get ? "server.metrics" : NULL;
    case R_MODELS:
        return get ? "server.stats" : NULL;
    case R_COMPLETIONS:
    case R_CHAT:
        return post ? "complete" : NULL;
    case R_SESSIONS:
        return post ? "session.create" : get ? "session.list" : NULL;
    case R_SESSION:
        return get ? "session.stats" : del ? "session.close" : NULL;
    case R_INGEST:
        return post ? "ingest" : NULL; /* text or ticks: decided by the body */
    case R_REPLACE:
        return post ? "ingest.replace" : NULL;
    case R_SNAPSHOT:
        return post ? "session.snapshot" : NULL;
    case R_ASK:
        return post ? "ask" : NULL;
    case R_STANDING:
        return q->has_qid ? (del ? "standing.unregister" : NULL)
               : post     ? "standing.register"
               : get      ? "standing.list"
                          : NULL;
    case R_EVENTS:
        return get ? "session.stats" : NULL;
    default:
        return NULL;
    }
}

/* Builds the request map for q from its JSON body and hands it to the command layer. */
static void dispatch(hdoor_t *h, hreq_t *q) {
    srv_t *s = h->s;
    if (q->route == R_STATUS || q->route == R_CAPTIONS) {
        if (strcmp(q->method, "GET") != 0) {
            refuse(q, 405, RILL_EINVAL, "GET only");
            return;
        }
        /* static pages: what they show comes from the routes they call, under their rules */
        const bool st = q->route == R_STATUS;
        const size_t len = st ? srv_status_page_len : srv_captions_page_len;
        char *page = malloc(len + 1);
        if (page == NULL) {
            refuse(q, 503, RILL_ENOMEM, "out of memory");
            return;
        }
        memcpy(page, st ? srv_status_page : srv_captions_page, len);
        page[len] = '\0';
        set_resp(q, 200, page, "text/html; charset=utf-8");
        return;
    }
    const char *cmd = command_of(q);
    if (cmd == NULL) {
        char msg[80];
        snprintf(msg, sizeof msg, "method %s is not allowed here", q->method);
        refuse(q, 405, RILL_EINVAL, msg);
        return;
    }
    json_t *body = NULL;
    if (q->len > 0) {
        json_error_t je;
        body = json_loadb(q->body, q->len, JSON_REJECT_DUPLICATES, &je);
        if (body == NULL || !json_is_object(body)) {
            char msg[300];
            if (body == NULL) {
                snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d, column %d)",
                         je.text, je.line, je.column);
            } else {
                snprintf(msg, sizeof msg, "the body must be a JSON object");
            }
            json_decref(body);
            refuse(q, 400, RILL_EFORMAT, msg);
            return;
        }
    } else {
        body = json_object();
    }
    json_t *args = body;
    if (q->route == R_COMPLETIONS || q->route == R_CHAT) {
        args = openai_args(q, body);
        json_decref(body);
        if (args == NULL) {
            return; /* the error is set */
        }
        snprintf(q->oid, sizeof q->oid, "%s-%llu", q->chat ? "chatcmpl" : "cmpl",
                 (unsigned long long)q->id);
        q->created = (int64_t)time(NULL);
        if (q->model[0] == '\0') {
            snprintf(q->model, sizeof q->model, "%s", s->models[s->default_llm].name);
        }
    } else if (q->route == R_ASK || q->route == R_STANDING) {
        json_t *st = json_object_get(args, "stream");
        if (st != NULL) {
            if (q->route != R_ASK || !json_is_boolean(st)) {
                json_decref(args);
                refuse(q, 400, RILL_EINVAL, "'stream' is a boolean of ask");
                return;
            }
            q->want_stream = json_is_true(st);
            json_object_del(args, "stream");
        }
    }
    if (strcmp(cmd, "ingest") == 0) {
        bool text = json_object_get(args, "text") != NULL,
             ticks = json_object_get(args, "ticks") != NULL;
        if (text == ticks) {
            json_decref(args);
            refuse(q, 400, RILL_EINVAL, "ingest takes either \"text\" or \"ticks\"");
            return;
        }
        cmd = text ? "ingest.text" : "ingest.ticks";
    }
    if (q->session[0] != '\0') {
        if (json_object_get(args, "session") != NULL) {
            json_decref(args);
            refuse(q, 400, RILL_EINVAL, "the session is named by the path, not the body");
            return;
        }
        json_object_set_new(args, "session", json_string(q->session));
    }
    if (q->has_qid) {
        json_object_set_new(args, "qid", json_integer((json_int_t)q->qid));
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = srv_json_request(&sb, q->id, cmd, args);
    json_decref(args);
    if (rc != 0 || sb.data == NULL) {
        msgpack_sbuffer_destroy(&sb);
        refuse(q, 400, RILL_EFORMAT, "the body nests too deep");
        return;
    }
    srv_call_t c = { .owner = q->owner };
    c.from.door = &h->door;
    c.from.len = sizeof q->id;
    memcpy(c.from.b, &q->id, sizeof q->id);
    srv_handle(s, &c, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (!q->have_resp && q->kind == S_NONE && q->want_stream &&
        (q->route == R_ASK || q->route == R_COMPLETIONS || q->route == R_CHAT)) {
        /* accepted and under way (a refusal came back at once, as a plain error): the stream
         * starts, its tokens arrive through h_progress */
        q->kind = q->route == R_ASK ? S_ASK : S_OPENAI;
    }
}

/* ---- libmicrohttpd's callbacks ------------------------------------------------------------- */

/* The owner of the request's token: "Authorization: Bearer TOKEN", or the query argument
 * ?token=TOKEN (a browser's EventSource cannot send headers). NULL: none or unknown. */
static const char *owner_of_token(const hdoor_t *h, struct MHD_Connection *mc) {
    const char *auth = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    const char *t = NULL;
    if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0) {
        t = auth + 7;
        while (*t == ' ') {
            t++;
        }
    } else {
        t = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "token");
    }
    if (t == NULL) {
        return NULL;
    }
    for (int32_t i = 0; i < h->n_tokens; i++) {
        if (strcmp(h->tokens[i].token, t) == 0) {
            return h->tokens[i].owner;
        }
    }
    return NULL;
}

static enum MHD_Result queue(hreq_t *q) {
    struct MHD_Response *r;
    unsigned status = 200;
    if (q->have_resp) {
        r = MHD_create_response_from_buffer(q->resp_len, q->resp != NULL ? q->resp : "",
                                            MHD_RESPMEM_MUST_COPY);
        status = q->status;
        if (r != NULL) {
            MHD_add_response_header(r, "Content-Type", q->ctype);
        }
    } else {
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, q, NULL);
        if (r != NULL) {
            MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
            MHD_add_response_header(r, "Cache-Control", "no-cache");
            MHD_add_response_header(r, "X-Accel-Buffering", "no");
        }
    }
    if (r == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(r, "Server", "rilld");
    q->queued = true;
    enum MHD_Result ok = MHD_queue_response(q->mc, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **ctx) {
    (void)version;
    hdoor_t *h = cls;
    hreq_t *q = *ctx;
    if (q == NULL) {
        q = rill_calloc(RILL_MEM_SERVER, 1, sizeof *q);
        if (q == NULL) {
            return MHD_NO; /* closes the connection */
        }
        q->h = h;
        q->mc = mc;
        q->id = h->next_id++;
        q->method = method;
        q->next = h->reqs;
        h->reqs = q;
        *ctx = q;
        if (!parse_route(q, url)) {
            refuse(q, 404, RILL_ENOTFOUND, "no such route (docs/protocol.md, HTTP)");
        } else if (h->n_tokens > 0) {
            const char *o = owner_of_token(h, mc);
            if (o == NULL) {
                refuse(q, 401, RILL_EPERM, "a valid 'Authorization: Bearer TOKEN' is needed");
            } else {
                snprintf(q->owner, sizeof q->owner, "%s", o);
            }
        }
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        if (!q->have_resp && cl != NULL && strtoull(cl, NULL, 10) > (uint64_t)h->s->p.max_msg) {
            refuse(q, 413, RILL_ERANGE, "the body is larger than --max-msg");
        }
        if (q->route == R_EVENTS) {
            const char *le = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Last-Event-ID");
            const char *all = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "replay");
            if (le != NULL) {
                snprintf(q->last_event_id, sizeof q->last_event_id, "%s", le);
            }
            q->replay_all = all != NULL && strcmp(all, "1") == 0;
        }
        if (q->have_resp) {
            return queue(q); /* refused before the body: it is not read */
        }
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!q->have_resp) {
            if (q->len + *upload_size > (size_t)h->s->p.max_msg) {
                refuse(q, 413, RILL_ERANGE, "the body is larger than --max-msg");
                *upload_size = 0;
                return queue(q);
            }
            if (q->len + *upload_size > q->cap) {
                size_t cap = q->cap != 0 ? q->cap : 1024;
                while (cap < q->len + *upload_size) {
                    cap *= 2;
                }
                char *b = rill_realloc(RILL_MEM_SERVER, q->body, cap);
                if (b == NULL) {
                    refuse(q, 503, RILL_ENOMEM, "out of memory");
                    *upload_size = 0;
                    return queue(q);
                }
                q->body = b;
                q->cap = cap;
            }
            memcpy(q->body + q->len, upload, *upload_size);
            q->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->queued) {
        return MHD_YES;
    }
    if (!q->dispatched) {
        q->dispatched = true;
        if (!q->have_resp) {
            dispatch(h, q);
        }
    }
    if (q->have_resp || q->kind != S_NONE) {
        return queue(q);
    }
    q->suspended = true; /* until the reply arrives (h_reply resumes it) */
    MHD_suspend_connection(mc);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **ctx,
                         enum MHD_RequestTerminationCode why) {
    (void)mc;
    (void)why;
    hdoor_t *h = cls;
    hreq_t *q = *ctx;
    if (q == NULL) {
        return;
    }
    for (hreq_t **pp = &h->reqs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    }
    free(q->resp);
    rill_free(q->body);
    rill_free(q->out);
    rill_free(q);
    *ctx = NULL;
}

/* Each connection's kernel send buffer is kept small (HTTP_SNDBUF), so what a slow reader holds
 * up is mostly in its stream's own bounded buffer, where it is counted, and a thousand open
 * connections do not pin megabytes of kernel memory each. */
static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code) {
    (void)cls;
    (void)socket_ctx;
    if (code != MHD_CONNECTION_NOTIFY_STARTED) {
        return;
    }
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (i != NULL) {
        int sz = HTTP_SNDBUF;
        setsockopt(i->connect_fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') {
        msg[--n] = '\0';
    }
    /* mostly clients that went away mid-response, which is normal for event streams: debug
     * level; what matters (a bind that failed) rilld reports itself */
    RILL_LOGD("rilld: http: %s", msg);
}

/* ---- start, stop, the poll loop's side ----------------------------------------------------- */

/* Reads the tokens file: lines "TOKEN OWNER"; '#' comments and blank lines are skipped. */
static int load_tokens(hdoor_t *h, const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        RILL_LOGE("rilld: --http-tokens %s: %s", path, strerror(errno));
        return -1;
    }
    h->tokens = rill_calloc(RILL_MEM_SERVER, HTTP_MAX_TOKENS, sizeof *h->tokens);
    if (h->tokens == NULL) {
        fclose(f);
        RILL_LOGE("rilld: out of memory");
        return -1;
    }
    char line[512];
    int lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char tok[HTTP_TOKEN_MAX + 2], owner[SRV_OWNER_LEN + 1], extra[2];
        char *hash = strchr(line, '#');
        if (hash != NULL) {
            *hash = '\0';
        }
        int n = sscanf(line, "%129s %41s %1s", tok, owner, extra);
        if (n <= 0) {
            continue;
        }
        const char *why = n != 2                         ? "want 'TOKEN OWNER'"
                          : strlen(tok) > HTTP_TOKEN_MAX ? "token longer than 128 bytes"
                          : strlen(tok) < 16             ? "token shorter than 16 bytes"
                          : strlen(owner) >= SRV_OWNER_LEN || !name_ok(owner, strlen(owner))
                              ? "owner is not 1..40 of [A-Za-z0-9_.-]"
                          : h->n_tokens == HTTP_MAX_TOKENS ? "more than 4096 tokens"
                                                           : NULL;
        for (int32_t i = 0; why == NULL && i < h->n_tokens; i++) {
            if (strcmp(h->tokens[i].token, tok) == 0) {
                why = "token listed twice";
            }
        }
        if (why != NULL) {
            RILL_LOGE("rilld: --http-tokens %s line %d: %s", path, lineno, why);
            rc = -1;
            break;
        }
        snprintf(h->tokens[h->n_tokens].token, sizeof h->tokens[0].token, "%s", tok);
        snprintf(h->tokens[h->n_tokens].owner, sizeof h->tokens[0].owner, "%s", owner);
        h->n_tokens++;
    }
    fclose(f);
    if (rc == 0 && h->n_tokens == 0) {
        RILL_LOGE("rilld: --http-tokens %s lists no token", path);
        rc = -1;
    }
    return rc;
}

/* "HOST:PORT" (IPv4, a name resolving to loopback is not looked up: "localhost" means
 * 127.0.0.1) or "[IPv6]:PORT" into *sa. */
static int parse_ep(const char *ep, struct sockaddr_storage *sa, bool *loop) {
    memset(sa, 0, sizeof *sa);
    const char *colon = strrchr(ep, ':');
    if (colon == NULL) {
        return -1;
    }
    char *end = NULL;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end != '\0' || port < 0 || port > 65535) {
        return -1;
    }
    char host[64];
    size_t n = (size_t)(colon - ep);
    if (n == 0 || n >= sizeof host) {
        return -1;
    }
    memcpy(host, ep, n);
    host[n] = '\0';
    if (host[0] == '[' && host[n - 1] == ']') {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        host[n - 1] = '\0';
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1) {
            return -1;
        }
        *loop = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
        return 0;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    if (strcmp(host, "localhost") == 0) {
        snprintf(host, sizeof host, "127.0.0.1");
    }
    if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) {
        return -1;
    }
    *loop = (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
    return 0;
}

int srv_http_start(srv_t *s) {
    const rill_server_params_t *p = &s->p;
    if (p->http_ep == NULL) {
        return 0;
    }
    struct sockaddr_storage sa;
    bool loop = false;
    if (parse_ep(p->http_ep, &sa, &loop) != 0) {
        RILL_LOGE("rilld: --http %s: want HOST:PORT (an IPv4 address, localhost, or [IPv6])",
                  p->http_ep);
        return -1;
    }
    if (!loop && p->http_tokens == NULL && !p->insecure_bind) {
        RILL_LOGE("rilld: refusing to serve HTTP on %s without --http-tokens FILE (or pass "
                  "--insecure-bind)",
                  p->http_ep);
        return -1;
    }
    if (p->http_replay < 0 || p->http_stream_max < 4096) {
        RILL_LOGE("rilld: --http-replay must be >= 0 and --http-stream-buffer >= 4096");
        return -1;
    }
    hdoor_t *h = rill_calloc(RILL_MEM_SERVER, 1, sizeof *h);
    if (h == NULL) {
        RILL_LOGE("rilld: out of memory");
        return -1;
    }
    /* a descriptor per connection: take what the hard limit allows (many systems start
     * processes at 1024, which HTTP_MAX_CONNECTIONS idle clients would exhaust) */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    h->s = s;
    h->next_id = 1;
    h->door = (srv_door_t){
        .name = "http", .reply = h_reply, .publish = h_publish, .progress = h_progress
    };
    s->http = h;
    if (p->http_tokens != NULL && load_tokens(h, p->http_tokens) != 0) {
        return -1;
    }
    h->d =
        MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
                             (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                         0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED,
                         on_completed, h, MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned int)HTTP_MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTP_IDLE_TIMEOUT,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_END);
    if (h->d == NULL) {
        RILL_LOGE("rilld: cannot serve HTTP on %s (in use, or not an address of this machine)",
                  p->http_ep);
        return -1;
    }
    s->doors[s->n_doors++] = &h->door;
    h->last_tick_ns = now_ns();
    RILL_LOGI("rilld: HTTP on http://%s/ (%s)", p->http_ep,
              h->n_tokens > 0 ? "bearer tokens: each token's sessions are its own"
                              : "no authentication: one anonymous owner");
    return 0;
}

void srv_http_stop(srv_t *s) {
    hdoor_t *h = s->http;
    if (h == NULL) {
        return;
    }
    if (h->d != NULL) {
        /* libmicrohttpd wants no connection suspended when it stops: streams end, requests
         * still waiting for an answer get 503, and one more run sends what it can */
        for (hreq_t *q = h->reqs; q != NULL; q = q->next) {
            if (q->kind != S_NONE) {
                stream_end(q);
            } else if (!q->have_resp && q->dispatched) {
                set_error(q, 503, RILL_ECLOSED, "rilld is stopping");
                resume(q);
            }
        }
        MHD_run(h->d);
        for (hreq_t *q = h->reqs; q != NULL; q = q->next) {
            resume(q); /* anything parked again: libmicrohttpd aborts on a suspended one */
        }
        MHD_stop_daemon(h->d); /* completes (frees) every request */
    }
    while (h->replays != NULL) {
        hreplay_t *r = h->replays;
        h->replays = r->next;
        replay_free(r, s->p.http_replay);
    }
    rill_free(h->tokens);
    rill_free(h);
    s->http = NULL;
}

int srv_http_fd(const srv_t *s) {
    const hdoor_t *h = s->http;
    if (h == NULL || h->d == NULL) {
        return -1;
    }
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
    return i != NULL ? i->epoll_fd : -1;
}

int srv_http_timeout_ms(const srv_t *s, int max_ms) {
    const hdoor_t *h = s->http;
    MHD_UNSIGNED_LONG_LONG t;
    if (h != NULL && h->d != NULL && MHD_get_timeout(h->d, &t) == MHD_YES && t < (unsigned)max_ms) {
        return (int)t;
    }
    return max_ms;
}

void srv_http_run(srv_t *s) {
    hdoor_t *h = s->http;
    if (h == NULL || h->d == NULL) {
        return;
    }
    int64_t now = now_ns();
    if (now - h->last_tick_ns >= 1000000000) {
        h->last_tick_ns = now;
        for (hreq_t *q = h->reqs; q != NULL; q = q->next) {
            if (q->kind != S_EVENTS || q->out_end) {
                continue;
            }
            const srv_sess_t *x = srv_find_sess(s, q->session, strlen(q->session));
            if (x == NULL || x->sid != q->sid) {
                stream_puts(q, "event: closed\ndata: {}\n\n"); /* the session is gone */
                stream_end(q);
            } else if (now - q->last_out_ns >= (int64_t)HTTP_KEEPALIVE_S * 1000000000) {
                stream_puts(q, ": keepalive\n\n");
            }
        }
        for (hreplay_t **pp = &h->replays; *pp != NULL;) {
            hreplay_t *r = *pp;
            const srv_sess_t *x = srv_find_sess(s, r->name, strlen(r->name));
            if (x == NULL || x->sid != r->sid) { /* its session was closed */
                *pp = r->next;
                replay_free(r, s->p.http_replay);
            } else {
                pp = &r->next;
            }
        }
    }
    MHD_run(h->d);
}
