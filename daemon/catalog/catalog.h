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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "local/manifest.h"
#include "ckpt-proto.h"

struct catalog;

#define CATALOG_SCHEMA_VERSION 8

/* Open or create the database at path, run migrations.  -EIO on failure
 * (including a database whose user_version is newer than this build:
 * refuse rather than corrupt). */
int catalog_open(struct catalog **out, const char *path);
struct catalog *catalog_free(struct catalog *c); /* flushes; accepts NULL */

int catalog_flush(struct catalog *c);
/* The same, and what it committed is on stable storage when it returns
 * (a checkpoint of the WAL, with its fsyncs): for the rows the disk cannot
 * give back at the next start (commit requests).  Costs a few fsyncs. */
int catalog_flush_durable(struct catalog *c);

/* PRAGMA integrity_check == "ok": 0, else -EIO. */
int catalog_check(struct catalog *c);

/* Jobs: a job belongs to the uid that created it. */
int catalog_job_add(struct catalog *c, const char *job, uint32_t uid); /* no-op if exists */
int catalog_job_uid(struct catalog *c, const char *job, uint32_t *uid); /* -ENOENT */
int catalog_job_error(struct catalog *c, const char *job);             /* errors += 1 */
/* Forget a job and every row of it (cascades through its checkpoints);
 * rows only, like catalog_ckpt_delete.  No such job: 0. */
int catalog_job_delete(struct catalog *c, const char *job);

/* Checkpoints (job, step).  upsert creates or updates world_size/state. */
int catalog_ckpt_upsert(struct catalog *c, const char *job, uint64_t step, uint32_t world_size,
                        uint8_t state, int64_t committed_at);
/* Why a rank's save of the step failed (ckpt_ckpt_entry.reason, cut to
 * CKPT_FAIL_REASON_MAX); the next upsert to SAVING or COMMITTED clears it.
 * -ENOENT without the row. */
int catalog_ckpt_set_fail_reason(struct catalog *c, const char *job, uint64_t step,
                                 const char *reason);
int catalog_ckpt_get(struct catalog *c, const char *job, uint64_t step,
                     struct ckpt_ckpt_entry *out); /* -ENOENT */
/* Delete a checkpoint and its ranks and shards (rows only). */
int catalog_ckpt_delete(struct catalog *c, const char *job, uint64_t step);
/* Latest step in state COMMITTED; -ENOENT if none. */
int catalog_latest_committed(struct catalog *c, const char *job, uint64_t *step,
                             uint32_t *world_size);
/* The same among the steps < below (CKPT_STEP_LATEST, or any bound above
 * CKPT_STEP_MAX: every step); -ENOENT if none (always for below 0).  step
 * and world_size may be NULL. */
int catalog_latest_committed_below(struct catalog *c, const char *job, uint64_t below,
                                   uint64_t *step, uint32_t *world_size);

/* A rank landed on local disk: record its shards from the manifest
 * (replaces any previous rows of that rank). */
int catalog_rank_add(struct catalog *c, const struct manifest *m);
int catalog_rank_exists(struct catalog *c, const char *job, uint64_t step, uint32_t rank);

/* The ranks of (job, step) indexed here, ascending, into out[0..cap);
 * *count is how many there are (-ENOBUFS if more than cap). */
int catalog_ranks(struct catalog *c, const char *job, uint64_t step, uint32_t *out, size_t cap,
                  size_t *count);
/* Drop one rank's rows (and its shards' remote records). */
int catalog_rank_delete(struct catalog *c, const char *job, uint64_t step, uint32_t rank);
/* 1 when the rank is indexed with exactly m's shards (names, sizes,
 * CRCs), so reconcile can keep its rows — and the remote-tier state hanging
 * off them — instead of rebuilding them; else 0. */
int catalog_rank_matches(struct catalog *c, const struct manifest *m);

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

/* ---- the object-store tier (schema 2, docs/catalog.md) ------------------
 *
 * What has been flushed to the store, per shard object and per checkpoint,
 * so that a flush interrupted by a crash resumes instead of starting over.
 * The catalog speaks its own types: these bounds equal the S3 client's
 * (S3_KEY_MAX, S3_UPLOAD_ID_MAX, S3_ETAG_MAX, S3_PART_NUMBER_MAX) and
 * remote/flush.c, the one place that converts between the two, asserts it,
 * so the catalog depends on nothing above it (docs/architecture.md). */
#define CATALOG_KEY_MAX 1024
#define CATALOG_UPLOAD_ID_MAX 1024
#define CATALOG_ETAG_MAX 128
#define CATALOG_PART_NUMBER_MAX 10000
#define CATALOG_ERROR_MAX 255 /* longer messages are stored, read back truncated */

