/*
 * test_wire.c - the wire module: the msgpack structure check and the str packer
 * (wire/rill_msgpack.h), UTF-8 validation and escaping (wire/rill_utf8.h), the request decoder
 * (wire/rill_proto.h), the tick record's rules and its encoder (wire/rill_tick.h) and CURVE key
 * files (wire/rill_curve.h).
 *
 * Failure paths on purpose (STYLE.md rule 26): every cut of valid msgpack, trailing bytes,
 * nesting one past the limit, counts far above the bytes left, every request error the
 * protocol names, key files of every wrong shape, the allocation of the decoder failing. Buffers
 * handed to the checks are heap blocks of exactly their length, so a read past the end is an
 * AddressSanitizer report. Expectations are independent of the code under test: msgpack is
 * built by hand or with msgpack-c, Z85 keys with this file's own encoder (checked against RFC
 * 32's example), UTF-8 judged by this file's own decoder (which computes code points, where the
 * module compares byte ranges), exhaustively over three-byte sequences.
 */
#include <check.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_wire.h"
#include "test_util.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* A heap copy of exactly n bytes (so ASan sees any read past the end). */
static void *exact(const void *p, size_t n) {
    void *q = malloc(n > 0 ? n : 1);
    ck_assert_ptr_nonnull(q);
    if (n > 0) {
        memcpy(q, p, n);
    }
    return q;
}

static rill_err_t check_exact(const void *buf, size_t len, int depth, rill_msgpack_shape_t *sh) {
    void *q = exact(buf, len);
    rill_err_t e = rill_msgpack_check(q, len, depth, sh);
    free(q);
    return e;
}

static void pk_s(msgpack_packer *pk, const char *s) {
    msgpack_pack_str_with_body(pk, s, strlen(s));
}

static bool key_is(const msgpack_object *k, const char *s) {
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(s) &&
           memcmp(k->via.str.ptr, s, k->via.str.size) == 0;
}

/* ---- the msgpack structure check ------------------------------------------------------------ */

START_TEST(msgpack_check_accepts_every_type) {
    /* one value of each type in an array, each header size class of str, bin, ext, containers */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    char big[70000];
    memset(big, 'x', sizeof big);
    msgpack_pack_array(&pk, 22);
    msgpack_pack_nil(&pk);
    msgpack_pack_true(&pk);
    msgpack_pack_false(&pk);
    msgpack_pack_int64(&pk, -1);
    msgpack_pack_int64(&pk, INT64_MIN);
    msgpack_pack_uint64(&pk, UINT64_MAX);
    msgpack_pack_float(&pk, 1.5f);
    msgpack_pack_double(&pk, 2.5);
    msgpack_pack_str_with_body(&pk, big, 31);    /* fixstr */
    msgpack_pack_str_with_body(&pk, big, 200);   /* str8 */
    msgpack_pack_str_with_body(&pk, big, 1000);  /* str16 */
    msgpack_pack_str_with_body(&pk, big, 70000); /* str32 */
    msgpack_pack_bin_with_body(&pk, big, 3);
    msgpack_pack_bin_with_body(&pk, big, 300);
    msgpack_pack_ext_with_body(&pk, big, 1, 5); /* fixext1 */
    msgpack_pack_ext_with_body(&pk, big, 3, 5); /* ext8 */
    msgpack_pack_map(&pk, 0);
    msgpack_pack_array(&pk, 0);
    msgpack_pack_array(&pk, 20); /* array16 */
    for (int i = 0; i < 20; i++) {
        msgpack_pack_int(&pk, i);
    }
    msgpack_pack_map(&pk, 16); /* map16 */
    for (int i = 0; i < 16; i++) {
        msgpack_pack_int(&pk, i);
        msgpack_pack_nil(&pk);
    }
    msgpack_pack_map(&pk, 1);
    pk_s(&pk, "k");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 7);
    msgpack_pack_int(&pk, 127);
    rill_msgpack_shape_t sh;
    ck_assert_int_eq(check_exact(sb.data, sb.size, 3, &sh), RILL_OK);
    ck_assert_int_eq(sh.top, RILL_MSGPACK_ARRAY);
    ck_assert_str_eq(sh.top_what, "array");
    ck_assert_uint_eq(sh.top_count, 22);
    /* one level less is too deep for the map's array */
    ck_assert_int_eq(check_exact(sb.data, sb.size, 2, &sh), RILL_EFORMAT);
    ck_assert_msg(strstr(rill_last_error(RILL_EFORMAT), "nested 3 deep (max_depth 2)") != NULL,
                  "%s", rill_last_error(RILL_EFORMAT));
    ck_assert_int_eq(sh.element, 20);
    /* every cut is truncated, nothing reads past it */
    for (size_t cut = 0; cut < sb.size; cut += cut < 2000 ? 1 : 997) {
        ck_assert_msg(check_exact(sb.data, cut, 3, NULL) == RILL_EFORMAT, "cut %zu", cut);
    }
    msgpack_sbuffer_destroy(&sb);

    /* scalars at the top; a map's count of pairs */
    ck_assert_int_eq(check_exact("\xc0", 1, 1, &sh), RILL_OK);
    ck_assert_int_eq(sh.top, RILL_MSGPACK_SCALAR);
    ck_assert_str_eq(sh.top_what, "nil");
    ck_assert_int_eq(check_exact("\x82\x01\x02\x03\x04", 5, 1, &sh), RILL_OK);
    ck_assert_int_eq(sh.top, RILL_MSGPACK_MAP);
    ck_assert_uint_eq(sh.top_count, 2);
}
END_TEST

