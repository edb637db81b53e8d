/*
 * test_headers.cpp - the public headers from C++ (tests/headers.cmake builds one translation unit
 * per header and language besides this one). Here every header is included at once and a function
 * of each library is called through it: a header whose declarations lack extern "C" would give
 * C++-mangled names that do not link. Each call's result is checked, so the test fails when the
 * libraries answer wrongly, not only when they do not link.
 */
#include <cstdio>
#include <cstring>

#include "rill_backend.h"
#include "rill_chat.h"
#include "rill_core.h"
#include "rill_dtype.h"
#include "rill_forward.h"
#include "rill_gguf.h"
#include "rill_mel.h"
#include "rill_model.h"
#include "rill_quant.h"
#include "rill_sampler.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"

static int failures = 0;

static void expect(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "test_headers: %s\n", what);
        failures++;
    }
}

int main() {
    expect(std::strcmp(rill_err_name(RILL_EFULL), "EFULL") == 0, "rill_err_name");
    expect(std::strcmp(rill_dtype_name(RILL_DTYPE_Q4_K), "q4_k") == 0, "rill_dtype_name");
    rill_ring_t ring;
    expect(rill_ring_init(&ring, RILL_MEM_CORE, sizeof(int), 4) == RILL_OK, "rill_ring_init");
    int in = 7, out = 0;
    expect(rill_ring_push(&ring, &in) == RILL_OK && rill_ring_pop(&ring, &out) == RILL_OK &&
               out == 7,
           "rill_ring round trip");
    rill_ring_deinit(&ring);
    expect(rill_backend_default_params().max_batch == 512, "rill_backend_default_params");
    expect(rill_forward_default_params().max_logits == 32, "rill_forward_default_params");
    expect(rill_session_default_params().window == 0, "rill_session_default_params");
    expect(rill_sched_default_params().min_chunk == 16, "rill_sched_default_params");
    expect(std::strcmp(rill_sched_class_name(RILL_SCHED_INGEST), "ingest") == 0,
           "rill_sched_class_name");
    expect(std::strcmp(rill_chat_template_name(RILL_CHAT_CHATML), "chatml") == 0,
           "rill_chat_template_name");
    rill_gguf_t *g = nullptr;
    expect(rill_gguf_open("/nonexistent.gguf", &g) == RILL_EIO && !g &&
               std::strstr(rill_last_error(RILL_EIO), "/nonexistent.gguf") != nullptr,
           "rill_gguf_open of a missing file, with its detail");
    rill_mel_t *mel = nullptr;
    expect(rill_mel_new(nullptr, 80, 16000, &mel) == RILL_EINVAL && !mel &&
               rill_mel_n_frames(nullptr) == 0,
           "rill_mel_new refuses NULL filters");
    return failures == 0 ? 0 : 1;
}
