/*
 * test_core_threads.c - the core parts that cross threads: the SPSC ring with a real producer and
 * consumer, and the thread pool under many back-to-back dispatches. Run under ThreadSanitizer by
 * the test script (label `concurrency`).
 */
#include <check.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"

#define N_ITEMS 200000

typedef struct item {
    uint64_t seq;
    uint64_t check; /* seq * golden: a torn copy would not match */
} item_t;

static void *producer(void *arg) {
    rill_ring_t *r = arg;
    uint64_t seq = 0;
    uint64_t full = 0;
    item_t batch[7];
    while (seq < N_ITEMS) {
        if (seq % 3 == 0) {
            item_t it = { seq, seq * 0x9e3779b97f4a7c15ull };
            if (rill_ring_push(r, &it) == RILL_OK) {
                seq++;
            } else {
                full++;
            }
        } else {
            size_t n = 0;
            for (; n < 7 && seq + n < N_ITEMS; n++) {
                batch[n].seq = seq + n;
                batch[n].check = (seq + n) * 0x9e3779b97f4a7c15ull;
            }
            seq += rill_ring_push_n(r, batch, n);
        }
    }
    return (void *)(uintptr_t)full;
}

START_TEST(ring_two_threads_in_order) {
    rill_ring_t r;
    ck_assert_int_eq(rill_ring_init(&r, RILL_MEM_CORE, sizeof(item_t), 64), RILL_OK);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, producer, &r), 0);
    uint64_t want = 0;
    item_t out[5];
    while (want < N_ITEMS) {
        size_t n = rill_ring_pop_n(&r, out, 5);
        for (size_t i = 0; i < n; i++) {
            ck_assert_uint_eq(out[i].seq, want);
            ck_assert_uint_eq(out[i].check, want * 0x9e3779b97f4a7c15ull);
            want++;
        }
    }
    void *full = NULL;
    pthread_join(t, &full);
    ck_assert_int_eq(rill_ring_pop(&r, out), RILL_EAGAIN);
    rill_ring_deinit(&r);
}
END_TEST

typedef struct job {
    int64_t *v;
    _Atomic int64_t calls;
    int n_threads;
} job_t;

static void bump(void *ctx, int64_t begin, int64_t end, int thread) {
    job_t *j = ctx;
    ck_assert_int_ge(thread, 0);
    ck_assert_int_lt(thread, j->n_threads);
    atomic_fetch_add(&j->calls, 1);
    for (int64_t i = begin; i < end; i++) {
        j->v[i] += 1;
    }
}

START_TEST(pool_many_dispatches_cover_range_once) {
    for (int nt = 2; nt <= 4; nt++) {
        rill_pool_t *p = NULL;
        ck_assert_int_eq(rill_pool_new(nt, &p), RILL_OK);
        ck_assert_int_eq(rill_pool_threads(p), nt);
        enum { N = 1000, ROUNDS = 2000 };
        job_t j = { calloc(N, sizeof(int64_t)), 0, nt };
        for (int round = 0; round < ROUNDS; round++) {
            if (round == ROUNDS / 2) {
                rill_pool_set_spin_us(p, 0); /* exercise the sleep / wake path too */
            }
            int64_t n = 1 + (round * 37) % N; /* varying sizes, some single-chunk */
            rill_pool_for(p, n, 1 + round % 50, bump, &j);
        }
        /* Each index i was covered once per round with n > i. */
        for (int64_t i = 0; i < N; i++) {
            int64_t want = 0;
            for (int round = 0; round < ROUNDS; round++) {
                want += (1 + (round * 37) % N) > i;
            }
            ck_assert_int_eq(j.v[i], want);
        }
        free(j.v);
        rill_pool_destroy(&p);
    }
}
END_TEST

/* A job whose context is open only while its rill_pool_for() runs. */
typedef struct ojob {
    _Atomic int open;
    int64_t v[64];
    int64_t calls;
} ojob_t;

static void bump_open(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    ojob_t *j = ctx;
    ck_assert_int_eq(atomic_load(&j->open), 1); /* never a finished job's chunk */
    for (int64_t i = begin; i < end; i++) {
        j->v[i] += 1;
    }
}

static void bump_open_twice(void *ctx, int64_t begin, int64_t end, int thread) {
    bump_open(ctx, begin, end, thread);
    bump_open(ctx, begin, end, thread);
}

/* Completion is counted per chunk (core/pool.c), so a worker may come late to a job that has
 * already finished, or to its successor: with more workers than cores (late workers are the
 * rule), jobs alternating two bodies and three contexts that are closed as soon as their
 * dispatch returns, every chunk runs exactly once, in its own job, before the dispatch returns
 * (the body would see a closed context, or an index would be counted twice or not at all). */
START_TEST(pool_late_workers_never_run_a_finished_job) {
    rill_pool_t *p = NULL;
    ck_assert_int_eq(rill_pool_new(8, &p), RILL_OK);
    static ojob_t jobs[3];
    enum { ROUNDS = 3000 };
    for (int round = 0; round < ROUNDS; round++) {
        if (round == ROUNDS / 3) {
            rill_pool_set_spin_us(p, 0); /* workers asleep between jobs: later still */
        } else if (round == 2 * ROUNDS / 3) {
            rill_pool_set_spin_us(p, 50);
        }
        ojob_t *j = &jobs[round % 3];
        int64_t n = 1 + (round * 7) % 64;
        bool twice = round % 2 == 1;
        memset(j->v, 0, sizeof j->v);
        atomic_store(&j->open, 1);
        rill_pool_for(p, n, 1 + round % 5, twice ? bump_open_twice : bump_open, j);
        atomic_store(&j->open, 0);
        for (int64_t i = 0; i < 64; i++) {
            ck_assert_int_eq(j->v[i], i < n ? (twice ? 2 : 1) : 0);
        }
    }
    rill_pool_destroy(&p);
}
END_TEST

START_TEST(pool_zero_means_all_cpus) {
    rill_pool_t *p = NULL;
    ck_assert_int_eq(rill_pool_new(0, &p), RILL_OK);
    ck_assert_int_ge(rill_pool_threads(p), 1);
    rill_pool_destroy(&p);
}
END_TEST

static Suite *threads_suite(void) {
    Suite *s = suite_create("core_threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ring_two_threads_in_order);
    tcase_add_test(tc, pool_many_dispatches_cover_range_once);
    tcase_add_test(tc, pool_late_workers_never_run_a_finished_job);
    tcase_add_test(tc, pool_zero_means_all_cpus);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(threads_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
