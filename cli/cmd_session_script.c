/*
 * cmd_session_script.c - `rill session-script --model FILE SCRIPT`: drives sessions (sessions/)
 * from a script, one command per line, for tests, debugging and outside checks. The command
 * language is an interface (issue 4) and stays stable:
 *
 *   new NAME [sinks S] [window W]   a session (S sink + W recent tokens, both rounded up to
 *                                   pages; no window: at most the context)
 *   append NAME ID ID ...           append token ids
 *   append-text NAME TEXT           append the rest of the line as text (escapes \n \t \r \\),
 *                                   boundary-safe: the unstable tail is held back until more
 *                                   text, or until append / logits / generate flush it
 *   fork SRC DST                    DST shares SRC's pages (copy-on-write)
 *   rollback NAME POS               keep positions [0, POS)
 *   drop NAME                       destroy the session
 *   logits NAME                     the last position's logits: n_vocab floats on one line
 *   generate NAME N                 greedy, N tokens appended to the session; ids on one line
 *   snapshot NAME PATH              write NAME's snapshot to PATH (atomically; NAME's ingest log,
 *                                   if any, is fsynced first)
 *   restore NAME PATH [log LOG [POLICY]]
 *                                   a new session NAME from the snapshot PATH ('-': none, then
 *                                   from the log alone), replaying the ingest log LOG after it;
 *                                   NAME then keeps appending to LOG
 *   log NAME LOG [POLICY]           start an ingest log for NAME in the new file LOG; POLICY is
 *                                   the fsync policy: always, everysec (default) or never
 *   stats NAME                      one JSON line
 * Blank lines and lines starting with '#' are ignored. The first failing line stops the script
 * with a message naming it (exit 1).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_alloc.h"
#include "rill_session.h"

#define MAX_SESSIONS 256

typedef struct named {
    char *name;
    rill_session_t *s;
} named_t;

typedef struct script {
    local_t l;
    rill_session_pool_t *pool;
    named_t ses[MAX_SESSIONS];
    int32_t *ids; /* scratch for append / generate */
    int64_t ids_cap;
    const char *path;
    long line;
} script_t;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
fail(script_t *sc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "rill session-script: %s:%ld: ", sc->path, sc->line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

static named_t *find(script_t *sc, const char *name) {
    for (int i = 0; i < MAX_SESSIONS; i++) {
        if (sc->ses[i].name != NULL && strcmp(sc->ses[i].name, name) == 0) {
            return &sc->ses[i];
        }
    }
    return NULL;
}

static named_t *add(script_t *sc, const char *name) {
    for (int i = 0; i < MAX_SESSIONS; i++) {
        if (sc->ses[i].name == NULL) {
            sc->ses[i].name = rill_strdup(RILL_MEM_OTHER, name);
            return sc->ses[i].name != NULL ? &sc->ses[i] : NULL;
        }
    }
    return NULL;
}

static void forget(named_t *n) {
    rill_session_destroy(&n->s);
    rill_free(n->name);
    n->name = NULL;
}

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (s == NULL) {
        return false;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
        return false;
    }
    *out = (int64_t)v;
    return true;
}

static bool ensure_ids(script_t *sc, int64_t n) {
    if (n <= sc->ids_cap) {
        return true;
    }
    int32_t *grown = rill_realloc(RILL_MEM_OTHER, sc->ids, (size_t)n * sizeof *grown);
    if (grown == NULL) {
        return false;
    }
    sc->ids = grown;
    sc->ids_cap = n;
    return true;
}

/* Splits off the next whitespace-separated word of *p (NUL-terminating it), or NULL. */
static char *word(char **p) {
    char *s = *p;
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    if (*s == '\0') {
        *p = s;
        return NULL;
    }
    char *e = s;
    while (*e != '\0' && *e != ' ' && *e != '\t') {
        e++;
    }
    if (*e != '\0') {
        *e++ = '\0';
    }
    *p = e;
    return s;
}

