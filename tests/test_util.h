/*
 * test_util.h - what the C suites share: paths under the source tree and skipping without a
 * model, whole files and temporary directories, seeded random inputs from core's one generator,
 * log capture, float comparisons, and the tiny-model rig (model, tokenizer, backend, forward
 * pass, session pool) with its pool checks. One documented version of each, instead of a copy
 * per suite.
 *
 * Header only: every helper is `static inline`, so a suite compiles what it calls and links
 * nothing new. The sections that need a module's types are compiled only when that module's
 * public header was included BEFORE this one:
 *   always                 paths, files, temporary directories, random inputs, log capture,
 *                          float comparisons (rill_core only)
 *   after rill_model.h     test_model_load
 *   after rill_session.h   the rig, engines and pool checks (rill_sessions and below)
 * Include this header after the project's headers.
 *
 * Failure convention. A helper that says "Asserts" checks with Check's ck_assert: call it only
 * inside a running test (START_TEST), on the test's thread. A helper that says "Returns" never
 * asserts: it is safe in main(), in fixtures, in a forked child and on other threads. Helpers
 * abort() only on a misuse that no input can cause (a path that does not fit its buffer).
 *
 * Random inputs. The suites draw from core's generator (rill_rand.h) and have no copy of their
 * own: test_rng() is the program's xoshiro256** stream (seeded once with TEST_RNG_SEED); a test
 * that needs a stream of its own (a replay that must repeat, a thread) seeds a rill_rand_t
 * itself. Only test_kernels keeps a stream of core's splitmix64 from a fixed state, pinned
 * because tolerances there were measured on it. Streams change with the seed, never between
 * machines or compilers. No assertion may depend on which values are drawn.
 *
 * Thread safety: test_rng(), test_path_in's buffers and the log capture: one thread at a time
 * (the suites draw and log on the test's thread; a client thread uses its own rill_rand_t).
 * The rest keeps no state.
 */
#ifndef RILL_TEST_UTIL_H
#define RILL_TEST_UTIL_H

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rill_log.h"
#include "rill_rand.h"

#ifndef RILL_SOURCE_DIR
#error "RILL_SOURCE_DIR: the source tree (tests/CMakeLists.txt's rill_test defines it)"
#endif

/* The exit status that tells CTest a suite was skipped (SKIP_RETURN_CODE in rill_test). */
#define TEST_SKIP 77

/* Room for any path the suites build under the source tree or a temporary directory. */
#define TEST_PATH_MAX 1200

/* ---- paths and skipping --------------------------------------------------------------------- */

static inline void test__fits(int w, size_t cap, const char *what) {
    if (w < 0 || (size_t)w >= cap) {
        fprintf(stderr, "test_util: %s does not fit in %zu bytes\n", what, cap);
        abort();
    }
}

/* A message into msg[cap], cut to fit (messages only: never a path that is used). */
static inline __attribute__((format(printf, 3, 4))) void test__msg(char *msg, size_t cap,
                                                                   const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
}

/* Writes RILL_SOURCE_DIR "/" followed by the printf-formatted rest into out[cap] and returns
 * out, e.g. test_src_path(p, sizeof p, "tests/data/ref/%s", file). Aborts when it does not fit.
 * Returns (safe anywhere). */
static inline __attribute__((format(printf, 3, 4))) const char *
test_src_path(char *out, size_t cap, const char *fmt, ...) {
    int w = snprintf(out, cap, "%s/", RILL_SOURCE_DIR);
    test__fits(w, cap, "a source path");
    va_list ap;
    va_start(ap, fmt);
    int w2 = vsnprintf(out + w, cap - (size_t)w, fmt, ap);
    va_end(ap);
    test__fits(w2, cap - (size_t)w, "a source path");
    return out;
}

/* The path of model file `name` into out[cap], returned: tests/data/models/<name> for the tiny
 * random-weight models ("rill-tiny-*", written by tools/make_test_models.py), models/<name>
 * otherwise (the default model, placed there by scripts/setup.sh). Returns (safe anywhere). */
static inline const char *test_model_path(char *out, size_t cap, const char *name) {
    if (strncmp(name, "rill-tiny", 9) == 0) {
        return test_src_path(out, cap, "tests/data/models/%s", name);
    }
    return test_src_path(out, cap, "models/%s", name);
}

