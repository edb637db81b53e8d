/*
 * rill_rand.h - the project's one pseudo-random generator: xoshiro256** (Blackman and Vigna),
 * seeded through splitmix64, as its authors recommend.
 *
 * Why one, and why this one: seeded streams are part of rill's observable behaviour (the
 * synthetic market's ticks for a seed, the sampler's draws for a seed, the benchmarks' inputs),
 * so every part must draw from the same well-defined sequence on every machine, compiler and C
 * library. xoshiro256** is integer-only, 256 bits of state, fast, and passes the usual batteries;
 * splitmix64 turns any 64-bit seed (0 included) into a well-mixed, never all-zero state.
 * Not for cryptography.
 *
 * The sequences are fixed: rill_rand_seed(seed) sets the state to four consecutive
 * rill_rand_splitmix64 outputs from `seed`; rill_rand_next is the reference xoshiro256** step
 * (its outputs for the state {1, 2, 3, 4} and splitmix64's for a fixed seed are checked in
 * tests/test_core.c against published reference values). Changing any of this changes every
 * seeded output of rill, which tests pin.
 *
 * A value type (STYLE.md rule 3): the state is 32 bytes in the struct, every function is inline
 * (the sampler draws once per token), nothing allocates, nothing fails, and there is no deinit.
 *
 * Thread safety: one thread at a time per rill_rand_t (a draw writes the state). Give each
 * thread its own generator.
 */
#ifndef RILL_RAND_H
#define RILL_RAND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* xoshiro256** state. Seed with rill_rand_seed(); the all-zero state is the one state it must
 * never hold (it would stay zero), which seeding through splitmix64 cannot produce. */
typedef struct rill_rand {
    uint64_t s[4];
} rill_rand_t;

/* One splitmix64 step (Vigna): advances *state by the golden-ratio increment 0x9e3779b97f4a7c15
 * and returns that value mixed (two xor-shift-multiply rounds). Any starting value is valid;
 * 2^64 steps visit every value once. Used on its own where a cheap seeded sequence of 64-bit
 * values is enough (e.g. benchmark token ids), and to seed rill_rand_t. */
static inline uint64_t rill_rand_splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Sets r to the state for `seed` (any value, 0 included): the first four
 * rill_rand_splitmix64 outputs starting from `seed`, in order s[0]..s[3]. */
static inline void rill_rand_seed(rill_rand_t *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        r->s[i] = rill_rand_splitmix64(&x);
    }
}

static inline uint64_t rill__rand_rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* The next 64-bit output of xoshiro256** (uniform over [0, 2^64)), advancing r by one step.
 * The high bits are the best ones: take them (>> 11, as rill_rand_double does) rather than
 * the low ones when fewer are needed. */
static inline uint64_t rill_rand_next(rill_rand_t *r) {
    uint64_t *s = r->s;
    uint64_t result = rill__rand_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rill__rand_rotl(s[3], 45);
    return result;
}

/* A uniform double in [0, 1): the top 53 bits of one rill_rand_next output times 2^-53, so
 * every value is a multiple of 2^-53 and 1 is never returned. One step of r. (2^-53 is written
 * as 1 / 2^53, exact, because C++ before C++17 has no hexadecimal float literals.) */
static inline double rill_rand_double(rill_rand_t *r) {
    return (double)(rill_rand_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

#ifdef __cplusplus
}
#endif
#endif /* RILL_RAND_H */
