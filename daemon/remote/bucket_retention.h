/* SPDX-License-Identifier: MIT */
/*
 * bucket_retention — the object store's retention: per job, keep the newest
 * `keep` steps that have a COMMIT object and delete the older step prefixes
 * (docs/object-layout.md "Retention").
 *
 * Only the coordinator (node 0) runs it, after it wrote a step's COMMIT:
 * one node deciding keeps two nodes from deleting under each other.  A job
 * has at most one run at a time, one request at a time (list the steps,
 * HEAD their COMMITs from the newest down, list and delete each older
 * step's keys, COMMIT first so that no reader trusts a step whose shards
 * are going away); a run asked for while one is going is done again after
 * it.  Which steps go is decided by the policy every tier shares
 * (retention/, mode RETENTION_UNCOMMITTED_BELOW_KEPT); this module is the
 * store's deleter.  Pinned steps (catalog_pinned) are never deleted.  Failures are
 * logged and end the run: the next COMMIT starts another.
 *
 * Owns: struct bucket_retention and the per-job runs in it (their S3
 * requests included).  Borrows the S3 client and the catalog (read only:
 * pins).  Used by remote/flush.  Loop thread only.
 */
#pragma once

#include <stdint.h>

#include "catalog/catalog.h"
#include "remote/s3.h"
#include "retention/retention.h"

struct bucket_retention;

/* `prefix` is the bucket's key prefix ("" for none; copied); p->keep >= 1
 * and no every_seconds (-EINVAL otherwise; p's mode for uncommitted steps
 * is not read).  s3 and catalog are borrowed and must outlive it. */
int bucket_retention_new(struct bucket_retention **out, struct s3_client *s3,
                         struct catalog *catalog, const char *prefix,
                         const struct retention_policy *p);
/* Cancels every run (nothing is half deleted that a later run would not
 * finish).  Accepts NULL; returns NULL. */
struct bucket_retention *bucket_retention_free(struct bucket_retention *br);

/* SIGHUP may change the policy; runs from now on use it. */
void bucket_retention_set_policy(struct bucket_retention *br, const struct retention_policy *p);

/* The configured policy with the store's mode for uncommitted steps. */
struct retention_policy bucket_retention_policy(const struct retention_policy *configured);

/* Delete every object of (job, step) in the store, COMMIT first (so no
 * reader trusts a step whose shards are going), in the background; then
 * deleted(userdata, job, step, 0 or the first -errno; -ECANCELED when
 * freed first).  A step with no objects is done at once (0).  0, or
 * -ENOMEM (nothing started, deleted not called). */
typedef void (*bucket_retention_deleted_fn)(void *userdata, const char *job, uint64_t step,
                                            int error);
int bucket_retention_delete(struct bucket_retention *br, const char *job, uint64_t step,
                            bucket_retention_deleted_fn deleted, void *userdata);

/* Apply retention to `job`'s steps in the store, in the background. */
void bucket_retention_run(struct bucket_retention *br, const char *job);
