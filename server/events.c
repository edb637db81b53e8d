/*
 * events.c - what the scheduler's engine thread hands to rilld's socket thread (contract:
 * server_internal.h): answer tokens as they are decoded and answers as they end (and, through
 * speech.c's list of the same kind, transcript updates).
 *
 * Two queues with two overflow policies, because the two kinds of event differ:
 *   tokens   a bounded lock-free SPSC ring (core/rill_ring.h; the engine thread is the only
 *            producer, the socket thread the only consumer). When the socket thread falls so
 *            far behind that the ring is full, a token event is dropped and counted
 *            (server.stats engine_drops): it only feeds the streamed `token` events and the
 *            early end of a fixed-format answer, never the answer itself.
 *   answers  one record per finished answer, carrying the answer's tokens, pushed onto a
 *            lock-free list (a Treiber stack: the engine pushes, the socket thread takes the
 *            whole list). Never dropped - a client waits for its reply - and bounded by the
 *            answers in flight, which the engine produces at most one per request (per
 *            refresh for a standing query, whose refreshes take a step each).
 * The answer's text is rebuilt from the answer's own tokens, so a dropped token costs nothing
 * but that token's `token` event.
 *
 * Order: the socket thread takes the answer list first and the ring after, then handles the
 * ring's tokens before those answers. Every token of an answer is pushed before its answer, so
 * it is in the ring by then: a request's tokens are always handled before its end.
 *
 * Wake-up: the producer writes the eventfd only when `signalled` goes from 0 to 1; the consumer
 * clears it before draining, so an event pushed during a drain wakes it again. The engine
 * thread never blocks here and allocates once per answer, never per token.
 */
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

int srv_events_init(srv_t *s) {
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    atomic_init(&s->dones, NULL);
    atomic_init(&s->trs, NULL);
    atomic_init(&s->signalled, 0);
    atomic_init(&s->engine_drops, 0);
    if (s->efd < 0 || rill_ring_init(&s->tok_ring, RILL_MEM_SERVER, sizeof(srv_tok_t),
                                     SRV_TOKEN_RING) != RILL_OK) {
        return -1;
    }
    return 0;
}

static void free_dones(srv_done_t *e) {
    while (e != NULL) {
        srv_done_t *nx = e->next;
        rill_free(e->tokens);
        rill_free(e);
        e = nx;
    }
}

void srv_events_deinit(srv_t *s) {
    free_dones(atomic_exchange(&s->dones, NULL));
    srv_transcripts_free(s);
    srv_translations_free(s);
    rill_ring_deinit(&s->tok_ring);
    if (s->efd >= 0) {
        close(s->efd);
        s->efd = -1;
    }
}

void srv_events_wake(srv_t *s) {
    if (atomic_exchange(&s->signalled, 1) == 0) {
        uint64_t one = 1;
        ssize_t w = write(s->efd, &one, sizeof one);
        (void)w; /* a full counter is still readable: the socket thread wakes */
    }
}

void srv_cb_token(void *user, rill_sched_rid_t rid, int32_t token) {
    srv_t *s = user;
    srv_tok_t t = { .rid = rid, .token = token };
    if (rill_ring_push(&s->tok_ring, &t) != RILL_OK) {
        atomic_fetch_add(&s->engine_drops, 1);
        return;
    }
    srv_events_wake(s);
}

void srv_cb_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    srv_t *s = user;
    srv_done_t *e = rill_calloc(RILL_MEM_SERVER, 1, sizeof *e);
    int32_t *t = a->n_tokens > 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)a->n_tokens * 4) : NULL;
    if (e == NULL || (a->n_tokens > 0 && t == NULL)) {
        rill_free(e);
        rill_free(t);
        RILL_LOGE("rilld: out of memory delivering an answer");
        return;
    }
    e->rid = rid;
    e->a = *a;
    if (a->n_tokens > 0) {
        memcpy(t, a->tokens, (size_t)a->n_tokens * 4);
    }
    e->tokens = t;
    e->a.tokens = t;
    snprintf(e->message, sizeof e->message, "%s", a->message != NULL ? a->message : "");
    e->a.message = e->message;
    srv_done_t *head = atomic_load(&s->dones);
    do {
        e->next = head;
    } while (!atomic_compare_exchange_weak(&s->dones, &head, e));
    srv_events_wake(s);
}

void srv_events_drain(srv_t *s) {
    uint64_t cnt;
    ssize_t r = read(s->efd, &cnt, sizeof cnt);
    (void)r;
    atomic_store(&s->signalled, 0);
    srv_done_t *dones = atomic_exchange(&s->dones, NULL); /* before the ring: see the top */
    srv_transcripts_drain(s);
    srv_translations_drain(s);
    srv_tok_t t[256];
    for (size_t n; (n = rill_ring_pop_n(&s->tok_ring, t, 256)) > 0;) {
        for (size_t i = 0; i < n; i++) {
            pend_t *p = srv_find_pend(s, t[i].rid);
            if (p != NULL) {
                srv_on_token(s, p, t[i].token);
            }
        }
    }
    srv_done_t *order = NULL; /* the list is newest first: answers in the order they ended */
    while (dones != NULL) {
        srv_done_t *nx = dones->next;
        dones->next = order;
        order = dones;
        dones = nx;
    }
    while (order != NULL) {
        srv_done_t *nx = order->next;
        pend_t *p = srv_find_pend(s, order->rid);
        if (p != NULL) {
            srv_on_done(s, p, order);
        }
        rill_free(order->tokens);
        rill_free(order);
        order = nx;
    }
}
