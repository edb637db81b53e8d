/*
 * rill_model.h - a loaded transformer model: hyper-parameters and bound weights.
 *
 * rill_model_load() opens a GGUF file (rill_gguf.h), reads the hyper-parameters of the supported
 * architectures (`llama`: Llama 2/3, SmolLM, TinyLlama; `qwen2`: Qwen2/2.5) and binds every
 * weight tensor by name, checking its type and shape. The result is what the forward pass reads:
 * rill_hparams_t and rill_model_weights_t below. Weights are not copied: each rill_model_tensor_t
 * points into the read-only mapping of the file.
 *
 * Architecture facts the loader decides (verified against llama.cpp's llama_model_rope_type()
 * and its tensor tables):
 *   - RoPE: `llama` rotates adjacent pairs (x[2i], x[2i+1]) (RILL_MODEL_ROPE_NORM); `qwen2` rotates
 *     halves (x[i], x[i + n_rot/2]) (RILL_MODEL_ROPE_NEOX, GPT-NeoX style).
 *   - `qwen2` has q/k/v projection biases (required); in `llama` they are optional.
 *   - output.weight is optional: when absent the output projection is tied to token_embd.
 *   - rope_freqs.weight (Llama 3.1+ long-context frequency factors) is optional; when present the
 *     forward pass must divide each rotation frequency theta_i by rope_freqs[i].
 *
 * Tensors the architecture does not use are an error by default (RILL_EUNSUPPORTED, naming the
 * tensor): a tensor we do not know about almost always changes the computation (extra norms, a
 * scaling table, experts), and silently ignoring it gives plausible-looking wrong output, the
 * hardest kind of bug to find. params.allow_unused_tensors turns the error into one warning per
 * tensor through the log callback.
 *
 * Weight types: 2-D matrices (token_embd, output, attention and FFN projections) may be F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K; norms, biases and rope_freqs must be
 * F32.
 *
 * Architecture "whisper" (OpenAI's Whisper as CTranslate2 stores it, converted to GGUF by
 * tools/whisper_to_gguf.py; layout: docs/whisper_gguf.md) loads through the same functions but is a
 * different shape of model: its hyper-parameters, special tokens and weights are in
 * rill_whisper_hparams_t / rill_whisper_weights_t (rill_model_whisper_hparams(),
 * rill_model_whisper_weights()). For it rill_hparams_t describes the text decoder only (n_vocab,
 * n_ctx_train = n_text_ctx, n_embd, n_layer, n_head = n_head_kv, head_dim, n_ff of the decoder;
 * rms_eps = the LayerNorm epsilon; no RoPE: n_rot 0, rope_base 0; tied_output true), which is
 * what a KV cache of its decoder needs, and rill_model_weights_t is empty (n_layer 0, no
 * tensors): the llama forward pass refuses the model (rill_forward_new: RILL_EUNSUPPORTED);
 * forward/rill_whisper.h runs it. Whisper tensors may be F32, F16 or BF16 matrices (the
 * convolution weights included); biases, LayerNorm gamma/beta, position tables and the mel
 * filterbank must be F32.
 *
 * Thread safety: a rill_model_t is immutable after load and may be shared by any number of
 * threads. It is reference-counted (STYLE.md rule 9): rill_model_retain() adds a reference,
 * rill_model_destroy() drops one, and the last one frees the model and unmaps the file.
 */
#ifndef RILL_MODEL_H
#define RILL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_dtype.h"
#include "rill_err.h"
#include "rill_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_model rill_model_t;

typedef enum rill_arch {
    RILL_ARCH_LLAMA = 0,  /* "llama" */
    RILL_ARCH_QWEN2 = 1,  /* "qwen2" */
    RILL_ARCH_WHISPER = 2 /* "whisper": encoder-decoder speech recognizer (rill_model_whisper) */
} rill_arch_t;

/* How the architecture applies RoPE; the values are ggml's rope types, which the backend's
 * rill_rope_mode_t uses too (the forward pass maps one to the other). */
typedef enum rill_model_rope {
    RILL_MODEL_ROPE_NORM = 0, /* adjacent pairs (x[2i], x[2i+1]): LLM_ARCH_LLAMA */
    RILL_MODEL_ROPE_NEOX = 2  /* halves (x[i], x[i + n_rot/2]): LLM_ARCH_QWEN2 */
} rill_model_rope_t;

