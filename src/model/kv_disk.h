/*
 * kv_disk.h — internal (model/): the prompt cache's disk tier under the
 * prefix cache (SEMANTICS §10b): full KV blocks kept in a directory, written
 * by a background thread, read back and verified when a prompt's prefix is
 * not in memory.
 *
 * A block is named by its key: 128 bits chained over the context's
 * fingerprint (kv_disk_fp) and every token id from position 0 to the
 * block's end. Blocks written together (a prefix's blocks first..last) are
 * one run file, named by its first block's key: a header (version,
 * fingerprint, KV type, block bytes, the run's place), an index (each
 * block's key and checksum), every token id up to the run's end and the
 * blocks' K/V (and, for the hybrid families, the recurrent-state snapshots
 * kept with some of them), so a prompt's blocks load with one open and one
 * read per run. A load checks the header and, per block, its key, its ids against
 * the prompt's and an XXH3 checksum of its ids and data: a block that does
 * not match exactly is never used (kv_disk.c has the format).
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
    uint64_t snap_bytes;        /* hybrids: bytes of a recurrent-state snapshot (0: none) */
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
 * nanosecond per block of depth (the size bound removes deep runs first). */
void moe8_kvd_use_now(moe8_kv_disk *d);
/* Open the run file that starts at block k of a prompt (keys[0..nb) its
 * keys, tokens[0 .. nb * BS) its ids): how many of blocks k..nb-1 it holds,
 * their keys and ids checked (0: no file, counted a miss, or a file that
 * does not match from block k on: logged, removed, counted as rejected).
 * Stays open for moe8_kvd_read_run. */
int32_t moe8_kvd_open_run(moe8_kv_disk *d, const moe8_kvd_key *keys, const int32_t *tokens,
                          int32_t k, int32_t nb);
/* Read the first n (<= what open_run said) blocks of the open run into
 * data[i][block_bytes] (one preadv), check each one's checksum, close it:
 * how many from the first were good. *kept = 0 when the file was rejected
 * (a block's checksum, its snapshot's or a read failed: logged, removed),
 * so the good blocks are on disk no more. Hybrids: the snapshot of the
 * deepest good block that has one is read and checked too (a bad one: no
 * block is good), kept for moe8_kvd_snap. */
int32_t moe8_kvd_read_run(moe8_kv_disk *d, int32_t n, void *const *data, int *kept);
/* The deepest snapshot the reads since moe8_kvd_use_now gave: its bytes
 * (snap_bytes) and *block, the block it ends; NULL when none. */
const void *moe8_kvd_snap(const moe8_kv_disk *d, int32_t *block);

/* Queue blocks first..first+n-1 of a prefix (tokens[0 .. (first+n)*BS)),
 * data[i] the K/V of block first+i and snap[i] the recurrent state at its end
 * (hybrids; snap or snap[i] NULL: none), for the writer: copied now. Returns
 * how many blocks (from first) were queued; the rest are dropped (queue
 * full, writing off), counted. */
int32_t moe8_kvd_save(moe8_kv_disk *d, const int32_t *tokens, int32_t first, int32_t n,
                      const void *const *data, const void *const *snap);

/* Counters (moe8.h moe8_prompt_cache_stats). */
void moe8_kvd_stats(moe8_kv_disk *d, moe8_prompt_cache_stats *out);
/* Wait until the queue is empty (tests, close). */
void moe8_kvd_flush(moe8_kv_disk *d);
/* Tests: the writer's next write fails with errno e (ENOSPC: a full disk). */
void moe8_kvd_inject_write_error(moe8_kv_disk *d, int e);

/* ---- internal to kv_disk.c and kv_disk_dir.c ---------------------------------- */

#define MOE8_KVD_MAGIC "MOE8KVR\n"
#define MOE8_KVD_VERSION 2u
#define MOE8_KVD_EXT ".kvr"
#define MOE8_KVD_OLD_EXT ".kvb" /* version 1: one file per block (removed by a sweep) */
#define MOE8_KVD_ALIGN 4096u    /* the K/V start at a multiple of this */

/* A run file: this header, moe8_kvd_ent index[n_blocks], int32 ids[end],
 * zeros up to data_off, the K/V [n_blocks][block_bytes], then the
 * snapshots [n_snap][snap_bytes]. */
typedef struct {
    char magic[8];
    uint32_t version, head_bytes;   /* MOE8_KVD_VERSION, sizeof(moe8_kvd_head) */
    uint64_t fp;                    /* moe8_kvd_fp folded (moe8_kvd_fold) */
    uint64_t key_lo, key_hi;        /* its first block's key: its name */
    int32_t first, n_blocks;        /* blocks first..first+n_blocks-1; end = (first+n_blocks)*BS */
    int32_t kv_type, tp_rank;
    int32_t tp_size, n_snap;        /* n_snap: snapshots (hybrids), at most n_blocks */
    uint64_t block_bytes, snap_bytes;
    uint64_t data_off;              /* moe8_kvd_data_off(first, n_blocks) */
    char isa[16];
    uint64_t sum;                   /* XXH3 of this header (sum 0), the index, ids[0 .. first*BS) */
} moe8_kvd_head;
_Static_assert(sizeof(moe8_kvd_head) == 112, "the run file header has no padding");

/* One block of a run: its key, XXH3 of its BS ids then its K/V; its
 * snapshot's place among the run's (-1: none) and XXH3. */
typedef struct {
    uint64_t key_lo, key_hi, sum;
    int64_t snap;
    uint64_t snap_sum;
} moe8_kvd_ent;

uint64_t moe8_kvd_fold(const moe8_kvd_fp *fp);
/* Keys of n_blocks blocks of tokens, chained from a folded fingerprint. */
void moe8_kvd_chain(uint64_t fp64, const int32_t *tokens, int32_t n_blocks, moe8_kvd_key *keys);
/* Where a run's K/V start: after header, index and ids, aligned. */
uint64_t moe8_kvd_data_off(int32_t first, int32_t n_blocks);
/* The header's checksum (h->sum taken as 0) over it, the index and the ids before first. */
uint64_t moe8_kvd_head_sum(const moe8_kvd_head *h, const moe8_kvd_ent *index, const int32_t *ids);
/* A block's checksum: its BS ids, then its K/V. */
uint64_t moe8_kvd_block_sum(const int32_t *ids, const void *data, size_t block_bytes);
/* Why a header's counts (its index's snapshot places) do not hold, or NULL. */
const char *moe8_kvd_index_check(const moe8_kvd_head *h, const moe8_kvd_ent *index);
/* The file's bytes its header says. */
uint64_t moe8_kvd_file_bytes(const moe8_kvd_head *h);
/* "<32 hex digits>.kvr" into name[40]. */
void moe8_kvd_name(moe8_kvd_key key, char name[40]);
/* Exclusive lock of dir's ".lock" file: its fd, or -1. */
int moe8_kvd_lock(const char *dir);
/* Under the lock: remove temporaries of dead writers and older versions'
 * files; the bytes of the run files; with max_bytes > 0 and more than it,
 * remove least recently used files down to 9/10 of it (*n_evicted). */
uint64_t moe8_kvd_sweep(const char *dir, uint64_t max_bytes, uint64_t *n_evicted);

#endif
