/*
 * rill_sampler.h - choosing the next token from logits.
 *
 * Stages, in llama.cpp's default order (common_sampler: penalties -> top-k -> top-p -> min-p ->
 * temperature -> dist):
 *   1. repetition penalty over the last `penalty_last_n` accepted tokens: each distinct token
 *      seen there has its logit divided by `penalty_repeat` when positive and multiplied by it
 *      when negative or zero (llama.cpp's semantics; a token counts once however often it was
 *      seen);
 *   2. top-k: keep the k largest logits;
 *   3. top-p (nucleus): sort by probability, keep the smallest prefix whose probability sum
 *      reaches p (the token that crosses p is kept);
 *   4. min-p: keep tokens whose probability is at least min_p times the largest one;
 *   5. temperature: divide the logits by temp;
 *   6. draw from the softmax of what is left with the sampler's own PRNG.
 * With temp <= 0 the sampler is greedy: the arg-max after the penalties (the lowest token id on
 * ties), and the PRNG is not used. Ties elsewhere are also broken by token id, so a given seed
 * and logits give the same token on every platform (the PRNG is core's xoshiro256** seeded
 * through splitmix64, rill_rand.h; probabilities are accumulated in double).
 *
 * Only the tokens passed to rill_sampler_accept() enter the penalty window: accept the prompt's
 * tokens and each sampled token.
 *
 * Memory: all buffers are sized for n_vocab at creation; sampling allocates nothing.
 * Thread safety: one thread at a time per sampler (it holds the PRNG state and the history).
 */
#ifndef RILL_SAMPLER_H
#define RILL_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_sampler rill_sampler_t;

typedef struct rill_sampler_params {
    float temp;             /* temperature; <= 0: greedy. Default 0.8 */
    int32_t top_k;          /* <= 0 or >= n_vocab: off. Default 40 */
    float top_p;            /* >= 1: off. Default 0.95 */
    float min_p;            /* <= 0: off. Default 0.05 */
    float penalty_repeat;   /* 1: off; must be > 0. Default 1.0 (llama.cpp's default) */
    int32_t penalty_last_n; /* tokens in the penalty window; 0: off. Default 64 */
    uint64_t seed;          /* PRNG seed. Default 0x5eed */
} rill_sampler_params_t;

/* llama.cpp's defaults (see each field). */
rill_sampler_params_t rill_sampler_default_params(void);

/* True when rill_sampler_new() accepts params: no NaN temp, top_p or min_p, penalty_repeat
 * finite and > 0, penalty_last_n >= 0 (false for NULL). Lets a caller that creates the sampler
 * later (a scheduler's engine thread) refuse bad parameters at once. Pure; any thread. */
bool rill_sampler_params_valid(const rill_sampler_params_t *params);

/* Creates a sampler for logits of n_vocab entries. Errors: RILL_EINVAL (n_vocab < 1, parameters
 * that rill_sampler_params_valid() refuses, out NULL), RILL_ENOMEM. Caller owns *out (NULL on
 * error); destroy with rill_sampler_destroy(). */
rill_err_t rill_sampler_new(int32_t n_vocab, rill_sampler_params_t params, rill_sampler_t **out);

/* Frees and sets *sp = NULL. NULL-safe. */
void rill_sampler_destroy(rill_sampler_t **sp);

/* The greedy pick: the lowest index of the largest of logits[0, n) (ties to the lowest id, as
 * llama.cpp's greedy sampler; a NaN never beats a number after it). n < 1: 0. Pure; any thread. */
int32_t rill_sampler_argmax(const float *logits, int32_t n);

/* Picks a token from logits (n_vocab floats, read only) and stores it in *token. Does not accept
 * it (see rill_sampler_accept). NaN logits are treated as -inf; when every logit is -inf or NaN
 * the result is token 0. Errors: RILL_EINVAL (NULL arguments). Never allocates. */
rill_err_t rill_sampler_sample(rill_sampler_t *s, const float *logits, int32_t *token);

/* The distribution the sampler would draw from for these logits, after all stages: probs gets
 * n_vocab entries summing to 1, zero for filtered tokens (greedy: 1 at the arg-max). For tests
 * and diagnostics; does not touch the PRNG. Errors: RILL_EINVAL. Never allocates. */
rill_err_t rill_sampler_probs(rill_sampler_t *s, const float *logits, float *probs);

/* Appends a token to the penalty window (the oldest one leaves when it is full). Tokens outside
 * [0, n_vocab) are ignored. */
void rill_sampler_accept(rill_sampler_t *s, int32_t token);

/* Empties the penalty window and restarts the PRNG from `seed`. */
void rill_sampler_reset(rill_sampler_t *s, uint64_t seed);

/* The parameters the sampler was created with. */
rill_sampler_params_t rill_sampler_params(const rill_sampler_t *s);

#ifdef __cplusplus
}
#endif
#endif /* RILL_SAMPLER_H */
