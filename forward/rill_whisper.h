/*
 * rill_whisper.h - OpenAI's Whisper (speech recognition) run on rill's backend: the conv stem
 * and encoder over a 30 s window of log-mel features, and the decoder with self-attention over
 * paged KV (rill_kv_cache_t, as the LLM forward pass keeps it) and cross-attention over an
 * encoded window.
 *
 * A rill_whisper_t binds a model of architecture "whisper" (rill_model.h: rill_model_whisper_*)
 * to a backend, prepares its weights and allocates every buffer a pass needs. Then:
 *   - rill_whisper_encode(mel) fills a rill_whisper_window_t: the encoder output and, for every
 *     decoder layer, the cross-attention K and V of that output, computed once per window and
 *     read by every decode step that attends to it;
 *   - rill_whisper_decode() runs one batch of decoder tokens, which may belong to several
 *     sequences (each with its own KV pages, positions and window), and returns the logits of the
 *     rows asked for: the building block for batched, streaming and speculative decoding;
 *   - rill_whisper_greedy() is the plain transcription of one window (prompt sot, language,
 *     transcribe, no_timestamps; token suppression; greedy until eot), with the no-speech
 *     probability; or, with timestamps, Whisper's timestamp rules and the window's segments
 *     (start, end, text) as faster-whisper splits them.
 *
 * The computation is CTranslate2's WhisperSpec (the oracle, tests/test_whisper.c): pre-norm
 * blocks, LayerNorm eps from the model, GELU (erf), conv1 (k 3, stride 1, pad 1) + GELU, conv2
 * (k 3, stride 2, pad 1) + GELU, sinusoidal encoder positions added once, learned decoder
 * positions, attention scaled by 1/sqrt(head_dim), decoder output projection tied to the token
 * embedding. Numerics: tolerance class relative to CTranslate2 (different summation orders);
 * with f32_weights (default) the weights are widened to f32 once, so every matmul is f32 x f32
 * as CTranslate2's compute_type "float32" computes; without it the mapped F16 weights are used
 * and activations are rounded to f16 per matmul (llama.cpp's F16 arithmetic), which costs
 * accuracy for half the weight memory. The tolerances measured are in tests/test_whisper.c and
 * docs/whisper.md.
 *
 * Memory, all allocated at creation (nothing per token or per encode), with Ta = n_audio_ctx,
 * d = n_audio_state = n_text_state, F_a / F_t the FFN widths, M = n_mels, T = max_batch,
 * L = max_logits, V = n_vocab, in floats of backend memory:
 *   encoder scratch  2 Ta M + 2 Ta d + 6 Ta d + max(Ta F_a, 6 Ta M, 3 Ta d)
 *                    (tiny.en 28.6 MiB, base 37.8 MiB)
 *   decoder scratch  T (6 d + F_t) + L (d + V)   (tiny.en with T = 448, L = 4: 7.7 MiB)
 *   greedy KV cache  2 n_text_layer n_text_ctx d (F32; tiny.en 5.3 MiB)
 * plus, with f32_weights, an f32 copy of every F16/BF16 matrix in host memory (4 bytes per
 * parameter: tiny.en 151 MB, base 290 MB; without it the weights stay in the file's mapping),
 * the tokenizer, and the backend's own scratch. A window holds Ta d (1 + 2 n_text_layer) floats
 * (tiny.en 19.8 MiB, base 38.1 MiB).
 *
 * Thread safety: a rill_whisper_t, its windows and its KV caches belong to one thread at a time
 * (the thread that owns the backend); the model may be shared.
 */
#ifndef RILL_WHISPER_H
#define RILL_WHISPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_backend.h"
#include "rill_err.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_whisper rill_whisper_t;
typedef struct rill_whisper_window rill_whisper_window_t;

typedef struct rill_whisper_params {
    int32_t max_batch;  /* decoder tokens per rill_whisper_decode(); default (0): the smaller of
                           the backend's max_batch and n_text_ctx */
    int32_t max_logits; /* logit rows per output matmul (more are done in several); default 4 */
    bool f32_weights;   /* widen F16/BF16 matrices to f32 at creation (default true; see the
                           top of this file) */
} rill_whisper_params_t;

rill_whisper_params_t rill_whisper_default_params(void);

/* Binds a whisper model to backend. Takes a reference to model (dropped by destroy); the
 * backend is borrowed and must outlive the rill_whisper_t. Builds the model's tokenizer (for
 * the transcript's text). Errors: RILL_EINVAL (NULL, max_batch or max_logits outside [1, the
 * backend's max_batch]), RILL_EUNSUPPORTED (not a whisper model; a matmul input wider than the
 * backend's max_n_in: 3 * n_audio_state and the FFN width must fit), RILL_ENOMEM, and the
 * tokenizer's errors. Each is also in rill_last_error(). On error nothing is left allocated.
 * Caller owns *out; destroy with rill_whisper_destroy(). */
