/*
 * test_testutil.c - the shared test helpers (tests/test_util.h) that need no model: every
 * suite's tolerance checks, random inputs, files and temporary directories rest on them, and a
 * helper that silently passed (a max_diff of 0, a draw out of range, a directory left behind)
 * would make other suites' assertions vacuous. The rig is exercised by every suite that builds
 * one (test_sessions*, test_scheduler).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rill_core.h"
#include "test_util.h"

START_TEST(source_and_model_paths) {
    char p[TEST_PATH_MAX];
    ck_assert_str_eq(test_src_path(p, sizeof p, "tests/%s.c", "test_testutil"),
                     RILL_SOURCE_DIR "/tests/test_testutil.c");
    ck_assert(test_file_exists(p));
    ck_assert_str_eq(test_model_path(p, sizeof p, "rill-tiny-qwen2-F32.gguf"),
                     RILL_SOURCE_DIR "/tests/data/models/rill-tiny-qwen2-F32.gguf");
    ck_assert_str_eq(test_model_path(p, sizeof p, "SmolLM2-135M-Instruct.Q4_1.gguf"),
                     RILL_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    ck_assert(!test_file_exists(RILL_SOURCE_DIR "/tests/no-such-file"));
    ck_assert(!test_file_exists(RILL_SOURCE_DIR "/tests")); /* a directory is not a file */
    ck_assert(!test_have_models("rill-tiny-no-such-model.gguf", NULL));
    ck_assert(test_have_models(NULL)); /* the empty list */
}
END_TEST

START_TEST(random_draws_are_in_range_and_uniform) {
    /* Reproducible: two generators with one seed give one stream. */
    rill_rand_t a, b;
    rill_rand_seed(&a, 42);
    rill_rand_seed(&b, 42);
    for (int i = 0; i < 1000; i++) {
        ck_assert_uint_eq(test_rand_below(&a, 1000), test_rand_below(&b, 1000));
    }
    /* Every value of a small range at the frequencies of a fair die: a chi-square test with 6
     * degrees of freedom (critical value 22.46 at p = 0.001; the seed makes it deterministic).
     * A lopsided mapping (a value never drawn, an off-by-one range, a constant) fails it. */
    int count[7] = { 0 };
    const int n = 70000;
    for (int i = 0; i < n; i++) {
        uint32_t v = test_rand_below(&a, 7);
        ck_assert_uint_lt(v, 7);
        count[v]++;
    }
    double chi2 = 0;
    for (int k = 0; k < 7; k++) {
        double e = n / 7.0;
        chi2 += (count[k] - e) * (count[k] - e) / e;
    }
    ck_assert_msg(chi2 < 22.46, "chi-square %g", chi2);
    /* The edges: n = 1 gives 0, n = 2^32 - 1 stays below it, the rejection path (a range that
     * does not divide 2^32) is taken without leaving the range. */
    for (int i = 0; i < 1000; i++) {
        ck_assert_uint_eq(test_rand_below(&a, 1), 0);
        ck_assert_uint_lt(test_rand_below(&a, UINT32_MAX), UINT32_MAX);
        ck_assert_uint_lt(test_rand_below(&a, 3000000001u), 3000000001u);
    }
    int32_t t[4096];
    test_rand_tokens(test_rng(), t, 4096, 50);
    bool seen[50] = { false };
    for (int i = 0; i < 4096; i++) {
        ck_assert(t[i] >= 0 && t[i] < 50);
        seen[t[i]] = true;
    }
    for (int k = 0; k < 50; k++) {
        ck_assert_msg(seen[k], "token %d never drawn in 4096", k);
    }
    ck_assert_ptr_eq(test_rng(), test_rng()); /* one stream per program */
}
END_TEST

START_TEST(float_comparisons) {
    const float x[4] = { 1.0f, -3.5f, 2.0f, 0.0f }, y[4] = { 1.0f, -3.0f, 2.25f, 0.0f };
    ck_assert_double_eq(test_max_abs(x, 4), 3.5);
    ck_assert_double_eq(test_max_abs(x, 0), 0.0);
    ck_assert_double_eq(test_max_diff(x, y, 4), 0.5);
    ck_assert_double_eq(test_max_diff(x, x, 4), 0.0);
    /* A NaN anywhere makes the result NaN, so `d <= tol` fails on it. */
    const float nan_at_2[4] = { 1.0f, -3.5f, NAN, 0.0f };
    ck_assert(isnan(test_max_diff(x, nan_at_2, 4)));
    ck_assert(isnan(test_max_diff(nan_at_2, x, 4)));
    ck_assert(isnan(test_max_abs(nan_at_2, 4)));
    const float inf[1] = { INFINITY };
    ck_assert(isnan(test_max_diff(inf, inf, 1)));
    ck_assert_int_eq(test_argmax(x, 4), 2);
    const float tie[3] = { 5.0f, 5.0f, 1.0f };
    ck_assert_int_eq(test_argmax(tie, 3), 0);
    ck_assert_double_eq(test_margin(tie, 3), 0.0);
    ck_assert_double_eq(test_margin(x, 4), 1.0);
}
END_TEST

