/*
 * rill_ring.h - bounded lock-free single-producer / single-consumer ring of fixed-size items.
 *
 * The way real-time and hot-path code hands data to another thread without locks or allocation
 * (STYLE.md rules 6, 17, 18): the audio callback pushes frames, the engine thread pops them.
 * Capacity is rounded up to a power of two and fixed at init; a full ring refuses the push with
 * RILL_EFULL (the caller's overflow policy decides what to drop, and should count it).
 *
 * The head (written by the consumer) and the tail (written by the producer) sit on separate cache
 * lines; each side caches the other's index to avoid touching the shared line on every call.
 *
 * Thread safety: exactly one producer thread may call rill_ring_push*, and exactly one consumer
 * thread may call rill_ring_pop* / rill_ring_peek; rill_ring_size() is safe from either.
 * rill_ring_init / rill_ring_deinit while no other thread uses the ring.
 */
#ifndef RILL_RING_H
#define RILL_RING_H

#include <stddef.h>
#include <stdint.h>

#include "rill_alloc.h"
#include "rill_compat.h"
#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_ring {
    /* Producer's line. */
    RILL_ALIGNAS(64) RILL_ATOMIC(uint64_t) tail; /* next slot to write; only the producer stores */
    uint64_t head_cache;                         /* producer's last view of head */
    /* Consumer's line. */
    RILL_ALIGNAS(64) RILL_ATOMIC(uint64_t) head; /* next slot to read; only the consumer stores */
    uint64_t tail_cache;                         /* consumer's last view of tail */
    /* Read-only after init. */
    RILL_ALIGNAS(64) unsigned char *buf;
    size_t item_size;
    uint64_t mask; /* capacity - 1 */
} rill_ring_t;

/* Prepares r for items of item_size bytes, holding at least `capacity` of them (rounded up to a
 * power of two; 1 <= capacity <= 2^30). The buffer is charged to `tag`.
 * Errors: RILL_EINVAL (zero sizes, capacity too large), RILL_ENOMEM (r is left zeroed).
 * On success the caller owns r's buffer; release with rill_ring_deinit(). */
rill_err_t rill_ring_init(rill_ring_t *r, rill_mem_t tag, size_t item_size, size_t capacity);

/* Frees the buffer and zeroes r. Safe on a zeroed or already deinitialised ring. */
void rill_ring_deinit(rill_ring_t *r);

/* Copies one item in. RILL_EFULL when the ring is full (nothing written). Producer only;
 * wait-free, no allocation. */
rill_err_t rill_ring_push(rill_ring_t *r, const void *item);

/* Copies up to n items in, in order; returns how many were written (0..n). Producer only. */
size_t rill_ring_push_n(rill_ring_t *r, const void *items, size_t n);

/* Copies the oldest item out and removes it. RILL_EAGAIN when empty. Consumer only. */
rill_err_t rill_ring_pop(rill_ring_t *r, void *item);

/* Copies up to n oldest items out and removes them; returns how many (0..n). Consumer only. */
size_t rill_ring_pop_n(rill_ring_t *r, void *items, size_t n);

/* Items currently queued: exact from either side's own thread, a snapshot otherwise. */
size_t rill_ring_size(const rill_ring_t *r);

/* Number of slots (the rounded-up capacity). */
size_t rill_ring_capacity(const rill_ring_t *r);

#ifdef __cplusplus
}
#endif
#endif /* RILL_RING_H */
