/* SPDX-License-Identifier: MIT */
/*
 * catalog — the sqlite index of what this node holds (catalog.h).
 *
 * Why it looks like this:
 *  - The disk is the truth and this is an index of it, so durability is
 *    traded for speed: WAL with synchronous=NORMAL, and writes batched into
 *    one transaction that the event loop commits before it sleeps.  A tail
 *    lost in a power cut is re-derived from the manifests at the next start.
 *  - Every statement is prepared once at open and reset after each use, so
 *    no statement is ever left active between calls (COMMIT then never
 *    trips over a pending statement) and the hot path never parses SQL.
 *  - The schema only moves forward: migrations[] is an ordered list of SQL
 *    scripts, script i takes user_version i to i+1 in its own transaction.
 *    Old scripts are never edited; a new column is a new script
 *    (docs/catalog.md).  A database newer than this build is refused, not
 *    "fixed".
 *  - sqlite result codes stop here: callers see 0, -ENOENT for the
 *    documented "no such row" cases and -EIO for everything sqlite refused,
 *    which is logged once, here, with sqlite's message and the job/step.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#include "catalog/catalog.h"
#include "util/cleanup.h"
#include "util/log.h"

/*
 * Forward migrations.  migrations[i] takes the schema from user_version i to
 * i + 1.  Append only: a database in the field may be at any version, so an
 * edited script would leave two databases with the same user_version and
 * different schemas.  Later tiers (replica holders, object keys, multipart
 * upload ids) arrive as new scripts that ALTER TABLE / CREATE TABLE.
 */
static const char *const migrations[] = {
        /* 0 -> 1: jobs, checkpoints, ranks held locally, their shards. */
        "CREATE TABLE jobs ("
        "  name TEXT PRIMARY KEY,"
        "  uid INTEGER NOT NULL,"
        "  created_at INTEGER NOT NULL,"
        "  errors INTEGER NOT NULL DEFAULT 0"
        ");"
        "CREATE TABLE checkpoints ("
        "  job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE,"
        "  step INTEGER NOT NULL,"
        "  world_size INTEGER NOT NULL,"
        "  state INTEGER NOT NULL,"
        "  created_at INTEGER NOT NULL,"
        "  committed_at INTEGER NOT NULL DEFAULT 0,"
        "  PRIMARY KEY (job, step)"
        ");"
        "CREATE TABLE ranks ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  rank INTEGER NOT NULL,"
        "  bytes INTEGER NOT NULL,"
        "  shards INTEGER NOT NULL,"
        "  PRIMARY KEY (job, step, rank),"
        "  FOREIGN KEY (job, step) REFERENCES checkpoints(job, step) ON DELETE CASCADE"
        ");"
        "CREATE TABLE shards ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  rank INTEGER NOT NULL,"
        "  name TEXT NOT NULL,"
        "  size INTEGER NOT NULL,"
        "  crc32c INTEGER NOT NULL,"
        "  tier_local INTEGER NOT NULL DEFAULT 1,"
        "  PRIMARY KEY (job, step, rank, name),"
        "  FOREIGN KEY (job, step, rank) REFERENCES ranks(job, step, rank) ON DELETE CASCADE"
        ");",
        /* 1 -> 2: the object-store tier.  Per shard object: its key, upload
         * state, multipart upload id and completed parts, so a flush resumes
         * after a crash; per checkpoint: how far its flush got; retention
         * pins.  All of it cascades from the checkpoint row. */
        "CREATE TABLE remote_objects ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  rank INTEGER NOT NULL,"
        "  shard TEXT NOT NULL,"
        "  key TEXT NOT NULL,"
        "  size INTEGER NOT NULL,"
        "  state INTEGER NOT NULL,"
        "  upload_id TEXT,"
        "  part_size INTEGER,"
        "  etag TEXT,"
        "  error TEXT,"
        "  attempts INTEGER NOT NULL DEFAULT 0,"
        "  updated_at INTEGER NOT NULL,"
        "  PRIMARY KEY (job, step, rank, shard),"
        "  FOREIGN KEY (job, step, rank, shard) REFERENCES shards(job, step, rank, name)"
        "    ON DELETE CASCADE"
        ");"
        "CREATE TABLE remote_parts ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  rank INTEGER NOT NULL,"
        "  shard TEXT NOT NULL,"
        "  part_number INTEGER NOT NULL,"
        "  etag TEXT NOT NULL,"
        "  size INTEGER NOT NULL,"
        "  PRIMARY KEY (job, step, rank, shard, part_number),"
        "  FOREIGN KEY (job, step, rank, shard)"
        "    REFERENCES remote_objects(job, step, rank, shard) ON DELETE CASCADE"
        ");"
        "ALTER TABLE checkpoints ADD COLUMN remote_state INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE checkpoints ADD COLUMN remote_error TEXT;"
        "CREATE TABLE pins ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  PRIMARY KEY (job, step),"
        "  FOREIGN KEY (job, step) REFERENCES checkpoints(job, step) ON DELETE CASCADE"
        ");",
        /* 2 -> 3: the neighbour tier.  Per committed step and replication
         * target: has it acknowledged every rank this node holds?  Rows are
         * written at commit (pending) so a restart or a reconnect knows
         * what to send; they cascade from the checkpoint row. */
        "CREATE TABLE replication ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  node INTEGER NOT NULL,"
        "  state INTEGER NOT NULL,"
        "  error TEXT,"
        "  updated_at INTEGER NOT NULL,"
        "  PRIMARY KEY (job, step, node),"
        "  FOREIGN KEY (job, step) REFERENCES checkpoints(job, step) ON DELETE CASCADE"
        ");"
        "CREATE INDEX replication_pending ON replication (node, state);",
        /* 3 -> 4: commit requests that outlive the trainer (ckpt_commit_async,
         * docs/commit.md): the step is committed once every rank is saved,
         * also after a restart of the daemon.  The row goes when the step
         * commits, or with the checkpoint row. */
        "CREATE TABLE commit_requests ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  asked_at INTEGER NOT NULL,"
        "  PRIMARY KEY (job, step),"
        "  FOREIGN KEY (job, step) REFERENCES checkpoints(job, step) ON DELETE CASCADE"
        ");",
        /* 4 -> 5: how many of this node's ranks a committed step's COMMITTED
         * record names (set by the reconcile at start; 0: not known).  Fewer
         * ranks on disk than that is a damaged step (docs/catalog.md):
         * still committed, its ranks that are here still served, not
         * counted among retention's newest. */
        "ALTER TABLE checkpoints ADD COLUMN ranks_committed INTEGER NOT NULL DEFAULT 0;",
        /* 5 -> 6: where the background scrub is (scrub/scrub.h), so that a
         * pass resumes after a restart instead of starting from zero.  One
         * row; not an index of the disk (reconcile cannot rebuild it), and
         * losing it costs only a pass started again. */
        "CREATE TABLE scrub_progress ("
        "  id INTEGER PRIMARY KEY CHECK (id = 1),"
        "  pass INTEGER NOT NULL,"
        "  pass_started_at INTEGER NOT NULL,"
        "  pass_finished_at INTEGER NOT NULL,"
        "  area INTEGER NOT NULL,"
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  rank INTEGER NOT NULL,"
        "  shard TEXT NOT NULL,"
        "  shard_offset INTEGER NOT NULL,"
        "  bytes_verified INTEGER NOT NULL,"
        "  copies_verified INTEGER NOT NULL,"
        "  copies_bad INTEGER NOT NULL,"
        "  last_finding TEXT NOT NULL DEFAULT '',"
        "  updated_at INTEGER NOT NULL"
        ");",
        /* 6 -> 7: copies of a rank found corrupt on this node, and what
         * became of them (docs/catalog.md).  No foreign key: a copy in a
         * replica area has no checkpoint row in this catalog, and the
         * record of an unrepairable copy must outlive the files it
         * describes (LATEST_RANK consults it). */
        "CREATE TABLE copy_faults ("
        "  job TEXT NOT NULL,"
        "  step INTEGER NOT NULL,"
        "  rank INTEGER NOT NULL,"
        "  area INTEGER NOT NULL,"
        "  state INTEGER NOT NULL,"
        "  detected_at INTEGER NOT NULL,"
        "  detail TEXT NOT NULL,"
        "  repaired_at INTEGER,"
        "  source TEXT,"
        "  PRIMARY KEY (job, step, rank, area)"
        ");",
        /* 7 -> 8: why a rank's save of a step failed, for `ckptctl show`
         * (until then only in the log). */
        "ALTER TABLE checkpoints ADD COLUMN fail_reason TEXT NOT NULL DEFAULT '';",
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == CATALOG_SCHEMA_VERSION,
               "one migration script per schema version");

/* The primary keys double as the indexes foreign keys and listings need:
 * (job, step) serves "checkpoints of a job, newest first" and the ranks
 * cascade, (job, step, rank) serves the shards cascade. */
enum stmt_id {
        STMT_BEGIN,
        STMT_COMMIT,
        STMT_ROLLBACK,
        STMT_SAVEPOINT,
        STMT_RELEASE,
        STMT_ROLLBACK_TO,
        STMT_JOB_ADD,
        STMT_JOB_UID,
        STMT_JOB_ERROR,
        STMT_JOB_DELETE,
        STMT_JOB_COUNT,
        STMT_JOB_PAGE,
        STMT_CKPT_UPSERT,
        STMT_CKPT_FAIL_REASON,
        STMT_CKPT_ENSURE,
        STMT_CKPT_GET,
        STMT_CKPT_STATE,
        STMT_CKPT_DELETE,
        STMT_CKPT_COUNT,
        STMT_CKPT_PAGE,
        STMT_CKPT_ALL,
        STMT_CKPT_OF_JOB,
        STMT_LATEST_COMMITTED,
        STMT_RANK_DELETE,
        STMT_RANK_INSERT,
        STMT_RANK_EXISTS,
        STMT_RANKS_OF_STEP,
        STMT_SHARD_INSERT,
        STMT_SHARD_GET,
        STMT_SHARD_COUNT,
        STMT_SHARD_PAGE,
        STMT_OBJ_SET,
        STMT_OBJ_GET,
        STMT_OBJ_EXISTS,
        STMT_PART_ADD,
        STMT_PART_COUNT,
        STMT_PART_LIST,
        STMT_PART_CLEAR,
        STMT_CKPT_REMOTE_SET,
        STMT_CKPT_REMOTE_GET,
        STMT_PIN_ADD,
        STMT_PIN_DEL,
        STMT_PIN_GET,
        STMT_REMOTE_PENDING,
        STMT_REMOTE_PENDING_ONE,
        STMT_REPL_SET,
        STMT_REPL_GET,
        STMT_REPL_COUNTS,
        STMT_REPL_PENDING,
        STMT_COMMIT_ASK_ADD,
        STMT_COMMIT_ASK_DEL,
        STMT_COMMIT_ASK_ALL,
        STMT_CKPT_RANKS_COMMITTED_SET,
        STMT_CKPT_DAMAGED,
        STMT_SCRUB_GET,
        STMT_SCRUB_SET,
        STMT_RANK_COMMITTED_NEXT,
        STMT_COMMITTED_BYTES,
        STMT_FAULT_SET,
        STMT_FAULT_GET,
        STMT_FAULT_UNREPAIRABLE,
        STMT_FAULT_COUNTS,
        STMT_FAULT_OPEN,
        STMT_JOB_TIERS,
        STMT_ROW_COUNTS,
        STMT_INTEGRITY, /* last: catalog_free takes it as "open got this far" */
        STMT_MAX_,
};

