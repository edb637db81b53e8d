/*
 * fuzz_ticks.c - libFuzzer target for the market-data and text paths of ingest/.
 *
 * Every input is read four ways, each with an oracle that aborts on a bug (not on bad input):
 *
 *   1. As msgpack ticks by a lenient decoder. Every tick it hands out must pass rill_tick_check;
 *      re-encoded with rill_tick_encode and decoded again by a strict decoder, the same ticks
 *      must come back bit for bit (the decoder neither invents nor alters values).
 *   2. By a strict decoder with reject_unknown and a max_depth taken from the input: when it
 *      accepts, the lenient decoder must have accepted the same number of ticks with none
 *      skipped.
 *   3. The decoded ticks through the rate governor (an interval and budget taken from the
 *      input): every line it writes ends in '\n', is at most RILL_MARKET_LINE_MAX bytes, and the
 *      counters add up.
 *   4. As CSV lines, and as raw text through the cleaner, whole and in chunks of a size taken
 *      from the input: both chunkings must give the same bytes, with no NUL and no control byte
 *      other than LF and TAB.
 *
 * Build and run (see fuzz/CMakeLists.txt): configure with -DRILL_FUZZ=ON -DRILL_SANITIZE=address
 * and clang, build fuzz_ticks, run it on fuzz/corpus/ticks with -dict=fuzz/ticks.dict.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rill_ingest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 4096

static rill_tick_t g_a[CAP], g_b[CAP];
static uint8_t g_enc[CAP * 96];

static void check_lines(const char *text, int64_t n) {
    if (n < 0 || (int64_t)strlen(text) != n || (n > 0 && text[n - 1] != '\n')) {
        abort();
    }
    for (const char *p = text; *p != '\0';) {
        const char *end = strchr(p, '\n');
        if (end == NULL || end - p + 1 > RILL_MARKET_LINE_MAX) {
            abort();
        }
        p = end + 1;
    }
}

static void decode_paths(const uint8_t *data, size_t size) {
    rill_tick_decoder_t *lenient = NULL, *strict = NULL;
    rill_tick_decoder_params_t sp = rill_tick_decoder_default_params();
    sp.strict = true;
    sp.reject_unknown = true;
    sp.max_depth = size > 0 ? 1 + data[0] % 31 : 8;
    if (rill_tick_decoder_new(NULL, &lenient) != RILL_OK ||
        rill_tick_decoder_new(&sp, &strict) != RILL_OK) {
        abort();
    }
    int64_t n = rill_tick_decode(lenient, data, size, g_a, CAP);
    int64_t skipped = rill_tick_decoder_stats(lenient).rejected;
    if (n > CAP || (n < 0 && n != RILL_EFORMAT && n != RILL_ERANGE && n != RILL_EFULL)) {
        abort();
    }
    int64_t ns = rill_tick_decode(strict, data, size, g_b, CAP);
    if (ns >= 0 && (ns != n || skipped != 0)) {
        abort();
    }
    for (int64_t i = 0; i < n; i++) {
        if (rill_tick_check(&g_a[i]) != RILL_OK) {
            abort();
        }
    }
    if (n > 0) {
        int64_t len = rill_tick_encode(g_a, n, true, g_enc, sizeof g_enc);
        rill_tick_decoder_t *again = NULL;
        if (len <= 0 || rill_tick_decoder_new(NULL, &again) != RILL_OK ||
            rill_tick_decode(again, g_enc, (size_t)len, g_b, CAP) != n) {
            abort();
        }
        for (int64_t i = 0; i < n; i++) {
            if (strcmp(g_a[i].symbol, g_b[i].symbol) != 0 || g_a[i].ts_ns != g_b[i].ts_ns ||
                memcmp(&g_a[i].price, &g_b[i].price, sizeof(double)) != 0 ||
                g_a[i].size != g_b[i].size || g_a[i].side != g_b[i].side) {
                abort();
            }
        }
        rill_tick_decoder_destroy(&again);

        rill_market_gov_params_t gp = rill_market_gov_default_params();
        gp.interval_ns = INT64_C(1000000) << (data[size - 1] % 12);
        gp.target_lines_per_s = 1.0 + (double)(data[size / 2] % 64);
        gp.fmt.max_symbols = 1 + data[size / 3] % 8;
        rill_market_gov_t *g = NULL;
        if (rill_market_gov_new(&gp, &g) != RILL_OK) {
            abort();
        }
        const char *text;
        for (int64_t i = 0; i < n; i++) {
            int64_t r = rill_market_gov_push(g, &g_a[i], &text);
            if (r == RILL_EFULL) {
                continue; /* more symbols than the table holds */
            }
            check_lines(text, r);
        }
        check_lines(text, rill_market_gov_advance(g, g_a[n - 1].ts_ns + gp.interval_ns, &text));
        check_lines(text, rill_market_gov_flush(g, &text));
        rill_market_gov_stats_t st = rill_market_gov_stats(g);
        if (st.ticks_in != n || st.tick_lines + st.aggregated + st.rejected != n ||
            st.lines_out != st.tick_lines + st.bars_out) {
            abort();
        }
        rill_market_gov_destroy(&g);
    }
    rill_tick_decoder_destroy(&lenient);
    rill_tick_decoder_destroy(&strict);
}

