/* SPDX-License-Identifier: MIT */
/*
 * catalog — the sqlite index of what this node holds.
 *
 * The filesystem (manifests, COMMITTED records) is the truth; the catalog is
 * an index rebuilt from it at start (reconcile), so `ckptctl status`, listing
 * and restore planning never walk directories.  One writer: the daemon's loop
 * thread.  WAL mode, synchronous=NORMAL (a lost tail is re-derived from disk
 * at the next start), foreign keys on, schema versioned with
 * PRAGMA user_version and forward migrations (docs/catalog.md).
 *
 * Writes join one open transaction that catalog_flush() commits; the event
 * loop calls it before it sleeps, so a burst of completions costs one commit.
 *
 * Every function returns 0 (or a count) on success, -ENOENT for "no such
 * row" where documented, and -EIO for an sqlite failure (logged here with
 * the sqlite message).  Not thread-safe: loop thread only.
 */
#pragma once

#include <stdint.h>

#include "local/manifest.h"
#include "ckpt-proto.h"

struct catalog;

#define CATALOG_SCHEMA_VERSION 1

/* Open or create the database at path, run migrations.  -EIO on failure
 * (including a database whose user_version is newer than this build:
 * refuse rather than corrupt). */
int catalog_open(struct catalog **out, const char *path);
struct catalog *catalog_free(struct catalog *c); /* flushes; accepts NULL */

int catalog_flush(struct catalog *c);

/* PRAGMA integrity_check == "ok": 0, else -EIO. */
int catalog_check(struct catalog *c);

/* Jobs: a job belongs to the uid that created it. */
int catalog_job_add(struct catalog *c, const char *job, uint32_t uid); /* no-op if exists */
int catalog_job_uid(struct catalog *c, const char *job, uint32_t *uid); /* -ENOENT */
int catalog_job_error(struct catalog *c, const char *job);             /* errors += 1 */

/* Checkpoints (job, step).  upsert creates or updates world_size/state. */
int catalog_ckpt_upsert(struct catalog *c, const char *job, uint64_t step, uint32_t world_size,
                        uint8_t state, int64_t committed_at);
int catalog_ckpt_get(struct catalog *c, const char *job, uint64_t step,
                     struct ckpt_ckpt_entry *out); /* -ENOENT */
/* Delete a checkpoint and its ranks and shards (rows only). */
int catalog_ckpt_delete(struct catalog *c, const char *job, uint64_t step);
/* Latest step in state COMMITTED; -ENOENT if none. */
int catalog_latest_committed(struct catalog *c, const char *job, uint64_t *step,
                             uint32_t *world_size);

/* A rank landed on local disk: record its shards from the manifest
 * (replaces any previous rows of that rank). */
int catalog_rank_add(struct catalog *c, const struct manifest *m);
int catalog_rank_exists(struct catalog *c, const char *job, uint64_t step, uint32_t rank);

/* Shard lookup for restore: size and crc32c.  -ENOENT. */
int catalog_shard_get(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                      const char *shard, uint64_t *size, uint32_t *crc32c);

/* Paged listings in the wire shape (entries sorted: jobs by name,
 * checkpoints newest step first, shards by name). */
/* uid >= 0 lists only that uid's jobs; -1 lists all. */
int catalog_job_list(struct catalog *c, uint32_t start, int64_t uid,
                     struct ckpt_rep_job_list *out);
int catalog_ckpt_list(struct catalog *c, const char *job, uint32_t start,
                      struct ckpt_rep_ckpt_list *out); /* -ENOENT: no such job */
int catalog_shard_list(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                       uint32_t start, struct ckpt_rep_shard_list *out); /* -ENOENT */
uint32_t catalog_job_count(struct catalog *c, int64_t uid); /* uid -1: all */

/* Iterate all checkpoints of a job (newest first) or of all jobs (job ==
 * NULL), for retention and reconcile.  Stops early and returns cb's value if
 * cb returns non-zero. */
typedef int (*catalog_ckpt_cb)(void *userdata, const char *job, uint64_t step,
                               uint8_t state);
int catalog_ckpt_foreach(struct catalog *c, const char *job, catalog_ckpt_cb cb, void *userdata);
