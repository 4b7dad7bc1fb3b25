/*
 * file.c — the one way the library (and the CLI, through moe8_read_file)
 * reads an input file whole: open with O_NONBLOCK (a FIFO without a writer
 * would otherwise block forever), refuse anything but a regular file (a FIFO,
 * /dev/zero or a folder), refuse a file over the caller's cap before
 * allocating (a sparse 2 GB file costs no disk but would cost 2 GB of
 * memory), then read exactly st_size bytes.
 * Does not: map files (safetensors.c does, after moe8_open_regular), or
 * follow a file that grows while it is read (the bytes past st_size are not
 * read).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/file.h"

/* Open `path` read-only and check it is a regular file. O_NONBLOCK makes
 * opening a FIFO return at once instead of waiting for a writer (it changes
 * nothing for regular files). */
moe8_status moe8_open_regular(const char *path, int *fd_out, struct stat *st, moe8_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    *fd_out = -1;
    if (fd < 0)
        return moe8_fail(err, errno == ENOENT ? MOE8_ERR_NOT_FOUND : MOE8_ERR_IO, -1,
                         "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        return moe8_fail(err, MOE8_ERR_IO, -1, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return moe8_fail(err, MOE8_ERR_IO, -1, "'%s' is not a regular file (%s)", path,
                         S_ISFIFO(st->st_mode)  ? "a fifo"
                         : S_ISDIR(st->st_mode) ? "a directory"
                         : S_ISCHR(st->st_mode) ? "a character device"
                                                : "a special file");
    }
    *fd_out = fd;
    return MOE8_OK;
}

static moe8_status read_all(int fd, const char *path, char *buf, size_t len, moe8_error *err) {
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return moe8_fail(err, MOE8_ERR_IO, (int64_t)got, "cannot read '%s': %s", path,
                             r == 0 ? "unexpected end of file" : strerror(errno));
        got += (size_t)r;
    }
    return MOE8_OK;
}

moe8_status moe8_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                           moe8_error *err) {
    struct stat st;
    char *buf;
    size_t len;
    int fd;
    moe8_status s;
    if (out_len) *out_len = 0;
    if (!out || !path)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "moe8_read_file: no %s given",
                         out ? "path" : "output pointer");
    *out = NULL;
    if ((s = moe8_open_regular(path, &fd, &st, err)) != MOE8_OK) return s;
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s' is %lld bytes, more than the %zu allowed",
                         path, (long long)st.st_size, max_bytes);
    }
    len = (size_t)st.st_size;
    if (!(buf = malloc(len + 1))) {
        close(fd);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate %zu bytes for '%s'", len + 1, path);
    }
    s = read_all(fd, path, buf, len, err);
    close(fd);
    if (s != MOE8_OK) {
        free(buf);
        return s;
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len) *out_len = len;
    return MOE8_OK;
}
