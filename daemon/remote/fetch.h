/* SPDX-License-Identifier: MIT */
/*
 * fetch — restore from the object store into the local tier.
 *
 * A fetch finds the step (the newest with a COMMIT object, below a bound
 * if given, or the one asked for; a step without COMMIT is never
 * trusted), reads COMMIT and the node manifests it names (each checked
 * against the size and CRC32C COMMIT records for it), and copies the
 * wanted ranks' shards with parallel ranged GETs into pool memory, checks
 * every 1 MiB block's CRC32C against the manifest on the worker pool, and
 * writes them through the local tier's own path (O_DIRECT, fsync,
 * MANIFEST, atomic rename).  The step is then an ordinary committed local
 * checkpoint (its remote state already "in the store", so it is not
 * flushed back), and every restore path serves it.
 *
 * Re-populating the local tier is not optional here: a restore reads a
 * rank's shards many times (ranges, re-reads after a failed start), and a
 * checkpoint pulled once from the store should not be pulled again.
 *
 * One exception: a heal of a corrupt copy in a replica area
 * (fetch_request.into_store) writes that one rank into the area through
 * the same ingest path, and leaves every commit and flush state alone.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt-proto.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/store.h"
#include "pool/pool.h"
#include "remote/s3.h"
#include "util/fd_budget.h"
#include "util/list.h"

struct fetcher;
struct fetch_op;

struct fetch_options {
        const char *prefix;      /* copied */
        uint32_t concurrency;    /* ranged GETs in flight */
        uint64_t pool_wait_ms;
};

/* One fetch.  The caller fills the inputs and done, keeps the struct
 * alive until done() runs (exactly once, never from inside fetch_start). */
struct fetch_request {
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;            /* CKPT_STEP_LATEST: the newest committed */
        uint64_t below;           /* with CKPT_STEP_LATEST: only steps < below;
                                   * 0 (as calloc leaves it) or
                                   * CKPT_STEP_LATEST: no bound */
        uint8_t which;            /* enum ckpt_fetch_which */
        uint32_t index;           /* node or rank */
        uint32_t uid;             /* who asks: owner of the job or root */
        bool lenient;             /* a selection with no rank is not an error
                                   * (a restart on another topology resolves
                                   * the step, ranks come later by rank) */
        bool replace;             /* fetch the wanted ranks even if this node
                                   * holds them (server/heal.c replacing a
                                   * corrupt copy: the new one is swapped in
                                   * atomically, the old goes to trash) */
        /* With replace: the tier the ranks land in instead of the local
         * tier — a replica area's store and catalog (server/heal.c
         * replacing a corrupt copy of another node's rank; the objects
         * are found through COMMIT's node manifests, whichever node
         * flushed them).  Its step's commit and remote state are left
         * alone: the area holds the step already, and what the local tier
         * flushes is none of its business.  NULL: the local tier. */
        struct store *into_store;
        struct catalog *into_catalog;
        void (*done)(struct fetch_request *fr, int error, const char *message);
        /* results */
        uint64_t out_step;
        uint32_t world_size, ranks, shards;
        uint64_t bytes;
        /* private */
        struct fetch_op *op;
};

int fetch_new(struct fetcher **out, struct loop *loop, struct s3_client *s3,
              struct catalog *catalog, struct store *store, struct pool *pool,
              struct worker_pool *workers, const struct fetch_options *opts);
/* Count the files a fetch holds open (the rank's directories and all its
 * shards, while the rank is written) against its uid's budget, which the
 * caller owns and keeps alive longer than f: over it the fetch fails
 * with -EMFILE ([daemon] open_files_per_uid).  NULL: not counted. */
void fetch_set_files(struct fetcher *f, struct fd_budget *files);
/* Cancels running fetches (their done() gets -ECANCELED).  NULL ok. */
struct fetcher *fetch_free(struct fetcher *f);

/* 0: started.  -EINVAL bad request, -EBUSY that step is being fetched. */
int fetch_start(struct fetcher *f, struct fetch_request *fr);
/* The requester went away: done() is not called, the fetch stops. */
void fetch_cancel(struct fetcher *f, struct fetch_request *fr);
/* Whether a fetch of (job, step) is under way (fetch_start() would say
 * -EBUSY): its ranks land one by one before the step's commit record. */
bool fetch_running(const struct fetcher *f, const char *job, uint64_t step);
/* Bytes fetched since start. */
uint64_t fetch_bytes(const struct fetcher *f);
