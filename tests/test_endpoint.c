/*
 * test_endpoint.c - endpoint anticipation (scheduler/rill_endpoint.h) and the end-of-turn mass
 * the scheduler keeps for it (rill_scheduler.h, "End-of-turn mass").
 *
 * The predictor against the logistic function computed here; parameter checks; the driver on
 * scripted feature sequences (a start at the threshold and never twice, a commit at the
 * confirmed end, a cancel when speech resumes or the transcript changes, an end without
 * speculation, the minimum pause, bad steps changing nothing); the features from recognizer
 * updates and masses; the watch against softmax masses computed here from the logits of a
 * reference session holding the same tokens (rill_session_logits: rill's forward pass on a
 * second pool, no scheduler), through token ingest, text ingest and a replace; watches refused
 * for bad ids (at creation and, for ids beyond the vocabulary, at session creation); failed
 * allocations. Model: the tiny qwen2 F32 file of tests/data/models, for the watch tests (they are
 * left out without it; the rest needs no model).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_endpoint.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "test_util.h"

#define QWEN "rill-tiny-qwen2-F32.gguf"
#define SEC  1000000000LL

/* Parameters whose probability depends on the pause alone: 0.5 at pause 0.4 s. */
static rill_endpoint_params_t pause_only(float threshold) {
    rill_endpoint_params_t p = rill_endpoint_default_params();
    p.threshold = threshold;
    p.bias = -4.0f;
    memset(p.weights, 0, sizeof p.weights);
    p.weights[RILL_ENDPOINT_PAUSE] = 10.0f;
    return p;
}

/* ---- the predictor -------------------------------------------------------------------------- */

START_TEST(prob_is_the_logistic_of_the_linear_score) {
    rill_endpoint_params_t p = rill_endpoint_default_params();
    p.bias = 0.25f;
    for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
        p.weights[i] = 0.5f - 0.3f * (float)i;
    }
    rill_endpoint_features_t f;
    for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
        f.x[i] = 0.1f * (float)(i + 1) - 0.35f;
    }
    double z = 0.25;
    for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
        z += (double)p.weights[i] * (double)f.x[i];
    }
    float got = -1;
    ck_assert_int_eq(rill_endpoint_prob(&p, &f, &got), RILL_OK);
    ck_assert_double_eq_tol(got, 1.0 / (1.0 + exp(-z)), 1e-6);
    /* every weight counts: changing one feature moves the probability the right way */
    for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
        rill_endpoint_features_t g = f;
        g.x[i] += 1.0f;
        float q = -1;
        ck_assert_int_eq(rill_endpoint_prob(&p, &g, &q), RILL_OK);
        double zi = z + p.weights[i];
        ck_assert_double_eq_tol(q, 1.0 / (1.0 + exp(-zi)), 1e-6);
    }
    /* the limits, without NaN */
    p.bias = 1e30f;
    ck_assert_int_eq(rill_endpoint_prob(&p, &f, &got), RILL_OK);
    ck_assert_float_eq(got, 1.0f);
    p.bias = -1e30f;
    ck_assert_int_eq(rill_endpoint_prob(&p, &f, &got), RILL_OK);
    ck_assert_float_eq(got, 0.0f);
}
END_TEST

