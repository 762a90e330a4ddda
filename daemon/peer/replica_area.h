/* SPDX-License-Identifier: MIT */
/*
 * replica_area — what this node holds of another node's ranks: a replica
 * area per source node, <state>/replica/node-<src>/{jobs/...,catalog.db},
 * with the same layout, manifests and checks as the local tier and its
 * own catalog; and the areas' retention.
 *
 * The areas are created and owned by daemon.c (one per replication
 * source) and borrowed by peer/replication (which fills them) and
 * peer/neighbour_restore (which answers from them).
 *
 * Loop thread only.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "local/store.h"
#include "retention/retention.h"

struct replica_area {
        uint32_t src;
        struct store *store;
        struct catalog *catalog;
};

/* The area of src's ranks among areas[0..n), or NULL. */
struct replica_area *replica_area_for(struct replica_area *areas, size_t n, uint32_t src);
/* The area that holds (job, step, rank), or NULL. */
struct replica_area *replica_area_holding(struct replica_area *areas, size_t n, const char *job,
                                          uint64_t step, uint32_t rank);
/* Apply p (keep_latest 0: all; keep_every) to job's steps in an area;
 * pinned ones stay, uncommitted ones too (retention/ decides; p's mode
 * for uncommitted steps is not read). */
void replica_area_retention(struct store *store, struct catalog *catalog, const char *job,
                            const struct retention_policy *p);
/* p with the areas' mode for uncommitted steps (kept: their COMMITTED
 * record may still be on its way from the source). */
struct retention_policy replica_area_policy(const struct retention_policy *p);