/* Hyper-parameters. Letters used in shapes below: E = n_embd, H = n_head, K = n_head_kv,
 * D = head_dim, F = n_ff, V = n_vocab. Invariants checked at load: all sizes >= 1, D * H == E,
 * H % K == 0, n_rot == D (even), rms_eps > 0 and finite, rope_base > 0 and finite. */
typedef struct rill_hparams {
    rill_arch_t arch;
    int32_t n_vocab;     /* V: tokenizer.ggml.tokens length, else <arch>.vocab_size, else rows
                          * of token_embd */
    int32_t n_ctx_train; /* <arch>.context_length: the context the model was trained with */
    int32_t n_embd;      /* E: <arch>.embedding_length */
    int32_t n_layer;     /* <arch>.block_count */
    int32_t n_ff;        /* F: <arch>.feed_forward_length */
    int32_t n_head;      /* H: <arch>.attention.head_count */
    int32_t n_head_kv;   /* K: <arch>.attention.head_count_kv (default H) */
    int32_t head_dim;    /* D = E / H */
    int32_t n_rot;       /* <arch>.rope.dimension_count (default D); rill requires n_rot == D */
    float rms_eps;       /* <arch>.attention.layer_norm_rms_epsilon (required) */
    float rope_base;     /* <arch>.rope.freq_base (default 10000): theta_i = base^(-2i/n_rot) */
    rill_model_rope_t rope_type; /* RILL_MODEL_ROPE_NORM (llama) or _NEOX (qwen2) */
    bool tied_output; /* no output.weight in the file: weights.output == weights.token_embd */
} rill_hparams_t;

/* One weight tensor as stored in the file: a view into the mapping, from which a backend makes
 * its prepared weight (rill_weight_t of kernels/rill_backend.h). Row-major rows of ne0 elements. A
 * matrix that maps an input of size ne0 to an output of size ne1 is applied as y[r] = dot(row r, x)
 * for r in [0, ne1). A vector (norm, bias) has ne1 == 1. An absent optional tensor has data == NULL
 * and all fields zero. */
typedef struct rill_model_tensor {
    rill_dtype_t dtype; /* storage type; rows are a whole number of blocks of it */
    int64_t ne0;        /* elements per row (the input size of a matrix) */
    int64_t ne1;        /* rows (the output size of a matrix) */
    size_t row_bytes;   /* bytes per row: rill_dtype_row_bytes(dtype, ne0) */
    const void *data;   /* borrowed from the model's mapping; ne1 * row_bytes bytes */
} rill_model_tensor_t;

typedef struct rill_layer_weights {
    rill_model_tensor_t attn_norm; /* (E) f32 */
    rill_model_tensor_t wq;        /* ne0 = E, ne1 = H * D */
    rill_model_tensor_t wk;        /* ne0 = E, ne1 = K * D */
    rill_model_tensor_t wv;        /* ne0 = E, ne1 = K * D */
    rill_model_tensor_t wo;        /* ne0 = H * D, ne1 = E */
    rill_model_tensor_t bq;        /* (H * D) f32; qwen2: required, llama: optional (NULL data) */
    rill_model_tensor_t bk;        /* (K * D) f32; as bq */
    rill_model_tensor_t bv;        /* (K * D) f32; as bq */
    rill_model_tensor_t ffn_norm;  /* (E) f32 */
    rill_model_tensor_t ffn_gate;  /* ne0 = E, ne1 = F */
    rill_model_tensor_t ffn_up;    /* ne0 = E, ne1 = F */
    rill_model_tensor_t ffn_down;  /* ne0 = F, ne1 = E */
} rill_layer_weights_t;

/* The forward pass, per layer l:  h = x + wo(attn(rope(wq n + bq), rope(wk n + bk), wv n + bv))
 * with n = rmsnorm(x) * attn_norm;  x' = h + ffn_down(silu(ffn_gate m) * ffn_up m) with
 * m = rmsnorm(h) * ffn_norm. Logits = output(rmsnorm(x_L) * output_norm). */
typedef struct rill_model_weights {
    rill_model_tensor_t token_embd;  /* ne0 = E, ne1 = V: row t is token t's embedding */
    rill_model_tensor_t output_norm; /* (E) f32 */
    rill_model_tensor_t output;      /* ne0 = E, ne1 = V; a copy of token_embd when tied */
    rill_model_tensor_t rope_freqs;  /* (n_rot / 2) f32 frequency divisors; optional (NULL data) */
    int32_t n_layer;
    const rill_layer_weights_t *layers; /* n_layer entries, owned by the model */
} rill_model_weights_t;

