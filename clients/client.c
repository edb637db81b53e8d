/*
 * client.c - the client's sockets, requests and events (contract: rill_client.h; wire:
 * docs/protocol.md).
 *
 * Design. One DEALER for requests, one SUB for events, one ZeroMQ context per client, all
 * used by the calling thread only. A call packs {v, id, cmd, args}, sends it when the DEALER
 * has a connection (ZMQ_IMMEDIATE: a request is never queued for a peer that is not there,
 * so a call to a server that is down times out with "no connection" and leaves nothing to be
 * delivered later), then polls the DEALER, and while an ask streams the SUB too, until the
 * reply with its id comes. Request ids start at a random point above 2^40 per client, so the
 * token events of two clients' questions on one session (tagged with their request ids) are
 * told apart.
 *
 * Everything read from the network is checked before use: frame counts, then the payload with
 * rill_msgpack_check_utf8 (lengths against the bytes left, depth, every str valid UTF-8), then
 * msgpack-c unpacks it into a zone, then every field the client uses is checked for presence
 * and type. Unknown reply and
 * event fields are ignored (a later protocol version may add some).
 *
 * Events for the user's subscriptions that arrive while a call runs are queued (raw, bounded:
 * the oldest goes) and decoded when rill_client_next_event hands them out; that is also where
 * the per-topic sequence numbers are followed, so a gap is reported in the order events were
 * published. With CURVE a socket monitor on the DEALER reports handshakes, so a key the server
 * refuses fails the call with RILL_EPERM instead of a timeout.
 *
 * Rejected: a background thread owning the sockets (asynchronous replies, callbacks on another
 * thread) - the synchronous API is what the CLI, the tests and the demos need, and it keeps
 * every socket on one thread (STYLE.md rule 18) without locks.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "client_internal.h"
#include "rill_alloc.h"
#include "rill_curve.h"
#include "rill_log.h"
#include "rill_rand.h"
#include "rill_msgpack.h"

#define ZONE_CHUNK 8192
#define GRACE_MS   1000 /* after an ask's reply: wait for its answer event at most this long */
#define MAX_SUBS   256
#define MAX_TOPICS 1024
#define MAX_PREFIX 256

rill_client_params_t rill_client_default_params(void) {
    return (rill_client_params_t){ .request_ep = RILL_CLIENT_DEFAULT_REQUESTS,
                                   .event_ep = RILL_CLIENT_DEFAULT_EVENTS,
                                   .curve_server_key = NULL,
                                   .curve_public_key = NULL,
                                   .curve_secret_key = NULL,
                                   .timeout_ms = 30000,
                                   .max_msg = 16 << 20,
                                   .max_request = 1 << 20,
                                   .event_queue = 10000 };
}

/* ---- messages ------------------------------------------------------------------------------ */

rill_err_t rill__client_fail(rill_client_t *c, rill_err_t err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return rill__error_str(err, c->err); /* the caller reads rill_last_error */
}

static rill_err_t new_fail(char *err, size_t errlen, rill_err_t code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static rill_err_t new_fail(char *err, size_t errlen, rill_err_t code, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

rill_client_stats_t rill_client_stats(const rill_client_t *c) {
    rill_client_stats_t z = { 0 };
    return c != NULL ? c->st : z;
}

bool rill__client_name_ok(rill_client_t *c, const char *name) {
    size_t n = name != NULL ? strlen(name) : 0;
    bool ok = n >= 1 && n <= CL_MAX_NAME;
    for (size_t i = 0; ok && i < n; i++) {
        char ch = name[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '.' || ch == '-';
    }
    if (!ok) {
        rill__client_fail(c, RILL_EINVAL, "session name '%.80s': 1..64 bytes of [A-Za-z0-9_.-]",
                          name != NULL ? name : "(null)");
    }
    return ok;
}

/* ---- decoded msgpack ------------------------------------------------------------------------ */

const msgpack_object *rill__client_get(const msgpack_object *map, const char *key) {
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP) {
        return NULL;
    }
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl &&
            memcmp(k->via.str.ptr, key, kl) == 0) {
            return &map->via.map.ptr[i].val;
        }
    }
    return NULL;
}

bool rill__client_i64(const msgpack_object *o, int64_t *v) {
    if (o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *v = (int64_t)o->via.u64;
        return true;
    }
    if (o != NULL && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = o->via.i64;
        return true;
    }
    return false;
}

bool rill__client_u64(const msgpack_object *o, uint64_t *v) {
    if (o != NULL && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *v = o->via.u64;
        return true;
    }
    return false;
}

bool rill__client_ttft_parts(const msgpack_object *m, int64_t *backlog, double *ttft_compute_ms) {
    const msgpack_object *b = rill__client_get(m, "backlog");
    const msgpack_object *t = rill__client_get(m, "ttft_compute_ms");
    *backlog = -1;
    *ttft_compute_ms = NAN;
    return (b == NULL || rill__client_i64(b, backlog)) &&
           (t == NULL || rill__client_f64(t, ttft_compute_ms));
}

bool rill__client_f64(const msgpack_object *o, double *v) {
    int64_t i;
    if (o != NULL && (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)) {
        *v = o->via.f64;
        return true;
    }
    if (rill__client_i64(o, &i)) {
        *v = (double)i;
        return true;
    }
    return false;
}

