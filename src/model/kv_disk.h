/*
 * kv_disk.h — internal (model/): the prompt cache's disk tier under the
 * prefix cache (SEMANTICS §10b): full KV blocks kept as files in a
 * directory, written by a background thread, read back and verified when a
 * prompt's prefix is not in memory.
 *
 * A block is named by its key: 128 bits chained over the context's
 * fingerprint (kv_disk_fp) and every token id from position 0 to the
 * block's end. A file holds its header (version, fingerprint, KV type,
 * block bytes, the number of tokens), every token id up to its end and the
 * block's K/V; a load checks all of them and an XXH3 checksum of the header,
 * the ids and the data, so a file that does not match exactly is never used
 * (kv_disk.c has the format).
 *
 * Does not: know the pool (kv_pool.c takes blocks and registers them;
 * context.c links the two), or lock anything but its own queue and the
 * directory's lock file.
 */
#ifndef MOE8_KV_DISK_H
#define MOE8_KV_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "core/public.h"

#define MOE8_KVD_BS MOE8_KV_BLOCK_TOKENS

typedef struct moe8_kv_disk moe8_kv_disk;

/* What changes a block's contents besides its tokens. */
typedef struct {
    uint64_t model_fp;          /* the model folder (moe8_model_fingerprint, with times) */
    char isa[16];               /* kernel table the K/V were computed with */
    int32_t kv_type;            /* moe8_dtype of the elements */
    int32_t tp_rank, tp_size;
    int32_t float_experts;
    uint64_t block_bytes;       /* this rank's bytes per block */
} moe8_kvd_fp;

typedef struct {
    uint64_t lo, hi;
} moe8_kvd_key;

/* Open the tier in dir (made when missing) for blocks of this fingerprint,
 * at most max_bytes of files (0: no bound), its writer thread started and the
 * temporary files of killed writers removed. Fails only when dir cannot be
 * made or is not a directory; a directory that cannot be written is read
 * (writing off, logged). */
moe8_status moe8_kvd_open(const char *dir, uint64_t max_bytes, const moe8_kvd_fp *fp,
                          moe8_kv_disk **out, moe8_error *err);
/* Write what is queued, stop the writer, free. */
void moe8_kvd_close(moe8_kv_disk *d);

/* Keys of blocks 0..n_blocks-1 of tokens (n_blocks * BS ids). */
void moe8_kvd_keys(const moe8_kv_disk *d, const int32_t *tokens, int32_t n_blocks,
                   moe8_kvd_key *keys);

/* The loads that follow are one use of their files: one time, less a
 * nanosecond per block of depth (the size bound removes a chain from its end). */
void moe8_kvd_use_now(moe8_kv_disk *d);
/* Load the block ending at position end (a multiple of BS) with this key into
 * data[block_bytes]: 0 loaded and verified; 1 no file; -1 a file that does
 * not match (logged, removed, counted as rejected; data may be overwritten). */
int moe8_kvd_load(moe8_kv_disk *d, moe8_kvd_key key, const int32_t *tokens, int32_t end,
                  void *data);

/* Queue blocks first..first+n-1 of a prefix (tokens[0 .. (first+n)*BS)),
 * data[i] the K/V of block first+i, for the writer: copied now. Returns how
 * many blocks (from first) were queued; the rest are dropped (queue full,
 * writing off), counted. */
int32_t moe8_kvd_save(moe8_kv_disk *d, const int32_t *tokens, int32_t first, int32_t n,
                      const void *const *data);

/* Counters (moe8.h moe8_prompt_cache_stats). */
void moe8_kvd_stats(moe8_kv_disk *d, moe8_prompt_cache_stats *out);
/* Wait until the queue is empty (tests, close). */
void moe8_kvd_flush(moe8_kv_disk *d);
/* Tests: the writer's next write fails with errno e (ENOSPC: a full disk). */
void moe8_kvd_inject_write_error(moe8_kv_disk *d, int e);

/* ---- internal to kv_disk.c and kv_disk_dir.c ---------------------------------- */

#define MOE8_KVD_MAGIC "MOE8KVB\n"
#define MOE8_KVD_VERSION 1u
#define MOE8_KVD_EXT ".kvb"

/* A block file: this header, int32 tokens[n_tokens], the K/V [block_bytes]. */
typedef struct {
    char magic[8];
    uint32_t version, head_bytes;   /* MOE8_KVD_VERSION, sizeof(moe8_kvd_head) */
    uint64_t fp;                    /* moe8_kvd_fp folded (moe8_kvd_fold) */
    uint64_t key_lo, key_hi;        /* the key its name spells */
    int32_t n_tokens, kv_type;      /* the block ends at position n_tokens */
    uint64_t block_bytes;
    int32_t tp_rank, tp_size;
    char isa[16];
    uint64_t sum;                   /* XXH3 of this header (sum 0), the ids, the data */
} moe8_kvd_head;
_Static_assert(sizeof(moe8_kvd_head) == 88, "the block file header has no padding");

uint64_t moe8_kvd_fold(const moe8_kvd_fp *fp);
/* The checksum of a file's parts (h->sum is taken as 0). */
uint64_t moe8_kvd_sum(const moe8_kvd_head *h, const int32_t *tokens, const void *data);
/* "<32 hex digits>.kvb" into name[40]. */
void moe8_kvd_name(moe8_kvd_key key, char name[40]);
/* Exclusive lock of dir's ".lock" file: its fd, or -1. */
int moe8_kvd_lock(const char *dir);
/* Under the lock: remove temporaries of dead writers; the bytes of the
 * block files; with max_bytes > 0 and more than it, remove least recently
 * used files down to 9/10 of it (*n_evicted). */
uint64_t moe8_kvd_sweep(const char *dir, uint64_t max_bytes, uint64_t *n_evicted);

#endif
