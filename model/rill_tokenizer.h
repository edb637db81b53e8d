/*
 * rill_tokenizer.h - text <-> token ids from GGUF metadata, the way llama.cpp does it.
 *
 * A tokenizer is built from the `tokenizer.ggml.*` keys of a GGUF file (a vocabulary-only file
 * is enough: no tensors are read) and reproduces llama.cpp's tokenization exactly:
 *
 *   - `tokenizer.ggml.model` = "llama": SentencePiece-style BPE driven by token scores (the
 *     highest-scoring adjacent pair is merged first), spaces escaped as U+2581, a leading space
 *     added when `tokenizer.ggml.add_space_prefix` says so (default true), and bytes that form no
 *     token emitted as byte-fallback tokens <0xXX>.
 *   - `tokenizer.ggml.model` = "gpt2": byte-level BPE over `tokenizer.ggml.merges` (rank = merge
 *     index, lowest first) after the GPT-2 byte-to-unicode mapping, preceded by a pre-tokenizer
 *     (llama.cpp's sequence of regexes, run through PCRE2) chosen by `tokenizer.ggml.pre`:
 *     "default" (also when the key is absent); "gpt-2" and the names llama.cpp maps to it
 *     (phi-2, mpt, olmo, ...); "llama-bpe" / "llama3" (Llama 3: also ignore_merges and add_bos);
 *     "dbrx", "smaug-bpe"; "qwen2" (digits one by one), "deepseek-r1-qwen", "stablelm2",
 *     "megrez"; "smollm", "starcoder", "refact", "codeshell", "exaone", "minerva-7b" (digits
 *     split off first, then the GPT-2 regex). Other names fail with RILL_EUNSUPPORTED.
 *
 * Special tokens: token types come from `tokenizer.ggml.token_type` (GGUF values, see
 * rill_tokenizer_type_t). Control, user-defined and unknown-type tokens form the "special" set.
 * When encoding, their texts are cut out of the input first (longest text first, as llama.cpp's
 * tokenizer_st_partition): user-defined tokens always, control and unknown-type tokens only when
 * parse_special is true; each occurrence becomes that single token and the text around it is
 * tokenized normally. BOS/EOS/EOT/... ids and the add_bos/add_eos flags come from the metadata,
 * with llama.cpp's per-model defaults when a key is absent (SPM: bos 1, eos 2, unk 0, add_bos
 * true; BPE: bos = eos = 11 when in range, add_bos true only for the Llama 3 pre-tokenizer).
 * Like llama.cpp, end-of-turn and fill-in-the-middle tokens missing from the metadata are found
 * by their text ("<|eot_id|>", "<|im_end|>", ...; the first name of llama.cpp's list that is in
 * the vocabulary wins) and forced to control type.
 *
 * Invalid UTF-8 input is never an error. The gpt2 path first decodes the text the way llama.cpp
 * does (each byte that starts no complete sequence becomes U+FFFD; overlong forms are decoded
 * and re-encoded shortest; code points above U+10FFFF become U+FFFD); the llama path works on
 * the raw bytes and falls back to byte tokens.
 *
 * Differences from llama.cpp that remain: Unicode character classes (\p{L}, \p{N}, \p{P}) are
 * PCRE2's (Unicode 14 for PCRE2 10.42), llama.cpp's tables are newer, so letters and digits
 * assigned after Unicode 14 can split differently. Where llama.cpp throws (an SPM byte without
 * a byte-fallback token, a code point above U+10FFFF) we emit unk / U+FFFD. When several
 * end-of-turn texts are in a vocabulary, llama.cpp's pick depends on hash-map order; ours is
 * the first of its list ("<|eot_id|>", "<|im_end|>", ..., "<|endoftext|>"). Not supported: the
 * t5/bert/rwkv/plamo2 vocabularies and the "gpt2" variants hybriddna, whitespace and gemma4.
 *
 * Memory: the tokenizer copies what it needs from the GGUF at creation (token texts, scores,
 * types, a text->id hash, a merge-pair hash, the decoded piece of every token), so the GGUF may
 * be destroyed right after rill_tokenizer_new(). Encoding needs scratch memory proportional to
 * the longest pre-tokenized word (for the llama model, which has no pre-tokenizer, to the
 * longest text between special tokens: about 32 bytes per input byte; BPE input that is not
 * clean UTF-8 also needs a rewritten copy, up to 6 bytes per input byte): it comes from a
 * caller-owned rill_tokenizer_work_t that grows when an input needs more than before and is
 * reused afterwards, so steady-state encoding does not allocate. rill_tokenizer_encode() without
 * a work object allocates one per call. Time is O(n log n) in the input length: merges run on a
 * binary heap per word.
 *
 * Thread safety: a rill_tokenizer_t is immutable after creation and may be shared by any number
 * of threads; destroy it only when no thread uses it or anything borrowed from it. A
 * rill_tokenizer_work_t and a rill_tokenizer_stream_t are one thread at a time.
 */