rill_err_t rill_whisper_new(rill_model_t *model, rill_backend_t *backend,
                            const rill_whisper_params_t *params, rill_whisper_t **out);

/* Frees everything it allocated and drops its model reference; sets *wp = NULL. NULL-safe.
 * Windows and KV caches made for it must be destroyed first. */
void rill_whisper_destroy(rill_whisper_t **wp);

/* Borrowed views, valid for the rill_whisper_t's lifetime. */
const rill_whisper_hparams_t *rill_whisper_hparams(const rill_whisper_t *w);
const rill_tokenizer_t *rill_whisper_tokenizer(const rill_whisper_t *w);
rill_backend_t *rill_whisper_backend(rill_whisper_t *w);

/* Mel frames one window takes: 2 * n_audio_ctx (3000 = 30 s). */
int32_t rill_whisper_n_frames(const rill_whisper_t *w);

/* ---- encoding ------------------------------------------------------------------------------- */

/* Allocates a window's storage (encoder output and every decoder layer's cross K/V) in w's
 * backend memory; it holds nothing until rill_whisper_encode(). Errors: RILL_EINVAL, RILL_ENOMEM.
 * Caller owns *out; destroy with rill_whisper_window_destroy() before w. */
rill_err_t rill_whisper_window_new(rill_whisper_t *w, rill_whisper_window_t **out);

void rill_whisper_window_destroy(rill_whisper_window_t **winp);

/* Encodes one window: mel_host is host memory of n_mels rows of n_frames values (channel-major,
 * as faster-whisper's FeatureExtractor returns them: row c is mel bin c over time), n_frames ==
 * rill_whisper_n_frames() (pad shorter audio's features with 0.0, as faster-whisper does, before
 * calling). Runs the conv stem, the encoder and the final LayerNorm, then every decoder layer's
 * cross-attention K and V, into win. Errors: RILL_EINVAL (NULL, a window of another
 * rill_whisper_t, wrong n_frames, a non-finite feature), and the backend's. On error win holds
 * no encoded window (decode refuses it until a successful encode). Blocks until done. */
rill_err_t rill_whisper_encode(rill_whisper_t *w, const float *mel_host, int32_t n_frames,
                               rill_whisper_window_t *win);

/* True when win holds an encoded window. */
bool rill_whisper_window_encoded(const rill_whisper_window_t *win);

/* Copies the encoder output (n_audio_ctx rows of n_audio_state floats, after the final
 * LayerNorm) to host[n_floats]. Errors: RILL_EINVAL (NULL, not encoded, n_floats not
 * n_audio_ctx * n_audio_state). */
rill_err_t rill_whisper_window_read(const rill_whisper_window_t *win, float *host,
                                    int64_t n_floats);

/* ---- decoding ------------------------------------------------------------------------------- */

/* A KV cache for the decoder's self-attention: n_text_layer pools of n_pages pages of page_size
 * positions, n_text_head heads of head_dim values (no RoPE: keys are stored as projected).
 * The rest as rill_kv_cache_new() (rill_forward.h), whose accessors and page copies work on it.
 * Caller owns *out; destroy with rill_kv_cache_destroy() before w. */
rill_err_t rill_whisper_kv_cache_new(rill_whisper_t *w, rill_dtype_t dtype, int32_t page_size,
                                     int32_t n_pages, rill_kv_cache_t **out);

/* Runs one batch of decoder tokens (rill_backend.h's batch: per token its sequence, position,
 * KV slot and visible KV count; positions index the learned position table, so pos <
 * n_text_ctx), tokens[i] the id of batch token i, windows[s] the encoded window sequence s
 * cross-attends to (batch->n_seq entries; sequences may share a window). Writes every token's
 * K/V into kv. For each of the n_out indices out_rows[j] (batch token indices, any order,
 * repeats allowed) that token's logits go to logits_host[j * n_vocab .. + n_vocab) (host,
 * caller-owned); n_out may be 0. Bits: a token's logits do not depend on the other sequences of
 * the batch, but, as the backend's matmul kernel does, on whether the batch has one token or
 * more, and on whether its row is projected alone or with others (rows go through the output
 * matmul max_logits at a time: a last group of one row takes the one-token kernel). Errors:
 * RILL_EINVAL (NULL, a cache or window of another rill_whisper_t, a window not encoded, a token
 * outside the vocabulary, a position >= n_text_ctx, an out_rows entry outside the batch, what
 * rill_backend_set_batch or an op rejects), RILL_ERANGE (n_tok > max_batch). On error the cache may
 * hold partial writes at the batch's slots only. Blocks until done. */
