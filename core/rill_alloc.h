/*
 * rill_alloc.h - counted allocation with failure injection.
 *
 * All heap memory in rill goes through these functions (STYLE.md rule 7). Each allocation is
 * charged to a subsystem, so `rill_mem_stats()` can say how many bytes the KV pool, the model
 * scratch or the server hold right now and at peak. Tests make the N-th allocation fail with
 * `rill_mem_fail_nth()` to walk every out-of-memory path (SQLite's technique): a caller that
 * gets NULL must return RILL_ENOMEM and leave its objects as they were.
 *
 * Every block carries a 64-byte header in front of it (size, subsystem, the raw pointer), which
 * is what lets rill_free() uncharge the right subsystem without being told the size. Blocks are
 * aligned to RILL_ALLOC_ALIGN bytes (enough for AVX-512 loads); rill_malloc_aligned() gives more.
 *
 * Thread safety: thread-safe. Counters are C11 atomics; the failure hook is process-wide and is
 * meant to be armed by a test while no other thread allocates.
 */
#ifndef RILL_ALLOC_H
#define RILL_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_ALLOC_ALIGN 64

/* X(NAME, "label"): one entry per module that owns memory. */
#define RILL_MEM_TABLE(X)     \
    X(CORE, "core")           \
    X(MODEL, "model")         \
    X(KERNELS, "kernels")     \
    X(SESSIONS, "sessions")   \
    X(SCHEDULER, "scheduler") \
    X(INGEST, "ingest")       \
    X(SERVER, "server")       \
    X(CLIENT, "client")       \
    X(OTHER, "other")

typedef enum rill_mem {
#define RILL_MEM_ENUM_(name, label) RILL_MEM_##name,
    RILL_MEM_TABLE(RILL_MEM_ENUM_)
#undef RILL_MEM_ENUM_
        RILL_MEM_COUNT_
} rill_mem_t;

typedef struct rill_mem_stats {
    int64_t bytes;      /* bytes currently allocated (payload, not headers) */
    int64_t peak_bytes; /* high-water mark of `bytes` since start or rill_mem_reset_peak() */
    int64_t n_allocs;   /* successful allocations ever */
    int64_t n_live;     /* blocks currently allocated */
    int64_t n_failed;   /* allocations that returned NULL (real or injected) */
} rill_mem_stats_t;

/* Allocates n bytes charged to `tag`, aligned to RILL_ALLOC_ALIGN. n == 0 allocates a unique
 * minimal block. Returns NULL on failure (or when failure injection fires). Caller owns the
 * block; release with rill_free(). */
void *rill_malloc(rill_mem_t tag, size_t n);

/* Like rill_malloc() for count * size zeroed bytes; NULL also when count * size overflows. */
void *rill_calloc(rill_mem_t tag, size_t count, size_t size);

/* Allocates n bytes aligned to `align` (a power of two, at most 1 MiB; smaller values are raised
 * to RILL_ALLOC_ALIGN). NULL on failure or on a bad alignment. Release with rill_free(). */
void *rill_malloc_aligned(rill_mem_t tag, size_t n, size_t align);

/* Resizes a block from any function here (p == NULL behaves as rill_malloc(tag, n); an existing
 * block keeps its own subsystem and tag is ignored). On failure returns NULL and the original
 * block is unaltered and still owned by the caller. The result is aligned to RILL_ALLOC_ALIGN. */
void *rill_realloc(rill_mem_t tag, void *p, size_t n);

/* Releases a block from any of the functions above. NULL is a no-op. */
void rill_free(void *p);

/* Duplicates a NUL-terminated string (charged to tag). NULL on failure. Release with rill_free. */
char *rill_strdup(rill_mem_t tag, const char *s);

/* Snapshot of one subsystem's counters. tag out of range gives all zeros. */
rill_mem_stats_t rill_mem_stats(rill_mem_t tag);

/* Sum over all subsystems. */
rill_mem_stats_t rill_mem_stats_total(void);

/* Label of a subsystem ("sessions"), or "?" when out of range. Static string. */
const char *rill_mem_name(rill_mem_t tag);

/* Resets every subsystem's peak_bytes to its current bytes. */
void rill_mem_reset_peak(void);

/* Failure injection (tests only). Makes the n-th allocation from now fail (n = 1: the very next
 * one), once; n <= 0 disarms. Counts rill_malloc, rill_calloc, rill_malloc_aligned, rill_realloc
 * and rill_strdup calls from every thread. */
void rill_mem_fail_nth(int64_t n);

/* Number of allocation calls made since process start (including failed ones). Tests use the
 * difference around an operation to know how many failure points it has. */
int64_t rill_mem_calls(void);

#ifdef __cplusplus
}
#endif
#endif /* RILL_ALLOC_H */
