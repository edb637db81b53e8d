/*
 * tokenizer_internal.h - what the tokenizer's .c files share (not a public header).
 *
 * tokenizer.c        creation from GGUF metadata, accessors
 * tokenizer_encode.c the encode driver: special-token partition, BOS/EOS, scratch
 * tokenizer_decode.c pieces, detokenize, the streaming UTF-8 detokenizer
 * tokenizer_spm.c    the SentencePiece score-driven merge (llama.cpp's llm_tokenizer_spm)
 * tokenizer_bpe.c    byte-level BPE over merge ranks (llama.cpp's llm_tokenizer_bpe)
 * tokenizer_pretok.c the pre-tokenizer regex table and the PCRE2 splitter
 * tokenizer_utf8.c   UTF-8 decoding (llama.cpp's lenient flavour and the strict one)
 */
#ifndef RILL_TOKENIZER_INTERNAL_H
#define RILL_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "rill_tokenizer.h"

#define TOK_MAX_REGEX 4

/* A pre-tokenizer: llama.cpp's regex list for one LLAMA_VOCAB_PRE_TYPE, applied in sequence
 * (each regex splits the pieces the previous one produced), plus the vocabulary flags that
 * llama.cpp sets along with it. */
typedef struct tok_pre_def {
    const char *name;                     /* our name of the type, e.g. "llama3" */
    const char *regex[TOK_MAX_REGEX + 1]; /* NULL-terminated */
    bool ignore_merges; /* a word that is a whole token is emitted without merging */
    bool add_bos;       /* default of add_bos for this type */
    bool clean_spaces;  /* default of clean_spaces for this type */
} tok_pre_def_t;

/* Merge table slot: key = (left id << 32) | right id; empty slots have rank < 0. */
typedef struct tok_pair {
    uint64_t key;
    int32_t rank;
    int32_t result;
} tok_pair_t;

struct rill_tokenizer {
    rill_tokenizer_kind_t kind;
    int32_t n_vocab;
    char pre_name[32];

    /* vocabulary: text of id i is text_blob[text_off[i] .. text_off[i+1]-1) (NUL follows) */
    char *text_blob;
    uint32_t *text_off; /* n_vocab + 1 */
    float *scores;      /* n_vocab */
    uint8_t *types;     /* n_vocab, rill_tokenizer_type_t */
    uint16_t *attrs;    /* n_vocab, RILL_TOKENIZER_ATTR_* */
    uint32_t max_token; /* longest token text, bytes */

    /* decoded pieces (special = true); piece of i is piece_blob[piece_off[i] .. piece_off[i+1]) */
    char *piece_blob;
    uint32_t *piece_off; /* n_vocab + 1 */
    size_t max_piece;

    /* text -> id: open addressing, linear probing, -1 = empty */
    int32_t *hash;
    uint32_t hash_mask;

    /* BPE: (left, right) -> (rank, result) */
    tok_pair_t *pairs;
    uint64_t pair_mask;

    /* BPE: the byte-level character of each byte, its UTF-8 (1 or 2 bytes) and its token id */
    unsigned char bl_utf8[256][2];
    uint8_t bl_len[256];
    int32_t bl_id[256];
    /* BPE: token whose text is the single raw byte b (llama.cpp's last-resort fallback) */
    int32_t raw_byte_id[256];
    /* SPM: byte-fallback token of each byte ("<0xXX>", else the raw byte as text) */
    int32_t spm_byte_id[256];

    /* control / user-defined / unknown tokens, longest text first (llama.cpp's order), ties by
     * id: key = (~text length << 32) | id, sorted ascending */
    uint64_t *special;
    int32_t n_special;

    /* end-of-generation ids, sorted */
    int32_t eog[32];
    int32_t n_eog;

    rill_tokenizer_special_t sp;
    bool ignore_merges;

    /* pre-tokenizer (BPE only) */
    const tok_pre_def_t *pre;
    pcre2_general_context *gctx;
    pcre2_code *re[TOK_MAX_REGEX];
    int n_re;
};

