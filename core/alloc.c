/*
 * alloc.c - counted allocation.
 *
 * Layout of a block: [raw ... padding][header 64 B][payload], with the payload aligned to the
 * requested alignment and the header immediately before it. The header records the raw pointer
 * (what malloc returned), the payload size and the subsystem, plus a magic number that catches
 * rill_free() of a pointer that did not come from here. A 64-byte header keeps the default
 * payload alignment at 64 without a second computation.
 *
 * realloc is malloc + copy + free rather than realloc(): the header offset depends on where
 * malloc put the block, and reallocation is never on a hot path.
 *
 * Counters are relaxed atomics: they are statistics, ordering between them does not matter.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rill_alloc.h"

#define HDR_SIZE  64
#define HDR_MAGIC 0x52494c4cu /* "RILL" */
#define MAX_ALIGN ((size_t)1 << 20)

typedef struct hdr {
    void *raw;
    size_t size;
    uint32_t tag;
    uint32_t magic;
} hdr_t;

_Static_assert(sizeof(hdr_t) <= HDR_SIZE, "header must fit in front of the payload");

typedef struct counters {
    _Atomic int64_t bytes;
    _Atomic int64_t peak;
    _Atomic int64_t n_allocs;
    _Atomic int64_t n_live;
    _Atomic int64_t n_failed;
} counters_t;

static counters_t g_mem[RILL_MEM_COUNT_];
static _Atomic int64_t g_calls;
static _Atomic int64_t g_fail_at; /* value of g_calls that fails; 0 = disarmed */

static bool should_fail(void) {
    int64_t call = atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed) + 1;
    int64_t at = atomic_load_explicit(&g_fail_at, memory_order_relaxed);
    if (at != 0 && call == at) {
        atomic_compare_exchange_strong(&g_fail_at, &at, 0);
        return true;
    }
    return false;
}

static void charge(rill_mem_t tag, int64_t n) {
    counters_t *c = &g_mem[tag];
    int64_t now = atomic_fetch_add_explicit(&c->bytes, n, memory_order_relaxed) + n;
    atomic_fetch_add_explicit(&c->n_allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->n_live, 1, memory_order_relaxed);
    int64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(
                             &c->peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
    }
}

static void count_failure(rill_mem_t tag) {
    atomic_fetch_add_explicit(&g_mem[tag].n_failed, 1, memory_order_relaxed);
}

static void *alloc_impl(rill_mem_t tag, size_t n, size_t align, bool zero) {
    if ((unsigned)tag >= RILL_MEM_COUNT_) {
        tag = RILL_MEM_OTHER;
    }
    if (should_fail()) {
        count_failure(tag);
        return NULL;
    }
    if (align < RILL_ALLOC_ALIGN) {
        align = RILL_ALLOC_ALIGN;
    }
    if ((align & (align - 1)) != 0 || align > MAX_ALIGN || n > SIZE_MAX - HDR_SIZE - align) {
        count_failure(tag);
        return NULL;
    }
    size_t total = n + HDR_SIZE + align;
    void *raw = zero ? calloc(1, total) : malloc(total);
    if (raw == NULL) {
        count_failure(tag);
        return NULL;
    }
    uintptr_t p = ((uintptr_t)raw + HDR_SIZE + align - 1) & ~(uintptr_t)(align - 1);
    hdr_t *h = (hdr_t *)(p - HDR_SIZE);
    h->raw = raw;
    h->size = n;
    h->tag = (uint32_t)tag;
    h->magic = HDR_MAGIC;
    charge(tag, (int64_t)n);
    return (void *)p;
}

void *rill_malloc(rill_mem_t tag, size_t n) {
    return alloc_impl(tag, n, RILL_ALLOC_ALIGN, false);
}

void *rill_calloc(rill_mem_t tag, size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size) {
        (void)should_fail(); /* still one allocation call, for rill_mem_calls() accounting */
        count_failure((unsigned)tag < RILL_MEM_COUNT_ ? tag : RILL_MEM_OTHER);
        return NULL;
    }
    return alloc_impl(tag, count * size, RILL_ALLOC_ALIGN, true);
}