/* Decodes \n \t \r \\ in place; returns the length. */
static size_t unescape(char *s) {
    size_t o = 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        if (s[i] == '\\' && s[i + 1] != '\0') {
            char c = s[++i];
            s[o++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    return o;
}

static int session_error(script_t *sc, named_t *n, rill_err_t err) {
    (void)n;
    return fail(sc, "%s: %s", rill_err_name(err), rill_last_error(err));
}

/* An fsync policy name; NULL (absent) keeps *out. */
static bool parse_policy(const char *w, rill_session_fsync_t *out) {
    if (w == NULL) {
        return true;
    }
    if (strcmp(w, "always") == 0) {
        *out = RILL_SESSION_FSYNC_ALWAYS;
    } else if (strcmp(w, "everysec") == 0) {
        *out = RILL_SESSION_FSYNC_EVERYSEC;
    } else if (strcmp(w, "never") == 0) {
        *out = RILL_SESSION_FSYNC_NEVER;
    } else {
        return false;
    }
    return true;
}

static named_t *need(script_t *sc, const char *name) {
    named_t *n = name != NULL ? find(sc, name) : NULL;
    if (n == NULL) {
        fail(sc, "no session named '%s'", name != NULL ? name : "");
    }
    return n;
}

static int run_line(script_t *sc, char *line) {
    char *p = line;
    char *cmd = word(&p);
    if (cmd == NULL || cmd[0] == '#') {
        return 0;
    }
    rill_err_t err = RILL_OK;
    if (strcmp(cmd, "new") == 0) {
        char *name = word(&p);
        if (name == NULL) {
            return fail(sc, "usage: new NAME [sinks S] [window W]");
        }
        if (find(sc, name) != NULL) {
            return fail(sc, "session '%s' exists", name);
        }
        rill_session_params_t sp = rill_session_default_params();
        for (char *k = word(&p); k != NULL; k = word(&p)) {
            int64_t v = 0;
            if (!parse_int(word(&p), 0, INT32_MAX, &v) ||
                (strcmp(k, "sinks") != 0 && strcmp(k, "window") != 0)) {
                return fail(sc, "new: expected 'sinks S' or 'window W' near '%s'", k);
            }
            *(strcmp(k, "sinks") == 0 ? &sp.n_sink : &sp.window) = (int32_t)v;
        }
        named_t *n = add(sc, name);
        if (n == NULL) {
            return fail(sc, "too many sessions");
        }
        err = rill_session_new(sc->pool, &sp, &n->s);
        if (err != RILL_OK) {
            forget(n);
            return fail(sc, "new: %s (see the log)", rill_strerror(err));
        }
        return 0;
    }
    if (strcmp(cmd, "append") == 0) {
        named_t *n = need(sc, word(&p));
        if (n == NULL) {
            return 1;
        }
        int64_t cnt = 0, v = 0;
        for (char *w = word(&p); w != NULL; w = word(&p)) {
            if (!parse_int(w, 0, INT32_MAX, &v)) {
                return fail(sc, "append: '%s' is not a token id", w);
            }
            if (!ensure_ids(sc, cnt + 1 < 64 ? 64 : 2 * (cnt + 1))) {
                return fail(sc, "out of memory");
            }
            sc->ids[cnt++] = (int32_t)v;
        }
        /* Ids follow any held-back text: flush it first so the order is the script's. */
        if ((err = rill_session_flush_text(n->s)) != RILL_OK ||
            (err = rill_session_append(n->s, sc->ids, (int32_t)cnt)) != RILL_OK) {
            return session_error(sc, n, err);
        }
        return 0;
    }
    if (strcmp(cmd, "append-text") == 0) {
        named_t *n = need(sc, word(&p));
        if (n == NULL) {
            return 1;
        }
        size_t len = unescape(p);
        err = rill_session_append_text(n->s, p, len);
        return err == RILL_OK ? 0 : session_error(sc, n, err);
    }
    if (strcmp(cmd, "fork") == 0) {
        named_t *src = need(sc, word(&p));
        char *dst = word(&p);
        if (src == NULL || dst == NULL) {
            return src == NULL ? 1 : fail(sc, "usage: fork SRC DST");
        }
        if (find(sc, dst) != NULL) {
            return fail(sc, "session '%s' exists", dst);
        }
        named_t *n = add(sc, dst);
        if (n == NULL) {
            return fail(sc, "too many sessions");
        }
        err = rill_session_fork(src->s, &n->s);
        if (err != RILL_OK) {
            forget(n);
            return session_error(sc, src, err);
        }
        return 0;
    }
    if (strcmp(cmd, "rollback") == 0) {
        named_t *n = need(sc, word(&p));
        int64_t pos = 0;
        if (n == NULL) {
            return 1;
        }
        if (!parse_int(word(&p), 0, INT32_MAX, &pos)) {
            return fail(sc, "usage: rollback NAME POS");
        }
        err = rill_session_rollback(n->s, (int32_t)pos);
        return err == RILL_OK ? 0 : session_error(sc, n, err);
    }
    if (strcmp(cmd, "drop") == 0) {
        named_t *n = need(sc, word(&p));
        if (n != NULL) {
            forget(n);
        }
        return n == NULL;
    }
    if (strcmp(cmd, "logits") == 0) {
        named_t *n = need(sc, word(&p));
        const float *lg = NULL;
        if (n == NULL) {
            return 1;
        }
        if ((err = rill_session_flush_text(n->s)) != RILL_OK ||
            (err = rill_session_logits(n->s, &lg)) != RILL_OK) {
            return session_error(sc, n, err);
        }
        for (int32_t v = 0; v < sc->l.n_vocab; v++) {
            printf(v ? " %.9g" : "%.9g", lg[v]);
        }
        printf("\n");
        return 0;
    }
    if (strcmp(cmd, "generate") == 0) {
        named_t *n = need(sc, word(&p));
        int64_t cnt = 0;
        if (n == NULL) {
            return 1;
        }
        if (!parse_int(word(&p), 0, 1 << 24, &cnt)) {
            return fail(sc, "usage: generate NAME N");
        }
        if (!ensure_ids(sc, cnt > 0 ? cnt : 1)) {
            return fail(sc, "out of memory");
        }
        rill_session_gen_t gen = { .n_max = (int32_t)cnt, .out = sc->ids };
        if ((err = rill_session_flush_text(n->s)) != RILL_OK ||
            (err = rill_session_generate(n->s, &gen)) != RILL_OK) {
            return session_error(sc, n, err);
        }
        for (int32_t i = 0; i < gen.n_out; i++) {
            printf(i ? " %d" : "%d", sc->ids[i]);
        }
        printf("\n");
        return 0;
    }
    if (strcmp(cmd, "stats") == 0) {
        named_t *n = need(sc, word(&p));
        if (n == NULL) {
            return 1;
        }
        rill_session_stats_t st;
        rill_session_stats(n->s, &st);
        printf("{\"name\":\"%s\",\"n_seen\":%lld,\"n_resident\":%d,\"n_sink\":%d,"
               "\"kept_from\":%lld,\"pos_next\":%d,\"pages\":%d,\"pages_shared\":%d,"
               "\"bytes\":%lld,\"n_evicted\":%lld,\"pending_text\":%zu}\n",
               n->name, (long long)st.n_seen, st.n_resident, st.n_sink, (long long)st.kept_from,
               st.pos_next, st.pages, st.pages_shared, (long long)st.bytes, (long long)st.n_evicted,
               rill_session_pending_text(n->s));
        return 0;
    }
    if (strcmp(cmd, "snapshot") == 0) {
        named_t *n = need(sc, word(&p));
        char *path = word(&p);
        if (n == NULL) {
            return 1;
        }
        if (path == NULL || word(&p) != NULL) {
            return fail(sc, "usage: snapshot NAME PATH");
        }
        err = rill_session_snapshot(n->s, path);
        return err == RILL_OK ? 0 : session_error(sc, n, err);
    }
    if (strcmp(cmd, "log") == 0) {
        named_t *n = need(sc, word(&p));
        char *path = word(&p);
        rill_session_fsync_t policy = RILL_SESSION_FSYNC_EVERYSEC;
        if (n == NULL) {
            return 1;
        }
        if (path == NULL || !parse_policy(word(&p), &policy) || word(&p) != NULL) {
            return fail(sc, "usage: log NAME LOG [always|everysec|never]");
        }
        err = rill_session_open_log(n->s, path, policy);
        return err == RILL_OK ? 0 : session_error(sc, n, err);
    }
    if (strcmp(cmd, "restore") == 0) {
        char *name = word(&p), *path = word(&p), *kw = word(&p), *log = NULL;
        rill_session_fsync_t policy = RILL_SESSION_FSYNC_EVERYSEC;
        if (kw != NULL && strcmp(kw, "log") == 0) {
            log = word(&p);
        }
        if (name == NULL || path == NULL || (kw != NULL && log == NULL) ||
            !parse_policy(word(&p), &policy) || word(&p) != NULL ||
            (strcmp(path, "-") == 0 && log == NULL)) {
            return fail(sc, "usage: restore NAME PATH|- [log LOG [always|everysec|never]]");
        }
        if (find(sc, name) != NULL) {
            return fail(sc, "session '%s' exists", name);
        }
        named_t *n = add(sc, name);
        if (n == NULL) {
            return fail(sc, "too many sessions");
        }
        err = rill_session_restore(sc->pool, strcmp(path, "-") == 0 ? NULL : path, log, policy,
                                   &n->s);
        if (err != RILL_OK) {
            forget(n);
            return fail(sc, "restore: %s: %s", rill_err_name(err), rill_last_error(err));
        }
        return 0;
    }
    return fail(sc, "unknown command '%s'", cmd);
}

/* Reads one line of any length into *buf (grown as needed). Returns false at end of file. */
static bool read_line(FILE *f, char **buf, size_t *cap, bool *oom) {
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
        if (n + 2 > *cap) {
            size_t nc = *cap < 256 ? 256 : *cap * 2;
            char *g = rill_realloc(RILL_MEM_OTHER, *buf, nc);
            if (g == NULL) {
                *oom = true;
                return false;
            }
            *buf = g;
            *cap = nc;
        }
        (*buf)[n++] = (char)c;
    }
    if (c == EOF && n == 0) {
        return false;
    }
    if (*buf == NULL) {
        *buf = rill_malloc(RILL_MEM_OTHER, 1);
        if (*buf == NULL) {
            *oom = true;
            return false;
        }
        *cap = 1;
    }
    if (n > 0 && (*buf)[n - 1] == '\r') {
        n--;
    }
    (*buf)[n] = '\0';
    return true;
}

int cmd_session_script(int argc, char **argv) {
    local_opts_t lo = { NULL, 0, 0, "cpu", "f16", "exact", NULL, NULL, NULL };
    int64_t cells = 8192, n_ctx = 0;
    const char *kv_mem = NULL;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &lo.model_path, "GGUF model file (default: SmolLM2-135M)", 0,
          -1 },
        { "kv-cells", NULL, CLI_INT, &cells,
          "KV cell budget (token positions) shared by all "
          "sessions",
          16, 1 << 30 },
        { "kv-mem", NULL, CLI_STRING, &kv_mem,
          "KV budget as memory (e.g. 512M, 2G): replaces "
          "--kv-cells",
          0, -1 },
        { "ctx", "-c", CLI_INT, &n_ctx, "positions a session may use, 0 = the model's context", 0,
          1 << 24 },
        { "kv-type", NULL, CLI_STRING, &lo.kv_type,
          "KV cache type of K and V: f16, f32, q8_0 or q4_0", 0, -1 },
        { "cache-type-k", NULL, CLI_STRING, &lo.cache_type_k,
          "K cache type: f32, f16, q8_0 or q4_0 (default: --kv-type's)", 0, -1 },
        { "cache-type-v", NULL, CLI_STRING, &lo.cache_type_v,
          "V cache type: f32, f16, q8_0 or q4_0 (default: --kv-type's)", 0, -1 },
        { "attn", NULL, CLI_STRING, &lo.attn,
          "attention kernel: exact (llama.cpp's non-flash bits) or flash (one-pass online "
          "softmax, O(1) memory per query)",
          0, -1 },
        { "threads", "-t", CLI_INT, &lo.threads, "compute threads, 0 = one per CPU", 0, 512 },
        { "backend", NULL, CLI_STRING, &lo.backend, "cpu (fast) or ref (plain-C oracle)", 0, -1 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts, "rill session-script [--model FILE] SCRIPT",
                       "Runs session commands from SCRIPT ('-' = stdin), one per line ('#' "
                       "starts a comment):\n"
                       "  new NAME [sinks S] [window W]          a session (S sink tokens + W "
                       "recent ones)\n"
                       "  append NAME ID ID ...                  evaluate token ids\n"
                       "  append-text NAME TEXT                  tokenize and evaluate text "
                       "(\\n \\t \\r \\\\ escapes)\n"
                       "  fork SRC DST                           DST shares SRC's pages "
                       "(copy-on-write)\n"
                       "  rollback NAME POS                      keep positions [0, POS)\n"
                       "  drop NAME                              destroy the session\n"
                       "  logits NAME                            last position's logits, one "
                       "line\n"
                       "  generate NAME N                        greedy: N ids on one line, "
                       "appended\n"
                       "  stats NAME                             one JSON line (n_seen, "
                       "n_resident, n_sink,\n"
                       "                                         kept_from, pos_next, pages, "
                       "bytes, ...)\n"
                       "  log NAME LOG [always|everysec|never]   start an ingest log for NAME "
                       "(a new file)\n"
                       "  snapshot NAME PATH                     write NAME's snapshot "
                       "atomically\n"
                       "  restore NAME PATH|- [log LOG [POLICY]] new session NAME from snapshot "
                       "PATH\n"
                       "                                         ('-': none) replaying LOG after "
                       "it; NAME\n"
                       "                                         keeps appending to LOG",
                       pos, 1, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if (n_pos != 1) {
        fprintf(stderr, "rill session-script: a SCRIPT is required\n");
        return 2;
    }
    script_t *sc = rill_calloc(RILL_MEM_OTHER, 1, sizeof *sc);
    if (sc == NULL) {
        fprintf(stderr, "rill session-script: out of memory\n");
        return 1;
    }
    sc->path = pos[0];
    FILE *f = strcmp(pos[0], "-") == 0 ? stdin : fopen(pos[0], "r");
    if (f == NULL) {
        fprintf(stderr, "rill session-script: cannot open %s\n", pos[0]);
        rill_free(sc);
        return 1;
    }
    lo.n_ctx = RILL_KV_PAGE_SIZE; /* local's own contiguous cache is unused: keep it tiny */
    int status = 1;
    char *buf = NULL;
    size_t cap = 0;
    if (local_open(&sc->l, &lo) != 0) {
        goto done;
    }
    if (kv_mem != NULL) {
        /* Bytes per cell: a K row and a V row per KV head of every layer, in the cache types. */
        const rill_hparams_t *hp = sc->l.hp;
        int64_t per_cell = (int64_t)hp->n_layer * hp->n_head_kv *
                           (rill_dtype_row_bytes(sc->l.k_type, hp->head_dim) +
                            rill_dtype_row_bytes(sc->l.v_type, hp->head_dim));
        char *end = NULL;
        double v = strtod(kv_mem, &end);
        double mul = *end == 'K' || *end == 'k'   ? 1024.0
                     : *end == 'M' || *end == 'm' ? 1048576.0
                     : *end == 'G' || *end == 'g' ? 1073741824.0
                                                  : 1.0;
        if (end == kv_mem || !(v > 0) || (mul != 1.0 && end[1] != '\0') ||
            (mul == 1.0 && *end != '\0')) {
            fprintf(stderr, "rill session-script: --kv-mem expects a size such as 512M, got '%s'\n",
                    kv_mem);
            status = 2;
            goto done;
        }
        cells = (int64_t)(v * mul / (double)per_cell);
        if (cells < 16) {
            fprintf(stderr,
                    "rill session-script: --kv-mem %s holds %lld cells of %lld bytes; "
                    "need at least 16\n",
                    kv_mem, (long long)cells, (long long)per_cell);
            status = 2;
            goto done;
        }
    }
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = cells;
    pp.n_ctx = (int32_t)n_ctx;
    pp.kv_type = sc->l.k_type;
    pp.kv_type_v = (int32_t)sc->l.v_type;
    pp.tokenizer = sc->l.tok;
    rill_err_t err = rill_session_pool_new(sc->l.fw, &pp, &sc->pool);
    if (err != RILL_OK) {
        fprintf(stderr, "rill session-script: cannot create the KV pool: %s\n", rill_strerror(err));
        goto done;
    }
    bool oom = false;
    status = 0;
    while (status == 0 && read_line(f, &buf, &cap, &oom)) {
        sc->line++;
        status = run_line(sc, buf);
        fflush(stdout);
    }
    if (oom) {
        fprintf(stderr, "rill session-script: out of memory\n");
        status = 1;
    }
done:
    for (int i = 0; i < MAX_SESSIONS; i++) {
        if (sc->ses[i].name != NULL) {
            forget(&sc->ses[i]);
        }
    }
    rill_session_pool_destroy(&sc->pool);
    local_close(&sc->l);
    if (f != stdin) {
        fclose(f);
    }
    rill_free(buf);
    rill_free(sc->ids);
    rill_free(sc);
    return status;
}