/* Symbol of the merge loops: a span of the word being merged, linked to its neighbours. */
typedef struct tok_sym {
    int32_t prev, next;
    uint32_t off; /* byte offset in the word */
    uint32_t n;   /* byte length; 0 once merged into its left neighbour */
    int32_t id;   /* token id of the span, -1 when the span is no token */
} tok_sym_t;

/* Heap entry of the merge loops: the pair (left, left's next neighbour). SPM orders by score
 * (high first), BPE by rank (low first); ties go to the leftmost pair, like llama.cpp's priority
 * queues. 12 bytes: the right symbol and the merged id are recomputed when the entry is popped,
 * which keeps the heap of a long SPM fragment small. */
typedef struct tok_bigram {
    int32_t left;
    uint32_t size; /* left.n + right.n when pushed: a mismatch later means it is stale */
    union {
        float score;
        int32_t rank;
    } u;
} tok_bigram_t;

/* Special-token partition fragment: a text range, or a token (id >= 0). */
typedef struct tok_frag {
    size_t off, len;
    int32_t id;
} tok_frag_t;

struct rill_tokenizer_work {
    pcre2_match_data *md;
    pcre2_general_context *gctx;
    char *buf; /* escaped (SPM) or sanitised (BPE) text */
    size_t buf_cap;
    char *subj; /* regex subject when it must differ from buf (surrogates) */
    size_t subj_cap;
    char *word; /* byte-level encoded word (BPE) */
    size_t word_cap;
    tok_sym_t *syms;
    size_t syms_cap;
    tok_bigram_t *heap;
    size_t heap_cap;
    tok_frag_t *frags[2];
    size_t frags_cap[2];
};

/* Output of an encode: tokens beyond cap are counted, not written. */
typedef struct tok_out {
    int32_t *ids;
    int64_t cap;
    int64_t n;
} tok_out_t;

#define SPM_SP "\xe2\x96\x81" /* U+2581, SentencePiece's escaped space */

/* Text of token id (NUL-terminated), its length in *len. */
static inline const char *tok_text(const rill_tokenizer_t *tok, int32_t id, size_t *len) {
    *len = tok->text_off[id + 1] - tok->text_off[id] - 1;
    return tok->text_blob + tok->text_off[id];
}

/* Id of the k-th special token in partition order. */
static inline int32_t special_id(const rill_tokenizer_t *tok, int32_t k) {
    return (int32_t)(tok->special[k] & 0xffffffffu);
}

/* Merge-table key of the pair (l, r) and its home slot. */
static inline uint64_t tok_pair_key(int32_t l, int32_t r) {
    return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
}

static inline uint64_t tok_pair_home(uint64_t key, uint64_t mask) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    return (h ^ (h >> 29)) & mask;
}

static inline void tok_push(tok_out_t *o, int32_t id) {
    if (o->n < o->cap) {
        o->ids[o->n] = id;
    }
    o->n++;
}

/* ---- tokenizer.c ---- */
int32_t rill__tok_lookup(const rill_tokenizer_t *tok, const char *s, size_t n);
rill_err_t rill__tok_reserve(void **p, size_t *cap, size_t need, size_t elem);

/* The merge loops' binary heap of bigrams, shared by SPM and BPE. `before(a, b)` is true when a
 * must pop first (each caller passes its own order); static inline so the comparator inlines. */
typedef bool (*tok_before_fn)(const tok_bigram_t *a, const tok_bigram_t *b);

static inline void rill__tok_heap_sift_down(tok_bigram_t *h, size_t n, size_t i,
                                            tok_before_fn before) {
    tok_bigram_t v = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && before(&h[c + 1], &h[c])) {
            c++;
        }
        if (!before(&h[c], &v)) {
            break;
        }
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static inline tok_bigram_t rill__tok_heap_pop(tok_bigram_t *h, size_t *n, tok_before_fn before) {
    tok_bigram_t top = h[0];
    h[0] = h[--(*n)];
    if (*n > 0) {
        rill__tok_heap_sift_down(h, *n, 0, before);
    }
    return top;
}

/* Adds b to the work object's heap of *nh entries, growing it if needed. RILL_ENOMEM leaves the
 * heap as it was. */
