/*
 * rill_arena.h - bump allocator for per-step scratch memory.
 *
 * The hot path (per token, per batch, per tick) must not call malloc (STYLE.md rule 6). Scratch
 * for a step comes from an arena sized at creation: allocation is a pointer bump, and the whole
 * arena is released at once with rill_arena_reset() when the step ends. It never grows: when a
 * request does not fit, rill_arena_alloc() returns NULL and the caller reports RILL_EFULL, which
 * means the arena was sized wrong at creation (the high-water mark tells by how much).
 *
 * Thread safety: one thread at a time.
 */
#ifndef RILL_ARENA_H
#define RILL_ARENA_H

#include <stddef.h>

#include "rill_alloc.h"
#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_arena {
    unsigned char *base;
    size_t capacity;
    size_t used;
    size_t high_water; /* largest `used` ever seen */
} rill_arena_t;

/* Reserves `capacity` bytes charged to tag. Errors: RILL_EINVAL (capacity 0), RILL_ENOMEM (a is
 * left zeroed). Caller owns the memory; release with rill_arena_deinit(). */
rill_err_t rill_arena_init(rill_arena_t *a, rill_mem_t tag, size_t capacity);

/* Frees the memory and zeroes a. Safe on a zeroed arena. */
void rill_arena_deinit(rill_arena_t *a);

/* Returns `size` bytes aligned to `align` (a power of two; 0 means RILL_ALLOC_ALIGN), valid until
 * the next rill_arena_reset() or rill_arena_rewind() past it. NULL when it does not fit or align
 * is not a power of two; the arena is then unaltered. Contents are not zeroed. */
void *rill_arena_alloc(rill_arena_t *a, size_t size, size_t align);

/* Releases everything allocated since init or the last reset. */
void rill_arena_reset(rill_arena_t *a);

/* A position to rewind to: everything allocated after rill_arena_mark() is released by
 * rill_arena_rewind(a, mark). */
size_t rill_arena_mark(const rill_arena_t *a);
void rill_arena_rewind(rill_arena_t *a, size_t mark);

/* Bytes still free (ignoring alignment padding). */
size_t rill_arena_remaining(const rill_arena_t *a);

#ifdef __cplusplus
}
#endif
#endif /* RILL_ARENA_H */