void *rill_malloc_aligned(rill_mem_t tag, size_t n, size_t align) {
    return alloc_impl(tag, n, align, false);
}

static hdr_t *header_of(void *p) {
    hdr_t *h = (hdr_t *)((unsigned char *)p - HDR_SIZE);
    /* A bad pointer here is memory corruption in the caller, not input: abort loudly. */
    if (h->magic != HDR_MAGIC || h->tag >= RILL_MEM_COUNT_) {
        abort();
    }
    return h;
}

void rill_free(void *p) {
    if (p == NULL) {
        return;
    }
    hdr_t *h = header_of(p);
    counters_t *c = &g_mem[h->tag];
    atomic_fetch_sub_explicit(&c->bytes, (int64_t)h->size, memory_order_relaxed);
    atomic_fetch_sub_explicit(&c->n_live, 1, memory_order_relaxed);
    h->magic = 0; /* a double free now aborts instead of corrupting the counters */
    free(h->raw);
}

void *rill_realloc(rill_mem_t tag, void *p, size_t n) {
    if (p == NULL) {
        return rill_malloc(tag, n);
    }
    hdr_t *h = header_of(p);
    void *q = alloc_impl((rill_mem_t)h->tag, n, RILL_ALLOC_ALIGN, false);
    if (q == NULL) {
        return NULL;
    }
    memcpy(q, p, h->size < n ? h->size : n);
    rill_free(p);
    return q;
}

char *rill_strdup(rill_mem_t tag, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = rill_malloc(tag, n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}

rill_mem_stats_t rill_mem_stats(rill_mem_t tag) {
    rill_mem_stats_t s = { 0 };
    if ((unsigned)tag >= RILL_MEM_COUNT_) {
        return s;
    }
    counters_t *c = &g_mem[tag];
    s.bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed);
    s.peak_bytes = atomic_load_explicit(&c->peak, memory_order_relaxed);
    s.n_allocs = atomic_load_explicit(&c->n_allocs, memory_order_relaxed);
    s.n_live = atomic_load_explicit(&c->n_live, memory_order_relaxed);
    s.n_failed = atomic_load_explicit(&c->n_failed, memory_order_relaxed);
    return s;
}

rill_mem_stats_t rill_mem_stats_total(void) {
    rill_mem_stats_t t = { 0 };
    for (int i = 0; i < RILL_MEM_COUNT_; i++) {
        rill_mem_stats_t s = rill_mem_stats((rill_mem_t)i);
        t.bytes += s.bytes;
        t.peak_bytes += s.peak_bytes;
        t.n_allocs += s.n_allocs;
        t.n_live += s.n_live;
        t.n_failed += s.n_failed;
    }
    return t;
}

const char *rill_mem_name(rill_mem_t tag) {
    static const char *const names[] = {
#define RILL_MEM_NAME_(name, label) label,
        RILL_MEM_TABLE(RILL_MEM_NAME_)
#undef RILL_MEM_NAME_
    };
    if ((unsigned)tag >= RILL_MEM_COUNT_) {
        return "?";
    }
    return names[tag];
}

void rill_mem_reset_peak(void) {
    for (int i = 0; i < RILL_MEM_COUNT_; i++) {
        atomic_store_explicit(&g_mem[i].peak,
                              atomic_load_explicit(&g_mem[i].bytes, memory_order_relaxed),
                              memory_order_relaxed);
    }
}

void rill_mem_fail_nth(int64_t n) {
    int64_t now = atomic_load_explicit(&g_calls, memory_order_relaxed);
    atomic_store_explicit(&g_fail_at, n > 0 ? now + n : 0, memory_order_relaxed);
}

int64_t rill_mem_calls(void) {
    return atomic_load_explicit(&g_calls, memory_order_relaxed);
}
