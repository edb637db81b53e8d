/*
 * auth.c - CURVE keys and the ZAP handler (contract: server_internal.h; docs/protocol.md,
 * Security).
 *
 * Design: the ZAP protocol (RFC 27) over a REP socket on inproc://zeromq.zap.01 in the server's
 * context, served by one thread that polls with a timeout so it notices stop. The admitted keys
 * are a fixed set loaded at start (a restart picks up changes). The User-Id of an admitted
 * connection is its owner name: the key file's name without ".pub" (clients/alice.pub admits
 * owner "alice"), the name an HTTP bearer token can also carry, so one owner can use both doors.
 * State directories written before owners were names hold the Z85 key instead;
 * srv_auth_name_of_key maps those at restore.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "rill_alloc.h"
#include "rill_curve.h"
#include "server_internal.h"

#define MAX_CLIENTS 1024

struct srv_auth {
    char secret[41];
    uint8_t clients[MAX_CLIENTS][32];
    char names[MAX_CLIENTS][SRV_OWNER_LEN];
    int n_clients;
    void *rep;
    pthread_t thread;
    bool started;
    atomic_bool stop;
    int64_t admitted, refused;
};

static void send_str(void *sock, const char *s, bool more) {
    zmq_send(sock, s, strlen(s), more ? ZMQ_SNDMORE : 0);
}

static void *zap_main(void *arg) {
    srv_auth_t *a = arg;
    while (!atomic_load(&a->stop)) {
        zmq_pollitem_t it = { a->rep, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 100) <= 0) {
            continue;
        }
        /* version, request id, domain, address, identity, mechanism, credentials... */
        zmq_msg_t f[8];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, a->rep, 0) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < 8) {
                f[n++] = m;
            } else {
                zmq_msg_close(&m);
            }
        }
        bool ok = false;
        char user[SRV_OWNER_LEN] = "";
        int who = -1;
        if (n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
            zmq_msg_size(&f[6]) == 32) {
            const uint8_t *key = zmq_msg_data(&f[6]);
            for (int i = 0; i < a->n_clients && !ok; i++) {
                ok = memcmp(a->clients[i], key, 32) == 0;
                who = ok ? i : who;
            }
            if (ok) {
                snprintf(user, sizeof user, "%s", a->names[who]);
            }
        }
        ok ? a->admitted++ : a->refused++;
        send_str(a->rep, "1.0", true);
        if (n >= 2) {
            zmq_send(a->rep, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
        } else {
            send_str(a->rep, "", true);
        }
        send_str(a->rep, ok ? "200" : "400", true);
        send_str(a->rep, ok ? "OK" : "key not admitted", true);
        send_str(a->rep, user, true);
        send_str(a->rep, "", false);
        for (int i = 0; i < n; i++) {
            zmq_msg_close(&f[i]);
        }
    }
    return NULL;
}

/* Reads path/NAME.pub, every one: a->clients and a->names. 0, or -1 with msg. */
static int load_clients(srv_auth_t *a, const char *path, char *msg, size_t cap) {
    DIR *d = opendir(path);
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && d != NULL && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".pub") != 0 || a->n_clients == MAX_CLIENTS) {
            continue;
        }
        bool name_ok = n - 4 < SRV_OWNER_LEN;
        for (size_t i = 0; i < n - 4 && name_ok; i++) {
            char c = e->d_name[i];
            name_ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '-' || c == '.';
        }
        char kp[4400];
        snprintf(kp, sizeof kp, "%s/%s", path, e->d_name);
        rill_err_t ke =
            name_ok ? rill_curve_key_read(kp, NULL, a->clients[a->n_clients]) : RILL_EINVAL;
        if (ke != RILL_OK) {
            snprintf(msg, cap, "%s: %s", kp,
                     name_ok ? rill_last_error(ke)
                             : "the name before .pub is the owner: 1..40 of [A-Za-z0-9_.-]");
            rc = -1;
            break;
        }
        snprintf(a->names[a->n_clients], SRV_OWNER_LEN, "%.*s", (int)(n - 4), e->d_name);
        a->n_clients++;
    }
    if (d != NULL) {
        closedir(d);
    }
    return rc;
}

bool srv_auth_name_of_key(const char *dir, const char *z85, char *name, size_t cap) {
    srv_auth_t *a = rill_calloc(RILL_MEM_SERVER, 1, sizeof *a);
    char path[4096], msg[300];
    bool found = false;
    snprintf(path, sizeof path, "%s/clients", dir);
    if (a != NULL && strlen(z85) == 40 && load_clients(a, path, msg, sizeof msg) == 0) {
        for (int i = 0; i < a->n_clients && !found; i++) {
            char k[41];
            zmq_z85_encode(k, a->clients[i], 32);
            if (strcmp(k, z85) == 0) {
                snprintf(name, cap, "%s", a->names[i]);
                found = true;
            }
        }
    }
    rill_free(a);
    return found;
}

int srv_auth_start(void *ctx, const char *dir, srv_auth_t **out, char *msg, size_t cap) {
    *out = NULL;
    srv_auth_t *a = rill_calloc(RILL_MEM_SERVER, 1, sizeof *a);
    if (a == NULL) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/server.key", dir);
    rill_err_t ke = rill_curve_key_read(path, a->secret, NULL);
    if (ke != RILL_OK) {
        snprintf(msg, cap, "%s (the server's secret key; rill keygen writes one)",
                 rill_last_error(ke));
        rill_free(a);
        return -1;
    }
    snprintf(path, sizeof path, "%s/clients", dir);
    if (load_clients(a, path, msg, cap) != 0) {
        rill_free(a);
        return -1;
    }
    if (a->n_clients == 0) {
        snprintf(msg, cap, "%s/*.pub: no client key: nobody could connect", path);
        rill_free(a);
        return -1;
    }
    a->rep = zmq_socket(ctx, ZMQ_REP);
    int zero = 0;
    zmq_setsockopt(a->rep, ZMQ_LINGER, &zero, sizeof zero);
    if (a->rep == NULL || zmq_bind(a->rep, "inproc://zeromq.zap.01") != 0) {
        snprintf(msg, cap, "ZAP handler: %s", zmq_strerror(zmq_errno()));
        if (a->rep != NULL) {
            zmq_close(a->rep);
        }
        rill_free(a);
        return -1;
    }
    atomic_init(&a->stop, false);
    if (pthread_create(&a->thread, NULL, zap_main, a) != 0) {
        snprintf(msg, cap, "ZAP handler thread did not start");
        zmq_close(a->rep);
        rill_free(a);
        return -1;
    }
    a->started = true;
    *out = a;
    return 0;
}

int srv_auth_server_socket(srv_auth_t *a, void *sock) {
    int one = 1;
    return zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) == 0 &&
                   zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, a->secret, 40) == 0 &&
                   zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "rill", 4) == 0
               ? 0
               : -1;
}

void srv_auth_stop(srv_auth_t **ap) {
    if (ap == NULL || *ap == NULL) {
        return;
    }
    srv_auth_t *a = *ap;
    if (a->started) {
        atomic_store(&a->stop, true);
        pthread_join(a->thread, NULL);
    }
    zmq_close(a->rep);
    rill_free(a);
    *ap = NULL;
}