START_TEST(bad_parameters_are_refused) {
    rill_endpoint_params_t d = rill_endpoint_default_params();
    ck_assert_int_eq(rill_endpoint_params_check(&d), RILL_OK);
    ck_assert_int_eq(rill_endpoint_params_check(NULL), RILL_EINVAL);
    rill_endpoint_params_t bad[12];
    int n = 0;
    for (int i = 0; i < 12; i++) {
        bad[i] = d;
    }
    bad[n++].threshold = 0.0f;
    bad[n++].threshold = 1.01f;
    bad[n++].threshold = NAN;
    bad[n++].confirm_ms = 99;
    bad[n++].confirm_ms = 10001;
    bad[n++].min_pause_ms = -1;
    bad[n++].min_pause_ms = d.confirm_ms + 1;
    bad[n++].bias = NAN;
    bad[n++].bias = INFINITY;
    bad[n++].weights[RILL_ENDPOINT_STABLE_STEPS] = NAN;
    bad[n++].weights[RILL_ENDPOINT_PAUSE] = -INFINITY;
    rill_endpoint_features_t f = { { 0 } };
    for (int i = 0; i < n; i++) {
        ck_assert_msg(rill_endpoint_params_check(&bad[i]) == RILL_EINVAL, "case %d", i);
        rill_endpoint_t *ep = (rill_endpoint_t *)&f; /* untouched on error */
        ck_assert_int_eq(rill_endpoint_new(&bad[i], &ep), RILL_EINVAL);
        ck_assert_ptr_eq(ep, (rill_endpoint_t *)&f);
        float out = 7;
        ck_assert_int_eq(rill_endpoint_prob(&bad[i], &f, &out), RILL_EINVAL);
        ck_assert_float_eq(out, 7);
    }
    /* the edges are fine */
    rill_endpoint_params_t ok = d;
    ok.threshold = 1.0f;
    ok.confirm_ms = 100;
    ok.min_pause_ms = 100;
    ck_assert_int_eq(rill_endpoint_params_check(&ok), RILL_OK);
    ok.min_pause_ms = 0;
    ck_assert_int_eq(rill_endpoint_params_check(&ok), RILL_OK);
    /* non-finite features and NULLs */
    float out = 7;
    f.x[RILL_ENDPOINT_SINCE_COMMIT] = NAN;
    ck_assert_int_eq(rill_endpoint_prob(&d, &f, &out), RILL_EINVAL);
    ck_assert_float_eq(out, 7);
    f.x[RILL_ENDPOINT_SINCE_COMMIT] = 0;
    ck_assert_int_eq(rill_endpoint_prob(&d, NULL, &out), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_prob(&d, &f, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_new(&d, NULL), RILL_EINVAL);
    /* names */
    ck_assert_str_eq(rill_endpoint_feature_name(RILL_ENDPOINT_LOG_P_TURN), "log_p_turn");
    ck_assert_ptr_null(rill_endpoint_feature_name(RILL_ENDPOINT_N_FEATURES));
    ck_assert_str_eq(rill_endpoint_action_name(RILL_ENDPOINT_CANCEL), "cancel");
    ck_assert_ptr_null(rill_endpoint_action_name((rill_endpoint_action_t)5));
}
END_TEST

/* ---- the driver ----------------------------------------------------------------------------- */

typedef struct script {
    rill_endpoint_t *ep;
    int64_t t;
} script_t;

/* One 30 ms frame with this pause; returns the action. */
static rill_endpoint_action_t frame(script_t *s, int64_t pause) {
    s->t += 30;
    rill_endpoint_decision_t d;
    ck_assert_int_eq(rill_endpoint_step(s->ep, s->t, pause, NULL, &d), RILL_OK);
    ck_assert_int_eq(d.state, rill_endpoint_state(s->ep));
    return d.action;
}

/* Speech for n frames: no action. */
static void speech(script_t *s, int n) {
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(frame(s, 0), RILL_ENDPOINT_NONE);
    }
}

/* A pause of frames 30, 60, ... up to `upto` ms; returns the pause at which `want` came (the
 * other frames must give NONE), or -1. */
static int64_t pause_until(script_t *s, int64_t upto, rill_endpoint_action_t want) {
    int64_t at = -1;
    for (int64_t p = 30; p <= upto; p += 30) {
        rill_endpoint_action_t a = frame(s, p);
        if (a == want && at < 0) {
            at = p;
        } else {
            ck_assert_msg(a == RILL_ENDPOINT_NONE, "pause %lld: %s", (long long)p,
                          rill_endpoint_action_name(a));
        }
    }
    return at;
}

