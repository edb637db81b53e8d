/*
 * rill_endpoint.h - endpoint anticipation: predicting the end of a speaker's turn so that the
 * reply can start on a fork before the end is certain (issue 17 item 4, DESIGN.md sections 5
 * and 7).
 *
 * Two pieces:
 *   the predictor  P(the current pause ends the turn) = 1 / (1 + exp(-(bias + w . x))), a
 *                  logistic regression over the features x below;
 *   the driver     a step-driven state machine a daemon (or a benchmark) calls with what it
 *                  observes - the recognizer's updates, the pause so far, the consuming
 *                  session's end-of-turn mass - and which answers with what to do with the
 *                  speculative reply (rill_sched_spec_start / _commit / rill_sched_cancel).
 * The driver calls nothing itself: its caller owns the scheduler, the session and the
 * speculation, so the same driver serves rilld and bench/bench_endpoint.c.
 *
 * Features (rill_endpoint_feature_t), computed by the driver from its inputs:
 *   PAUSE           the pause so far, seconds (rill_vad_pause_ms / 1000)
 *   LOG_P_TURN      ln(max(p_turn, 1e-6)): the consuming language model's probability of its
 *                   end-of-turn token at its last position (rill_sched_end_mass_t.p_turn)
 *   LOG_P_SENTENCE  ln(max(p_sentence, 1e-6)): its probability of sentence-final punctuation
 *   TENTATIVE_EMPTY 1 when the recognizer's tentative tail is empty, else 0
 *   STABLE_STEPS    recognizer steps since its text last changed (as under SPEC below), at
 *                   most 5
 *   SINCE_COMMIT    seconds since the recognizer last committed words, at most 5
 *   ENDS_SENTENCE   1 when the transcript (committed, then tentative) ends in . ? or !
 * The default coefficients were fitted by tools/fit_endpoint.py on the dev split of the turn
 * corpus (tools/make_turns.py) with the features of the real chain (bench/bench_endpoint.c:
 * whisper-tiny.en streaming into SmolLM2-135M-Instruct); docs/benchmarks.md, "Endpoint
 * anticipation", gives the fit and what it saves.
 *
 * The driver's states and actions (rill_endpoint_step):
 *   LISTEN  speech, or a pause without speculation. In a pause of at least min_pause_ms whose
 *           probability reaches threshold: START (start the reply on a fork, the transcript so
 *           far as the guess) -> SPEC. A pause reaching confirm_ms: END (the end is confirmed
 *           with nothing speculated: run the reply as a plain turn) -> DONE.
 *   SPEC    a speculation is open. Speech resumes (pause 0): CANCEL (roll it back: it was not
 *           the end) -> LISTEN. The transcript changes (a recognizer step whose committed
 *           words followed by its tentative tail differ from the previous tail: new or
 *           different words; a commit of the tail as it was is no change): CANCEL (the guess
 *           is stale) -> LISTEN, and a later step may START again on the new text. A pause reaching
 * confirm_ms: COMMIT (commit with the real input) -> DONE. DONE    the turn ended; nothing until
 * speech resumes (-> LISTEN, action NONE). So there is at most one speculation open at a time, a
 * START is always followed by exactly one COMMIT or CANCEL, and every confirmed end gives exactly
 * one COMMIT or END. confirm_ms is the fixed silence endpoint the speculation is measured against
 * (700 ms by default): the driver never ends a turn earlier than that, it only moves the reply's
 * compute earlier.
 *
 * Thread safety: parameters and features are plain values; a rill_endpoint_t is used by one
 * thread at a time. Nothing here allocates after rill_endpoint_new.
 */
#ifndef RILL_ENDPOINT_H
#define RILL_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_scheduler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rill_endpoint_feature {
    RILL_ENDPOINT_PAUSE = 0,
    RILL_ENDPOINT_LOG_P_TURN = 1,
    RILL_ENDPOINT_LOG_P_SENTENCE = 2,
    RILL_ENDPOINT_TENTATIVE_EMPTY = 3,
    RILL_ENDPOINT_STABLE_STEPS = 4,
    RILL_ENDPOINT_SINCE_COMMIT = 5,
    RILL_ENDPOINT_ENDS_SENTENCE = 6,
    RILL_ENDPOINT_N_FEATURES = 7
} rill_endpoint_feature_t;

/* Name of a feature ("pause", "log_p_turn", "log_p_sentence", "tentative_empty",
 * "stable_steps", "since_commit", "ends_sentence"); NULL out of range. */
const char *rill_endpoint_feature_name(rill_endpoint_feature_t f);

typedef struct rill_endpoint_features {
    float x[RILL_ENDPOINT_N_FEATURES]; /* indexed by rill_endpoint_feature_t */
} rill_endpoint_features_t;

typedef struct rill_endpoint_params {
    float threshold;      /* START when the probability is >= this, (0, 1]; default 0.5 */
    int32_t confirm_ms;   /* the silence that confirms an end, 100..10000 ms; default 700 */
    int32_t min_pause_ms; /* no START in a shorter pause, 0..confirm_ms ms; default 90 (three
                             30 ms detector frames: shorter silences are gaps between words) */
    float bias;           /* the model (see the top); finite */
    float weights[RILL_ENDPOINT_N_FEATURES]; /* finite */
} rill_endpoint_params_t;