bool rill__client_str(msgpack_zone *z, const msgpack_object *o, const char **s, size_t *len) {
    if (o == NULL || o->type != MSGPACK_OBJECT_STR) {
        return false;
    }
    char *p = msgpack_zone_malloc(z, (size_t)o->via.str.size + 1);
    if (p == NULL) {
        return false;
    }
    memcpy(p, o->via.str.ptr, o->via.str.size);
    p[o->via.str.size] = '\0';
    *s = p;
    if (len != NULL) {
        *len = o->via.str.size;
    }
    return true;
}

/* Checks buf[0, len) (untrusted) and unpacks it into zone z: one msgpack map with string keys,
 * none twice, every str valid UTF-8 (the protocol's promise: a reply or event that breaks it is
 * malformed, as it is to any strict msgpack reader). Returns RILL_OK, or RILL_EFORMAT /
 * RILL_ENOMEM with msg set. */
static rill_err_t unpack_checked(msgpack_zone *z, const void *buf, size_t len, const char *what,
                                 msgpack_object *out, char *msg, size_t msglen) {
    rill_err_t ce = rill_msgpack_check_utf8(buf, len, CL_MAX_DEPTH, NULL);
    if (ce != RILL_OK) {
        snprintf(msg, msglen, "malformed %s: %s", what, rill_last_error(ce));
        return RILL_EFORMAT;
    }
    /* msgpack-c points strings into its input: the copy lives as long as the zone */
    char *copy = msgpack_zone_malloc(z, len);
    size_t off = 0;
    if (copy == NULL) {
        snprintf(msg, msglen, "out of memory decoding a %s", what);
        return RILL_ENOMEM;
    }
    memcpy(copy, buf, len);
    if (msgpack_unpack(copy, len, &off, z, out) != MSGPACK_UNPACK_SUCCESS || off != len) {
        snprintf(msg, msglen, "malformed %s: not one msgpack value", what);
        return RILL_EFORMAT;
    }
    if (out->type != MSGPACK_OBJECT_MAP) {
        snprintf(msg, msglen, "malformed %s: not a map", what);
        return RILL_EFORMAT;
    }
    for (uint32_t i = 0; i < out->via.map.size; i++) {
        const msgpack_object *k = &out->via.map.ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR) {
            snprintf(msg, msglen, "malformed %s: a key that is not a string", what);
            return RILL_EFORMAT;
        }
        for (uint32_t j = 0; j < i; j++) {
            const msgpack_object *k2 = &out->via.map.ptr[j].key;
            if (k2->via.str.size == k->via.str.size &&
                memcmp(k2->via.str.ptr, k->via.str.ptr, k->via.str.size) == 0) {
                snprintf(msg, msglen, "malformed %s: key '%.*s' given twice", what,
                         (int)(k->via.str.size < 40 ? k->via.str.size : 40), k->via.str.ptr);
                return RILL_EFORMAT;
            }
        }
    }
    return RILL_OK;
}

/* ---- keys ---------------------------------------------------------------------------------- */

/* A key given as a file (when spec names one) or as Z85 text (rill_curve.h reads both). */
static rill_err_t load_key(const char *spec, const char *what, char out[41], char *err,
                           size_t errlen) {
    struct stat sb;
    if (stat(spec, &sb) == 0) {
        rill_err_t ke = rill_curve_key_read(spec, out, NULL);
        if (ke != RILL_OK) {
            return new_fail(err, errlen, RILL_EINVAL, "%s %s", what, rill_last_error(ke));
        }
        return RILL_OK;
    }
    if (rill_curve_key_parse(spec, strlen(spec), out, NULL) != RILL_OK) {
        return new_fail(err, errlen, RILL_EINVAL,
                        "%s: '%.60s' is neither a key file nor a Z85 key (40 characters)", what,
                        spec);
    }
    return RILL_OK;
}

/* ---- life ---------------------------------------------------------------------------------- */

static int sock_opts(rill_client_t *c, void *s, const rill_client_params_t *p, const char *keys) {
    int zero = 0, one = 1, hb_ivl = 2000, hb_to = 6000;
    int64_t maxmsg = p->max_msg;
    int rc = zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    rc = rc == 0 ? zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) : rc;
    rc = rc == 0 ? zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl) : rc;
    rc = rc == 0 ? zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &hb_to, sizeof hb_to) : rc;
    if (s == c->req) {
        rc = rc == 0 ? zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one) : rc;
    }
    if (keys != NULL) {
        rc = rc == 0 ? zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, keys, 40) : rc;
        rc = rc == 0 ? zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, keys + 41, 40) : rc;
        rc = rc == 0 ? zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, keys + 82, 40) : rc;
    }
    return rc;
}