/* True in the sanitizer builds' test runs (RILL_TEST_LIGHT set by tests/CMakeLists.txt): suites
 * whose model-heavy cases repeat one code path over many clips or cycles run it over fewer there,
 * so that the three CI passes fit their budget; every path still runs once under the sanitizers,
 * and the release pass runs them all. Returns (safe anywhere). */
static inline bool test_light(void) {
    const char *v = getenv("RILL_TEST_LIGHT");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* True when path names a regular file (symbolic links followed). Returns (safe anywhere). */
static inline bool test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* True when every model of the NULL-terminated list (test_model_path names) is present.
 * Otherwise prints one line "SKIP: <path> is missing: run <what makes it>" for the first
 * missing one and returns false, so that main() can `return TEST_SKIP;`. Returns (safe
 * anywhere). */
static inline bool test_have_models(const char *name, ...) {
    va_list ap;
    va_start(ap, name);
    bool ok = true;
    for (const char *n = name; n != NULL && ok; n = va_arg(ap, const char *)) {
        char path[TEST_PATH_MAX];
        if (!test_file_exists(test_model_path(path, sizeof path, n))) {
            printf("SKIP: %s is missing: run %s\n", path,
                   strncmp(n, "rill-tiny", 9) == 0
                       ? "tools/make_test_models.py (scripts/test.sh does)"
                       : "scripts/setup.sh");
            ok = false;
        }
    }
    va_end(ap);
    return ok;
}

/* ---- files ---------------------------------------------------------------------------------- */

static inline void *test__read(const char *path, size_t *len, bool text) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    ck_assert_msg(fseek(f, 0, SEEK_END) == 0, "%s: cannot seek", path);
    long n = ftell(f);
    ck_assert_msg(n >= 0 && fseek(f, 0, SEEK_SET) == 0, "%s: cannot tell its size", path);
    size_t size = (size_t)n + (text ? 1 : 0);
    unsigned char *buf = malloc(size > 0 ? size : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_msg(fread(buf, 1, (size_t)n, f) == (size_t)n, "%s: short read", path);
    fclose(f);
    if (text) {
        buf[n] = 0;
    }
    *len = (size_t)n;
    return buf;
}

/* The whole of file `path` in a buffer of exactly its *len bytes (one for an empty file), so
 * that AddressSanitizer reports any read past the end of what the file holds. Asserts that it
 * can be opened and read. Caller owns the buffer; free() it. */
static inline void *test_read_file(const char *path, size_t *len) {
    void *buf = test__read(path, len, false);
    ck_assert_msg(buf != NULL, "cannot open %s", path);
    return buf;
}

/* The whole of text file `path` followed by a 0 byte (*len excludes it), so it is a string;
 * NULL (nothing allocated, *len untouched) when path cannot be opened. Asserts that an opened
 * file reads completely. Caller owns the buffer; free() it. */
static inline char *test_read_text_if_present(const char *path, size_t *len) {
    return test__read(path, len, true);
}

/* Creates or replaces file `path` with buf[0, len). Asserts. */
static inline void test_write_file(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_msg(fwrite(buf, 1, len, f) == len, "%s: short write", path);
    ck_assert_msg(fclose(f) == 0, "%s: close failed", path);
}

/* The size of file `path` in bytes. Asserts that it exists. */
static inline int64_t test_file_size(const char *path) {
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "cannot stat %s", path);
    return (int64_t)st.st_size;
}

/* ---- temporary directories ------------------------------------------------------------------ */

/* Creates a fresh, empty directory "/tmp/rill-<tag>-XXXXXX" (mkdtemp) and writes its path into
 * dir[cap]. Returns true, or false with the reason on stderr. Returns (safe anywhere: suites
 * make their directory in main()). Remove it with test_dir_remove(). */
static inline bool test_tmpdir_make(char *dir, size_t cap, const char *tag) {
    test__fits(snprintf(dir, cap, "/tmp/rill-%s-XXXXXX", tag), cap, "a temporary directory");
    if (mkdtemp(dir) == NULL) {
        perror("test_util: mkdtemp");
        dir[0] = '\0';
        return false;
    }
    return true;
}

/* dir "/" name, in one of 8 static buffers used in turn (so a call may take a few paths at
 * once; each stays valid for 7 more calls). Aborts when it does not fit TEST_PATH_MAX.
 * Returns (safe anywhere, on one thread at a time). */