/* ---- whisper ---------------------------------------------------------------------------------
 * Letters: d_a = n_audio_state, d_t = n_text_state, F_a / F_t the encoder's / decoder's FFN
 * width (rows of ffn/linear_0), M = n_mels, V = n_vocab. Every tensor is a rill_model_tensor_t
 * view into the mapping; the fused projections of the file (self_attention/linear_0 = Q|K|V,
 * the cross attention's linear_1 = K|V) are bound as separate views of their row ranges, so the
 * forward pass multiplies by each alone with no copy. */

typedef struct rill_whisper_hparams {
    int32_t n_mels;        /* M: whisper.n_mels (80) */
    int32_t n_audio_ctx;   /* encoder positions (1500 = 3000 mel frames after the stride-2 conv) */
    int32_t n_audio_state; /* d_a */
    int32_t n_audio_head;
    int32_t n_audio_layer;
    int32_t n_audio_ff;   /* F_a */
    int32_t n_text_ctx;   /* decoder positions (448) */
    int32_t n_text_state; /* d_t */
    int32_t n_text_head;
    int32_t n_text_layer;
    int32_t n_text_ff; /* F_t */
    int32_t n_vocab;   /* V: whisper.n_vocab, equal to the tokenizer's and the embedding's rows */
    bool multilingual; /* whisper.multilingual: the prompt carries a language token */
    float eps;         /* whisper.layer_norm_epsilon (every LayerNorm) */
    /* special token ids, each in [0, V) */
    int32_t tok_sot, tok_eot, tok_transcribe, tok_translate, tok_no_timestamps, tok_no_speech,
        tok_prev, tok_timestamp_begin;
    /* languages: n_langs ids (whisper.lang_ids, each in [0, V)) and their codes
     * (whisper.lang_codes, same order, e.g. "en"; strings borrowed from the mapping, not
     * NUL-terminated); 0 for an English-only model, >= 1 for a multilingual one */
    int32_t n_langs;
    const int32_t *lang_ids;
    const rill_gguf_str_t *lang_codes;
    /* whisper.suppress_tokens (never generated) and whisper.begin_suppress_tokens (not as the
     * first generated token); ids in [0, V); arrays owned by the model */
    int32_t n_suppress;
    const int32_t *suppress;
    int32_t n_begin_suppress;
    const int32_t *begin_suppress;
} rill_whisper_hparams_t;

/* One pre-norm attention block: LayerNorm (gamma, beta: (d) f32), projections wq/wk/wv
 * (ne0 = input width, ne1 = d) with biases bq/bk/bv ((d) f32), output wo (ne0 = d, ne1 = d),
 * bo. Self-attention: q, k, v from the block's input (linear_0's three row ranges), wo =
 * linear_1. Cross-attention: wq = linear_0 on the decoder's stream, wk/wv = linear_1's two row
 * ranges on the encoder output (ne0 = d_a), wo = linear_2. */
typedef struct rill_whisper_attn_weights {
    rill_model_tensor_t ln_gamma, ln_beta;
    rill_model_tensor_t wq, bq, wk, bk, wv, bv, wo, bo;
} rill_whisper_attn_weights_t;

/* Pre-norm FFN block: LayerNorm, then w2(gelu(w1 n + b1)) + b2; w1: ne0 = d, ne1 = F;
 * w2: ne0 = F, ne1 = d. */
typedef struct rill_whisper_ffn_weights {
    rill_model_tensor_t ln_gamma, ln_beta;
    rill_model_tensor_t w1, b1, w2, b2;
} rill_whisper_ffn_weights_t;

typedef struct rill_whisper_encoder_layer {
    rill_whisper_attn_weights_t attn;
    rill_whisper_ffn_weights_t ffn;
} rill_whisper_encoder_layer_t;

typedef struct rill_whisper_decoder_layer {
    rill_whisper_attn_weights_t self_attn;
    rill_whisper_attn_weights_t cross_attn;
    rill_whisper_ffn_weights_t ffn;
} rill_whisper_decoder_layer_t;

