/*
 * sampler.h — internal view of the token sampler, so tests can check the
 * filtered distribution a draw is made from, not only the draws.
 */
#ifndef MOE8_SAMPLER_H
#define MOE8_SAMPLER_H

#include "moe8.h"

/* Fill the sampler's candidate list from `logits` [n_vocab] with the filters
 * applied (temperature, top-k, top-p, min-p), sorted by probability
 * descending (ties: lower id first), probabilities renormalized to sum 1.
 * Returns the number of candidates; *ids and *probs point into the sampler. */
int moe8_sampler_candidates(moe8_sampler *s, const float *logits, const int32_t **ids,
                            const float **probs);

#endif