START_TEST(driver_starts_commits_and_cancels) {
    rill_endpoint_params_t p = pause_only(0.5f); /* prob >= 0.5 from pause 0.4 s */
    script_t s = { 0 };
    ck_assert_int_eq(rill_endpoint_new(&p, &s.ep), RILL_OK);
    ck_assert_int_eq(rill_endpoint_state(s.ep), RILL_ENDPOINT_LISTEN);
    speech(&s, 5);
    /* a real end: START at the threshold (420 ms: the first frame at or past 400), no second
     * START while it is open, COMMIT when the pause reaches 700 ms */
    ck_assert_int_eq(pause_until(&s, 390, RILL_ENDPOINT_START), -1);
    ck_assert_int_eq(frame(&s, 420), RILL_ENDPOINT_START);
    ck_assert_int_eq(rill_endpoint_state(s.ep), RILL_ENDPOINT_SPEC);
    for (int64_t q = 450; q < 700; q += 30) {
        ck_assert_int_eq(frame(&s, q), RILL_ENDPOINT_NONE);
    }
    ck_assert_int_eq(frame(&s, 720), RILL_ENDPOINT_COMMIT);
    ck_assert_int_eq(rill_endpoint_state(s.ep), RILL_ENDPOINT_DONE);
    ck_assert_int_eq(frame(&s, 2000), RILL_ENDPOINT_NONE); /* the pause goes on: nothing */
    speech(&s, 3);
    ck_assert_int_eq(rill_endpoint_state(s.ep), RILL_ENDPOINT_LISTEN);
    /* a hesitation: START, then speech resumes: CANCEL */
    ck_assert_int_eq(pause_until(&s, 510, RILL_ENDPOINT_START), 420);
    ck_assert_int_eq(frame(&s, 0), RILL_ENDPOINT_CANCEL);
    ck_assert_int_eq(rill_endpoint_state(s.ep), RILL_ENDPOINT_LISTEN);
    speech(&s, 2);
    /* the transcript changes during a speculation: CANCEL (stale), then START again */
    ck_assert_int_eq(pause_until(&s, 450, RILL_ENDPOINT_START), 420);
    ck_assert_int_eq(rill_endpoint_observe(s.ep, s.t, "", 0, "more words", 10), RILL_OK);
    ck_assert_int_eq(frame(&s, 480), RILL_ENDPOINT_CANCEL);
    ck_assert_int_eq(frame(&s, 510), RILL_ENDPOINT_START);
    /* an unchanged recognizer step does not cancel */
    ck_assert_int_eq(rill_endpoint_observe(s.ep, s.t, "", 0, "more words", 10), RILL_OK);
    ck_assert_int_eq(frame(&s, 540), RILL_ENDPOINT_NONE);
    /* nor does committing the tail as it was (the text is the same), with a new tail it would */
    ck_assert_int_eq(rill_endpoint_observe(s.ep, s.t, "more words", 10, "", 0), RILL_OK);
    ck_assert_int_eq(frame(&s, 570), RILL_ENDPOINT_NONE);
    ck_assert_int_eq(frame(&s, 700), RILL_ENDPOINT_COMMIT);
    speech(&s, 1);
    /* a short pause under the threshold, then a long one with a high threshold: END */
    ck_assert_int_eq(pause_until(&s, 300, RILL_ENDPOINT_START), -1);
    speech(&s, 1);
    rill_endpoint_stats_t st = rill_endpoint_stats(s.ep);
    ck_assert_int_eq(st.starts, 4);
    ck_assert_int_eq(st.commits, 2);
    ck_assert_int_eq(st.cancels_speech, 1);
    ck_assert_int_eq(st.cancels_stale, 1);
    ck_assert_int_eq(st.ends, 0);
    ck_assert_int_eq(st.observed, 3);
    rill_endpoint_destroy(&s.ep);
    ck_assert_ptr_null(s.ep);
    rill_endpoint_destroy(&s.ep); /* NULL-safe */

    /* threshold 1 with this model is never reached before 700 ms: END, once */
    p = pause_only(0.999f);
    script_t u = { 0 };
    ck_assert_int_eq(rill_endpoint_new(&p, &u.ep), RILL_OK);
    speech(&u, 2);
    ck_assert_int_eq(pause_until(&u, 1500, RILL_ENDPOINT_END), 720);
    ck_assert_int_eq(rill_endpoint_state(u.ep), RILL_ENDPOINT_DONE);
    speech(&u, 1);
    ck_assert_int_eq(rill_endpoint_stats(u.ep).ends, 1);
    ck_assert_int_eq(rill_endpoint_stats(u.ep).starts, 0);
    rill_endpoint_destroy(&u.ep);

    /* the minimum pause holds back a predictor that is always sure */
    p = pause_only(0.5f);
    p.bias = 50;
    p.min_pause_ms = 90;
    script_t v = { 0 };
    ck_assert_int_eq(rill_endpoint_new(&p, &v.ep), RILL_OK);
    ck_assert_int_eq(frame(&v, 30), RILL_ENDPOINT_NONE);
    ck_assert_int_eq(frame(&v, 60), RILL_ENDPOINT_NONE);
    ck_assert_int_eq(frame(&v, 90), RILL_ENDPOINT_START);
    /* a different confirm_ms is the one that commits */
    rill_endpoint_destroy(&v.ep);
    p.confirm_ms = 300;
    ck_assert_int_eq(rill_endpoint_new(&p, &v.ep), RILL_OK);
    v.t = 0;
    ck_assert_int_eq(pause_until(&v, 270, RILL_ENDPOINT_START), 90);
    ck_assert_int_eq(frame(&v, 300), RILL_ENDPOINT_COMMIT);
    rill_endpoint_destroy(&v.ep);
}
END_TEST