static inline const char *test_path_in(const char *dir, const char *name) {
    static char buf[8][TEST_PATH_MAX];
    static int k;
    k = (k + 1) % 8;
    test__fits(snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name), sizeof buf[k], "a path");
    return buf[k];
}

/* Removes what is inside dir, depth first, without following links; 0 or -1 (reported). */
static inline int test__remove_below(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) {
            return 0;
        }
        fprintf(stderr, "test_util: cannot open %s: %s\n", dir, strerror(errno));
        return -1;
    }
    int r = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        char p[TEST_PATH_MAX];
        test__fits(snprintf(p, sizeof p, "%s/%s", dir, e->d_name), sizeof p, "a path");
        struct stat st;
        bool is_dir = lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
        if (is_dir && test__remove_below(p) != 0) {
            r = -1;
        }
        if ((is_dir ? rmdir(p) : unlink(p)) != 0) {
            fprintf(stderr, "test_util: cannot remove %s: %s\n", p, strerror(errno));
            r = -1;
        }
    }
    closedir(d);
    return r;
}

/* Removes everything inside dir (files, links and sub-directories, depth first; links are not
 * followed) and keeps dir itself. A missing dir is nothing to do. Returns (safe anywhere);
 * what cannot be removed is reported on stderr. */
static inline void test_dir_clear(const char *dir) {
    if (dir[0] != '\0') {
        (void)test__remove_below(dir);
    }
}

/* Removes dir and everything in it. Returns 0, or -1 with the reason on stderr (a suite may
 * ck_assert on it inside a test). Returns (safe anywhere). dir "" (a
 * test_tmpdir_make that failed) gives 0. */