#ifndef RILL_TOKENIZER_H
#define RILL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_tokenizer rill_tokenizer_t;
typedef struct rill_tokenizer_work rill_tokenizer_work_t;

/* "No token": absent special ids. */
#define RILL_TOKEN_NULL (-1)

typedef enum rill_tokenizer_kind {
    RILL_TOKENIZER_SPM = 1, /* tokenizer.ggml.model = "llama" */
    RILL_TOKENIZER_BPE = 2  /* tokenizer.ggml.model = "gpt2" */
} rill_tokenizer_kind_t;

/* Token types, values as in `tokenizer.ggml.token_type`. */
typedef enum rill_tokenizer_type {
    RILL_TOKENIZER_TYPE_UNDEFINED = 0,
    RILL_TOKENIZER_TYPE_NORMAL = 1,
    RILL_TOKENIZER_TYPE_UNKNOWN = 2,
    RILL_TOKENIZER_TYPE_CONTROL = 3,
    RILL_TOKENIZER_TYPE_USER_DEFINED = 4,
    RILL_TOKENIZER_TYPE_UNUSED = 5,
    RILL_TOKENIZER_TYPE_BYTE = 6
} rill_tokenizer_type_t;

/* Token attribute bits (llama.cpp's llama_token_attr), derived from the type and the fix-ups
 * described above. UNDEFINED is the empty set. */
#define RILL_TOKENIZER_ATTR_UNKNOWN      (1u << 0)
#define RILL_TOKENIZER_ATTR_UNUSED       (1u << 1)
#define RILL_TOKENIZER_ATTR_NORMAL       (1u << 2)
#define RILL_TOKENIZER_ATTR_CONTROL      (1u << 3)
#define RILL_TOKENIZER_ATTR_USER_DEFINED (1u << 4)
#define RILL_TOKENIZER_ATTR_BYTE         (1u << 5)
#define RILL_TOKENIZER_ATTR_LSTRIP       (1u << 7) /* eat whitespace left of it when parsed */
#define RILL_TOKENIZER_ATTR_RSTRIP       (1u << 8) /* eat whitespace right of it when parsed */

/* Special token ids (RILL_TOKEN_NULL when absent) and the flags that drive add_special. */
typedef struct rill_tokenizer_special {
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t nl; /* the token of "\n" (llama.cpp's linefeed id) */
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos;          /* encode(add_special) prepends bos */
    bool add_eos;          /* encode(add_special) appends eos */
    bool add_space_prefix; /* SPM: a space is put in front of the text; decode strips it */
    bool clean_spaces;     /* decode applies llama.cpp's clean_up_tokenization_spaces */
} rill_tokenizer_special_t;

/* ---- lifetime ---- */

/* Builds a tokenizer from g's metadata. On success the caller owns *out; destroy it with
 * rill_tokenizer_destroy(). g is only read during the call. On failure *out is NULL and
 * rill_last_error(err) names the offending key.
 * Errors: RILL_EINVAL (NULL g or out), RILL_EFORMAT (a tokenizer key is missing or has the wrong
 * type; tokens array empty or shorter than its scores/types need; duplicate token text; a merge
 * whose parts or result are not tokens; add_bos/add_eos set without a bos/eos id),
 * RILL_EUNSUPPORTED (tokenizer model or pre-tokenizer not supported), RILL_ENOMEM.
 * Blocks while building (about 0.1 s for a 150k-token vocabulary). */
rill_err_t rill_tokenizer_new(const rill_gguf_t *g, rill_tokenizer_t **out);

/* Frees the tokenizer and sets *tp = NULL. NULL-safe. */
void rill_tokenizer_destroy(rill_tokenizer_t **tp);

/* ---- vocabulary ---- */

rill_tokenizer_kind_t rill_tokenizer_kind(const rill_tokenizer_t *tok);

