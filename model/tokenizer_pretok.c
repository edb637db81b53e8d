/*
 * tokenizer_pretok.c - pre-tokenizers: llama.cpp's regex lists, run through PCRE2.
 *
 * llama.cpp splits text for byte-level BPE with a list of regexes per pre-tokenizer type; each
 * regex re-splits every piece the previous one produced, and the text between two matches is a
 * piece of its own (unicode_regex_split). It runs the GPT-2 and Llama 3 patterns through
 * hand-written matchers and the others through std::regex on a text where every non-ASCII code
 * point is collapsed to one byte standing for its class; both are equivalent to running the
 * pattern with Unicode classes, except for one thing: "\s" means llama.cpp's whitespace set
 * (the Unicode White_Space property), whereas PCRE2's \s with UCP misses U+0085 and counts
 * U+180E. So the patterns below spell \s out as the class WS; \p{L}, \p{N}, \p{P} are PCRE2's.
 *
 * Every piece is its own PCRE2 subject, so a lookahead like (?!\S) sees the end of the piece,
 * as in llama.cpp. The splitting is a recursion over the regex list (depth <= 4) that hands each
 * final piece to a callback at once: no list of offsets is ever built, so memory does not grow
 * with the input.
 *
 * Matching uses the JIT when PCRE2 has it; should the JIT stack run out (a pathological input)
 * the same match is retried with the interpreter, whose memory comes from rill_malloc like all
 * of PCRE2's here (a general context routes it).
 */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "tokenizer_internal.h"

/* llama.cpp's whitespace: 0009-000D, 0020, 0085, 00A0, 1680, 2000-200A, 2028, 2029, 202F, 205F,
 * 3000 (inside a character class). */
#define WS     \
    "\\t-\\r " \
    "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
#define RE_GPT2 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])"

/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ -- with DIGITS = \p{N}{1,3} */
#define RE_LLAMA3_LIKE(DIGITS)                                                                     \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"      \
    "|" DIGITS "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS \
    "]+"

static const tok_pre_def_t g_pre_default = {
    .name = "default",
    .regex = { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL },
    .clean_spaces = true,
};
static const tok_pre_def_t g_pre_gpt2 = {
    .name = "gpt-2",
    .regex = { RE_GPT2, NULL },
    .clean_spaces = true,
};
static const tok_pre_def_t g_pre_llama3 = {
    .name = "llama3",
    .regex = { RE_LLAMA3_LIKE("\\p{N}{1,3}"), NULL },
    .ignore_merges = true,
    .add_bos = true,
    .clean_spaces = true,
};
static const tok_pre_def_t g_pre_llama3_plain = {
    /* dbrx, smaug-bpe: the Llama 3 regex without llama3's vocabulary flags */
    .name = "dbrx",
    .regex = { RE_LLAMA3_LIKE("\\p{N}{1,3}"), NULL },
    .clean_spaces = true,
};
static const tok_pre_def_t g_pre_qwen2 = {
    .name = "qwen2",
    .regex = { RE_LLAMA3_LIKE("\\p{N}"), NULL },
    .clean_spaces = false,
};
static const tok_pre_def_t g_pre_stablelm2 = {
    /* stablelm2, megrez: the Qwen2 regex, clean_spaces left on */
    .name = "stablelm2",
    .regex = { RE_LLAMA3_LIKE("\\p{N}"), NULL },
    .clean_spaces = true,
};
static const tok_pre_def_t g_pre_smollm = {
    .name = "smollm",
    .regex = { "\\p{N}", RE_GPT2, NULL },
    .clean_spaces = false,
};
static const tok_pre_def_t g_pre_starcoder = {
    /* starcoder, refact, codeshell, exaone, minerva-7b: the SmolLM regexes, clean_spaces on */
    .name = "starcoder",
    .regex = { "\\p{N}", RE_GPT2, NULL },
    .clean_spaces = true,
};

typedef struct pre_alias {
    const char *gguf_name;
    const tok_pre_def_t *def;
} pre_alias_t;

/* `tokenizer.ggml.pre` values and the llama.cpp pre-type each maps to. */
static const pre_alias_t g_pre_alias[] = {
    { "default", &g_pre_default },
    { "gpt-2", &g_pre_gpt2 },
    { "phi-2", &g_pre_gpt2 },
    { "mpt", &g_pre_gpt2 },
    { "olmo", &g_pre_gpt2 },
    { "jina-es", &g_pre_gpt2 },
    { "jina-de", &g_pre_gpt2 },
    { "gigachat", &g_pre_gpt2 },
    { "jina-v2-es", &g_pre_gpt2 },
    { "jina-v2-de", &g_pre_gpt2 },
    { "a.x-4.0", &g_pre_gpt2 },
    { "mellum", &g_pre_gpt2 },
    { "exaone4", &g_pre_gpt2 },
    { "modern-bert", &g_pre_gpt2 },
    { "jina-v1-en", &g_pre_gpt2 },
    { "jina-v2-code", &g_pre_gpt2 },
    { "roberta-bpe", &g_pre_gpt2 },
    { "llama3", &g_pre_llama3 },
    { "llama-v3", &g_pre_llama3 },
    { "llama-bpe", &g_pre_llama3 },
    { "falcon3", &g_pre_llama3 },
    { "falcon-h1", &g_pre_llama3 },
    { "pixtral", &g_pre_llama3 },
    { "midm-2.0", &g_pre_llama3 },
    { "lfm2", &g_pre_llama3 },
    { "dbrx", &g_pre_llama3_plain },
    { "smaug-bpe", &g_pre_llama3_plain },
    { "qwen2", &g_pre_qwen2 },
    { "deepseek-r1-qwen", &g_pre_qwen2 },
    { "kormo", &g_pre_qwen2 },
    { "stablelm2", &g_pre_stablelm2 },
    { "megrez", &g_pre_stablelm2 },
    { "smollm", &g_pre_smollm },
    { "starcoder", &g_pre_starcoder },
    { "refact", &g_pre_starcoder },
    { "codeshell", &g_pre_starcoder },
    { "exaone", &g_pre_starcoder },
    { "minerva-7b", &g_pre_starcoder },
};