/* Per-checkpoint aggregates over the ranks held here; shared by get and
 * list so the two can never disagree.  Columns: step, world_size, state,
 * committed_at, ranks_local, bytes, shards, remote_state, pinned, replicas,
 * fail_reason. */
#define CKPT_ENTRY_SELECT                                                          \
        "SELECT c.step, c.world_size, c.state, c.committed_at, COUNT(r.rank),"    \
        " COALESCE(SUM(r.bytes), 0), COALESCE(SUM(r.shards), 0), c.remote_state," \
        " EXISTS (SELECT 1 FROM pins p WHERE p.job = c.job AND p.step = c.step)," \
        " (SELECT COUNT(*) FROM replication x WHERE x.job = c.job AND x.step = c.step" \
        "  AND x.state = 1), c.fail_reason"                                      \
        " FROM checkpoints c LEFT JOIN ranks r ON r.job = c.job AND r.step = c.step"

static const char *const stmt_sql[STMT_MAX_] = {
        [STMT_BEGIN] = "BEGIN IMMEDIATE",
        [STMT_COMMIT] = "COMMIT",
        [STMT_ROLLBACK] = "ROLLBACK",
        [STMT_SAVEPOINT] = "SAVEPOINT catalog_op",
        [STMT_RELEASE] = "RELEASE catalog_op",
        [STMT_ROLLBACK_TO] = "ROLLBACK TO catalog_op",
        [STMT_JOB_ADD] = "INSERT INTO jobs (name, uid, created_at) VALUES (?1, ?2, ?3)"
                         " ON CONFLICT (name) DO NOTHING",
        [STMT_JOB_UID] = "SELECT uid FROM jobs WHERE name = ?1",
        [STMT_JOB_ERROR] = "UPDATE jobs SET errors = errors + 1 WHERE name = ?1",
        [STMT_JOB_DELETE] = "DELETE FROM jobs WHERE name = ?1",
        [STMT_JOB_COUNT] = "SELECT COUNT(*) FROM jobs WHERE ?1 < 0 OR uid = ?1",
        [STMT_JOB_PAGE] =
                "SELECT j.name, j.uid, j.errors,"
                " (SELECT MAX(step) FROM checkpoints WHERE job = j.name AND state = ?3),"
                " (SELECT COUNT(*) FROM checkpoints WHERE job = j.name),"
                " (SELECT COUNT(*) FROM checkpoints WHERE job = j.name AND state = ?3),"
                " (SELECT COALESCE(SUM(bytes), 0) FROM ranks WHERE job = j.name)"
                " FROM jobs j WHERE ?4 < 0 OR j.uid = ?4 ORDER BY j.name LIMIT ?1 OFFSET ?2",
        [STMT_CKPT_UPSERT] =
                "INSERT INTO checkpoints (job, step, world_size, state, created_at, committed_at)"
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                " ON CONFLICT (job, step) DO UPDATE SET world_size = excluded.world_size,"
                " state = excluded.state, committed_at = excluded.committed_at,"
                /* a step saved again, or committed, has no failure to tell;
                 * a FAILED one keeps it, and so does the LOCAL row a restart
                 * makes of it (its failed rank is missing: that is why) */
                " fail_reason = CASE WHEN excluded.state IN (1, 3) THEN ''"
                " ELSE fail_reason END",
        [STMT_CKPT_FAIL_REASON] =
                "UPDATE checkpoints SET fail_reason = ?3 WHERE job = ?1 AND step = ?2",
        [STMT_CKPT_ENSURE] =
                "INSERT INTO checkpoints (job, step, world_size, state, created_at)"
                " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (job, step) DO NOTHING",
        [STMT_CKPT_GET] = CKPT_ENTRY_SELECT " WHERE c.job = ?1 AND c.step = ?2"
                                            " GROUP BY c.job, c.step",
        [STMT_CKPT_STATE] = "SELECT state FROM checkpoints WHERE job = ?1 AND step = ?2",
        [STMT_CKPT_DELETE] = "DELETE FROM checkpoints WHERE job = ?1 AND step = ?2",
        [STMT_CKPT_COUNT] = "SELECT COUNT(*) FROM checkpoints WHERE job = ?1",
        [STMT_CKPT_PAGE] = CKPT_ENTRY_SELECT " WHERE c.job = ?1 GROUP BY c.job, c.step"
                                             " ORDER BY c.step DESC LIMIT ?2 OFFSET ?3",
        [STMT_CKPT_ALL] = "SELECT job, step, state FROM checkpoints ORDER BY job, step DESC",
        [STMT_CKPT_OF_JOB] =
                "SELECT job, step, state FROM checkpoints WHERE job = ?1 ORDER BY step DESC",
        /* ?3: the largest step wanted (the primary key index serves the range) */
        [STMT_LATEST_COMMITTED] = "SELECT step, world_size FROM checkpoints"
                                  " WHERE job = ?1 AND state = ?2 AND step <= ?3"
                                  " ORDER BY step DESC LIMIT 1",
        [STMT_RANK_DELETE] = "DELETE FROM ranks WHERE job = ?1 AND step = ?2 AND rank = ?3",
        [STMT_RANK_INSERT] = "INSERT INTO ranks (job, step, rank, bytes, shards)"
                             " VALUES (?1, ?2, ?3, ?4, ?5)",
        [STMT_RANK_EXISTS] = "SELECT 1 FROM ranks WHERE job = ?1 AND step = ?2 AND rank = ?3",
        [STMT_RANKS_OF_STEP] = "SELECT rank FROM ranks WHERE job = ?1 AND step = ?2 ORDER BY rank",
        [STMT_SHARD_INSERT] = "INSERT INTO shards (job, step, rank, name, size, crc32c)"
                              " VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        [STMT_SHARD_GET] = "SELECT size, crc32c FROM shards"
                           " WHERE job = ?1 AND step = ?2 AND rank = ?3 AND name = ?4",
        [STMT_SHARD_COUNT] = "SELECT COUNT(*) FROM shards WHERE job = ?1 AND step = ?2 AND rank = ?3",
        [STMT_SHARD_PAGE] = "SELECT name, size, crc32c FROM shards"
                            " WHERE job = ?1 AND step = ?2 AND rank = ?3"
                            " ORDER BY name LIMIT ?4 OFFSET ?5",
        /* attempts: ?12 is 1 for a FAILED write, 0 otherwise, added to what
         * the row already had. */
        [STMT_OBJ_SET] =
                "INSERT INTO remote_objects (job, step, rank, shard, key, size, state, upload_id,"
                " part_size, etag, error, attempts, updated_at)"
                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
                " ON CONFLICT (job, step, rank, shard) DO UPDATE SET key = excluded.key,"
                " size = excluded.size, state = excluded.state, upload_id = excluded.upload_id,"
                " part_size = excluded.part_size, etag = excluded.etag, error = excluded.error,"
                " attempts = attempts + excluded.attempts, updated_at = excluded.updated_at",
        [STMT_OBJ_GET] = "SELECT key, size, state, upload_id, part_size, etag, error, attempts,"
                         " updated_at FROM remote_objects"
                         " WHERE job = ?1 AND step = ?2 AND rank = ?3 AND shard = ?4",
        [STMT_OBJ_EXISTS] = "SELECT 1 FROM remote_objects"
                            " WHERE job = ?1 AND step = ?2 AND rank = ?3 AND shard = ?4",
        [STMT_PART_ADD] = "INSERT INTO remote_parts (job, step, rank, shard, part_number, etag, size)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                          " ON CONFLICT (job, step, rank, shard, part_number)"
                          " DO UPDATE SET etag = excluded.etag, size = excluded.size",
        [STMT_PART_COUNT] = "SELECT COUNT(*) FROM remote_parts"
                            " WHERE job = ?1 AND step = ?2 AND rank = ?3 AND shard = ?4",
        [STMT_PART_LIST] = "SELECT part_number, etag, size FROM remote_parts"
                           " WHERE job = ?1 AND step = ?2 AND rank = ?3 AND shard = ?4"
                           " ORDER BY part_number LIMIT ?5",
        [STMT_PART_CLEAR] = "DELETE FROM remote_parts"
                            " WHERE job = ?1 AND step = ?2 AND rank = ?3 AND shard = ?4",
        [STMT_CKPT_REMOTE_SET] = "UPDATE checkpoints SET remote_state = ?3, remote_error = ?4"
                                 " WHERE job = ?1 AND step = ?2",
        [STMT_CKPT_REMOTE_GET] = "SELECT remote_state, remote_error FROM checkpoints"
                                 " WHERE job = ?1 AND step = ?2",
        [STMT_PIN_ADD] = "INSERT INTO pins (job, step) VALUES (?1, ?2)"
                         " ON CONFLICT (job, step) DO NOTHING",
        [STMT_PIN_DEL] = "DELETE FROM pins WHERE job = ?1 AND step = ?2",
        [STMT_PIN_GET] = "SELECT 1 FROM pins WHERE job = ?1 AND step = ?2",
        [STMT_CKPT_RANKS_COMMITTED_SET] = "UPDATE checkpoints SET ranks_committed = ?3"
                                          " WHERE job = ?1 AND step = ?2",
        /* a rank missing, or a local-tier copy of one with no good copy
         * found anywhere (copy_faults unrepairable, area the local tier) */
        [STMT_CKPT_DAMAGED] =
                "SELECT c.ranks_committed > (SELECT COUNT(*) FROM ranks r"
                "  WHERE r.job = c.job AND r.step = c.step)"
                " OR EXISTS (SELECT 1 FROM copy_faults f WHERE f.job = c.job"
                "  AND f.step = c.step AND f.state = ?4 AND f.area = ?5)"
                " FROM checkpoints c WHERE c.job = ?1 AND c.step = ?2 AND c.state = ?3",
        [STMT_REMOTE_PENDING] = "SELECT job, step FROM checkpoints"
                                " WHERE state = ?1 AND remote_state < ?2 ORDER BY job, step",
        [STMT_REMOTE_PENDING_ONE] = "SELECT remote_state FROM checkpoints"
                                    " WHERE job = ?1 AND step = ?2 AND state = ?3"
                                    " AND remote_state < ?4",
        [STMT_REPL_SET] = "INSERT INTO replication (job, step, node, state, error, updated_at)"
                          " VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (job, step, node)"
                          " DO UPDATE SET state = excluded.state, error = excluded.error,"
                          " updated_at = excluded.updated_at",
        [STMT_REPL_GET] = "SELECT state FROM replication WHERE job = ?1 AND step = ?2 AND node = ?3",
        [STMT_REPL_COUNTS] = "SELECT COALESCE(SUM(state = ?3), 0), COUNT(*) FROM replication"
                             " WHERE job = ?1 AND step = ?2",
        [STMT_REPL_PENDING] = "SELECT job, step FROM replication WHERE node = ?1 AND state != ?2"
                              " ORDER BY job, step",
        [STMT_COMMIT_ASK_ADD] = "INSERT INTO commit_requests (job, step, asked_at)"
                                " VALUES (?1, ?2, CAST(strftime('%s', 'now') AS INTEGER))"
                                " ON CONFLICT (job, step) DO NOTHING",
        [STMT_COMMIT_ASK_DEL] = "DELETE FROM commit_requests WHERE job = ?1 AND step = ?2",
        [STMT_COMMIT_ASK_ALL] = "SELECT job, step FROM commit_requests ORDER BY job, step",
        [STMT_SCRUB_GET] = "SELECT pass, pass_started_at, pass_finished_at, area, job, step, rank,"
                           " shard, shard_offset, bytes_verified, copies_verified, copies_bad,"
                           " last_finding FROM scrub_progress WHERE id = 1",
        [STMT_SCRUB_SET] = "INSERT OR REPLACE INTO scrub_progress (id, pass, pass_started_at,"
                           " pass_finished_at, area, job, step, rank, shard, shard_offset,"
                           " bytes_verified, copies_verified, copies_bad, last_finding,"
                           " updated_at) VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
                           " ?11, ?12, ?13, CAST(strftime('%s', 'now') AS INTEGER))",
        /* row values: the next rank in (job, step, rank) order; the primary
         * key of ranks is that order, so this is one index seek */
        [STMT_RANK_COMMITTED_NEXT] = "SELECT r.job, r.step, r.rank FROM ranks r"
                                     " JOIN checkpoints k ON k.job = r.job AND k.step = r.step"
                                     " WHERE k.state = ?4 AND (r.job, r.step, r.rank) >= (?1, ?2, ?3)"
                                     " ORDER BY r.job, r.step, r.rank LIMIT 1",
        [STMT_COMMITTED_BYTES] = "SELECT COALESCE(SUM(r.bytes), 0) FROM ranks r"
                                 " JOIN checkpoints k ON k.job = r.job AND k.step = r.step"
                                 " WHERE k.state = ?1",
        /* Per job, the steps (and their bytes on this node) that reached
         * local (?1 LOCAL, ?2 COMMITTED), committed, remote (?3 DONE) and
         * replicated (every replication row ?4 DONE), and the bytes of
         * committed steps still owed to the store (below DONE): their
         * bytes less the objects (?5 DONE) and parts already uploaded.
         * One pass over the checkpoints with the per-step sums as
         * subqueries on primary-key prefixes. */
        [STMT_JOB_TIERS] =
                "SELECT job,"
                " SUM(state IN (?1, ?2)), SUM(CASE WHEN state IN (?1, ?2) THEN b END),"
                " SUM(state = ?2), SUM(CASE WHEN state = ?2 THEN b END),"
                " SUM(state = ?2 AND rs = ?3), SUM(CASE WHEN state = ?2 AND rs = ?3 THEN b END),"
                " SUM(state = ?2 AND rn > 0 AND rd = rn),"
                " SUM(CASE WHEN state = ?2 AND rn > 0 AND rd = rn THEN b END),"
                " SUM(CASE WHEN state = ?2 AND rs < ?3 THEN MAX(b - up, 0) END), MAX(uid)"
                " FROM (SELECT k.job AS job, k.state AS state, k.remote_state AS rs,"
                " (SELECT j.uid FROM jobs j WHERE j.name = k.job) AS uid,"
                " (SELECT COALESCE(SUM(r.bytes), 0) FROM ranks r"
                "  WHERE r.job = k.job AND r.step = k.step) AS b,"
                " (SELECT COUNT(*) FROM replication p WHERE p.job = k.job AND p.step = k.step) AS rn,"
                " (SELECT COUNT(*) FROM replication p WHERE p.job = k.job AND p.step = k.step"
                "  AND p.state = ?4) AS rd,"
                " (SELECT COALESCE(SUM(o.size), 0) FROM remote_objects o"
                "  WHERE o.job = k.job AND o.step = k.step AND o.state = ?5) +"
                " (SELECT COALESCE(SUM(t.size), 0) FROM remote_parts t JOIN remote_objects o"
                "  ON o.job = t.job AND o.step = t.step AND o.rank = t.rank AND o.shard = t.shard"
                "  WHERE t.job = k.job AND t.step = k.step AND o.state != ?5) AS up"
                " FROM checkpoints k) GROUP BY job ORDER BY job",
        [STMT_ROW_COUNTS] = "SELECT (SELECT COUNT(*) FROM jobs), (SELECT COUNT(*) FROM checkpoints),"
                            " (SELECT COUNT(*) FROM ranks), (SELECT COUNT(*) FROM shards),"
                            " (SELECT COUNT(*) FROM remote_objects),"
                            " (SELECT COUNT(*) FROM replication)",
        /* detected_at is the first detection of the fault being recorded:
         * kept while the copy stays bad or unrepairable, renewed when a
         * repaired copy goes bad again */
        [STMT_FAULT_SET] = "INSERT INTO copy_faults (job, step, rank, area, state, detected_at,"
                           " detail, repaired_at, source) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,"
                           " CASE WHEN ?5 = 1 THEN ?6 END, ?8)"
                           " ON CONFLICT (job, step, rank, area) DO UPDATE SET"
                           " detected_at = CASE WHEN state = 1 AND ?5 != 1 THEN ?6"
                           " ELSE detected_at END,"
                           " state = ?5, detail = CASE WHEN ?5 = 1 THEN detail ELSE ?7 END,"
                           " repaired_at = CASE WHEN ?5 = 1 THEN ?6 ELSE NULL END,"
                           " source = ?8",
        [STMT_FAULT_GET] = "SELECT state, detected_at, detail, repaired_at, source"
                           " FROM copy_faults WHERE job = ?1 AND step = ?2 AND rank = ?3"
                           " AND area = ?4",
        /* ?3 < 0: any rank (the job-wide LATEST passes over the step) */
        [STMT_FAULT_UNREPAIRABLE] = "SELECT 1 FROM copy_faults WHERE job = ?1 AND step = ?2"
                                    " AND (?3 < 0 OR rank = ?3) AND state = 2 LIMIT 1",
        [STMT_FAULT_OPEN] = "SELECT step, rank FROM copy_faults WHERE job = ?1"
                            " AND (?2 < 0 OR step = ?2) AND area = ?3 AND state != 1"
                            " ORDER BY step, rank",
        [STMT_FAULT_COUNTS] = "SELECT COALESCE(SUM(state = 0), 0), COALESCE(SUM(state = 1), 0),"
                              " COALESCE(SUM(state = 2), 0) FROM copy_faults",
        [STMT_INTEGRITY] = "PRAGMA integrity_check",
};

