/*
 * door_zmq.c - rilld's ZeroMQ front door (contract: server_internal.h; wire: docs/protocol.md).
 *
 * One thread (the socket thread) owns every socket: a ROUTER for requests (clients use DEALER or
 * REQ), an XPUB for events, and the eventfd the engine thread writes (events.c). A request is
 * [identity][optional empty delimiter][one msgpack frame]; its reply address is the identity
 * and whether the delimiter came, so the reply goes back the same way. With CURVE the ZAP
 * handler (auth.c) admits listed keys, a message's User-Id is the caller's owner, and XPUB
 * subscriptions are checked by hand (manual mode): a key may subscribe only to the topics of
 * its own sessions. Without CURVE only loopback endpoints are bound unless --insecure-bind.
 * Sends never block (ZMQ_DONTWAIT); what cannot be sent is counted.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

typedef struct zdoor {
    srv_door_t door;
    void *ctx, *router, *xpub;
    srv_auth_t *auth;
} zdoor_t;

/* Reply address: b[0] = a delimiter frame came; b[1..] = the routing identity. */
static void z_reply(srv_t *s, srv_door_t *d, const srv_addr_t *to, const void *buf, size_t len) {
    zdoor_t *z = (zdoor_t *)d;
    int flags = ZMQ_DONTWAIT;
    if (zmq_send(z->router, to->b + 1, to->len - 1, flags | ZMQ_SNDMORE) < 0) {
        s->reply_drops++;
        return;
    }
    if (to->b[0]) {
        zmq_send(z->router, "", 0, flags | ZMQ_SNDMORE);
    }
    if (zmq_send(z->router, buf, len, flags) < 0) {
        s->reply_drops++;
    }
}

static void z_publish(srv_t *s, srv_door_t *d, const char *topic, const void *buf, size_t len) {
    zdoor_t *z = (zdoor_t *)d;
    if (zmq_send(z->xpub, topic, strlen(topic), ZMQ_DONTWAIT | ZMQ_SNDMORE) < 0 ||
        zmq_send(z->xpub, buf, len, ZMQ_DONTWAIT) < 0) {
        s->event_drops++;
        return;
    }
    s->events++;
}

static bool loopback(const char *ep) {
    return strncmp(ep, "ipc://", 6) == 0 || strncmp(ep, "inproc://", 9) == 0 ||
           strncmp(ep, "tcp://127.", 10) == 0 || strncmp(ep, "tcp://localhost:", 16) == 0 ||
           strncmp(ep, "tcp://[::1]:", 12) == 0;
}