static inline int test_dir_remove(const char *dir) {
    if (dir[0] == '\0') {
        return 0;
    }
    test_dir_clear(dir);
    if (rmdir(dir) != 0) {
        fprintf(stderr, "test_util: cannot remove %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- seeded random inputs ------------------------------------------------------------------- */

/* The seed of test_rng(). */
#define TEST_RNG_SEED UINT64_C(0x7e57)

/* The program's stream: core's xoshiro256** seeded with TEST_RNG_SEED at the first call, then
 * advanced by every draw. Borrowed; one thread at a time. Each suite is one program, so its
 * draws are a fixed sequence for a fixed order of tests (CK_RUN_CASE or another order gives
 * other draws: no assertion may depend on which values come out). */
static inline rill_rand_t *test_rng(void) {
    static rill_rand_t r;
    static bool seeded;
    if (!seeded) {
        rill_rand_seed(&r, TEST_RNG_SEED);
        seeded = true;
    }
    return &r;
}

/* A uniform integer in [0, n), n >= 1 (0 aborts): Lemire's multiply-shift on the high 32 bits
 * of a draw, with the rejection that makes it exactly uniform (almost always one draw). */
static inline uint32_t test_rand_below(rill_rand_t *r, uint32_t n) {
    if (n == 0) {
        fprintf(stderr, "test_util: test_rand_below(0)\n");
        abort();
    }
    uint64_t m = (rill_rand_next(r) >> 32) * (uint64_t)n;
    if ((uint32_t)m < n) {
        const uint32_t t = (uint32_t)(-n) % n; /* 2^32 mod n */
        while ((uint32_t)m < t) {
            m = (rill_rand_next(r) >> 32) * (uint64_t)n;
        }
    }
    return (uint32_t)(m >> 32);
}

/* t[0, n) = token ids uniform in [0, V), V >= 1. */
static inline void test_rand_tokens(rill_rand_t *r, int32_t *t, int n, int32_t V) {
    for (int i = 0; i < n; i++) {
        t[i] = (int32_t)test_rand_below(r, (uint32_t)V);
    }
}

/* ---- log capture ---------------------------------------------------------------------------- */

/* What the library logged while a capture was installed. Set `only` before test_log_capture
 * to keep just the messages that contain it. The library's threshold (rill_log_set_level,
 * default RILL_LOG_INFO) still applies. */
typedef struct test_log {
    const char *only;           /* NULL: every message; else only those containing it (borrowed) */
    int n;                      /* messages kept */
    int n_level[RILL_LOG_NONE]; /* of them, per rill_log_level_t */
    char last[1024];            /* the last kept message ("" before any) */
    char last_warn[1024];       /* the last kept RILL_LOG_WARN message ("" before any) */
} test_log_t;

static inline void test__log_keep(void *user, rill_log_level_t level, const char *file, int line,
                                  const char *msg) {
    (void)file;
    (void)line;
    test_log_t *c = user;
    if (c->only != NULL && strstr(msg, c->only) == NULL) {
        return;
    }
    c->n++;
    if ((int)level >= 0 && level < RILL_LOG_NONE) {
        c->n_level[level]++;
    }
    snprintf(c->last, sizeof c->last, "%s", msg);
    if (level == RILL_LOG_WARN) {
        snprintf(c->last_warn, sizeof c->last_warn, "%s", msg);
    }
}

/* Zeroes c's counts and texts (keeps c->only) and installs it as the log callback. c is
 * borrowed until test_log_release(). Returns (safe anywhere). */
static inline void test_log_capture(test_log_t *c) {
    const char *only = c->only;
    memset(c, 0, sizeof *c);
    c->only = only;
    rill_log_set(test__log_keep, c);
}

/* Zeroes c's counts and texts, keeping the capture installed (between two calls checked
 * separately). */
static inline void test_log_reset(test_log_t *c) {
    const char *only = c->only;
    memset(c, 0, sizeof *c);
    c->only = only;
}

static inline void test__log_drop(void *user, rill_log_level_t level, const char *file, int line,
                                  const char *msg) {
    (void)user;
    (void)level;
    (void)file;
    (void)line;
    (void)msg;
}

/* Installs a callback that drops every message (for a call that warns by design, e.g. once per
 * ignored tensor). Undo with test_log_release(). */
static inline void test_log_quiet(void) {
    rill_log_set(test__log_drop, NULL);
}

/* Uninstalls the capture or the quiet callback (rill_log_set(NULL, NULL): messages dropped, as
 * when a suite starts). */
static inline void test_log_release(void) {
    rill_log_set(NULL, NULL);
}

/* ---- float comparisons ---------------------------------------------------------------------- */

/* max |x[i]| over [0, n), in double (0 for n = 0); NaN when any x[i] is NaN, so that a
 * comparison `d <= tol * scale` fails on it. */
static inline double test_max_abs(const float *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) {
            return NAN;
        }
        m = fmax(m, fabs((double)x[i]));
    }
    return m;
}

/* max |a[i] - b[i]| over [0, n), the difference taken in double (exact for floats); NaN when
 * any difference is NaN (a NaN on either side, or infinities of one sign on both). */
static inline double test_max_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) {
            return NAN;
        }
        m = fmax(m, d);
    }
    return m;
}

/* The index of the largest of x[0, n), n >= 1; the first one on a tie. */
static inline int test_argmax(const float *x, int n) {
    int a = 0;
    for (int i = 1; i < n; i++) {
        a = x[i] > x[a] ? i : a;
    }
    return a;
}

/* Top-1 minus top-2 of x[0, n), n >= 2, in double: how far the arg-max leads (0 on a tie). */
static inline double test_margin(const float *x, int n) {
    int a = test_argmax(x, n);
    double second = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (i != a) {
            second = fmax(second, (double)x[i]);
        }
    }
    return (double)x[a] - second;
}

/* ---- models (after rill_model.h) ------------------------------------------------------------ */

#ifdef RILL_MODEL_H

/* Loads model file `name` (test_model_path) with params. Returns RILL_OK and *out, or the
 * loader's error with its message in msg[cap] (nothing allocated). Returns (safe anywhere). */
static inline rill_err_t test_model_try_load(const char *name, rill_model_params_t params,
                                             rill_model_t **out, char *msg, size_t cap) {
    char path[TEST_PATH_MAX];
    test_model_path(path, sizeof path, name);
    rill_err_t err = rill_model_load(path, params, out);
    if (err != RILL_OK) {
        test__msg(msg, cap, "%s: %s (%s)", path, rill_last_error(err), rill_err_name(err));
    }
    return err;
}

/* Loads model file `name` (test_model_path) with the default parameters. Asserts success,
 * naming the path and the loader's message. Caller owns the model; rill_model_destroy(). */