struct catalog {
        sqlite3 *db;
        sqlite3_stmt *stmt[STMT_MAX_];
};

/* ---- helpers ----------------------------------------------------------- */

/* Log an sqlite failure with context and sqlite's own message, return -EIO.
 * Must run before the failing statement is reset (reset may change the
 * message). */
__attribute__((format(printf, 2, 3))) static int sql_error(sqlite3 *db, const char *fmt, ...) {
        char what[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        log_error("catalog: %s: %s (sqlite %d)", what, db ? sqlite3_errmsg(db) : "out of memory",
                  db ? sqlite3_extended_errcode(db) : SQLITE_NOMEM);
        return -EIO;
}

/* Statements are reset and unbound when the variable that holds them goes
 * out of scope, so every return path leaves them idle. */
static void stmt_resetp(sqlite3_stmt **s) {
        if (*s) {
                sqlite3_reset(*s);
                sqlite3_clear_bindings(*s);
        }
}
#define _cleanup_stmt_ _cleanup_(stmt_resetp)

/* Text bound with SQLITE_STATIC: the caller's string outlives the call, and
 * stmt_resetp clears the binding before we return. */
static int bind_text(sqlite3_stmt *s, int i, const char *v) {
        return sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
}

static int bind_i64(sqlite3_stmt *s, int i, int64_t v) {
        return sqlite3_bind_int64(s, i, v);
}

/* Steps are u64 on the wire but bounded by CKPT_STEP_MAX so that they keep
 * their order as sqlite's signed INTEGER. */
static int check_step(const char *job, uint64_t step) {
        if (step > (uint64_t)CKPT_STEP_MAX) {
                log_error("catalog: job %s step %" PRIu64 " exceeds the largest storable step",
                          job, step);
                return -EINVAL;
        }
        return 0;
}

static int exec(sqlite3 *db, const char *path, const char *sql, const char *what) {
        char *msg = NULL;
        int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

        if (rc != SQLITE_OK) {
                log_error("catalog: %s: %s: %s (sqlite %d)", path, what,
                          msg ? msg : sqlite3_errstr(rc), rc);
                sqlite3_free(msg);
                return -EIO;
        }
        return 0;
}

/* Run a statement that returns one integer (a pragma, a count). */
static int query_int(sqlite3 *db, const char *path, const char *sql, int64_t *out) {
        sqlite3_stmt *s = NULL;
        int rc;

        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
                return sql_error(db, "%s: prepare \"%s\"", path, sql);
        rc = sqlite3_step(s);
        if (rc != SQLITE_ROW) {
                int r = sql_error(db, "%s: \"%s\"", path, sql);
                sqlite3_finalize(s);
                return r;
        }
        *out = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
        return 0;
}

static int query_text(sqlite3 *db, const char *path, const char *sql, char *buf, size_t size) {
        sqlite3_stmt *s = NULL;
        const unsigned char *t;
        int rc;

        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
                return sql_error(db, "%s: prepare \"%s\"", path, sql);
        rc = sqlite3_step(s);
        if (rc != SQLITE_ROW) {
                int r = sql_error(db, "%s: \"%s\"", path, sql);
                sqlite3_finalize(s);
                return r;
        }
        t = sqlite3_column_text(s, 0);
        snprintf(buf, size, "%s", t ? (const char *)t : "");
        sqlite3_finalize(s);
        return 0;
}

/* Run a statement that returns no rows (or whose rows we do not need). */
static int step_done(struct catalog *c, enum stmt_id id) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[id];

        if (sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "\"%s\"", stmt_sql[id]);
        return 0;
}

