/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (and what reads GGUF metadata next).
 *
 * Every input goes through rill_gguf_open_memory(). When it is accepted, everything the reader
 * returns is touched: every key by index and by name, every value through every getter, every
 * element of every string or numeric array, the first and last byte of every tensor. Any byte
 * the reader points at outside the input is then an AddressSanitizer report. The lookups must
 * agree with the walk by index (a mismatch aborts: it is a bug, not bad input). Accepted files
 * are then given to the model loader and the chat template detector, which read hparams and
 * templates from the same untrusted metadata.
 *
 * Build and run: scripts/fuzz.sh [seconds].
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rill_chat.h"
#include "rill_gguf.h"
#include "rill_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t g_sink; /* keeps the reads from being optimized away */

static void touch(const void *p, uint64_t n) {
    if (n > 0) {
        const volatile uint8_t *b = p;
        g_sink += b[0] + b[n - 1];
    }
}

/* Copies a key into a NUL-terminated buffer; false when it cannot be looked up by name. */
static bool cstr(rill_gguf_str_t s, char *buf, size_t cap) {
    if (s.len >= cap || (s.len > 0 && memchr(s.ptr, '\0', (size_t)s.len) != NULL)) {
        return false;
    }
    memcpy(buf, s.ptr, (size_t)s.len);
    buf[s.len] = '\0';
    return true;
}

static void walk_kv(const rill_gguf_t *g, int64_t i) {
    static char key[1 << 16];
    rill_gguf_str_t k = rill_gguf_key(g, i);
    touch(k.ptr, k.len);
    rill_gguf_type_t t = rill_gguf_kv_type(g, i);
    if (t == RILL_GGUF_NONE || !cstr(k, key, sizeof key)) {
        return;
    }
    if (rill_gguf_find_key(g, key) != i) {
        abort(); /* keys are unique, so the index must find this one */
    }
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    rill_gguf_str_t s;
    g_sink += rill_gguf_get_u32(g, key, &u32) == RILL_OK ? u32 : 0;
    g_sink += rill_gguf_get_u64(g, key, &u64) == RILL_OK ? u64 : 0;
    g_sink += rill_gguf_get_i64(g, key, &i64) == RILL_OK ? (uint64_t)i64 : 0;
    g_sink += rill_gguf_get_f32(g, key, &f) == RILL_OK ? (uint64_t)(f == f) : 0;
    g_sink += rill_gguf_get_bool(g, key, &b) == RILL_OK ? b : 0;
    if (rill_gguf_get_str(g, key, &s) == RILL_OK) {
        touch(s.ptr, s.len);
    }
    rill_gguf_type_t et;
    uint64_t len;
    if (rill_gguf_get_arr(g, key, &et, &len) != RILL_OK) {
        if (t == RILL_GGUF_ARRAY) {
            abort();
        }
        return;
    }
    if (et == RILL_GGUF_STRING) {
        for (uint64_t j = 0; j < len; j++) {
            if (rill_gguf_get_arr_str(g, key, j, &s) != RILL_OK) {
                abort();
            }
            touch(s.ptr, s.len);
        }
        if (rill_gguf_get_arr_str(g, key, len, &s) != RILL_ERANGE) {
            abort();
        }
    } else {
        const void *d;
        uint64_t n;
        if (rill_gguf_get_arr_data(g, key, &d, &n) == RILL_OK) {
            static const int width[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
            if (n != len || (int)et < 0 || (int)et > 12) {
                abort();
            }
            touch(d, n * (uint64_t)width[et]);
        }
    }
}

static void walk_tensors(const rill_gguf_t *g) {
    static char name[1 << 16];
    int64_t n = rill_gguf_n_tensors(g);
    for (int64_t i = 0; i < n; i++) {
        const rill_gguf_tensor_t *t = rill_gguf_tensor(g, i);
        touch(t->name.ptr, t->name.len);
        touch(t->data, t->nbytes);
        if (cstr(t->name, name, sizeof name) && rill_gguf_find_tensor(g, name) != t) {
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rill_gguf_t *g = NULL;
    if (rill_gguf_open_memory(data, size, &g) != RILL_OK) {
        if (g != NULL) {
            abort();
        }
        return 0;
    }
    for (int64_t i = 0; i < rill_gguf_n_kv(g); i++) {
        walk_kv(g, i);
    }
    walk_tensors(g);

    /* The chat template detector reads tokenizer.chat_template. */
    rill_chat_t *chat = NULL;
    if (rill_chat_new_gguf(g, RILL_CHAT_AUTO, &chat) == RILL_OK) {
        char out[512];
        const rill_chat_msg_t msgs[] = { { "system", "s" }, { "user", "hi" } };
        g_sink += (uint64_t)rill_chat_apply(chat, msgs, 2, true, out, sizeof out);
        rill_chat_destroy(&chat);
    }

    /* The model loader reads hparams and binds tensors; on success it owns g. */
    rill_model_t *m = NULL;
    rill_model_params_t mp = rill_model_default_params();
    if (rill_model_load_gguf(&g, mp, &m) == RILL_OK) {
        const rill_model_weights_t *w = rill_model_weights(m);
        touch(w->token_embd.data, w->token_embd.row_bytes);
        touch(w->output.data, w->output.row_bytes);
        rill_model_destroy(&m);
    }
    rill_gguf_destroy(&g);
    return 0;
}
