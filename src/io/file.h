/*
 * file.h — opening and reading input files safely: only regular files (a
 * FIFO, a device or a folder is refused without blocking), whole-file reads
 * bounded by a size cap. moe8_read_file is public (moe8.h); this header adds
 * the open used by the safetensors reader, which maps the file instead.
 */
#ifndef MOE8_IO_FILE_H
#define MOE8_IO_FILE_H

#include <sys/stat.h>

#include "core/core.h"

/* Open `path` read-only (O_NONBLOCK, so a FIFO cannot block) and fill *st;
 * fails naming the file unless it is a regular file. Close *fd when done. */
moe8_status moe8_open_regular(const char *path, int *fd, struct stat *st, moe8_error *err);

#endif