static rill_err_t client_new_buf(const rill_client_params_t *params, rill_client_t **out, char *err,
                                 size_t errlen) {
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    if (out == NULL) {
        return new_fail(err, errlen, RILL_EINVAL, "out is NULL");
    }
    rill_client_params_t p = params != NULL ? *params : rill_client_default_params();
    if (p.request_ep == NULL || p.event_ep == NULL || strlen(p.request_ep) >= 256 ||
        p.timeout_ms < 1 || p.max_msg < 1024 || p.max_request < 1024 || p.event_queue < 1) {
        return new_fail(err, errlen, RILL_EINVAL,
                        "parameters out of range (endpoints, timeout_ms >= 1, max_msg and "
                        "max_request >= 1024, event_queue >= 1)");
    }
    int n_keys =
        (p.curve_server_key != NULL) + (p.curve_public_key != NULL) + (p.curve_secret_key != NULL);
    if (n_keys != 0 && n_keys != 3) {
        return new_fail(err, errlen, RILL_EINVAL,
                        "CURVE needs the server's public key and this client's key pair");
    }
    char keys[3][41];
    if (n_keys == 3) {
        if (zmq_has("curve") == 0) {
            return new_fail(err, errlen, RILL_EUNSUPPORTED, "this libzmq has no CURVE support");
        }
        rill_err_t e = load_key(p.curve_server_key, "server key", keys[0], err, errlen);
        e = e == RILL_OK ? load_key(p.curve_public_key, "public key", keys[1], err, errlen) : e;
        e = e == RILL_OK ? load_key(p.curve_secret_key, "secret key", keys[2], err, errlen) : e;
        if (e != RILL_OK) {
            return e;
        }
    }
    rill_client_t *c = rill_calloc(RILL_MEM_CLIENT, 1, sizeof *c);
    if (c == NULL) {
        return new_fail(err, errlen, RILL_ENOMEM, "out of memory");
    }
    snprintf(c->request_ep, sizeof c->request_ep, "%s", p.request_ep);
    c->timeout_ms = p.timeout_ms;
    c->max_request = p.max_request;
    c->queue_cap = p.event_queue;
    c->curve = n_keys == 3;
    uint64_t seed = rill_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
    c->next_id = (UINT64_C(1) << 40) + rill_rand_splitmix64(&seed) % (UINT64_C(1) << 61);
    msgpack_sbuffer_init(&c->buf);
    msgpack_sbuffer_init(&c->args);
    msgpack_sbuffer_init(&c->out);
    bool zones = msgpack_zone_init(&c->rzone, ZONE_CHUNK);
    if (!zones || !msgpack_zone_init(&c->ezone, ZONE_CHUNK)) {
        if (zones) {
            msgpack_zone_destroy(&c->rzone);
        }
        rill_free(c);
        return new_fail(err, errlen, RILL_ENOMEM, "out of memory");
    }
    rill_err_t e = RILL_OK;
    c->ctx = zmq_ctx_new();
    c->req = c->ctx != NULL ? zmq_socket(c->ctx, ZMQ_DEALER) : NULL;
    c->sub = c->ctx != NULL ? zmq_socket(c->ctx, ZMQ_SUB) : NULL;
    if (c->req == NULL || c->sub == NULL ||
        sock_opts(c, c->req, &p, c->curve ? keys[0] : NULL) != 0 ||
        sock_opts(c, c->sub, &p, c->curve ? keys[0] : NULL) != 0) {
        e = new_fail(err, errlen, RILL_EIO, "ZeroMQ set-up failed: %s", zmq_strerror(errno));
    }
    if (e == RILL_OK && c->curve) {
        char ep[64];
        snprintf(ep, sizeof ep, "inproc://rill-client-monitor-%p", (void *)c);
        int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                     ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
        c->mon = zmq_socket_monitor(c->req, ep, events) == 0 ? zmq_socket(c->ctx, ZMQ_PAIR) : NULL;
        int zero = 0;
        if (c->mon == NULL || zmq_setsockopt(c->mon, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
            zmq_connect(c->mon, ep) != 0) {
            e = new_fail(err, errlen, RILL_EIO, "ZeroMQ monitor set-up failed: %s",
                         zmq_strerror(errno));
        }
    }
    if (e == RILL_OK && zmq_connect(c->req, p.request_ep) != 0) {
        e = new_fail(err, errlen, RILL_EINVAL, "cannot connect to %s: %s", p.request_ep,
                     zmq_strerror(errno));
    }
    if (e == RILL_OK && zmq_connect(c->sub, p.event_ep) != 0) {
        e = new_fail(err, errlen, RILL_EINVAL, "cannot connect to %s: %s", p.event_ep,
                     zmq_strerror(errno));
    }
    if (e != RILL_OK) {
        rill_client_destroy(&c);
        return e;
    }
    *out = c;
    return RILL_OK;
}

rill_err_t rill_client_new(const rill_client_params_t *params, rill_client_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(client_new_buf(params, out, msg, sizeof msg), msg);
}

static void free_queue(rill_client_t *c) {
    for (cl_qev_t *q = c->q_head, *nx; q != NULL; q = nx) {
        nx = q->next;
        rill_free(q);
    }
    c->q_head = c->q_tail = NULL;
    c->q_len = 0;
}

void rill_client_destroy(rill_client_t **cp) {
    if (cp == NULL || *cp == NULL) {
        return;
    }
    rill_client_t *c = *cp;
    if (c->mon != NULL) {
        zmq_socket_monitor(c->req, NULL, 0);
        zmq_close(c->mon);
    }
    if (c->req != NULL) {
        zmq_close(c->req);
    }
    if (c->sub != NULL) {
        zmq_close(c->sub);
    }
    if (c->ctx != NULL) {
        zmq_ctx_term(c->ctx);
    }
    free_queue(c);
    for (int i = 0; i < c->n_subs; i++) {
        rill_free(c->subs[i].prefix);
    }
    rill_free(c->subs);
    rill_free(c->topics);
    msgpack_zone_destroy(&c->rzone);
    msgpack_zone_destroy(&c->ezone);
    msgpack_sbuffer_destroy(&c->buf);
    msgpack_sbuffer_destroy(&c->args);
    msgpack_sbuffer_destroy(&c->out);
    rill_free(c);
    *cp = NULL;
}

void rill__client_begin(rill_client_t *c) {
    c->err[0] = '\0';
    msgpack_zone_clear(&c->rzone);
    msgpack_zone_clear(&c->ezone);
}

/* ---- requests ------------------------------------------------------------------------------- */

static int write_buf(void *data, const char *buf, size_t len);
static int write_args(void *data, const char *buf, size_t len);

void rill__client_pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

void rill__client_args(rill_client_t *c, msgpack_packer *pk, size_t n) {
    msgpack_sbuffer_clear(&c->args);
    msgpack_packer_init(pk, c, write_args);
    msgpack_pack_map(pk, n);
}

/* Reads the CURVE monitor: handshakes that failed or succeeded since the last look. */
static void read_monitor(rill_client_t *c) {
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return;
        }
        uint16_t ev = 0;
        uint32_t val = 0;
        bool first = zmq_msg_size(&m) == 6;
        if (first) {
            memcpy(&ev, zmq_msg_data(&m), 2);
            memcpy(&val, (const char *)zmq_msg_data(&m) + 2, 4);
        }
        while (zmq_msg_more(&m)) {
            zmq_msg_close(&m);
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, c->mon, ZMQ_DONTWAIT) < 0) {
                break;
            }
        }
        zmq_msg_close(&m);
        if (!first) {
            continue;
        }
        if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            c->refused = false;
        } else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            c->refused = true;
            snprintf(c->refused_msg, sizeof c->refused_msg,
                     "%s refused this client's CURVE key (ZAP status %u): it is not listed in "
                     "the server's --curve-keys DIR/clients/",
                     c->request_ep, (unsigned)val);
        } else {
            c->refused = true;
            snprintf(c->refused_msg, sizeof c->refused_msg,
                     "CURVE handshake with %s failed (event 0x%x, 0x%x): wrong server key?",
                     c->request_ep, (unsigned)ev, (unsigned)val);
        }
    }
}

