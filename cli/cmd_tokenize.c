/*
 * cmd_tokenize.c - `rill tokenize`: the tokens of a text, as llama.cpp's llama-tokenize prints
 * them. Opens only the GGUF metadata, so vocabulary-only files work.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "rill_alloc.h"
#include "rill_gguf.h"
#include "rill_tokenizer.h"

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL;
    bool ids_only = false, no_special = false, no_parse_special = false;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &model, "GGUF file (a vocabulary-only file is enough)", 0,
          -1 },
        { "prompt", "-p", CLI_STRING, &prompt, "text to tokenize (required)", 0, -1 },
        { "ids", NULL, CLI_FLAG, &ids_only, "print only the ids, as [a, b, c]", 0, -1 },
        { "no-bos", NULL, CLI_FLAG, &no_special,
          "do not add the BOS/EOS tokens the model's metadata asks for", 0, -1 },
        { "no-parse-special", NULL, CLI_FLAG, &no_parse_special,
          "treat special-token texts such as <|im_start|> as plain text", 0, -1 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts, "rill tokenize [--model FILE] --prompt TEXT [--ids]",
                       "Prints the tokens of TEXT: one 'id -> piece' line each, or with --ids one "
                       "list.",
                       pos, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if (prompt == NULL) {
        fprintf(stderr, "rill tokenize: --prompt is required\n");
        return 2;
    }
    if (model == NULL && (model = cli_default_model()) == NULL) {
        return 1;
    }
    rill_gguf_t *g = NULL;
    rill_tokenizer_t *tok = NULL;
    int32_t *ids = NULL;
    int status = 1;
    rill_err_t err = rill_gguf_open(model, &g);
    if (err != RILL_OK) {
        fprintf(stderr, "rill tokenize: %s: %s\n", model, rill_last_error(err));
        goto done;
    }
    err = rill_tokenizer_new(g, &tok);
    if (err != RILL_OK) {
        fprintf(stderr, "rill tokenize: %s: %s\n", model, rill_last_error(err));
        goto done;
    }
    size_t len = strlen(prompt);
    int64_t n = rill_tokenizer_encode(tok, prompt, len, !no_special, !no_parse_special, NULL, 0);
    if (n < 0) {
        fprintf(stderr, "rill tokenize: %s\n", rill_strerror((rill_err_t)n));
        goto done;
    }
    ids = rill_malloc(RILL_MEM_OTHER, (size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (ids == NULL) {
        fprintf(stderr, "rill tokenize: out of memory\n");
        goto done;
    }
    n = rill_tokenizer_encode(tok, prompt, len, !no_special, !no_parse_special, ids, n);
    if (n < 0) {
        fprintf(stderr, "rill tokenize: %s\n", rill_strerror((rill_err_t)n));
        goto done;
    }
    if (ids_only) {
        printf("[");
        for (int64_t i = 0; i < n; i++) {
            printf("%s%d", i ? ", " : "", ids[i]);
        }
        printf("]\n");
    } else {
        for (int64_t i = 0; i < n; i++) {
            size_t plen = 0;
            const char *piece = rill_tokenizer_piece(tok, ids[i], true, &plen);
            printf("%6d -> '%.*s'\n", ids[i], (int)plen, piece != NULL ? piece : "");
        }
    }
    status = 0;
done:
    rill_free(ids);
    rill_tokenizer_destroy(&tok);
    rill_gguf_destroy(&g);
    return status;
}
