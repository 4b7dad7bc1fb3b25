/*
 * pull_hub.c — what a hub says about a repository revision (pull.h).
 *
 * Hugging Face (HF_ENDPOINT, default https://huggingface.co):
 *   GET /api/models/OWNER/NAME/revision/REV?blobs=true   (as huggingface_hub's
 *       model_info(files_metadata=True)) -> {"sha": commit, "siblings":
 *       [{"rfilename", "size", "lfs": {"sha256", "size"}?}]}
 *   a file: GET /OWNER/NAME/resolve/COMMIT/PATH — small files answer 200,
 *   LFS files a 302 to a CDN; headers X-Repo-Commit, ETag / X-Linked-Etag
 *   (the LFS sha256), X-Linked-Size. A token goes as "Authorization: Bearer"
 *   (HF_TOKEN, else HUGGING_FACE_HUB_TOKEN); libcurl does not carry it to the
 *   CDN's other host.
 * ModelScope (MODELSCOPE_DOMAIN, default www.modelscope.cn; a value with
 * "://" is taken as the whole endpoint):
 *   GET /api/v1/models/OWNER/NAME/repo/files?Revision=REV&Recursive=true
 *       -> {"Code": 200, "Data": {"Files": [{"Path", "Size", "Sha256", "Type"}]}}
 *   a file: GET /api/v1/models/OWNER/NAME/repo?Revision=REV&FilePath=PATH
 *   A token (MODELSCOPE_API_TOKEN) goes as "Authorization: Bearer".
 *
 * Only top-level files moe8 reads are listed (config, tokenizer and template
 * files, every *.json such as the safetensors index and
 * quant_model_description*.json, *.safetensors); names are checked (no '/',
 * no leading '.', plain characters) before any becomes a path here.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "cli.h"
#include "pull.h"

enum { MAX_LISTING = 64 << 20 };

typedef struct {
    char *p;
    size_t n, cap;
    int too_big;
    char err_msg[256]; /* the hub's X-Error-Message, if any */
    char commit[96];   /* X-Repo-Commit */
} mem;

static size_t on_body(char *d, size_t sz, size_t nm, void *u) {
    mem *m = u;
    const size_t n = sz * nm;
    if (m->n + n + 1 > MAX_LISTING) {
        m->too_big = 1;
        return 0;
    }
    if (m->n + n + 1 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 65536;
        while (cap < m->n + n + 1) cap *= 2;
        char *q = realloc(m->p, cap);
        if (!q) return 0;
        m->p = q, m->cap = cap;
    }
    memcpy(m->p + m->n, d, n);
    m->n += n;
    m->p[m->n] = '\0';
    return n;
}

/* "Name: value\r\n" -> value into out when the name matches (any case). */
static void header_value(const char *line, size_t n, const char *name, char *out, size_t cap) {
    const size_t k = strlen(name);
    if (n <= k + 1 || strncasecmp(line, name, k) || line[k] != ':') return;
    const char *v = line + k + 1, *e = line + n;
    while (v < e && (*v == ' ' || *v == '\t')) v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ')) e--;
    snprintf(out, cap, "%.*s", (int)(e - v), v);
}

static size_t on_header(char *d, size_t sz, size_t nm, void *u) {
    mem *m = u;
    header_value(d, sz * nm, "X-Error-Message", m->err_msg, sizeof m->err_msg);
    header_value(d, sz * nm, "X-Repo-Commit", m->commit, sizeof m->commit);
    return sz * nm;
}

/* GET url into m; the HTTP status, or -1 after a transport error (printed). */
static long get_json(const char *cmd, const pull_repo *r, const char *url, mem *m) {
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    long status = -1;
    if (!c) return cli_err(cmd, "cannot start libcurl"), -1;
    if (r->auth[0]) h = curl_slist_append(h, r->auth);
    h = curl_slist_append(h, "Accept: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "moe8-pull");
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, m);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, m);
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else if (m->too_big) cli_err(cmd, "%s: the listing is larger than %d MiB", url, MAX_LISTING >> 20);
    else cli_err(cmd, "%s: %s", url, curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return status;
}

/* Percent-encode s (a revision such as refs/pr/1, a file path) into out. */
static void url_escape(const char *s, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (; *s && n + 4 < cap; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') out[n++] = (char)ch;
        else out[n++] = '%', out[n++] = hex[ch >> 4], out[n++] = hex[ch & 15];
    }
    out[n] = '\0';
}