/* Reads one whole message of up to max frames into parts; returns the count (further frames
 * are read and dropped, *extra set), 0 when none was waiting. */
static int recv_parts(void *sock, zmq_msg_t *parts, int max, bool *extra) {
    int n = 0, more = 1;
    *extra = false;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < max) {
            /* a zmq_msg_t is moved, never copied by assignment (zmq_msg_init(3)) */
            zmq_msg_init(&parts[n]);
            zmq_msg_move(&parts[n++], &m);
        } else {
            *extra = true;
        }
        zmq_msg_close(&m);
    }
    return n;
}

static void close_parts(zmq_msg_t *parts, int n) {
    for (int i = 0; i < n; i++) {
        zmq_msg_close(&parts[i]);
    }
}

static bool topic_matches(const rill_client_t *c, const char *topic, size_t len) {
    for (int i = 0; i < c->n_subs; i++) {
        if (c->subs[i].len <= len && memcmp(c->subs[i].prefix, topic, c->subs[i].len) == 0) {
            return true;
        }
    }
    return false;
}

static void enqueue(rill_client_t *c, const void *topic, size_t tl, const void *data, size_t len) {
    cl_qev_t *q = rill_malloc(RILL_MEM_CLIENT, sizeof *q + tl + len);
    if (q == NULL) {
        c->st.events_dropped++;
        return;
    }
    q->next = NULL;
    q->topic_len = tl;
    q->len = len;
    memcpy(q->data, topic, tl);
    memcpy(q->data + tl, data, len);
    if (c->q_len >= c->queue_cap) {
        cl_qev_t *old = c->q_head;
        c->q_head = old->next;
        c->q_tail = c->q_head != NULL ? c->q_tail : NULL;
        c->q_len--;
        rill_free(old);
        c->st.events_dropped++;
    }
    if (c->q_tail != NULL) {
        c->q_tail->next = q;
    } else {
        c->q_head = q;
    }
    c->q_tail = q;
    c->q_len++;
}

static bool kind_ok(const char *k, size_t n) {
    if (n < 1 || n > 32) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!((k[i] >= 'a' && k[i] <= 'z') || k[i] == '_')) {
            return false;
        }
    }
    return true;
}

static bool name_chars_ok(const char *s, size_t n) {
    if (n < 1 || n > CL_MAX_NAME) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-')) {
            return false;
        }
    }
    return true;
}

