/*
 * pull_fetch.c — the downloads of `moe8 pull` (pull.h): `jobs` threads, each
 * with its own libcurl handle, take the repository's files in turn.
 *
 * One file: DIR/NAME already there with the listed size is kept (only a
 * checked file is ever renamed there). Else DIR/.moe8-partial/NAME.part is
 * opened without truncation; the bytes it holds are hashed, and the GET asks
 * for the rest ("Range: bytes=HAVE-"). A 206 appends; a 200 (the server
 * ignored the range) or a 416 starts again from byte 0. Redirects are
 * followed (Hugging Face sends LFS files to a CDN). A dropped connection
 * (the transfer ends short, or a receive error) is retried from the new
 * length, `retries` times, waiting 0.5 s more each time. At the end the
 * length must be the listed size, the SHA-256 the listed one (where the hub
 * publishes one; else the git blob id, SHA-1 of "blob SIZE\0" + bytes, where
 * it lists that) and, where the hub sent them, X-Linked-Size and
 * X-Linked-Etag must agree with the listing; then fsync and rename into
 * place. A wrong digest removes the partial file (a retry would resume a
 * bad prefix) and the file is not renamed.
 *
 * Progress on stderr: a line per file, and every 2 s (10 s when stderr is
 * not a terminal) the bytes so far, the rate and the files done.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "pull.h"

typedef struct {
    const char *cmd;
    const pull_repo *r;
    const char *dir;
    const pull_fetch_params *p;
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int next, n_done, n_failed, n_running;
    int64_t bytes_total, bytes_now; /* listed; present (kept files, partials, new bytes) */
    int finished;
} fetch_all;

typedef struct {
    fetch_all *all;
    const pull_file *f;
    CURL *c;
    int fd;
    int64_t have;        /* bytes in the partial file */
    pull_sha256 sha;
    pull_sha1 blob;      /* git's blob id of the bytes, for a file listed with one */
    int restarted;       /* this response restarts the file from byte 0 */
    int checked_status;  /* the response's status was looked at (first body bytes) */
    int too_long;
    char linked_size[32], linked_etag[100]; /* X-Linked-Size, X-Linked-Etag (any response) */
} fetch_one;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void add_bytes(fetch_all *a, int64_t n) {
    pthread_mutex_lock(&a->lock);
    a->bytes_now += n;
    pthread_mutex_unlock(&a->lock);
}

/* ---- one response ------------------------------------------------------------------------ */

static size_t on_header(char *d, size_t sz, size_t nm, void *u) {
    fetch_one *o = u;
    const size_t n = sz * nm;
    static const char *const names[2] = {"X-Linked-Size:", "X-Linked-Etag:"};
    char *outs[2] = {o->linked_size, o->linked_etag};
    const size_t caps[2] = {sizeof o->linked_size, sizeof o->linked_etag};
    for (int k = 0; k < 2; k++) {
        const size_t kl = strlen(names[k]);
        if (n <= kl || strncasecmp(d, names[k], kl)) continue;
        const char *v = d + kl, *e = d + n;
        while (v < e && (*v == ' ' || *v == '"')) v++;
        while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '"')) e--;
        snprintf(outs[k], caps[k], "%.*s", (int)(e - v), v);
    }
    return n;
}

/* SHA-256 and the git blob hash ("blob SIZE\0" first) start again. */
static void blob_init(fetch_one *o) {
    char head[40];
    pull_sha256_init(&o->sha);
    pull_sha1_init(&o->blob);
    const int n = snprintf(head, sizeof head, "blob %lld", (long long)o->f->size);
    pull_sha1_update(&o->blob, head, (size_t)n + 1); /* with its NUL */
}

/* Start the file again from byte 0. */
static int restart(fetch_one *o) {
    if (ftruncate(o->fd, 0) || lseek(o->fd, 0, SEEK_SET) < 0) return -1;
    add_bytes(o->all, -o->have);
    o->have = 0;
    blob_init(o);
    return 0;
}

