/*
 * rill_chat.h - chat templates: a list of (role, content) messages -> the prompt text.
 *
 * GGUF files carry their chat template as a Jinja2 program (`tokenizer.chat_template`). rill does
 * not run Jinja: like llama.cpp it recognises the families it supports by their markers and
 * renders them with C code, so the output is exact and cheap. Supported families:
 *
 *   RILL_CHAT_CHATML  detected by "<|im_start|>" (SmolLM2, Qwen2/2.5):
 *                       <|im_start|>{role}\n{content}<|im_end|>\n   per message, then
 *                       <|im_start|>assistant\n                    as the generation prompt.
 *                     Many ChatML templates insert a default system message when the first
 *                     message is not a system message (SmolLM2: "You are a helpful AI assistant
 *                     named SmolLM, trained by Hugging Face"; Qwen2.5: "You are Qwen, created by
 *                     Alibaba Cloud. ..."). When the template holds such a literal
 *                     `<|im_start|>system\n...<|im_end|>` string, it is extracted at creation and
 *                     inserted the same way.
 *   RILL_CHAT_LLAMA3  detected by "<|start_header_id|>" and "<|end_header_id|>":
 *                       <|start_header_id|>{role}<|end_header_id|>\n\n{trim(content)}<|eot_id|>
 *                     then <|start_header_id|>assistant<|end_header_id|>\n\n. The BOS token
 *                     (<|begin_of_text|>) is the tokenizer's business and is not emitted. The
 *                     date preamble that Llama 3.1 templates add to system messages is not
 *                     reproduced.
 *
 * Special-token markers are emitted as text; the tokenizer must be asked to parse special tokens
 * for them to become single tokens.
 *
 * Unknown templates give RILL_EUNSUPPORTED; the caller may then force a family explicitly (for
 * example from a --chat-template option).
 *
 * Thread safety: a rill_chat_t is immutable after creation and may be shared by threads.
 */
#ifndef RILL_CHAT_H
#define RILL_CHAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_chat rill_chat_t;

typedef enum rill_chat_template {
    RILL_CHAT_AUTO = 0, /* detect from the template text */
    RILL_CHAT_CHATML = 1,
    RILL_CHAT_LLAMA3 = 2
} rill_chat_template_t;

/* One message. Both strings are NUL-terminated and borrowed for the call. */
typedef struct rill_chat_msg {
    const char *role; /* "system", "user", "assistant", or any other role the model knows */
    const char *content;
} rill_chat_msg_t;

/* Creates a renderer from template text (tmpl, len bytes, need not be NUL-terminated; may be
 * NULL only when `force` is not AUTO). force == RILL_CHAT_AUTO detects the family from the text;
 * any other value uses that family whatever the text says (a ChatML default system message is
 * still taken from the text when it holds one). Errors: RILL_EINVAL (bad arguments),
 * RILL_EUNSUPPORTED (AUTO and the template is not one rill recognises), RILL_ENOMEM.
 * Caller owns *out (NULL on error); destroy with rill_chat_destroy(). Nothing is borrowed from
 * tmpl after the call. */
rill_err_t rill_chat_new(const char *tmpl, size_t len, rill_chat_template_t force,
                         rill_chat_t **out);

/* Same with the template of a GGUF file (`tokenizer.chat_template`). Errors as rill_chat_new(),
 * plus RILL_ENOTFOUND when the file has no template and force is AUTO, RILL_EFORMAT when the key
 * is not a string. */
rill_err_t rill_chat_new_gguf(const rill_gguf_t *g, rill_chat_template_t force, rill_chat_t **out);

/* Frees and sets *cp = NULL. NULL-safe. */
void rill_chat_destroy(rill_chat_t **cp);

/* Renders n messages (msgs may be NULL when n == 0) and, when add_generation_prompt, the header
 * that makes the model answer as the assistant. Works like snprintf: writes at most cap bytes
 * including a terminating NUL (buf may be NULL when cap == 0) and returns the full length of the
 * prompt excluding the NUL, so a result >= cap means the output was cut and the call should be
 * repeated with a buffer of result + 1 bytes. Returns RILL_EINVAL (negative) for NULL c, msgs
 * with n > 0, or a NULL role or content. Never allocates. */
int64_t rill_chat_apply(const rill_chat_t *c, const rill_chat_msg_t *msgs, size_t n,
                        bool add_generation_prompt, char *buf, size_t cap);

/* As rill_chat_apply(), for messages that continue a conversation already under way (a
 * question put to a session after its stream): no default system message is inserted, so only
 * the messages themselves and the generation prompt are rendered. */
int64_t rill_chat_apply_turns(const rill_chat_t *c, const rill_chat_msg_t *msgs, size_t n,
                              bool add_generation_prompt, char *buf, size_t cap);

/* The family in use (never AUTO). */
rill_chat_template_t rill_chat_kind(const rill_chat_t *c);

/* The default system message inserted before a first non-system message, or NULL when none.
 * Borrowed; valid until rill_chat_destroy(). */
const char *rill_chat_default_system(const rill_chat_t *c);

/* The text that ends an assistant turn ("<|im_end|>", "<|eot_id|>"): generation should stop
 * when the model emits it. Static string. */
const char *rill_chat_end_of_turn(const rill_chat_t *c);

/* "chatml", "llama3" or "auto"; "?" for other values. Static string. */
const char *rill_chat_template_name(rill_chat_template_t t);

/* Parses a name as written by rill_chat_template_name() (for command-line options). Returns
 * false and leaves *out unaltered when the name is unknown or NULL. */
bool rill_chat_template_from_name(const char *name, rill_chat_template_t *out);

#ifdef __cplusplus
}
#endif
#endif /* RILL_CHAT_H */