START_TEST(msgpack_check_refuses_what_does_not_fit) {
    rill_msgpack_shape_t sh;
    const struct {
        const char *b;
        size_t n;
        const char *sub;
        size_t at;
    } bad[] = {
        { "", 0, "empty", SIZE_MAX },
        { "\xc1", 1, "0xc1", 0 },
        { "\x92\x01\xc1", 3, "0xc1", 2 },
        { "\xc0\xc0", 2, "1 trailing bytes", 1 },
        { "\xdd\xff\xff\xff\xff", 5, "declares 4294967295 elements with only 0 bytes", 0 },
        { "\xdf\x7f\xff\xff\xff\x01\x02", 7, "declares 2147483647 elements", 0 },
        { "\xdb\xff\xff\xff\xff"
          "abc",
          8, "str of 4294967295 bytes with 3 left", 0 },
        { "\xc6\x00\x00\x00\x05xx", 7, "bin of 5 bytes with 2 left", 0 },
        { "\xc9\x7f\xff\xff\xff\x01", 6, "ext of", 0 },
        { "\xd9", 1, "str header of 2 bytes with 1 left", 0 },
        { "\x92\xc4\x00", 3, "a value is missing", 3 },
        { "\x91\x91\x91\xc0", 4, "nested 3 deep (max_depth 2)", 2 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rill_err_t e = check_exact(bad[i].b, bad[i].n, 2, &sh);
        ck_assert_msg(e == RILL_EFORMAT, "case %zu: %d", i, (int)e);
        ck_assert_msg(strstr(rill_last_error(RILL_EFORMAT), bad[i].sub) != NULL,
                      "case %zu: '%s' lacks '%s'", i, rill_last_error(RILL_EFORMAT), bad[i].sub);
        ck_assert_msg(sh.at == bad[i].at, "case %zu: at %zu, want %zu", i, sh.at, bad[i].at);
    }
    /* the element of a top-level array where it was found */
    ck_assert_int_eq(check_exact("\x93\x01\x02\xd9\x09", 5, 2, &sh), RILL_EFORMAT);
    ck_assert_int_eq(sh.element, 2);
    /* arguments */
    ck_assert_int_eq(rill_msgpack_check(NULL, 1, 2, &sh), RILL_EINVAL);
    ck_assert_int_eq(rill_msgpack_check("\xc0", 1, 0, &sh), RILL_EINVAL);
    ck_assert_int_eq(rill_msgpack_check("\xc0", 1, RILL_MSGPACK_MAX_DEPTH + 1, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_msgpack_check("\xc0", 1, RILL_MSGPACK_MAX_DEPTH, NULL), RILL_OK);
    /* the deepest nesting msgpack-c can hold, and one more */
    char deep[RILL_MSGPACK_MAX_DEPTH + 2];
    memset(deep, 0x91, sizeof deep);
    deep[RILL_MSGPACK_MAX_DEPTH] = '\xc0';
    ck_assert_int_eq(check_exact(deep, RILL_MSGPACK_MAX_DEPTH + 1, RILL_MSGPACK_MAX_DEPTH, NULL),
                     RILL_OK);
    deep[RILL_MSGPACK_MAX_DEPTH] = '\x91';
    deep[RILL_MSGPACK_MAX_DEPTH + 1] = '\xc0';
    ck_assert_int_eq(check_exact(deep, sizeof deep, RILL_MSGPACK_MAX_DEPTH, NULL), RILL_EFORMAT);
}
END_TEST

/* ---- the tick record ------------------------------------------------------------------------ */

START_TEST(tick_check_rules) {
    /* accepted boundaries */
    const rill_tick_t ok[] = {
        test_tick("AAPL", 1, 1.0, 1, RILL_SIDE_BUY),
        test_tick("ABCDEFGHIJKLMNO", INT64_MAX, RILL_MARKET_PRICE_MAX, RILL_MARKET_SIZE_MAX,
                  RILL_SIDE_SELL),
        test_tick("BRK.B/X_1-2", 1704205800000000000, 1e-9, 200, RILL_SIDE_UNKNOWN),
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_msg(rill_tick_check(&ok[i]) == RILL_OK, "%zu: %s", i, rill_last_error(RILL_OK));
    }
    /* each field, its code and its message */
    const struct {
        rill_tick_t t;
        rill_err_t code;
        const char *sub;
    } bad[] = {
        { test_tick("", 1, 1.0, 1, RILL_SIDE_BUY), RILL_ERANGE,
          "field 'symbol': must be 1..15 bytes" },
        { test_tick("aapl", 1, 1.0, 1, RILL_SIDE_BUY), RILL_EINVAL, "byte 0 is not one of" },
        { test_tick("AA PL", 1, 1.0, 1, RILL_SIDE_BUY), RILL_EINVAL, "byte 2 is not one of" },
        { test_tick("AA\xff", 1, 1.0, 1, RILL_SIDE_BUY), RILL_EINVAL, "('AA\\xff')" },
        { test_tick("AAPL", 0, 1.0, 1, RILL_SIDE_BUY), RILL_ERANGE, "field 'ts': must be > 0" },
        { test_tick("AAPL", -5, 1.0, 1, RILL_SIDE_BUY), RILL_ERANGE, "(got -5)" },
        { test_tick("AAPL", 1, 0.0, 1, RILL_SIDE_BUY), RILL_ERANGE, "field 'price'" },
        { test_tick("AAPL", 1, -1.0, 1, RILL_SIDE_BUY), RILL_ERANGE, "(got -1)" },
        { test_tick("AAPL", 1, NAN, 1, RILL_SIDE_BUY), RILL_ERANGE, "field 'price'" },
        { test_tick("AAPL", 1, INFINITY, 1, RILL_SIDE_BUY), RILL_ERANGE, "field 'price'" },
        { test_tick("AAPL", 1, 1e11, 1, RILL_SIDE_BUY), RILL_ERANGE, "field 'price'" },
        { test_tick("AAPL", 1, 1.0, 0, RILL_SIDE_BUY), RILL_ERANGE, "field 'size': must be 1.." },
        { test_tick("AAPL", 1, 1.0, RILL_MARKET_SIZE_MAX + 1, RILL_SIDE_BUY), RILL_ERANGE,
          "'size'" },
        { test_tick("AAPL", 1, 1.0, 1, (rill_side_t)7), RILL_EINVAL, "field 'side'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rill_err_t e = rill_tick_check(&bad[i].t);
        ck_assert_msg(e == bad[i].code, "case %zu: %d (%s)", i, (int)e, rill_last_error(RILL_OK));
        ck_assert_msg(strstr(rill_last_error(RILL_OK), bad[i].sub) != NULL,
                      "case %zu: '%s' lacks '%s'", i, rill_last_error(RILL_OK), bad[i].sub);
        ck_assert_int_eq(rill_tick_check(&bad[i].t), bad[i].code);
    }
    rill_tick_t t = test_tick("AAPL", 1, 1.0, 1, RILL_SIDE_BUY);
    memset(t.symbol, 'A', sizeof t.symbol); /* no NUL */
    ck_assert_int_eq(rill_tick_check(&t), RILL_ERANGE);
    ck_assert_int_eq(rill_tick_check(NULL), RILL_EINVAL);

    /* the field checks one by one, on bytes that are not NUL-terminated */
    ck_assert_int_eq(rill_tick_check_symbol("MSFTX", 4), RILL_OK);
    ck_assert_int_eq(rill_tick_check_symbol("ABCDEFGHIJKLMNOP", 16), RILL_ERANGE);
    ck_assert_msg(strstr(rill_last_error(RILL_ERANGE), "(got 16: 'ABCDEFGHIJKLMNOP')") != NULL,
                  "%s", rill_last_error(RILL_ERANGE));
    ck_assert_int_eq(rill_tick_check_ts(1), RILL_OK);
    ck_assert_int_eq(rill_tick_check_price(RILL_MARKET_PRICE_MAX), RILL_OK);
    ck_assert_int_eq(rill_tick_check_size(RILL_MARKET_SIZE_MAX), RILL_OK);
    rill_side_t side = RILL_SIDE_BUY;
    const struct {
        const char *s;
        rill_side_t want;
    } sides[] = { { "B", RILL_SIDE_BUY },
                  { "b", RILL_SIDE_BUY },
                  { "S", RILL_SIDE_SELL },
                  { "s", RILL_SIDE_SELL },
                  { "", RILL_SIDE_UNKNOWN } };
    for (size_t i = 0; i < sizeof sides / sizeof sides[0]; i++) {
        ck_assert_int_eq(rill_tick_parse_side(sides[i].s, strlen(sides[i].s), &side), RILL_OK);
        ck_assert_int_eq(side, sides[i].want);
    }
    side = RILL_SIDE_SELL;
    ck_assert_int_eq(rill_tick_parse_side("buy", 3, &side), RILL_EINVAL);
    ck_assert_int_eq(side, RILL_SIDE_SELL); /* untouched */
    ck_assert_msg(strstr(rill_last_error(RILL_EINVAL), "must be B, S, b, s or empty (got 'buy')") !=
                      NULL,
                  "%s", rill_last_error(RILL_OK));

    /* quoting: ASCII whatever the bytes, cut after 24 */
    char q[128];
    rill_tick_quote("it's a\\b\n\x80", 10, q, sizeof q);
    ck_assert_str_eq(q, "it\\x27s a\\x5cb\\x0a\\x80");
    rill_tick_quote("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 26, q, sizeof q);
    ck_assert_str_eq(q, "ABCDEFGHIJKLMNOPQRSTUVWX...");
    rill_tick_quote("\xff\xff", 2, q, 6); /* room for one escape only */
    ck_assert_str_eq(q, "\\xff");
    rill_tick_quote("abc", 3, NULL, 0); /* no-op */
}
END_TEST

/* n distinct valid ticks of varied symbols, prices, sizes and sides. */
static rill_tick_t *some_ticks(int n) {
    static const char *const sym[] = { "AAPL", "MSFT", "EURUSD", "BTC-USD", "BRK.B" };
    rill_tick_t *t = calloc((size_t)n, sizeof *t);
    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < n; i++) {
        t[i] = test_tick(sym[i % 5], 1704205800000000000 + (int64_t)i * 1000003, 1.0 + i * 0.37,
                         1 + (i * 7919) % 100000, (rill_side_t)(i % 3));
    }
    return t;
}

START_TEST(tick_encode) {
    enum { N = 500 };
    rill_tick_t *t = some_ticks(N);
    size_t cap = 96 * N;
    uint8_t *buf = malloc(cap);
    int64_t c0 = rill_mem_calls();
    int64_t len = rill_tick_encode(t, N, true, buf, cap);
    ck_assert_int_gt(len, 0);
    ck_assert_int_eq(rill_mem_calls(), c0); /* allocates nothing */
    ck_assert_int_eq(rill_tick_encode(t, N, true, buf, (size_t)len - 1), RILL_EFULL);
    ck_assert_int_eq(rill_tick_encode(t, N, true, buf, 0), RILL_EFULL);
    ck_assert_int_eq(rill_tick_encode(t, N, true, buf, (size_t)len), len);

    /* the form: an array of maps, keys in order, price float64, side absent when unknown */
    ck_assert_int_eq(check_exact(buf, (size_t)len, 2, NULL), RILL_OK);
    msgpack_zone z;
    msgpack_zone_init(&z, 4096);
    msgpack_object o;
    size_t off = 0;
    ck_assert_int_eq(msgpack_unpack((const char *)buf, (size_t)len, &off, &z, &o),
                     MSGPACK_UNPACK_SUCCESS);
    ck_assert_uint_eq(off, (size_t)len);
    ck_assert_int_eq(o.type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(o.via.array.size, N);
    static const char *const keys[] = { "symbol", "ts", "price", "size", "side" };
    for (int i = 0; i < N; i++) {
        const msgpack_object *m = &o.via.array.ptr[i];
        ck_assert_int_eq(m->type, MSGPACK_OBJECT_MAP);
        ck_assert_uint_eq(m->via.map.size, t[i].side == RILL_SIDE_UNKNOWN ? 4 : 5);
        for (uint32_t k = 0; k < m->via.map.size; k++) {
            ck_assert(key_is(&m->via.map.ptr[k].key, keys[k]));
        }
        const msgpack_object_kv *kv = m->via.map.ptr;
        ck_assert(key_is(&kv[0].val, t[i].symbol));
        ck_assert_int_eq(kv[1].val.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
        ck_assert_int_eq((int64_t)kv[1].val.via.u64, t[i].ts_ns);
        ck_assert_int_eq(kv[2].val.type, MSGPACK_OBJECT_FLOAT64);
        ck_assert(memcmp(&kv[2].val.via.f64, &t[i].price, sizeof(double)) == 0);
        ck_assert_int_eq((int64_t)kv[3].val.via.u64, t[i].size);
        if (t[i].side != RILL_SIDE_UNKNOWN) {
            ck_assert(key_is(&kv[4].val, t[i].side == RILL_SIDE_BUY ? "B" : "S"));
        }
    }
    msgpack_zone_destroy(&z);

    /* one map: the bytes of the batch's first element */
    int64_t one = rill_tick_encode(t, 1, false, buf + len, cap - (size_t)len);
    ck_assert_int_gt(one, 0);
    ck_assert(memcmp(buf + len, buf + 3, (size_t)one) == 0); /* after the array16 header */
    ck_assert_int_eq(rill_tick_encode(t, 0, true, buf, cap), 1);
    ck_assert_int_eq(buf[0], 0x90);

    /* invalid ticks and bad arguments */
    rill_tick_t bad = t[0];
    bad.size = 0;
    ck_assert_int_eq(rill_tick_encode(&bad, 1, false, buf, cap), RILL_EINVAL);
    t[N - 1].price = NAN; /* the last of a batch is checked too */
    ck_assert_int_eq(rill_tick_encode(t, N, true, buf, cap), RILL_EINVAL);
    ck_assert_int_eq(rill_tick_encode(t, 2, false, buf, cap), RILL_EINVAL);
    ck_assert_int_eq(rill_tick_encode(NULL, 1, true, buf, cap), RILL_EINVAL);
    ck_assert_int_eq(rill_tick_encode(t, 1, true, NULL, cap), RILL_EINVAL);
    ck_assert_int_eq(rill_tick_encode(t, -1, true, buf, cap), RILL_EINVAL);
    free(buf);
    free(t);
}
END_TEST

/* ---- the request decoder -------------------------------------------------------------------- */

/* A request {v, id, cmd, args} with args given as (key, packer callback) pairs. */
typedef struct req {
    msgpack_sbuffer sb;
    msgpack_packer pk;
    void *copy; /* the exact copy decoded: the request's strings point into it */
} req_t;

static void req_begin(req_t *r, const char *cmd, int n_args) {
    r->copy = NULL;
    msgpack_sbuffer_init(&r->sb);
    msgpack_packer_init(&r->pk, &r->sb, msgpack_sbuffer_write);
    msgpack_pack_map(&r->pk, 4);
    pk_s(&r->pk, "v");
    msgpack_pack_int(&r->pk, 1);
    pk_s(&r->pk, "id");
    msgpack_pack_uint64(&r->pk, 77);
    pk_s(&r->pk, "cmd");
    pk_s(&r->pk, cmd);
    pk_s(&r->pk, "args");
    msgpack_pack_map(&r->pk, (size_t)n_args);
}

static rill_err_t decode(rill_proto_dec_t *d, req_t *r, rill_proto_req_t *out) {
    free(r->copy);
    r->copy = exact(r->sb.data, r->sb.size);
    return rill_proto_decode(d, r->copy, r->sb.size, out);
}

static void req_end(req_t *r) {
    msgpack_sbuffer_destroy(&r->sb);
    free(r->copy);
    r->copy = NULL;
}

static bool str_is(rill_proto_str_t s, const char *want) {
    return s.len == strlen(want) && memcmp(s.p, want, s.len) == 0;
}

START_TEST(proto_decodes_every_command) {
    rill_proto_dec_t *d = NULL;
    ck_assert_int_eq(rill_proto_dec_new(1 << 20, &d), RILL_OK);
    rill_proto_req_t r;
    req_t q;

    req_begin(&q, "session.create", 4);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "news-1.a_B");
    pk_s(&q.pk, "window");
    msgpack_pack_int(&q.pk, 512);
    pk_s(&q.pk, "sinks");
    msgpack_pack_int(&q.pk, 4);
    pk_s(&q.pk, "system");
    pk_s(&q.pk, "be brief");
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_int_eq(r.cmd, RILL_PROTO_SESSION_CREATE);
    ck_assert_uint_eq(r.id, 77);
    ck_assert_uint_eq(r.present, RILL_PROTO_HAS_SESSION | RILL_PROTO_HAS_WINDOW |
                                     RILL_PROTO_HAS_SINKS | RILL_PROTO_HAS_SYSTEM);
    ck_assert(str_is(r.session, "news-1.a_B") && str_is(r.system, "be brief"));
    ck_assert_int_eq(r.window, 512);
    ck_assert_int_eq(r.sinks, 4);
    req_end(&q);

    req_begin(&q, "session.create", 1);
    pk_s(&q.pk, "model");
    pk_s(&q.pk, "asr-whisper.base");
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_uint_eq(r.present, RILL_PROTO_HAS_MODEL);
    ck_assert(str_is(r.model, "asr-whisper.base"));
    req_end(&q);

    req_begin(&q, "ingest.replace", 3);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "from_version");
    msgpack_pack_uint64(&q.pk, (uint64_t)INT64_MAX);
    pk_s(&q.pk, "text");
    pk_s(&q.pk, "");
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_int_eq(r.cmd, RILL_PROTO_INGEST_REPLACE);
    ck_assert_str_eq(rill_proto_cmd_name(r.cmd), "ingest.replace");
    ck_assert_int_eq(r.from_version, INT64_MAX);
    ck_assert_uint_eq(r.text.len, 0);
    req_end(&q);

    req_begin(&q, "ingest.text", 3);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "text");
    pk_s(&q.pk, "caf\xc3\xa9");
    pk_s(&q.pk, "flush");
    msgpack_pack_true(&q.pk);
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_int_eq(r.cmd, RILL_PROTO_INGEST_TEXT);
    ck_assert(str_is(r.text, "caf\xc3\xa9") && r.flush);
    req_end(&q);

    /* session.create's asr; ingest.audio's packet fields, and a flush alone */
    req_begin(&q, "session.create", 1);
    pk_s(&q.pk, "asr");
    pk_s(&q.pk, "whisper-tiny.en");
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_uint_eq(r.present, RILL_PROTO_HAS_ASR);
    ck_assert(str_is(r.asr, "whisper-tiny.en"));
    req_end(&q);
    req_begin(&q, "ingest.audio", 6);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "codec");
    pk_s(&q.pk, "opus");
    pk_s(&q.pk, "rate");
    msgpack_pack_uint32(&q.pk, 48000);
    pk_s(&q.pk, "channels");
    msgpack_pack_uint8(&q.pk, 2);
    pk_s(&q.pk, "seq");
    msgpack_pack_uint64(&q.pk, (uint64_t)INT64_MAX - 1);
    pk_s(&q.pk, "data");
    msgpack_pack_bin(&q.pk, 3);
    msgpack_pack_bin_body(&q.pk, "\x01\x00\xff", 3);
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_int_eq(r.cmd, RILL_PROTO_INGEST_AUDIO);
    ck_assert_str_eq(rill_proto_cmd_name(r.cmd), "ingest.audio");
    ck_assert_uint_eq(r.present, RILL_PROTO_HAS_SESSION | RILL_PROTO_HAS_PACKET);
    ck_assert(str_is(r.codec, "opus") && !r.flush);
    ck_assert_int_eq(r.rate, 48000);
    ck_assert_int_eq(r.channels, 2);
    ck_assert_int_eq(r.seq, INT64_MAX - 1);
    ck_assert_uint_eq(r.data_len, 3);
    ck_assert(memcmp(r.data, "\x01\x00\xff", 3) == 0);
    req_end(&q);
    req_begin(&q, "ingest.audio", 2);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "flush");
    msgpack_pack_true(&q.pk);
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert(r.flush && !(r.present & RILL_PROTO_HAS_PACKET));
    req_end(&q);
    /* refused: no packet and no flush, half a packet, data as str, seq past the range */
    req_begin(&q, "ingest.audio", 1);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    ck_assert_int_eq(decode(d, &q, &r), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "flush: true"));
    req_end(&q);
    req_begin(&q, "ingest.audio", 2);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "codec");
    pk_s(&q.pk, "pcm16");
    ck_assert_int_eq(decode(d, &q, &r), RILL_EINVAL);
    req_end(&q);
    req_begin(&q, "ingest.audio", 2);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "data");
    pk_s(&q.pk, "abc");
    ck_assert_int_eq(decode(d, &q, &r), RILL_EFORMAT);
    req_end(&q);
    req_begin(&q, "ingest.audio", 2);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "seq");
    msgpack_pack_uint64(&q.pk, (uint64_t)INT64_MAX);
    ck_assert_int_eq(decode(d, &q, &r), RILL_ERANGE);
    req_end(&q);

    /* ingest.ticks: the array comes back re-packed, byte for byte here (canonical input) */
    rill_tick_t t[2] = { test_tick("AAPL", 5, 187.5, 100, RILL_SIDE_BUY),
                         test_tick("MSFT", 6, 401.25, 3, RILL_SIDE_UNKNOWN) };
    uint8_t ticks[256];
    int64_t tl = rill_tick_encode(t, 2, true, ticks, sizeof ticks);
    ck_assert_int_gt(tl, 0);
    req_begin(&q, "ingest.ticks", 2);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "ticks");
    msgpack_sbuffer_write(&q.sb, (const char *)ticks, (size_t)tl);
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_int_eq(r.cmd, RILL_PROTO_INGEST_TICKS);
    ck_assert_uint_eq(r.ticks_len, (size_t)tl);
    ck_assert(memcmp(r.ticks, ticks, (size_t)tl) == 0);
    req_end(&q);

    req_begin(&q, "ask", 3);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "question");
    pk_s(&q.pk, "why?");
    pk_s(&q.pk, "max_tokens");
    msgpack_pack_int(&q.pk, RILL_PROTO_MAX_TOKENS);
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_int_eq(r.cmd, RILL_PROTO_ASK);
    ck_assert(str_is(r.question, "why?"));
    ck_assert_int_eq(r.max_tokens, RILL_PROTO_MAX_TOKENS);
    ck_assert(!(r.present & RILL_PROTO_HAS_CONSISTENCY) && !r.evaluated);
    req_end(&q);
    for (int evaluated = 0; evaluated < 2; evaluated++) {
        req_begin(&q, "ask", 3);
        pk_s(&q.pk, "session");
        pk_s(&q.pk, "s");
        pk_s(&q.pk, "question");
        pk_s(&q.pk, "why?");
        pk_s(&q.pk, "consistency");
        pk_s(&q.pk, evaluated ? "evaluated" : "acknowledged");
        ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
        ck_assert(r.present & RILL_PROTO_HAS_CONSISTENCY);
        ck_assert_int_eq(r.evaluated, evaluated);
        req_end(&q);
    }

    req_begin(&q, "standing.unregister", 2);
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    pk_s(&q.pk, "qid");
    msgpack_pack_uint64(&q.pk, UINT64_MAX);
    ck_assert_msg(decode(d, &q, &r) == RILL_OK, "%s", rill_last_error(RILL_OK));
    ck_assert_uint_eq(r.qid, UINT64_MAX);
    req_end(&q);

    /* commands without arguments: args empty, nil or absent */
    for (int c = 0; c < RILL_PROTO_N_CMDS; c++) {
        ck_assert_ptr_nonnull(rill_proto_cmd_name((rill_proto_cmd_t)c));
    }
    ck_assert_ptr_null(rill_proto_cmd_name(RILL_PROTO_N_CMDS));
    req_begin(&q, "server.stats", 0);
    ck_assert_int_eq(decode(d, &q, &r), RILL_OK);
    ck_assert_int_eq(r.cmd, RILL_PROTO_SERVER_STATS);
    req_end(&q);
    req_begin(&q, "server.metrics", 0);
    ck_assert_int_eq(decode(d, &q, &r), RILL_OK);
    ck_assert_int_eq(r.cmd, RILL_PROTO_SERVER_METRICS);
    ck_assert_str_eq(rill_proto_cmd_name(RILL_PROTO_SERVER_METRICS), "server.metrics");
    req_end(&q);
    req_begin(&q, "server.metrics", 1); /* it takes no argument */
    pk_s(&q.pk, "session");
    pk_s(&q.pk, "s");
    ck_assert_int_eq(decode(d, &q, &r), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "server.metrics takes no argument"));
    req_end(&q);
    static const char no_args[] = "\x83\xa1v\x01\xa2id\x05\xa3"
                                  "cmd\xacsession.list";
    ck_assert_int_eq(rill_proto_decode(d, no_args, sizeof no_args - 1, &r), RILL_OK);
    ck_assert_int_eq(r.cmd, RILL_PROTO_SESSION_LIST);
    ck_assert_uint_eq(r.id, 5);
    rill_proto_dec_destroy(&d);
    ck_assert_ptr_null(d);
    rill_proto_dec_destroy(&d); /* NULL-safe */
}
END_TEST