/* Defaults as documented per field, with the fitted coefficients. */
rill_endpoint_params_t rill_endpoint_default_params(void);

/* RILL_OK when p is usable; RILL_EINVAL (with a detail in rill_last_error naming the field)
 * for NULL, a field out of its range, or a NaN or infinite coefficient. */
rill_err_t rill_endpoint_params_check(const rill_endpoint_params_t *p);

/* The predictor: 1 / (1 + exp(-(bias + weights . f->x))) into *out, in [0, 1]. Errors:
 * RILL_EINVAL (NULL, parameters rill_endpoint_params_check refuses, a non-finite feature);
 * *out untouched. Pure; any thread. */
rill_err_t rill_endpoint_prob(const rill_endpoint_params_t *p, const rill_endpoint_features_t *f,
                              float *out);

typedef enum rill_endpoint_action {
    RILL_ENDPOINT_NONE = 0,   /* nothing to do */
    RILL_ENDPOINT_START = 1,  /* start the reply on a fork (rill_sched_spec_start) */
    RILL_ENDPOINT_COMMIT = 2, /* the end is confirmed: rill_sched_spec_commit(real input) */
    RILL_ENDPOINT_CANCEL = 3, /* it was not the end, or the guess went stale: roll the
                                 speculation back (rill_sched_cancel) */
    RILL_ENDPOINT_END = 4     /* the end is confirmed and nothing was speculated: run the reply
                                 now (rill_sched_turn) */
} rill_endpoint_action_t;

/* Name of an action ("none", "start", "commit", "cancel", "end"); NULL out of range. */
const char *rill_endpoint_action_name(rill_endpoint_action_t a);

typedef enum rill_endpoint_state {
    RILL_ENDPOINT_LISTEN = 0,
    RILL_ENDPOINT_SPEC = 1,
    RILL_ENDPOINT_DONE = 2
} rill_endpoint_state_t;

typedef struct rill_endpoint_decision {
    rill_endpoint_action_t action;
    rill_endpoint_state_t state;       /* after the step */
    float prob;                        /* the predictor's probability at this step (0 in speech) */
    rill_endpoint_features_t features; /* what it was computed from */
} rill_endpoint_decision_t;

/* Counters since creation. */
typedef struct rill_endpoint_stats {
    int64_t steps;
    int64_t starts;         /* START actions */
    int64_t commits;        /* COMMIT actions */
    int64_t cancels_speech; /* CANCEL because speech resumed */
    int64_t cancels_stale;  /* CANCEL because the transcript changed */
    int64_t ends;           /* END actions (confirmed ends without speculation) */
    int64_t observed;       /* rill_endpoint_observe calls */
} rill_endpoint_stats_t;

typedef struct rill_endpoint rill_endpoint_t;

/* Creates a driver in LISTEN with an empty transcript. params NULL: the defaults (copied).
 * Errors: RILL_EINVAL (NULL out, parameters rill_endpoint_params_check refuses), RILL_ENOMEM;
 * *out untouched. Caller owns *out; destroy with rill_endpoint_destroy(). */
rill_err_t rill_endpoint_new(const rill_endpoint_params_t *params, rill_endpoint_t **out);

/* Frees it and sets *ep = NULL. NULL-safe. */
void rill_endpoint_destroy(rill_endpoint_t **ep);

/* One recognizer step at time now_ms (the audio clock, ms; never decreasing): committed[0,
 * committed_len) is the text it committed (rill_asr_update_t.committed, "" when none),
 * tentative[0, tentative_len) the whole tentative tail now. Updates the stability features; a
 * change of the text while a speculation is open makes the next rill_endpoint_step CANCEL.
 * Errors: RILL_EINVAL (NULL ep, NULL text with a length > 0, now_ms before an earlier call's);
 * nothing changes. Does not allocate. */
rill_err_t rill_endpoint_observe(rill_endpoint_t *ep, int64_t now_ms, const char *committed,
                                 size_t committed_len, const char *tentative, size_t tentative_len);

/* One decision at time now_ms (the audio clock, ms; never decreasing) with the pause so far
 * (pause_ms >= 0; 0: speech) and the consuming session's end-of-turn mass (mass NULL, or one
 * with updates == 0: both probabilities taken as 0). Fills *out (see the top for the states
 * and actions). Errors: RILL_EINVAL (NULL ep or out, pause_ms < 0, now_ms before an earlier
 * call's, a mass probability outside [0, 1] or NaN); the state is unchanged. Does not
 * allocate. */
rill_err_t rill_endpoint_step(rill_endpoint_t *ep, int64_t now_ms, int64_t pause_ms,
                              const rill_sched_end_mass_t *mass, rill_endpoint_decision_t *out);

/* The state now (LISTEN for NULL) and the counters (zeros for NULL). */
rill_endpoint_state_t rill_endpoint_state(const rill_endpoint_t *ep);
rill_endpoint_stats_t rill_endpoint_stats(const rill_endpoint_t *ep);

#ifdef __cplusplus
}
#endif
#endif /* RILL_ENDPOINT_H */