/* remote_objects.state */
enum catalog_object_state {
        CATALOG_OBJECT_PENDING = 0,
        CATALOG_OBJECT_UPLOADING = 1,
        CATALOG_OBJECT_DONE = 2,
        CATALOG_OBJECT_FAILED = 3,
};

/* checkpoints.remote_state */
enum catalog_remote_state {
        CATALOG_REMOTE_NONE = 0,
        CATALOG_REMOTE_FLUSHING = 1,
        CATALOG_REMOTE_MANIFEST = 2, /* this node's manifest is uploaded */
        CATALOG_REMOTE_DONE = 3,     /* the global COMMIT object is present */
        CATALOG_REMOTE_FAILED = 4,
};

/* NULL columns read back as "". */
struct catalog_remote_object {
        char key[CATALOG_KEY_MAX + 1];
        uint64_t size;
        uint8_t state;                               /* enum catalog_object_state */
        char upload_id[CATALOG_UPLOAD_ID_MAX + 1];   /* "": a single PUT */
        uint64_t part_size;
        char etag[CATALOG_ETAG_MAX + 1];
        char error[CATALOG_ERROR_MAX + 1];
        uint32_t attempts;                           /* times set to FAILED */
        int64_t updated_at;                          /* unix seconds */
};

/* One recorded part of a shard's multipart upload. */
struct catalog_part {
        unsigned number;                   /* 1..CATALOG_PART_NUMBER_MAX */
        char etag[CATALOG_ETAG_MAX + 1];   /* with its quotes, as the store gave it */
        uint64_t size;
};

/* Create or replace the remote record of a shard (upsert).  upload_id, etag
 * and error may be NULL.  attempts survives the upsert and grows by one each
 * time state is CATALOG_OBJECT_FAILED.  part_size is stored only with an
 * upload id (NULL, read back 0, for a single PUT).  -ENOENT: no such shard;
 * -EINVAL: a
 * state out of range or a key/upload_id/etag over its bound (or an empty
 * key).  A new upload id does not drop the parts of the old one: call
 * catalog_remote_parts_clear. */
int catalog_remote_object_set(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                              const char *shard, const char *key, uint64_t size, uint8_t state,
                              const char *upload_id, uint64_t part_size, const char *etag,
                              const char *error);
int catalog_remote_object_get(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                              const char *shard,
                              struct catalog_remote_object *out); /* -ENOENT */

/* Record a completed part of the shard's multipart upload (upsert by part
 * number).  -ENOENT: no remote record for the shard; -EINVAL: part number
 * outside 1..CATALOG_PART_NUMBER_MAX, or an empty or over-long etag. */
int catalog_remote_part_add(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                            const char *shard, unsigned part_number, const char *etag,
                            uint64_t size);
/* The recorded parts, by part number, into out[0..cap).  *count is the
 * number of parts recorded; if that exceeds cap, out holds the first cap
 * and the return is -ENOBUFS.  A shard with no record has no parts. */
int catalog_remote_parts(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                         const char *shard, struct catalog_part *out, size_t cap, size_t *count);
int catalog_remote_parts_clear(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                               const char *shard);

/* A checkpoint's remote state (enum catalog_remote_state); error may be
 * NULL.  -ENOENT: no such checkpoint; -EINVAL: state out of range.  get
 * copies the error ("" if none) into error[0..error_size) when error is not
 * NULL. */
int catalog_ckpt_remote_set(struct catalog *c, const char *job, uint64_t step,
                            uint8_t remote_state, const char *error);
int catalog_ckpt_remote_get(struct catalog *c, const char *job, uint64_t step,
                            uint8_t *remote_state, char *error, size_t error_size);

/* Retention pins.  Pinning an unknown checkpoint is -ENOENT; unpinning one
 * that is not pinned succeeds.  A pin goes with its checkpoint row. */
int catalog_pin(struct catalog *c, const char *job, uint64_t step, bool pinned);
int catalog_pinned(struct catalog *c, const char *job, uint64_t step); /* 1 or 0 */

/* Damaged steps (schema 5).  The reconcile records how many of this node's
 * ranks a committed step's COMMITTED record names; a committed step with
 * fewer of them indexed here, or with a local-tier copy recorded
 * unrepairable (copy faults, schema 7), is damaged: still committed (the cluster
 * committed it, and its other ranks are good), the missing ranks restored
 * from a neighbour or the object store like any rank this node lacks, and
 * retention does not count it among the newest it keeps.  -ENOENT: no
 * such checkpoint row. */
int catalog_ckpt_set_ranks_committed(struct catalog *c, const char *job, uint64_t step,
                                     uint32_t ranks);
