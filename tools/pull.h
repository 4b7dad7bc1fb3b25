/*
 * pull.h — `moe8 pull`: a model repository's files from a hub (Hugging Face
 * or ModelScope) into a folder, over HTTP(S) with libcurl. The parts:
 *   pull_hub.c     the hubs' APIs: which files a revision has, with sizes and
 *                  (LFS) SHA-256, and each file's download address
 *   pull_fetch.c   the downloads: several at once, resumable (Range), each
 *                  checked against its size and SHA-256 before the rename
 *   pull_sha256.c  SHA-256 (FIPS 180-4); pull_sha1.c SHA-1 (git blob ids)
 *   cmd_pull.c     the command, the cache layout, `-m REPO --pull`
 * Uses the CLI's error helpers (cli.h) and nothing of the library.
 */
#ifndef MOE8_PULL_H
#define MOE8_PULL_H

#include <stddef.h>
#include <stdint.h>

/* ---- SHA-256 (pull_sha256.c) ------------------------------------------------------------- */
typedef struct {
    uint32_t h[8];
    uint64_t n;            /* bytes hashed so far */
    unsigned char buf[64]; /* the block being filled: n % 64 bytes of it */
} pull_sha256;
void pull_sha256_init(pull_sha256 *c);
void pull_sha256_update(pull_sha256 *c, const void *p, size_t n);
void pull_sha256_hex(pull_sha256 *c, char out[65]); /* finishes c */

/* ---- SHA-1 (pull_sha1.c): git blob ids of the small files ------------------------------- */
typedef struct {
    uint32_t h[5];
    uint64_t n;
    unsigned char buf[64];
} pull_sha1;
void pull_sha1_init(pull_sha1 *c);
void pull_sha1_update(pull_sha1 *c, const void *p, size_t n);
void pull_sha1_hex(pull_sha1 *c, char out[41]); /* finishes c */

/* ---- a repository's files (pull_hub.c) ---------------------------------------------------- */
typedef enum { PULL_HF, PULL_MODELSCOPE } pull_hub_kind;

typedef struct {
    char *path;      /* relative to the repository's root: "model-00001-of-00002.safetensors" */
    int64_t size;    /* bytes, as the hub lists them */
    char sha256[65]; /* lowercase hex, or "" when the hub publishes none (small git files) */
    char git_sha1[41]; /* without sha256: the git blob id (Hugging Face's blobId), or "" */
    char *url;       /* where to GET it */
} pull_file;

typedef struct {
    pull_hub_kind hub;
    char endpoint[512];  /* "https://huggingface.co", no trailing '/' */
    char repo[256];      /* "Qwen/Qwen3-30B-A3B" */
    char revision[256];  /* "main" (HF) or "master" (ModelScope) unless given */
    char commit[96];     /* the commit the revision resolved to, when the hub says */
    char auth[1100];     /* "Authorization: Bearer ..." or "" */
    const char *token_env; /* the variable the token came from, or would: "HF_TOKEN" */
    pull_file *files;
    int n_files;
} pull_repo;

/* Split "OWNER/NAME[@REV]" and fill the endpoint and token from the
 * environment (HF_ENDPOINT, HF_TOKEN / HUGGING_FACE_HUB_TOKEN; MODELSCOPE_DOMAIN,
 * MODELSCOPE_API_TOKEN). 0, or 2 after a usage error. */
int pull_repo_init(const char *cmd, pull_repo *r, pull_hub_kind hub, const char *spec);
/* List the revision's files that moe8 reads (config and tokenizer files,
 * *.safetensors and their index, quant_model_description*.json, chat
 * templates), each checked: a safe relative name, a size, a 64-digit hash
 * when there is one. 0, or 1 after an error naming the repository. */
int pull_repo_list(const char *cmd, pull_repo *r);
void pull_repo_free(pull_repo *r);

/* ---- downloads (pull_fetch.c) ------------------------------------------------------------- */
typedef struct {
    int jobs;       /* files at once */
    int retries;    /* attempts per file after a dropped connection */
    int quiet;      /* no progress lines */
} pull_fetch_params;

/* Every file of r into dir (made if missing): a file already there with the
 * listed size is kept; else DIR/.moe8-partial/NAME is downloaded (resumed
 * from its length with Range), checked against the size and SHA-256, and
 * renamed to DIR/NAME. 0, or 1 after errors (each printed, naming the file). */
int pull_fetch_all(const char *cmd, const pull_repo *r, const char *dir, const pull_fetch_params *p);

/* ---- the whole pull (cmd_pull.c) ---------------------------------------------------------- */
/* The folder a pull of spec goes to without -o:
 * ${MOE8_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/moe8/models}/HUB/OWNER/NAME[@REV]. */
int pull_default_dir(const char *spec, pull_hub_kind hub, char *out, size_t cap);
/* `moe8 CMD -m OWNER/NAME --pull`: pull spec into its default folder (or
 * find it there, complete) and write that folder to out. 0 or 1. */
int pull_for_model(const char *cmd, const char *spec, char *out, size_t cap);
/* Does s look like a repository id (OWNER/NAME[@REV], no such local path)? */
int pull_is_repo_id(const char *s);

#endif
