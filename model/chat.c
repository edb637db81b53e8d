/*
 * chat.c - chat template families rendered in C.
 *
 * Design. A template is recognised once, at creation, by markers (the approach of llama.cpp's
 * llm_chat_detect_template); rendering is then a fixed sequence of appends into the caller's
 * buffer with snprintf semantics (always count, write what fits), so the caller can size the
 * buffer with a first call and nothing here allocates per call.
 *
 * The one piece of a template we do read is the default system message of ChatML templates: a
 * Jinja string literal `'<|im_start|>system\n...<|im_end|>'` whose body contains no quote (so it
 * is a constant, not an expression around messages[0]['content']). Its escapes (\n, \t, \\, \',
 * \") are decoded the way Jinja decodes string literals; a template may also hold a raw newline
 * there, which is kept as is. Rejected: a Jinja interpreter. It would be the largest parser in
 * the project for three fixed output formats, and a new untrusted-input attack surface.
 */
#include <string.h>

#include "rill_alloc.h"
#include "rill_chat.h"

struct rill_chat {
    rill_chat_template_t kind;
    char *default_system; /* NULL when the template has none */
};

const char *rill_chat_template_name(rill_chat_template_t t) {
    switch (t) {
    case RILL_CHAT_AUTO:
        return "auto";
    case RILL_CHAT_CHATML:
        return "chatml";
    case RILL_CHAT_LLAMA3:
        return "llama3";
    }
    return "?";
}

bool rill_chat_template_from_name(const char *name, rill_chat_template_t *out) {
    static const rill_chat_template_t all[] = { RILL_CHAT_AUTO, RILL_CHAT_CHATML,
                                                RILL_CHAT_LLAMA3 };
    if (name == NULL || out == NULL) {
        return false;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, rill_chat_template_name(all[i])) == 0) {
            *out = all[i];
            return true;
        }
    }
    return false;
}

/* memmem over (p, n) for a NUL-terminated needle; NULL when absent. */
static const char *find(const char *p, size_t n, const char *needle) {
    size_t m = strlen(needle);
    if (p == NULL || m > n) {
        return NULL;
    }
    for (size_t i = 0; i + m <= n; i++) {
        if (p[i] == needle[0] && memcmp(p + i, needle, m) == 0) {
            return p + i;
        }
    }
    return NULL;
}

static rill_chat_template_t detect(const char *t, size_t n) {
    if (find(t, n, "<|im_start|>") != NULL) {
        return RILL_CHAT_CHATML;
    }
    if (find(t, n, "<|start_header_id|>") != NULL && find(t, n, "<|end_header_id|>") != NULL) {
        return RILL_CHAT_LLAMA3;
    }
    return RILL_CHAT_AUTO;
}

/* Finds the constant default system message of a ChatML template; on success returns true and
 * sets [*body, *body + *len) to its (still escaped) text. */
static bool find_default_system(const char *t, size_t n, const char **body, size_t *len) {
    static const char open[] = "<|im_start|>system";
    static const char close[] = "<|im_end|>";
    const char *end = t + n;
    const char *p = t;
    while (p != NULL && p < end) {
        p = find(p, (size_t)(end - p), open);
        if (p == NULL) {
            return false;
        }
        const char *b = p + sizeof open - 1;
        p = b;
        /* The header ends with a newline, escaped in the literal or raw. */
        if (end - b >= 2 && b[0] == '\\' && b[1] == 'n') {
            b += 2;
        } else if (end - b >= 1 && b[0] == '\n') {
            b += 1;
        } else {
            continue;
        }
        const char *e = find(b, (size_t)(end - b), close);
        if (e == NULL) {
            return false;
        }
        /* A constant: no unescaped quote (which would end the literal) and no Jinja braces. */
        bool constant = e > b;
        for (const char *q = b; q < e && constant; q++) {
            if (*q == '\\') {
                q++;
            } else if (*q == '\'' || *q == '"' || *q == '{' || *q == '}') {
                constant = false;
            }
        }
        if (constant) {
            *body = b;
            *len = (size_t)(e - b);
            return true;
        }
    }
    return false;
}

/* Decodes Jinja string-literal escapes into a new NUL-terminated string. */
static char *unescape(const char *s, size_t n) {
    char *d = rill_malloc(RILL_MEM_MODEL, n + 1);
    if (d == NULL) {
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char x = s[++i];
            switch (x) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'r':
                c = '\r';
                break;
            case '\\':
            case '\'':
            case '"':
                c = x;
                break;
            default: /* unknown escape: Python keeps the backslash */
                d[o++] = '\\';
                c = x;
                break;
            }
        }
        d[o++] = c;
    }
    d[o] = '\0';
    return d;
}

rill_err_t rill_chat_new(const char *tmpl, size_t len, rill_chat_template_t force,
                         rill_chat_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if ((tmpl == NULL && (len > 0 || force == RILL_CHAT_AUTO)) ||
        (force != RILL_CHAT_AUTO && force != RILL_CHAT_CHATML && force != RILL_CHAT_LLAMA3)) {
        return RILL_EINVAL;
    }
    rill_chat_template_t kind = force != RILL_CHAT_AUTO ? force : detect(tmpl, len);
    if (kind == RILL_CHAT_AUTO) {
        return RILL_EUNSUPPORTED;
    }
    rill_chat_t *c = rill_calloc(RILL_MEM_MODEL, 1, sizeof *c);
    if (c == NULL) {
        return RILL_ENOMEM;
    }
    c->kind = kind;
    const char *body;
    size_t blen;
    if (kind == RILL_CHAT_CHATML && tmpl != NULL && find_default_system(tmpl, len, &body, &blen)) {
        c->default_system = unescape(body, blen);
        if (c->default_system == NULL) {
            rill_free(c);
            return RILL_ENOMEM;
        }
    }
    *out = c;
    return RILL_OK;
}