static inline rill_model_t *test_model_load(const char *name) {
    rill_model_t *m = NULL;
    char msg[TEST_PATH_MAX + 300];
    rill_err_t err = test_model_try_load(name, rill_model_default_params(), &m, msg, sizeof msg);
    ck_assert_msg(err == RILL_OK, "%s", msg);
    return m;
}

#endif /* RILL_MODEL_H */

/* ---- the tiny-model rig (after rill_session.h) ---------------------------------------------- */

#ifdef RILL_SESSION_H

/* Pages of the rig's contiguous cache at most (TEST_RIG_MAX_REF_TOKENS positions). */
#define TEST_RIG_MAX_REF_PAGES  256
#define TEST_RIG_MAX_REF_TOKENS (TEST_RIG_MAX_REF_PAGES * RILL_KV_PAGE_SIZE)

/* How to build a rig. Start from test_rig_default_params(); the library's own parameter
 * structs are the knobs. */
typedef struct test_rig_params {
    const char *model;               /* test_model_path name; ignored by test_rig_open_model */
    bool tokenizer;                  /* make g->tok from the model (default true) */
    bool pool_tokenizer;             /* and give it to the pool (default true; needs tokenizer) */
    rill_backend_params_t backend;   /* default: the library's, cpu.n_threads 2, max_batch 64 */
    rill_forward_params_t forward;   /* default: the library's (max_batch: the backend's) */
    rill_session_pool_params_t pool; /* default: the library's; n_cells 0: no pool. Its
                                        tokenizer field is set by the rig */
    int32_t ref_tokens; /* > 0: also a contiguous KV cache g->kv of that many positions (at most
                           TEST_RIG_MAX_REF_TOKENS) in the pool's cache types, with page table
                           g->pt, for oracles that re-prefill from position 0; default 0 */
} test_rig_params_t;

static inline test_rig_params_t test_rig_default_params(const char *model) {
    test_rig_params_t p;
    memset(&p, 0, sizeof p);
    p.model = model;
    p.tokenizer = true;
    p.pool_tokenizer = true;
    p.backend = rill_backend_default_params();
    p.backend.cpu.n_threads = 2;
    p.backend.max_batch = 64;
    p.forward = rill_forward_default_params();
    p.pool = rill_session_pool_default_params();
    return p;
}

/* A tiny model ready for sessions. Every field is owned by the rig (test_rig_close frees them
 * in order: caches, pool, forward, backend, tokenizer, model, file). */
typedef struct test_rig {
    rill_model_t *model;
    void *file; /* the in-memory GGUF the model was loaded from (test_rig_open_model), or NULL */
    rill_tokenizer_t *tok; /* NULL without params.tokenizer */
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool; /* NULL with params.pool.n_cells 0 */
    rill_kv_cache_t *kv;       /* the contiguous cache, or NULL (params.ref_tokens) */
    int32_t pages[TEST_RIG_MAX_REF_PAGES];
    rill_page_table_t pt; /* kv's pages in reverse order: no result may depend on page order */
    int32_t V;            /* n_vocab */
    int32_t L;            /* n_layer */
} test_rig_t;

/* Backend, forward pass and (p->pool.n_cells > 0) session pool on model, with tok given to the
 * pool when p->pool_tokenizer. Returns 0, or the step that failed (3 backend, 4 forward, 5
 * pool) with the library's detail in msg[cap]; on failure nothing is left and the outputs are
 * NULL. Returns (safe anywhere). */
static inline int test_engine_try(rill_model_t *model, const rill_tokenizer_t *tok,
                                  const test_rig_params_t *p, rill_backend_t **be,
                                  rill_forward_t **fw, rill_session_pool_t **pool, char *msg,
                                  size_t cap) {
    *be = NULL;
    *fw = NULL;
    *pool = NULL;
    rill_err_t err = rill_backend_new(&p->backend, be);
    if (err != RILL_OK) {
        test__msg(msg, cap, "backend: %s (%s)", rill_last_error(err), rill_err_name(err));
        return 3;
    }
    err = rill_forward_new(model, *be, &p->forward, fw);
    if (err != RILL_OK) {
        test__msg(msg, cap, "forward: %s (%s)", rill_last_error(err), rill_err_name(err));
        rill_backend_destroy(be);
        return 4;
    }
    if (p->pool.n_cells > 0) {
        rill_session_pool_params_t pp = p->pool;
        pp.tokenizer = p->pool_tokenizer ? tok : NULL;
        err = rill_session_pool_new(*fw, &pp, pool);
        if (err != RILL_OK) {
            test__msg(msg, cap, "session pool: %s (%s)", rill_last_error(err), rill_err_name(err));
            rill_forward_destroy(fw);
            rill_backend_destroy(be);
            return 5;
        }
    }
    return 0;
}

