/* SPDX-License-Identifier: MIT */
/* rkeys — a small set of (job, step, rank) (see rkeys.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/rkeys.h"

bool rkeys_has(const struct rkeys *ks, const char *job, uint64_t step, uint32_t rank) {
        for (size_t i = 0; i < ks->n; i++)
                if (ks->v[i].step == step && ks->v[i].rank == rank && !strcmp(ks->v[i].job, job))
                        return true;
        return false;
}

int rkeys_add(struct rkeys *ks, const char *job, uint64_t step, uint32_t rank) {
        if (ks->n == ks->cap) {
                size_t cap = ks->cap ? ks->cap * 2 : 64;
                void *n = realloc(ks->v, cap * sizeof(*ks->v));
                if (!n)
                        return -ENOMEM;
                ks->v = n;
                ks->cap = cap;
        }
        struct rkey *k = &ks->v[ks->n++];
        snprintf(k->job, sizeof(k->job), "%s", job);
        k->step = step;
        k->rank = rank;
        return 0;
}
