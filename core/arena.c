/*
 * arena.c - bump allocator (contract in rill_arena.h). One block from rill_malloc_aligned, never
 * grown: growth would be a hidden malloc on the hot path, and a wrong size should show up as
 * RILL_EFULL in a test rather than as latency in production.
 */
#include <string.h>

#include "rill_arena.h"

rill_err_t rill_arena_init(rill_arena_t *a, rill_mem_t tag, size_t capacity) {
    memset(a, 0, sizeof *a);
    if (capacity == 0) {
        return RILL_EINVAL;
    }
    a->base = rill_malloc_aligned(tag, capacity, 4096);
    if (a->base == NULL) {
        return RILL_ENOMEM;
    }
    a->capacity = capacity;
    return RILL_OK;
}

void rill_arena_deinit(rill_arena_t *a) {
    rill_free(a->base);
    memset(a, 0, sizeof *a);
}

void *rill_arena_alloc(rill_arena_t *a, size_t size, size_t align) {
    if (align == 0) {
        align = RILL_ALLOC_ALIGN;
    }
    if ((align & (align - 1)) != 0 || a->base == NULL) {
        return NULL;
    }
    uintptr_t base = (uintptr_t)a->base;
    uintptr_t at = (base + a->used + align - 1) & ~(uintptr_t)(align - 1);
    size_t off = (size_t)(at - base);
    if (off > a->capacity || size > a->capacity - off) {
        return NULL;
    }
    a->used = off + size;
    if (a->used > a->high_water) {
        a->high_water = a->used;
    }
    return (void *)at;
}

void rill_arena_reset(rill_arena_t *a) {
    a->used = 0;
}

size_t rill_arena_mark(const rill_arena_t *a) {
    return a->used;
}

void rill_arena_rewind(rill_arena_t *a, size_t mark) {
    if (mark <= a->used) {
        a->used = mark;
    }
}

size_t rill_arena_remaining(const rill_arena_t *a) {
    return a->capacity - a->used;
}