/* The pre-tokenizer name as resolved ("default" when the key is absent; "" for SPM). Static or
 * owned by the tokenizer. */
const char *rill_tokenizer_pre(const rill_tokenizer_t *tok);

/* Number of tokens (ids are 0 .. n_vocab-1). */
int32_t rill_tokenizer_n_vocab(const rill_tokenizer_t *tok);

/* Special ids and flags. Borrowed; valid for the tokenizer's lifetime. */
const rill_tokenizer_special_t *rill_tokenizer_special(const rill_tokenizer_t *tok);

/* True when id ends generation (eos, eot, eom, and the end-of-turn tokens llama.cpp recognises
 * by text, e.g. "<|im_end|>", "<|endoftext|>"). False for ids out of range. */
bool rill_tokenizer_is_eog(const rill_tokenizer_t *tok, int32_t id);

/* The vocabulary text of id (as stored in the GGUF: U+2581 for spaces in SPM, byte-level
 * characters in BPE; empty entries read "[EMPTY_<id>]" like llama.cpp), NUL-terminated, length
 * in *len when len != NULL. Borrowed. NULL (and *len = 0) when id is out of range. */
const char *rill_tokenizer_text(const rill_tokenizer_t *tok, int32_t id, size_t *len);

/* Score of id (0 when the file has none or id is out of range). */
float rill_tokenizer_score(const rill_tokenizer_t *tok, int32_t id);

/* GGUF token type of id (RILL_TOKENIZER_TYPE_NORMAL when the file has no types;
 * RILL_TOKENIZER_TYPE_UNDEFINED for ids out of range). */
rill_tokenizer_type_t rill_tokenizer_type(const rill_tokenizer_t *tok, int32_t id);

/* Attribute bits of id (RILL_TOKENIZER_ATTR_*), 0 for ids out of range. */
uint32_t rill_tokenizer_attr(const rill_tokenizer_t *tok, int32_t id);

/* The id whose vocabulary text is exactly text[0, len), or RILL_TOKEN_NULL. */
int32_t rill_tokenizer_find(const rill_tokenizer_t *tok, const char *text, size_t len);

/* ---- encoding ---- */

/* Scratch for encoding: caller owns it; destroy with rill_tokenizer_work_destroy(). It is not
 * tied to one tokenizer. Errors: RILL_EINVAL, RILL_ENOMEM. */
rill_err_t rill_tokenizer_work_new(rill_tokenizer_work_t **out);

/* Frees the scratch and sets *wp = NULL. NULL-safe. */
void rill_tokenizer_work_destroy(rill_tokenizer_work_t **wp);

/* Bytes of scratch the work object holds now (it only grows). */
size_t rill_tokenizer_work_bytes(const rill_tokenizer_work_t *work);

/* Tokenizes text[0, len) (UTF-8; invalid sequences are handled as described above) into out.
 * add_special: prepend bos / append eos as the flags in rill_tokenizer_special() say.
 * parse_special: control and unknown-type token texts in the input become those tokens (user-
 * defined token texts always do).
 * Returns the number of tokens (>= 0). When there are more than cap, the first cap are written,
 * *n_total (when not NULL) receives the full count, and RILL_EFULL is returned; with out == NULL
 * and cap == 0 this measures. *n_total is also set on success.
 * Errors: RILL_EINVAL (NULL tok or work, text == NULL with len > 0, out == NULL with cap > 0,
 * cap < 0, a single pre-tokenized word or SPM text fragment of 2 GiB or more), RILL_EFULL,
 * RILL_ENOMEM (the work object could not grow; it is left as it was and stays usable),
 * RILL_EINTERNAL (PCRE2 failed on a resource limit; not seen in practice). Allocates only when the
 * work object must grow. Does not block otherwise. */
int64_t rill_tokenizer_encode_with(const rill_tokenizer_t *tok, rill_tokenizer_work_t *work,
                                   const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t *out, int64_t cap, int64_t *n_total);

/* rill_tokenizer_encode_with() with a work object created and destroyed inside the call (so it
 * allocates on every call). To learn the count when RILL_EFULL comes back, call again with
 * out == NULL and cap == 0, which returns the count. */
int64_t rill_tokenizer_encode(const rill_tokenizer_t *tok, const char *text, size_t len,
                              bool add_special, bool parse_special, int32_t *out, int64_t cap);

/* ---- decoding ---- */