/* Writes join the open batch transaction, opening one if none is. */
static int tx_ensure(struct catalog *c) {
        if (!sqlite3_get_autocommit(c->db))
                return 0;
        return step_done(c, STMT_BEGIN);
}

/* A multi-statement write (rank_add) runs inside a savepoint, so a failure
 * half-way leaves the batch as it was before the call rather than with half
 * a rank in it. */
static int op_begin(struct catalog *c) {
        int r = tx_ensure(c);

        return r < 0 ? r : step_done(c, STMT_SAVEPOINT);
}

static int op_end(struct catalog *c, int r) {
        if (r < 0) {
                /* ROLLBACK TO keeps the savepoint open; release it too.  Some
                 * errors (disk full) already rolled back the whole
                 * transaction, savepoint included. */
                if (!sqlite3_get_autocommit(c->db)) {
                        (void)step_done(c, STMT_ROLLBACK_TO);
                        (void)step_done(c, STMT_RELEASE);
                }
                return r;
        }
        return step_done(c, STMT_RELEASE);
}

static void name_copy(struct ckpt_name *n, sqlite3_stmt *s, int col) {
        const unsigned char *t = sqlite3_column_text(s, col);
        int len = sqlite3_column_bytes(s, col);

        /* Names were validated on the way in; the bound only guards against a
         * database edited by hand. */
        if (!t || len < 0)
                len = 0;
        if (len > CKPT_NAME_MAX)
                len = CKPT_NAME_MAX;
        if (len)
                memcpy(n->str, t, (size_t)len);
        n->str[len] = '\0';
        n->len = (uint16_t)len;
}

static uint32_t col_u32(sqlite3_stmt *s, int col) {
        int64_t v = sqlite3_column_int64(s, col);

        if (v < 0)
                return 0;
        return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static uint64_t col_u64(sqlite3_stmt *s, int col) {
        int64_t v = sqlite3_column_int64(s, col);

        return v < 0 ? 0 : (uint64_t)v;
}

static void ckpt_entry_fill(struct ckpt_ckpt_entry *e, sqlite3_stmt *s) {
        *e = (struct ckpt_ckpt_entry){
                .step = col_u64(s, 0),
                .world_size = col_u32(s, 1),
                .state = (uint8_t)sqlite3_column_int(s, 2),
                .committed_at = sqlite3_column_int64(s, 3),
                .ranks_local = col_u32(s, 4),
                .bytes = col_u64(s, 5),
                .shards = col_u32(s, 6),
                .remote_state = (uint8_t)sqlite3_column_int(s, 7),
                .pinned = (uint8_t)sqlite3_column_int(s, 8),
                .replicas = (uint8_t)MIN(sqlite3_column_int(s, 9), 255),
        };
        const unsigned char *why = sqlite3_column_text(s, 10);
        if (why)
                snprintf(e->reason, sizeof(e->reason), "%s", (const char *)why);
}

/* ---- open / close ------------------------------------------------------ */

/* A schema newer than this build may mean anything; refuse rather than
 * write rows a newer ckptd would misread. */
static int version_check(const char *path, int64_t version) {
        if (version >= 0 && version <= CATALOG_SCHEMA_VERSION)
                return 0;
        log_error("catalog: %s has schema version %" PRId64 ", this build knows up to %d; "
                  "refusing to use it (run a newer ckptd, or move the file away and it is "
                  "rebuilt from the disk)",
                  path, version, CATALOG_SCHEMA_VERSION);
        return -EIO;
}

/* Apply the pending migrations, each in its own transaction.  The version
 * is re-read under BEGIN IMMEDIATE so two openers cannot both apply it. */
static int migrate(sqlite3 *db, const char *path) {
        for (;;) {
                char what[64], sql[64];
                int64_t version;
                int r;

                r = exec(db, path, "BEGIN IMMEDIATE", "begin migration");
                if (r < 0)
                        return r;
                r = query_int(db, path, "PRAGMA user_version", &version);
                if (r < 0)
                        goto fail;
                r = version_check(path, version);
                if (r < 0)
                        goto fail;
                if (version == CATALOG_SCHEMA_VERSION)
                        return exec(db, path, "COMMIT", "end migration check");

                snprintf(what, sizeof(what), "migration %" PRId64 " -> %" PRId64, version,
                         version + 1);
                r = exec(db, path, migrations[version], what);
                if (r < 0)
                        goto fail;
                snprintf(sql, sizeof(sql), "PRAGMA user_version = %" PRId64, version + 1);
                r = exec(db, path, sql, what);
                if (r < 0)
                        goto fail;
                r = exec(db, path, "COMMIT", what);
                if (r < 0)
                        goto fail;
                log_info("catalog: %s migrated to schema version %" PRId64, path, version + 1);
                continue;
        fail:
                if (!sqlite3_get_autocommit(db))
                        (void)exec(db, path, "ROLLBACK", "roll back migration");
                return r;
        }
}

static int configure(sqlite3 *db, const char *path) {
        char mode[32];
        int64_t version, fk;
        int r;

        if (sqlite3_busy_timeout(db, 5000) != SQLITE_OK)
                return sql_error(db, "%s: busy_timeout", path);

        /* Check before touching anything: a newer schema is not ours to
         * convert to WAL either.  migrate() checks again under a lock. */
        r = query_int(db, path, "PRAGMA user_version", &version);
        if (r < 0)
                return r;
        r = version_check(path, version);
        if (r < 0)
                return r;

        r = query_text(db, path, "PRAGMA journal_mode = WAL", mode, sizeof(mode));
        if (r < 0)
                return r;
        if (strcmp(mode, "wal") != 0) {
                log_error("catalog: %s: cannot switch to WAL mode (journal_mode is %s)", path,
                          mode);
                return -EIO;
        }
        r = exec(db, path, "PRAGMA synchronous = NORMAL", "set synchronous");
        if (r < 0)
                return r;
        r = exec(db, path, "PRAGMA foreign_keys = ON", "enable foreign keys");
        if (r < 0)
                return r;
        /* A build without foreign-key support ignores the pragma silently;
         * the cascades are load-bearing, so check. */
        r = query_int(db, path, "PRAGMA foreign_keys", &fk);
        if (r < 0)
                return r;
        if (fk != 1) {
                log_error("catalog: %s: sqlite does not enforce foreign keys", path);
                return -EIO;
        }
        return 0;
}

DEFINE_CLEANUP(struct catalog *, catalog_free)

int catalog_open(struct catalog **out, const char *path) {
        _cleanup_(catalog_freep) struct catalog *c = NULL;
        int r;

        c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;

        if (sqlite3_open_v2(path, &c->db,
                            SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                            NULL) != SQLITE_OK)
                return sql_error(c->db, "open %s", path);

        r = configure(c->db, path);
        if (r < 0)
                return r;
        r = migrate(c->db, path);
        if (r < 0)
                return r;

        for (size_t i = 0; i < STMT_MAX_; i++)
                if (sqlite3_prepare_v3(c->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                       &c->stmt[i], NULL) != SQLITE_OK)
                        return sql_error(c->db, "%s: prepare \"%s\"", path, stmt_sql[i]);

        *out = TAKE_PTR(c);
        return 0;
}

struct catalog *catalog_free(struct catalog *c) {
        if (!c)
                return NULL;
        if (c->db) {
                /* Statements exist only once open succeeded; a half-open
                 * catalog has nothing to flush. */
                if (c->stmt[STMT_MAX_ - 1])
                        (void)catalog_flush(c);
                for (size_t i = 0; i < STMT_MAX_; i++)
                        sqlite3_finalize(c->stmt[i]);
                if (sqlite3_close(c->db) != SQLITE_OK)
                        (void)sql_error(c->db, "close");
        }
        free(c);
        return NULL;
}

int catalog_flush(struct catalog *c) {
        int r;

        if (sqlite3_get_autocommit(c->db))
                return 0;
        r = step_done(c, STMT_COMMIT);
        if (r < 0 && !sqlite3_get_autocommit(c->db)) {
                /* busy_timeout has already waited; keeping a transaction that
                 * cannot commit would only grow it.  The rows are re-derived
                 * from the manifests at the next start. */
                log_error("catalog: dropping the uncommitted batch");
                (void)step_done(c, STMT_ROLLBACK);
        }
        return r;
}

int catalog_flush_durable(struct catalog *c) {
        int r = catalog_flush(c);
        if (r < 0)
                return r;
        /* synchronous=NORMAL syncs the WAL only before a checkpoint: one
         * now puts what was just committed on stable storage (it also
         * copies it into the database, as the next automatic one would) */
        if (sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL) !=
            SQLITE_OK)
                return sql_error(c->db, "checkpoint the write-ahead log");
        return 0;
}

int catalog_check(struct catalog *c) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_INTEGRITY];
        bool ok = true;
        int rc, rows = 0;

        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                const unsigned char *t = sqlite3_column_text(s, 0);

                rows++;
                if (t && strcmp((const char *)t, "ok") == 0)
                        continue;
                ok = false;
                log_error("catalog: integrity check: %s", t ? (const char *)t : "(null)");
        }
        if (rc != SQLITE_DONE)
                return sql_error(c->db, "integrity check");
        return ok && rows > 0 ? 0 : -EIO;
}

/* ---- jobs -------------------------------------------------------------- */

int catalog_job_add(struct catalog *c, const char *job, uint32_t uid) {
        int r;

        /* Only validated names reach the catalog; a bad one here is a bug in
         * the caller, not something to store. */
        r = ckpt_name_validate(job, strlen(job));
        if (r < 0)
                return r;
        r = tx_ensure(c);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_ADD];
        if (bind_text(s, 1, job) || bind_i64(s, 2, uid) || bind_i64(s, 3, time(NULL)) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "add job %s", job);
        return 0;
}

int catalog_job_delete(struct catalog *c, const char *job) {
        int r = tx_ensure(c);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_DELETE];
        if (bind_text(s, 1, job) || sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "delete job %s", job);
        return 0;
}

