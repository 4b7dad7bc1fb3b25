/*
 * tok_chat.c — the Qwen chat prompt (ChatML, SEMANTICS §9) as text:
 *   <|im_start|>{role}\n{content}<|im_end|>\n      per message
 *   <|im_start|>assistant\n                          with MOE8_CHAT_ADD_ASSISTANT
 *   <think>\n\n</think>\n\n                          ... and MOE8_CHAT_NO_THINKING
 * Content is copied verbatim. This is ChatML by name, without a template:
 * the model's own template (Qwen3's does tool calls and <think> blocks of
 * assistant turns too) is rendered by moe8_chat_apply (tok_template.c).
 */
#include <string.h>

#include "tokenizer/tokenizer.h"

static void put(char *out, size_t cap, size_t *pos, const char *s) {
    size_t n = strlen(s);
    if (*pos < cap) memcpy(out + *pos, s, n < cap - *pos ? n : cap - *pos);
    *pos += n;   /* cannot overflow: every piece is an existing string */
}

moe8_status moe8_chat_format(const moe8_chat_message *msgs, size_t n_msgs, unsigned flags,
                             char *out, size_t cap, size_t *n_out, moe8_error *err) {
    size_t pos = 0;
    if ((!msgs && n_msgs) || (!out && cap))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "chat_format: NULL argument");
    for (size_t i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                             "chat_format: message %zu has a NULL role or content", i);
        put(out, cap, &pos, "<|im_start|>");
        put(out, cap, &pos, msgs[i].role);
        put(out, cap, &pos, "\n");
        put(out, cap, &pos, msgs[i].content);
        put(out, cap, &pos, "<|im_end|>\n");
    }
    if (flags & MOE8_CHAT_ADD_ASSISTANT) {
        put(out, cap, &pos, "<|im_start|>assistant\n");
        if (flags & MOE8_CHAT_NO_THINKING) put(out, cap, &pos, "<think>\n\n</think>\n\n");
    }
    if (n_out) *n_out = pos;
    if (pos >= cap)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "chat_format: output holds %zu bytes, %zu needed (with the NUL)", cap,
                         pos + 1);
    out[pos] = '\0';
    return MOE8_OK;
}