static void csv_path(const uint8_t *data, size_t size) {
    rill_tick_csv_t *c = NULL;
    if (rill_tick_csv_new(&c) != RILL_OK) {
        abort();
    }
    const char *p = (const char *)data;
    size_t left = size;
    while (left > 0) {
        const char *nl = memchr(p, '\n', left);
        size_t len = nl != NULL ? (size_t)(nl - p) + 1 : left;
        rill_tick_t t;
        if (rill_tick_csv_line(c, p, len, &t) == RILL_OK && rill_tick_check(&t) != RILL_OK) {
            abort();
        }
        p += len;
        left -= len;
    }
    rill_tick_csv_destroy(&c);
}

static size_t clean(const uint8_t *data, size_t size, size_t chunk, int32_t max_line, char *out) {
    rill_text_clean_params_t p = { .max_line = max_line };
    rill_text_clean_t *t = NULL;
    if (rill_text_clean_new(&p, &t) != RILL_OK) {
        abort();
    }
    size_t o = 0;
    for (size_t i = 0; i < size; i += chunk) {
        size_t c = chunk < size - i ? chunk : size - i;
        int64_t r = rill_text_clean_feed(t, data + i, c, out + o, RILL_TEXT_CLEAN_BOUND(c));
        if (r < 0) {
            abort();
        }
        o += (size_t)r;
    }
    int64_t r = rill_text_clean_flush(t, out + o, 16);
    if (r < 0) {
        abort();
    }
    o += (size_t)r;
    rill_text_clean_destroy(&t);
    return o;
}

static void text_path(const uint8_t *data, size_t size) {
    if (size == 0) {
        return;
    }
    size_t cap = RILL_TEXT_CLEAN_BOUND(size) + 64;
    char *a = malloc(cap), *b = malloc(cap);
    int32_t max_line = data[0] % 4 == 0 ? 0 : 1 + data[0] % 40;
    size_t na = clean(data, size, size, max_line, a);
    size_t nb = clean(data, size, 1 + data[size - 1] % 7, max_line, b);
    if (na != nb || memcmp(a, b, na) != 0) {
        abort();
    }
    for (size_t i = 0; i < na; i++) {
        unsigned char ch = (unsigned char)a[i];
        if ((ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f || ch == 0xc0 || ch == 0xc1 ||
            ch >= 0xf5) {
            abort();
        }
    }
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    decode_paths(data, size);
    csv_path(data, size);
    text_path(data, size);
    return 0;
}