const tok_pre_def_t *rill__tok_pre_find(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof(g_pre_alias) / sizeof(g_pre_alias[0]); i++) {
        const char *a = g_pre_alias[i].gguf_name;
        if (strlen(a) == len && memcmp(a, name, len) == 0) {
            return g_pre_alias[i].def;
        }
    }
    return NULL;
}

static void *pcre2_alloc(PCRE2_SIZE n, void *user) {
    (void)user;
    return rill_malloc(RILL_MEM_MODEL, n);
}

static void pcre2_release(void *p, void *user) {
    (void)user;
    rill_free(p);
}

pcre2_general_context *rill__tok_pcre2_context(void) {
    return pcre2_general_context_create(pcre2_alloc, pcre2_release, NULL);
}

rill_err_t rill__tok_pre_compile(rill_tokenizer_t *tok, char *err, size_t errlen) {
    rill_err_t e = RILL_OK;
    pcre2_compile_context *cctx = NULL;
    tok->gctx = rill__tok_pcre2_context();
    if (tok->gctx == NULL) {
        return RILL_ENOMEM;
    }
    cctx = pcre2_compile_context_create(tok->gctx);
    if (cctx == NULL) {
        return RILL_ENOMEM;
    }
    for (int i = 0; i < TOK_MAX_REGEX && tok->pre->regex[i] != NULL; i++) {
        int code = 0;
        PCRE2_SIZE at = 0;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)tok->pre->regex[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &code, &at, cctx);
        if (re == NULL) {
            if (code == PCRE2_ERROR_HEAP_FAILED) {
                e = RILL_ENOMEM;
            } else {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(code, msg, sizeof(msg));
                if (err != NULL && errlen > 0) {
                    snprintf(err, errlen, "pre-tokenizer '%s' regex %d: %s at %zu", tok->pre->name,
                             i, (const char *)msg, (size_t)at);
                }
                e = RILL_EINTERNAL;
            }
            break;
        }
        tok->re[tok->n_re++] = re;
        int jrc = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        if (jrc == PCRE2_ERROR_NOMEMORY) {
            e = RILL_ENOMEM;
            break;
        }
        /* any other JIT failure (no JIT support on this CPU): the interpreter is used */
    }
    pcre2_compile_context_free(cctx);
    return e;
}

void rill__tok_pre_free(rill_tokenizer_t *tok) {
    for (int i = 0; i < tok->n_re; i++) {
        pcre2_code_free(tok->re[i]);
        tok->re[i] = NULL;
    }
    tok->n_re = 0;
    pcre2_general_context_free(tok->gctx);
    tok->gctx = NULL;
}

typedef struct split_ctx {
    const rill_tokenizer_t *tok;
    rill_tokenizer_work_t *w;
    const char *subj;
    tok_word_fn fn;
    void *user;
} split_ctx_t;

/* Splits subj[off, off + n) with regex `level` and hands the pieces to the next level. */
static rill_err_t split_level(const split_ctx_t *c, int level, size_t off, size_t n) {
    if (n == 0) {
        return RILL_OK;
    }
    if (level == c->tok->n_re) {
        return c->fn(c->user, off, n);
    }
    const pcre2_code *re = c->tok->re[level];
    PCRE2_SPTR s = (PCRE2_SPTR)(c->subj + off);
    size_t start = 0;
    while (start < n) {
        int rc = pcre2_match(re, s, n, start, PCRE2_NO_UTF_CHECK, c->w->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            rc = pcre2_match(re, s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, c->w->md, NULL);
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }
        if (rc < 0) {
            RILL_LOGE("tokenizer: PCRE2 match failed (%d) on a %zu-byte piece", rc, n);
            return rc == PCRE2_ERROR_NOMEMORY ? RILL_ENOMEM : RILL_EINTERNAL;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->w->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 <= m0) {
            /* none of our patterns can match empty; stay safe and let the text fall to the
             * gap that ends the loop */
            break;
        }
        rill_err_t e = split_level(c, level + 1, off + start, m0 - start);
        if (e == RILL_OK) {
            e = split_level(c, level + 1, off + m0, m1 - m0);
        }
        if (e != RILL_OK) {
            return e;
        }
        start = m1;
    }
    return split_level(c, level + 1, off + start, n - start);
}

rill_err_t rill__tok_pre_split(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w,
                               const char *subj, size_t n, tok_word_fn fn, void *user) {
    split_ctx_t c = { .tok = tok, .w = w, .subj = subj, .fn = fn, .user = user };
    return split_level(&c, 0, 0, n);
}
