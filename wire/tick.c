/*
 * tick.c - the rules of a valid tick, in one place, and its msgpack encoding (contract:
 * rill_tick.h).
 *
 * The msgpack decoder, the CSV reader and the formatter of ingest/ and the client's encoder all
 * call these checks, so a tick is valid or not (and refused with the same code and message)
 * whatever path it took. The encoder writes into the caller's buffer through a packer whose
 * writer refuses to pass its end, so it allocates nothing and a short buffer is RILL_EFULL.
 */
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

#include "rill_tick.h"

static void put(char *why, size_t cap, const char *msg) {
    if (why != NULL && cap > 0) {
        snprintf(why, cap, "%s", msg);
    }
}

void rill_tick_quote(const char *s, size_t len, char *buf, size_t cap) {
    if (buf == NULL || cap == 0) {
        return;
    }
    size_t o = 0;
    size_t n = len > 24 ? 24 : len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char tmp[8];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
            tmp[0] = (char)c;
            tmp[1] = '\0';
        } else {
            snprintf(tmp, sizeof tmp, "\\x%02x", c);
        }
        size_t t = strlen(tmp);
        if (o + t + 1 > cap) {
            break;
        }
        memcpy(buf + o, tmp, t);
        o += t;
    }
    if (len > n && o + 4 <= cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

static bool symbol_byte(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '/' ||
           c == '-';
}

static rill_err_t check_symbol(const char *s, size_t len, char *why, size_t cap) {
    char q[128];
    if (len == 0 || len > RILL_MARKET_SYMBOL_MAX) {
        if (why != NULL && cap > 0) {
            rill_tick_quote(s, len, q, sizeof q);
            snprintf(why, cap, "field 'symbol': must be 1..%d bytes (got %zu: '%s')",
                     RILL_MARKET_SYMBOL_MAX, len, q);
        }
        return RILL_ERANGE;
    }
    for (size_t i = 0; i < len; i++) {
        if (!symbol_byte((unsigned char)s[i])) {
            if (why != NULL && cap > 0) {
                rill_tick_quote(s, len, q, sizeof q);
                snprintf(why, cap, "field 'symbol': byte %zu is not one of A-Z 0-9 . _ / - ('%s')",
                         i, q);
            }
            return RILL_EINVAL;
        }
    }
    return RILL_OK;
}

rill_err_t rill_tick_check_symbol(const char *s, size_t len) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_symbol(s, len, msg, sizeof msg), msg);
}

static rill_err_t check_ts(int64_t ts, char *why, size_t cap) {
    if (ts <= 0) {
        if (why != NULL && cap > 0) {
            snprintf(why, cap, "field 'ts': must be > 0 ns since the epoch (got %lld)",
                     (long long)ts);
        }
        return RILL_ERANGE;
    }
    return RILL_OK;
}

rill_err_t rill_tick_check_ts(int64_t ts) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_ts(ts, msg, sizeof msg), msg);
}

static rill_err_t check_price(double price, char *why, size_t cap) {
    if (!(price > 0.0 && price <= RILL_MARKET_PRICE_MAX)) { /* NaN fails too */
        if (why != NULL && cap > 0) {
            snprintf(why, cap, "field 'price': must be > 0, finite and <= %g (got %g)",
                     RILL_MARKET_PRICE_MAX, price);
        }
        return RILL_ERANGE;
    }
    return RILL_OK;
}

rill_err_t rill_tick_check_price(double price) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_price(price, msg, sizeof msg), msg);
}

static rill_err_t check_size(int64_t size, char *why, size_t cap) {
    if (size < 1 || size > RILL_MARKET_SIZE_MAX) {
        if (why != NULL && cap > 0) {
            snprintf(why, cap, "field 'size': must be 1..%lld (got %lld)",
                     (long long)RILL_MARKET_SIZE_MAX, (long long)size);
        }
        return RILL_ERANGE;
    }
    return RILL_OK;
}

rill_err_t rill_tick_check_size(int64_t size) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_size(size, msg, sizeof msg), msg);
}

