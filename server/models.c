/*
 * models.c - rilld's model registry (contract: server_internal.h, rill_server.h): every model
 * given (--model FILE or NAME=FILE, repeated) is loaded once, with its tokenizer, its chat
 * template when rill renders that family, a forward pass and a KV pool of its own, all over one
 * backend (one device, one engine thread: scheduler/rill_scheduler.h "Several models"). The
 * first model is the default. Names are what clients pass as session.create's `model` and what
 * server.stats lists.
 *
 * A Whisper model (architecture "whisper") is a recognizer, not a language model: it gets a
 * rill_whisper_t over the same backend instead of a forward pass and a KV pool, and no index in
 * the scheduler's model list (srv_model_t.sched is -1); its sessions' recognizers run on the
 * engine thread (rill_sched_asr_attach). At least one language model is required, since the
 * scheduler runs over language models' pools.
 */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

/* A name from the file: no directory, no ".gguf", characters outside [A-Za-z0-9_.-] as '_'. */
static void name_from_path(const char *path, char *out, size_t cap) {
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".gguf") == 0) {
        n -= 5;
    }
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        char c = base[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        out[k++] = ok ? c : '_';
    }
    out[k] = '\0';
}

static bool name_ok(const char *name) {
    size_t n = strlen(name);
    if (n < 1 || n >= RILL_SCHED_MODEL_NAME) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            return false;
        }
    }
    return true;
}

int32_t srv_model_find(const srv_t *s, const char *name, size_t len) {
    for (int32_t i = 0; i < s->n_models; i++) {
        if (strlen(s->models[i].name) == len && memcmp(s->models[i].name, name, len) == 0) {
            return i;
        }
    }
    return -1;
}

/* Loads model i of the parameters into s->models[i]: the weights, tokenizer and chat template
 * (the engine's part, over s->be, is load_engine's: the backend is sized for every model). */
static int load(srv_t *s, int32_t i) {
    const rill_server_model_t *pm = &s->p.models[i];
    srv_model_t *m = &s->models[i];
    if (pm->path == NULL) {
        RILL_LOGE("rilld: model %d has no file", (int)i);
        return -1;
    }
    m->path = pm->path;
    if (pm->name != NULL) {
        snprintf(m->name, sizeof m->name, "%s", pm->name);
    } else {
        name_from_path(pm->path, m->name, sizeof m->name);
    }
    if (!name_ok(m->name) || (pm->name != NULL && strlen(pm->name) >= sizeof m->name)) {
        RILL_LOGE("rilld: model name '%s' must be 1..63 bytes of [A-Za-z0-9_.-]",
                  pm->name != NULL ? pm->name : m->name);
        return -1;
    }
    for (int32_t j = 0; j < i; j++) {
        if (strcmp(s->models[j].name, m->name) == 0) {
            RILL_LOGE("rilld: two models named %s", m->name);
            return -1;
        }
    }
    if (rill_model_load(pm->path, rill_model_default_params(), &m->model) != RILL_OK) {
        RILL_LOGE("rilld: %s: %s", pm->path, rill_last_error(RILL_OK));
        return -1;
    }
    if (rill_model_whisper_hparams(m->model) != NULL) {
        m->is_asr = true; /* its tokenizer is rill_whisper's, made with it */
        return 0;
    }
    if (rill_tokenizer_new(rill_model_gguf(m->model), &m->tok) != RILL_OK) {
        RILL_LOGE("rilld: %s: tokenizer: %s", pm->path, rill_last_error(RILL_OK));
        return -1;
    }
    /* no template, or one rill does not render: questions take the fixed format */
    rill_err_t err = rill_chat_new_gguf(rill_model_gguf(m->model), RILL_CHAT_AUTO, &m->chat);
    if (err != RILL_OK && err != RILL_ENOTFOUND && err != RILL_EUNSUPPORTED) {
        RILL_LOGE("rilld: %s: chat template: %s", pm->path, rill_strerror(err));
        return -1;
    }
    return 0;
}

/* Model i's forward pass and KV pool over s->be (a recognizer: its rill_whisper_t). */
static int load_engine(srv_t *s, int32_t i) {
    const rill_server_model_t *pm = &s->p.models[i];
    srv_model_t *m = &s->models[i];
    if (m->is_asr) {
        rill_err_t err = rill_whisper_new(m->model, s->be, NULL, &m->whisper);
        if (err != RILL_OK) {
            RILL_LOGE("rilld: %s: %s", pm->path, rill_last_error(err));
            return -1;
        }
        return 0;
    }
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = s->p.kv_cells;
    pp.kv_type = s->p.kv_type_k;
    pp.kv_type_v = (int32_t)s->p.kv_type_v;
    pp.tokenizer = m->tok;
    rill_err_t err = rill_forward_new(m->model, s->be, NULL, &m->fw);
    err = err == RILL_OK ? rill_session_pool_new(m->fw, &pp, &m->pool) : err;
    if (err != RILL_OK) {
        RILL_LOGE("rilld: %s: %s (forward pass and KV pool of %lld cells, K %s, V %s)", pm->path,
                  rill_strerror(err), (long long)s->p.kv_cells, rill_dtype_name(s->p.kv_type_k),
                  rill_dtype_name(s->p.kv_type_v));
        return -1;
    }
    return 0;
}

