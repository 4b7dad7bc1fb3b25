/*
 * tok_template.h — the tokenizer's chat template (tok_template.c), as the
 * loader sees it. Not part of the public API.
 */
#ifndef MOE8_TOK_TEMPLATE_H
#define MOE8_TOK_TEMPLATE_H

#include <cjson/cJSON.h>

#include "core/core.h"

struct moe8_tokenizer;
struct tok_chat;

/* From tokenizer_config.json (cfg, read from cfg_path): chat_template and
 * the special tokens templates see. No chat_template is fine (t->chat stays
 * NULL); one of the wrong JSON type fails with MOE8_ERR_FORMAT; one moe8
 * cannot parse is kept as an error for moe8_tokenizer_chat_template. */
moe8_status moe8_tok_chat_from_config(struct moe8_tokenizer *t, const cJSON *cfg, const char *cfg_path,
                                 moe8_error *err);
/* dir/chat_template.jinja, when present, replaces the config's template (as
 * in transformers). */
moe8_status moe8_tok_chat_from_dir(struct moe8_tokenizer *t, const char *dir, moe8_error *err);
void moe8_tok_chat_free(struct tok_chat *c);

#endif