/* complete: a prompt or messages, sampling numbers in range, stop strings; each bad one is
 * refused with its reason. */
static void complete_one(rill_proto_dec_t *d, const char *json_like, void (*fn)(msgpack_packer *),
                         rill_err_t want, const char *sub) {
    req_t q;
    req_begin(&q, "complete", 1);
    fn(&q.pk);
    rill_proto_req_t r;
    rill_err_t e = decode(d, &q, &r);
    ck_assert_msg(e == want, "%s: %d (%s)", json_like, (int)e, rill_last_error(RILL_OK));
    if (sub != NULL) {
        ck_assert_msg(strstr(rill_last_error(RILL_OK), sub) != NULL, "%s: '%s' lacks '%s'",
                      json_like, rill_last_error(RILL_OK), sub);
    }
    req_end(&q);
}

static void c_temp_nan(msgpack_packer *pk) {
    pk_s(pk, "temperature");
    msgpack_pack_double(pk, NAN);
}
static void c_temp_high(msgpack_packer *pk) {
    pk_s(pk, "temperature");
    msgpack_pack_double(pk, 2.5);
}
static void c_top_p_zero(msgpack_packer *pk) {
    pk_s(pk, "top_p");
    msgpack_pack_double(pk, 0.0);
}
static void c_stop_five(msgpack_packer *pk) {
    pk_s(pk, "stop");
    msgpack_pack_array(pk, 5);
    for (int i = 0; i < 5; i++) {
        pk_s(pk, "x");
    }
}
static void c_stop_empty(msgpack_packer *pk) {
    pk_s(pk, "stop");
    msgpack_pack_array(pk, 1);
    pk_s(pk, "");
}
static void c_msgs_role(msgpack_packer *pk) {
    pk_s(pk, "messages");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 2);
    pk_s(pk, "role");
    pk_s(pk, "robot");
    pk_s(pk, "content");
    pk_s(pk, "hi");
}
static void c_msgs_empty(msgpack_packer *pk) {
    pk_s(pk, "messages");
    msgpack_pack_array(pk, 0);
}
static void c_msgs_key(msgpack_packer *pk) {
    pk_s(pk, "messages");
    msgpack_pack_array(pk, 1);
    msgpack_pack_map(pk, 3);
    pk_s(pk, "role");
    pk_s(pk, "user");
    pk_s(pk, "content");
    pk_s(pk, "hi");
    pk_s(pk, "tool");
    pk_s(pk, "x");
}
static void c_seed_neg(msgpack_packer *pk) {
    pk_s(pk, "seed");
    msgpack_pack_int64(pk, -1);
}