static int sock_setup(srv_t *s, zdoor_t *z, void *sock, const char *ep, const char *what) {
    int hwm = s->p.hwm, hb_ivl = 2000, hb_ttl = 6000, hb_to = 6000, zero = 0;
    int64_t maxmsg = s->p.max_msg;
    zmq_setsockopt(sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_IVL, &hb_ivl, sizeof hb_ivl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TTL, &hb_ttl, sizeof hb_ttl);
    zmq_setsockopt(sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_to, sizeof hb_to);
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (s->curve && srv_auth_server_socket(z->auth, sock) != 0) {
        RILL_LOGE("rilld: %s: CURVE set-up failed", what);
        return -1;
    }
    if (zmq_bind(sock, ep) != 0) {
        RILL_LOGE("rilld: cannot bind %s to %s: %s", what, ep, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

int srv_zmq_start(srv_t *s) {
    const rill_server_params_t *p = &s->p;
    if (p->curve_dir == NULL && !p->insecure_bind &&
        (!loopback(p->request_ep) || !loopback(p->event_ep))) {
        RILL_LOGE("rilld: refusing to bind %s / %s without CURVE keys (--curve-keys DIR), or "
                  "pass --insecure-bind",
                  p->request_ep, p->event_ep);
        return -1;
    }
    zdoor_t *z = rill_calloc(RILL_MEM_SERVER, 1, sizeof *z);
    if (z == NULL) {
        RILL_LOGE("rilld: out of memory");
        return -1;
    }
    z->door = (srv_door_t){ .name = "zeromq", .reply = z_reply, .publish = z_publish };
    s->zmq = z;
    s->doors[s->n_doors++] = &z->door;
    z->ctx = zmq_ctx_new();
    if (p->curve_dir != NULL) {
        char msg[300] = "";
        s->curve = true;
        if (srv_auth_start(z->ctx, p->curve_dir, &z->auth, msg, sizeof msg) != 0) {
            RILL_LOGE("rilld: --curve-keys %s: %s", p->curve_dir, msg);
            return -1;
        }
    }
    z->router = zmq_socket(z->ctx, ZMQ_ROUTER);
    z->xpub = zmq_socket(z->ctx, ZMQ_XPUB);
    int one = 1;
    /* Without it a ROUTER drops a reply it cannot queue (the peer's pipe at --hwm, or the peer
     * gone) in silence; with it zmq_send fails (EAGAIN, EHOSTUNREACH: never blocks, the sends
     * are ZMQ_DONTWAIT) and the reply is counted in reply_drops. */
    zmq_setsockopt(z->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (s->curve) {
        zmq_setsockopt(z->xpub, ZMQ_XPUB_MANUAL, &one, sizeof one);
    }
    if (sock_setup(s, z, z->router, p->request_ep, "requests") != 0 ||
        sock_setup(s, z, z->xpub, p->event_ep, "events") != 0) {
        return -1;
    }
    return 0;
}

void srv_zmq_stop(srv_t *s) {
    zdoor_t *z = s->zmq;
    if (z == NULL) {
        return;
    }
    if (z->router != NULL) {
        zmq_close(z->router);
    }
    if (z->xpub != NULL) {
        zmq_close(z->xpub);
    }
    srv_auth_stop(&z->auth);
    if (z->ctx != NULL) {
        zmq_ctx_term(z->ctx);
    }
    rill_free(z);
    s->zmq = NULL;
}

/* Reads one request message (identity, optional delimiter, payload) and hands it in. */
static void recv_request(srv_t *s, zdoor_t *z) {
    zmq_msg_t parts[3];
    int n = 0, more = 1;
    bool bad = false;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->router, ZMQ_DONTWAIT) < 0) {
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
    if (n >= 2 && zmq_msg_size(&parts[0]) < SRV_ADDR_MAX) {
        const char *uid = s->curve ? zmq_msg_gets(&parts[n - 1], "User-Id") : NULL;
        srv_call_t c = { .owner = uid != NULL ? uid : "" };
        c.from.door = &z->door;
        c.from.len = 1 + zmq_msg_size(&parts[0]);
        c.from.b[0] = n == 3;
        memcpy(c.from.b + 1, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]));
        if (bad || (n == 3 && zmq_msg_size(&parts[1]) != 0)) {
            srv_handle_bad(s, &c, 0, RILL_EFORMAT,
                           "a request is one frame (after an optional empty delimiter)");
        } else {
            srv_handle(s, &c, zmq_msg_data(&parts[n - 1]), zmq_msg_size(&parts[n - 1]));
        }
    }
    for (int i = 0; i < n; i++) {
        zmq_msg_close(&parts[i]);
    }
}

/* A subscription message on the XPUB (manual mode with CURVE): accepts it when the subscriber
 * owns the session its topic names. */
static void recv_subscription(srv_t *s, zdoor_t *z) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, z->xpub, ZMQ_DONTWAIT) < 0) {
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
        srv_sess_t *x = slash != NULL ? srv_find_sess(s, topic, (size_t)(slash - topic)) : NULL;
        bool ok = x != NULL && uid != NULL && strcmp(x->owner, uid) == 0;
        if (ok || d[0] == 0) {
            zmq_setsockopt(z->xpub, d[0] == 1 ? ZMQ_SUBSCRIBE : ZMQ_UNSUBSCRIBE, topic, tl);
        }
    }
    zmq_msg_close(&m);
}

/* Handles up to 64 messages waiting on sock (one poll's worth, so no socket starves). */
static void drain_socket(srv_t *s, zdoor_t *z, void *sock, void (*fn)(srv_t *, zdoor_t *)) {
    for (int i = 0; i < 64; i++) {
        int ev = 0;
        size_t sz = sizeof ev;
        zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &sz);
        if (!(ev & ZMQ_POLLIN)) {
            break;
        }
        fn(s, z);
    }
}

int srv_zmq_poll(srv_t *s, int timeout_ms) {
    zdoor_t *z = s->zmq;
    int hfd = srv_http_fd(s);
    zmq_pollitem_t items[4] = {
        { z->router, 0, ZMQ_POLLIN, 0 },
        { z->xpub, 0, ZMQ_POLLIN, 0 },
        { NULL, s->efd, ZMQ_POLLIN, 0 },
        { NULL, hfd, ZMQ_POLLIN, 0 },
    };
    if (zmq_poll(items, hfd >= 0 ? 4 : 3, srv_http_timeout_ms(s, timeout_ms)) < 0) {
        if (errno == EINTR) {
            return 0;
        }
        RILL_LOGE("rilld: poll: %s", zmq_strerror(errno));
        return -1;
    }
    if (items[2].revents & ZMQ_POLLIN) {
        srv_events_drain(s);
    }
    if (items[0].revents & ZMQ_POLLIN) {
        drain_socket(s, z, z->router, recv_request);
    }
    if (items[1].revents & ZMQ_POLLIN) {
        drain_socket(s, z, z->xpub, recv_subscription);
    }
    srv_http_run(s); /* the HTTP door (door_http.c), when there is one */
    return 0;
}
