/*
 * bench_serve_prompts.c — the prompts of `moe8 bench serve` and the bodies
 * that carry them. Synthetic prompts are --input-len words from a list of 256
 * common English words, each one token for the Qwen3 tokenizer with or without
 * its leading space: the first --shared-prefix words are the same in every
 * prompt, the next (up to 3) spell the prompt's index in base 256, the rest are
 * seeded random words. --prompt-file gives one prompt per non-empty line
 * instead. A completions or chat body asks for a stream of max_tokens =
 * --output-len, ignore_eos, temperature 0, usage in the stream, and the
 * --json-schema / --json-object response_format. A Responses body has `input`
 * (the prompt) and max_output_tokens, a Messages body one user message and
 * max_tokens, both streamed at temperature 0 (neither API has ignore_eos or
 * stream_options; their streams always end with the usage). Sends nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_serve.h"

static const char *const words[N_WORDS] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its", "may",
    "these", "what", "them", "than", "some", "him", "time", "into", "only", "do", "out", "could",
    "new", "about", "two", "first", "then", "also", "any", "like", "my", "now", "over", "such",
    "our", "man", "me", "even", "most", "made", "after", "many", "said", "did", "where", "must",
    "way", "years", "through", "back", "much", "before", "your", "good", "well", "down", "work",
    "should", "because", "each", "just", "those", "people", "how", "too", "little", "state",
    "very", "make", "world", "still", "own", "see", "men", "long", "here", "get", "both",
    "between", "life", "being", "under", "never", "day", "same", "another", "know", "while",
    "last", "might", "us", "great", "old", "year", "off", "come", "since", "against", "go", "came",
    "right", "used", "take", "three", "small", "house", "place", "found", "part", "water", "home",
    "light", "name", "city", "again", "point", "number", "hand", "high", "every", "left", "end",
    "form", "war", "few", "power", "school", "group", "body", "land", "night", "open", "road",
    "tree", "book", "line", "music", "river", "green", "table", "paper", "letter", "money",
    "story", "young", "word", "family", "black", "white", "order", "field", "early", "free",
    "case", "week", "car", "room", "door", "head", "face", "mind", "voice", "girl", "boy", "king",
    "art", "sea", "sun", "fire", "air", "eye", "game", "love", "food", "real", "blue", "red",
    "south", "north", "east", "west", "stone", "horse", "bird", "ship", "star", "moon", "rain",
    "snow", "wind", "glass", "gold", "iron", "wood", "dog", "bread", "salt", "tea", "song",
    "dance", "film", "news", "model", "train", "plan", "test", "rule", "rock", "hill", "lake",
    "farm", "shop", "bank", "club"};

char *bserve_synth_prompt(const serve_opts *o, int i, char **buf, size_t *cap) {
    const size_t need = (size_t)o->input_len * 8 + 1; /* longest word 7 + a space */
    uint64_t shared = o->seed ^ 0x5851f42d4c957f2dULL;
    uint64_t own = o->seed + 0x9e3779b9ULL * (uint64_t)(i + 1);
    uint32_t digits = (uint32_t)i;
    char *p;
    if (*cap < need) {
        char *nb = realloc(*buf, need);
        if (!nb) return NULL;
        *buf = nb, *cap = need;
    }
    p = *buf;
    for (int k = 0; k < o->input_len; k++) {
        const char *w;
        if (k < o->shared_prefix) w = words[bserve_splitmix(&shared) % N_WORDS];
        else if (k < o->shared_prefix + 3) w = words[digits % N_WORDS], digits /= N_WORDS;
        else w = words[bserve_splitmix(&own) % N_WORDS];
        if (k) *p++ = ' ';
        p = stpcpy(p, w);
    }
    return *buf;
}

int bserve_index_words(int n) {
    int d = 0;
    for (int64_t span = 1; span < n; span *= N_WORDS) d++;
    return d;
}

int bserve_read_prompts(const serve_opts *o, prompt_set *ps) {
    moe8_error err;
    size_t len;
    char *p, *end;
    int cap = 0;
    if (moe8_read_file(o->prompt_file, MAX_PROMPT_FILE, &ps->data, &len, &err))
        return cli_fail(CMD, &err);
    if (memchr(ps->data, '\0', len)) {
        return cli_usage_err(CMD, "--prompt-file '%s' contains a NUL byte", o->prompt_file);
    }
    for (p = ps->data, end = ps->data + len; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        char *line = p;
        p = nl ? nl + 1 : end;
        if (e > line && e[-1] == '\r') e--;
        *e = '\0'; /* end is data[len], the terminator moe8_read_file adds */
        if (e == line) continue;
        if (ps->n_lines == cap) {
            int nc = cap ? 2 * cap : 1024;
            char **nl2 = realloc(ps->lines, (size_t)nc * sizeof *nl2);
            int64_t *nw = realloc(ps->n_words, (size_t)nc * sizeof *nw);
            if (nl2) ps->lines = nl2;
            if (nw) ps->n_words = nw;
            if (!nl2 || !nw) return cli_err(CMD, "out of memory reading '%s'", o->prompt_file);
            cap = nc;
        }
        int64_t nw = 0;
        for (const char *q = line; *q; q++)
            if (*q != ' ' && *q != '\t' && (q == line || q[-1] == ' ' || q[-1] == '\t')) nw++;
        ps->lines[ps->n_lines] = line;
        ps->n_words[ps->n_lines++] = nw;
    }
    if (!ps->n_lines) {
        return cli_usage_err(CMD, "--prompt-file '%s' has no non-empty line", o->prompt_file);
    }
    return 0;
}

