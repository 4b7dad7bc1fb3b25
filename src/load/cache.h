/*
 * cache.h — internal: the packed cache (cache.c). The packed int8 weights of
 * one model folder, one kernel table's layout and one rank's shard, in a file
 * that later loads map read-only instead of packing (SEMANTICS §6c).
 *
 * The weights build (weights.c) opens the cache, then for each section (one
 * per decoder layer, then lm_head) either takes its regions from the mapping
 * (reading) or packs as without a cache and hands each region over (writing):
 * moe8_pcache_section_done writes the section to a temporary file, after
 * which the build frees it — a build never holds more than one section, so a
 * model larger than RAM can be packed — and moe8_pcache_finish writes the
 * header, renames the file into place and maps it (the cache is then reading,
 * and the build takes its regions again), or checks that every region was
 * taken.
 * Regions come in the order the build asks for them: the layout of a section
 * is that order, each region 64-byte aligned.
 */
#ifndef MOE8_CACHE_H
#define MOE8_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "core/public.h"

typedef struct moe8_pcache moe8_pcache;

/* The cache of m for kernel table kt (its name and layout are in the file's
 * header): mapped (reading) when a valid one exists, else locked for
 * writing; *out NULL when disabled (no_cache, float_experts) or when no
 * location can be written (logged at WARN). Fails only for an explicit
 * cache_dir that cannot be used or a refused mlock. */
moe8_status moe8_pcache_open(const moe8_model *m, const moe8_kernels *kt, int float_experts,
                             moe8_pcache **out, moe8_error *err);
/* 1 when regions come from the file. */
int moe8_pcache_reading(const moe8_pcache *pc);
/* Regions that follow belong to section id (0 .. n_layer; n_layer = lm_head). */
void moe8_pcache_section(moe8_pcache *pc, int id);
/* Reading: the next region of `bytes` bytes in the mapping; NULL when pc is
 * NULL, writing, or the section has no such region (finish then fails). */
const void *moe8_pcache_take(moe8_pcache *pc, size_t bytes);
/* Writing: `bytes` at p (valid until moe8_pcache_section_done) are the next region. */
void moe8_pcache_put(moe8_pcache *pc, const void *p, size_t bytes);
/* moe8_pcache_put of a malloc'd p the cache frees once written (or at once
 * when nothing is written: pc NULL, reading or failed). */
void moe8_pcache_put_owned(moe8_pcache *pc, void *p, size_t bytes);
/* Writing: the current section's regions to the temporary file (sections in
 * id order); the caller may free them after. A failure is kept for finish. */
void moe8_pcache_section_done(moe8_pcache *pc);
/* Writing: the header, the rename, then the new file mapped (reading from
 * here; a refused mlock is the error). A failure to write or map is logged at
 * WARN, not an error: the cache stays writing, and the build packs in memory
 * instead. Reading: MOE8_ERR_FORMAT when the regions taken differ from the
 * file's. */
moe8_status moe8_pcache_finish(moe8_pcache *pc, moe8_error *err);
void moe8_pcache_free(moe8_pcache *pc);

#endif