/* As test_engine_try, and asserts success: for a suite whose rig holds several engines on one
 * model. Caller owns the three; free them with test_engine_close. */
static inline void test_engine_open(rill_model_t *model, const rill_tokenizer_t *tok,
                                    const test_rig_params_t *p, rill_backend_t **be,
                                    rill_forward_t **fw, rill_session_pool_t **pool) {
    char msg[512] = "";
    int step = test_engine_try(model, tok, p, be, fw, pool, msg, sizeof msg);
    ck_assert_msg(step == 0, "engine on %s: %s", p->model != NULL ? p->model : "a model", msg);
}

/* Destroys pool, forward and backend in that order and sets them to NULL. NULL-safe. Every
 * session of the pool must have been destroyed. */
static inline void test_engine_close(rill_session_pool_t **pool, rill_forward_t **fw,
                                     rill_backend_t **be) {
    rill_session_pool_destroy(pool);
    rill_forward_destroy(fw);
    rill_backend_destroy(be);
}

/* Frees everything the rig holds (NULL fields skipped) and zeroes it. Sessions of its pool
 * must have been destroyed. */
static inline void test_rig_close(test_rig_t *g) {
    rill_kv_cache_destroy(&g->kv);
    test_engine_close(&g->pool, &g->fw, &g->be);
    rill_tokenizer_destroy(&g->tok);
    rill_model_destroy(&g->model);
    free(g->file);
    memset(g, 0, sizeof *g);
}

/* Builds the rig on model, which it takes over (with file, the buffer the model was loaded
 * from, or NULL; freed at close). Returns 0, or the step that failed (2 tokenizer, 3 backend,
 * 4 forward, 5 pool, 6 contiguous cache) with the detail in msg[cap]; on failure the model and
 * file are freed too and *g is zeroed. Returns (safe anywhere: a forked child uses it). */
static inline int test_rig_try_model(test_rig_t *g, rill_model_t *model, void *file,
                                     const test_rig_params_t *p, char *msg, size_t cap) {
    memset(g, 0, sizeof *g);
    g->model = model;
    g->file = file;
    g->V = rill_model_hparams(model)->n_vocab;
    g->L = rill_model_hparams(model)->n_layer;
    int step = 0;
    if (p->tokenizer) {
        rill_err_t err = rill_tokenizer_new(rill_model_gguf(model), &g->tok);
        if (err != RILL_OK) {
            test__msg(msg, cap, "tokenizer: %s (%s)", rill_last_error(err), rill_err_name(err));
            step = 2;
            goto fail;
        }
    }
    step = test_engine_try(model, g->tok, p, &g->be, &g->fw, &g->pool, msg, cap);
    if (step != 0) {
        goto fail;
    }
    if (p->ref_tokens > 0) {
        int32_t n_pages = (p->ref_tokens + RILL_KV_PAGE_SIZE - 1) / RILL_KV_PAGE_SIZE;
        if (n_pages > TEST_RIG_MAX_REF_PAGES ||
            rill_kv_cache_new_types(g->fw, p->pool.kv_type,
                                    p->pool.kv_type_v == RILL_SESSION_KV_SAME
                                        ? p->pool.kv_type
                                        : (rill_dtype_t)p->pool.kv_type_v,
                                    RILL_KV_PAGE_SIZE, n_pages, &g->kv) != RILL_OK) {
            test__msg(msg, cap, "contiguous cache of %d positions: %s", (int)p->ref_tokens,
                      n_pages > TEST_RIG_MAX_REF_PAGES ? "too many" : rill_last_error(RILL_OK));
            step = 6;
            goto fail;
        }
        for (int32_t i = 0; i < n_pages; i++) {
            g->pages[i] = n_pages - 1 - i;
        }
        g->pt = (rill_page_table_t){ g->pages, n_pages };
    }
    return 0;
fail:
    test_rig_close(g);
    return step;
}