int catalog_job_uid(struct catalog *c, const char *job, uint32_t *uid) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_UID];
        int rc;

        if (bind_text(s, 1, job))
                return sql_error(c->db, "look up job %s", job);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "look up job %s", job);
        if (uid)
                *uid = col_u32(s, 0);
        return 0;
}

int catalog_job_error(struct catalog *c, const char *job) {
        int r = tx_ensure(c);

        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_ERROR];
        if (bind_text(s, 1, job) || sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "count error of job %s", job);
        return sqlite3_changes(c->db) > 0 ? 0 : -ENOENT;
}

uint32_t catalog_job_count(struct catalog *c, int64_t uid) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_COUNT];

        if (bind_i64(s, 1, uid) || sqlite3_step(s) != SQLITE_ROW) {
                (void)sql_error(c->db, "count jobs");
                return 0;
        }
        return col_u32(s, 0);
}

int catalog_job_list(struct catalog *c, uint32_t start, int64_t uid,
                     struct ckpt_rep_job_list *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_PAGE];
        int rc = SQLITE_DONE;

        out->total = 0;
        out->count = 0;

        {
                _cleanup_stmt_ sqlite3_stmt *n = c->stmt[STMT_JOB_COUNT];
                if (bind_i64(n, 1, uid) || sqlite3_step(n) != SQLITE_ROW)
                        return sql_error(c->db, "count jobs");
                out->total = col_u32(n, 0);
        }

        if (bind_i64(s, 1, CKPT_JOB_PAGE) || bind_i64(s, 2, start) ||
            bind_i64(s, 3, CKPT_STATE_COMMITTED) || bind_i64(s, 4, uid))
                return sql_error(c->db, "list jobs from %" PRIu32, start);
        while (out->count < CKPT_JOB_PAGE && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                struct ckpt_job_entry *e = &out->entries[out->count++];

                name_copy(&e->name, s, 0);
                e->uid = col_u32(s, 1);
                e->errors = col_u32(s, 2);
                e->latest_committed =
                        sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 3);
                e->checkpoints = col_u32(s, 4);
                e->committed = col_u32(s, 5);
                e->bytes_local = col_u64(s, 6);
        }
        if (out->count < CKPT_JOB_PAGE && rc != SQLITE_DONE) {
                out->count = 0;
                return sql_error(c->db, "list jobs from %" PRIu32, start);
        }
        return 0;
}

/* ---- checkpoints ------------------------------------------------------- */

int catalog_ckpt_upsert(struct catalog *c, const char *job, uint64_t step, uint32_t world_size,
                        uint8_t state, int64_t committed_at) {
        int r;

        r = check_step(job, step);
        if (r < 0)
                return r;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        /* Checked rather than left to the foreign key, so that a missing job
         * is the documented -ENOENT and not a logged sqlite failure. */
        r = catalog_job_uid(c, job, NULL);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_UPSERT];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, world_size) ||
            bind_i64(s, 4, state) || bind_i64(s, 5, time(NULL)) || bind_i64(s, 6, committed_at) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record job %s step %" PRIu64, job, step);
        return 0;
}

int catalog_ckpt_set_fail_reason(struct catalog *c, const char *job, uint64_t step,
                                 const char *reason) {
        int r = check_step(job, step);
        if (r < 0)
                return r;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_FAIL_REASON];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_text(s, 3, reason) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record why job %s step %" PRIu64 " failed", job, step);
        return sqlite3_changes(c->db) > 0 ? 0 : -ENOENT;
}

int catalog_ckpt_get(struct catalog *c, const char *job, uint64_t step,
                     struct ckpt_ckpt_entry *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_GET];
        int rc;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step))
                return sql_error(c->db, "get job %s step %" PRIu64, job, step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "get job %s step %" PRIu64, job, step);
        ckpt_entry_fill(out, s);
        return 0;
}

/* Deleting a row that is already gone succeeds: the caller wants it gone. */
int catalog_ckpt_delete(struct catalog *c, const char *job, uint64_t step) {
        int r;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        r = tx_ensure(c);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_DELETE];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "delete job %s step %" PRIu64, job, step);
        return 0;
}

int catalog_latest_committed(struct catalog *c, const char *job, uint64_t *step,
                             uint32_t *world_size) {
        return catalog_latest_committed_below(c, job, CKPT_STEP_LATEST, step, world_size);
}

int catalog_latest_committed_below(struct catalog *c, const char *job, uint64_t below,
                                   uint64_t *step, uint32_t *world_size) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_LATEST_COMMITTED];
        int rc;

        if (below == 0)
                return -ENOENT;
        /* Bound by "step <= below - 1": every stored step is <= CKPT_STEP_MAX
         * (sqlite's signed INTEGER), so a larger bound is no bound, and
         * below - 1 then always fits an int64. */
        uint64_t last = MIN(below - 1, (uint64_t)CKPT_STEP_MAX);
        if (bind_text(s, 1, job) || bind_i64(s, 2, CKPT_STATE_COMMITTED) ||
            bind_i64(s, 3, (int64_t)last))
                return sql_error(c->db, "latest committed step of job %s", job);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "latest committed step of job %s", job);
        if (step)
                *step = col_u64(s, 0);
        if (world_size)
                *world_size = col_u32(s, 1);
        return 0;
}

int catalog_ckpt_list(struct catalog *c, const char *job, uint32_t start,
                      struct ckpt_rep_ckpt_list *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_PAGE];
        int r, rc = SQLITE_DONE;

        out->total = 0;
        out->count = 0;

        r = catalog_job_uid(c, job, NULL);
        if (r < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *n = c->stmt[STMT_CKPT_COUNT];
                if (bind_text(n, 1, job) || sqlite3_step(n) != SQLITE_ROW)
                        return sql_error(c->db, "count checkpoints of job %s", job);
                out->total = col_u32(n, 0);
        }

        if (bind_text(s, 1, job) || bind_i64(s, 2, CKPT_LIST_PAGE) || bind_i64(s, 3, start))
                return sql_error(c->db, "list checkpoints of job %s", job);
        while (out->count < CKPT_LIST_PAGE && (rc = sqlite3_step(s)) == SQLITE_ROW)
                ckpt_entry_fill(&out->entries[out->count++], s);
        if (out->count < CKPT_LIST_PAGE && rc != SQLITE_DONE) {
                out->count = 0;
                return sql_error(c->db, "list checkpoints of job %s", job);
        }
        return 0;
}

/* Rows are copied out before any callback runs, so no statement is active
 * while the callback calls back into the catalog (deleting, upserting).
 * Job names are stored once per job, not once per row. */
struct foreach_row {
        size_t job; /* index into jobs[] */
        uint64_t step;
};

struct foreach_rows {
        struct foreach_row *rows;
        size_t nrows, rows_cap;
        char **jobs;
        size_t njobs, jobs_cap;
};

static void foreach_rows_done(struct foreach_rows *f) {
        for (size_t i = 0; i < f->njobs; i++)
                free(f->jobs[i]);
        free(f->jobs);
        free(f->rows);
        *f = (struct foreach_rows){ 0 };
}

/* Step s (bound by the caller, who also resets it) to its end, copying
 * (job, step) from columns 0 and 1.  Rows must come grouped by job. */
static int foreach_rows_collect(struct catalog *c, sqlite3_stmt *s, struct foreach_rows *f,
                                const char *what) {
        int rc;

        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                const char *name = (const char *)sqlite3_column_text(s, 0);

                if (!name)
                        continue;
                if (f->njobs == 0 || strcmp(f->jobs[f->njobs - 1], name) != 0) {
                        if (f->njobs == f->jobs_cap) {
                                size_t cap = f->jobs_cap ? f->jobs_cap * 2 : 8;
                                char **n = reallocarray(f->jobs, cap, sizeof(*f->jobs));
                                if (!n)
                                        return -ENOMEM;
                                f->jobs = n;
                                f->jobs_cap = cap;
                        }
                        f->jobs[f->njobs] = strdup(name);
                        if (!f->jobs[f->njobs])
                                return -ENOMEM;
                        f->njobs++;
                }
                if (f->nrows == f->rows_cap) {
                        size_t cap = f->rows_cap ? f->rows_cap * 2 : 64;
                        struct foreach_row *n = reallocarray(f->rows, cap, sizeof(*f->rows));
                        if (!n)
                                return -ENOMEM;
                        f->rows = n;
                        f->rows_cap = cap;
                }
                f->rows[f->nrows++] = (struct foreach_row){
                        .job = f->njobs - 1,
                        .step = col_u64(s, 1),
                };
        }
        if (rc != SQLITE_DONE)
                return sql_error(c->db, "%s", what);
        return 0;
}

int catalog_ckpt_foreach(struct catalog *c, const char *job, catalog_ckpt_cb cb, void *userdata) {
        struct foreach_rows f = { 0 };
        char what[CKPT_NAME_MAX + 64];
        int r = 0, rc;

        snprintf(what, sizeof(what), "iterate checkpoints of job %s", job ? job : "(all)");
        {
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[job ? STMT_CKPT_OF_JOB : STMT_CKPT_ALL];

                if (job && bind_text(s, 1, job)) {
                        r = sql_error(c->db, "%s", what);
                        goto out;
                }
                r = foreach_rows_collect(c, s, &f, what);
                if (r < 0)
                        goto out;
        }

        for (size_t i = 0; i < f.nrows; i++) {
                const char *name = f.jobs[f.rows[i].job];
                uint64_t step = f.rows[i].step;
                uint8_t state;

                /* An earlier callback may have deleted or changed this row:
                 * report what is there now, and skip what is gone. */
                {
                        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_STATE];

                        if (bind_text(s, 1, name) || bind_i64(s, 2, (int64_t)step)) {
                                r = sql_error(c->db, "state of job %s step %" PRIu64, name, step);
                                goto out;
                        }
                        rc = sqlite3_step(s);
                        if (rc == SQLITE_DONE)
                                continue;
                        if (rc != SQLITE_ROW) {
                                r = sql_error(c->db, "state of job %s step %" PRIu64, name, step);
                                goto out;
                        }
                        state = (uint8_t)sqlite3_column_int(s, 0);
                }
                r = cb(userdata, name, step, state);
                if (r != 0)
                        goto out;
        }

out:
        foreach_rows_done(&f);
        return r;
}

/* ---- ranks and shards -------------------------------------------------- */

