/* SPDX-License-Identifier: MIT */
/*
 * rkeys — a set of ranks, each of one step of a job: the kept steps'
 * ranks of one node, a few thousand at most, looked up linearly.  What a
 * neighbour's listing says it holds (peer/neighbour_restore), what a
 * restore already asked for, the steps a target keeps (peer/replication).
 *
 * A plain value owned by whoever holds it; free(ks->v) frees it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt-proto.h"

struct rkey {
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
};

struct rkeys {
        struct rkey *v;
        size_t n, cap;
};

bool rkeys_has(const struct rkeys *ks, const char *job, uint64_t step, uint32_t rank);
/* 0 or -ENOMEM. */
int rkeys_add(struct rkeys *ks, const char *job, uint64_t step, uint32_t rank);