static bool parse_event_msg(rill_client_t *c, const char *topic, size_t tl, const void *data,
                            size_t len, rill_client_event_t *ev, char *msg, size_t msglen) {
    memset(ev, 0, sizeof *ev);
    msgpack_zone *z = &c->ezone;
    const char *slash = tl <= CL_MAX_TOPIC ? memchr(topic, '/', tl) : NULL;
    if (slash == NULL || !name_chars_ok(topic, (size_t)(slash - topic)) ||
        !kind_ok(slash + 1, tl - (size_t)(slash - topic) - 1)) {
        snprintf(msg, msglen, "event topic is not <session>/<kind>");
        return false;
    }
    msgpack_object m;
    if (unpack_checked(z, data, len, "event", &m, msg, msglen) != RILL_OK) {
        return false;
    }
    char *t = msgpack_zone_malloc(z, tl + 1);
    if (t == NULL) {
        snprintf(msg, msglen, "out of memory");
        return false;
    }
    memcpy(t, topic, tl);
    t[tl] = '\0';
    ev->topic = t;
    uint64_t v = 0;
    size_t sl = 0, kl = 0;
    bool ok = rill__client_u64(rill__client_get(&m, "v"), &v) && v == 1 &&
              rill__client_u64(rill__client_get(&m, "seq"), &ev->seq) && ev->seq >= 1 &&
              rill__client_str(z, rill__client_get(&m, "session"), &ev->session, &sl) &&
              rill__client_str(z, rill__client_get(&m, "kind"), &ev->kind_name, &kl) &&
              sl == (size_t)(slash - topic) && memcmp(ev->session, topic, sl) == 0 &&
              kl == tl - sl - 1 && memcmp(ev->kind_name, slash + 1, kl) == 0;
    if (!ok) {
        snprintf(msg, msglen,
                 "malformed event on %s: v, seq, session and kind must match the topic", t);
        return false;
    }
    if (strcmp(ev->kind_name, "token") == 0) {
        ev->kind = RILL_CLIENT_EVENT_TOKEN;
        ok = rill__client_u64(rill__client_get(&m, "rid"), &ev->rid) &&
             rill__client_str(z, rill__client_get(&m, "piece"), &ev->piece, &ev->piece_len);
    } else if (strcmp(ev->kind_name, "answer") == 0) {
        ev->kind = RILL_CLIENT_EVENT_ANSWER;
        ok = rill__client_u64(rill__client_get(&m, "rid"), &ev->rid) &&
             rill__client_str(z, rill__client_get(&m, "answer"), &ev->answer, &ev->answer_len) &&
             rill__client_f64(rill__client_get(&m, "ttft_ms"), &ev->ttft_ms) &&
             rill__client_f64(rill__client_get(&m, "total_ms"), &ev->total_ms) &&
             rill__client_i64(rill__client_get(&m, "version"), &ev->version) &&
             rill__client_ttft_parts(&m, &ev->backlog, &ev->ttft_compute_ms);
    } else if (strcmp(ev->kind_name, "standing") == 0) {
        ev->kind = RILL_CLIENT_EVENT_STANDING;
        ok = rill__client_u64(rill__client_get(&m, "qid"), &ev->qid) &&
             rill__client_str(z, rill__client_get(&m, "question"), &ev->question, NULL) &&
             rill__client_str(z, rill__client_get(&m, "answer"), &ev->answer, &ev->answer_len) &&
             rill__client_i64(rill__client_get(&m, "version"), &ev->version) &&
             rill__client_f64(rill__client_get(&m, "compute_ms"), &ev->compute_ms) &&
             rill__client_f64(rill__client_get(&m, "age_ms"), &ev->age_ms) &&
             rill__client_i64(rill__client_get(&m, "data_version"), &ev->data_version);
    } else if (strcmp(ev->kind_name, "transcript") == 0) {
        ev->kind = RILL_CLIENT_EVENT_TRANSCRIPT;
        const msgpack_object *fin = rill__client_get(&m, "final");
        ok = rill__client_str(z, rill__client_get(&m, "committed"), &ev->committed,
                              &ev->committed_len) &&
             rill__client_str(z, rill__client_get(&m, "tentative"), &ev->tentative,
                              &ev->tentative_len) &&
             rill__client_f64(rill__client_get(&m, "audio_s"), &ev->audio_s) && fin != NULL &&
             fin->type == MSGPACK_OBJECT_BOOLEAN &&
             rill__client_i64(rill__client_get(&m, "version"), &ev->version) &&
             rill__client_str(z, rill__client_get(&m, "status"), &ev->status, NULL) &&
             rill__client_str(z, rill__client_get(&m, "message"), &ev->message, NULL);
        ev->final = ok && fin->via.boolean;
    }
    if (!ok) {
        snprintf(msg, msglen, "malformed %s event on %s: a field is missing or of the wrong type",
                 ev->kind_name, t);
    }
    return ok;
}

/* Decodes one event (topic frame, payload frame) into *ev, in the event zone. Returns false
 * when it is malformed (logged at debug level: a bad event is nobody's call's error). */
static bool parse_event(rill_client_t *c, const char *topic, size_t tl, const void *data,
                        size_t len, rill_client_event_t *ev) {
    char msg[240];
    bool ok = parse_event_msg(c, topic, tl, data, len, ev, msg, sizeof msg);
    if (!ok) {
        RILL_LOGD("rill client: event skipped: %s", msg);
    }
    return ok;
}
/* An event that arrived while an ask runs: the user's copy, and the ask's stream (the events
 * whose rid is the request's id). */
static void on_event_in_call(rill_client_t *c, cl_ask_t *a, bool *progress) {
    zmq_msg_t parts[2];
    bool extra;
    int n = recv_parts(c->sub, parts, 2, &extra);
    if (n == 0) {
        return;
    }
    if (n != 2 || extra) {
        c->st.bad_events++;
        close_parts(parts, n);
        return;
    }
    const char *topic = zmq_msg_data(&parts[0]);
    size_t tl = zmq_msg_size(&parts[0]);
    if (topic_matches(c, topic, tl)) {
        enqueue(c, topic, tl, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]));
    }
    bool tok = tl == strlen(a->token_topic) && memcmp(topic, a->token_topic, tl) == 0;
    bool ans = tl == strlen(a->answer_topic) && memcmp(topic, a->answer_topic, tl) == 0;
    if (tok || ans) {
        msgpack_zone_clear(&c->ezone);
        rill_client_event_t ev;
        if (!parse_event(c, topic, tl, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), &ev)) {
            c->st.bad_events++;
        } else if (ev.kind == RILL_CLIENT_EVENT_TOKEN && ev.rid == a->id) {
            a->fn(a->user, ev.piece, ev.piece_len);
            a->pieces++;
            *progress = true;
        } else if (ev.kind == RILL_CLIENT_EVENT_ANSWER && ev.rid == a->id) {
            a->answer_seen = true;
        }
    }
    close_parts(parts, n);
}