/* As test_rig_try_model on model file p->model (test_model_path); step 1: the model did not
 * load. Returns (safe anywhere). */
static inline int test_rig_try(test_rig_t *g, const test_rig_params_t *p, char *msg, size_t cap) {
    memset(g, 0, sizeof *g);
    rill_model_t *m = NULL;
    if (test_model_try_load(p->model, rill_model_default_params(), &m, msg, cap) != RILL_OK) {
        return 1;
    }
    return test_rig_try_model(g, m, NULL, p, msg, cap);
}

/* test_rig_try, asserting success (the message names the model, the step and the library's
 * detail). Close with test_rig_close. */
static inline void test_rig_open(test_rig_t *g, const test_rig_params_t *p) {
    char msg[TEST_PATH_MAX + 300] = "";
    int step = test_rig_try(g, p, msg, sizeof msg);
    ck_assert_msg(step == 0, "rig on %s, step %d: %s", p->model, step, msg);
}

/* test_rig_try_model, asserting success. */
static inline void test_rig_open_model(test_rig_t *g, rill_model_t *model, void *file,
                                       const test_rig_params_t *p) {
    char msg[512] = "";
    int step = test_rig_try_model(g, model, file, p, msg, sizeof msg);
    ck_assert_msg(step == 0, "rig, step %d: %s", step, msg);
}

/* Asserts the pool's page accounting against the sessions ss[0, n) (NULL entries skipped),
 * which must be every live session of it: each page's reference count equals the number of
 * page-table entries naming it, and the free pages are exactly those named by none. */
static inline void test_pool_check(rill_session_pool_t *pool, rill_session_t *const *ss, int n) {
    int32_t n_pages = rill_session_pool_n_pages(pool);
    int32_t *count = calloc((size_t)n_pages, sizeof *count);
    ck_assert_ptr_nonnull(count);
    for (int i = 0; i < n; i++) {
        if (ss[i] == NULL) {
            continue;
        }
        int32_t np = 0;
        const int32_t *pg = rill_session_pages(ss[i], &np);
        for (int32_t j = 0; j < np; j++) {
            ck_assert_int_lt(pg[j], n_pages);
            count[pg[j]]++;
        }
    }
    int32_t n_free = 0;
    for (int32_t p = 0; p < n_pages; p++) {
        ck_assert_int_eq(rill_session_pool_page_refs(pool, p), count[p]);
        n_free += count[p] == 0;
    }
    ck_assert_int_eq(n_free, rill_session_pool_n_free(pool));
    free(count);
}

/* The page references of a whole pool, to check "the pool is as before" after a call that
 * failed (test_pool_view, then test_pool_same). */
#define TEST_POOL_VIEW_PAGES 512
typedef struct test_pool_view {
    int32_t n_pages;
    int32_t n_free;
    int32_t refs[TEST_POOL_VIEW_PAGES];
} test_pool_view_t;

/* Records pool's free count and every page's references into v. Asserts that the pool has at
 * most TEST_POOL_VIEW_PAGES pages. */
static inline void test_pool_view(rill_session_pool_t *pool, test_pool_view_t *v) {
    v->n_pages = rill_session_pool_n_pages(pool);
    ck_assert_int_le(v->n_pages, TEST_POOL_VIEW_PAGES);
    v->n_free = rill_session_pool_n_free(pool);
    for (int32_t i = 0; i < v->n_pages; i++) {
        v->refs[i] = rill_session_pool_page_refs(pool, i);
    }
}

/* Asserts that pool's free count and page references equal the view `before`. */
static inline void test_pool_same(rill_session_pool_t *pool, const test_pool_view_t *before) {
    test_pool_view_t now;
    test_pool_view(pool, &now);
    ck_assert_int_eq(now.n_pages, before->n_pages);
    ck_assert_int_eq(now.n_free, before->n_free);
    ck_assert(memcmp(now.refs, before->refs, (size_t)now.n_pages * sizeof(int32_t)) == 0);
}

#endif /* RILL_SESSION_H */

/* ---- a session's whole state (needs session_internal.h) ------------------------------------ */

#ifdef RILL_SESSION_INTERNAL_H

/* A session as captured for bit-for-bit comparisons: what two sessions given the same input in
 * different ways (replay, replace, chunks) must agree on. */