rill_err_t rill_chat_new_gguf(const rill_gguf_t *g, rill_chat_template_t force, rill_chat_t **out) {
    if (out == NULL || g == NULL) {
        if (out != NULL) {
            *out = NULL;
        }
        return RILL_EINVAL;
    }
    *out = NULL;
    rill_gguf_str_t t = { NULL, 0 };
    rill_err_t err = rill_gguf_get_str(g, "tokenizer.chat_template", &t);
    if (err == RILL_ENOTFOUND && force != RILL_CHAT_AUTO) {
        return rill_chat_new(NULL, 0, force, out);
    }
    if (err != RILL_OK) {
        return err;
    }
    if (t.len > SIZE_MAX) {
        return RILL_EFORMAT;
    }
    return rill_chat_new(t.ptr, (size_t)t.len, force, out);
}

void rill_chat_destroy(rill_chat_t **cp) {
    if (cp == NULL || *cp == NULL) {
        return;
    }
    rill_free((*cp)->default_system);
    rill_free(*cp);
    *cp = NULL;
}

rill_chat_template_t rill_chat_kind(const rill_chat_t *c) {
    return c != NULL ? c->kind : RILL_CHAT_AUTO;
}

const char *rill_chat_default_system(const rill_chat_t *c) {
    return c != NULL ? c->default_system : NULL;
}

const char *rill_chat_end_of_turn(const rill_chat_t *c) {
    if (c != NULL && c->kind == RILL_CHAT_LLAMA3) {
        return "<|eot_id|>";
    }
    return "<|im_end|>";
}

/* ---- rendering ---- */

typedef struct out {
    char *buf;
    size_t cap;
    size_t n; /* full length so far, also past cap */
} out_t;

static void put(out_t *o, const char *s, size_t len) {
    if (o->n < o->cap) {
        size_t room = o->cap - o->n;
        memcpy(o->buf + o->n, s, len < room ? len : room);
    }
    o->n += len;
}

static void puts_(out_t *o, const char *s) {
    put(o, s, strlen(s));
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static void put_trimmed(out_t *o, const char *s) {
    size_t n = strlen(s);
    size_t b = 0;
    while (b < n && is_space(s[b])) {
        b++;
    }
    while (n > b && is_space(s[n - 1])) {
        n--;
    }
    put(o, s + b, n - b);
}

static void chatml_msg(out_t *o, const char *role, const char *content) {
    puts_(o, "<|im_start|>");
    puts_(o, role);
    puts_(o, "\n");
    puts_(o, content);
    puts_(o, "<|im_end|>\n");
}

static void llama3_msg(out_t *o, const char *role, const char *content) {
    puts_(o, "<|start_header_id|>");
    puts_(o, role);
    puts_(o, "<|end_header_id|>\n\n");
    put_trimmed(o, content);
    puts_(o, "<|eot_id|>");
}

static int64_t render(const rill_chat_t *c, const rill_chat_msg_t *msgs, size_t n,
                      bool add_generation_prompt, bool continuation, char *buf, size_t cap) {
    if (c == NULL || (msgs == NULL && n > 0) || (buf == NULL && cap > 0)) {
        return RILL_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role == NULL || msgs[i].content == NULL) {
            return RILL_EINVAL;
        }
    }
    /* Reserve the last byte for the NUL. */
    out_t o = { .buf = buf, .cap = cap > 0 ? cap - 1 : 0, .n = 0 };
    if (c->kind == RILL_CHAT_CHATML) {
        if (!continuation && c->default_system != NULL && n > 0 &&
            strcmp(msgs[0].role, "system") != 0) {
            chatml_msg(&o, "system", c->default_system);
        }
        for (size_t i = 0; i < n; i++) {
            chatml_msg(&o, msgs[i].role, msgs[i].content);
        }
        if (add_generation_prompt) {
            puts_(&o, "<|im_start|>assistant\n");
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            llama3_msg(&o, msgs[i].role, msgs[i].content);
        }
        if (add_generation_prompt) {
            puts_(&o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        }
    }
    if (cap > 0) {
        buf[o.n < o.cap ? o.n : o.cap] = '\0';
    }
    return (int64_t)o.n;
}

int64_t rill_chat_apply(const rill_chat_t *c, const rill_chat_msg_t *msgs, size_t n,
                        bool add_generation_prompt, char *buf, size_t cap) {
    return render(c, msgs, n, add_generation_prompt, false, buf, cap);
}

int64_t rill_chat_apply_turns(const rill_chat_t *c, const rill_chat_msg_t *msgs, size_t n,
                              bool add_generation_prompt, char *buf, size_t cap) {
    return render(c, msgs, n, add_generation_prompt, true, buf, cap);
}
