/*
 * rill_asr.h - a streaming speech recognizer: Whisper (forward/rill_whisper.h) re-decoding a
 * rolling audio window as audio arrives, with local agreement (rill_transcript.h) deciding what
 * is committed (issue 17 item 3, DESIGN.md section 7).
 *
 * The object is step-driven, so that the engine thread can later run it as one work class among
 * the others: the caller feeds audio (rill_asr_feed), asks whether enough new audio has come
 * (rill_asr_ready: step_ms since the last decode), and runs a step (rill_asr_step), which is one
 * re-decode of the whole window. At the end of the stream rill_asr_finish() decodes what is left
 * and commits the tentative tail.
 *
 * One step:
 *   1. the window's log-mel features (rill_mel: the window's samples, zero-padded to 30 s in the
 *      feature domain as faster-whisper pads them) are encoded (rill_whisper_encode);
 *   2. greedy decode with the previous-text prompt: <|startofprev|>, the tokens of " " + the
 *      committed text that lies before the window (rill_transcript_prompt_before() as it was at
 *      the last trim; its last n_text_ctx / 2 - 1 tokens, as faster-whisper cuts it), then the
 *      sot sequence of rill_whisper_prompt(), without <|notimestamps|> when timestamps is on;
 *      the suppression rules of rill_whisper_greedy() and, with timestamps, Whisper's timestamp
 *      rules (rill_whisper_pick_timestamp(), the first timestamp at most 1 s in); at most
 *      max_tokens tokens. A prompted decode that runs to max_tokens is taken for a loop on its
 *      prompt (Whisper repeating the previous text; max_tokens is above any speech rate) and the
 *      window is decoded again without the prompt (stats.prompt_resets), as faster-whisper resets
 *      its prompt when it falls back. Before the first trim there is no prompt. Committed
 *      words whose audio is still in the window are never in the prompt: given them, Whisper
 *      continues after them instead of transcribing the window from its start, and the
 *      hypothesis then lacks the words local agreement needs to line up (seen on LibriVox 0870:
 *      "then" was lost after "had" was committed);
 *   3. when the no-speech probability (softmax at <|nospeech|> of the logits after sot) exceeds
 *      no_speech_threshold and the decode's mean log-probability is below logprob_threshold
 *      (faster-whisper's rule), the window is taken as no speech (an empty hypothesis);
 *   4. the hypothesis goes to rill_transcript_update(), which commits what two consecutive
 *      hypotheses agree on. With timestamps it is the window's segments as faster-whisper splits
 *      them (rill_whisper_segments(): start and end from the timestamp tokens; a segment
 *      without a closing timestamp, and the unfinished tail after the last one, have an unknown
 *      end); without, one segment of unknown end. When the update reports trim_ms (the end of
 *      the last segment whose words are all committed, whisper_streaming's segment trimming; or
 *      the forced trim once the window passes max_window_ms), that audio is dropped from the
 *      front of the window (rill_mel_drop) and the transcript told (rill_transcript_trim).
 * Silence is not decoded. An energy detector (rill_vad, ingest/) runs over all audio fed. A
 * window in which no frame was speech is dropped unheard (all but its last keep_ms); a window
 * whose last hypothesis left nothing tentative and which got no speech since is not decoded
 * again, and its audio up to the end of the last speech is dropped (the words in it are
 * committed). So a pause costs no decode once its words are settled, and hours of silence cost
 * only the detector.
 *
 * Memory: fixed at creation (the mel buffer for window_ms of audio, the encoded window, a decoder
 * KV cache of n_text_ctx positions, token and text buffers), plus the transcript, whose committed
 * text grows unless keep_committed is false: then the recognizer drops committed text after each
 * step (rill_transcript_drop_committed) and the caller keeps what the updates hand it. With
 * keep_committed false, nothing the recognizer holds grows with the stream's length (tested
 * over an hour of audio, RSS and live bytes sampled: tests/test_asr.c, ctest test_asr_hour).
 * Counted under RILL_MEM_SCHEDULER (this object, the transcript), RILL_MEM_MODEL and
 * RILL_MEM_KERNELS (what rill_whisper allocates for the window and cache).
 *
 * Thread safety: one thread at a time, the thread that owns the rill_whisper_t's backend.
 */
#ifndef RILL_ASR_H
#define RILL_ASR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_audio.h"
#include "rill_err.h"
#include "rill_transcript.h"
#include "rill_whisper.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_asr rill_asr_t;

typedef struct rill_asr_params {
    const char *language;      /* as rill_whisper_prompt() (NULL: English); copied */
    int32_t step_ms;           /* new audio between decodes for rill_asr_ready(), 100..10000;
                                  default 1000 */
    int32_t window_ms;         /* most audio the window holds, ms, 2000..30000 (Whisper's 30 s
                                  window); default 30000 */
    int32_t max_tokens;        /* most tokens one decode generates; 0 (default): 16 + 8 per second
                                  of window, at most what the context leaves after the prompt */
    int32_t keep_ms;           /* audio kept at the end of a silent window that is dropped, ms,
                                  0..2000; default 300 (a word's onset the detector was late for) */
    float no_speech_threshold; /* default 0.6 (faster-whisper's) */
    float logprob_threshold;   /* default -1.0 (faster-whisper's) */
    bool skip_silence;         /* use the detector (default true); false: decode every step */
    bool keep_committed;       /* keep the whole committed text (default true); false: see the
                                  top (memory) */
    bool timestamps;           /* decode with timestamps and trim at segment ends (default
                                  false: one segment of unknown end per decode, trims at
                                  max_window_ms and in silence only; true loses the last words
                                  of a Bible verse, see docs/architecture.md) */
    rill_transcript_params_t transcript; /* max_window_ms must be <= window_ms - step_ms */
    rill_vad_params_t vad;
} rill_asr_params_t;

