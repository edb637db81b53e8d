/*
 * server_internal.h - the parts of server/ shared between its files. Private to the module.
 */
#ifndef RILL_SERVER_INTERNAL_H
#define RILL_SERVER_INTERNAL_H

#include <stddef.h>

/* ---- auth.c: CURVE keys and the ZAP handler ------------------------------------------------ */

typedef struct srv_auth srv_auth_t;

/* Loads dir/server.key (the server's Z85 secret key) and dir/clients/\*.pub (the Z85 public keys
 * admitted; both read with rill_curve_key_read, wire/rill_curve.h), and starts the ZAP handler
 * thread on ctx (inproc://zeromq.zap.01). It admits a CURVE connection whose client key is listed,
 * with that key (Z85) as the User-Id the server reads from each message; anything else is refused
 * (status 400). Returns 0, or -1 with a message (no thread left running). */
int srv_auth_start(void *ctx, const char *dir, srv_auth_t **out, char *msg, size_t cap);

/* Makes sock a CURVE server with the loaded secret key (call before bind). 0 or -1. */
int srv_auth_server_socket(srv_auth_t *a, void *sock);

/* Stops the handler thread and frees *ap (NULL-safe); sets *ap = NULL. Call before
 * zmq_ctx_term. */
void srv_auth_stop(srv_auth_t **ap);

#endif /* RILL_SERVER_INTERNAL_H */