/* The bytes one token stands for (llama.cpp's token_to_piece): BPE normal tokens decoded from
 * the byte-level alphabet, SPM normal tokens with U+2581 turned into spaces, byte tokens as
 * their byte, user-defined tokens as their text. Control and unknown-type tokens give their
 * text when special is true and nothing when false; unused/undefined-type tokens give nothing.
 * Not NUL-terminated; length in *len. Borrowed; valid for the tokenizer's lifetime. NULL (and
 * *len = 0) when id is out of range. Pieces may be partial UTF-8 (byte tokens). */
const char *rill_tokenizer_piece(const rill_tokenizer_t *tok, int32_t id, bool special,
                                 size_t *len);

/* Length of the longest piece, in bytes. */
size_t rill_tokenizer_max_piece(const rill_tokenizer_t *tok);

#define RILL_TOKENIZER_DECODE_REMOVE_SPECIAL (1u << 0) /* drop a leading bos / trailing eos */
#define RILL_TOKENIZER_DECODE_SPECIAL        (1u << 1) /* render control tokens as text */
#define RILL_TOKENIZER_DECODE_RAW            (1u << 2) /* just concatenate the pieces */

/* Detokenizes ids[0, n) into out (llama.cpp's llama_detokenize): pieces concatenated; unless
 * RAW, the first piece loses one leading space when add_space_prefix is set (and no bos was
 * removed), and clean_spaces (when the vocabulary sets it) removes the space before ?!., and in
 * " 's" " 'm" " 're" " 've" and around a lone "'". Not NUL-terminated.
 * Returns the byte count. RILL_EFULL when cap is too small: *n_needed (when not NULL) then gets
 * an upper bound of the size needed (exact with RAW) and out's contents are unspecified.
 * Errors: RILL_EINVAL (NULL tok, ids == NULL with n > 0, out == NULL with cap > 0, n < 0, an id
 * out of range), RILL_EFULL. Does not allocate. */
int64_t rill_tokenizer_decode(const rill_tokenizer_t *tok, const int32_t *ids, int64_t n,
                              unsigned flags, char *out, size_t cap, size_t *n_needed);

/* Streaming detokenizer: feed generated ids one at a time and get text that only ever contains
 * complete, valid UTF-8. Bytes of a character split across tokens (emoji, CJK through byte
 * tokens) are held back until the character is complete. Invalid input is replaced
 * deterministically with U+FFFD (EF BF BD): one U+FFFD per maximal ill-formed subsequence (the
 * Unicode / WHATWG rule): a stray continuation byte, a lead byte whose sequence is cut short by
 * a byte that cannot continue it, an overlong, surrogate or > U+10FFFF prefix.
 * A small value type: initialise with rill_tokenizer_stream_init(); holds no memory. */
typedef struct rill_tokenizer_stream {
    unsigned flags;        /* RILL_TOKENIZER_STREAM_* */
    uint8_t n_pend;        /* bytes of an incomplete character held back */
    unsigned char pend[3]; /* those bytes */
} rill_tokenizer_stream_t;

#define RILL_TOKENIZER_STREAM_SPECIAL (1u << 0) /* render control tokens as their text */

/* Resets s to "nothing pending" with the given flags. */
void rill_tokenizer_stream_init(rill_tokenizer_stream_t *s, unsigned flags);

/* Appends the piece of id and writes to out every character now complete. Returns the byte
 * count written (0 when everything is still pending). Errors: RILL_EINVAL (NULL arguments, id
 * out of range, out == NULL with cap > 0), RILL_EFULL (cap too small: nothing is written and s
 * is unchanged; rill_tokenizer_stream_bound() bytes always suffice). Does not allocate. */
int64_t rill_tokenizer_stream_feed(const rill_tokenizer_t *tok, rill_tokenizer_stream_t *s,
                                   int32_t id, char *out, size_t cap);

/* Ends the stream: a pending incomplete character is written as U+FFFD. Returns the byte count
 * (0 or 3) and leaves s reset. Errors: RILL_EINVAL, RILL_EFULL (cap < 3 with something
 * pending; s unchanged). */
int64_t rill_tokenizer_stream_flush(rill_tokenizer_stream_t *s, char *out, size_t cap);

/* The most bytes one rill_tokenizer_stream_feed() on tok can write. */
size_t rill_tokenizer_stream_bound(const rill_tokenizer_t *tok);

#ifdef __cplusplus
}
#endif
#endif /* RILL_TOKENIZER_H */
