/*
 * ring.c - SPSC ring (contract in rill_ring.h).
 *
 * head and tail are free-running 64-bit counters (they never wrap in practice), so full is
 * tail - head == capacity and empty is tail == head, with no slot sacrificed. The producer
 * publishes items with a release store of tail after copying them in; the consumer acquires tail
 * before reading them, and symmetrically for head when slots are handed back.
 */
#include <string.h>

#include "rill_ring.h"

rill_err_t rill_ring_init(rill_ring_t *r, rill_mem_t tag, size_t item_size, size_t capacity) {
    memset(r, 0, sizeof *r);
    if (item_size == 0 || capacity == 0 || capacity > ((size_t)1 << 30)) {
        return RILL_EINVAL;
    }
    size_t cap = 1;
    while (cap < capacity) {
        cap <<= 1;
    }
    if (item_size > SIZE_MAX / cap) {
        return RILL_EINVAL;
    }
    r->buf = rill_malloc(tag, item_size * cap);
    if (r->buf == NULL) {
        return RILL_ENOMEM;
    }
    r->item_size = item_size;
    r->mask = cap - 1;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail, 0);
    return RILL_OK;
}

void rill_ring_deinit(rill_ring_t *r) {
    rill_free(r->buf);
    memset(r, 0, sizeof *r);
}

/* Copies n items between the ring slot range starting at counter `at` and a flat buffer,
 * splitting at the wrap point. */
static void copy_in(rill_ring_t *r, uint64_t at, const unsigned char *src, size_t n) {
    size_t cap = (size_t)r->mask + 1;
    size_t first = (size_t)(at & r->mask);
    size_t k = n < cap - first ? n : cap - first;
    memcpy(r->buf + first * r->item_size, src, k * r->item_size);
    memcpy(r->buf, src + k * r->item_size, (n - k) * r->item_size);
}

static void copy_out(const rill_ring_t *r, uint64_t at, unsigned char *dst, size_t n) {
    size_t cap = (size_t)r->mask + 1;
    size_t first = (size_t)(at & r->mask);
    size_t k = n < cap - first ? n : cap - first;
    memcpy(dst, r->buf + first * r->item_size, k * r->item_size);
    memcpy(dst + k * r->item_size, r->buf, (n - k) * r->item_size);
}

size_t rill_ring_push_n(rill_ring_t *r, const void *items, size_t n) {
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t cap = r->mask + 1;
    uint64_t free_slots = cap - (tail - r->head_cache);
    if (free_slots < n) {
        r->head_cache = atomic_load_explicit(&r->head, memory_order_acquire);
        free_slots = cap - (tail - r->head_cache);
    }
    if (n > free_slots) {
        n = (size_t)free_slots;
    }
    if (n == 0) {
        return 0;
    }
    copy_in(r, tail, items, n);
    atomic_store_explicit(&r->tail, tail + n, memory_order_release);
    return n;
}

rill_err_t rill_ring_push(rill_ring_t *r, const void *item) {
    return rill_ring_push_n(r, item, 1) == 1 ? RILL_OK : RILL_EFULL;
}

size_t rill_ring_pop_n(rill_ring_t *r, void *items, size_t n) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t avail = r->tail_cache - head;
    if (avail < n) {
        r->tail_cache = atomic_load_explicit(&r->tail, memory_order_acquire);
        avail = r->tail_cache - head;
    }
    if (n > avail) {
        n = (size_t)avail;
    }
    if (n == 0) {
        return 0;
    }
    copy_out(r, head, items, n);
    atomic_store_explicit(&r->head, head + n, memory_order_release);
    return n;
}

rill_err_t rill_ring_pop(rill_ring_t *r, void *item) {
    return rill_ring_pop_n(r, item, 1) == 1 ? RILL_OK : RILL_EAGAIN;
}

size_t rill_ring_size(const rill_ring_t *r) {
    /* Load head first: tail only grows, so tail - head can then never underflow. */
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    return (size_t)(tail - head);
}

size_t rill_ring_capacity(const rill_ring_t *r) {
    return r->buf == NULL ? 0 : (size_t)r->mask + 1;
}