START_TEST(bad_steps_change_nothing) {
    rill_endpoint_params_t p = pause_only(0.5f);
    rill_endpoint_t *ep = NULL;
    ck_assert_int_eq(rill_endpoint_new(&p, &ep), RILL_OK);
    rill_endpoint_decision_t d;
    ck_assert_int_eq(rill_endpoint_observe(ep, 1000, "", 0, "", 0), RILL_OK);
    ck_assert_int_eq(rill_endpoint_step(ep, 1000, 420, NULL, &d), RILL_OK);
    ck_assert_int_eq(d.action, RILL_ENDPOINT_START);
    rill_endpoint_decision_t keep = { .action = (rill_endpoint_action_t)9 };
    d = keep;
    rill_sched_end_mass_t m = { .updates = 1, .p_turn = 1.5f };
    ck_assert_int_eq(rill_endpoint_step(ep, 1030, 0, &m, &d), RILL_EINVAL); /* a bad mass */
    m.p_turn = NAN;
    ck_assert_int_eq(rill_endpoint_step(ep, 1030, 0, &m, &d), RILL_EINVAL);
    m.p_turn = 0.5f;
    m.p_sentence = -0.1f;
    ck_assert_int_eq(rill_endpoint_step(ep, 1030, 0, &m, &d), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_step(ep, 990, 0, NULL, &d), RILL_EINVAL); /* time back */
    ck_assert_int_eq(rill_endpoint_step(ep, 1030, -1, NULL, &d), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_step(ep, 1030, 0, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_step(NULL, 1030, 0, NULL, &d), RILL_EINVAL);
    ck_assert_int_eq(d.action, keep.action); /* *out untouched */
    ck_assert_int_eq(rill_endpoint_observe(ep, 990, "", 0, "", 0), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_observe(ep, 1030, NULL, 3, "", 0), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_observe(ep, 1030, "", 0, NULL, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_endpoint_observe(NULL, 1030, "", 0, "", 0), RILL_EINVAL);
    rill_endpoint_stats_t st = rill_endpoint_stats(ep);
    ck_assert_int_eq(st.steps, 1);
    ck_assert_int_eq(st.observed, 1);
    /* still in SPEC, with no stale mark: the next pause frame does nothing, speech cancels */
    ck_assert_int_eq(rill_endpoint_state(ep), RILL_ENDPOINT_SPEC);
    ck_assert_int_eq(rill_endpoint_step(ep, 1030, 450, NULL, &d), RILL_OK);
    ck_assert_int_eq(d.action, RILL_ENDPOINT_NONE);
    ck_assert_int_eq(rill_endpoint_step(ep, 1060, 0, NULL, &d), RILL_OK);
    ck_assert_int_eq(d.action, RILL_ENDPOINT_CANCEL);
    rill_endpoint_destroy(&ep);
    ck_assert_int_eq(rill_endpoint_state(NULL), RILL_ENDPOINT_LISTEN);
    ck_assert_int_eq(rill_endpoint_stats(NULL).steps, 0);
}
END_TEST

START_TEST(features_follow_the_recognizer_and_the_mass) {
    rill_endpoint_params_t p = pause_only(0.99f);
    rill_endpoint_t *ep = NULL;
    ck_assert_int_eq(rill_endpoint_new(&p, &ep), RILL_OK);
    rill_endpoint_decision_t d;
    /* nothing yet: empty tail, no mass (the floor), seconds since the start */
    ck_assert_int_eq(rill_endpoint_step(ep, 2000, 250, NULL, &d), RILL_OK);
    const float *x = d.features.x;
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_PAUSE], 0.25f, 1e-6);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_LOG_P_TURN], logf(1e-6f), 1e-4);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_LOG_P_SENTENCE], logf(1e-6f), 1e-4);
    ck_assert_float_eq(x[RILL_ENDPOINT_TENTATIVE_EMPTY], 1);
    ck_assert_float_eq(x[RILL_ENDPOINT_STABLE_STEPS], 0);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_SINCE_COMMIT], 2.0f, 1e-6);
    ck_assert_float_eq(x[RILL_ENDPOINT_ENDS_SENTENCE], 0);
    ck_assert_float_eq_tol(d.prob, 1 / (1 + expf(-(-4 + 2.5f))), 1e-6);
    /* a tentative tail ending a sentence; then the same again (stable), then a commit */
    ck_assert_int_eq(rill_endpoint_observe(ep, 2500, "", 0, "it rained.", 10), RILL_OK);
    ck_assert_int_eq(rill_endpoint_step(ep, 2500, 0, NULL, &d), RILL_OK);
    ck_assert_float_eq(x[RILL_ENDPOINT_TENTATIVE_EMPTY], 0);
    ck_assert_float_eq(x[RILL_ENDPOINT_ENDS_SENTENCE], 1);
    ck_assert_float_eq(x[RILL_ENDPOINT_STABLE_STEPS], 0);
    ck_assert_float_eq(d.prob, 0); /* speech: no probability */
    for (int k = 1; k <= 7; k++) {
        /* the fourth step commits the tail as it was: still the same text */
        const char *c = k == 4 ? "it rained." : "";
        const char *tail = k >= 4 ? "" : "it rained.";
        ck_assert_int_eq(
            rill_endpoint_observe(ep, 2500 + 500 * k, c, strlen(c), tail, strlen(tail)), RILL_OK);
        ck_assert_int_eq(rill_endpoint_step(ep, 2500 + 500 * k, 30, NULL, &d), RILL_OK);
        ck_assert_float_eq(x[RILL_ENDPOINT_STABLE_STEPS], k < 5 ? k : 5); /* at most 5 */
    }
    ck_assert_int_eq(rill_endpoint_observe(ep, 6500, "Then it", 7, "rained", 6), RILL_OK);
    rill_sched_end_mass_t m = { .updates = 3, .p_turn = 0.25f, .p_sentence = 0.5f };
    ck_assert_int_eq(rill_endpoint_step(ep, 7700, 60, &m, &d), RILL_OK);
    ck_assert_float_eq(x[RILL_ENDPOINT_STABLE_STEPS], 0);
    ck_assert_float_eq(x[RILL_ENDPOINT_ENDS_SENTENCE], 0); /* the tail "rained" */
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_SINCE_COMMIT], 1.2f, 1e-5);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_LOG_P_TURN], logf(0.25f), 1e-5);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_LOG_P_SENTENCE], logf(0.5f), 1e-5);
    /* the tail committed: the committed text's end decides; since_commit is capped */
    ck_assert_int_eq(rill_endpoint_observe(ep, 8000, " rained!  ", 10, "", 0), RILL_OK);
    m.updates = 0; /* a watch that never updated counts as no mass */
    ck_assert_int_eq(rill_endpoint_step(ep, 20000, 60, &m, &d), RILL_OK);
    ck_assert_float_eq(x[RILL_ENDPOINT_TENTATIVE_EMPTY], 1);
    ck_assert_float_eq(x[RILL_ENDPOINT_ENDS_SENTENCE], 1);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_SINCE_COMMIT], 5.0f, 1e-6);
    ck_assert_float_eq_tol(x[RILL_ENDPOINT_LOG_P_TURN], logf(1e-6f), 1e-4);
    rill_endpoint_destroy(&ep);
}
END_TEST

