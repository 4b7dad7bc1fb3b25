/*
 * hash.c — moe8's one hash (core.h): XXH3 64-bit from libxxhash, for hash
 * tables, fingerprints and the packed cache's checksums. Not for anything
 * whose value is a defined output (the synthetic weights' seeds keep their
 * own FNV-1a, convert/synth.c, because generated models must not change).
 */
#include <string.h>
#include <xxhash.h>

#include "core/core.h"

uint64_t moe8_hash64(const void *p, size_t n, uint64_t seed) {
    return (uint64_t)XXH3_64bits_withSeed(p, n, (XXH64_hash_t)seed);
}

uint64_t moe8_hash_str(const char *s) { return moe8_hash64(s, strlen(s), 0); }
