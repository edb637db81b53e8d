/*
 * client_internal.h - shared between client.c (sockets, requests, events) and commands.c (the
 * typed wrappers of each command). Private to clients/.
 */
#ifndef RILL_CLIENT_INTERNAL_H
#define RILL_CLIENT_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_client.h"

#define CL_MAX_NAME  64  /* bytes of a session name */
#define CL_MAX_TOPIC 128 /* bytes of a topic: name, '/', kind */
#define CL_MAX_DEPTH 16  /* nesting accepted in replies and events */

/* A queued event: the topic's bytes, then the payload's. */
typedef struct cl_qev {
    struct cl_qev *next;
    size_t topic_len, len;
    unsigned char data[];
} cl_qev_t;

typedef struct cl_sub {
    char *prefix; /* NUL-terminated, RILL_MEM_CLIENT */
    size_t len;
} cl_sub_t;

typedef struct cl_topic {
    char name[CL_MAX_TOPIC + 1];
    uint64_t last; /* last seq handed out */
} cl_topic_t;

/* The stream an ask follows while its call runs (rill_client_ask). */
typedef struct cl_ask {
    rill_client_token_fn fn;
    void *user;
    char token_topic[CL_MAX_TOPIC + 1], answer_topic[CL_MAX_TOPIC + 1];
    uint64_t id; /* the request's id: the rid of its token and answer events */
    bool answer_seen;
    int64_t pieces;
} cl_ask_t;

struct rill_client {
    void *ctx, *req, *sub, *mon;
    char request_ep[256];
    int32_t timeout_ms;
    int64_t max_request;
    int32_t queue_cap;
    uint64_t next_id;
    char err[512];
    /* the last reply: its result lives in rzone; events decoded in ezone */
    msgpack_zone rzone, ezone;
    msgpack_object result;
    msgpack_sbuffer buf;  /* the request being sent */
    msgpack_sbuffer args; /* its args map, packed by the wrappers */
    msgpack_sbuffer out;  /* rill_client_call's re-encoded result */
    bool pack_failed;     /* a write into buf or args ran out of memory */
    /* CURVE handshake state, from the monitor of the request socket */
    bool curve, refused;
    char refused_msg[448];
    cl_sub_t *subs;
    int n_subs, cap_subs;
    cl_qev_t *q_head, *q_tail;
    int32_t q_len;
    cl_topic_t *topics;
    int n_topics, cap_topics, next_topic;
    rill_client_stats_t st;
};

/* Starts a call: clears the message and the zones. */
void rill__client_begin(rill_client_t *c);

/* Records a message for rill_client_last_error and returns err. */
rill_err_t rill__client_fail(rill_client_t *c, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Clears c->args and starts its map of n pairs; returns the packer to add them with. */
void rill__client_args(rill_client_t *c, msgpack_packer *pk, size_t n);
void rill__client_pack_str(msgpack_packer *pk, const char *s);

/* Sends {v, id, cmd, args} (args: c->args when with_args) and waits for the reply; on RILL_OK
 * c->result is the reply's result. ask (optional) follows the question's stream meanwhile. */
rill_err_t rill__client_call(rill_client_t *c, const char *cmd, bool with_args, cl_ask_t *ask);

/* true when name is a valid session name; otherwise records RILL_EINVAL's message. */
bool rill__client_name_ok(rill_client_t *c, const char *name);

/* Accessors of decoded msgpack (NULL-safe: a missing value fails). */
const msgpack_object *rill__client_get(const msgpack_object *map, const char *key);
bool rill__client_i64(const msgpack_object *o, int64_t *v);
bool rill__client_u64(const msgpack_object *o, uint64_t *v);
bool rill__client_f64(const msgpack_object *o, double *v);
/* The optional "backlog" and "ttft_compute_ms" of an answer map m (servers before them send
 * neither): -1 and NAN when absent; false when one is there with the wrong type. */
bool rill__client_ttft_parts(const msgpack_object *m, int64_t *backlog, double *ttft_compute_ms);
/* A NUL-terminated copy of a str object in zone z. */
bool rill__client_str(msgpack_zone *z, const msgpack_object *o, const char **s, size_t *len);

#endif /* RILL_CLIENT_INTERNAL_H */