START_TEST(driver_allocation_failure) {
    rill_endpoint_t *ep = NULL;
    rill_mem_fail_nth(1);
    ck_assert_int_eq(rill_endpoint_new(NULL, &ep), RILL_ENOMEM);
    ck_assert_ptr_null(ep);
    ck_assert_int_eq(rill_endpoint_new(NULL, &ep), RILL_OK);
    rill_endpoint_destroy(&ep);
}
END_TEST

/* ---- the end watch -------------------------------------------------------------------------- */

typedef struct rig {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be, *rbe;
    rill_forward_t *fw, *rfw;
    rill_session_pool_t *pool, *rpool;
    rill_sched_t *sch;
    int32_t V;
} rig_t;

static void rig_open(rig_t *g) {
    memset(g, 0, sizeof *g);
    g->model = test_model_load(QWEN);
    ck_assert_int_eq(rill_tokenizer_new(rill_model_gguf(g->model), &g->tok), RILL_OK);
    test_rig_params_t p = test_rig_default_params(QWEN);
    p.backend.cpu.n_threads = 1;
    p.forward.max_batch = 64;
    p.pool.n_cells = 4096;
    p.pool.kv_type = RILL_DTYPE_F32;
    test_engine_open(g->model, g->tok, &p, &g->be, &g->fw, &g->pool);
    test_engine_open(g->model, g->tok, &p, &g->rbe, &g->rfw, &g->rpool);
    rill_sched_params_t sp = rill_sched_default_params();
    sp.step_tokens = 32;
    ck_assert_int_eq(rill_sched_new(g->pool, &sp, &g->sch), RILL_OK);
    g->V = rill_model_hparams(g->model)->n_vocab;
}

