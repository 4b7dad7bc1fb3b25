/*
 * responses_store.c — the responses moe8 serve keeps for previous_response_id
 * and GET /v1/responses/{id} (DELETE /v1/responses/{id} drops one): at most --responses-store of them in memory,
 * the least recently used (stored or read) dropped first. Each entry is the
 * Response's JSON text and the conversation up to its output (the items a
 * follow-up request continues), both copies the store owns.
 *
 * Does not: persist anything, or keep instructions (they do not carry over
 * through previous_response_id, as OpenAI's API says).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/responses.h"

typedef struct {
    char *id, *response;
    cJSON *items;
    uint64_t used;          /* the store's tick of its last use; 0: a free slot */
} resp_entry;

struct resp_store {
    pthread_mutex_t lock;   /* workers read it, the HTTP thread stores */
    resp_entry *e;          /* [cap] */
    int cap;
    uint64_t tick;
};

resp_store *moe8_resp_store_new(int cap) {
    resp_store *st;
    if (cap <= 0 || !(st = calloc(1, sizeof *st))) return NULL;
    if (!(st->e = calloc((size_t)cap, sizeof *st->e))) {
        free(st);
        return NULL;
    }
    st->cap = cap;
    pthread_mutex_init(&st->lock, NULL);
    return st;
}

static void entry_clear(resp_entry *e) {
    free(e->id);
    free(e->response);
    cJSON_Delete(e->items);
    memset(e, 0, sizeof *e);
}

void moe8_resp_store_free(resp_store *st) {
    if (!st) return;
    for (int i = 0; i < st->cap; i++) entry_clear(&st->e[i]);
    free(st->e);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

/* The entry of id (under the lock), or NULL. */
static resp_entry *find(resp_store *st, const char *id) {
    for (int i = 0; i < st->cap; i++)
        if (st->e[i].used && !strcmp(st->e[i].id, id)) return &st->e[i];
    return NULL;
}

void moe8_resp_store_put(resp_store *st, const char *id, const char *response, cJSON *items) {
    resp_entry *e;
    if (!st) {
        cJSON_Delete(items);
        return;
    }
    pthread_mutex_lock(&st->lock);
    if (!(e = find(st, id))) { /* a free slot, else the least recently used */
        e = &st->e[0];
        for (int i = 1; i < st->cap && e->used; i++)
            if (st->e[i].used < e->used) e = &st->e[i];
    }
    entry_clear(e);
    e->id = strdup(id);
    e->response = strdup(response);
    e->items = items;
    if (!e->id || !e->response) entry_clear(e); /* out of memory: not kept */
    else e->used = ++st->tick;
    pthread_mutex_unlock(&st->lock);
}

cJSON *moe8_resp_store_items(resp_store *st, const char *id) {
    resp_entry *e;
    cJSON *items = NULL;
    if (!st) return NULL;
    pthread_mutex_lock(&st->lock);
    if ((e = find(st, id))) {
        e->used = ++st->tick;
        items = e->items ? cJSON_Duplicate(e->items, 1) : cJSON_CreateArray();
    }
    pthread_mutex_unlock(&st->lock);
    return items;
}

char *moe8_resp_store_response(resp_store *st, const char *id) {
    resp_entry *e;
    char *r = NULL;
    if (!st) return NULL;
    pthread_mutex_lock(&st->lock);
    if ((e = find(st, id))) r = strdup(e->response);
    pthread_mutex_unlock(&st->lock);
    return r;
}

int moe8_resp_store_delete(resp_store *st, const char *id) {
    resp_entry *e;
    int found = 0;
    if (!st) return 0;
    pthread_mutex_lock(&st->lock);
    if ((e = find(st, id))) {
        entry_clear(e);
        found = 1;
    }
    pthread_mutex_unlock(&st->lock);
    return found;
}
