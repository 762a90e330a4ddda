/* SPDX-License-Identifier: MIT */
/*
 * rng.h — the pseudo-random numbers the unit tests share: xorshift64*,
 * deterministic from the seed the test defines as RNG_SEED before
 * including this, so a failure reproduces.
 */
#pragma once

#include <stdint.h>

#ifndef RNG_SEED
#error "define RNG_SEED (the test's seed) before including rng.h"
#endif

static uint64_t rng_state = RNG_SEED;

static inline uint64_t rng(void) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return rng_state * 0x2545f4914f6cdd1dull;
}
