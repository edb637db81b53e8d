/*
 * audio_internal.h - what the audio files of ingest/ share (rill_audio.h is the manual): the
 * one cleaning-and-mixing step every source applies before resampling.
 */
#ifndef RILL_AUDIO_INTERNAL_H
#define RILL_AUDIO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rill_audio.h"

/* Frames the resampler mixes per block (its scratch size); also the read size of the sources. */
#define RILL__AUDIO_BLOCK 1024

/* Mixes n interleaved frames of ch channels into mono[0..n): each sample cleaned first (NaN and
 * inf to 0, counted in *cleaned; beyond [-1, 1] clamped, counted in *clipped), then the
 * channels averaged. The s16 form scales by 1/32768 (never out of range). */
void rill__audio_mix(const float *in, size_t n, int32_t ch, float *mono, int64_t *cleaned,
                     int64_t *clipped);
void rill__audio_mix_s16(const int16_t *in, size_t n, int32_t ch, float *mono);

/* ceil(frames * RILL_AUDIO_RATE / rate) without overflow for any frames < 2^47. */
int64_t rill__audio_out_frames(int64_t frames, int32_t rate);

/* Checks rate and channels against the module's limits; RILL_ERANGE with a detail naming
 * `what` and the value. */
rill_err_t rill__audio_check_format(const char *what, int64_t rate, int64_t channels);

/* Moves up to n samples of a source's pending block pend[*pos, len) to out, advancing *pos;
 * returns how many (0 when the block is used up). */
size_t rill__audio_take(float *out, size_t n, const float *pend, size_t *pos, size_t len);

#endif /* RILL_AUDIO_INTERNAL_H */