START_TEST(files_and_directories) {
    char dir[TEST_PATH_MAX];
    ck_assert(test_tmpdir_make(dir, sizeof dir, "testutil"));
    ck_assert_ptr_nonnull(strstr(dir, "/tmp/rill-testutil-"));
    const char *a = test_path_in(dir, "a.bin"), *b = test_path_in(dir, "b.txt");
    ck_assert_str_ne(a, b); /* two paths in one expression */
    const unsigned char bytes[5] = { 1, 0, 2, 0, 3 };
    test_write_file(a, bytes, sizeof bytes);
    test_write_file(b, "hello", 5);
    ck_assert_int_eq(test_file_size(a), 5);
    size_t len = 0;
    unsigned char *got = test_read_file(a, &len);
    ck_assert_uint_eq(len, 5);
    ck_assert_mem_eq(got, bytes, 5);
    free(got);
    char *text = test_read_text_if_present(b, &len);
    ck_assert_uint_eq(len, 5);
    ck_assert_str_eq(text, "hello");
    free(text);
    len = 7;
    ck_assert_ptr_null(test_read_text_if_present(test_path_in(dir, "missing"), &len));
    ck_assert_uint_eq(len, 7);
    test_write_file(b, "", 0); /* an empty file reads as 0 bytes */
    got = test_read_file(b, &len);
    ck_assert_uint_eq(len, 0);
    free(got);
    /* Clearing keeps the directory and removes nested ones; removing takes it all. */
    char sub[TEST_PATH_MAX], deep[TEST_PATH_MAX];
    snprintf(sub, sizeof sub, "%s", test_path_in(dir, "sub"));
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    snprintf(deep, sizeof deep, "%s", test_path_in(sub, "deeper"));
    ck_assert_int_eq(mkdir(deep, 0700), 0);
    test_write_file(test_path_in(deep, "f"), "x", 1);
    ck_assert_int_eq(symlink(a, test_path_in(sub, "link")), 0);
    /* A link to a directory elsewhere is removed, not followed. */
    char outside[TEST_PATH_MAX];
    ck_assert(test_tmpdir_make(outside, sizeof outside, "testutil-outside"));
    test_write_file(test_path_in(outside, "kept"), "z", 1);
    ck_assert_int_eq(symlink(outside, test_path_in(dir, "dirlink")), 0);
    test_dir_clear(dir);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert_int_ne(stat(sub, &st), 0);
    ck_assert_int_ne(stat(a, &st), 0);
    ck_assert_int_ne(lstat(test_path_in(dir, "dirlink"), &st), 0);
    ck_assert(test_file_exists(test_path_in(outside, "kept")));
    ck_assert_int_eq(test_dir_remove(outside), 0);
    test_write_file(test_path_in(dir, "again"), "y", 1);
    ck_assert_int_eq(test_dir_remove(dir), 0);
    ck_assert_int_ne(stat(dir, &st), 0);
    ck_assert_int_eq(test_dir_remove(""), 0);   /* a directory never made */
    ck_assert_int_eq(test_dir_remove(dir), -1); /* gone already */
}
END_TEST

START_TEST(log_capture) {
    test_log_t log = { .only = NULL };
    test_log_capture(&log);
    RILL_LOGW("first %d", 1);
    RILL_LOGE("second");
    RILL_LOGI("third");
    ck_assert_int_eq(log.n, 3);
    ck_assert_int_eq(log.n_level[RILL_LOG_WARN], 1);
    ck_assert_int_eq(log.n_level[RILL_LOG_ERROR], 1);
    ck_assert_int_eq(log.n_level[RILL_LOG_INFO], 1);
    ck_assert_str_eq(log.last, "third");
    ck_assert_str_eq(log.last_warn, "first 1");
    test_log_reset(&log);
    ck_assert_int_eq(log.n, 0);
    ck_assert_str_eq(log.last, "");
    test_log_release();
    RILL_LOGW("not captured");
    ck_assert_int_eq(log.n, 0);
    test_log_t only = { .only = "needle" };
    test_log_capture(&only);
    RILL_LOGW("hay");
    RILL_LOGW("a needle here");
    test_log_release();
    ck_assert_int_eq(only.n, 1);
    ck_assert_str_eq(only.last_warn, "a needle here");
    ck_assert_str_eq(only.only, "needle"); /* kept through test_log_capture */
    test_log_quiet();
    RILL_LOGE("dropped");
    test_log_release();
}
END_TEST

int main(void) {
    Suite *su = suite_create("testutil");
    TCase *tc = tcase_create("testutil");
    tcase_add_test(tc, source_and_model_paths);
    tcase_add_test(tc, random_draws_are_in_range_and_uniform);
    tcase_add_test(tc, float_comparisons);
    tcase_add_test(tc, files_and_directories);
    tcase_add_test(tc, log_capture);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