int catalog_ckpt_damaged(struct catalog *c, const char *job, uint64_t step); /* 1 or 0 */

/* Iterate committed checkpoints whose remote_state is below
 * CATALOG_REMOTE_DONE (failed ones are not retried by this), by job then
 * oldest step first.  Same rules as catalog_ckpt_foreach: the callback may
 * call into the catalog; a row that an earlier callback deleted or moved
 * out of the pending set is skipped. */
typedef int (*catalog_remote_cb)(void *userdata, const char *job, uint64_t step,
                                 uint8_t remote_state);
int catalog_remote_pending_foreach(struct catalog *c, catalog_remote_cb cb, void *userdata);

/* ---- the neighbour tier (schema 3) ---------------------------------------
 * Per committed step and replication target node: pending until the node
 * acknowledged every rank this node holds of the step. */
enum catalog_repl_state {
        CATALOG_REPL_PENDING = 0,
        CATALOG_REPL_DONE = 1,
        CATALOG_REPL_FAILED = 2, /* the target refused (e.g. -ENOSPC); retried on reconnect */
};

/* Upsert; error may be NULL.  -ENOENT: no such checkpoint; -EINVAL: state. */
int catalog_repl_set(struct catalog *c, const char *job, uint64_t step, uint32_t node,
                     uint8_t state, const char *error);
/* The state recorded for (job, step) and node.  -ENOENT: none recorded. */
int catalog_repl_get(struct catalog *c, const char *job, uint64_t step, uint32_t node,
                     uint8_t *state);
/* Targets done and targets recorded for (job, step). */
int catalog_repl_counts(struct catalog *c, const char *job, uint64_t step, uint32_t *done,
                        uint32_t *total);
/* Steps not yet done for node, by job then step (oldest first).  The
 * callback may call into the catalog. */
typedef int (*catalog_repl_cb)(void *userdata, const char *job, uint64_t step);
int catalog_repl_pending_foreach(struct catalog *c, uint32_t node, catalog_repl_cb cb,
                                 void *userdata);

/* ---- commit requests (schema 4) -----------------------------------------
 * Steps a trainer asked to commit with ckpt_commit_async() that are not
 * committed yet: the daemon commits them once every rank is saved, after a
 * restart too (docs/commit.md).  Recording one for an unknown checkpoint is
 * -ENOENT; recording it twice, or dropping one that is not there,
 * succeeds.  A request goes with its checkpoint row. */
int catalog_commit_request_set(struct catalog *c, const char *job, uint64_t step, bool asked);
/* Every recorded request, by job then step.  The callback may call into
 * the catalog; a non-zero return stops the walk and is returned. */
typedef int (*catalog_commit_request_cb)(void *userdata, const char *job, uint64_t step);
int catalog_commit_request_foreach(struct catalog *c, catalog_commit_request_cb cb,
                                   void *userdata);

/* ---- the background scrub (schema 6) -------------------------------------
 * Where the scrub (scrub/scrub.h) is in its pass, in the local tier's
 * catalog (one row for all the tiers it walks), so that a pass resumes
 * after a restart.  The position is the rank being verified and, within
 * it, the shard and the offset of the first block not verified yet. */
struct catalog_scrub_progress {
        uint64_t pass;            /* 1, 2, ...; 0: none started */
        int64_t pass_started_at;  /* unix seconds */
        int64_t pass_finished_at; /* unix seconds; 0 while the pass is under way */
        int32_t area;             /* -1: the local tier; else a replica area's source node */
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
        char shard[CKPT_NAME_MAX + 1]; /* "": the rank's MANIFEST is next */
        uint64_t offset;               /* within shard, a block boundary */
        uint64_t bytes_verified, copies_verified, copies_bad; /* in this pass */
        char last_finding[CATALOG_ERROR_MAX + 1];
};
/* -ENOENT: no scrub has run on this catalog. */
int catalog_scrub_progress_get(struct catalog *c, struct catalog_scrub_progress *out);
/* Upsert (joins the batch).  -EINVAL: step or pass out of sqlite's range. */
int catalog_scrub_progress_set(struct catalog *c, const struct catalog_scrub_progress *p);
/* The first rank of a committed step at or after (job, step, rank) in
 * (job, step, rank) order (job "" step 0 rank 0: the first of all).
 * -ENOENT: none. */
int catalog_committed_rank_next(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                                char job_out[CKPT_NAME_MAX + 1], uint64_t *step_out,
                                uint32_t *rank_out);
/* Bytes of the ranks of committed steps (their shards' sizes). */
int catalog_committed_bytes(struct catalog *c, uint64_t *out);