/* Decodes a reply. Returns RILL_OK when it is a readable protocol reply: *id is its id, *st
 * its status (RILL_EINTERNAL for a name this client does not know), c->result its result and
 * msg its message. Otherwise RILL_EFORMAT, RILL_EUNSUPPORTED (another protocol version) or
 * RILL_ENOMEM, with msg saying why. */
static rill_err_t parse_reply(rill_client_t *c, const void *data, size_t len, uint64_t *id,
                              rill_err_t *st, char *msg, size_t msglen) {
    *id = 0;
    msgpack_zone_clear(&c->rzone);
    msgpack_object m;
    rill_err_t e = unpack_checked(&c->rzone, data, len, "reply", &m, msg, msglen);
    if (e != RILL_OK) {
        return e;
    }
    uint64_t v = 0;
    const char *status = NULL, *message = NULL;
    size_t status_len = 0;
    const msgpack_object *result = rill__client_get(&m, "result");
    if (rill__client_u64(rill__client_get(&m, "v"), &v) && v != 1) {
        snprintf(msg, msglen, "the server speaks protocol version %llu (this client: 1)",
                 (unsigned long long)v);
        return RILL_EUNSUPPORTED;
    }
    if (v != 1 || !rill__client_u64(rill__client_get(&m, "id"), id) ||
        !rill__client_str(&c->rzone, rill__client_get(&m, "status"), &status, &status_len) ||
        !rill__client_str(&c->rzone, rill__client_get(&m, "message"), &message, NULL) ||
        result == NULL) {
        snprintf(msg, msglen, "malformed reply: v, id, status, message and result are required");
        return RILL_EFORMAT;
    }
    if (status_len > 32 || !rill_err_from_name(status, st)) {
        *st = RILL_EINTERNAL;
        snprintf(msg, msglen, "unknown status '%.32s': %.300s", status, message);
    } else {
        snprintf(msg, msglen, "%s",
                 message[0] != '\0' || *st == RILL_OK ? message : rill_strerror(*st));
    }
    c->result = *result;
    return RILL_OK;
}

/* Writes of the packers into c->buf and c->args: an allocation failure is remembered, so the
 * call fails with RILL_ENOMEM instead of sending half a request. */
static int write_buf(void *data, const char *buf, size_t len) {
    rill_client_t *c = data;
    if (msgpack_sbuffer_write(&c->buf, buf, len) != 0) {
        c->pack_failed = true;
        return -1;
    }
    return 0;
}

static int write_args(void *data, const char *buf, size_t len) {
    rill_client_t *c = data;
    if (msgpack_sbuffer_write(&c->args, buf, len) != 0) {
        c->pack_failed = true;
        return -1;
    }
    return 0;
}