START_TEST(proto_decodes_complete) {
    rill_proto_dec_t *d = NULL;
    ck_assert_int_eq(rill_proto_dec_new(1 << 20, &d), RILL_OK);
    req_t q;
    rill_proto_req_t r;
    req_begin(&q, "complete", 7);
    pk_s(&q.pk, "messages");
    msgpack_pack_array(&q.pk, 2);
    msgpack_pack_map(&q.pk, 2);
    pk_s(&q.pk, "role");
    pk_s(&q.pk, "system");
    pk_s(&q.pk, "content");
    pk_s(&q.pk, "Be brief.");
    msgpack_pack_map(&q.pk, 3);
    pk_s(&q.pk, "content");
    pk_s(&q.pk, "Hi");
    pk_s(&q.pk, "role");
    pk_s(&q.pk, "user");
    pk_s(&q.pk, "name");
    pk_s(&q.pk, "ann");
    pk_s(&q.pk, "temperature");
    msgpack_pack_double(&q.pk, 0.5);
    pk_s(&q.pk, "top_p");
    msgpack_pack_int(&q.pk, 1);
    pk_s(&q.pk, "seed");
    msgpack_pack_uint64(&q.pk, 42);
    pk_s(&q.pk, "stop");
    msgpack_pack_array(&q.pk, 2);
    pk_s(&q.pk, "\n");
    pk_s(&q.pk, "END");
    pk_s(&q.pk, "max_tokens");
    msgpack_pack_int(&q.pk, 9);
    pk_s(&q.pk, "model");
    pk_s(&q.pk, "m1");
    ck_assert_int_eq(decode(d, &q, &r), RILL_OK);
    ck_assert_int_eq(r.cmd, RILL_PROTO_COMPLETE);
    ck_assert_str_eq(rill_proto_cmd_name(RILL_PROTO_COMPLETE), "complete");
    ck_assert_int_eq(r.n_messages, 2);
    ck_assert(str_is(r.messages[0].role, "system") && str_is(r.messages[0].content, "Be brief."));
    ck_assert(str_is(r.messages[1].role, "user") && str_is(r.messages[1].content, "Hi"));
    ck_assert(r.present & RILL_PROTO_HAS_MESSAGES);
    ck_assert(!(r.present & RILL_PROTO_HAS_PROMPT));
    ck_assert(r.present & RILL_PROTO_HAS_TEMPERATURE);
    ck_assert(r.temperature == 0.5 && r.top_p == 1.0 && r.seed == 42);
    ck_assert_int_eq(r.n_stop, 2);
    ck_assert(str_is(r.stop[0], "\n") && str_is(r.stop[1], "END"));
    ck_assert_int_eq(r.max_tokens, 9);
    ck_assert(str_is(r.model, "m1"));
    req_end(&q);
    req_begin(&q, "complete", 1);
    pk_s(&q.pk, "prompt");
    pk_s(&q.pk, "Once upon");
    ck_assert_int_eq(decode(d, &q, &r), RILL_OK);
    ck_assert(str_is(r.prompt, "Once upon") && (r.present & RILL_PROTO_HAS_PROMPT));
    ck_assert(!(r.present & (RILL_PROTO_HAS_TEMPERATURE | RILL_PROTO_HAS_SEED)));
    ck_assert_int_eq(r.n_stop, 0);
    req_end(&q);
    complete_one(d, "temperature NaN", c_temp_nan, RILL_ERANGE, "temperature");
    complete_one(d, "temperature 2.5", c_temp_high, RILL_ERANGE, "[0, 2]");
    complete_one(d, "top_p 0", c_top_p_zero, RILL_ERANGE, "(0, 1]");
    complete_one(d, "5 stops", c_stop_five, RILL_EFORMAT, "at most 4");
    complete_one(d, "empty stop", c_stop_empty, RILL_EINVAL, "stop[0]");
    complete_one(d, "role robot", c_msgs_role, RILL_EINVAL, "messages[0]");
    complete_one(d, "no messages", c_msgs_empty, RILL_EFORMAT, "1..256");
    complete_one(d, "key tool", c_msgs_key, RILL_EINVAL, "keys are role, content");
    complete_one(d, "seed -1", c_seed_neg, RILL_EFORMAT, "seed");
    rill_proto_dec_destroy(&d);
}
END_TEST

/* Decodes a request of cmd with one argument (key, packed by fn) and expects code and sub. */
typedef void (*pack_fn)(msgpack_packer *pk);

static void expect_req(rill_proto_dec_t *d, const char *cmd, const char *key, pack_fn fn,
                       rill_err_t code, const char *sub) {
    req_t q;
    bool session = strcmp(cmd, "session.create") != 0 && strcmp(cmd, "server.stats") != 0 &&
                   strcmp(key, "session") != 0;
    req_begin(&q, cmd, session ? 2 : 1);
    if (session) {
        pk_s(&q.pk, "session");
        pk_s(&q.pk, "s");
    }
    pk_s(&q.pk, key);
    fn(&q.pk);
    rill_proto_req_t r;
    rill_err_t e = decode(d, &q, &r);
    ck_assert_msg(e == code, "%s %s: %d (%s), want %d", cmd, key, (int)e, rill_last_error(RILL_OK),
                  (int)code);
    ck_assert_msg(strstr(rill_last_error(RILL_OK), sub) != NULL, "%s %s: '%s' lacks '%s'", cmd, key,
                  rill_last_error(RILL_OK), sub);
    ck_assert_uint_eq(r.id, 77); /* every error reply can carry the id */
    req_end(&q);
}