rill_err_t rill_whisper_decode(rill_whisper_t *w, rill_kv_cache_t *kv, const rill_batch_t *batch,
                               const int32_t *tokens, const rill_whisper_window_t *const *windows,
                               const int32_t *out_rows, int32_t n_out, float *logits_host);

/* ---- transcription -------------------------------------------------------------------------- */

/* The decoder prompt without timestamps, as faster-whisper builds it, into out[cap]: sot,
 * language, transcribe, no_timestamps for a multilingual model; sot, no_timestamps for an
 * English-only one (its sot sequence has no language or task token). language: a code of the
 * model's whisper.lang_codes ("en", "de", ...); NULL means "en" for a multilingual model; an
 * English-only one takes NULL or "en". Returns the count (4 or 2). Errors: RILL_EINVAL (NULL w or
 * out), RILL_ENOTFOUND (a language the model lacks; English-only models: any but "en"), RILL_EFULL
 * (cap too small). */
int64_t rill_whisper_prompt(const rill_whisper_t *w, const char *language, int32_t *out,
                            int32_t cap);

typedef struct rill_whisper_greedy_params {
    const char *language;   /* as rill_whisper_prompt(); default NULL */
    int32_t max_tokens;     /* most tokens generated (0, the default: until the prompt plus the
                               generated tokens fill n_text_ctx, as faster-whisper's max_length;
                               with timestamps, CTranslate2's decoding limit: n_text_ctx / 2) */
    bool timestamps;        /* decode with Whisper's timestamp tokens and split the result into
                               segments (see rill_whisper_greedy()); default false */
    int32_t max_initial_ms; /* with timestamps: the latest the first timestamp may be, ms (rounded
                               down to 20 ms); 0 (default): 1000, faster-whisper's
                               max_initial_timestamp; -1: no limit */
    int32_t window_ms;      /* with timestamps: audio in the window, ms (the rest of its 30 s is
                               padding): the end of a segment that has no closing timestamp and
                               the seek after one that has; 0 (default): 30000 */
} rill_whisper_greedy_params_t;

rill_whisper_greedy_params_t rill_whisper_greedy_default_params(void);

/* Milliseconds per timestamp token: <|0.00|> + k is k * 20 ms into the window. */
#define RILL_WHISPER_TS_MS 20

/* One segment of a transcription with timestamps, as faster-whisper's
 * _split_segments_by_timestamps makes it (window-relative times). */
typedef struct rill_whisper_segment {
    int32_t t0_ms, t1_ms; /* start and end in the window, ms (see rill_whisper_segments()) */
    int32_t first, n_ids; /* its ids: tokens[first, first + n_ids), timestamp tokens included */
    size_t text_off;      /* its text: text[text_off, text_off + text_len) of the transcript */
    size_t text_len;
    bool closed; /* its last id is a timestamp (false: its end is not one the model gave) */
} rill_whisper_segment_t;

typedef struct rill_whisper_transcript {
    int32_t *tokens; /* generated ids, eot excluded (timestamp tokens included); owned
                        (rill_whisper_transcript_deinit) */
    int32_t n_tokens;
    char *text;           /* their text (NUL-terminated UTF-8, the tokenizer's decode); owned */
    size_t text_len;      /* bytes before the NUL */
    float no_speech_prob; /* softmax of the logits after sot, at the no_speech token */
    bool hit_limit;       /* stopped by the length limit, not by eot */
    float avg_logprob;    /* faster-whisper's avg_logprob: the log-probabilities of the chosen
                             ids and of eot (each after the suppression and rules), summed, over
                             n_tokens + 1 */
    /* with timestamps (otherwise segments NULL, n_segments 0, tail_first n_tokens,
     * tail_text_off text_len, seek_ms 0): */
    rill_whisper_segment_t *segments; /* faster-whisper's segments of the window; owned */
    int32_t n_segments;
    int32_t tail_first;   /* tokens[tail_first, n_tokens): an unfinished segment after the last
                             one (opened by a timestamp, never closed), which faster-whisper
                             drops and decodes again in its next window */
    size_t tail_text_off; /* its text: text[tail_text_off, text_len) */
    int32_t seek_ms;      /* where faster-whisper's next window would start, ms into this one */
} rill_whisper_transcript_t;

