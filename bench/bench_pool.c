/*
 * bench_pool.c - dispatch overhead of rill_pool_for().
 *
 * A forward pass dispatches a parallel-for per matmul: hundreds per token. This measures the cost
 * of one dispatch whose body does (almost) nothing, so the figure is pure overhead: waking the
 * workers, claiming chunks, and the completion barrier. Side by side in the same run it measures
 * the naive alternative, creating and joining a thread per dispatch, as the baseline the ratio is
 * quoted against, and the pool with spinning disabled (every dispatch wakes sleeping workers).
 *
 * Usage: bench_pool [--threads N] [--iters N]
 * Prints a table, then one JSON line per configuration.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"

typedef struct sink {
    _Atomic int64_t touched;
} sink_t;

static void body(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    sink_t *s = ctx;
    atomic_fetch_add_explicit(&s->touched, end - begin, memory_order_relaxed);
}

static void *thread_body(void *ctx) {
    body(ctx, 0, 1, 1);
    return NULL;
}

/* ns per dispatch of rill_pool_for over n_threads chunks. */
static double time_pool(rill_pool_t *p, int iters, sink_t *s) {
    int nt = rill_pool_threads(p);
    for (int i = 0; i < iters / 10; i++) { /* warm up */
        rill_pool_for(p, nt, 1, body, s);
    }
    uint64_t t0 = rill_now_ns();
    for (int i = 0; i < iters; i++) {
        rill_pool_for(p, nt, 1, body, s);
    }
    return (double)(rill_now_ns() - t0) / iters;
}

/* ns per dispatch when each dispatch creates and joins n_threads - 1 threads. */
static double time_spawn(int n_threads, int iters, sink_t *s) {
    pthread_t th[512];
    uint64_t t0 = rill_now_ns();
    for (int i = 0; i < iters; i++) {
        for (int t = 0; t < n_threads - 1; t++) {
            pthread_create(&th[t], NULL, thread_body, s);
        }
        body(s, 0, 1, 0);
        for (int t = 0; t < n_threads - 1; t++) {
            pthread_join(th[t], NULL);
        }
    }
    return (double)(rill_now_ns() - t0) / iters;
}

int main(int argc, char **argv) {
    int n_threads = 2, iters = 200000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--iters N]\n", argv[0]);
            return 2;
        }
    }
    if (n_threads < 1 || n_threads > 512 || iters < 10) {
        fprintf(stderr, "bench_pool: need 1 <= threads <= 512 and iters >= 10\n");
        return 2;
    }
    sink_t s = { 0 };
    rill_pool_t *p = NULL;
    rill_err_t err = rill_pool_new(n_threads, &p);
    if (err != RILL_OK) {
        fprintf(stderr, "bench_pool: %s\n", rill_strerror(err));
        return 1;
    }
    double spin = time_pool(p, iters, &s);
    rill_pool_set_spin_us(p, 0);
    double sleep = time_pool(p, iters / 10, &s);
    rill_pool_destroy(&p);
    double spawn = time_spawn(n_threads, iters / 100 > 100 ? iters / 100 : 100, &s);

    printf("%-28s %8s %14s %10s\n", "configuration", "threads", "ns/dispatch", "vs spawn");
    printf("%-28s %8d %14.0f %9.1fx\n", "pool (spin 50us, default)", n_threads, spin, spawn / spin);
    printf("%-28s %8d %14.0f %9.1fx\n", "pool (no spin: wake each)", n_threads, sleep,
           spawn / sleep);
    printf("%-28s %8d %14.0f %9.1fx\n", "pthread_create per dispatch", n_threads, spawn, 1.0);
    printf("{\"bench\":\"pool\",\"threads\":%d,\"spin_ns\":%.0f,\"nospin_ns\":%.0f,"
           "\"spawn_ns\":%.0f,\"spawn_over_spin\":%.2f}\n",
           n_threads, spin, sleep, spawn, spawn / spin);
    return s.touched > 0 ? 0 : 1;
}