static size_t on_body(char *d, size_t sz, size_t nm, void *u) {
    fetch_one *o = u;
    const size_t n = sz * nm;
    if (!o->checked_status) { /* a 200 to a ranged GET: the whole file again */
        long status = 0;
        curl_easy_getinfo(o->c, CURLINFO_RESPONSE_CODE, &status);
        o->checked_status = 1;
        if (status == 200 && o->have > 0 && restart(o)) return 0;
    }
    if (o->have + (int64_t)n > o->f->size) {
        o->too_long = 1;
        return 0;
    }
    for (size_t off = 0; off < n;) {
        const ssize_t w = write(o->fd, d + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return 0;
        off += (size_t)w;
    }
    pull_sha256_update(&o->sha, d, n);
    pull_sha1_update(&o->blob, d, n);
    o->have += (int64_t)n;
    add_bytes(o->all, (int64_t)n);
    return n;
}

/* Hash the bytes the partial file already holds; -1 on a read error. */
static int hash_existing(fetch_one *o) {
    static __thread unsigned char buf[1 << 20];
    int64_t left = o->have;
    if (lseek(o->fd, 0, SEEK_SET) < 0) return -1;
    while (left > 0) {
        const ssize_t r = read(o->fd, buf, left < (int64_t)sizeof buf ? (size_t)left : sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        pull_sha256_update(&o->sha, buf, (size_t)r);
        pull_sha1_update(&o->blob, buf, (size_t)r);
        left -= r;
    }
    return lseek(o->fd, o->have, SEEK_SET) < 0 ? -1 : 0;
}

/* ---- one file ---------------------------------------------------------------------------- */

typedef enum { ATT_DONE, ATT_RETRY, ATT_FAIL } attempt_rc;

/* One GET of the rest of the file. */
static attempt_rc attempt(fetch_one *o) {
    const fetch_all *a = o->all;
    struct curl_slist *h = NULL;
    char range[64];
    long status = 0;
    o->checked_status = 0;
    curl_easy_reset(o->c);
    if (a->r->auth[0]) h = curl_slist_append(h, a->r->auth); /* libcurl keeps it off other hosts */
    if (o->have > 0) {
        snprintf(range, sizeof range, "Range: bytes=%lld-", (long long)o->have);
        h = curl_slist_append(h, range);
    }
    curl_easy_setopt(o->c, CURLOPT_URL, o->f->url);
    curl_easy_setopt(o->c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(o->c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(o->c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(o->c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(o->c, CURLOPT_USERAGENT, "moe8-pull");
    curl_easy_setopt(o->c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(o->c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled transfer is a dropped one */
    curl_easy_setopt(o->c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(o->c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(o->c, CURLOPT_WRITEDATA, o);
    curl_easy_setopt(o->c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(o->c, CURLOPT_HEADERDATA, o);
    const CURLcode rc = curl_easy_perform(o->c);
    curl_slist_free_all(h);
    curl_easy_getinfo(o->c, CURLINFO_RESPONSE_CODE, &status);
    if (o->too_long) {
        cli_err(a->cmd, "%s: the server sent more than the listed %lld bytes", o->f->path, (long long)o->f->size);
        return ATT_FAIL;
    }
    if (rc == CURLE_HTTP_RETURNED_ERROR) {
        if (status == 416 && o->have > 0) return restart(o) ? ATT_FAIL : ATT_RETRY;
        if (status == 401 || status == 403)
            cli_err(a->cmd, "%s: the hub answered %ld: a gated or private file needs a token with access in %s",
                    o->f->path, status, a->r->token_env);
        else cli_err(a->cmd, "%s: the hub answered HTTP %ld (%s)", o->f->path, status, o->f->url);
        return status >= 500 ? ATT_RETRY : ATT_FAIL;
    }
    if (rc == CURLE_WRITE_ERROR) {
        cli_err(a->cmd, "%s: cannot write the partial file: %s", o->f->path, strerror(errno));
        return ATT_FAIL;
    }
    if (rc != CURLE_OK) {
        cli_err(a->cmd, "%s: %s after %lld of %lld bytes; resuming", o->f->path, curl_easy_strerror(rc),
                (long long)o->have, (long long)o->f->size);
        return ATT_RETRY;
    }
    return o->have == o->f->size ? ATT_DONE : ATT_RETRY;
}

/* The listed size and digest against what the hub's headers and the bytes say. */
static int verify(fetch_one *o) {
    const fetch_all *a = o->all;
    char hex[65];
    if (o->linked_size[0] && strtoll(o->linked_size, NULL, 10) != o->f->size)
        return cli_err(a->cmd, "%s: X-Linked-Size %s disagrees with the listed size %lld", o->f->path,
                       o->linked_size, (long long)o->f->size);
    if (o->f->sha256[0] && o->linked_etag[0] && strlen(o->linked_etag) == 64 &&
        strcasecmp(o->linked_etag, o->f->sha256))
        return cli_err(a->cmd, "%s: X-Linked-Etag %s disagrees with the listed sha256 %s", o->f->path,
                       o->linked_etag, o->f->sha256);
    pull_sha256_hex(&o->sha, hex);
    if (o->f->sha256[0] && strcmp(hex, o->f->sha256))
        return cli_err(a->cmd, "%s: sha256 %s, the hub lists %s: the download is corrupt; removed, not "
                       "renamed into place", o->f->path, hex, o->f->sha256);
    pull_sha1_hex(&o->blob, hex);
    if (!o->f->sha256[0] && o->f->git_sha1[0] && strcmp(hex, o->f->git_sha1))
        return cli_err(a->cmd, "%s: git blob id %s, the hub lists %s: the download is corrupt; removed, not "
                       "renamed into place", o->f->path, hex, o->f->git_sha1);
    return 0;
}

static int mkdirs(const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

/* 0: the file is in place; 1: failed (printed). */
static int fetch_file(fetch_all *a, const pull_file *f) {
    char final[4096], part[4200];
    struct stat st;
    fetch_one o = {.all = a, .f = f, .fd = -1};
    int rc = 1;
    snprintf(final, sizeof final, "%s/%s", a->dir, f->path);
    snprintf(part, sizeof part, "%s/.moe8-partial/%s.part", a->dir, f->path);
    if (!stat(final, &st) && st.st_size == f->size) {
        add_bytes(a, f->size);
        return 0;
    }
    if ((o.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return cli_err(a->cmd, "cannot open '%s': %s", part, strerror(errno));
    blob_init(&o);
    if (fstat(o.fd, &st) || (st.st_size > f->size && ftruncate(o.fd, 0))) {
        cli_err(a->cmd, "cannot use '%s': %s", part, strerror(errno));
        goto done;
    }
    o.have = st.st_size > f->size ? 0 : st.st_size;
    if (hash_existing(&o)) {
        cli_err(a->cmd, "cannot read '%s': %s", part, strerror(errno));
        goto done;
    }
    add_bytes(a, o.have);
    if (!(o.c = curl_easy_init())) {
        cli_err(a->cmd, "cannot start libcurl");
        goto done;
    }
    attempt_rc ar = o.have == f->size ? ATT_DONE : ATT_RETRY;
    for (int k = 0; ar == ATT_RETRY && k <= a->p->retries; k++) {
        if (k) usleep((useconds_t)(500000 * (k < 10 ? k : 10)));
        ar = attempt(&o);
    }
    if (ar != ATT_DONE) {
        if (ar == ATT_RETRY) cli_err(a->cmd, "%s: gave up after %d attempts", f->path, a->p->retries + 1);
        goto done;
    }
    if (verify(&o)) {
        unlink(part);
        add_bytes(a, -o.have);
        goto done;
    }
    if (fsync(o.fd) || rename(part, final)) {
        cli_err(a->cmd, "cannot move '%s' into place: %s", final, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (o.c) curl_easy_cleanup(o.c);
    if (o.fd >= 0) close(o.fd);
    return rc;
}

/* ---- the workers and the progress -------------------------------------------------------- */

static void *worker(void *u) {
    fetch_all *a = u;
    for (;;) {
        pthread_mutex_lock(&a->lock);
        const int i = a->next < a->r->n_files ? a->next++ : -1;
        pthread_mutex_unlock(&a->lock);
        if (i < 0) break;
        const pull_file *f = &a->r->files[i];
        const int failed = fetch_file(a, f);
        pthread_mutex_lock(&a->lock);
        a->n_done++;
        a->n_failed += failed;
        pthread_mutex_unlock(&a->lock);
        if (!failed && !a->p->quiet)
            fprintf(stderr, "moe8 %s: %s: %lld bytes%s\n", a->cmd, f->path, (long long)f->size,
                    f->sha256[0] ? ", sha256 ok" : f->git_sha1[0] ? ", git blob id ok"
                                                   : ", size ok (the hub publishes no hash)");
    }
    pthread_mutex_lock(&a->lock);
    if (--a->n_running == 0) pthread_cond_signal(&a->done_cv);
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

static void progress_line(fetch_all *a, double t0, int tty) {
    pthread_mutex_lock(&a->lock);
    const int64_t now = a->bytes_now, total = a->bytes_total;
    const int done = a->n_done, n = a->r->n_files;
    pthread_mutex_unlock(&a->lock);
    const double dt = now_s() - t0;
    fprintf(stderr, "%smoe8 %s: %.2f / %.2f GB (%.0f%%), %.1f MB/s, %d of %d files%s", tty ? "\r" : "", a->cmd,
            (double)now / 1e9, (double)total / 1e9, total ? 100.0 * (double)now / (double)total : 100.0,
            dt > 0 ? (double)now / 1e6 / dt : 0.0, done, n, tty ? "   " : "\n");
}

int pull_fetch_all(const char *cmd, const pull_repo *r, const char *dir, const pull_fetch_params *p) {
    fetch_all a = {.cmd = cmd, .r = r, .dir = dir, .p = p};
    char partial[4200];
    pthread_t th[64];
    const int jobs = p->jobs < 1 ? 1 : p->jobs > 64 ? 64 : p->jobs;
    const int tty = isatty(2);
    snprintf(partial, sizeof partial, "%s/.moe8-partial", dir);
    if (mkdirs(partial)) return cli_err(cmd, "cannot make '%s': %s", partial, strerror(errno));
    for (int i = 0; i < r->n_files; i++) a.bytes_total += r->files[i].size;
    pthread_mutex_init(&a.lock, NULL);
    pthread_cond_init(&a.done_cv, NULL);
    int started = 0;
    for (; started < jobs && started < r->n_files; started++) {
        pthread_mutex_lock(&a.lock);
        a.n_running++;
        pthread_mutex_unlock(&a.lock);
        if (pthread_create(&th[started], NULL, worker, &a)) {
            pthread_mutex_lock(&a.lock);
            a.n_running--;
            pthread_mutex_unlock(&a.lock);
            break;
        }
    }
    if (!started) worker(&a); /* no thread: this one does it all */
    const double t0 = now_s(), every = tty ? 2.0 : 10.0;
    pthread_mutex_lock(&a.lock);
    while (a.n_running > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)every;
        if (pthread_cond_timedwait(&a.done_cv, &a.lock, &until) == ETIMEDOUT && !p->quiet) {
            pthread_mutex_unlock(&a.lock);
            progress_line(&a, t0, tty);
            pthread_mutex_lock(&a.lock);
        }
    }
    pthread_mutex_unlock(&a.lock);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (!p->quiet) {
        progress_line(&a, t0, tty);
        if (tty) fputc('\n', stderr);
    }
    if (!a.n_failed) rmdir(partial); /* empty once every file is in place */
    pthread_cond_destroy(&a.done_cv);
    pthread_mutex_destroy(&a.lock);
    return a.n_failed ? cli_err(cmd, "%d of %d files failed; run the same command again to resume", a.n_failed,
                                r->n_files)
                      : 0;
}