/* ---- what the metrics show (server/exposition.c) ------------------------
 * Per job, the steps this node holds that have reached each tier and the
 * bytes of their ranks here: local (on disk, committed or not), committed,
 * remote (the global COMMIT object is in the store), replicated (every
 * replication target acknowledged).  A committed step counts in local too.
 * steps[CKPT_TIER_STAGED] and bytes[CKPT_TIER_STAGED] stay 0: what is
 * staged lives in the pool, not in the catalog.  remote_backlog_bytes:
 * what committed steps not yet in the store (nor failed there) still have
 * to upload: their bytes less the shard objects and multipart parts
 * already uploaded. */
struct catalog_job_tiers {
        char job[CKPT_NAME_MAX + 1];
        uint32_t uid; /* the job's owner */
        uint64_t steps[CKPT_TIER_MAX_], bytes[CKPT_TIER_MAX_];
        uint64_t remote_backlog_bytes;
};
typedef int (*catalog_job_tiers_cb)(void *userdata, const struct catalog_job_tiers *t);
/* Every job, by name.  The callback must not call into the catalog; a
 * negative return stops the walk and is returned. */
int catalog_job_tiers_foreach(struct catalog *c, catalog_job_tiers_cb cb, void *userdata);

struct catalog_rows {
        uint64_t jobs, checkpoints, ranks, shards, remote_objects, replication;
};
int catalog_row_counts(struct catalog *c, struct catalog_rows *out);

/* ---- copy faults (schema 7) ---------------------------------------------
 * A copy of a rank on this node found corrupt (a block failing its CRC32C,
 * a shard file missing or of the wrong size, a MANIFEST that does not
 * parse or match) and what became of it: one row per copy, the latest
 * event.  `area` names the copy: CATALOG_COPY_LOCAL for the local tier,
 * else the source node whose replica area holds it.  These rows live in
 * the node's own catalog whichever copy they describe (server/heal.c and
 * the scrub write them; LATEST_RANK, MAP and STATUS read them).  Writes
 * join the batch like every other. */
#define CATALOG_COPY_LOCAL UINT32_MAX

enum catalog_fault_state {
        CATALOG_FAULT_BAD = 0,          /* found corrupt, repair not finished */
        CATALOG_FAULT_REPAIRED = 1,     /* replaced by a verified good copy */
        CATALOG_FAULT_UNREPAIRABLE = 2, /* no good copy was found anywhere */
};

#define CATALOG_FAULT_TEXT_MAX 511

struct catalog_copy_fault {
        uint8_t state;                  /* enum catalog_fault_state */
        int64_t detected_at;            /* unix seconds */
        int64_t repaired_at;            /* unix seconds; 0 unless repaired */
        char detail[CATALOG_FAULT_TEXT_MAX + 1];  /* shard, block, what was wrong */
        char source[CATALOG_FAULT_TEXT_MAX + 1];  /* repaired from / copies tried */
};

/* Upsert the copy's row.  detail: what is wrong ("" keeps nothing; a
 * REPAIRED event keeps the detail of the fault it repairs); source: the
 * copy it was repaired from, or the copies tried (may be NULL).
 * -EINVAL: state or step out of range. */
int catalog_copy_fault_set(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                           uint32_t area, uint8_t state, const char *detail, const char *source);
/* The copy's row, or -ENOENT (never found corrupt). */
int catalog_copy_fault_get(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                           uint32_t area, struct catalog_copy_fault *out);
/* 1 when a copy of (job, step, rank) on this node is recorded
 * unrepairable (LATEST_RANK stops offering the step for that rank, MAP
 * refuses it), else 0. */
int catalog_copy_unrepairable(struct catalog *c, const char *job, uint64_t step, uint32_t rank);
/* 1 when a copy of any rank of (job, step) — in the local tier or in a
 * replica area here — is recorded unrepairable (the job-wide LATEST
 * passes over the step: the job cannot restore from it as a whole),
 * else 0. */
int catalog_step_unrepairable(struct catalog *c, const char *job, uint64_t step);
/* The copies in `area` of job's ranks (of step; CKPT_STEP_LATEST: every
 * step) recorded bad or unrepairable, by step then rank, into
 * steps/ranks[0..cap); *count is how many there are (-ENOBUFS if more
 * than cap). */
int catalog_copy_faults_open(struct catalog *c, const char *job, uint64_t step, uint32_t area,
                             uint64_t *steps, uint32_t *ranks, size_t cap, size_t *count);
/* Copies recorded in each state, for STATUS. */
int catalog_copy_fault_counts(struct catalog *c, uint32_t *bad, uint32_t *repaired,
                              uint32_t *unrepairable);
