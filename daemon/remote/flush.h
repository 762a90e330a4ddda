/* SPDX-License-Identifier: MIT */
/*
 * flush — copies committed checkpoints from the local tier to the object
 * store, and keeps the store's retention.
 *
 * Per committed step, in order (docs/object-layout.md):
 *   1. every shard of every rank this node holds becomes an object: one
 *      PutObject up to part_size bytes, else a multipart upload whose parts
 *      are sent several at a time; bodies are streamed from the shard files
 *      (never copied whole into memory) with Content-MD5 on each request;
 *   2. this node's manifest (nodes/<node>.manifest) is written;
 *   3. the coordinator (node 0) waits until all node_count manifests are
 *      there, checks that they cover every rank exactly once and writes the
 *      step's COMMIT object with If-None-Match: * (written once even if two
 *      coordinators race); every other node waits until it sees COMMIT
 *      (remote/cluster_commit);
 *   4. the coordinator applies the store's retention to the job
 *      (remote/bucket_retention).
 * The step reaches tier "remote" when COMMIT exists; the server is told
 * through on_changed so WAIT requests can answer.
 *
 * Progress lives in the catalog (remote_objects, remote_parts, the
 * checkpoint's remote_state), written as each request completes, so after a
 * crash or restart flush_resume() continues where it stopped: a finished
 * object is not sent again, and an interrupted multipart upload asks the
 * store which parts it already holds (ListParts) and sends only the others.
 *
 * Errors: a retryable failure that outlived the S3 client's own retries
 * puts the object back in the queue after a pause (the store may be down
 * for a while); a permanent one (403 wrong key, 404 no bucket, a body that
 * fails its digest) stops the step's flush with the reason in the catalog
 * and in flush_status().  Failed steps are retried only by flush_retry_failed()
 * (SIGHUP) or a restart: repeating a request that cannot succeed is a
 * retry storm, not resilience.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt-proto.h"
#include "io/loop.h"
#include "local/store.h"
#include "remote/bucket_retention.h"
#include "remote/s3.h"
#include "retention/retention.h"

struct flusher;

struct flush_options {
        const char *bucket;     /* for messages (copied) */
        const char *prefix;     /* key prefix, "" for none (copied) */
        uint32_t node_index, node_count;
        uint64_t part_size;     /* >= 5 MiB */
        uint32_t concurrency;   /* requests the flush keeps in flight */
        struct retention_policy retention; /* the store's; keep >= 1, no every_seconds */
};

/* on_changed(userdata, job, step): the step's remote state moved (reached
 * remote, or failed). */
int flush_new(struct flusher **out, struct loop *loop, struct s3_client *s3,
              struct catalog *catalog, struct store *store, const struct flush_options *opts,
              void (*on_changed)(void *userdata, const char *job, uint64_t step),
              void *userdata);
/* Cancels everything in flight (progress already recorded stays in the
 * catalog for the next start).  Call before freeing the S3 client.
 * Accepts NULL; returns NULL. */
struct flusher *flush_free(struct flusher *f);

/* Settings SIGHUP may change: the store's retention. */
void flush_set_retention(struct flusher *f, const struct retention_policy *p);
/* Only the coordinator (node 0) runs the store's retention (see
 * bucket_retention.h); its policy, its mode for uncommitted steps set;
 * and a pass over job's steps in the store now, in the background (a
 * no-op on other nodes). */
bool flush_runs_retention(const struct flusher *f);
struct retention_policy flush_retention_policy(const struct flusher *f);
void flush_retention_run(struct flusher *f, const char *job);
/* ckptctl delete on the coordinator: every object of (job, step) in the
 * store, COMMIT first, in the background (bucket_retention_delete).
 * -EOPNOTSUPP on other nodes (the store's steps are node 0's to remove). */
int flush_delete_step(struct flusher *f, const char *job, uint64_t step,
                      bucket_retention_deleted_fn deleted, void *userdata);

/* Queue a step the job just committed on this node. */
int flush_step(struct flusher *f, const char *job, uint64_t step);
/* Queue every committed step whose flush has not finished (at start). */
int flush_resume(struct flusher *f);
/* (job, step) was committed here by a restore from a neighbour: the
 * store holds it already (the node that saved it flushes it), so this
 * node has nothing to flush of it. */
void flush_step_in_store(struct flusher *f, const char *job, uint64_t step);
/* Flush a step that reached the store again, after objects of it were
 * reset to pending (upload_object_reset, remote/audit): the pending ones
 * are sent, this node's manifest rewritten.  -EBUSY while the flusher
 * still works on the step. */
int flush_step_again(struct flusher *f, const char *job, uint64_t step);
/* Put failed steps back in the queue (SIGHUP). */
int flush_retry_failed(struct flusher *f);

/* True while the flusher still works on (job, step) — retention must not
 * delete its local files. */
bool flush_busy(struct flusher *f, const char *job, uint64_t step);

/* Counters for `ckptctl status` (fills the remote_* fields). */
void flush_status(struct flusher *f, struct ckpt_rep_status *st);

/* The last permanent error of (job, step) or of the flusher, for messages. */
const char *flush_last_error(struct flusher *f);
/* The job that last error concerns ("" if none): STATUS shows the error
 * only to that job's owner and root. */
const char *flush_last_error_job(struct flusher *f);