static void rig_close(rig_t *g) {
    rill_sched_destroy(&g->sch);
    test_engine_close(&g->pool, &g->fw, &g->be);
    test_engine_close(&g->rpool, &g->rfw, &g->rbe);
    rill_tokenizer_destroy(&g->tok);
    rill_model_destroy(&g->model);
}

/* The two masses computed here from the logits of a reference session holding tokens[0, n). */
static void direct_masses(rig_t *g, const int32_t *tokens, int n, const int32_t *sent, int ns,
                          const int32_t *turn, int nt, double *ps, double *pt) {
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g->rpool, NULL, &s), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, tokens, n), RILL_OK);
    const float *l = NULL;
    ck_assert_int_eq(rill_session_logits(s, &l), RILL_OK);
    double mx = l[0], z = 0;
    for (int i = 1; i < g->V; i++) {
        mx = l[i] > mx ? l[i] : mx;
    }
    for (int i = 0; i < g->V; i++) {
        z += exp(l[i] - mx);
    }
    *ps = *pt = 0;
    for (int i = 0; i < ns; i++) {
        *ps += exp(l[sent[i]] - mx) / z;
    }
    for (int i = 0; i < nt; i++) {
        *pt += exp(l[turn[i]] - mx) / z;
    }
    rill_session_destroy(&s);
}

static void idle(rig_t *g) {
    ck_assert_int_eq(rill_sched_wait_idle(g->sch, 60 * SEC), RILL_OK);
}

/* The mass of the session's last position equals the softmax masses of a direct computation on
 * the same tokens, after token ingest (in several steps: only the end counts), text ingest and
 * a replace; updates, version and position say which position it is. */