static rill_err_t parse_side(const char *s, size_t len, rill_side_t *out, char *why, size_t cap) {
    if (len == 0) {
        *out = RILL_SIDE_UNKNOWN;
        return RILL_OK;
    }
    if (len == 1 && (s[0] == 'B' || s[0] == 'b')) {
        *out = RILL_SIDE_BUY;
        return RILL_OK;
    }
    if (len == 1 && (s[0] == 'S' || s[0] == 's')) {
        *out = RILL_SIDE_SELL;
        return RILL_OK;
    }
    if (why != NULL && cap > 0) {
        char q[128];
        rill_tick_quote(s, len, q, sizeof q);
        snprintf(why, cap, "field 'side': must be B, S, b, s or empty (got '%s')", q);
    }
    return RILL_EINVAL;
}

rill_err_t rill_tick_parse_side(const char *s, size_t len, rill_side_t *out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(parse_side(s, len, out, msg, sizeof msg), msg);
}

static rill_err_t check_tick(const rill_tick_t *t, char *why, size_t cap) {
    if (t == NULL) {
        put(why, cap, "tick is NULL");
        return RILL_EINVAL;
    }
    const char *nul = memchr(t->symbol, '\0', sizeof t->symbol);
    size_t len = nul != NULL ? (size_t)(nul - t->symbol) : sizeof t->symbol;
    rill_err_t err = check_symbol(t->symbol, len, why, cap);
    if (err == RILL_OK) {
        err = check_ts(t->ts_ns, why, cap);
    }
    if (err == RILL_OK) {
        err = check_price(t->price, why, cap);
    }
    if (err == RILL_OK) {
        err = check_size(t->size, why, cap);
    }
    if (err == RILL_OK && t->side != RILL_SIDE_UNKNOWN && t->side != RILL_SIDE_BUY &&
        t->side != RILL_SIDE_SELL) {
        if (why != NULL && cap > 0) {
            snprintf(why, cap, "field 'side': must be RILL_SIDE_UNKNOWN, _BUY or _SELL (got %d)",
                     (int)t->side);
        }
        err = RILL_EINVAL;
    }
    if (err == RILL_OK) {
        put(why, cap, "");
    }
    return err;
}

rill_err_t rill_tick_check(const rill_tick_t *t) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_tick(t, msg, sizeof msg), msg);
}

/* ---- encoding ------------------------------------------------------------------------------- */

typedef struct wbuf {
    uint8_t *p;
    size_t cap, len;
} wbuf_t;

static int wbuf_write(void *data, const char *buf, size_t len) {
    wbuf_t *w = data;
    if (len > w->cap - w->len) {
        return -1;
    }
    memcpy(w->p + w->len, buf, len);
    w->len += len;
    return 0;
}

static int pack_key(msgpack_packer *pk, const char *k) {
    return msgpack_pack_str_with_body(pk, k, strlen(k));
}

int64_t rill_tick_encode(const rill_tick_t *ticks, int64_t n, bool as_batch, void *buf,
                         size_t cap) {
    if (ticks == NULL || buf == NULL || n < 0 || (!as_batch && n != 1) || n > UINT32_MAX) {
        return RILL_EINVAL;
    }
    for (int64_t i = 0; i < n; i++) {
        if (check_tick(&ticks[i], NULL, 0) != RILL_OK) {
            return RILL_EINVAL;
        }
    }
    wbuf_t w = { .p = buf, .cap = cap, .len = 0 };
    msgpack_packer pk;
    msgpack_packer_init(&pk, &w, wbuf_write);
    int bad = as_batch ? msgpack_pack_array(&pk, (size_t)n) : 0;
    for (int64_t i = 0; i < n && bad == 0; i++) {
        const rill_tick_t *t = &ticks[i];
        bool side = t->side != RILL_SIDE_UNKNOWN;
        bad |= msgpack_pack_map(&pk, side ? 5 : 4);
        bad |= pack_key(&pk, "symbol");
        bad |= pack_key(&pk, t->symbol);
        bad |= pack_key(&pk, "ts");
        bad |= msgpack_pack_int64(&pk, t->ts_ns);
        bad |= pack_key(&pk, "price");
        bad |= msgpack_pack_double(&pk, t->price);
        bad |= pack_key(&pk, "size");
        bad |= msgpack_pack_int64(&pk, t->size);
        if (side) {
            bad |= pack_key(&pk, "side");
            bad |= pack_key(&pk, t->side == RILL_SIDE_BUY ? "B" : "S");
        }
    }
    return bad != 0 ? RILL_EFULL : (int64_t)w.len;
}
