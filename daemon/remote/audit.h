/* SPDX-License-Identifier: MIT */
/*
 * audit — checks this node's copies in the object store, and has a bad one
 * uploaded again from the local copy (docs/object-store.md, "Audit").
 *
 * A pass walks every committed step of every job in the local catalog whose
 * flush finished (remote_state DONE) and, for each shard object this node
 * uploaded (remote_objects), asks the store:
 *   1. HeadObject: the object exists, its size is the shard's, its ETag the
 *      one recorded at upload (when both are known: radosgw returns no ETag
 *      on a multipart Complete);
 *   2. ranged GETs of `sample` blocks (the first, the last and, beyond two,
 *      blocks spread between) checked against the block CRC32Cs of the
 *      rank's MANIFEST on local disk.
 * An object that fails is a finding: logged (job, step, rank, shard, key,
 * what), counted against the job (server errors), and repaired when the
 * local copy of that shard verifies (every block, on a worker): the object
 * is marked pending in the catalog and the step is flushed again, which
 * uploads the pending objects only and rewrites this node's manifest.  A
 * local copy that is bad as well is left for the local tier's healing; the
 * audit re-uploads nothing it has not verified.
 *
 * One request at a time, a pass every `interval_ms` (0: never, except
 * audit_start()), each pass from the oldest step; a store that fails with a
 * retryable error skips the object for this pass (not a finding).  The
 * audit owns its pass state and its counters; it borrows the loop, the
 * workers, the S3 client, the catalog, the store and the flusher, which
 * must outlive it.  Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/store.h"
#include "remote/flush.h"
#include "remote/s3.h"

struct audit;

struct audit_options {
        uint64_t interval_ms;  /* between the starts of two passes; 0: no passes */
        uint32_t sample;       /* blocks read back per object (0: HEAD only) */
        const char *prefix;    /* the flush's key prefix, for messages (copied) */
};

struct audit_ops {
        /* A finding against job (the server counts it as the job's error). */
        void (*finding)(void *userdata, const char *job, const char *message);
};

int audit_new(struct audit **out, struct loop *loop, struct worker_pool *workers,
              struct s3_client *s3, struct catalog *catalog, struct store *store,
              struct flusher *flusher, const struct audit_options *opts,
              const struct audit_ops *ops, void *userdata);
/* Cancels the request in flight.  Accepts NULL; returns NULL. */
struct audit *audit_free(struct audit *a);
/* SIGHUP: interval and sample (the next pass is rescheduled). */
void audit_set_options(struct audit *a, const struct audit_options *opts);
/* Start a pass now unless one runs. */
void audit_start(struct audit *a);

struct audit_stats {
        uint64_t passes;           /* passes finished */
        uint64_t objects_checked;  /* objects that answered every check */
        uint64_t objects_bad;      /* findings */
        uint64_t objects_repaired; /* findings queued for a new upload */
        uint64_t bytes_read;       /* sampled bytes read back */
        bool running;
};
void audit_get_stats(const struct audit *a, struct audit_stats *out);
