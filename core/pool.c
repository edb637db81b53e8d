/*
 * pool.c - thread pool for parallel-for (contract in rill_pool.h).
 *
 * Every job is seen by every worker: the caller publishes the job's fields, then bumps `gen`
 * (release); each worker acquires the new generation, claims chunks from `next` until none are
 * left, and decrements `pending`. The caller runs chunks too, then waits for pending == 0. That
 * wait is also what makes it safe to overwrite the job fields for the next job: no worker reads
 * them after decrementing pending. (Rejected: letting late workers skip a job and counting chunks
 * instead of workers. A worker that has loaded gen could then still be reading the old job's
 * fields while the caller writes the next ones, which needs a seqlock to fix; ggml makes the
 * same choice of a full barrier per job.)
 *
 * Sleeping: after a job a worker spins for spin_us, then sleeps on the condition variable. Both
 * sides use sequentially consistent operations on `gen` and `sleeping` in opposite order (the
 * caller stores gen then loads sleeping; a worker stores sleeping then loads gen, under the
 * mutex), so either the caller sees a sleeper and broadcasts, or the sleeper sees the new job.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

typedef struct worker_arg {
    struct rill_pool *pool;
    int index;
} worker_arg_t;

struct rill_pool {
    int n_threads;
    pthread_t *threads; /* n_threads - 1 workers */
    worker_arg_t *args; /* their start arguments; owned by the pool so that no worker frees
                           memory behind the creator's back (the counters stay exact) */

    /* The current job: written by the caller before publishing gen, read-only until pending
     * drops to 0. */
    rill_pool_fn fn;
    void *ctx;
    int64_t n;
    int64_t grain;

    _Alignas(64) _Atomic int64_t next; /* next index to claim */
    _Alignas(64) _Atomic int pending;  /* workers that have not finished the job */
    _Alignas(64) _Atomic uint64_t gen; /* job generation */
    _Atomic int sleeping;
    _Atomic bool stop;
    _Atomic int spin_us;

    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void run_chunks(rill_pool_t *p, int thread) {
    const int64_t n = p->n, grain = p->grain;
    for (;;) {
        int64_t begin = atomic_fetch_add_explicit(&p->next, grain, memory_order_relaxed);
        if (begin >= n) {
            break;
        }
        int64_t end = begin + grain < n ? begin + grain : n;
        p->fn(p->ctx, begin, end, thread);
    }
}

/* Waits until gen differs from `seen`, spinning first. Returns the new generation. */
static uint64_t wait_for_job(rill_pool_t *p, uint64_t seen) {
    uint64_t deadline = rill_now_ns() + (uint64_t)atomic_load(&p->spin_us) * 1000u;
    for (unsigned i = 0;; i++) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            return g;
        }
        CPU_RELAX();
        if ((i & 255) == 0 && rill_now_ns() >= deadline) {
            break;
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping, 1);
    uint64_t g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) {
        pthread_cond_wait(&p->cv, &p->mu);
    }
    atomic_fetch_sub(&p->sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg_t wa = *(worker_arg_t *)arg;
    rill_pool_t *p = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) {
            break;
        }
        run_chunks(p, wa.index);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    return NULL;
}

static void stop_workers(rill_pool_t *p, int n_started) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n_started; i++) {
        pthread_join(p->threads[i], NULL);
    }
}

rill_err_t rill_pool_new(int n_threads, rill_pool_t **out) {
    *out = NULL;
    if (n_threads < 0 || n_threads > 512) {
        return RILL_EINVAL;
    }
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : (n > 512 ? 512 : (int)n);
    }
    rill_pool_t *p = rill_calloc(RILL_MEM_CORE, 1, sizeof *p);
    if (p == NULL) {
        return RILL_ENOMEM;
    }
    p->n_threads = n_threads;
    atomic_init(&p->spin_us, 50);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        rill_free(p);
        return RILL_EINTERNAL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        rill_free(p);
        return RILL_EINTERNAL;
    }
    rill_err_t err = RILL_OK;
    int started = 0;
    if (n_threads > 1) {
        p->threads = rill_calloc(RILL_MEM_CORE, (size_t)(n_threads - 1), sizeof *p->threads);
        p->args = rill_calloc(RILL_MEM_CORE, (size_t)(n_threads - 1), sizeof *p->args);
        if (p->threads == NULL || p->args == NULL) {
            err = RILL_ENOMEM;
            goto cleanup;
        }
    }
    for (; started < n_threads - 1; started++) {
        worker_arg_t *wa = &p->args[started];
        wa->pool = p;
        wa->index = started + 1;
        if (pthread_create(&p->threads[started], NULL, worker_main, wa) != 0) {
            err = RILL_EINTERNAL;
            goto cleanup;
        }
    }
    *out = p;
    return RILL_OK;
cleanup:
    stop_workers(p, started);
    rill_free(p->threads);
    rill_free(p->args);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    rill_free(p);
    return err;
}

void rill_pool_destroy(rill_pool_t **pp) {
    if (pp == NULL || *pp == NULL) {
        return;
    }
    rill_pool_t *p = *pp;
    stop_workers(p, p->n_threads - 1);
    rill_free(p->threads);
    rill_free(p->args);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    rill_free(p);
    *pp = NULL;
}

int rill_pool_threads(const rill_pool_t *pool) {
    return pool == NULL ? 1 : pool->n_threads;
}

void rill_pool_set_spin_us(rill_pool_t *pool, int spin_us) {
    if (pool != NULL) {
        atomic_store(&pool->spin_us, spin_us < 0 ? 0 : spin_us);
    }
}

void rill_pool_for(rill_pool_t *p, int64_t n, int64_t grain, rill_pool_fn fn, void *ctx) {
    if (n <= 0) {
        return;
    }
    int nt = p == NULL ? 1 : p->n_threads;
    if (grain <= 0) {
        grain = (n + (int64_t)nt * 4 - 1) / ((int64_t)nt * 4);
        if (grain < 1) {
            grain = 1;
        }
    }
    if (nt == 1 || grain >= n) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->grain = grain;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, nt - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes the job, ordered before `sleeping` */
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunks(p, 0);
    for (unsigned i = 0; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++) {
        /* On an oversubscribed machine a worker may be descheduled: stop hogging the core. */
        if (i < 4096) {
            CPU_RELAX();
        } else {
            sched_yield();
        }
    }
}