rill_err_t rill__client_call(rill_client_t *c, const char *cmd, bool with_args, cl_ask_t *ask) {
    uint64_t id = c->next_id++;
    if (c->next_id >= (UINT64_C(1) << 63)) {
        c->next_id = UINT64_C(1) << 40;
    }
    msgpack_packer pk;
    msgpack_sbuffer_clear(&c->buf);
    msgpack_packer_init(&pk, c, write_buf);
    msgpack_pack_map(&pk, with_args ? 4 : 3);
    rill__client_pack_str(&pk, "v");
    msgpack_pack_uint64(&pk, 1);
    rill__client_pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, id);
    rill__client_pack_str(&pk, "cmd");
    rill__client_pack_str(&pk, cmd);
    if (with_args) {
        rill__client_pack_str(&pk, "args");
        write_buf(c, c->args.data, c->args.size);
    }
    if (c->pack_failed) {
        c->pack_failed = false;
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    if ((int64_t)c->buf.size > c->max_request) {
        return rill__client_fail(c, RILL_ERANGE, "a %s request of %zu bytes (at most %lld)", cmd,
                                 c->buf.size, (long long)c->max_request);
    }
    if (ask != NULL) {
        ask->id = id;
        zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, ask->token_topic, strlen(ask->token_topic));
        zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, ask->answer_topic, strlen(ask->answer_topic));
    }
    bool sent = false, replied = false;
    rill_err_t st = RILL_OK;
    uint64_t start = rill_now_ns() / 1000000, deadline = start + (uint64_t)c->timeout_ms;
    uint64_t grace_end = 0;
    for (;;) {
        uint64_t now = rill_now_ns() / 1000000;
        if (replied && (ask == NULL || st != RILL_OK || ask->answer_seen || now >= grace_end)) {
            break;
        }
        if (!replied && now >= deadline) {
            c->st.timeouts++;
            st = sent ? rill__client_fail(c, RILL_ETIMEDOUT, "no reply to %s from %s within %d ms",
                                          cmd, c->request_ep, c->timeout_ms)
                      : rill__client_fail(c, RILL_ETIMEDOUT,
                                          "no connection to %s within %d ms (is rilld running "
                                          "there?)",
                                          c->request_ep, c->timeout_ms);
            break;
        }
        uint64_t until = replied ? grace_end : deadline;
        zmq_pollitem_t items[3] = {
            { c->req, 0, (short)(ZMQ_POLLIN | (sent ? 0 : ZMQ_POLLOUT)), 0 },
            { c->sub, 0, ZMQ_POLLIN, 0 },
            { c->mon, 0, ZMQ_POLLIN, 0 },
        };
        int n_items = ask != NULL ? 2 : 1;
        if (c->mon != NULL) {
            items[n_items++] = (zmq_pollitem_t){ c->mon, 0, ZMQ_POLLIN, 0 };
        }
        int rc = zmq_poll(items, n_items, (long)(until - now));
        if (rc < 0) {
            if (errno == EINTR) {
                continue;
            }
            st = rill__client_fail(c, RILL_EIO, "poll: %s", zmq_strerror(errno));
            break;
        }
        if (c->mon != NULL && (items[n_items - 1].revents & ZMQ_POLLIN)) {
            read_monitor(c);
            if (c->refused && !replied) {
                st = rill__client_fail(c, RILL_EPERM, "%s", c->refused_msg);
                break;
            }
        }
        if (!sent && (items[0].revents & ZMQ_POLLOUT)) {
            if (zmq_send(c->req, c->buf.data, c->buf.size, ZMQ_DONTWAIT) >= 0) {
                sent = true;
                c->st.requests++;
            } else if (errno != EAGAIN) {
                st = rill__client_fail(c, RILL_EIO, "send: %s", zmq_strerror(errno));
                break;
            }
        }
        while (!replied && (items[0].revents & ZMQ_POLLIN)) {
            zmq_msg_t parts[2];
            bool extra;
            int n = recv_parts(c->req, parts, 2, &extra);
            if (n == 0) {
                break;
            }
            /* one frame, or an empty delimiter and one frame */
            int body = n - 1;
            if (extra || (n == 2 && zmq_msg_size(&parts[0]) != 0)) {
                c->st.bad_replies++;
                close_parts(parts, n);
                continue;
            }
            uint64_t rid = 0;
            rill_err_t status = RILL_OK;
            char msg[sizeof c->err];
            rill_err_t r = parse_reply(c, zmq_msg_data(&parts[body]), zmq_msg_size(&parts[body]),
                                       &rid, &status, msg, sizeof msg);
            close_parts(parts, n);
            if (r != RILL_OK) {
                /* unreadable: whose it was cannot be told; ours is the one waited for */
                c->st.bad_replies++;
                st = rill__client_fail(c, r, "%s", msg);
                replied = true;
                break;
            }
            if (!sent || (rid != id && rid != 0)) {
                c->st.stale_replies++;
                continue;
            }
            st = status;
            snprintf(c->err, sizeof c->err, "%s", msg);
            rill__error_str(st, c->err); /* the server's message is the caller's detail */
            replied = true;
            if (ask != NULL && st == RILL_OK) {
                /* the answer event ends the stream: it was published before the reply, on
                   another socket, so it may still be on its way */
                grace_end = rill_now_ns() / 1000000 + GRACE_MS;
            }
        }
        if (ask != NULL && (items[1].revents & ZMQ_POLLIN)) {
            for (int i = 0; i < 256; i++) {
                int ev = 0;
                size_t sz = sizeof ev;
                if (zmq_getsockopt(c->sub, ZMQ_EVENTS, &ev, &sz) != 0 || !(ev & ZMQ_POLLIN)) {
                    break;
                }
                bool progress = false;
                on_event_in_call(c, ask, &progress);
                if (progress) {
                    deadline = rill_now_ns() / 1000000 + (uint64_t)c->timeout_ms;
                }
            }
        }
    }
    if (ask != NULL) {
        zmq_setsockopt(c->sub, ZMQ_UNSUBSCRIBE, ask->token_topic, strlen(ask->token_topic));
        zmq_setsockopt(c->sub, ZMQ_UNSUBSCRIBE, ask->answer_topic, strlen(ask->answer_topic));
    }
    return st;
}

rill_err_t rill_client_call(rill_client_t *c, const char *cmd, const void *args, size_t args_len,
                            const void **result, size_t *result_len) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (cmd == NULL || cmd[0] == '\0' || strlen(cmd) > 64 || (args == NULL && args_len > 0)) {
        return rill__client_fail(c, RILL_EINVAL, "bad arguments");
    }
    rill_msgpack_shape_t sh;
    if (args != NULL && (rill_msgpack_check(args, args_len, CL_MAX_DEPTH, &sh) != RILL_OK ||
                         sh.top != RILL_MSGPACK_MAP)) {
        return rill__client_fail(c, RILL_EFORMAT, "args must be one msgpack map");
    }
    msgpack_sbuffer_clear(&c->args);
    if (args != NULL && msgpack_sbuffer_write(&c->args, args, args_len) != 0) {
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    rill_err_t st = rill__client_call(c, cmd, args != NULL, NULL);
    if (st != RILL_OK) {
        return st;
    }
    msgpack_sbuffer_clear(&c->out);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &c->out, msgpack_sbuffer_write);
    if (msgpack_pack_object(&pk, c->result) != 0) {
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    if (result != NULL) {
        *result = c->out.data;
    }
    if (result_len != NULL) {
        *result_len = c->out.size;
    }
    return RILL_OK;
}

/* ---- events -------------------------------------------------------------------------------- */