typedef struct rill_whisper_weights {
    /* conv stem: weights stored (out, in, k) row-major, bound as matrices of out rows of
     * in * 3 values (the im2col layout of rill_backend_im2col_1d) */
    rill_model_tensor_t conv1_w; /* ne0 = 3 M, ne1 = d_a */
    rill_model_tensor_t conv1_b; /* (d_a) f32 */
    rill_model_tensor_t conv2_w; /* ne0 = 3 d_a, ne1 = d_a */
    rill_model_tensor_t conv2_b;
    rill_model_tensor_t enc_pos; /* ne0 = d_a, ne1 = n_audio_ctx, f32 (sinusoids) */
    const rill_whisper_encoder_layer_t *enc_layers; /* n_audio_layer entries */
    rill_model_tensor_t enc_ln_gamma, enc_ln_beta;  /* final encoder LayerNorm */
    rill_model_tensor_t dec_embd; /* ne0 = d_t, ne1 = V; also the tied output projection */
    rill_model_tensor_t dec_pos;  /* ne0 = d_t, ne1 = n_text_ctx, f32 (learned) */
    const rill_whisper_decoder_layer_t *dec_layers; /* n_text_layer entries */
    rill_model_tensor_t dec_ln_gamma, dec_ln_beta;  /* final decoder LayerNorm */
    rill_model_tensor_t mel_filters;                /* ne0 = 201 (n_fft / 2 + 1), ne1 = M, f32 */
} rill_whisper_weights_t;

typedef struct rill_model_params {
    /* false (default): a tensor the architecture does not use fails the load with
     * RILL_EUNSUPPORTED. true: it is logged as a warning and ignored. */
    bool allow_unused_tensors;
} rill_model_params_t;

/* Defaults: see each field. */
rill_model_params_t rill_model_default_params(void);

/* Opens, validates and binds a GGUF model file. Blocks while the file's metadata is read (the
 * weights are mapped, not read). On success the caller owns *out (one reference); release with
 * rill_model_destroy(). On failure *out is NULL, nothing is leaked, and rill_last_error(err)
 * says what is wrong (also logged at ERROR).
 * Errors: those of rill_gguf_open(); RILL_EFORMAT (a required key or tensor is missing, a value
 * is out of range, a tensor has the wrong shape, inconsistent hparams, a special token outside
 * the vocabulary); RILL_EUNSUPPORTED (an architecture other than llama/qwen2/whisper, a weight type
 * rill cannot compute with, an unused tensor, per-layer hparams arrays, RoPE scaling, n_rot !=
 * head_dim); RILL_EINVAL; RILL_ENOMEM. */
rill_err_t rill_model_load(const char *path, rill_model_params_t params, rill_model_t **out);

/* Same from an already opened GGUF (tests, fuzzing, in-memory files). On success the model takes
 * ownership of the reader and sets *gp = NULL; on failure *gp is untouched and still owned by
 * the caller. */
rill_err_t rill_model_load_gguf(rill_gguf_t **gp, rill_model_params_t params, rill_model_t **out);

/* Adds a reference (for another thread or owner) and returns m. NULL-safe. */
rill_model_t *rill_model_retain(rill_model_t *m);

/* Drops the caller's reference and sets *mp = NULL; the last reference frees the model, its
 * weights table and its GGUF reader. NULL-safe. Thread-safe with respect to other references. */
void rill_model_destroy(rill_model_t **mp);

/* Borrowed views, valid while the caller holds a reference. */
const rill_hparams_t *rill_model_hparams(const rill_model_t *m);
const rill_model_weights_t *rill_model_weights(const rill_model_t *m);

/* The model's GGUF reader (metadata, tokenizer arrays, chat template). Borrowed; valid while the
 * caller holds a reference to the model. */
const rill_gguf_t *rill_model_gguf(const rill_model_t *m);

/* The whisper part of a model of architecture RILL_ARCH_WHISPER; NULL for any other model (and
 * for NULL). Borrowed; valid while the caller holds a reference. */
const rill_whisper_hparams_t *rill_model_whisper_hparams(const rill_model_t *m);
const rill_whisper_weights_t *rill_model_whisper_weights(const rill_model_t *m);

/* "llama", "qwen2" or "whisper" (static strings); "?" for other values. */
const char *rill_arch_name(rill_arch_t arch);

/* True when type t can be used for 2-D weight matrices (the list in the file comment). */
bool rill_model_matrix_type_supported(rill_dtype_t t);

#ifdef __cplusplus
}
#endif
#endif /* RILL_MODEL_H */