START_TEST(watch_matches_direct_masses) {
    rig_t g;
    rig_open(&g);
    int32_t sent[3] = { 5, 17, 101 }, turn[2] = { 7, 250 };
    rill_sched_end_watch_t *w = NULL;
    ck_assert_int_eq(rill_sched_end_watch_new(sent, 3, turn, 2, &w), RILL_OK);
    rill_sched_end_mass_t m;
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m), RILL_OK);
    ck_assert_int_eq(m.updates, 0);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    ck_assert_ptr_null(sp.end_watch);
    sp.end_watch = w;
    rill_sched_sid_t sid = 0, other = 0;
    ck_assert_int_eq(rill_sched_session_create(g.sch, &sp, &sid), RILL_OK);
    /* a session without a watch next to it: its steps never touch the watch */
    ck_assert_int_eq(rill_sched_session_create(g.sch, NULL, &other), RILL_OK);
    int32_t toks[100];
    test_rand_tokens(test_rng(), toks, 100, g.V);
    ck_assert_int_eq(rill_sched_ingest(g.sch, other, toks, 40), RILL_OK);
    idle(&g);
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m), RILL_OK);
    ck_assert_int_eq(m.updates, 0);
    /* 80 tokens: more than one step (step_tokens 32); the watch shows the end */
    ck_assert_int_eq(rill_sched_ingest(g.sch, sid, toks, 80), RILL_OK);
    idle(&g);
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m), RILL_OK);
    ck_assert_int_eq(m.updates, 1);
    ck_assert_int_eq(m.position, 80);
    rill_sched_session_info_t info;
    ck_assert_int_eq(rill_sched_session_info(g.sch, sid, &info), RILL_OK);
    ck_assert_int_eq(m.version, info.version);
    ck_assert_int_gt(m.at_ns, 0);
    double ps, pt;
    direct_masses(&g, toks, 80, sent, 3, turn, 2, &ps, &pt);
    ck_assert_double_eq_tol(m.p_sentence, ps, 1e-5 + 1e-4 * ps);
    ck_assert_double_eq_tol(m.p_turn, pt, 1e-5 + 1e-4 * pt);
    ck_assert(ps > 0 && pt > 0);
    /* text, then a replace that changes its end */
    int64_t v1 = 0, v2 = 0;
    ck_assert_int_eq(rill_sched_ingest_text(g.sch, sid, " hello there", 12, true, &v1), RILL_OK);
    idle(&g);
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m), RILL_OK);
    ck_assert_int_eq(m.updates, 2);
    ck_assert_int_eq(m.version, v1);
    int32_t all[160];
    int64_t n_all = rill_sched_session_tokens(g.sch, sid, all, 160);
    ck_assert_int_gt(n_all, 80);
    ck_assert_int_eq(m.position, n_all);
    direct_masses(&g, all, (int)n_all, sent, 3, turn, 2, &ps, &pt);
    ck_assert_double_eq_tol(m.p_sentence, ps, 1e-5 + 1e-4 * ps);
    ck_assert_double_eq_tol(m.p_turn, pt, 1e-5 + 1e-4 * pt);
    ck_assert_int_eq(rill_sched_ingest_replace(g.sch, sid, v1, " hello world again", 18, &v2),
                     RILL_OK);
    ck_assert_int_eq(rill_sched_ingest_text(g.sch, sid, "", 0, true, &v2), RILL_OK);
    idle(&g);
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m), RILL_OK);
    ck_assert_int_ge(m.updates, 3); /* the replace and the flush may be evaluated apart */
    ck_assert_int_eq(m.version, v2);
    n_all = rill_sched_session_tokens(g.sch, sid, all, 160);
    ck_assert_int_eq(m.position, n_all);
    direct_masses(&g, all, (int)n_all, sent, 3, turn, 2, &ps, &pt);
    ck_assert_double_eq_tol(m.p_sentence, ps, 1e-5 + 1e-4 * ps);
    ck_assert_double_eq_tol(m.p_turn, pt, 1e-5 + 1e-4 * pt);
    ck_assert_int_eq(rill_sched_session_close(g.sch, other), RILL_OK);
    ck_assert_int_eq(rill_sched_session_close(g.sch, sid), RILL_OK);
    rill_sched_end_mass_t after;
    ck_assert_int_eq(rill_sched_end_watch_read(w, &after), RILL_OK);
    ck_assert_int_eq(after.updates, m.updates);
    rill_sched_end_watch_destroy(&w);
    ck_assert_ptr_null(w);
    rill_sched_end_watch_destroy(&w);
    rig_close(&g);
}
END_TEST

/* A speculation and a question on a watched session's forks leave the watch alone. */
START_TEST(watch_ignores_forks) {
    rig_t g;
    rig_open(&g);
    int32_t turn[1] = { 3 };
    rill_sched_end_watch_t *w = NULL;
    ck_assert_int_eq(rill_sched_end_watch_new(NULL, 0, turn, 1, &w), RILL_OK);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.end_watch = w;
    rill_sched_sid_t sid = 0;
    ck_assert_int_eq(rill_sched_session_create(g.sch, &sp, &sid), RILL_OK);
    int32_t toks[40];
    test_rand_tokens(test_rng(), toks, 40, g.V);
    ck_assert_int_eq(rill_sched_ingest(g.sch, sid, toks, 30), RILL_OK);
    idle(&g);
    rill_sched_end_mass_t m0, m1;
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m0), RILL_OK);
    ck_assert_int_eq(m0.updates, 1);
    ck_assert_float_eq(m0.p_sentence, 0);
    rill_sched_ask_t q = { .question = toks + 30, .n_question = 5, .n_max = 4 };
    rill_sched_rid_t rid = 0, spec = 0;
    ck_assert_int_eq(rill_sched_ask(g.sch, sid, &q, &rid), RILL_OK);
    ck_assert_int_eq(rill_sched_spec_start(g.sch, sid, toks + 35, 5, &q, &spec), RILL_OK);
    idle(&g);
    ck_assert_int_eq(rill_sched_end_watch_read(w, &m1), RILL_OK);
    ck_assert_int_eq(m1.updates, 1);
    ck_assert_int_eq(m1.position, m0.position);
    ck_assert_int_eq(rill_sched_cancel(g.sch, spec), RILL_OK);
    rig_close(&g); /* the scheduler closes the session before the watch goes */
    rill_sched_end_watch_destroy(&w);
}
END_TEST