/* Defaults as documented per field (transcript and vad: their modules' defaults). */
rill_asr_params_t rill_asr_default_params(void);

/* What one step or the finish changed. Pointers are borrowed until the next call on the
 * recognizer. */
typedef struct rill_asr_update {
    bool decoded;          /* a decode ran (false: skipped as silence, or nothing new) */
    const char *committed; /* the text this call committed, led by one space when something was
                              committed before ("" when none): append it to what came before */
    size_t committed_len;
    const char *tentative; /* the whole tentative tail now ("" when none) */
    size_t tentative_len;
    float no_speech_prob; /* of this decode (0 when none ran) */
    int64_t audio_ms;     /* audio fed so far, ms (the window's absolute end) */
} rill_asr_update_t;

/* Counters since creation. */
typedef struct rill_asr_stats {
    int64_t samples_fed;        /* 16 kHz samples */
    int64_t decodes;            /* window decodes (encode + greedy) */
    int64_t tokens;             /* tokens generated over all decodes */
    int64_t skipped_silence;    /* steps not decoded: no speech in the window */
    int64_t skipped_settled;    /* steps not decoded: no speech since a decode that settled all */
    int64_t no_speech;          /* decodes taken as no speech (step 3 above) */
    int64_t hit_limit;          /* decodes stopped by max_tokens (after a prompt reset: the
                                   prompt-less decode's) */
    int64_t prompt_resets;      /* decodes run again without the prompt because the prompted
                                   one ran to max_tokens (step 2 of the top) */
    int64_t samples_dropped;    /* audio dropped from the window's front */
    int64_t window_samples;     /* the window now */
    int64_t max_window_samples; /* the longest the window has been */
} rill_asr_stats_t;

/* Creates a recognizer over w (borrowed: it must outlive the recognizer; its backend is used
 * by every step); model is the whisper model w was made from (borrowed for the call: its mel
 * filterbank is copied). params NULL: the defaults. Allocates the window, the KV cache, the buffers
 * and the transcript. Errors: RILL_EINVAL (NULL w, model or out, a model that is not whisper or not
 * w's shape, a parameter out of range, transcript.max_window_ms above window_ms - step_ms),
 * RILL_ENOTFOUND (a language the model lacks), RILL_ENOMEM, and rill_mel_new()'s,
 * rill_whisper_window_new()'s and rill_whisper_kv_cache_new()'s errors; each with a detail in
 * rill_last_error(). On error nothing is left allocated. Caller owns *out; destroy with
 * rill_asr_destroy() before w. */
rill_err_t rill_asr_new(rill_whisper_t *w, const rill_model_t *model,
                        const rill_asr_params_t *params, rill_asr_t **out);

/* Frees it and sets *ap = NULL. NULL-safe. */
void rill_asr_destroy(rill_asr_t **ap);

/* Samples the window can take now (window_ms of audio less what it holds). */
int64_t rill_asr_room(const rill_asr_t *a);

/* Appends x[0, n) (16 kHz mono, as the sources of rill_audio.h give it) to the window and the
 * voice detector. Errors: RILL_EINVAL (NULL a, x NULL with n > 0, n < 0, a non-finite sample),
 * RILL_ERANGE (a sample rill_mel refuses), RILL_EFULL (n > rill_asr_room(): run a step first,
 * which trims the window once it passes transcript.max_window_ms), RILL_EBUSY (after finish).
 * On error nothing changes. Does not allocate; time O(n). */
rill_err_t rill_asr_feed(rill_asr_t *a, const float *x, int64_t n);

/* True when step_ms of audio has come since the last step (false for NULL). */
bool rill_asr_ready(const rill_asr_t *a);

/* One step (see the top): decodes the window when it holds audio not decoded yet and is not
 * skipped as silence, updates the transcript, drops audio it no longer needs. *out (optional)
 * gets the change. Without audio since the last step it does nothing (out->decoded false).
 * Errors: RILL_EINVAL (NULL a), RILL_EBUSY (after finish), RILL_ENOMEM, the tokenizer's, the
 * encoder's and the decoder's errors; on error the transcript is unchanged (the audio stays, so
 * the step can be run again). Blocks for the decode (tens of ms to seconds). Allocates only when
 * the transcript's buffers grow. */
rill_err_t rill_asr_step(rill_asr_t *a, rill_asr_update_t *out);

/* End of the stream: a last step over what was not decoded (if it holds speech), then
 * rill_transcript_finish(), which commits the tentative tail. Later feeds and steps are refused
 * with RILL_EBUSY. Errors: as rill_asr_step() (a failed finish may be retried). */
rill_err_t rill_asr_finish(rill_asr_t *a, rill_asr_update_t *out);

/* The transcript (borrowed; its committed text is all of it only with keep_committed). */
const rill_transcript_t *rill_asr_transcript(const rill_asr_t *a);

/* Counters (zeros for NULL). */
rill_asr_stats_t rill_asr_stats(const rill_asr_t *a);

#ifdef __cplusplus
}
#endif
#endif /* RILL_ASR_H */