void bserve_free_prompts(prompt_set *ps) {
    free(ps->lines);
    free(ps->n_words);
    free(ps->data);
}

/* --json-schema's file: a JSON Schema (an object, or true / false). */
int bserve_read_schema(serve_opts *o) {
    moe8_error err;
    size_t len;
    char *data = NULL;
    const char *at = NULL;
    if (moe8_read_file(o->json_schema, MAX_SCHEMA_FILE, &data, &len, &err)) {
        cli_fail(CMD, &err);
        return 2;
    }
    o->schema = cJSON_ParseWithLengthOpts(data, len + 1, &at, 1); /* + its NUL: nothing after the value */
    if (!o->schema)
        cli_err(CMD, "--json-schema '%s': not one JSON value (at byte %td: '%.20s')", o->json_schema,
                at ? at - data : (ptrdiff_t)0, at ? at : "");
    else if (!cJSON_IsObject(o->schema) && !cJSON_IsBool(o->schema))
        cli_err(CMD, "--json-schema '%s': expected a JSON Schema (an object)", o->json_schema);
    free(data);
    if (o->schema && (cJSON_IsObject(o->schema) || cJSON_IsBool(o->schema))) return 0;
    cJSON_Delete(o->schema);
    o->schema = NULL;
    return 2;
}

/* response_format of --json-schema / --json-object into j (0, or -1 on no memory). */
static int add_response_format(const serve_opts *o, cJSON *j) {
    cJSON *rf, *js;
    if (!o->schema && !o->json_object) return 0;
    if (!(rf = cJSON_AddObjectToObject(j, "response_format"))) return -1;
    if (o->json_object) return cJSON_AddStringToObject(rf, "type", "json_object") ? 0 : -1;
    if (!cJSON_AddStringToObject(rf, "type", "json_schema") || !(js = cJSON_AddObjectToObject(rf, "json_schema")) ||
        !cJSON_AddStringToObject(js, "name", "bench") || !cJSON_AddBoolToObject(js, "strict", 1))
        return -1;
    return cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(o->schema, 1)) ? 0 : -1;
}

/* The body of a /v1/responses or /v1/messages request (NULL on no memory). */
static char *agent_body(const serve_opts *o, const char *model, const char *prompt) {
    cJSON *j = cJSON_CreateObject();
    char *s = NULL;
    if (!j || !cJSON_AddStringToObject(j, "model", model)) goto done;
    if (o->api == API_RESPONSES) {
        if (!cJSON_AddStringToObject(j, "input", prompt) ||
            !cJSON_AddNumberToObject(j, "max_output_tokens", o->output_len))
            goto done;
    } else {
        cJSON *msgs = cJSON_AddArrayToObject(j, "messages"), *m = cJSON_CreateObject();
        if (!msgs || !m || !cJSON_AddItemToArray(msgs, m) || !cJSON_AddStringToObject(m, "role", "user") ||
            !cJSON_AddStringToObject(m, "content", prompt) || !cJSON_AddNumberToObject(j, "max_tokens", o->output_len))
            goto done;
    }
    if (!cJSON_AddNumberToObject(j, "temperature", 0) || !cJSON_AddBoolToObject(j, "stream", 1)) goto done;
    s = cJSON_PrintUnformatted(j);
done:
    cJSON_Delete(j);
    return s;
}

char *bserve_request_body(const serve_opts *o, const char *model, const char *prompt) {
    cJSON *j, *so;
    char *s = NULL;
    if (o->api >= API_RESPONSES) return agent_body(o, model, prompt);
    j = cJSON_CreateObject(), so = cJSON_CreateObject();
    if (!j || !so) goto done;
    cJSON_AddStringToObject(j, "model", model);
    if (o->api == API_CHAT) {
        cJSON *msgs = cJSON_AddArrayToObject(j, "messages"), *m = cJSON_CreateObject();
        if (!msgs || !m) {
            cJSON_Delete(m);
            goto done;
        }
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", prompt);
    } else {
        cJSON_AddStringToObject(j, "prompt", prompt);
    }
    cJSON_AddNumberToObject(j, "max_tokens", o->output_len);
    cJSON_AddNumberToObject(j, "temperature", 0);
    cJSON_AddBoolToObject(j, "ignore_eos", 1);
    cJSON_AddBoolToObject(j, "stream", 1);
    cJSON_AddBoolToObject(so, "include_usage", 1);
    cJSON_AddItemToObject(j, "stream_options", so);
    so = NULL;
    if (add_response_format(o, j)) goto done;
    s = cJSON_PrintUnformatted(j);
done:
    cJSON_Delete(so);
    cJSON_Delete(j);
    return s;
}
