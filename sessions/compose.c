/*
 * compose.c - the public calls made of other calls: a new session with its system prompt (an
 * input record), generation (one tokens record per generated token) and a query (a fork that
 * generates and is dropped).
 *
 * Design. These calls hold no state of their own and go through the public input calls
 * (record.c), so each generated token is logged, counted and remembered by the replace window
 * like any appended token, and a query changes nothing of the session it ran on. They sit
 * above everything else in the module (see record.c for the order of the files).
 */
#include <string.h>

#include "rill_log.h"
#include "rill_sampler.h"
#include "session_internal.h"

static int32_t ceil_div(int64_t a, int32_t b) {
    return (int32_t)((a + b - 1) / b);
}

rill_err_t rill_session_new(rill_session_pool_t *p, const rill_session_params_t *params,
                            rill_session_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (p == NULL) {
        return RILL_EINVAL;
    }
    rill_session_params_t sp = params != NULL ? *params : rill_session_default_params();
    int32_t P = p->P;
    if (sp.n_sink < 0 || sp.window < 0 || sp.evict_pages < 0 || sp.n_prompt < 0 ||
        (sp.n_prompt > 0 && sp.prompt == NULL) || sp.n_sink > p->n_ctx || sp.window > p->n_ctx) {
        RILL_LOGE("session: invalid parameters (sinks %d, window %d, evict %d, prompt %d)",
                  sp.n_sink, sp.window, sp.evict_pages, sp.n_prompt);
        return RILL_EINVAL;
    }
    int32_t sink_slots = ceil_div(sp.n_sink, P) * P;
    int32_t window_slots = ceil_div(sp.window, P) * P;
    if (sink_slots > p->n_ctx ||
        (window_slots > 0 && (int64_t)sink_slots + window_slots > (int64_t)p->n_ctx / P * P)) {
        RILL_LOGE("session: sinks %d + window %d (rounded to pages of %d) exceed n_ctx %d",
                  sp.n_sink, sp.window, P, p->n_ctx);
        return RILL_EINVAL;
    }
    int32_t evict = sp.evict_pages;
    if (window_slots > 0) {
        if (evict == 0) {
            evict = window_slots / P / 4 > 1 ? window_slots / P / 4 : 1;
        }
        if (evict > window_slots / P) {
            RILL_LOGE("session: evict_pages %d exceeds the window's %d pages", evict,
                      window_slots / P);
            return RILL_EINVAL;
        }
    }
    rill_session_t *s = NULL;
    rill_err_t err = rill__session_alloc(p, sink_slots, window_slots, evict, &s);
    if (err != RILL_OK) {
        return err;
    }
    if (sp.n_prompt > 0) {
        err = rill_session_append(s, sp.prompt, sp.n_prompt);
        if (err != RILL_OK) {
            RILL_LOGE("session: system prompt: %s", s->err);
            rill_session_destroy(&s);
            return err;
        }
    }
    *out = s;
    return RILL_OK;
}

rill_err_t rill_session_generate(rill_session_t *s, rill_session_gen_t *gen) {
    if (s == NULL || gen == NULL || gen->n_max < 0) {
        return RILL_EINVAL;
    }
    gen->n_out = 0;
    rill_session_pool_t *p = s->pool;
    for (int32_t i = 0; i < gen->n_max; i++) {
        const float *logits = NULL;
        rill_err_t err = rill_session_logits(s, &logits);
        if (err != RILL_OK) {
            return err;
        }
        int32_t tok;
        if (gen->sampler != NULL) {
            err = rill_sampler_sample(gen->sampler, logits, &tok);
            if (err != RILL_OK) {
                return rill__session_fail(s, err, "sampler failed");
            }
            rill_sampler_accept(gen->sampler, tok);
        } else {
            tok = rill_sampler_argmax(logits, p->n_vocab);
        }
        err = rill_session_append(s, &tok, 1);
        if (err != RILL_OK) {
            return err;
        }
        if (gen->out != NULL) {
            gen->out[i] = tok;
        }
        gen->n_out++;
        bool stop = gen->on_token != NULL && !gen->on_token(gen->user, tok);
        if (stop || (gen->stop_at_eog && p->tok != NULL && rill_tokenizer_is_eog(p->tok, tok))) {
            break;
        }
    }
    return RILL_OK;
}

rill_err_t rill_session_query(rill_session_t *s, const int32_t *question, int32_t n_q,
                              rill_session_gen_t *gen) {
    if (s == NULL || gen == NULL || n_q < 0 || (n_q > 0 && question == NULL)) {
        return RILL_EINVAL;
    }
    gen->n_out = 0;
    rill_session_t *f = NULL;
    rill_err_t err = rill_session_fork(s, &f);
    if (err != RILL_OK) {
        return err;
    }
    err = rill_session_append(f, question, n_q);
    if (err == RILL_OK) {
        err = rill_session_generate(f, gen);
    }
    if (err != RILL_OK) {
        memcpy(s->err, f->err, sizeof s->err);
    }
    rill_session_destroy(&f);
    return err;
}