static int rank_add_rows(struct catalog *c, const struct manifest *m) {
        uint64_t bytes = 0;
        int r;

        /* The checkpoint row may not exist yet when reconcile finds a rank
         * before anything else of its step; the job must (ownership is only
         * ever decided by catalog_job_add). */
        r = catalog_job_uid(c, m->job, NULL);
        if (r < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_ENSURE];
                if (bind_text(s, 1, m->job) || bind_i64(s, 2, (int64_t)m->step) ||
                    bind_i64(s, 3, m->world_size) || bind_i64(s, 4, CKPT_STATE_SAVING) ||
                    bind_i64(s, 5, time(NULL)) || sqlite3_step(s) != SQLITE_DONE)
                        return sql_error(c->db, "record job %s step %" PRIu64, m->job, m->step);
        }
        {
                /* Cascades to the rank's old shard rows. */
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_RANK_DELETE];
                if (bind_text(s, 1, m->job) || bind_i64(s, 2, (int64_t)m->step) ||
                    bind_i64(s, 3, m->rank) || sqlite3_step(s) != SQLITE_DONE)
                        return sql_error(c->db, "replace job %s step %" PRIu64 " rank %" PRIu32,
                                         m->job, m->step, m->rank);
        }
        for (uint32_t i = 0; i < m->nshards; i++)
                bytes += m->shards[i].size;
        {
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_RANK_INSERT];
                if (bind_text(s, 1, m->job) || bind_i64(s, 2, (int64_t)m->step) ||
                    bind_i64(s, 3, m->rank) || bind_i64(s, 4, (int64_t)bytes) ||
                    bind_i64(s, 5, m->nshards) || sqlite3_step(s) != SQLITE_DONE)
                        return sql_error(c->db, "add job %s step %" PRIu64 " rank %" PRIu32,
                                         m->job, m->step, m->rank);
        }
        for (uint32_t i = 0; i < m->nshards; i++) {
                const struct manifest_shard *sh = &m->shards[i];
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_SHARD_INSERT];

                if (bind_text(s, 1, m->job) || bind_i64(s, 2, (int64_t)m->step) ||
                    bind_i64(s, 3, m->rank) || bind_text(s, 4, sh->name) ||
                    bind_i64(s, 5, (int64_t)sh->size) || bind_i64(s, 6, sh->crc32c) ||
                    sqlite3_step(s) != SQLITE_DONE)
                        return sql_error(c->db,
                                         "add shard %s of job %s step %" PRIu64 " rank %" PRIu32,
                                         sh->name, m->job, m->step, m->rank);
        }
        return 0;
}

int catalog_rank_add(struct catalog *c, const struct manifest *m) {
        int r;

        r = check_step(m->job, m->step);
        if (r < 0)
                return r;
        r = op_begin(c);
        if (r < 0)
                return r;
        return op_end(c, rank_add_rows(c, m));
}

int catalog_rank_exists(struct catalog *c, const char *job, uint64_t step, uint32_t rank) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_RANK_EXISTS];
        int rc;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank))
                return sql_error(c->db, "look up job %s step %" PRIu64 " rank %" PRIu32, job,
                                 step, rank);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        return sql_error(c->db, "look up job %s step %" PRIu64 " rank %" PRIu32, job, step, rank);
}

int catalog_ranks(struct catalog *c, const char *job, uint64_t step, uint32_t *out, size_t cap,
                  size_t *count) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_RANKS_OF_STEP];
        int rc;

        *count = 0;
        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step))
                return sql_error(c->db, "list ranks of job %s step %" PRIu64, job, step);
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                if (*count < cap)
                        out[*count] = col_u32(s, 0);
                (*count)++;
        }
        if (rc != SQLITE_DONE)
                return sql_error(c->db, "list ranks of job %s step %" PRIu64, job, step);
        return *count > cap ? -ENOBUFS : 0;
}

int catalog_rank_delete(struct catalog *c, const char *job, uint64_t step, uint32_t rank) {
        int r = tx_ensure(c);
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_RANK_DELETE];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "delete job %s step %" PRIu64 " rank %" PRIu32, job, step,
                                 rank);
        return 0;
}

int catalog_rank_matches(struct catalog *c, const struct manifest *m) {
        int r = catalog_rank_exists(c, m->job, m->step, m->rank);
        if (r <= 0)
                return r;
        struct ckpt_rep_shard_list *page = calloc(1, sizeof(*page));
        if (!page)
                return -ENOMEM;
        r = catalog_shard_list(c, m->job, m->step, m->rank, 0, page);
        if (r == 0 && page->total != m->nshards)
                r = 0;
        else if (r == 0) {
                r = 1;
                for (uint32_t i = 0; i < m->nshards && r == 1; i++) {
                        uint64_t size;
                        uint32_t crc;
                        const struct manifest_shard *sh = &m->shards[i];
                        int q = catalog_shard_get(c, m->job, m->step, m->rank, sh->name, &size,
                                                  &crc);
                        if (q == -ENOENT || (q == 0 && (size != sh->size || crc != sh->crc32c)))
                                r = 0;
                        else if (q < 0)
                                r = q;
                }
        }
        free(page);
        return r;
}

int catalog_shard_get(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                      const char *shard, uint64_t *size, uint32_t *crc32c) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_SHARD_GET];
        int rc;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
            bind_text(s, 4, shard))
                return sql_error(c->db, "look up shard %s of job %s step %" PRIu64, shard, job,
                                 step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "look up shard %s of job %s step %" PRIu64 " rank %" PRIu32,
                                 shard, job, step, rank);
        if (size)
                *size = col_u64(s, 0);
        if (crc32c)
                *crc32c = (uint32_t)sqlite3_column_int64(s, 1);
        return 0;
}

int catalog_shard_list(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                       uint32_t start, struct ckpt_rep_shard_list *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_SHARD_PAGE];
        int r, rc = SQLITE_DONE;

        out->total = 0;
        out->count = 0;

        r = catalog_rank_exists(c, job, step, rank);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        {
                _cleanup_stmt_ sqlite3_stmt *n = c->stmt[STMT_SHARD_COUNT];
                if (bind_text(n, 1, job) || bind_i64(n, 2, (int64_t)step) || bind_i64(n, 3, rank) ||
                    sqlite3_step(n) != SQLITE_ROW)
                        return sql_error(c->db, "count shards of job %s step %" PRIu64
                                         " rank %" PRIu32, job, step, rank);
                out->total = col_u32(n, 0);
        }

        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
            bind_i64(s, 4, CKPT_LIST_PAGE) || bind_i64(s, 5, start))
                return sql_error(c->db, "list shards of job %s step %" PRIu64 " rank %" PRIu32,
                                 job, step, rank);
        while (out->count < CKPT_LIST_PAGE && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                struct ckpt_shard_entry *e = &out->entries[out->count++];

                name_copy(&e->name, s, 0);
                e->size = col_u64(s, 1);
                e->crc32c = (uint32_t)sqlite3_column_int64(s, 2);
        }
        if (out->count < CKPT_LIST_PAGE && rc != SQLITE_DONE) {
                out->count = 0;
                return sql_error(c->db, "list shards of job %s step %" PRIu64 " rank %" PRIu32,
                                 job, step, rank);
        }
        return 0;
}

/* ---- the object-store tier --------------------------------------------- */

/* Bind NULL for a NULL string: "no upload id" and "no error" are NULL in
 * the table, not "". */
static int bind_text_or_null(sqlite3_stmt *s, int i, const char *v) {
        return v ? bind_text(s, i, v) : sqlite3_bind_null(s, i);
}

static void text_copy(char *buf, size_t size, sqlite3_stmt *s, int col) {
        const unsigned char *t = sqlite3_column_text(s, col);

        snprintf(buf, size, "%s", t ? (const char *)t : "");
}

/* Bind (job, step, rank, shard) as ?1..?4. */
static int bind_shard(sqlite3_stmt *s, const char *job, uint64_t step, uint32_t rank,
                      const char *shard) {
        return bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
               bind_text(s, 4, shard);
}

static bool too_long(const char *v, size_t max) {
        return v && strnlen(v, max + 1) > max;
}

int catalog_remote_object_set(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                              const char *shard, const char *key, uint64_t size, uint8_t state,
                              const char *upload_id, uint64_t part_size, const char *etag,
                              const char *error) {
        int r;

        if (state > CATALOG_OBJECT_FAILED || !key || !*key || too_long(key, CATALOG_KEY_MAX) ||
            too_long(upload_id, CATALOG_UPLOAD_ID_MAX) || too_long(etag, CATALOG_ETAG_MAX) ||
            size > INT64_MAX || part_size > INT64_MAX)
                return -EINVAL;
        r = check_step(job, step);
        if (r < 0)
                return r;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        /* Checked rather than left to the foreign key, so that a missing
         * shard is -ENOENT and not a logged sqlite failure. */
        r = catalog_shard_get(c, job, step, rank, shard, NULL, NULL);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_OBJ_SET];
        if (bind_shard(s, job, step, rank, shard) || bind_text(s, 5, key) ||
            bind_i64(s, 6, (int64_t)size) || bind_i64(s, 7, state) ||
            bind_text_or_null(s, 8, upload_id) ||
            (upload_id ? bind_i64(s, 9, (int64_t)part_size) : sqlite3_bind_null(s, 9)) ||
            bind_text_or_null(s, 10, etag) || bind_text_or_null(s, 11, error) ||
            bind_i64(s, 12, state == CATALOG_OBJECT_FAILED) || bind_i64(s, 13, time(NULL)) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record remote state of shard %s of job %s step %" PRIu64
                                 " rank %" PRIu32, shard, job, step, rank);
        return 0;
}

int catalog_remote_object_get(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                              const char *shard, struct catalog_remote_object *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_OBJ_GET];
        int rc;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_shard(s, job, step, rank, shard))
                return sql_error(c->db, "remote state of shard %s of job %s step %" PRIu64, shard,
                                 job, step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "remote state of shard %s of job %s step %" PRIu64
                                 " rank %" PRIu32, shard, job, step, rank);
        text_copy(out->key, sizeof(out->key), s, 0);
        out->size = col_u64(s, 1);
        out->state = (uint8_t)sqlite3_column_int(s, 2);
        text_copy(out->upload_id, sizeof(out->upload_id), s, 3);
        out->part_size = col_u64(s, 4);
        text_copy(out->etag, sizeof(out->etag), s, 5);
        text_copy(out->error, sizeof(out->error), s, 6);
        out->attempts = col_u32(s, 7);
        out->updated_at = sqlite3_column_int64(s, 8);
        return 0;
}

static int remote_object_exists(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                                const char *shard) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_OBJ_EXISTS];
        int rc;

        if (bind_shard(s, job, step, rank, shard))
                return sql_error(c->db, "look up remote shard %s of job %s step %" PRIu64, shard,
                                 job, step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return 0;
        if (rc == SQLITE_DONE)
                return -ENOENT;
        return sql_error(c->db, "look up remote shard %s of job %s step %" PRIu64 " rank %" PRIu32,
                         shard, job, step, rank);
}