static void p_int5(msgpack_packer *pk) {
    msgpack_pack_int(pk, 5);
}
static void p_neg(msgpack_packer *pk) {
    msgpack_pack_int(pk, -1);
}
static void p_zero(msgpack_packer *pk) {
    msgpack_pack_int(pk, 0);
}
static void p_big(msgpack_packer *pk) {
    msgpack_pack_int(pk, RILL_PROTO_MAX_WINDOW + 1);
}
static void p_tokens_big(msgpack_packer *pk) {
    msgpack_pack_int(pk, RILL_PROTO_MAX_TOKENS + 1);
}
static void p_empty(msgpack_packer *pk) {
    pk_s(pk, "");
}
static void p_bad_name(msgpack_packer *pk) {
    pk_s(pk, "a b");
}
static void p_long_name(msgpack_packer *pk) {
    char n[RILL_PROTO_MAX_NAME + 2];
    memset(n, 'n', sizeof n - 1);
    n[sizeof n - 1] = '\0';
    pk_s(pk, n);
}
static void p_u64_big(msgpack_packer *pk) {
    msgpack_pack_uint64(pk, (uint64_t)INT64_MAX + 1);
}
static void p_model_64(msgpack_packer *pk) {
    char n[RILL_PROTO_MAX_NAME + 1];
    memset(n, 'm', sizeof n - 1); /* 64 bytes: a session name, one too long for a model */
    n[sizeof n - 1] = '\0';
    pk_s(pk, n);
}
static void p_map(msgpack_packer *pk) {
    msgpack_pack_map(pk, 0);
}
static void p_long_str(msgpack_packer *pk) {
    static char s[RILL_PROTO_MAX_STR + 1];
    memset(s, 'q', sizeof s);
    msgpack_pack_str_with_body(pk, s, sizeof s);
}

START_TEST(proto_refuses_bad_requests) {
    rill_proto_dec_t *d = NULL;
    ck_assert_int_eq(rill_proto_dec_new(1 << 20, &d), RILL_OK);
    expect_req(d, "session.stats", "session", p_bad_name, RILL_EINVAL, "args.session: 1..64");
    expect_req(d, "session.stats", "session", p_long_name, RILL_EINVAL, "args.session: 1..64");
    expect_req(d, "session.stats", "session", p_int5, RILL_EFORMAT, "must be a string");
    expect_req(d, "session.create", "window", p_neg, RILL_EFORMAT, "unsigned integer");
    expect_req(d, "session.create", "window", p_big, RILL_ERANGE, "args.window: 1048577");
    expect_req(d, "ask", "question", p_empty, RILL_EINVAL, "args.question: empty");
    expect_req(d, "ask", "question", p_long_str, RILL_ERANGE, "args.question: 65537 bytes");
    expect_req(d, "ask", "max_tokens", p_zero, RILL_ERANGE, "outside [1, 1024]");
    expect_req(d, "ask", "max_tokens", p_tokens_big, RILL_ERANGE, "outside [1, 1024]");
    expect_req(d, "ask", "consistency", p_empty, RILL_EINVAL, "\"acknowledged\" or \"evaluated\"");
    expect_req(d, "ask", "consistency", p_bad_name, RILL_EINVAL, "args.consistency");
    expect_req(d, "ask", "consistency", p_int5, RILL_EFORMAT, "args.consistency: must be a string");
    expect_req(d, "standing.register", "consistency", p_empty, RILL_EINVAL,
               "takes no argument 'consistency'");
    expect_req(d, "standing.unregister", "qid", p_zero, RILL_EFORMAT, "positive integer");
    expect_req(d, "ingest.text", "flush", p_int5, RILL_EFORMAT, "boolean");
    expect_req(d, "session.create", "model", p_bad_name, RILL_EINVAL, "args.model: 1..63");
    expect_req(d, "session.create", "model", p_model_64, RILL_EINVAL, "args.model: 1..63");
    expect_req(d, "session.create", "model", p_int5, RILL_EFORMAT, "args.model: must be a");
    expect_req(d, "ask", "model", p_empty, RILL_EINVAL, "ask takes no argument 'model'");
    expect_req(d, "ingest.replace", "from_version", p_zero, RILL_ERANGE, "outside [1, 2^63)");
    expect_req(d, "ingest.replace", "from_version", p_u64_big, RILL_ERANGE, "outside [1, 2^63)");
    expect_req(d, "ingest.replace", "from_version", p_neg, RILL_EFORMAT, "unsigned integer");
    expect_req(d, "ingest.replace", "from_version", p_int5, RILL_EINVAL,
               "ingest.replace needs args.text");
    expect_req(d, "ingest.ticks", "ticks", p_map, RILL_EFORMAT, "array of tick maps");
    expect_req(d, "ask", "text", p_empty, RILL_EINVAL, "ask takes no argument 'text'");
    expect_req(d, "session.stats", "bogus", p_int5, RILL_EINVAL, "takes no argument 'bogus'");
    expect_req(d, "session.close", "flush", p_int5, RILL_EINVAL, "takes no argument 'flush'");
    expect_req(d, "ingest.text", "flush", p_map, RILL_EFORMAT, "args.flush");
    expect_req(d, "ingest.tex", "session", p_empty, RILL_EINVAL, "unknown command 'ingest.tex'");
    /* echoed names are cut at 40 bytes, at a character boundary: the é across byte 40 goes */
    char name[48], want[64];
    memset(name, 'x', 39);
    snprintf(name + 39, sizeof name - 39, "\xc3\xa9");
    snprintf(want, sizeof want, "command '%.39s'", name);
    expect_req(d, name, "session", p_empty, RILL_EINVAL, want);
    snprintf(want, sizeof want, "takes no argument '%.39s'", name);
    expect_req(d, "session.stats", name, p_int5, RILL_EINVAL, want);
    /* bytes that are not UTF-8 stay in the message: the sender's packer escapes them */
    expect_req(d, "ingest.t\xbbxt", "session", p_empty, RILL_EINVAL, "'ingest.t\xbbxt'");

    rill_proto_req_t r;
    static const char needs[] = "\x84\xa1v\x01\xa2id\x09\xa3"
                                "cmd\xa3"
                                "ask\xa4"
                                "args\x81\xa7session\xa1s";
    ck_assert_int_eq(rill_proto_decode(d, needs, sizeof needs - 1, &r), RILL_EINVAL);
    ck_assert_str_eq(rill_last_error(RILL_EINVAL), "ask needs args.question");
    ck_assert_uint_eq(r.id, 9);
    /* the envelope: id first, then v, then the rest */
    const struct {
        const char *b;
        size_t n;
        rill_err_t code;
        const char *msg;
        uint64_t id;
    } env[] = {
#define LIT(s) s, sizeof(s) - 1
        { LIT("\x82\xa1v\x01\xa3"
              "cmd\xa1x"),
          RILL_EINVAL, "id: an unsigned integer below 2^63 is required", 0 },
        { LIT("\x83\xa1v\x01\xa2id\xff\xa3"
              "cmd\xa1x"),
          RILL_EFORMAT, "id: an unsigned integer below 2^63 is required", 0 },
        { LIT("\x83\xa1v\x01\xa2id\xcf\x80\x00\x00\x00\x00\x00\x00\x00\xa3"
              "cmd\xa1x"),
          RILL_EFORMAT, "below 2^63", 0 },
        { LIT("\x83\xa1v\x02\xa2id\x03\xa1z\x01"), RILL_EUNSUPPORTED,
          "protocol version 2 (this is 1)", 3 },
        { LIT("\x83\xa1v\x01\xa2id\x03\xa1z\x01"), RILL_EINVAL, "unknown key in the request", 3 },
        { LIT("\x84\xa1v\x01\xa2id\x03\xa2id\x04\xa3"
              "cmd\xa1x"),
          RILL_EINVAL, "a key given twice", 3 },
        { LIT("\x82\xa1v\x01\xa2id\x03"), RILL_EINVAL, "cmd: a string is required", 3 },
        { LIT("\x82\xa2id\x03\xa3"
              "cmd\xa1x"),
          RILL_EINVAL, "v: the protocol version is required", 3 },
        { LIT("\x84\xa1v\x01\xa2id\x03\xa3"
              "cmd\xacserver.stats\xa4"
              "args\x05"),
          RILL_EFORMAT, "args: must be a map", 3 },
        { LIT("\x92\x01\x02"), RILL_EFORMAT, "the request must be a map", 0 },
        { LIT("\x81\xa1v"), RILL_EFORMAT, "truncated", 0 },
#undef LIT
    };
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        void *b = exact(env[i].b, env[i].n);
        rill_err_t e = rill_proto_decode(d, b, env[i].n, &r);
        free(b);
        ck_assert_msg(e == env[i].code, "case %zu: %d (%s)", i, (int)e, rill_last_error(RILL_OK));
        ck_assert_msg(strstr(rill_last_error(RILL_OK), env[i].msg) != NULL, "case %zu: '%s'", i,
                      rill_last_error(RILL_OK));
        ck_assert_uint_eq(r.id, env[i].id);
    }
    /* a frame above the decoder's limit, before it is looked at */
    rill_proto_dec_t *small = NULL;
    ck_assert_int_eq(rill_proto_dec_new(16, &small), RILL_OK);
    ck_assert_int_eq(rill_proto_decode(small, needs, sizeof needs - 1, &r), RILL_ERANGE);
    ck_assert_msg(strstr(rill_last_error(RILL_ERANGE), "at most 16") != NULL, "%s",
                  rill_last_error(RILL_ERANGE));
    rill_proto_dec_destroy(&small);
    /* arguments */
    ck_assert_int_eq(rill_proto_dec_new(15, &small), RILL_EINVAL);
    ck_assert_int_eq(rill_proto_dec_new(1024, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_proto_decode(NULL, needs, 3, &r), RILL_EINVAL);
    ck_assert_int_eq(rill_proto_decode(d, NULL, 3, &r), RILL_EINVAL);
    ck_assert_int_eq(rill_proto_decode(d, needs, 3, NULL), RILL_EINVAL);
    rill_proto_dec_destroy(&d);

    /* the decoder's allocation failing: RILL_ENOMEM, *out NULL, nothing left allocated */
    int64_t live = rill_mem_stats_total().n_live;
    rill_mem_fail_nth(1);
    rill_proto_dec_t *x = (rill_proto_dec_t *)&live;
    ck_assert_int_eq(rill_proto_dec_new(1024, &x), RILL_ENOMEM);
    rill_mem_fail_nth(0);
    ck_assert_ptr_null(x);
    ck_assert_int_eq(rill_mem_stats_total().n_live, live);
}
END_TEST

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* An independent UTF-8 decoder, written the other way round from wire/utf8.c's byte ranges:
 * it assembles the code point from the lead byte's length class and then judges the value.
 * Returns the length of the valid character at s[0, n), or 0. */