START_TEST(bad_watches_are_refused) {
    rill_sched_end_watch_t *w = NULL, *keep = (rill_sched_end_watch_t *)&w;
    int32_t ok[2] = { 1, 2 }, neg[2] = { 1, -2 }, dup[3] = { 4, 5, 4 };
    static int32_t big[RILL_SCHED_END_TOKENS + 1];
    for (int i = 0; i <= RILL_SCHED_END_TOKENS; i++) {
        big[i] = i;
    }
    w = keep;
    ck_assert_int_eq(rill_sched_end_watch_new(ok, 2, ok, 2, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(NULL, 0, NULL, 0, &w), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(NULL, 2, ok, 2, &w), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(ok, 2, NULL, 1, &w), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(ok, -1, ok, 2, &w), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(neg, 2, ok, 2, &w), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(ok, 2, dup, 3, &w), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_end_watch_new(big, RILL_SCHED_END_TOKENS + 1, ok, 2, &w),
                     RILL_EINVAL);
    ck_assert_ptr_eq(w, keep);
    /* the same id in both sets is allowed (it counts in each); the largest set is allowed */
    w = NULL;
    ck_assert_int_eq(rill_sched_end_watch_new(big, RILL_SCHED_END_TOKENS, ok, 2, &w), RILL_OK);
    rill_sched_end_watch_destroy(&w);
    ck_assert_int_eq(rill_sched_end_watch_read(NULL, NULL), RILL_EINVAL);
    /* allocation failures: each of the two allocations */
    for (int k = 1; k <= 2; k++) {
        w = keep;
        rill_mem_fail_nth(k);
        ck_assert_int_eq(rill_sched_end_watch_new(ok, 2, NULL, 0, &w), RILL_ENOMEM);
        ck_assert_ptr_eq(w, keep);
    }
    rill_mem_fail_nth(0);
    /* an id beyond the model's vocabulary: the session is refused, nothing is left */
    rig_t g;
    rig_open(&g);
    int32_t far[2] = { 1, g.V };
    w = NULL;
    ck_assert_int_eq(rill_sched_end_watch_new(far, 2, NULL, 0, &w), RILL_OK);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.end_watch = w;
    rill_sched_sid_t sid = 0;
    ck_assert_int_eq(rill_sched_session_create(g.sch, &sp, &sid), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "vocabulary"));
    ck_assert_int_eq(sid, 0);
    rill_sched_stats_t st;
    rill_sched_stats(g.sch, &st);
    ck_assert_int_eq(st.n_sessions, 0);
    rill_sched_end_watch_destroy(&w);
    far[1] = g.V - 1; /* the last id is fine */
    ck_assert_int_eq(rill_sched_end_watch_new(far, 2, NULL, 0, &w), RILL_OK);
    sp.end_watch = w;
    ck_assert_int_eq(rill_sched_session_create(g.sch, &sp, &sid), RILL_OK);
    rig_close(&g);
    rill_sched_end_watch_destroy(&w);
}
END_TEST

int main(void) {
    Suite *su = suite_create("endpoint");
    TCase *tc = tcase_create("predictor");
    tcase_add_test(tc, prob_is_the_logistic_of_the_linear_score);
    tcase_add_test(tc, bad_parameters_are_refused);
    tcase_add_test(tc, driver_starts_commits_and_cancels);
    tcase_add_test(tc, bad_steps_change_nothing);
    tcase_add_test(tc, features_follow_the_recognizer_and_the_mass);
    tcase_add_test(tc, driver_allocation_failure);
    suite_add_tcase(su, tc);
    if (test_have_models(QWEN, NULL)) {
        TCase *tw = tcase_create("watch");
        tcase_set_timeout(tw, 300);
        tcase_add_test(tw, watch_matches_direct_masses);
        tcase_add_test(tw, watch_ignores_forks);
        tcase_add_test(tw, bad_watches_are_refused);
        suite_add_tcase(su, tw);
    } else {
        fprintf(stderr, "test_endpoint: %s missing: the watch tests are skipped\n", QWEN);
    }
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
