/*
 * pull.h — `moe8 pull`: a model repository's files from a hub (Hugging Face
 * or ModelScope) into a folder, over HTTP(S) with libcurl. The parts:
 *   pull_hub.c     the hubs' APIs: which files a revision has, with sizes and
 *                  (LFS) SHA-256, and each file's download address
 *   pull_fetch.c   the downloads: several at once, resumable (Range), each
 *                  checked against its size and SHA-256 before the rename
 *   (nettle)       SHA-256 of the LFS files, SHA-1 of git blob ids, below
 *   cmd_pull.c     the command, the cache layout, `-m REPO --pull`
 * Uses the CLI's error helpers (cli.h) and nothing of the library.
 */
#ifndef MOE8_PULL_H
#define MOE8_PULL_H

#include <stddef.h>
#include <stdint.h>

#include <nettle/sha1.h>
#include <nettle/sha2.h>

/* ---- the digests (nettle): SHA-256 of the LFS files, git blob ids (SHA-1) of the small ones -- */
typedef struct sha256_ctx pull_sha256;
typedef struct sha1_ctx pull_sha1;
static inline void pull_sha256_init(pull_sha256 *c) { sha256_init(c); }
static inline void pull_sha256_update(pull_sha256 *c, const void *p, size_t n) { sha256_update(c, n, p); }
static inline void pull_sha1_init(pull_sha1 *c) { sha1_init(c); }
static inline void pull_sha1_update(pull_sha1 *c, const void *p, size_t n) { sha1_update(c, n, p); }
/* d[0..n) as lowercase hex into out[2n + 1]. */
static inline void pull_hex(const uint8_t *d, size_t n, char *out) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) out[2 * i] = hex[d[i] >> 4], out[2 * i + 1] = hex[d[i] & 15];
    out[2 * n] = '\0';
}
/* The digest in hex; finishes c (nettle starts it again). */
static inline void pull_sha256_hex(pull_sha256 *c, char out[65]) {
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(c, sizeof d, d);
    pull_hex(d, sizeof d, out);
}
static inline void pull_sha1_hex(pull_sha1 *c, char out[41]) {
    uint8_t d[SHA1_DIGEST_SIZE];
    sha1_digest(c, sizeof d, d);
    pull_hex(d, sizeof d, out);
}

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