typedef struct test_state {
    rill_session_stats_t st;
    int64_t seq;
    int32_t n;
    int32_t *tokens;
    char *text;
    size_t text_len;
    bool text_started;
    float *logits;     /* NULL when the session holds no token */
    unsigned char *kv; /* resident rows: (L, 2, Hkv, n, D) elements */
    size_t kv_bytes;
} test_state_t;

/* Captures s (g: its rig): counters, version, tokens, held-back text, logits and the K/V rows
 * of every resident token, read back from the backend. Reads the logits (which computes them if
 * a rollback invalidated them). Free with test_state_free(). */
static inline void test_state_capture(test_rig_t *g, rill_session_t *s, test_state_t *out) {
    memset(out, 0, sizeof *out);
    rill_session_stats(s, &out->st);
    out->seq = rill_session_seq(s);
    const int32_t *t = rill_session_tokens(s, &out->n);
    out->tokens = malloc((size_t)out->n * sizeof *t + 1);
    memcpy(out->tokens, t, (size_t)out->n * sizeof *t);
    out->text_len = s->text_len;
    out->text = malloc(s->text_len + 1);
    if (s->text_len > 0) {
        memcpy(out->text, s->text, s->text_len);
    }
    out->text_started = s->text_started;
    if (out->n > 0) {
        const float *l = NULL;
        ck_assert_int_eq(rill_session_logits(s, &l), RILL_OK);
        out->logits = malloc((size_t)g->V * sizeof *l);
        memcpy(out->logits, l, (size_t)g->V * sizeof *l);
    }
    rill_kv_cache_t *kv = rill_session_pool_cache(g->pool);
    const rill_kv_layout_t *lay = rill_kv_cache_layout(kv);
    int64_t pb = rill_kv_page_bytes(lay);
    /* a K row and a V row of the pool's types (F32, F16 or whole Q8_0 / Q4_0 blocks) */
    const size_t krow = (size_t)rill_dtype_row_bytes(lay->k_dtype, lay->head_dim);
    const size_t vrow = (size_t)rill_dtype_row_bytes(lay->v_dtype, lay->head_dim);
    int32_t P = lay->page_size, H = lay->n_kv_heads, np = 0;
    const int32_t *pages = rill_session_pages(s, &np);
    out->kv_bytes = (size_t)g->L * (size_t)H * (size_t)out->n * (krow + vrow);
    out->kv = malloc(out->kv_bytes + 1);
    unsigned char *page = malloc((size_t)pb);
    size_t o = 0;
    for (int32_t l = 0; l < g->L; l++) {
        for (int32_t j = 0; j < np; j++) {
            ck_assert_int_eq(
                rill_backend_copy_out(g->be, page,
                                      (char *)rill_kv_cache_pool(kv, l) + (int64_t)pages[j] * pb,
                                      (size_t)pb),
                RILL_OK);
            int32_t rows = out->n - j * P < P ? out->n - j * P : P;
            for (int kvh = 0; kvh < 2 * H; kvh++) { /* K heads then V heads */
                const size_t row = kvh < H ? krow : vrow;
                const size_t at =
                    kvh < H ? (size_t)kvh * (size_t)P * krow
                            : (size_t)H * (size_t)P * krow + (size_t)(kvh - H) * (size_t)P * vrow;
                memcpy(out->kv + o, page + at, (size_t)rows * row);
                o += (size_t)rows * row;
            }
        }
    }
    ck_assert_uint_eq(o, out->kv_bytes);
    free(page);
}

static inline void test_state_free(test_state_t *a) {
    free(a->tokens);
    free(a->text);
    free(a->logits);
    free(a->kv);
    memset(a, 0, sizeof *a);
}

#endif /* RILL_SESSION_INTERNAL_H */

/* ---- tick records (needs wire/rill_tick.h) -------------------------------------------------- */

#ifdef RILL_TICK_H

/* A tick record with these fields (symbol cut to fit, the rest zero). Returns (safe anywhere). */
static inline rill_tick_t test_tick(const char *sym, int64_t ts_ns, double price, int64_t size,
                                    rill_side_t side) {
    rill_tick_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.symbol, sizeof t.symbol, "%s", sym);
    t.ts_ns = ts_ns;
    t.price = price;
    t.size = size;
    t.side = side;
    return t;
}

#endif /* RILL_TICK_H */

#endif /* RILL_TEST_UTIL_H */
