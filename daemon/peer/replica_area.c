/* SPDX-License-Identifier: MIT */
/* replica_area — the replica areas and their retention (see replica_area.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "peer/replica_area.h"
#include "util/log.h"

struct replica_area *replica_area_for(struct replica_area *areas, size_t n, uint32_t src) {
        for (size_t i = 0; i < n; i++)
                if (areas[i].src == src)
                        return &areas[i];
        return NULL;
}

struct replica_area *replica_area_holding(struct replica_area *areas, size_t n, const char *job,
                                          uint64_t step, uint32_t rank) {
        for (size_t i = 0; i < n; i++)
                if (catalog_rank_exists(areas[i].catalog, job, step, rank) == 1)
                        return &areas[i];
        return NULL;
}

struct ret_list {
        uint64_t *steps;
        size_t n, cap;
};

static int ret_collect(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct ret_list *l = userdata;
        (void)job;
        if (state != CKPT_STATE_COMMITTED)
                return 0;
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 16;
                uint64_t *n = realloc(l->steps, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                l->steps = n;
                l->cap = cap;
        }
        l->steps[l->n++] = step;
        return 0;
}

/* catalog_ckpt_foreach lists newest first. */
void replica_area_retention(struct store *store, struct catalog *catalog, const char *job,
                            uint32_t keep) {
        struct ret_list l = { 0 };
        if (keep == 0 || catalog_ckpt_foreach(catalog, job, ret_collect, &l) < 0) {
                free(l.steps);
                return;
        }
        for (size_t i = keep; i < l.n; i++) {
                if (catalog_pinned(catalog, job, l.steps[i]) == 1)
                        continue;
                if (store_step_delete(store, job, l.steps[i]) == 0) {
                        /* (void): the files are gone; a row a fault left behind (catalog.c
                         * logs it) is forgotten by reconcile at the next start */
                        (void)catalog_ckpt_delete(catalog, job, l.steps[i]);
                        log_info("peers: replica of job %s step %" PRIu64 " removed by retention "
                                 "(keep %u)", job, l.steps[i], keep);
                }
        }
        free(l.steps);
}