static size_t ref_char_len(const unsigned char *s, size_t n) {
    static const struct {
        unsigned mask, lead;
        size_t len;
        uint32_t min;
    } cls[] = { { 0x80, 0x00, 1, 0 },
                { 0xe0, 0xc0, 2, 0x80 },
                { 0xf0, 0xe0, 3, 0x800 },
                { 0xf8, 0xf0, 4, 0x10000 } };
    if (n == 0) {
        return 0;
    }
    for (size_t k = 0; k < 4; k++) {
        if ((s[0] & cls[k].mask) != cls[k].lead) {
            continue;
        }
        if (n < cls[k].len) {
            return 0;
        }
        uint32_t cp = s[0] & (0x7fu >> k) & (k == 0 ? 0x7f : 0xff);
        for (size_t i = 1; i < cls[k].len; i++) {
            if ((s[i] & 0xc0) != 0x80) {
                return 0;
            }
            cp = cp << 6 | (s[i] & 0x3f);
        }
        bool ok = cp >= cls[k].min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
        return ok ? cls[k].len : 0;
    }
    return 0;
}

static bool ref_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t l = ref_char_len((const unsigned char *)s + i, n - i);
        if (l == 0) {
            return false;
        }
        i += l;
    }
    return true;
}

/* Undoes the escape (for inputs without a backslash of their own). */
static size_t unescape(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 3 < n && s[i + 1] == 'x') {
            unsigned v = 0;
            if (sscanf(s + i + 2, "%2x", &v) != 1) {
                ck_abort_msg("not an escape at %zu", i);
            }
            out[o++] = (char)v;
            i += 3;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

static void expect_escape(const char *in, size_t n, const char *want) {
    char out[512];
    int64_t r = rill_utf8_escape(in, n, out, sizeof out);
    ck_assert_int_ge(r, 0);
    ck_assert_msg((size_t)r == strlen(want) && memcmp(out, want, (size_t)r) == 0,
                  "escape gave '%s', want '%s'", out, want);
    ck_assert_uint_eq(rill_utf8_escaped_len(in, n), (size_t)r);
    ck_assert(ref_valid(out, (size_t)r));
}

START_TEST(utf8_valid_text_is_unchanged) {
    /* every boundary of every length class, NUL, and text */
    static const char *const ok[] = {
        "",
        "plain ASCII, with controls \t\r\n\x01\x7f",
        "\xc2\x80",         /* U+0080 */
        "\xdf\xbf",         /* U+07FF */
        "\xe0\xa0\x80",     /* U+0800 */
        "\xed\x9f\xbf",     /* U+D7FF, below the surrogates */
        "\xee\x80\x80",     /* U+E000, above them */
        "\xef\xbf\xbf",     /* U+FFFF */
        "\xf0\x90\x80\x80", /* U+10000 */
        "\xf4\x8f\xbf\xbf", /* U+10FFFF, the last */
        "caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac 5 \xf0\x9f\x98\x80", /* café naïve € 😀 */
        "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",                     /* 日本語 */
        "a\\x80 is kept as it is",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t n = strlen(ok[i]);
        size_t bad = 99;
        ck_assert_msg(rill_utf8_valid(ok[i], n, &bad), "%zu", i);
        ck_assert_uint_eq(bad, 99); /* untouched */
        ck_assert(ref_valid(ok[i], n));
        expect_escape(ok[i], n, ok[i]);
    }
    ck_assert(rill_utf8_valid("a\0b", 3, NULL)); /* U+0000 is a character */
    char out[8];
    ck_assert_int_eq(rill_utf8_escape("a\0b", 3, out, sizeof out), 3);
    ck_assert(memcmp(out, "a\0b", 4) == 0);
    ck_assert(rill_utf8_valid(NULL, 0, NULL));
    ck_assert_uint_eq(rill_utf8_char_len("\xf0\x9f\x98\x80", 4), 4);
    ck_assert_uint_eq(rill_utf8_char_len("\xf0\x9f\x98\x80", 3), 0); /* cut short */
    ck_assert_uint_eq(rill_utf8_char_len(NULL, 4), 0);
    ck_assert_uint_eq(rill_utf8_char_len("a", 0), 0);
}
END_TEST

START_TEST(utf8_invalid_bytes_are_escaped) {
    static const struct {
        const char *in, *want;
        size_t bad_at;
    } cases[] = {
        { "\x80", "\\x80", 0 },                            /* a stray continuation byte */
        { "ab\xbf", "ab\\xbf", 2 },                        /* another */
        { "\xc0\xaf", "\\xc0\\xaf", 0 },                   /* overlong '/' in two bytes */
        { "\xc1\xbf", "\\xc1\\xbf", 0 },                   /* overlong U+007F */
        { "\xe0\x80\xaf", "\\xe0\\x80\\xaf", 0 },          /* overlong in three */
        { "\xe0\x9f\xbf", "\\xe0\\x9f\\xbf", 0 },          /* overlong U+07FF */
        { "\xf0\x80\x80\xaf", "\\xf0\\x80\\x80\\xaf", 0 }, /* overlong in four */
        { "\xf0\x8f\xbf\xbf", "\\xf0\\x8f\\xbf\\xbf", 0 }, /* overlong U+FFFF */
        { "\xed\xa0\x80", "\\xed\\xa0\\x80", 0 },          /* U+D800, a surrogate */
        { "x\xed\xbf\xbf", "x\\xed\\xbf\\xbf", 1 },        /* U+DFFF */
        { "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80", 0 }, /* U+110000 */
        { "\xf5\x80\x80\x80", "\\xf5\\x80\\x80\\x80", 0 }, /* F5: never a lead */
        { "\xf7\xbf\xbf\xbf", "\\xf7\\xbf\\xbf\\xbf", 0 },
        { "\xf8\x88\x80\x80\x80", "\\xf8\\x88\\x80\\x80\\x80", 0 }, /* five-byte forms */
        { "\xfe\xff", "\\xfe\\xff", 0 },
        { "end \xe2\x82", "end \\xe2\\x82", 4 }, /* cut short by the end */
        { "\xf0\x9f\x98", "\\xf0\\x9f\\x98", 0 },
        { "\xc3", "\\xc3", 0 },
        { "\xe2\x82"
          "A",
          "\\xe2\\x82"
          "A",
          0 }, /* cut short by a byte that cannot go on */
        { "\xc3(", "\\xc3(", 0 },
        { "\xf0\x9f"
          "\xc3\xa9",
          "\\xf0\\x9f\xc3\xa9", 0 }, /* the é after it stays */
        { "caf\xc3\xa9 \xff ok \xf0\x9f\x98\x80", "caf\xc3\xa9 \\xff ok \xf0\x9f\x98\x80", 6 },
        { "ingest.t\xbbxt", "ingest.t\\xbbxt", 8 }, /* the hostile-frame finding */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in), bad = 99;
        ck_assert_msg(!rill_utf8_valid(cases[i].in, n, &bad), "case %zu", i);
        ck_assert_msg(bad == cases[i].bad_at, "case %zu: bad at %zu", i, bad);
        ck_assert(!ref_valid(cases[i].in, n));
        expect_escape(cases[i].in, n, cases[i].want);
    }
    /* a short buffer, at every size: RILL_EFULL; then arguments */
    const char *in = "a\xff\xc3\xa9";
    char out[16];
    for (size_t cap = 0; cap <= 7; cap++) {
        ck_assert_int_eq(rill_utf8_escape(in, 4, out, cap), RILL_EFULL);
    }
    ck_assert_int_eq(rill_utf8_escape(in, 4, out, 8), 7);
    ck_assert_str_eq(out, "a\\xff\xc3\xa9");
    ck_assert_int_eq(rill_utf8_escape(in, 4, NULL, 8), RILL_EINVAL);
    ck_assert_int_eq(rill_utf8_escape(NULL, 4, out, 8), RILL_EINVAL);
    ck_assert_int_eq(rill_utf8_escape(NULL, 0, out, 1), 0);
    ck_assert_int_eq(rill_utf8_escape("", 0, out, 0), RILL_EFULL);
}
END_TEST

