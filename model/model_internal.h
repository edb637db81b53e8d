/*
 * model_internal.h - what the model loader's files share (model.c: the GGUF -> model steps and
 * the llama/qwen2 binding; model_whisper.c: the whisper binding): the load context and its
 * helpers. Private to model/.
 */
#ifndef RILL_MODEL_INTERNAL_H
#define RILL_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rill_gguf.h"
#include "rill_model.h"

/* The load context: where messages go, and which tensors have been bound. */
typedef struct loader {
    const rill_gguf_t *g;
    const char *arch;
    char *err;
    size_t errlen;
    uint8_t *used; /* one flag per tensor, in file order */
} loader_t;

/* Writes the message to the caller's buffer and the log (ERROR); returns code. */
__attribute__((format(printf, 3, 4))) rill_err_t rill__model_fail(loader_t *ld, rill_err_t code,
                                                                  const char *fmt, ...);

/* A file string made printable for a message (at most 64 characters, then "..."). */
const char *rill__model_printable(char out[72], rill_gguf_str_t s);

/* Integer key "<arch>.<name>" in [1, INT32_MAX] into *out; absent: def, or an error when def < 0
 * (required). Arrays are refused (per-layer values). */
rill_err_t rill__model_hp_int(loader_t *ld, const char *name, int64_t def, int32_t *out);

/* Float key "<arch>.<name>", finite and > 0; absent: def, or an error when def <= 0. */
rill_err_t rill__model_hp_float(loader_t *ld, const char *name, float def, float *out);

/* The whisper part of a model (model_whisper.c). */
typedef struct rill__whisper_model rill__whisper_model_t;

/* Reads the whisper hyper-parameters and special tokens, fills *hp (the text decoder's geometry,
 * as rill_model.h says) and binds every whisper tensor, marking ld->used. On success *out is the
 * new whisper part (free with rill__whisper_free). Errors: RILL_EFORMAT, RILL_EUNSUPPORTED,
 * RILL_ENOMEM, each with a message through ld. */
rill_err_t rill__whisper_bind(loader_t *ld, rill_hparams_t *hp, rill__whisper_model_t **out);
void rill__whisper_free(rill__whisper_model_t *wm);

const rill_whisper_hparams_t *rill__whisper_hparams(const rill__whisper_model_t *wm);
const rill_whisper_weights_t *rill__whisper_weights(const rill__whisper_model_t *wm);

#endif /* RILL_MODEL_INTERNAL_H */