int pull_repo_init(const char *cmd, pull_repo *r, pull_hub_kind hub, const char *spec) {
    const char *at = strchr(spec, '@');
    const size_t rlen = at ? (size_t)(at - spec) : strlen(spec);
    int n_slash = 0;
    memset(r, 0, sizeof *r);
    r->hub = hub;
    for (size_t i = 0; i < rlen; i++) n_slash += spec[i] == '/';
    if (n_slash != 1 || spec[0] == '/' || spec[0] == '.' || spec[rlen - 1] == '/' ||
        (strstr(spec, "/.") && strstr(spec, "/.") < spec + rlen) || rlen >= sizeof r->repo ||
        (at && (!at[1] || strlen(at + 1) >= sizeof r->revision)))
        return cli_usage_err(cmd, "'%s' is not a repository id: OWNER/NAME[@REVISION]", spec);
    for (size_t i = 0; i < rlen; i++)
        if (!isalnum((unsigned char)spec[i]) && !strchr("-_./", spec[i]))
            return cli_usage_err(cmd, "'%s' is not a repository id: OWNER/NAME[@REVISION]", spec);
    snprintf(r->repo, sizeof r->repo, "%.*s", (int)rlen, spec);
    snprintf(r->revision, sizeof r->revision, "%s", at ? at + 1 : hub == PULL_HF ? "main" : "master");
    const char *tok, *ep;
    if (hub == PULL_HF) {
        ep = getenv("HF_ENDPOINT");
        snprintf(r->endpoint, sizeof r->endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
        r->token_env = "HF_TOKEN";
        tok = getenv("HF_TOKEN");
        if (!tok || !*tok) tok = getenv("HUGGING_FACE_HUB_TOKEN");
    } else {
        ep = getenv("MODELSCOPE_DOMAIN");
        if (ep && strstr(ep, "://")) snprintf(r->endpoint, sizeof r->endpoint, "%s", ep);
        else snprintf(r->endpoint, sizeof r->endpoint, "https://%s", ep && *ep ? ep : "www.modelscope.cn");
        r->token_env = "MODELSCOPE_API_TOKEN";
        tok = getenv("MODELSCOPE_API_TOKEN");
    }
    size_t n = strlen(r->endpoint);
    while (n && r->endpoint[n - 1] == '/') r->endpoint[--n] = '\0';
    if (tok && *tok) {
        if (strlen(tok) > 1000 || strpbrk(tok, "\r\n"))
            return cli_usage_err(cmd, "%s is not a token (a line of at most 1000 characters)", r->token_env);
        snprintf(r->auth, sizeof r->auth, "Authorization: Bearer %s", tok);
    }
    return 0;
}

/* The top-level files moe8 reads, under a plain name. */
static int wanted(const char *p) {
    const size_t n = strlen(p);
    if (!n || n > 200 || p[0] == '.' || strstr(p, "..")) return 0;
    for (const char *q = p; *q; q++)
        if (!isalnum((unsigned char)*q) && !strchr("-_.+", *q)) return 0;
#define ENDS(s) (n >= sizeof(s) - 1 && !strcmp(p + n - (sizeof(s) - 1), s))
    return ENDS(".safetensors") || ENDS(".json") || ENDS(".jinja") || ENDS(".tiktoken") ||
           !strcmp(p, "tokenizer.model") || !strcmp(p, "merges.txt") || !strcmp(p, "vocab.txt");
#undef ENDS
}

static int is_hex64(const char *s) {
    if (strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* Append one listed file; 0, or 1 after an error naming it. */
static int add_file(const char *cmd, pull_repo *r, const char *path, double size, const char *sha,
                    const char *blob) {
    char esc[1024], url[4096];
    if (!wanted(path)) return 0;
    if (!(size >= 0 && size < 9e18 && size == (double)(int64_t)size))
        return cli_err(cmd, "%s: the hub lists '%s' without a valid size", r->repo, path);
    if (sha && *sha && !is_hex64(sha))
        return cli_err(cmd, "%s: the hub lists '%s' with sha256 '%.80s', not 64 hex digits", r->repo, path, sha);
    pull_file *f = realloc(r->files, (size_t)(r->n_files + 1) * sizeof *f);
    if (!f) return cli_err(cmd, "out of memory");
    r->files = f;
    f = &r->files[r->n_files];
    memset(f, 0, sizeof *f);
    f->size = (int64_t)size;
    if (sha && *sha)
        for (int i = 0; i < 65; i++) f->sha256[i] = (char)tolower((unsigned char)sha[i]);
    else if (blob && strlen(blob) == 40 && strspn(blob, "0123456789abcdef") == 40)
        memcpy(f->git_sha1, blob, 41);
    url_escape(path, esc, sizeof esc);
    if (r->hub == PULL_HF) {
        char rev[300];
        url_escape(r->commit[0] ? r->commit : r->revision, rev, sizeof rev);
        snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", r->endpoint, r->repo, rev, esc);
    } else {
        char rev[300];
        url_escape(r->revision, rev, sizeof rev);
        snprintf(url, sizeof url, "%s/api/v1/models/%s/repo?Revision=%s&FilePath=%s", r->endpoint, r->repo, rev, esc);
    }
    if (!(f->path = strdup(path)) || !(f->url = strdup(url))) return cli_err(cmd, "out of memory");
    r->n_files++;
    return 0;
}

static int parse_hf(const char *cmd, pull_repo *r, const cJSON *root) {
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "sha"), *sib, *s;
    if (cJSON_IsString(sha) && strlen(sha->valuestring) < sizeof r->commit && !strpbrk(sha->valuestring, "/?#%"))
        snprintf(r->commit, sizeof r->commit, "%s", sha->valuestring);
    sib = cJSON_GetObjectItemCaseSensitive(root, "siblings");
    if (!cJSON_IsArray(sib)) return cli_err(cmd, "%s@%s: the hub's answer has no 'siblings' list", r->repo, r->revision);
    cJSON_ArrayForEach(s, sib) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(s, "rfilename");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size");
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(s, "lfs");
        const cJSON *lsha = lfs ? cJSON_GetObjectItemCaseSensitive(lfs, "sha256") : NULL;
        const cJSON *blob = cJSON_GetObjectItemCaseSensitive(s, "blobId");
        if (!cJSON_IsString(name)) return cli_err(cmd, "%s: a sibling without 'rfilename'", r->repo);
        if (wanted(name->valuestring) && !cJSON_IsNumber(size))
            return cli_err(cmd, "%s: the hub lists '%s' without a size (an endpoint without ?blobs=true?)",
                           r->repo, name->valuestring);
        if (add_file(cmd, r, name->valuestring, cJSON_IsNumber(size) ? size->valuedouble : 0,
                     cJSON_IsString(lsha) ? lsha->valuestring : NULL, cJSON_IsString(blob) ? blob->valuestring : NULL))
            return 1;
    }
    return 0;
}

static int parse_ms(const char *cmd, pull_repo *r, const cJSON *root) {
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(root, "Code");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "Data");
    const cJSON *files = data ? cJSON_GetObjectItemCaseSensitive(data, "Files") : NULL, *f;
    if (cJSON_IsNumber(code) && code->valueint != 200) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(root, "Message");
        return cli_err(cmd, "%s@%s: the hub answered code %d: %s", r->repo, r->revision, code->valueint,
                       cJSON_IsString(msg) ? msg->valuestring : "(no message)");
    }
    if (!cJSON_IsArray(files)) return cli_err(cmd, "%s@%s: the hub's answer has no Data.Files list", r->repo, r->revision);
    cJSON_ArrayForEach(f, files) {
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(f, "Path");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(f, "Type");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(f, "Size");
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(f, "Sha256");
        if (cJSON_IsString(type) && strcmp(type->valuestring, "blob")) continue; /* a folder */
        if (!cJSON_IsString(path)) return cli_err(cmd, "%s: a file without 'Path'", r->repo);
        if (wanted(path->valuestring) && !cJSON_IsNumber(size))
            return cli_err(cmd, "%s: the hub lists '%s' without a size", r->repo, path->valuestring);
        if (add_file(cmd, r, path->valuestring, cJSON_IsNumber(size) ? size->valuedouble : 0,
                     cJSON_IsString(sha) ? sha->valuestring : NULL, NULL))
            return 1;
    }
    return 0;
}