/* Greedy transcription of one encoded window, as CTranslate2's Whisper generate with beam 1:
 * the prompt of rill_whisper_prompt(); at every step the logits of whisper.suppress_tokens and
 * of transcribe, translate, sot, prev and no_speech are set to -inf (faster-whisper's
 * suppression list), and at the first step those of whisper.begin_suppress_tokens too
 * (suppress_blank); the next token is the arg-max (lowest id on ties); stops at eot or at the
 * length limit. Uses w's own KV cache (no caller cache is touched). On success out is filled
 * (caller owns it: rill_whisper_transcript_deinit); on error out is zeroed.
 *
 * With params->timestamps: the prompt without <|notimestamps|>, each step's choice
 * rill_whisper_pick_timestamp(), and the ids split by rill_whisper_segments(); out->text is
 * then the segments' texts back to back (each the tokenizer's RILL_TOKENIZER_DECODE_RAW decode
 * of its text tokens, as faster-whisper decodes a segment), then the tail's; a segment of zero
 * length or with only blank text is left out, as faster-whisper leaves it out. Text, start and
 * end equal faster-whisper 1.2.1's (WhisperModel.transcribe, beam 1, temperature 0,
 * without_timestamps False) on the test clips: tests/test_whisper.c.
 *
 * Errors: RILL_EINVAL (NULL, a window not encoded or of another rill_whisper_t, max_tokens < 0,
 * max_initial_ms < -1, window_ms outside [0, 30000]), RILL_ENOTFOUND (language), RILL_ENOMEM,
 * the decode's and the tokenizer's. Blocks until done. */
rill_err_t rill_whisper_greedy(rill_whisper_t *w, const rill_whisper_window_t *win,
                               const rill_whisper_greedy_params_t *params,
                               rill_whisper_transcript_t *out);

/* One greedy step's choice, rill_whisper_greedy()'s rule for callers that decode themselves (the
 * streaming recognizer): sets the suppressed tokens of logits[0, n_vocab) to -inf in place (first:
 * the first generated token, which also suppresses begin_suppress_tokens) and returns the arg-max
 * (lowest id on ties). hp from rill_whisper_hparams(). Never fails for valid arguments. */
int32_t rill_whisper_pick(const rill_whisper_hparams_t *hp, float *logits, bool first);

/* log softmax(logits[0, V))[id] in double (-inf when every logit is -inf): a decode's token
 * log-probability (avg_logprob) and the no-speech probability read it. Pure; any thread. */
double rill_whisper_log_prob(const float *logits, int64_t V, int32_t id);

/* The same with timestamps: Whisper's timestamp rules as CTranslate2 4.8 applies them
 * (ApplyTimestampRules), on top of rill_whisper_pick()'s suppression (first = n_gen == 0).
 * gen[0, n_gen) are the ids generated so far in this window (after the sot sequence). In place
 * on logits, then the arg-max:
 *   - <|notimestamps|> is never chosen;
 *   - the first token is a timestamp, at most <|0.00|> + max_initial (max_initial < 0: any);
 *   - after a timestamp that follows text, the next is a timestamp or eot (a segment's end,
 *     then the next one's start); after two timestamps in a row (or the first one), text or eot;
 *   - a timestamp is never earlier than the last one generated;
 *   - wherever text could come, if the probability of all timestamps together exceeds that of
 *     the likeliest text token (eot counts as text), a timestamp is forced.
 * Never fails for valid arguments (hp from rill_whisper_hparams(), gen valid for n_gen). */
int32_t rill_whisper_pick_timestamp(const rill_whisper_hparams_t *hp, float *logits,
                                    const int32_t *gen, int32_t n_gen, int32_t max_initial);

/* Splits a window's generated ids[0, n) (timestamp tokens included, eot excluded) into segments
 * as faster-whisper does (WhisperModel._split_segments_by_timestamps at time offset 0), into
 * segs[cap] (cap >= n, and >= 1, always suffices; ids that follow the timestamp rules need at
 * most n / 2 + 1). When two timestamps stand together somewhere,
 * every run from a timestamp to the next pair is a segment from its first timestamp to its last;
 * ids after the last pair are the unfinished tail (*tail gets its start; n when the ids end with
 * a lone timestamp after text, which closes a last segment), and *seek_ms is the last pair's end
 * (window_ms when nothing is unfinished). Otherwise all ids are one segment from 0 to its last
 * timestamp, or to window_ms when it has none or only <|0.00|>; *tail = n, *seek_ms = window_ms.
 * Times: (id - timestamp_begin) * RILL_WHISPER_TS_MS. Text offsets are left 0. tail and seek_ms
 * may be NULL. Returns the number of segments (>= 1). Errors: RILL_EINVAL (NULL hp or segs, ids
 * NULL with n > 0, n < 0, cap < 1, window_ms < 0), RILL_EFULL (more segments than cap; segs
 * then holds the first cap). */
int32_t rill_whisper_segments(const rill_whisper_hparams_t *hp, const int32_t *ids, int32_t n,
                              int32_t window_ms, rill_whisper_segment_t *segs, int32_t cap,
                              int32_t *tail, int32_t *seek_ms);

/* Frees a transcript's arrays and zeroes it. NULL-safe. */
void rill_whisper_transcript_deinit(rill_whisper_transcript_t *t);

#ifdef __cplusplus
}
#endif
#endif /* RILL_WHISPER_H */