int catalog_remote_part_add(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                            const char *shard, unsigned part_number, const char *etag,
                            uint64_t size) {
        int r;

        if (part_number < 1 || part_number > CATALOG_PART_NUMBER_MAX || !etag || !*etag ||
            too_long(etag, CATALOG_ETAG_MAX) || size > INT64_MAX)
                return -EINVAL;
        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        r = remote_object_exists(c, job, step, rank, shard);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_PART_ADD];
        if (bind_shard(s, job, step, rank, shard) || bind_i64(s, 5, part_number) ||
            bind_text(s, 6, etag) || bind_i64(s, 7, (int64_t)size) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record part %u of shard %s of job %s step %" PRIu64
                                 " rank %" PRIu32, part_number, shard, job, step, rank);
        return 0;
}

int catalog_remote_parts(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                         const char *shard, struct catalog_part *out, size_t cap, size_t *count) {
        size_t total, n = 0;
        int rc = SQLITE_DONE;

        *count = 0;
        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        {
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_PART_COUNT];
                if (bind_shard(s, job, step, rank, shard) || sqlite3_step(s) != SQLITE_ROW)
                        return sql_error(c->db, "count parts of shard %s of job %s step %" PRIu64
                                         " rank %" PRIu32, shard, job, step, rank);
                total = (size_t)col_u64(s, 0);
        }

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_PART_LIST];
        if (bind_shard(s, job, step, rank, shard) ||
            bind_i64(s, 5, cap > INT64_MAX ? INT64_MAX : (int64_t)cap))
                return sql_error(c->db, "list parts of shard %s of job %s step %" PRIu64
                                 " rank %" PRIu32, shard, job, step, rank);
        while (n < cap && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                struct catalog_part *p = &out[n++];

                p->number = (unsigned)col_u32(s, 0);
                text_copy(p->etag, sizeof(p->etag), s, 1);
                p->size = col_u64(s, 2);
        }
        if (n < cap && rc != SQLITE_DONE)
                return sql_error(c->db, "list parts of shard %s of job %s step %" PRIu64
                                 " rank %" PRIu32, shard, job, step, rank);
        *count = total;
        return total > cap ? -ENOBUFS : 0;
}

int catalog_remote_parts_clear(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                               const char *shard) {
        int r;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        r = tx_ensure(c);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_PART_CLEAR];
        if (bind_shard(s, job, step, rank, shard) || sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "clear parts of shard %s of job %s step %" PRIu64
                                 " rank %" PRIu32, shard, job, step, rank);
        return 0;
}

int catalog_ckpt_remote_set(struct catalog *c, const char *job, uint64_t step,
                            uint8_t remote_state, const char *error) {
        int r;

        if (remote_state > CATALOG_REMOTE_FAILED)
                return -EINVAL;
        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        r = tx_ensure(c);
        if (r < 0)
                return r;

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_REMOTE_SET];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) ||
            bind_i64(s, 3, remote_state) || bind_text_or_null(s, 4, error) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record remote state of job %s step %" PRIu64, job, step);
        return sqlite3_changes(c->db) > 0 ? 0 : -ENOENT;
}

int catalog_ckpt_remote_get(struct catalog *c, const char *job, uint64_t step,
                            uint8_t *remote_state, char *error, size_t error_size) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_REMOTE_GET];
        int rc;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step))
                return sql_error(c->db, "remote state of job %s step %" PRIu64, job, step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "remote state of job %s step %" PRIu64, job, step);
        if (remote_state)
                *remote_state = (uint8_t)sqlite3_column_int(s, 0);
        if (error && error_size > 0)
                text_copy(error, error_size, s, 1);
        return 0;
}

/* 0 if the checkpoint row exists, -ENOENT if not. */
static int ckpt_exists(struct catalog *c, const char *job, uint64_t step) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_STATE];
        int rc;

        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step))
                return sql_error(c->db, "look up job %s step %" PRIu64, job, step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return 0;
        if (rc == SQLITE_DONE)
                return -ENOENT;
        return sql_error(c->db, "look up job %s step %" PRIu64, job, step);
}

/* Add (on) or drop the (job, step) row of a table that hangs off a
 * checkpoint row (pins, commit requests): adding one for an unknown
 * checkpoint is -ENOENT, adding it twice or dropping one that is not there
 * succeeds. */
static int ckpt_mark_set(struct catalog *c, const char *job, uint64_t step, bool on,
                         enum stmt_id add, enum stmt_id drop, const char *what) {
        int r;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return on ? -ENOENT : 0;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        if (on) {
                r = ckpt_exists(c, job, step);
                if (r < 0)
                        return r;
        }

        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[on ? add : drop];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "%s %s of job %s step %" PRIu64, on ? "add" : "drop",
                                 what, job, step);
        return 0;
}

int catalog_pin(struct catalog *c, const char *job, uint64_t step, bool pinned) {
        return ckpt_mark_set(c, job, step, pinned, STMT_PIN_ADD, STMT_PIN_DEL, "the pin");
}

int catalog_pinned(struct catalog *c, const char *job, uint64_t step) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_PIN_GET];
        int rc;

        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step))
                return sql_error(c->db, "pin of job %s step %" PRIu64, job, step);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        return sql_error(c->db, "pin of job %s step %" PRIu64, job, step);
}

int catalog_ckpt_set_ranks_committed(struct catalog *c, const char *job, uint64_t step,
                                     uint32_t ranks) {
        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        int r = tx_ensure(c);
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_RANKS_COMMITTED_SET];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, ranks) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record committed ranks of job %s step %" PRIu64, job,
                                 step);
        return sqlite3_changes(c->db) > 0 ? 0 : -ENOENT;
}

int catalog_ckpt_damaged(struct catalog *c, const char *job, uint64_t step) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_CKPT_DAMAGED];

        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) ||
            bind_i64(s, 3, CKPT_STATE_COMMITTED) || bind_i64(s, 4, CATALOG_FAULT_UNREPAIRABLE) ||
            bind_i64(s, 5, CATALOG_COPY_LOCAL))
                return sql_error(c->db, "damage of job %s step %" PRIu64, job, step);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return sqlite3_column_int(s, 0) ? 1 : 0;
        if (rc == SQLITE_DONE)
                return 0;
        return sql_error(c->db, "damage of job %s step %" PRIu64, job, step);
}

int catalog_remote_pending_foreach(struct catalog *c, catalog_remote_cb cb, void *userdata) {
        static const char what[] = "iterate checkpoints pending upload";
        struct foreach_rows f = { 0 };
        int r = 0, rc;

        {
                _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_REMOTE_PENDING];

                if (bind_i64(s, 1, CKPT_STATE_COMMITTED) || bind_i64(s, 2, CATALOG_REMOTE_DONE)) {
                        r = sql_error(c->db, "%s", what);
                        goto out;
                }
                r = foreach_rows_collect(c, s, &f, what);
                if (r < 0)
                        goto out;
        }

        for (size_t i = 0; i < f.nrows; i++) {
                const char *name = f.jobs[f.rows[i].job];
                uint64_t step = f.rows[i].step;
                uint8_t remote_state;

                /* An earlier callback may have deleted this row or moved it
                 * out of the pending set: report what is there now. */
                {
                        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_REMOTE_PENDING_ONE];

                        if (bind_text(s, 1, name) || bind_i64(s, 2, (int64_t)step) ||
                            bind_i64(s, 3, CKPT_STATE_COMMITTED) ||
                            bind_i64(s, 4, CATALOG_REMOTE_DONE)) {
                                r = sql_error(c->db, "remote state of job %s step %" PRIu64, name,
                                              step);
                                goto out;
                        }
                        rc = sqlite3_step(s);
                        if (rc == SQLITE_DONE)
                                continue;
                        if (rc != SQLITE_ROW) {
                                r = sql_error(c->db, "remote state of job %s step %" PRIu64, name,
                                              step);
                                goto out;
                        }
                        remote_state = (uint8_t)sqlite3_column_int(s, 0);
                }
                r = cb(userdata, name, step, remote_state);
                if (r != 0)
                        goto out;
        }

out:
        foreach_rows_done(&f);
        return r;
}

/* ---- the neighbour tier (schema 3) ------------------------------------------------------ */

int catalog_repl_set(struct catalog *c, const char *job, uint64_t step, uint32_t node,
                     uint8_t state, const char *error) {
        int r;

        if (state > CATALOG_REPL_FAILED)
                return -EINVAL;
        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        r = ckpt_exists(c, job, step);
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_REPL_SET];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, node) ||
            bind_i64(s, 4, state) || bind_text_or_null(s, 5, error) ||
            bind_i64(s, 6, time(NULL)) || sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "replication state of job %s step %" PRIu64, job, step);
        return 0;
}

int catalog_repl_get(struct catalog *c, const char *job, uint64_t step, uint32_t node,
                     uint8_t *state) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_REPL_GET];

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, node))
                return sql_error(c->db, "replication state of job %s step %" PRIu64, job, step);
        int r = sqlite3_step(s);
        if (r == SQLITE_DONE)
                return -ENOENT;
        if (r != SQLITE_ROW)
                return sql_error(c->db, "replication state of job %s step %" PRIu64, job, step);
        *state = (uint8_t)col_u32(s, 0);
        return 0;
}

int catalog_repl_counts(struct catalog *c, const char *job, uint64_t step, uint32_t *done,
                        uint32_t *total) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_REPL_COUNTS];

        *done = *total = 0;
        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) ||
            bind_i64(s, 3, CATALOG_REPL_DONE) || sqlite3_step(s) != SQLITE_ROW)
                return sql_error(c->db, "replication of job %s step %" PRIu64, job, step);
        *done = col_u32(s, 0);
        *total = col_u32(s, 1);
        return 0;
}

/* The (job, step) rows of stmt (bound; reset here), collected first so that
 * cb may use the catalog, then cb on each until it returns non-zero. */
static int foreach_job_step(struct catalog *c, sqlite3_stmt *stmt, const char *what,
                            int (*cb)(void *userdata, const char *job, uint64_t step),
                            void *userdata) {
        struct foreach_rows f = { 0 };
        int r;
        {
                _cleanup_stmt_ sqlite3_stmt *s = stmt;
                r = foreach_rows_collect(c, s, &f, what);
        }
        for (size_t i = 0; r >= 0 && i < f.nrows; i++) {
                r = cb(userdata, f.jobs[f.rows[i].job], f.rows[i].step);
                if (r != 0)
                        break;
        }
        foreach_rows_done(&f);
        return r;
}