int srv_models_start(srv_t *s) {
    if (s->p.n_models < 1 || s->p.n_models > RILL_SERVER_MAX_MODELS) {
        RILL_LOGE("rilld: no model (1..%d --model)", RILL_SERVER_MAX_MODELS);
        return -1;
    }
    for (int32_t i = 0; i < s->p.n_models; i++) {
        s->n_models = i + 1; /* stop frees what was loaded */
        if (load(s, i) != 0) {
            return -1;
        }
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = s->p.threads;
    bp.max_batch = 256;
    bp.attn = s->p.attn;
    int32_t n_llm = 0;
    for (int32_t i = 0; i < s->n_models; i++) {
        /* the widest matmul input of any model (Qwen2.5-1.5B's FFN: 8960, over the default;
         * Whisper's: its FFN widths and 3 * n_audio_state, rill_whisper_new's rule) */
        const rill_hparams_t *hp = rill_model_hparams(s->models[i].model);
        int64_t widest = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
        const rill_whisper_hparams_t *wh = rill_model_whisper_hparams(s->models[i].model);
        if (wh != NULL) {
            const int64_t w3 = 3 * (int64_t)wh->n_audio_state;
            widest = wh->n_audio_ff > widest ? wh->n_audio_ff : widest;
            widest = wh->n_text_ff > widest ? wh->n_text_ff : widest;
            widest = w3 > widest ? w3 : widest;
        }
        bp.max_n_in = widest > bp.max_n_in ? widest : bp.max_n_in;
        s->models[i].sched = s->models[i].is_asr ? -1 : n_llm++;
    }
    if (n_llm == 0) {
        RILL_LOGE("rilld: every --model is a Whisper model; give a language model too (the "
                  "scheduler runs over language models; recognizers feed their sessions)");
        return -1;
    }
    rill_err_t err = rill_backend_new(&bp, &s->be);
    if (err != RILL_OK) {
        const char *why =
            err == RILL_EUNSUPPORTED ? rill_backend_simd_unsupported(bp.cpu.simd) : NULL;
        RILL_LOGE("rilld: engine start-up failed: %s%s%s", rill_strerror(err), why ? ": " : "",
                  why ? why : "");
        return -1;
    }
    for (int32_t i = 0; i < s->n_models; i++) {
        if (load_engine(s, i) != 0) {
            return -1;
        }
    }
    rill_sched_model_t ms[RILL_SERVER_MAX_MODELS];
    for (int32_t i = 0; i < s->n_models; i++) {
        if (s->models[i].sched >= 0) {
            ms[s->models[i].sched] =
                (rill_sched_model_t){ .name = s->models[i].name, .pool = s->models[i].pool };
        }
    }
    s->default_llm = -1;
    for (int32_t i = 0; i < s->n_models && s->default_llm < 0; i++) {
        s->default_llm = s->models[i].sched >= 0 ? i : -1;
    }
    rill_sched_params_t sp = rill_sched_default_params();
    sp.max_delay_ns = s->p.max_delay_ms * 1000000;
    sp.standing_min_interval_ns = s->p.standing_interval_ms * 1000000;
    sp.standing_max_share = s->p.standing_share;
    sp.max_sessions = s->p.max_sessions;
    sp.sleep_dir = s->sleep_dir;
    sp.sleep_idle_ns = s->p.sleep_idle_s * 1000000000LL;
    sp.sleep_disk_bytes = s->p.sleep_disk;
    err = rill_sched_new_models(ms, n_llm, &sp, &s->sch);
    if (err != RILL_OK) {
        RILL_LOGE("rilld: scheduler start-up failed: %s", rill_strerror(err));
        return -1;
    }
    return 0;
}

void srv_models_stop(srv_t *s) {
    rill_sched_destroy(&s->sch); /* syncs and closes the logs */
    for (int32_t i = 0; i < s->n_models; i++) {
        srv_model_t *m = &s->models[i];
        rill_session_pool_destroy(&m->pool);
        rill_forward_destroy(&m->fw);
        rill_whisper_destroy(&m->whisper);
        rill_chat_destroy(&m->chat);
        rill_tokenizer_destroy(&m->tok);
        rill_model_destroy(&m->model);
    }
    s->n_models = 0;
    rill_backend_destroy(&s->be);
}
