/*
 * sampler.h — internal view of the token sampler, so tests can check the
 * filtered distribution a draw is made from, not only the draws.
 */
#ifndef MOE8_SAMPLER_H
#define MOE8_SAMPLER_H

#include <stdint.h>

#include "core/public.h"

/* Fill the sampler's candidate list from `logits` [n_vocab] with the filters
 * applied (temperature, top-k, top-p, min-p), sorted by probability
 * descending (ties: lower id first), probabilities renormalized to sum 1.
 * Returns the number of candidates; *ids and *probs point into the sampler. */
int moe8_sampler_candidates(moe8_sampler *s, const float *logits, const int32_t **ids,
                            const float **probs);

/* A request's own generator: seed it, then draw with settings `p` (checked
 * by moe8_sampler_params_check) using s's buffers (s->n_vocab logits). */
void moe8_sampler_seed(uint64_t rng[4], uint64_t seed);
int32_t moe8_sampler_draw(moe8_sampler *s, const moe8_sampler_params *p, uint64_t rng[4],
                          const float *logits);

#endif