/* An answer other than 200, said so a user can act on it. */
static int refused(const char *cmd, const pull_repo *r, long status, const mem *m) {
    const char *why = m->err_msg[0] ? m->err_msg : "";
    if (status == 401 || status == 403)
        return cli_err(cmd, "%s@%s: the hub answered %ld%s%s: a gated or private repository needs a token "
                       "with access in %s%s (or the repository does not exist)", r->repo, r->revision, status,
                       *why ? ": " : "", why, r->token_env, r->auth[0] ? " (the one set was refused)" : "");
    if (status == 404)
        return cli_err(cmd, "%s@%s: not found on %s (no such repository or revision)%s%s", r->repo, r->revision,
                       r->endpoint, *why ? ": " : "", why);
    return cli_err(cmd, "%s@%s: the hub answered HTTP %ld%s%s", r->repo, r->revision, status, *why ? ": " : "", why);
}

int pull_repo_list(const char *cmd, pull_repo *r) {
    char url[2048], rev[600];
    mem m = {0};
    cJSON *root = NULL;
    int rc = 1;
    url_escape(r->revision, rev, sizeof rev);
    if (r->hub == PULL_HF)
        snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", r->endpoint, r->repo, rev);
    else
        snprintf(url, sizeof url, "%s/api/v1/models/%s/repo/files?Revision=%s&Recursive=true", r->endpoint,
                 r->repo, rev);
    const long status = get_json(cmd, r, url, &m);
    if (status < 0) goto done;
    if (status != 200) {
        refused(cmd, r, status, &m);
        goto done;
    }
    if (!m.p || !(root = cJSON_ParseWithLength(m.p, m.n))) {
        cli_err(cmd, "%s: the hub's answer to %s is not JSON", r->repo, url);
        goto done;
    }
    rc = r->hub == PULL_HF ? parse_hf(cmd, r, root) : parse_ms(cmd, r, root);
    if (!rc && !r->n_files)
        rc = cli_err(cmd, "%s@%s: no config, tokenizer or safetensors files in the repository", r->repo, r->revision);
done:
    cJSON_Delete(root);
    free(m.p);
    return rc;
}

void pull_repo_free(pull_repo *r) {
    for (int i = 0; i < r->n_files; i++) free(r->files[i].path), free(r->files[i].url);
    free(r->files);
    r->files = NULL;
    r->n_files = 0;
}
