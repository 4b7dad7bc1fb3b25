/*
 * templates.c — chat templates moe8 carries for model families whose
 * tokenizer files ship none, so `moe8 make-model` can write one into a
 * synthetic model's tokenizer_config.json (the Mixtral tokenizer package
 * moe8 uses has no chat_template).
 *
 *   mixtral-instruct   mistralai/Mixtral-8x7B-Instruct-v0.1's chat_template
 *                      (tokenizer_config.json on the Hugging Face hub, the
 *                      revision with the optional system message), byte for
 *                      byte; also tests/data/jinja/mixtral_instruct.jinja.
 */
#include <string.h>

#include "core/public.h"

static const char MIXTRAL_INSTRUCT[] =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set loop_messages = messages %}\n"
    "{%- endif %}\n"
    "\n"
    "{{- bos_token }}\n"
    "{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n"
    "    {%- if message['role'] == 'user' %}\n"
    "        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n"
    "        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n"
    "        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n";

static const struct {
    const char *name, *text;
} BUILTIN[] = {
    {"mixtral-instruct", MIXTRAL_INSTRUCT},
};

const char *moe8_chat_template_builtin(const char *name) {
    for (size_t i = 0; name && i < sizeof BUILTIN / sizeof *BUILTIN; i++)
        if (!strcmp(BUILTIN[i].name, name)) return BUILTIN[i].text;
    return NULL;
}