START_TEST(utf8_agrees_with_an_independent_decoder) {
    /* every sequence of up to three bytes that starts with a lead or a stray byte, and every
       four-byte one of the F0..F7 leads whose last byte is at an edge of its range */
    unsigned char b[4];
    for (unsigned c0 = 0x80; c0 <= 0xff; c0++) {
        for (unsigned c1 = 0; c1 <= 0xff; c1++) {
            for (unsigned c2 = 0; c2 <= 0xff; c2++) {
                b[0] = (unsigned char)c0;
                b[1] = (unsigned char)c1;
                b[2] = (unsigned char)c2;
                size_t want = ref_char_len(b, 3);
                if (rill_utf8_char_len((const char *)b, 3) != want) {
                    ck_abort_msg("%02x %02x %02x: %zu, want %zu", c0, c1, c2,
                                 rill_utf8_char_len((const char *)b, 3), want);
                }
                if (c0 >= 0xf0 && c0 <= 0xf7 && c1 >= 0x80 && c1 <= 0xbf) {
                    static const unsigned last[] = { 0x00, 0x7f, 0x80, 0xbf, 0xc0, 0xff };
                    for (size_t k = 0; k < sizeof last / sizeof last[0]; k++) {
                        b[3] = (unsigned char)last[k];
                        if (rill_utf8_char_len((const char *)b, 4) != ref_char_len(b, 4)) {
                            ck_abort_msg("%02x %02x %02x %02x", c0, c1, c2, last[k]);
                        }
                    }
                }
            }
        }
    }
    /* random strings of valid characters and stray bytes: the escape is always valid, keeps
       valid input as it is, and undoes to the input */
    rill_rand_t rng;
    rill_rand_seed(&rng, 0x9e3779b97f4a7c15ull);
    char in[64], out[64 * 4 + 1], back[64];
    static const char *const pieces[] = {
        "a", " ", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf"
    };
    for (int round = 0; round < 200000; round++) {
        size_t n = 0;
        size_t want = test_rand_below(&rng, 40);
        while (n < want) {
            if (test_rand_below(&rng, 3) == 0) {
                unsigned char c = (unsigned char)(rill_rand_next(&rng) >> 56);
                in[n++] = (char)(c == '\\' ? 'b' : c);
            } else {
                const char *p = pieces[test_rand_below(&rng, 7)];
                size_t l = strlen(p);
                if (n + l > sizeof in) {
                    break;
                }
                memcpy(in + n, p, l);
                n += l;
            }
        }
        /* plain ifs: a passing ck_assert costs a write to Check's log, 10^6 of them seconds */
        bool valid = ref_valid(in, n);
        int64_t r = rill_utf8_escape(in, n, out, sizeof out);
        bool ok = rill_utf8_valid(in, n, NULL) == valid && r >= 0 && ref_valid(out, (size_t)r) &&
                  rill_utf8_escaped_len(in, n) == (size_t)r &&
                  (!valid || (r == (int64_t)n && memcmp(out, in, n) == 0)) &&
                  unescape(out, (size_t)r, back) == n && memcmp(back, in, n) == 0;
        if (!ok) {
            ck_abort_msg("round %d: %zu bytes in, %lld out", round, n, (long long)r);
        }
    }
}
END_TEST

START_TEST(utf8_cut_keeps_characters_whole) {
    char s[64];
    memset(s, 'x', 39);
    memcpy(s + 39, "\xc3\xa9", 2); /* é across byte 40 */
    ck_assert_uint_eq(rill_utf8_cut(s, 41, 40), 39);
    ck_assert_uint_eq(rill_utf8_cut(s, 41, 41), 41);
    ck_assert_uint_eq(rill_utf8_cut(s, 41, 39), 39);
    /* a four-byte character crossing the cut at each of its inner bytes */
    const char *e = "ab\xf0\x9f\x98\x80"
                    "cd";
    for (size_t max = 3; max <= 5; max++) {
        ck_assert_uint_eq(rill_utf8_cut(e, 8, max), 2);
    }
    ck_assert_uint_eq(rill_utf8_cut(e, 8, 2), 2);
    ck_assert_uint_eq(rill_utf8_cut(e, 8, 6), 6);
    ck_assert_uint_eq(rill_utf8_cut(e, 8, 7), 7);
    ck_assert_uint_eq(rill_utf8_cut("\xe2\x82\xac", 3, 1), 0);
    ck_assert_uint_eq(rill_utf8_cut("\xe2\x82\xac", 3, 0), 0);
    /* bytes that are not a character are cut anywhere (they are escaped one by one) */
    ck_assert_uint_eq(rill_utf8_cut("ab\xe2\x82"
                                    "cd",
                                    6, 3),
                      3);
    ck_assert_uint_eq(rill_utf8_cut("a\x80\x80\x80\x80", 5, 3), 3);
    ck_assert_uint_eq(rill_utf8_cut("abc", 3, 10), 3);
}
END_TEST

/* A writer that fails once `left` bytes are used up. */
typedef struct lim {
    msgpack_sbuffer sb;
    size_t left;
} lim_t;

static int lim_write(void *data, const char *buf, size_t len) {
    lim_t *l = data;
    if (len > l->left) {
        return -1;
    }
    l->left -= len;
    return msgpack_sbuffer_write(&l->sb, buf, len);
}

/* Packs in[0, n) with rill_msgpack_pack_str and checks what msgpack-c reads back. */
static void expect_pack(const char *in, size_t n, size_t hdr, uint8_t type) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(rill_msgpack_pack_str(&pk, in, n), 0);
    size_t elen = rill_utf8_escaped_len(in, n);
    ck_assert_uint_eq(sb.size, hdr + elen);
    ck_assert_int_eq((uint8_t)sb.data[0] & (hdr == 1 ? 0xe0 : 0xff), type);
    rill_msgpack_shape_t sh;
    ck_assert_msg(rill_msgpack_check_utf8(sb.data, sb.size, 1, &sh) == RILL_OK, "%s",
                  rill_last_error(RILL_OK));
    msgpack_zone z;
    msgpack_zone_init(&z, 1024);
    msgpack_object o;
    size_t off = 0;
    ck_assert_int_eq(msgpack_unpack(sb.data, sb.size, &off, &z, &o), MSGPACK_UNPACK_SUCCESS);
    ck_assert_int_eq(o.type, MSGPACK_OBJECT_STR);
    char *want = malloc(elen + 1);
    ck_assert_int_eq(rill_utf8_escape(in, n, want, elen + 1), (int64_t)elen);
    ck_assert(o.via.str.size == elen && (elen == 0 || memcmp(o.via.str.ptr, want, elen) == 0));
    free(want);
    msgpack_zone_destroy(&z);
    msgpack_sbuffer_destroy(&sb);
}

START_TEST(msgpack_pack_str_sends_only_utf8) {
    expect_pack("", 0, 1, 0xa0);
    expect_pack(NULL, 0, 1, 0xa0);
    expect_pack("caf\xc3\xa9", 5, 1, 0xa0);
    expect_pack("unknown command 'ingest.t\xbbxt'", 29, 2, 0xd9); /* 32 escaped: str8 */
    /* the header follows the escaped length across each size class */
    static char bad[20000];
    memset(bad, 0xff, sizeof bad);
    expect_pack(bad, 7, 1, 0xa0);     /* 28 bytes: fixstr */
    expect_pack(bad, 8, 2, 0xd9);     /* 32: str8 */
    expect_pack(bad, 63, 2, 0xd9);    /* 252 */
    expect_pack(bad, 64, 3, 0xda);    /* 256: str16 */
    expect_pack(bad, 16383, 3, 0xda); /* 65532 */
    expect_pack(bad, 16384, 5, 0xdb); /* 65536: str32 */
    memcpy(bad + 100, "ok \xe2\x82\xac", 6);
    expect_pack(bad, 200, 3, 0xda);
    /* a writer that fails at any byte: a nonzero return, never a crash */
    const char *in = "ab\xff\xc3\xa9\xed\xa0\x80z";
    size_t total = 1 + rill_utf8_escaped_len(in, strlen(in));
    for (size_t left = 0; left < total; left++) {
        lim_t l = { .left = left };
        msgpack_sbuffer_init(&l.sb);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &l, lim_write);
        ck_assert_int_ne(rill_msgpack_pack_str(&pk, in, strlen(in)), 0);
        msgpack_sbuffer_destroy(&l.sb);
    }
    lim_t l = { .left = total };
    msgpack_sbuffer_init(&l.sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &l, lim_write);
    ck_assert_int_eq(rill_msgpack_pack_str(&pk, in, strlen(in)), 0);
    msgpack_sbuffer_destroy(&l.sb);
    ck_assert_int_ne(rill_msgpack_pack_str(NULL, "a", 1), 0);
    ck_assert_int_ne(rill_msgpack_pack_str(&pk, NULL, 1), 0);
}
END_TEST