rill_err_t rill_client_subscribe(rill_client_t *c, const char *prefix) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    c->err[0] = '\0';
    size_t n = prefix != NULL ? strlen(prefix) : 0;
    if (n == 0 || n > MAX_PREFIX) {
        return rill__client_fail(c, RILL_EINVAL, "a topic prefix is 1..%d bytes", MAX_PREFIX);
    }
    if (c->n_subs == c->cap_subs) {
        int cap = c->cap_subs > 0 ? c->cap_subs * 2 : 8;
        if (cap > MAX_SUBS) {
            return rill__client_fail(c, RILL_EFULL, "too many subscriptions (at most %d)",
                                     MAX_SUBS);
        }
        cl_sub_t *g = rill_realloc(RILL_MEM_CLIENT, c->subs, sizeof *g * (size_t)cap);
        if (g == NULL) {
            return rill__client_fail(c, RILL_ENOMEM, "out of memory");
        }
        c->subs = g;
        c->cap_subs = cap;
    }
    char *p = rill_strdup(RILL_MEM_CLIENT, prefix);
    if (p == NULL) {
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    if (zmq_setsockopt(c->sub, ZMQ_SUBSCRIBE, prefix, n) != 0) {
        rill_free(p);
        return rill__client_fail(c, RILL_EIO, "subscribe: %s", zmq_strerror(errno));
    }
    c->subs[c->n_subs++] = (cl_sub_t){ .prefix = p, .len = n };
    return RILL_OK;
}

rill_err_t rill_client_unsubscribe(rill_client_t *c, const char *prefix) {
    if (c == NULL || prefix == NULL) {
        return RILL_EINVAL;
    }
    c->err[0] = '\0';
    for (int i = 0; i < c->n_subs; i++) {
        if (strcmp(c->subs[i].prefix, prefix) == 0) {
            zmq_setsockopt(c->sub, ZMQ_UNSUBSCRIBE, prefix, strlen(prefix));
            rill_free(c->subs[i].prefix);
            c->subs[i] = c->subs[--c->n_subs];
            return RILL_OK;
        }
    }
    return rill__client_fail(c, RILL_ENOTFOUND, "not subscribed to '%.100s'", prefix);
}

/* Follows the topic's sequence numbers: sets ev->missed. */
static void follow_seq(rill_client_t *c, rill_client_event_t *ev) {
    cl_topic_t *t = NULL;
    for (int i = 0; i < c->n_topics; i++) {
        if (strcmp(c->topics[i].name, ev->topic) == 0) {
            t = &c->topics[i];
            break;
        }
    }
    if (t != NULL) {
        ev->missed = ev->seq > t->last ? (int64_t)(ev->seq - t->last - 1) : 0;
        c->st.events_missed += ev->missed;
        t->last = ev->seq;
        return;
    }
    if (c->n_topics == c->cap_topics && c->cap_topics < MAX_TOPICS) {
        int cap = c->cap_topics > 0 ? c->cap_topics * 2 : 16;
        cl_topic_t *g = rill_realloc(RILL_MEM_CLIENT, c->topics, sizeof *g * cap);
        if (g != NULL) {
            c->topics = g;
            c->cap_topics = cap;
        }
    }
    if (c->n_topics < c->cap_topics) {
        t = &c->topics[c->n_topics++];
    } else if (c->cap_topics > 0) {
        t = &c->topics[c->next_topic++ % c->cap_topics]; /* full: forget one */
    }
    if (t != NULL) {
        snprintf(t->name, sizeof t->name, "%s", ev->topic);
        t->last = ev->seq;
    }
}

rill_err_t rill_client_next_event(rill_client_t *c, int32_t timeout_ms, rill_client_event_t *ev) {
    if (c == NULL || ev == NULL || timeout_ms < 0) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    uint64_t deadline = rill_now_ns() / 1000000 + (uint64_t)timeout_ms;
    for (;;) {
        msgpack_zone_clear(&c->ezone);
        if (c->q_head != NULL) {
            cl_qev_t *q = c->q_head;
            c->q_head = q->next;
            c->q_tail = c->q_head != NULL ? c->q_tail : NULL;
            c->q_len--;
            /* parse_event copies what it keeps into the event zone */
            bool ok = parse_event(c, (const char *)q->data, q->topic_len, q->data + q->topic_len,
                                  q->len, ev);
            rill_free(q);
            if (!ok) {
                c->st.bad_events++;
                continue;
            }
            break;
        }
        uint64_t now = rill_now_ns() / 1000000;
        zmq_pollitem_t it = { c->sub, 0, ZMQ_POLLIN, 0 };
        int rc = zmq_poll(&it, 1, now < deadline ? (long)(deadline - now) : 0);
        if (rc < 0 && errno == EINTR) {
            continue;
        }
        if (rc < 0) {
            return rill__client_fail(c, RILL_EIO, "poll: %s", zmq_strerror(errno));
        }
        if (rc == 0) {
            c->err[0] = '\0';
            return RILL_EAGAIN;
        }
        zmq_msg_t parts[2];
        bool extra;
        int n = recv_parts(c->sub, parts, 2, &extra);
        if (n == 0) {
            continue;
        }
        const char *topic = zmq_msg_data(&parts[0]);
        size_t tl = zmq_msg_size(&parts[0]);
        if (n != 2 || extra) {
            c->st.bad_events++;
            close_parts(parts, n);
            continue;
        }
        if (!topic_matches(c, topic, tl)) {
            close_parts(parts, n); /* left over from an ask's subscription */
            continue;
        }
        bool ok = parse_event(c, topic, tl, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), ev);
        close_parts(parts, n);
        if (!ok) {
            c->st.bad_events++;
            continue;
        }
        break;
    }
    c->err[0] = '\0';
    follow_seq(c, ev);
    c->st.events++;
    return RILL_OK;
}