int catalog_repl_pending_foreach(struct catalog *c, uint32_t node, catalog_repl_cb cb,
                                 void *userdata) {
        static const char what[] = "iterate steps pending replication";
        sqlite3_stmt *s = c->stmt[STMT_REPL_PENDING];

        if (bind_i64(s, 1, node) || bind_i64(s, 2, CATALOG_REPL_DONE)) {
                int r = sql_error(c->db, "%s", what);
                stmt_resetp(&s);
                return r;
        }
        return foreach_job_step(c, s, what, cb, userdata);
}

int catalog_commit_request_set(struct catalog *c, const char *job, uint64_t step, bool asked) {
        return ckpt_mark_set(c, job, step, asked, STMT_COMMIT_ASK_ADD, STMT_COMMIT_ASK_DEL,
                             "the commit request");
}

int catalog_commit_request_foreach(struct catalog *c, catalog_commit_request_cb cb,
                                   void *userdata) {
        return foreach_job_step(c, c->stmt[STMT_COMMIT_ASK_ALL], "iterate commit requests", cb,
                                userdata);
}

/* ---- the background scrub (schema 6) ------------------------------------ */

static void col_text_copy(sqlite3_stmt *s, int col, char *buf, size_t size) {
        const unsigned char *t = sqlite3_column_text(s, col);
        snprintf(buf, size, "%s", t ? (const char *)t : "");
}

int catalog_scrub_progress_get(struct catalog *c, struct catalog_scrub_progress *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_SCRUB_GET];
        int rc = sqlite3_step(s);

        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "read the scrub's progress");
        *out = (struct catalog_scrub_progress){
                .pass = col_u64(s, 0),
                .pass_started_at = sqlite3_column_int64(s, 1),
                .pass_finished_at = sqlite3_column_int64(s, 2),
                .area = (int32_t)sqlite3_column_int64(s, 3),
                .step = col_u64(s, 5),
                .rank = col_u32(s, 6),
                .offset = col_u64(s, 8),
                .bytes_verified = col_u64(s, 9),
                .copies_verified = col_u64(s, 10),
                .copies_bad = col_u64(s, 11),
        };
        col_text_copy(s, 4, out->job, sizeof(out->job));
        col_text_copy(s, 7, out->shard, sizeof(out->shard));
        col_text_copy(s, 12, out->last_finding, sizeof(out->last_finding));
        return 0;
}

int catalog_scrub_progress_set(struct catalog *c, const struct catalog_scrub_progress *p) {
        if (p->step > (uint64_t)CKPT_STEP_MAX || p->pass > (uint64_t)INT64_MAX)
                return -EINVAL;
        int r = tx_ensure(c);
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_SCRUB_SET];
        if (bind_i64(s, 1, (int64_t)p->pass) || bind_i64(s, 2, p->pass_started_at) ||
            bind_i64(s, 3, p->pass_finished_at) || bind_i64(s, 4, p->area) ||
            bind_text(s, 5, p->job) || bind_i64(s, 6, (int64_t)p->step) ||
            bind_i64(s, 7, p->rank) || bind_text(s, 8, p->shard) ||
            bind_i64(s, 9, (int64_t)p->offset) || bind_i64(s, 10, (int64_t)p->bytes_verified) ||
            bind_i64(s, 11, (int64_t)p->copies_verified) ||
            bind_i64(s, 12, (int64_t)p->copies_bad) || bind_text(s, 13, p->last_finding) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "record the scrub's progress");
        return 0;
}

int catalog_committed_rank_next(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                                char job_out[CKPT_NAME_MAX + 1], uint64_t *step_out,
                                uint32_t *rank_out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_RANK_COMMITTED_NEXT];

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
            bind_i64(s, 4, CKPT_STATE_COMMITTED))
                return sql_error(c->db, "find the committed rank after job %s step %" PRIu64
                                 " rank %u", job, step, rank);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "find the committed rank after job %s step %" PRIu64
                                 " rank %u", job, step, rank);
        col_text_copy(s, 0, job_out, CKPT_NAME_MAX + 1);
        *step_out = col_u64(s, 1);
        *rank_out = col_u32(s, 2);
        return 0;
}

int catalog_committed_bytes(struct catalog *c, uint64_t *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_COMMITTED_BYTES];

        *out = 0;
        if (bind_i64(s, 1, CKPT_STATE_COMMITTED) || sqlite3_step(s) != SQLITE_ROW)
                return sql_error(c->db, "sum the committed bytes");
        *out = col_u64(s, 0);
        return 0;
}

/* ---- what the metrics show ---------------------------------------------- */

int catalog_job_tiers_foreach(struct catalog *c, catalog_job_tiers_cb cb, void *userdata) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_JOB_TIERS];
        int rc;

        if (bind_i64(s, 1, CKPT_STATE_LOCAL) || bind_i64(s, 2, CKPT_STATE_COMMITTED) ||
            bind_i64(s, 3, CATALOG_REMOTE_DONE) || bind_i64(s, 4, CATALOG_REPL_DONE) ||
            bind_i64(s, 5, CATALOG_OBJECT_DONE))
                return sql_error(c->db, "sum the steps per tier");
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                struct catalog_job_tiers t = { 0 };
                col_text_copy(s, 0, t.job, sizeof(t.job));
                static const uint8_t tiers[] = { CKPT_TIER_LOCAL, CKPT_TIER_COMMITTED,
                                                 CKPT_TIER_REMOTE, CKPT_TIER_REPLICATED };
                for (size_t i = 0; i < sizeof(tiers); i++) {
                        t.steps[tiers[i]] = col_u64(s, 1 + 2 * (int)i);
                        t.bytes[tiers[i]] = col_u64(s, 2 + 2 * (int)i);
                }
                t.remote_backlog_bytes = col_u64(s, 9);
                t.uid = col_u32(s, 10);
                int r = cb(userdata, &t);
                if (r < 0)
                        return r;
        }
        if (rc != SQLITE_DONE)
                return sql_error(c->db, "sum the steps per tier");
        return 0;
}

int catalog_row_counts(struct catalog *c, struct catalog_rows *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_ROW_COUNTS];

        *out = (struct catalog_rows){ 0 };
        if (sqlite3_step(s) != SQLITE_ROW)
                return sql_error(c->db, "count the catalog's rows");
        out->jobs = col_u64(s, 0);
        out->checkpoints = col_u64(s, 1);
        out->ranks = col_u64(s, 2);
        out->shards = col_u64(s, 3);
        out->remote_objects = col_u64(s, 4);
        out->replication = col_u64(s, 5);
        return 0;
}

/* ---- copy faults (schema 7) -------------------------------------------- */

int catalog_copy_fault_set(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                           uint32_t area, uint8_t state, const char *detail, const char *source) {
        int r;

        if (state > CATALOG_FAULT_UNREPAIRABLE || step > (uint64_t)CKPT_STEP_MAX)
                return -EINVAL;
        r = tx_ensure(c);
        if (r < 0)
                return r;
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_FAULT_SET];
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
            bind_i64(s, 4, area) || bind_i64(s, 5, state) || bind_i64(s, 6, time(NULL)) ||
            bind_text(s, 7, detail ? detail : "") || bind_text_or_null(s, 8, source) ||
            sqlite3_step(s) != SQLITE_DONE)
                return sql_error(c->db, "copy fault of job %s step %" PRIu64 " rank %u", job,
                                 step, rank);
        return 0;
}

int catalog_copy_fault_get(struct catalog *c, const char *job, uint64_t step, uint32_t rank,
                           uint32_t area, struct catalog_copy_fault *out) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_FAULT_GET];

        if (step > (uint64_t)CKPT_STEP_MAX)
                return -ENOENT;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank) ||
            bind_i64(s, 4, area))
                return sql_error(c->db, "copy fault of job %s step %" PRIu64, job, step);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sql_error(c->db, "copy fault of job %s step %" PRIu64, job, step);
        const char *detail = (const char *)sqlite3_column_text(s, 2);
        const char *source = (const char *)sqlite3_column_text(s, 4);
        out->state = (uint8_t)col_u32(s, 0);
        out->detected_at = (int64_t)col_u64(s, 1);
        out->repaired_at = (int64_t)col_u64(s, 3);
        snprintf(out->detail, sizeof(out->detail), "%s", detail ? detail : "");
        snprintf(out->source, sizeof(out->source), "%s", source ? source : "");
        return 0;
}

/* rank -1: any rank of the step */
static int copy_unrepairable(struct catalog *c, const char *job, uint64_t step, int64_t rank) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_FAULT_UNREPAIRABLE];

        if (step > (uint64_t)CKPT_STEP_MAX)
                return 0;
        if (bind_text(s, 1, job) || bind_i64(s, 2, (int64_t)step) || bind_i64(s, 3, rank))
                return sql_error(c->db, "copy faults of job %s step %" PRIu64, job, step);
        int rc = sqlite3_step(s);
        if (rc == SQLITE_ROW)
                return 1;
        if (rc == SQLITE_DONE)
                return 0;
        return sql_error(c->db, "copy faults of job %s step %" PRIu64, job, step);
}

int catalog_copy_unrepairable(struct catalog *c, const char *job, uint64_t step, uint32_t rank) {
        return copy_unrepairable(c, job, step, rank);
}

int catalog_step_unrepairable(struct catalog *c, const char *job, uint64_t step) {
        return copy_unrepairable(c, job, step, -1);
}

int catalog_copy_fault_counts(struct catalog *c, uint32_t *bad, uint32_t *repaired,
                              uint32_t *unrepairable) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_FAULT_COUNTS];

        *bad = *repaired = *unrepairable = 0;
        if (sqlite3_step(s) != SQLITE_ROW)
                return sql_error(c->db, "count copy faults");
        *bad = col_u32(s, 0);
        *repaired = col_u32(s, 1);
        *unrepairable = col_u32(s, 2);
        return 0;
}

int catalog_copy_faults_open(struct catalog *c, const char *job, uint64_t step, uint32_t area,
                             uint64_t *steps, uint32_t *ranks, size_t cap, size_t *count) {
        _cleanup_stmt_ sqlite3_stmt *s = c->stmt[STMT_FAULT_OPEN];
        int rc;

        *count = 0;
        if (bind_text(s, 1, job) ||
            bind_i64(s, 2, step > (uint64_t)CKPT_STEP_MAX ? -1 : (int64_t)step) ||
            bind_i64(s, 3, area))
                return sql_error(c->db, "open copy faults of job %s", job);
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
                if (*count < cap) {
                        steps[*count] = col_u64(s, 0);
                        ranks[*count] = col_u32(s, 1);
                }
                (*count)++;
        }
        if (rc != SQLITE_DONE)
                return sql_error(c->db, "open copy faults of job %s", job);
        return *count > cap ? -ENOBUFS : 0;
}