START_TEST(msgpack_check_utf8_refuses_bad_strs) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    pk_s(&pk, "message");
    pk_s(&pk, "caf\xc3\xa9");
    pk_s(&pk, "result");
    msgpack_pack_bin_with_body(&pk, "\xff\xfe", 2); /* bin is bytes: not checked */
    rill_msgpack_shape_t sh;
    ck_assert_int_eq(check_exact(sb.data, sb.size, 2, &sh), RILL_OK);
    void *q = exact(sb.data, sb.size);
    ck_assert_int_eq(rill_msgpack_check_utf8(q, sb.size, 2, &sh), RILL_OK);
    free(q);
    msgpack_sbuffer_destroy(&sb);

    /* a value, a key, a str8, a str inside an array: the structure check passes, this not */
    const struct {
        const char *b;
        size_t n;
        size_t at;
        const char *sub;
    } bad[] = {
        { "\x81\xa1k\xa3"
          "ab\xff",
          7, 3, "str of 3 bytes is not valid UTF-8 (byte 6)" },
        { "\x81\xa2\xc0\xaf\x01", 5, 1, "(byte 2)" },
        { "\xd9\x02\xed\xa0", 4, 0, "str of 2 bytes" },
        { "\x92\x01\xa2\xe2\x82", 5, 2, "(byte 3)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(check_exact(bad[i].b, bad[i].n, 2, NULL), RILL_OK);
        q = exact(bad[i].b, bad[i].n);
        rill_err_t e = rill_msgpack_check_utf8(q, bad[i].n, 2, &sh);
        free(q);
        ck_assert_msg(e == RILL_EFORMAT, "case %zu", i);
        ck_assert_msg(sh.at == bad[i].at, "case %zu: at %zu", i, sh.at);
        ck_assert_msg(strstr(rill_last_error(RILL_EFORMAT), bad[i].sub) != NULL, "case %zu: '%s'",
                      i, rill_last_error(RILL_OK));
    }
    /* structure errors come out as from rill_msgpack_check */
    ck_assert_int_eq(rill_msgpack_check_utf8("\xc1", 1, 2, &sh), RILL_EFORMAT);
    ck_assert_msg(strstr(rill_last_error(RILL_EFORMAT), "0xc1") != NULL, "%s",
                  rill_last_error(RILL_EFORMAT));
    ck_assert_int_eq(rill_msgpack_check_utf8(NULL, 1, 2, &sh), RILL_EINVAL);
}
END_TEST

/* ---- CURVE key files ------------------------------------------------------------------------ */

static const char k_z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/"
                            "*?&<>()[]{}@%$#";

/* RFC 32's encoding, written out here so that the module's decoder is checked against it. */
static void z85_encode(const uint8_t *raw, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = (uint32_t)raw[i] << 24 | (uint32_t)raw[i + 1] << 16 |
                     (uint32_t)raw[i + 2] << 8 | raw[i + 3];
        for (int k = 4; k >= 0; k--) {
            out[o + (size_t)k] = k_z85[v % 85];
            v /= 85;
        }
        o += 5;
    }
    out[o] = '\0';
}

static char g_dir[64];

/* Writes file `name` of the test's directory; returns its path (test_path_in). */
static const char *write_file(const char *name, const void *data, size_t n) {
    const char *path = test_path_in(g_dir, name);
    test_write_file(path, data, n);
    return path;
}

START_TEST(curve_key_files) {
    static const uint8_t hello[8] = { 0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B };
    char enc[64];
    z85_encode(hello, 8, enc);
    ck_assert_str_eq(enc, "HelloWorld"); /* RFC 32's example */
    uint8_t raw[32], got[32];
    for (int i = 0; i < 32; i++) {
        raw[i] = (uint8_t)(i * 37 + 11);
    }
    raw[0] = 0xff; /* the largest group values too */
    raw[1] = 0xff;
    raw[2] = 0xff;
    raw[3] = 0xff;
    char key[41];
    z85_encode(raw, 32, key);
    ck_assert_uint_eq(strlen(key), 40);

    ck_assert(test_tmpdir_make(g_dir, sizeof g_dir, "test-wire"));
    char z[41];
    char text[200];

    /* as rill keygen writes it, and with whitespace around */
    snprintf(text, sizeof text, "%s\n", key);
    const char *p = write_file("a.pub", text, strlen(text));
    memset(got, 0, sizeof got);
    ck_assert_int_eq(rill_curve_key_read(p, z, got), RILL_OK);
    ck_assert_str_eq(z, key);
    ck_assert(memcmp(got, raw, 32) == 0);
    snprintf(text, sizeof text, " \t\r\n%s\r\n\n  ", key);
    p = write_file("b.pub", text, strlen(text));
    ck_assert_int_eq(rill_curve_key_read(p, z, NULL), RILL_OK);
    ck_assert_str_eq(z, key);
    ck_assert_int_eq(rill_curve_key_read(p, NULL, NULL), RILL_OK);

    /* files that are not one key: each RILL_EFORMAT, the outputs untouched */
    char padded[RILL_CURVE_KEY_FILE + 100];
    memset(padded, ' ', sizeof padded);
    memcpy(padded, key, 40);
    const struct {
        const char *name;
        const char *data;
        size_t n;
    } bad[] = {
        { "empty", "", 0 },
        { "blank", " \n\n", 3 },
        { "short", key, 39 },
        { "two", "", 0 }, /* filled below */
        { "long", padded, sizeof padded },
        { "nul", "", 0 }, /* filled below */
        { "tilde", "", 0 },
        { "overflow", "", 0 },
    };
    char two[100], nul[41], tilde[41], over[41];
    snprintf(two, sizeof two, "%s %s\n", key, key);
    memcpy(nul, key, 41);
    nul[20] = '\0';
    memcpy(tilde, key, 41);
    tilde[5] = '~'; /* not in Z85's alphabet */
    memcpy(over, key, 41);
    memcpy(over, "%%%%%", 5); /* 85^5 - 1 > 2^32 - 1 */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *data = bad[i].data;
        size_t n = bad[i].n;
        if (strcmp(bad[i].name, "two") == 0) {
            data = two;
            n = strlen(two);
        } else if (strcmp(bad[i].name, "nul") == 0) {
            data = nul;
            n = 40;
        } else if (strcmp(bad[i].name, "tilde") == 0) {
            data = tilde;
            n = 40;
        } else if (strcmp(bad[i].name, "overflow") == 0) {
            data = over;
            n = 40;
        }
        p = write_file(bad[i].name, data, n);
        strcpy(z, "untouched");
        memset(got, 7, sizeof got);
        rill_err_t e = rill_curve_key_read(p, z, got);
        ck_assert_msg(e == RILL_EFORMAT, "%s: %d", bad[i].name, (int)e);
        ck_assert_msg(strstr(rill_last_error(RILL_EFORMAT), p) != NULL &&
                          strstr(rill_last_error(RILL_EFORMAT), "not a Z85 key file") != NULL,
                      "%s", rill_last_error(RILL_EFORMAT));
        ck_assert_str_eq(z, "untouched");
        ck_assert_int_eq(got[0], 7);
        if (strcmp(bad[i].name, "long") != 0) { /* a key and whitespace: too long as a file only */
            ck_assert_int_eq(rill_curve_key_parse(data, n, z, got), RILL_EFORMAT);
        }
    }
    ck_assert_int_eq(rill_curve_key_parse(key, 40, z, got), RILL_OK);
    ck_assert(memcmp(got, raw, 32) == 0);
    ck_assert_int_eq(rill_curve_key_parse(key, 41, z, got), RILL_EFORMAT); /* the NUL */
    ck_assert_int_eq(rill_curve_key_parse(NULL, 1, z, got), RILL_EINVAL);
    ck_assert_int_eq(rill_curve_key_parse(NULL, 0, z, got), RILL_EFORMAT);

    /* files that cannot be read */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing.key", g_dir);
    ck_assert_int_eq(rill_curve_key_read(missing, z, got), RILL_EIO);
    ck_assert_msg(strstr(rill_last_error(RILL_EIO), missing) != NULL &&
                      strstr(rill_last_error(RILL_EIO), "No such file") != NULL,
                  "%s", rill_last_error(RILL_EIO));
    ck_assert_int_eq(rill_curve_key_read(g_dir, z, got), RILL_EIO);
    ck_assert_msg(strstr(rill_last_error(RILL_EIO), "directory") != NULL, "%s",
                  rill_last_error(RILL_EIO));
    ck_assert_int_eq(rill_curve_key_read(NULL, z, got), RILL_EINVAL);

    const char *names[] = { "a.pub", "b.pub", "empty", "blank", "short",
                            "two",   "long",  "nul",   "tilde", "overflow" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        unlink(test_path_in(g_dir, names[i]));
    }
    ck_assert_int_eq(rmdir(g_dir), 0); /* nothing else was left there */
}
END_TEST

int main(void) {
    Suite *su = suite_create("wire");
    TCase *mp = tcase_create("msgpack");
    tcase_set_timeout(mp, 60);
    tcase_add_test(mp, msgpack_check_accepts_every_type);
    tcase_add_test(mp, msgpack_check_refuses_what_does_not_fit);
    suite_add_tcase(su, mp);
    TCase *tk = tcase_create("tick");
    tcase_set_timeout(tk, 60);
    tcase_add_test(tk, tick_check_rules);
    tcase_add_test(tk, tick_encode);
    suite_add_tcase(su, tk);
    TCase *pr = tcase_create("proto");
    tcase_set_timeout(pr, 60);
    tcase_add_test(pr, proto_decodes_every_command);
    tcase_add_test(pr, proto_decodes_complete);
    tcase_add_test(pr, proto_refuses_bad_requests);
    suite_add_tcase(su, pr);
    TCase *u8 = tcase_create("utf8");
    tcase_set_timeout(u8, 120);
    tcase_add_test(u8, utf8_valid_text_is_unchanged);
    tcase_add_test(u8, utf8_invalid_bytes_are_escaped);
    tcase_add_test(u8, utf8_agrees_with_an_independent_decoder);
    tcase_add_test(u8, utf8_cut_keeps_characters_whole);
    tcase_add_test(u8, msgpack_pack_str_sends_only_utf8);
    tcase_add_test(u8, msgpack_check_utf8_refuses_bad_strs);
    suite_add_tcase(su, u8);
    TCase *ky = tcase_create("keys");
    tcase_set_timeout(ky, 60);
    tcase_add_test(ky, curve_key_files);
    suite_add_tcase(su, ky);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