static inline rill_err_t rill__tok_heap_push(rill_tokenizer_work_t *w, size_t *nh, tok_bigram_t b,
                                             tok_before_fn before) {
    rill_err_t e = rill__tok_reserve((void **)&w->heap, &w->heap_cap, *nh + 1, sizeof(b));
    if (e != RILL_OK) {
        return e;
    }
    tok_bigram_t *h = w->heap;
    size_t i = (*nh)++;
    while (i > 0) {
        size_t q = (i - 1) / 2;
        if (!before(&b, &h[q])) {
            break;
        }
        h[i] = h[q];
        i = q;
    }
    h[i] = b;
    return RILL_OK;
}

/* ---- tokenizer_spm.c ---- */
/* Tokenizes one escaped text fragment s[0, n) with the score-driven merge. */
rill_err_t rill__tok_spm(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w, const char *s,
                         size_t n, tok_out_t *o);

/* ---- tokenizer_bpe.c ---- */
/* Tokenizes one raw text fragment s[0, n): UTF-8 clean-up, pre-tokenizer, byte-level BPE. */
rill_err_t rill__tok_bpe(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w, const char *s,
                         size_t n, tok_out_t *o);
/* Fills the byte-level tables of tok (bl_*, raw_byte_id) once the text hash exists. */
void rill__tok_bpe_init_bytes(rill_tokenizer_t *tok);
/* Decodes a byte-level token text into raw bytes the way llama.cpp's llama_decode_text does.
 * Writes at most cap bytes to out (out may be NULL) and returns the full length. */
size_t rill__tok_bpe_decode_text(const char *s, size_t n, char *out, size_t cap);

/* ---- tokenizer_pretok.c ---- */
/* The pre-tokenizer definition for a `tokenizer.ggml.pre` value, or NULL when unsupported. */
const tok_pre_def_t *rill__tok_pre_find(const char *name, size_t len);
/* Compiles tok->pre's regexes into tok->re (UTF + UCP, JIT when available). Errors:
 * RILL_ENOMEM, RILL_EINTERNAL (a pattern does not compile: a bug; message in err). */
rill_err_t rill__tok_pre_compile(rill_tokenizer_t *tok, char *err, size_t errlen);
void rill__tok_pre_free(rill_tokenizer_t *tok);
/* Memory functions that route PCRE2 through rill_malloc. */
pcre2_general_context *rill__tok_pcre2_context(void);

/* Called for every final pre-tokenized word: byte range [off, off + n) of the text. */
typedef rill_err_t (*tok_word_fn)(void *user, size_t off, size_t n);
/* Splits subj[0, n) with the regexes in turn; gaps between matches are words too. */
rill_err_t rill__tok_pre_split(const rill_tokenizer_t *tok, rill_tokenizer_work_t *w,
                               const char *subj, size_t n, tok_word_fn fn, void *user);

/* ---- tokenizer_utf8.c ---- */
/* Length of the strict-UTF-8 prefix of s[0, n) that is also what llama.cpp's decoder keeps
 * unchanged (no overlongs, surrogates or > U+10FFFF). Returns n when all of it is clean. */
size_t rill__utf8_clean_prefix(const char *s, size_t n);
/* Rewrites s[0, n) as llama.cpp's unicode_cpts_from_utf8 + unicode_cpt_to_utf8 would (see the
 * header), into out (capacity >= 3 * n). subj, when not NULL, receives the same text with
 * surrogate code points replaced by U+FFFD (same length), so PCRE2 sees valid UTF-8. Returns
 * the output length; *has_surrogate tells whether subj differs from out. */
size_t rill__utf8_llama_clean(const char *s, size_t n, char *out, char *subj, bool *has_surrogate);
/* Strict decoding for the stream detokenizer: length of the maximal well-formed or ill-formed
 * unit at s[0, n): returns > 0 with *valid = true for a complete character, > 0 with *valid =
 * false for a maximal ill-formed subsequence (to be replaced by one U+FFFD), 0 when s[0, n) is
 * a valid but incomplete prefix (needs more bytes). n >= 1. */
size_t rill__utf8_unit(const unsigned char *s, size_t n, bool *valid);

#endif /* RILL_TOKENIZER_INTERNAL_H */
