/* SPDX-License-Identifier: MIT */
/*
 * Unit test for the catalog: schema creation and migration bookkeeping,
 * every query's answer against rows we put in, paging totals and order at
 * the page boundaries the wire protocol uses, cascading deletes, iteration
 * that mutates the catalog from its callback, the batch transaction (not
 * visible to another connection until flushed, durable once flushed or
 * freed), and refusal of a database from a newer build.  Schema 2: a
 * database written by schema 1 migrates keeping its rows; the remote-object,
 * part, checkpoint remote-state and pin calls round-trip, cascade from the
 * checkpoint row and iterate the pending set.  A second sqlite
 * connection looks at the file directly, so the test checks what is on
 * disk, not just what the module says about itself.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "catalog/catalog.h"
#include "local/manifest.h"
#include "util/cleanup.h"

static char dir[] = "/tmp/test-catalog-XXXXXX";
static char db_path[64];

#define FAIL(...)                                                    \
        do {                                                         \
                fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);      \
                fprintf(stderr, __VA_ARGS__);                        \
                fprintf(stderr, "\n  (files left in %s)\n", dir);    \
                exit(1);                                             \
        } while (0)

#define CHECK(cond)                                      \
        do {                                             \
                if (!(cond))                             \
                        FAIL("check failed: %s", #cond); \
        } while (0)

#define EXPECT(expr, want)                                                                 \
        do {                                                                               \
                long long got_ = (long long)(expr), want_ = (long long)(want);             \
                if (got_ != want_)                                                         \
                        FAIL("%s = %lld, expected %s = %lld", #expr, got_, #want, want_); \
        } while (0)

/* ---- a second, independent connection to the same file ----------------- */

static sqlite3 *raw_open_at(const char *path, int flags) {
        sqlite3 *db = NULL;

        if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK)
                FAIL("raw open %s: %s", path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_busy_timeout(db, 5000);
        return db;
}

static sqlite3 *raw_open(void) {
        return raw_open_at(db_path, SQLITE_OPEN_READWRITE);
}

static long long raw_int_at(const char *path, const char *sql) {
        sqlite3 *db = raw_open_at(path, SQLITE_OPEN_READWRITE);
        sqlite3_stmt *s = NULL;
        long long v;

        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
                FAIL("raw prepare %s: %s", sql, sqlite3_errmsg(db));
        if (sqlite3_step(s) != SQLITE_ROW)
                FAIL("raw step %s: %s", sql, sqlite3_errmsg(db));
        v = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
        sqlite3_close(db);
        return v;
}

static long long raw_int(const char *sql) {
        return raw_int_at(db_path, sql);
}

static void raw_text(const char *sql, char *buf, size_t size) {
        sqlite3 *db = raw_open();
        sqlite3_stmt *s = NULL;

        if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
                FAIL("raw prepare %s: %s", sql, sqlite3_errmsg(db));
        if (sqlite3_step(s) != SQLITE_ROW)
                FAIL("raw step %s: %s", sql, sqlite3_errmsg(db));
        snprintf(buf, size, "%s", (const char *)sqlite3_column_text(s, 0));
        sqlite3_finalize(s);
        sqlite3_close(db);
}

static void raw_exec(const char *sql) {
        sqlite3 *db = raw_open();
        char *msg = NULL;

        if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
                FAIL("raw exec %s: %s", sql, msg);
        sqlite3_close(db);
}

/* ---- helpers ----------------------------------------------------------- */

DEFINE_CLEANUP(struct manifest *, manifest_free)

/* Shards smaller than one block: the single block CRC is the shard CRC. */
static void add_shard(struct manifest *m, const char *name, uint64_t size, uint32_t crc) {
        int r = manifest_add_shard(m, name, size, crc, &crc);
        if (r < 0)
                FAIL("manifest_add_shard %s: %s", name, strerror(-r));
}

static struct catalog *reopen(struct catalog *c) {
        int r;

        catalog_free(c);
        c = NULL;
        r = catalog_open(&c, db_path);
        if (r < 0)
                FAIL("catalog_open (reopen): %s", strerror(-r));
        return c;
}

/* ---- sections ---------------------------------------------------------- */

static void test_schema(void) {
        char mode[32];

        EXPECT(raw_int("PRAGMA user_version"), CATALOG_SCHEMA_VERSION);
        EXPECT(raw_int("PRAGMA user_version"), 8);
        EXPECT(raw_int("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                       "('jobs', 'checkpoints', 'ranks', 'shards')"),
               4);
        /* WAL is a property of the file: another connection sees it. */
        raw_text("PRAGMA journal_mode", mode, sizeof(mode));
        if (strcmp(mode, "wal") != 0)
                FAIL("journal_mode is %s, expected wal", mode);
}

static void test_jobs(struct catalog *c) {
        uint32_t uid = 0;

        EXPECT(catalog_job_count(c, -1), 0);
        EXPECT(catalog_job_uid(c, "alpha", &uid), -ENOENT);
        EXPECT(catalog_job_add(c, "alpha", 1000), 0);
        EXPECT(catalog_job_uid(c, "alpha", &uid), 0);
        EXPECT(uid, 1000);
        /* A job belongs to the uid that created it: a second add changes
         * nothing. */
        EXPECT(catalog_job_add(c, "alpha", 2000), 0);
        EXPECT(catalog_job_uid(c, "alpha", &uid), 0);
        EXPECT(uid, 1000);
        EXPECT(catalog_job_add(c, "beta", 1001), 0);
        EXPECT(catalog_job_add(c, "gamma", 1002), 0);
        EXPECT(catalog_job_count(c, -1), 3);
        EXPECT(catalog_job_add(c, "../etc", 1000), -EINVAL);
        EXPECT(catalog_job_count(c, -1), 3);

        EXPECT(catalog_job_error(c, "beta"), 0);
        EXPECT(catalog_job_error(c, "beta"), 0);
        EXPECT(catalog_job_error(c, "nosuchjob"), -ENOENT);
}

static void test_checkpoints(struct catalog *c) {
        struct ckpt_ckpt_entry e;

        EXPECT(catalog_ckpt_upsert(c, "nosuchjob", 1, 1, CKPT_STATE_SAVING, 0), -ENOENT);
        EXPECT(catalog_ckpt_get(c, "nosuchjob", 1, &e), -ENOENT);
        EXPECT(catalog_ckpt_upsert(c, "alpha", (uint64_t)INT64_MAX + 1, 1, CKPT_STATE_SAVING, 0),
               -EINVAL);

        EXPECT(catalog_ckpt_upsert(c, "alpha", 10, 4, CKPT_STATE_SAVING, 0), 0);
        memset(&e, 0xff, sizeof(e));
        EXPECT(catalog_ckpt_get(c, "alpha", 10, &e), 0);
        EXPECT(e.step, 10);
        EXPECT(e.world_size, 4);
        EXPECT(e.state, CKPT_STATE_SAVING);
        EXPECT(e.ranks_local, 0);
        EXPECT(e.bytes, 0);
        EXPECT(e.shards, 0);
        EXPECT(e.committed_at, 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 11, &e), -ENOENT);
        EXPECT(catalog_ckpt_get(c, "beta", 10, &e), -ENOENT);

        /* Update in place: state, world size and commit time change. */
        EXPECT(catalog_ckpt_upsert(c, "alpha", 10, 8, CKPT_STATE_COMMITTED, 1700000000), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 10, &e), 0);
        EXPECT(e.world_size, 8);
        EXPECT(e.state, CKPT_STATE_COMMITTED);
        EXPECT(e.committed_at, 1700000000);

        /* Why a step failed: kept while FAILED and through the LOCAL row a
         * restart makes of it, cleared by a new save or a commit. */
        EXPECT(catalog_ckpt_set_fail_reason(c, "alpha", 12, "rank 0: x"), -ENOENT);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 12, 2, CKPT_STATE_SAVING, 0), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 12, &e), 0);
        EXPECT(strcmp(e.reason, ""), 0);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 12, 2, CKPT_STATE_FAILED, 0), 0);
        EXPECT(catalog_ckpt_set_fail_reason(c, "alpha", 12, "rank 1: trainer disconnected"), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 12, &e), 0);
        EXPECT(strcmp(e.reason, "rank 1: trainer disconnected"), 0);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 12, 2, CKPT_STATE_LOCAL, 0), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 12, &e), 0);
        EXPECT(strcmp(e.reason, "rank 1: trainer disconnected"), 0);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 12, 2, CKPT_STATE_SAVING, 0), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 12, &e), 0);
        EXPECT(strcmp(e.reason, ""), 0);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 12, 2, CKPT_STATE_FAILED, 0), 0);
        EXPECT(catalog_ckpt_set_fail_reason(c, "alpha", 12, "rank 0: aborted"), 0);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 12, 2, CKPT_STATE_COMMITTED, 5), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 12, &e), 0);
        EXPECT(strcmp(e.reason, ""), 0);
        EXPECT(catalog_ckpt_delete(c, "alpha", 12), 0);

        /* The largest storable step keeps its value. */
        EXPECT(catalog_ckpt_upsert(c, "gamma", (uint64_t)INT64_MAX, 1, CKPT_STATE_LOCAL, 0), 0);
        EXPECT(catalog_ckpt_get(c, "gamma", (uint64_t)INT64_MAX, &e), 0);
        CHECK(e.step == (uint64_t)INT64_MAX);
        EXPECT(catalog_ckpt_delete(c, "gamma", (uint64_t)INT64_MAX), 0);
}

/* beta gets NBETA checkpoints at steps 100, 200, ..., inserted out of order
 * so that the listing order comes from the query, not the insertion. */
#define NBETA (2 * CKPT_LIST_PAGE + 5)

static void test_ckpt_paging(struct catalog *c) {
        _cleanup_free_ struct ckpt_rep_ckpt_list *l = calloc(1, sizeof(*l));
        uint64_t expect_step = (uint64_t)NBETA * 100;
        uint32_t seen = 0;

        CHECK(l);
        for (uint32_t i = 0; i < NBETA; i++) {
                /* 7 is coprime with NBETA (261 = 9 * 29): a permutation. */
                uint64_t step = (uint64_t)((i * 7u) % NBETA + 1) * 100;
                uint8_t state = step % 1000 == 0 ? CKPT_STATE_COMMITTED : CKPT_STATE_LOCAL;

                EXPECT(catalog_ckpt_upsert(c, "beta", step, 2, state,
                                           state == CKPT_STATE_COMMITTED ? (int64_t)step : 0),
                       0);
        }

        for (uint32_t start = 0; start < NBETA; start += CKPT_LIST_PAGE) {
                memset(l, 0xaa, sizeof(*l));
                EXPECT(catalog_ckpt_list(c, "beta", start, l), 0);
                EXPECT(l->total, NBETA);
                EXPECT(l->count, MIN((uint32_t)CKPT_LIST_PAGE, NBETA - start));
                for (uint32_t i = 0; i < l->count; i++) {
                        EXPECT(l->entries[i].step, expect_step);
                        EXPECT(l->entries[i].world_size, 2);
                        EXPECT(l->entries[i].ranks_local, 0);
                        EXPECT(l->entries[i].state, expect_step % 1000 == 0
                                                            ? CKPT_STATE_COMMITTED
                                                            : CKPT_STATE_LOCAL);
                        expect_step -= 100;
                        seen++;
                }
        }
        EXPECT(seen, NBETA);
        EXPECT(expect_step, 0);

        /* Past the end: empty page, true total. */
        EXPECT(catalog_ckpt_list(c, "beta", NBETA, l), 0);
        EXPECT(l->total, NBETA);
        EXPECT(l->count, 0);
        EXPECT(catalog_ckpt_list(c, "beta", UINT32_MAX, l), 0);
        EXPECT(l->count, 0);

        /* Known job without checkpoints vs unknown job. */
        EXPECT(catalog_job_add(c, "empty", 7), 0);
        EXPECT(catalog_ckpt_list(c, "empty", 0, l), 0);
        EXPECT(l->total, 0);
        EXPECT(l->count, 0);
        EXPECT(catalog_ckpt_list(c, "nosuchjob", 0, l), -ENOENT);
}

static void test_ranks(struct catalog *c) {
        _cleanup_(manifest_freep) struct manifest *m1 = NULL, *m2 = NULL, *m3 = NULL;
        _cleanup_(manifest_freep) struct manifest *m4 = NULL, *m5 = NULL;
        _cleanup_free_ struct ckpt_rep_shard_list *l = calloc(1, sizeof(*l));
        struct ckpt_ckpt_entry e;
        uint64_t size, many_bytes = 0;
        uint32_t crc;
        char name[32];

        CHECK(l);
        /* rank 1: three shards; a CRC above INT32_MAX must survive sqlite. */
        EXPECT(manifest_new(&m1, "alpha", 10, 1, 8, 1000), 0);
        add_shard(m1, "weights", 3000, 0xdeadbeef);
        add_shard(m1, "optim", 500, 7);
        add_shard(m1, "a-empty", 0, 0);
        EXPECT(catalog_rank_exists(c, "alpha", 10, 1), 0);
        EXPECT(catalog_rank_add(c, m1), 0);
        EXPECT(catalog_rank_exists(c, "alpha", 10, 1), 1);
        EXPECT(catalog_rank_exists(c, "alpha", 10, 0), 0);
        EXPECT(catalog_rank_exists(c, "alpha", 11, 1), 0);

        EXPECT(catalog_shard_get(c, "alpha", 10, 1, "weights", &size, &crc), 0);
        EXPECT(size, 3000);
        EXPECT(crc, 0xdeadbeef);
        EXPECT(catalog_shard_get(c, "alpha", 10, 1, "a-empty", &size, &crc), 0);
        EXPECT(size, 0);
        EXPECT(catalog_shard_get(c, "alpha", 10, 1, "nope", &size, &crc), -ENOENT);
        EXPECT(catalog_shard_get(c, "alpha", 10, 0, "weights", &size, &crc), -ENOENT);

        EXPECT(catalog_shard_list(c, "alpha", 10, 1, 0, l), 0);
        EXPECT(l->total, 3);
        EXPECT(l->count, 3);
        CHECK(strcmp(l->entries[0].name.str, "a-empty") == 0);
        CHECK(strcmp(l->entries[1].name.str, "optim") == 0);
        CHECK(strcmp(l->entries[2].name.str, "weights") == 0);
        EXPECT(l->entries[2].name.len, strlen("weights"));
        EXPECT(l->entries[2].size, 3000);
        EXPECT(l->entries[2].crc32c, 0xdeadbeef);
        EXPECT(l->entries[1].size, 500);
        EXPECT(catalog_shard_list(c, "alpha", 10, 0, 0, l), -ENOENT);
        EXPECT(catalog_shard_list(c, "nosuchjob", 10, 1, 0, l), -ENOENT);

        /* rank 2: more shards than a page, added in reverse name order. */
        EXPECT(manifest_new(&m2, "alpha", 10, 2, 8, 1000), 0);
        for (int i = 199; i >= 0; i--) {
                snprintf(name, sizeof(name), "s%03d", i);
                add_shard(m2, name, 100 + (uint64_t)i, (uint32_t)i);
                many_bytes += 100 + (uint64_t)i;
        }
        EXPECT(catalog_rank_add(c, m2), 0);
        EXPECT(catalog_shard_list(c, "alpha", 10, 2, 0, l), 0);
        EXPECT(l->total, 200);
        EXPECT(l->count, CKPT_LIST_PAGE);
        CHECK(strcmp(l->entries[0].name.str, "s000") == 0);
        CHECK(strcmp(l->entries[CKPT_LIST_PAGE - 1].name.str, "s127") == 0);
        EXPECT(catalog_shard_list(c, "alpha", 10, 2, CKPT_LIST_PAGE, l), 0);
        EXPECT(l->total, 200);
        EXPECT(l->count, 200 - CKPT_LIST_PAGE);
        CHECK(strcmp(l->entries[0].name.str, "s128") == 0);
        CHECK(strcmp(l->entries[l->count - 1].name.str, "s199") == 0);
        EXPECT(l->entries[l->count - 1].size, 299);
        EXPECT(l->entries[l->count - 1].crc32c, 199);
        EXPECT(catalog_shard_list(c, "alpha", 10, 2, 200, l), 0);
        EXPECT(l->total, 200);
        EXPECT(l->count, 0);

        EXPECT(catalog_ckpt_get(c, "alpha", 10, &e), 0);
        EXPECT(e.ranks_local, 2);
        EXPECT(e.shards, 203);
        EXPECT(e.bytes, 3500 + many_bytes);
        EXPECT(e.state, CKPT_STATE_COMMITTED); /* rank_add leaves the state alone */

        /* Re-adding rank 1 replaces its rows: "optim" must be gone. */
        EXPECT(manifest_new(&m3, "alpha", 10, 1, 8, 1000), 0);
        add_shard(m3, "weights", 10, 42);
        EXPECT(catalog_rank_add(c, m3), 0);
        EXPECT(catalog_shard_get(c, "alpha", 10, 1, "optim", &size, &crc), -ENOENT);
        EXPECT(catalog_shard_get(c, "alpha", 10, 1, "weights", &size, &crc), 0);
        EXPECT(size, 10);
        EXPECT(crc, 42);
        EXPECT(catalog_ckpt_get(c, "alpha", 10, &e), 0);
        EXPECT(e.ranks_local, 2);
        EXPECT(e.shards, 201);
        EXPECT(e.bytes, 10 + many_bytes);

        /* A rank of a step with no checkpoint row yet creates the row
         * (SAVING, the manifest's world size); an unknown job is -ENOENT and
         * creates nothing. */
        EXPECT(manifest_new(&m4, "alpha", 20, 0, 3, 1000), 0);
        add_shard(m4, "w", 5, 0xfffffffe);
        EXPECT(catalog_rank_add(c, m4), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 20, &e), 0);
        EXPECT(e.state, CKPT_STATE_SAVING);
        EXPECT(e.world_size, 3);
        EXPECT(e.ranks_local, 1);
        EXPECT(e.bytes, 5);
        EXPECT(e.shards, 1);

        /* A rank_add that fails half-way (a hand-built manifest with a
         * duplicate shard name: the second insert violates the key) leaves
         * the rank as it was, and the batch usable. */
        {
                struct manifest_shard dup[2] = {
                        { .name = "x", .size = 1, .crc32c = 1, .nblocks = 1 },
                        { .name = "x", .size = 2, .crc32c = 2, .nblocks = 1 },
                };
                struct manifest bad = {
                        .job = "alpha", .step = 20, .rank = 0, .world_size = 3, .uid = 1000,
                        .block_size = MANIFEST_BLOCK_SIZE, .nshards = 2, .shards = dup,
                };

                EXPECT(catalog_rank_add(c, &bad), -EIO);
                EXPECT(catalog_shard_get(c, "alpha", 20, 0, "w", &size, &crc), 0);
                EXPECT(size, 5);
                EXPECT(catalog_shard_get(c, "alpha", 20, 0, "x", &size, &crc), -ENOENT);
                EXPECT(catalog_ckpt_get(c, "alpha", 20, &e), 0);
                EXPECT(e.ranks_local, 1);
                EXPECT(e.bytes, 5);
                EXPECT(catalog_rank_exists(c, "alpha", 10, 2), 1);
        }

        EXPECT(manifest_new(&m5, "ghost", 1, 0, 1, 1000), 0);
        add_shard(m5, "w", 5, 5);
        EXPECT(catalog_rank_add(c, m5), -ENOENT);
        EXPECT(catalog_rank_exists(c, "ghost", 1, 0), 0);
        EXPECT(catalog_ckpt_get(c, "ghost", 1, &e), -ENOENT);
        EXPECT(catalog_job_uid(c, "ghost", NULL), -ENOENT);
}

static void test_latest(struct catalog *c) {
        uint64_t step = 0;
        uint32_t ws = 0;

        /* alpha: 10 COMMITTED (ws 8), 20 SAVING. */
        EXPECT(catalog_latest_committed(c, "alpha", &step, &ws), 0);
        EXPECT(step, 10);
        EXPECT(ws, 8);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 30, 8, CKPT_STATE_LOCAL, 0), 0);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 5, 8, CKPT_STATE_COMMITTED, 100), 0);
        EXPECT(catalog_latest_committed(c, "alpha", &step, &ws), 0);
        EXPECT(step, 10);
        EXPECT(catalog_ckpt_upsert(c, "alpha", 30, 16, CKPT_STATE_COMMITTED, 200), 0);
        EXPECT(catalog_latest_committed(c, "alpha", &step, &ws), 0);
        EXPECT(step, 30);
        EXPECT(ws, 16);
        /* beta: committed every 1000 steps, latest is the largest multiple. */
        EXPECT(catalog_latest_committed(c, "beta", &step, &ws), 0);
        EXPECT(step, (NBETA * 100) / 1000 * 1000);
        EXPECT(catalog_latest_committed(c, "gamma", &step, &ws), -ENOENT);
        EXPECT(catalog_latest_committed(c, "nosuchjob", &step, &ws), -ENOENT);
}

static void test_job_list(struct catalog *c) {
        _cleanup_free_ struct ckpt_rep_job_list *l = calloc(1, sizeof(*l));
        const struct ckpt_job_entry *a, *b, *g;
        char name[32];

        CHECK(l);
        EXPECT(catalog_job_list(c, 0, -1, l), 0);
        /* alpha, beta, empty, gamma */
        EXPECT(l->total, 4);
        EXPECT(l->count, 4);
        a = &l->entries[0];
        b = &l->entries[1];
        g = &l->entries[3];
        CHECK(strcmp(a->name.str, "alpha") == 0);
        CHECK(strcmp(b->name.str, "beta") == 0);
        {
                /* a non-root client sees only its own jobs */
                _cleanup_free_ struct ckpt_rep_job_list *mine = calloc(1, sizeof(*mine));
                CHECK(mine);
                uint32_t owned = 0;
                for (uint32_t i = 0; i < l->count; i++)
                        owned += l->entries[i].uid == a->uid;
                EXPECT(catalog_job_list(c, 0, a->uid, mine), 0);
                EXPECT(mine->total, owned);
                for (uint32_t i = 0; i < mine->count; i++)
                        EXPECT(mine->entries[i].uid, a->uid);
                EXPECT(catalog_job_count(c, a->uid), owned);
                EXPECT(catalog_job_list(c, 0, 4242424, mine), 0);
                EXPECT(mine->total, 0);
                EXPECT(mine->count, 0);
        }
        CHECK(strcmp(l->entries[2].name.str, "empty") == 0);
        CHECK(strcmp(g->name.str, "gamma") == 0);

        EXPECT(a->uid, 1000);
        EXPECT(a->latest_committed, 30);
        EXPECT(a->checkpoints, 4); /* 5, 10, 20, 30 */
        EXPECT(a->committed, 3);   /* 5, 10, 30 */
        EXPECT(a->errors, 0);
        {
                struct ckpt_ckpt_entry e10, e20;
                EXPECT(catalog_ckpt_get(c, "alpha", 10, &e10), 0);
                EXPECT(catalog_ckpt_get(c, "alpha", 20, &e20), 0);
                EXPECT(a->bytes_local, e10.bytes + e20.bytes);
        }

        EXPECT(b->uid, 1001);
        EXPECT(b->checkpoints, NBETA);
        EXPECT(b->committed, NBETA * 100 / 1000);
        EXPECT(b->latest_committed, (NBETA * 100) / 1000 * 1000);
        EXPECT(b->bytes_local, 0);
        EXPECT(b->errors, 2);

        EXPECT(g->uid, 1002);
        EXPECT(g->latest_committed, -1);
        EXPECT(g->checkpoints, 0);
        EXPECT(g->committed, 0);

        /* More jobs than a page: names j000.. sort after gamma. */
        for (int i = 0; i < CKPT_JOB_PAGE + 6; i++) {
                snprintf(name, sizeof(name), "j%03d", i);
                EXPECT(catalog_job_add(c, name, 5000 + (uint32_t)i), 0);
        }
        EXPECT(catalog_job_count(c, -1), 4 + CKPT_JOB_PAGE + 6);
        EXPECT(catalog_job_list(c, 0, -1, l), 0);
        EXPECT(l->total, 4 + CKPT_JOB_PAGE + 6);
        EXPECT(l->count, CKPT_JOB_PAGE);
        CHECK(strcmp(l->entries[4].name.str, "j000") == 0);
        EXPECT(l->entries[4].uid, 5000);
        EXPECT(catalog_job_list(c, CKPT_JOB_PAGE, -1, l), 0);
        EXPECT(l->count, 10);
        CHECK(strcmp(l->entries[9].name.str, "j069") == 0);
        EXPECT(l->entries[9].uid, 5069);
        EXPECT(catalog_job_list(c, 1000, -1, l), 0);
        EXPECT(l->total, 4 + CKPT_JOB_PAGE + 6);
        EXPECT(l->count, 0);
}

static void test_delete(struct catalog *c) {
        struct ckpt_ckpt_entry e;
        uint64_t size;

        EXPECT(catalog_flush(c), 0);
        CHECK(raw_int("SELECT COUNT(*) FROM shards WHERE job = 'alpha' AND step = 10") > 0);

        EXPECT(catalog_ckpt_delete(c, "alpha", 10), 0);
        EXPECT(catalog_ckpt_get(c, "alpha", 10, &e), -ENOENT);
        EXPECT(catalog_rank_exists(c, "alpha", 10, 1), 0);
        EXPECT(catalog_rank_exists(c, "alpha", 10, 2), 0);
        EXPECT(catalog_shard_get(c, "alpha", 10, 2, "s000", &size, NULL), -ENOENT);
        /* Idempotent. */
        EXPECT(catalog_ckpt_delete(c, "alpha", 10), 0);
        /* Other steps keep their rows. */
        EXPECT(catalog_rank_exists(c, "alpha", 20, 0), 1);

        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int("SELECT COUNT(*) FROM shards WHERE job = 'alpha' AND step = 10"), 0);
        EXPECT(raw_int("SELECT COUNT(*) FROM ranks WHERE job = 'alpha' AND step = 10"), 0);
        EXPECT(raw_int("SELECT COUNT(*) FROM shards WHERE job = 'alpha' AND step = 20"), 1);
        /* Stored as the unsigned value, so the file reads right with the
         * sqlite3 shell too. */
        EXPECT(raw_int("SELECT crc32c FROM shards WHERE job = 'alpha' AND step = 20"), 0xfffffffe);
        EXPECT(catalog_latest_committed(c, "alpha", NULL, NULL), 0);
}

struct foreach_state {
        struct catalog *c;
        uint32_t calls;
        uint64_t last_step;
        char last_job[CKPT_NAME_MAX + 1];
        bool bad_order;
        int stop_at; /* return 42 on this call (1-based); 0 = never */
};

/* On beta: delete every even multiple of 100 as it is reported, and on the
 * first call also delete the oldest step, which must then never be
 * reported. */
static int foreach_delete_cb(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct foreach_state *st = userdata;
        int r;

        if (strcmp(job, "beta") != 0 || step == 100)
                st->bad_order = true;
        if (st->calls > 0 && step >= st->last_step)
                st->bad_order = true;
        if (state != (step % 1000 == 0 ? CKPT_STATE_COMMITTED : CKPT_STATE_LOCAL))
                st->bad_order = true;
        st->last_step = step;
        st->calls++;
        if (st->calls == 1) {
                r = catalog_ckpt_delete(st->c, "beta", 100);
                if (r < 0)
                        return r;
        }
        if ((step / 100) % 2 == 0) {
                r = catalog_ckpt_delete(st->c, job, step);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* All jobs: ordered by job name, then step descending. */
static int foreach_all_cb(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct foreach_state *st = userdata;
        int cmp = st->calls ? strcmp(st->last_job, job) : -1;

        (void)state;
        if (cmp > 0 || (cmp == 0 && step >= st->last_step))
                st->bad_order = true;
        snprintf(st->last_job, sizeof(st->last_job), "%s", job);
        st->last_step = step;
        st->calls++;
        if (st->stop_at && (int)st->calls == st->stop_at)
                return 42;
        return 0;
}

static void test_foreach(struct catalog *c) {
        _cleanup_free_ struct ckpt_rep_ckpt_list *l = calloc(1, sizeof(*l));
        struct foreach_state st = { .c = c };
        uint32_t remaining;

        CHECK(l);
        EXPECT(catalog_ckpt_foreach(c, "beta", foreach_delete_cb, &st), 0);
        CHECK(!st.bad_order);
        /* Every step but 100 was reported exactly once. */
        EXPECT(st.calls, NBETA - 1);
        /* Odd multiples of 100 survive, except 100 itself. */
        remaining = (NBETA + 1) / 2 - 1;
        EXPECT(catalog_ckpt_list(c, "beta", 0, l), 0);
        EXPECT(l->total, remaining);
        for (uint32_t i = 0; i < l->count; i++)
                CHECK((l->entries[i].step / 100) % 2 == 1 && l->entries[i].step != 100);

        st = (struct foreach_state){ .c = c };
        EXPECT(catalog_ckpt_foreach(c, NULL, foreach_all_cb, &st), 0);
        CHECK(!st.bad_order);
        EXPECT(st.calls, 3 /* alpha 5, 20, 30 */ + remaining);

        st = (struct foreach_state){ .c = c, .stop_at = 3 };
        EXPECT(catalog_ckpt_foreach(c, NULL, foreach_all_cb, &st), 42);
        EXPECT(st.calls, 3);

        st = (struct foreach_state){ .c = c };
        EXPECT(catalog_ckpt_foreach(c, "nosuchjob", foreach_all_cb, &st), 0);
        EXPECT(st.calls, 0);
}

static void test_durability(struct catalog **cp) {
        struct catalog *c = *cp;
        struct ckpt_ckpt_entry e;
        uint64_t size;
        uint32_t uid, crc;

        EXPECT(catalog_flush(c), 0);
        EXPECT(catalog_flush(c), 0); /* nothing open: still fine */

        /* Batching: a write is invisible to another connection until the
         * batch is flushed. */
        EXPECT(catalog_job_add(c, "delta", 4242), 0);
        EXPECT(raw_int("SELECT COUNT(*) FROM jobs WHERE name = 'delta'"), 0);
        EXPECT(catalog_job_uid(c, "delta", &uid), 0); /* but visible to us */
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int("SELECT COUNT(*) FROM jobs WHERE name = 'delta'"), 1);

        /* Reopen after a flush keeps everything. */
        c = reopen(c);
        EXPECT(catalog_job_uid(c, "delta", &uid), 0);
        EXPECT(uid, 4242);
        EXPECT(catalog_ckpt_get(c, "alpha", 30, &e), 0);
        EXPECT(e.state, CKPT_STATE_COMMITTED);
        EXPECT(e.world_size, 16);
        EXPECT(e.committed_at, 200);
        EXPECT(catalog_shard_get(c, "alpha", 20, 0, "w", &size, &crc), 0);
        EXPECT(size, 5);
        EXPECT(crc, 0xfffffffe);
        EXPECT(raw_int("PRAGMA user_version"), CATALOG_SCHEMA_VERSION);

        /* catalog_free flushes what is still batched. */
        EXPECT(catalog_ckpt_upsert(c, "delta", 1, 1, CKPT_STATE_LOCAL, 0), 0);
        EXPECT(raw_int("SELECT COUNT(*) FROM checkpoints WHERE job = 'delta'"), 0);
        c = reopen(c);
        EXPECT(raw_int("SELECT COUNT(*) FROM checkpoints WHERE job = 'delta'"), 1);
        EXPECT(catalog_ckpt_get(c, "delta", 1, &e), 0);
        EXPECT(e.state, CKPT_STATE_LOCAL);

        EXPECT(catalog_check(c), 0);
        *cp = c;
}

static void test_refuse(void) {
        struct catalog *c = NULL;
        char path[128];
        FILE *f;

        /* A database from a newer build is refused and left as it was. */
        raw_exec("PRAGMA user_version = 99");
        c = (struct catalog *)(uintptr_t)1;
        EXPECT(catalog_open(&c, db_path), -EIO);
        CHECK(c == (struct catalog *)(uintptr_t)1);
        EXPECT(raw_int("PRAGMA user_version"), 99);
        EXPECT(raw_int("SELECT COUNT(*) FROM jobs WHERE name = 'alpha'"), 1);

        /* So is a file that is not a database at all. */
        snprintf(path, sizeof(path), "%s/garbage.db", dir);
        f = fopen(path, "w");
        CHECK(f);
        for (int i = 0; i < 512; i++)
                fputs("not a database ", f);
        fclose(f);
        c = NULL;
        EXPECT(catalog_open(&c, path), -EIO);
        CHECK(c == NULL);
        unlink(path);

        /* And a path that cannot be created. */
        snprintf(path, sizeof(path), "%s/no/such/dir/catalog.db", dir);
        EXPECT(catalog_open(&c, path), -EIO);
}

static void unlink_db(const char *db) {
        static const char *const suffixes[] = { "", "-wal", "-shm" };
        char path[128];

        for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
                snprintf(path, sizeof(path), "%s%s", db, suffixes[i]);
                unlink(path);
        }
}

static void cleanup_dir(void) {
        unlink_db(db_path);
        rmdir(dir);
}

/* ---- schema 2: the object-store tier ------------------------------------ */

static void side_path(char *buf, size_t size, const char *name) {
        snprintf(buf, size, "%s/%s", dir, name);
}

/* A database written by a schema-1 build: migration 2 is applied at open
 * and every old row is still there, with the new columns at their
 * defaults.  The DDL is migration 1 verbatim. */
static void test_migrate_v1(void) {
        static const char v1[] =
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
                ");"
                "INSERT INTO jobs VALUES ('old', 1234, 100, 2);"
                "INSERT INTO checkpoints VALUES ('old', 7, 4, 3, 101, 102);"
                "INSERT INTO ranks VALUES ('old', 7, 3, 99, 1);"
                "INSERT INTO shards VALUES ('old', 7, 3, 'w', 99, 4000000000, 1);"
                "PRAGMA user_version = 1;";
        struct catalog *c = NULL;
        struct catalog_remote_object o;
        struct ckpt_ckpt_entry e;
        char path[128], err[16];
        uint8_t rs = 99;
        uint64_t size;
        uint32_t uid, crc;
        sqlite3 *db;
        char *msg = NULL;

        side_path(path, sizeof(path), "v1.db");
        db = raw_open_at(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        if (sqlite3_exec(db, v1, NULL, NULL, &msg) != SQLITE_OK)
                FAIL("create v1 database: %s", msg);
        sqlite3_close(db);
        EXPECT(raw_int_at(path, "PRAGMA user_version"), 1);

        EXPECT(catalog_open(&c, path), 0);
        EXPECT(raw_int_at(path, "PRAGMA user_version"), CATALOG_SCHEMA_VERSION);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND "
                                "name IN ('remote_objects', 'remote_parts', 'pins')"),
               3);

        EXPECT(catalog_job_uid(c, "old", &uid), 0);
        EXPECT(uid, 1234);
        EXPECT(catalog_ckpt_get(c, "old", 7, &e), 0);
        EXPECT(e.world_size, 4);
        EXPECT(e.state, CKPT_STATE_COMMITTED);
        EXPECT(e.committed_at, 102);
        EXPECT(e.ranks_local, 1);
        EXPECT(e.bytes, 99);
        EXPECT(catalog_shard_get(c, "old", 7, 3, "w", &size, &crc), 0);
        EXPECT(size, 99);
        EXPECT(crc, 4000000000u);

        /* The new columns of old rows hold their defaults. */
        snprintf(err, sizeof(err), "junk");
        EXPECT(catalog_ckpt_remote_get(c, "old", 7, &rs, err, sizeof(err)), 0);
        EXPECT(rs, CATALOG_REMOTE_NONE);
        CHECK(err[0] == '\0');
        EXPECT(catalog_pinned(c, "old", 7), 0);
        EXPECT(catalog_remote_object_get(c, "old", 7, 3, "w", &o), -ENOENT);
        /* schema 6: no scrub has run; the old rank is the first to scrub */
        {
                struct catalog_scrub_progress sp;
                char job[CKPT_NAME_MAX + 1];
                uint64_t step, bytes;
                uint32_t rank;
                EXPECT(catalog_scrub_progress_get(c, &sp), -ENOENT);
                EXPECT(catalog_committed_rank_next(c, "", 0, 0, job, &step, &rank), 0);
                CHECK(strcmp(job, "old") == 0 && step == 7 && rank == 3);
                EXPECT(catalog_committed_bytes(c, &bytes), 0);
                EXPECT(bytes, 99);
        }

        /* And the old rows take the new ones. */
        EXPECT(catalog_remote_object_set(c, "old", 7, 3, "w", "p/jobs/old/w", 99,
                                         CATALOG_OBJECT_DONE, NULL, 0, "\"e\"", NULL),
               0);
        EXPECT(catalog_remote_object_get(c, "old", 7, 3, "w", &o), 0);
        EXPECT(o.state, CATALOG_OBJECT_DONE);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);

        /* Reopening a migrated file applies nothing twice. */
        EXPECT(catalog_open(&c, path), 0);
        EXPECT(raw_int_at(path, "PRAGMA user_version"), CATALOG_SCHEMA_VERSION);
        EXPECT(catalog_remote_object_get(c, "old", 7, 3, "w", &o), 0);
        c = catalog_free(c);
        unlink_db(path);
}

static void test_refuse_newer(void) {
        struct catalog *c = NULL;
        char path[128];
        sqlite3 *db;

        side_path(path, sizeof(path), "newer.db");
        db = raw_open_at(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        char sql[96];
        snprintf(sql, sizeof(sql), "CREATE TABLE future (x); PRAGMA user_version = %d;",
                 CATALOG_SCHEMA_VERSION + 1);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
                FAIL("create a database of schema %d: %s", CATALOG_SCHEMA_VERSION + 1,
                     sqlite3_errmsg(db));
        sqlite3_close(db);

        EXPECT(catalog_open(&c, path), -EIO);
        CHECK(c == NULL);
        EXPECT(raw_int_at(path, "PRAGMA user_version"), CATALOG_SCHEMA_VERSION + 1);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'remote_objects'"),
               0);
        unlink_db(path);
}

/* One rank of job/step with shards "a" and "b". */
static void remote_rank(struct catalog *c, const char *job, uint64_t step, uint8_t state) {
        _cleanup_(manifest_freep) struct manifest *m = NULL;

        EXPECT(catalog_job_add(c, job, 1000), 0);
        EXPECT(catalog_ckpt_upsert(c, job, step, 2, state, state == CKPT_STATE_COMMITTED ? 9 : 0),
               0);
        EXPECT(manifest_new(&m, job, step, 0, 2, 1000), 0);
        add_shard(m, "a", 100, 1);
        add_shard(m, "b", 200, 2);
        EXPECT(catalog_rank_add(c, m), 0);
}

static void test_remote_objects(struct catalog *c, const char *path) {
        static char big_key[CATALOG_KEY_MAX + 2];
        struct catalog_remote_object o;
        int64_t before = time(NULL);

        remote_rank(c, "r", 1, CKPT_STATE_COMMITTED);

        /* Pending, single PUT: NULLs stay NULL in the table. */
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "a", "pre/jobs/r/steps/1/ranks/0/a", 100,
                                         CATALOG_OBJECT_PENDING, NULL, 0, NULL, NULL),
               0);
        memset(&o, 0x55, sizeof(o));
        EXPECT(catalog_remote_object_get(c, "r", 1, 0, "a", &o), 0);
        CHECK(strcmp(o.key, "pre/jobs/r/steps/1/ranks/0/a") == 0);
        EXPECT(o.size, 100);
        EXPECT(o.state, CATALOG_OBJECT_PENDING);
        CHECK(o.upload_id[0] == '\0');
        EXPECT(o.part_size, 0);
        CHECK(o.etag[0] == '\0');
        CHECK(o.error[0] == '\0');
        EXPECT(o.attempts, 0);
        CHECK(o.updated_at >= before && o.updated_at <= time(NULL));
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_objects WHERE shard = 'a' AND "
                                "upload_id IS NULL AND etag IS NULL AND error IS NULL AND "
                                "part_size IS NULL"),
               1);

        /* Upsert: multipart uploading, then failed twice, then done. */
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "a", "pre/a2", 1ull << 40,
                                         CATALOG_OBJECT_UPLOADING, "upload-1", 8 << 20, NULL,
                                         NULL),
               0);
        EXPECT(catalog_remote_object_get(c, "r", 1, 0, "a", &o), 0);
        CHECK(strcmp(o.key, "pre/a2") == 0);
        EXPECT(o.size, 1ull << 40);
        EXPECT(o.state, CATALOG_OBJECT_UPLOADING);
        CHECK(strcmp(o.upload_id, "upload-1") == 0);
        EXPECT(o.part_size, 8 << 20);
        EXPECT(o.attempts, 0);
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "a", "pre/a2", 1ull << 40,
                                         CATALOG_OBJECT_FAILED, "upload-1", 8 << 20, NULL,
                                         "503 SlowDown"),
               0);
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "a", "pre/a2", 1ull << 40,
                                         CATALOG_OBJECT_FAILED, "upload-1", 8 << 20, NULL,
                                         "timeout"),
               0);
        EXPECT(catalog_remote_object_get(c, "r", 1, 0, "a", &o), 0);
        EXPECT(o.state, CATALOG_OBJECT_FAILED);
        EXPECT(o.attempts, 2);
        CHECK(strcmp(o.error, "timeout") == 0);
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "a", "pre/a2", 1ull << 40,
                                         CATALOG_OBJECT_DONE, "upload-1", 8 << 20,
                                         "\"0123abcd-2\"", NULL),
               0);
        EXPECT(catalog_remote_object_get(c, "r", 1, 0, "a", &o), 0);
        EXPECT(o.state, CATALOG_OBJECT_DONE);
        EXPECT(o.attempts, 2); /* kept across upserts */
        CHECK(strcmp(o.etag, "\"0123abcd-2\"") == 0);
        CHECK(o.error[0] == '\0'); /* cleared by a NULL error */

        /* A long error is kept in the table and read back truncated. */
        {
                char longerr[600];

                memset(longerr, 'x', sizeof(longerr) - 1);
                longerr[sizeof(longerr) - 1] = '\0';
                EXPECT(catalog_remote_object_set(c, "r", 1, 0, "b", "pre/b", 200,
                                                 CATALOG_OBJECT_FAILED, NULL, 0, NULL, longerr),
                       0);
                EXPECT(catalog_remote_object_get(c, "r", 1, 0, "b", &o), 0);
                EXPECT(strlen(o.error), CATALOG_ERROR_MAX);
                EXPECT(o.attempts, 1);
                EXPECT(catalog_flush(c), 0);
                EXPECT(raw_int_at(path, "SELECT length(error) FROM remote_objects "
                                        "WHERE shard = 'b'"),
                       599);
        }

        /* A key of exactly the bound is stored whole; one byte more is not. */
        memset(big_key, 'k', CATALOG_KEY_MAX);
        big_key[CATALOG_KEY_MAX] = '\0';
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "b", big_key, 200, CATALOG_OBJECT_PENDING,
                                         NULL, 0, NULL, NULL),
               0);
        EXPECT(catalog_remote_object_get(c, "r", 1, 0, "b", &o), 0);
        EXPECT(strlen(o.key), CATALOG_KEY_MAX);
        big_key[CATALOG_KEY_MAX] = 'k';
        big_key[CATALOG_KEY_MAX + 1] = '\0';
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "b", big_key, 200, CATALOG_OBJECT_PENDING,
                                         NULL, 0, NULL, NULL),
               -EINVAL);

        /* Bad arguments and missing rows. */
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "b", "k", 1, 4, NULL, 0, NULL, NULL),
               -EINVAL);
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "b", "", 1, 0, NULL, 0, NULL, NULL),
               -EINVAL);
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "nope", "k", 1, 0, NULL, 0, NULL, NULL),
               -ENOENT);
        EXPECT(catalog_remote_object_set(c, "r", 1, 1, "a", "k", 1, 0, NULL, 0, NULL, NULL),
               -ENOENT);
        EXPECT(catalog_remote_object_set(c, "zz", 1, 0, "a", "k", 1, 0, NULL, 0, NULL, NULL),
               -ENOENT);
        EXPECT(catalog_remote_object_get(c, "r", 1, 0, "nope", &o), -ENOENT);
        EXPECT(catalog_remote_object_get(c, "r", 2, 0, "a", &o), -ENOENT);
}

static void test_remote_parts(struct catalog *c, const char *path) {
        struct catalog_part parts[4];
        size_t n = 99;
        char etag[CATALOG_ETAG_MAX + 2];

        /* Added out of order, read back by number; re-adding replaces. */
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 3, "\"e3\"", 10), 0);
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 1, "\"e1-old\"", 1), 0);
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 10000, "\"e10000\"", 7), 0);
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 1, "\"e1\"", 8 << 20), 0);
        EXPECT(catalog_remote_parts(c, "r", 1, 0, "a", parts, ARRAY_SIZE(parts), &n), 0);
        EXPECT(n, 3);
        EXPECT(parts[0].number, 1);
        CHECK(strcmp(parts[0].etag, "\"e1\"") == 0);
        EXPECT(parts[0].size, 8 << 20);
        EXPECT(parts[1].number, 3);
        CHECK(strcmp(parts[1].etag, "\"e3\"") == 0);
        EXPECT(parts[1].size, 10);
        EXPECT(parts[2].number, 10000);
        EXPECT(parts[2].size, 7);

        /* Too small an array: the first cap parts and the true count. */
        memset(parts, 0, sizeof(parts));
        EXPECT(catalog_remote_parts(c, "r", 1, 0, "a", parts, 2, &n), -ENOBUFS);
        EXPECT(n, 3);
        EXPECT(parts[0].number, 1);
        EXPECT(parts[1].number, 3);
        EXPECT(parts[2].number, 0); /* untouched */

        /* Bounds. */
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 0, "\"e\"", 1), -EINVAL);
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 10001, "\"e\"", 1), -EINVAL);
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 2, "", 1), -EINVAL);
        memset(etag, 'e', sizeof(etag) - 1);
        etag[sizeof(etag) - 1] = '\0';
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 2, etag, 1), -EINVAL);
        etag[CATALOG_ETAG_MAX] = '\0';
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 2, etag, 1), 0);
        EXPECT(catalog_remote_parts(c, "r", 1, 0, "a", parts, ARRAY_SIZE(parts), &n), 0);
        EXPECT(n, 4);
        EXPECT(parts[1].number, 2);
        EXPECT(strlen(parts[1].etag), CATALOG_ETAG_MAX);

        /* A part needs the object's record first. */
        remote_rank(c, "r", 2, CKPT_STATE_COMMITTED);
        EXPECT(catalog_remote_part_add(c, "r", 2, 0, "a", 1, "\"e\"", 1), -ENOENT);
        EXPECT(catalog_remote_parts(c, "r", 2, 0, "a", parts, ARRAY_SIZE(parts), &n), 0);
        EXPECT(n, 0);

        /* A new upload id: the old parts are cleared, only for this shard. */
        EXPECT(catalog_remote_object_set(c, "r", 1, 0, "b", "pre/b", 200,
                                         CATALOG_OBJECT_UPLOADING, "up-b", 5 << 20, NULL, NULL),
               0);
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "b", 1, "\"b1\"", 5), 0);
        EXPECT(catalog_remote_parts_clear(c, "r", 1, 0, "a"), 0);
        EXPECT(catalog_remote_parts(c, "r", 1, 0, "a", parts, ARRAY_SIZE(parts), &n), 0);
        EXPECT(n, 0);
        EXPECT(catalog_remote_parts(c, "r", 1, 0, "b", parts, ARRAY_SIZE(parts), &n), 0);
        EXPECT(n, 1);
        EXPECT(catalog_remote_parts_clear(c, "r", 1, 0, "a"), 0); /* idempotent */
        EXPECT(catalog_remote_part_add(c, "r", 1, 0, "a", 1, "\"new\"", 3), 0);

        /* Cascades: deleting the checkpoint removes its remote objects and
         * their parts, and nothing of other steps. */
        EXPECT(catalog_remote_object_set(c, "r", 2, 0, "a", "pre/r2a", 100, CATALOG_OBJECT_UPLOADING,
                                         "up-2", 5 << 20, NULL, NULL),
               0);
        EXPECT(catalog_remote_part_add(c, "r", 2, 0, "a", 1, "\"x\"", 1), 0);
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_objects WHERE step = 1"), 2);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_parts WHERE step = 1"), 2);
        EXPECT(catalog_ckpt_delete(c, "r", 1), 0);
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_objects WHERE step = 1"), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_parts WHERE step = 1"), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_objects WHERE step = 2"), 1);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM remote_parts WHERE step = 2"), 1);
        EXPECT(catalog_remote_parts(c, "r", 1, 0, "a", parts, ARRAY_SIZE(parts), &n), 0);
        EXPECT(n, 0);
        {
                struct catalog_remote_object o;
                EXPECT(catalog_remote_object_get(c, "r", 1, 0, "a", &o), -ENOENT);
        }
}

static void test_ckpt_remote_and_pins(struct catalog *c, const char *path) {
        char err[8];
        uint8_t rs = 99;

        EXPECT(catalog_ckpt_remote_get(c, "r", 2, &rs, NULL, 0), 0);
        EXPECT(rs, CATALOG_REMOTE_NONE);
        EXPECT(catalog_ckpt_remote_set(c, "r", 2, CATALOG_REMOTE_FAILED, "bucket gone away"), 0);
        EXPECT(catalog_ckpt_remote_get(c, "r", 2, &rs, err, sizeof(err)), 0);
        EXPECT(rs, CATALOG_REMOTE_FAILED);
        CHECK(strcmp(err, "bucket ") == 0); /* truncated to the caller's buffer */
        EXPECT(catalog_ckpt_remote_set(c, "r", 2, CATALOG_REMOTE_MANIFEST, NULL), 0);
        EXPECT(catalog_ckpt_remote_get(c, "r", 2, &rs, err, sizeof(err)), 0);
        EXPECT(rs, CATALOG_REMOTE_MANIFEST);
        CHECK(err[0] == '\0');
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM checkpoints WHERE job = 'r' AND step = 2 "
                                "AND remote_state = 2 AND remote_error IS NULL"),
               1);
        EXPECT(catalog_ckpt_remote_set(c, "r", 2, 5, NULL), -EINVAL);
        EXPECT(catalog_ckpt_remote_set(c, "r", 99, CATALOG_REMOTE_DONE, NULL), -ENOENT);
        EXPECT(catalog_ckpt_remote_get(c, "r", 99, &rs, NULL, 0), -ENOENT);
        EXPECT(catalog_ckpt_remote_get(c, "zz", 2, &rs, NULL, 0), -ENOENT);

        /* Pins. */
        EXPECT(catalog_pinned(c, "r", 2), 0);
        EXPECT(catalog_pin(c, "r", 2, true), 0);
        EXPECT(catalog_pin(c, "r", 2, true), 0); /* idempotent */
        EXPECT(catalog_pinned(c, "r", 2), 1);
        EXPECT(catalog_pin(c, "r", 2, false), 0);
        EXPECT(catalog_pinned(c, "r", 2), 0);
        EXPECT(catalog_pin(c, "r", 2, false), 0);
        EXPECT(catalog_pin(c, "r", 99, true), -ENOENT);
        EXPECT(catalog_pin(c, "r", 99, false), 0);
        EXPECT(catalog_pinned(c, "r", 99), 0);
        /* A pin goes with its checkpoint. */
        remote_rank(c, "r", 3, CKPT_STATE_LOCAL);
        EXPECT(catalog_pin(c, "r", 3, true), 0);
        EXPECT(catalog_pin(c, "r", 2, true), 0);
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM pins"), 2);
        EXPECT(catalog_ckpt_delete(c, "r", 3), 0);
        EXPECT(catalog_pinned(c, "r", 3), 0);
        EXPECT(catalog_pinned(c, "r", 2), 1);
        EXPECT(catalog_flush(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM pins"), 1);
}

struct pending_state {
        struct catalog *c;
        unsigned calls;
        char seen[8][32];
        bool mutate;
        unsigned stop_at;
};

static int pending_cb(void *userdata, const char *job, uint64_t step, uint8_t remote_state) {
        struct pending_state *st = userdata;
        int r;

        if (st->calls < ARRAY_SIZE(st->seen))
                snprintf(st->seen[st->calls], sizeof(st->seen[0]), "%s/%" PRIu64 "=%u", job, step,
                         remote_state);
        st->calls++;
        if (st->mutate && st->calls == 1) {
                /* Move one later row out of the pending set, delete another:
                 * neither may be reported. */
                r = catalog_ckpt_remote_set(st->c, "p", 12, CATALOG_REMOTE_DONE, NULL);
                if (r < 0)
                        return r;
                r = catalog_ckpt_delete(st->c, "p", 13);
                if (r < 0)
                        return r;
        }
        if (st->stop_at && st->calls == st->stop_at)
                return 7;
        return 0;
}

static void test_remote_pending(struct catalog *c) {
        static const char *const want[] = { "o/1=0", "p/11=0", "p/12=1", "p/13=2", "r/2=2" };
        struct pending_state st = { .c = c };

        /* r/2 (committed, MANIFEST) is already there.  p: one step per
         * remote state, plus an uncommitted one; o sorts first. */
        remote_rank(c, "p", 11, CKPT_STATE_COMMITTED);
        remote_rank(c, "p", 12, CKPT_STATE_COMMITTED);
        remote_rank(c, "p", 13, CKPT_STATE_COMMITTED);
        remote_rank(c, "p", 14, CKPT_STATE_COMMITTED);
        remote_rank(c, "p", 15, CKPT_STATE_COMMITTED);
        remote_rank(c, "p", 16, CKPT_STATE_LOCAL);
        remote_rank(c, "o", 1, CKPT_STATE_COMMITTED);
        EXPECT(catalog_ckpt_remote_set(c, "p", 12, CATALOG_REMOTE_FLUSHING, NULL), 0);
        EXPECT(catalog_ckpt_remote_set(c, "p", 13, CATALOG_REMOTE_MANIFEST, NULL), 0);
        EXPECT(catalog_ckpt_remote_set(c, "p", 14, CATALOG_REMOTE_DONE, NULL), 0);
        EXPECT(catalog_ckpt_remote_set(c, "p", 15, CATALOG_REMOTE_FAILED, "x"), 0);

        EXPECT(catalog_remote_pending_foreach(c, pending_cb, &st), 0);
        EXPECT(st.calls, ARRAY_SIZE(want));
        for (size_t i = 0; i < ARRAY_SIZE(want); i++)
                if (strcmp(st.seen[i], want[i]) != 0)
                        FAIL("pending[%zu] = %s, expected %s", i, st.seen[i], want[i]);

        st = (struct pending_state){ .c = c, .stop_at = 2 };
        EXPECT(catalog_remote_pending_foreach(c, pending_cb, &st), 7);
        EXPECT(st.calls, 2);

        st = (struct pending_state){ .c = c, .mutate = true };
        EXPECT(catalog_remote_pending_foreach(c, pending_cb, &st), 0);
        EXPECT(st.calls, 3);
        CHECK(strcmp(st.seen[0], "o/1=0") == 0);
        CHECK(strcmp(st.seen[1], "p/11=0") == 0);
        CHECK(strcmp(st.seen[2], "r/2=2") == 0);
}

struct repl_seen {
        char seen[8][32];
        size_t n;
};

static int repl_cb(void *userdata, const char *job, uint64_t step) {
        struct repl_seen *r = userdata;
        if (r->n < 8)
                snprintf(r->seen[r->n], sizeof(r->seen[0]), "%s/%" PRIu64, job, step);
        r->n++;
        return 0;
}

/* Schema 3: per-target replication state, counts in CKPT_LIST entries,
 * pending steps per node, cascade with the checkpoint. */
static void test_replication(void) {
        struct catalog *c = NULL;
        struct ckpt_ckpt_entry e;
        struct repl_seen r = { 0 };
        uint32_t done, total;
        char path[128];

        side_path(path, sizeof(path), "repl.db");
        EXPECT(catalog_open(&c, path), 0);
        remote_rank(c, "q", 1, CKPT_STATE_COMMITTED);
        remote_rank(c, "q", 2, CKPT_STATE_COMMITTED);
        EXPECT(catalog_repl_set(c, "q", 1, 4, CATALOG_REPL_PENDING, NULL), 0);
        EXPECT(catalog_repl_set(c, "q", 1, 6, CATALOG_REPL_PENDING, NULL), 0);
        EXPECT(catalog_repl_set(c, "q", 2, 4, CATALOG_REPL_PENDING, NULL), 0);
        EXPECT(catalog_repl_set(c, "q", 9, 4, CATALOG_REPL_PENDING, NULL), -ENOENT);
        EXPECT(catalog_repl_set(c, "q", 1, 4, 7, NULL), -EINVAL);

        EXPECT(catalog_repl_counts(c, "q", 1, &done, &total), 0);
        CHECK(done == 0 && total == 2);
        EXPECT(catalog_repl_set(c, "q", 1, 4, CATALOG_REPL_DONE, NULL), 0);
        EXPECT(catalog_repl_set(c, "q", 1, 6, CATALOG_REPL_FAILED, "no space"), 0);
        EXPECT(catalog_repl_counts(c, "q", 1, &done, &total), 0);
        CHECK(done == 1 && total == 2);
        EXPECT(catalog_ckpt_get(c, "q", 1, &e), 0);
        EXPECT(e.replicas, 1);

        /* node 4 still owes step 2; node 6 owes step 1 (failed counts) */
        EXPECT(catalog_repl_pending_foreach(c, 4, repl_cb, &r), 0);
        CHECK(r.n == 1 && strcmp(r.seen[0], "q/2") == 0);
        r = (struct repl_seen){ 0 };
        EXPECT(catalog_repl_pending_foreach(c, 6, repl_cb, &r), 0);
        CHECK(r.n == 1 && strcmp(r.seen[0], "q/1") == 0);

        /* rows go with their checkpoint */
        EXPECT(catalog_ckpt_delete(c, "q", 1), 0);
        EXPECT(catalog_repl_counts(c, "q", 1, &done, &total), 0);
        CHECK(done == 0 && total == 0);
        r = (struct repl_seen){ 0 };
        EXPECT(catalog_repl_pending_foreach(c, 6, repl_cb, &r), 0);
        EXPECT(r.n, 0);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);
        unlink_db(path);
}

struct tiers_seen {
        struct catalog_job_tiers t[4];
        int n;
};

static int tiers_cb(void *userdata, const struct catalog_job_tiers *t) {
        struct tiers_seen *s = userdata;
        if (s->n < 4)
                s->t[s->n] = *t;
        s->n++;
        return 0;
}

/* What the metrics read: per job (by name) the steps and bytes that
 * reached each tier, a committed step counted in local too; the store's
 * backlog less the objects and parts already uploaded; replicated only
 * when every target acknowledged; the rows of the tables. */
static void test_job_tiers(void) {
        struct catalog *c = NULL;
        struct tiers_seen s = { 0 };
        struct catalog_rows rows;
        char path[128];

        side_path(path, sizeof(path), "tiers.db");
        EXPECT(catalog_open(&c, path), 0);
        EXPECT(catalog_job_tiers_foreach(c, tiers_cb, &s), 0);
        EXPECT(s.n, 0);
        remote_rank(c, "b", 1, CKPT_STATE_COMMITTED); /* 300 bytes each */
        remote_rank(c, "b", 2, CKPT_STATE_COMMITTED);
        remote_rank(c, "b", 3, CKPT_STATE_LOCAL);
        remote_rank(c, "a", 1, CKPT_STATE_COMMITTED);
        EXPECT(catalog_ckpt_remote_set(c, "b", 1, CATALOG_REMOTE_DONE, NULL), 0);
        /* step 2 under way: object a (100) uploaded, b (200) has a 50-byte part */
        EXPECT(catalog_remote_object_set(c, "b", 2, 0, "a", "k/a", 100, CATALOG_OBJECT_DONE,
                                         NULL, 0, "e1", NULL), 0);
        EXPECT(catalog_remote_object_set(c, "b", 2, 0, "b", "k/b", 200,
                                         CATALOG_OBJECT_UPLOADING, "up1", 50, NULL, NULL), 0);
        EXPECT(catalog_remote_part_add(c, "b", 2, 0, "b", 1, "p1", 50), 0);
        EXPECT(catalog_ckpt_remote_set(c, "b", 2, CATALOG_REMOTE_FLUSHING, NULL), 0);
        EXPECT(catalog_repl_set(c, "b", 1, 4, CATALOG_REPL_DONE, NULL), 0);
        EXPECT(catalog_repl_set(c, "b", 2, 4, CATALOG_REPL_DONE, NULL), 0);
        EXPECT(catalog_repl_set(c, "b", 2, 5, CATALOG_REPL_PENDING, NULL), 0);

        EXPECT(catalog_job_tiers_foreach(c, tiers_cb, &s), 0);
        EXPECT(s.n, 2);
        const struct catalog_job_tiers *a = &s.t[0], *b = &s.t[1];
        CHECK(strcmp(a->job, "a") == 0 && strcmp(b->job, "b") == 0);
        EXPECT(a->uid, 1000);
        EXPECT(a->steps[CKPT_TIER_COMMITTED], 1);
        EXPECT(a->remote_backlog_bytes, 300);
        EXPECT(b->steps[CKPT_TIER_LOCAL], 3);
        EXPECT(b->bytes[CKPT_TIER_LOCAL], 900);
        EXPECT(b->steps[CKPT_TIER_COMMITTED], 2);
        EXPECT(b->bytes[CKPT_TIER_COMMITTED], 600);
        EXPECT(b->steps[CKPT_TIER_REMOTE], 1);
        EXPECT(b->bytes[CKPT_TIER_REMOTE], 300);
        EXPECT(b->steps[CKPT_TIER_REPLICATED], 1); /* step 2 still owed to node 5 */
        EXPECT(b->bytes[CKPT_TIER_REPLICATED], 300);
        EXPECT(b->steps[CKPT_TIER_STAGED], 0);
        EXPECT(b->remote_backlog_bytes, 300 - 100 - 50);

        EXPECT(catalog_row_counts(c, &rows), 0);
        CHECK(rows.jobs == 2 && rows.checkpoints == 4 && rows.ranks == 4 && rows.shards == 8 &&
              rows.remote_objects == 2 && rows.replication == 3);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);
        unlink_db(path);
}

/* Schema 4: commit requests (ckpt_commit_async) — recorded only for a
 * known checkpoint, idempotent, kept across a reopen, gone with their
 * checkpoint row. */
static void test_commit_requests(void) {
        struct catalog *c = NULL;
        struct repl_seen r = { 0 };
        char path[128];

        side_path(path, sizeof(path), "asks.db");
        EXPECT(catalog_open(&c, path), 0);
        remote_rank(c, "a", 1, CKPT_STATE_LOCAL);
        remote_rank(c, "a", 2, CKPT_STATE_LOCAL);
        remote_rank(c, "b", 5, CKPT_STATE_SAVING);
        EXPECT(catalog_commit_request_set(c, "a", 2, true), 0);
        EXPECT(catalog_commit_request_set(c, "a", 2, true), 0); /* idempotent */
        EXPECT(catalog_commit_request_set(c, "b", 5, true), 0);
        EXPECT(catalog_commit_request_set(c, "a", 1, true), 0);
        EXPECT(catalog_commit_request_set(c, "a", 9, true), -ENOENT);
        EXPECT(catalog_commit_request_set(c, "a", (uint64_t)CKPT_STEP_MAX + 1, true), -ENOENT);
        EXPECT(catalog_commit_request_set(c, "a", 1, false), 0);
        EXPECT(catalog_commit_request_set(c, "a", 1, false), 0);
        EXPECT(catalog_commit_request_foreach(c, repl_cb, &r), 0);
        CHECK(r.n == 2 && strcmp(r.seen[0], "a/2") == 0 && strcmp(r.seen[1], "b/5") == 0);
        /* committed and checkpointed: another connection reads it from the
         * database file itself */
        EXPECT(catalog_flush_durable(c), 0);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM commit_requests"), 2);
        EXPECT(catalog_flush_durable(c), 0); /* nothing open: fine too */

        c = catalog_free(c);
        EXPECT(catalog_open(&c, path), 0);
        r = (struct repl_seen){ 0 };
        EXPECT(catalog_commit_request_foreach(c, repl_cb, &r), 0);
        EXPECT(r.n, 2);
        EXPECT(catalog_ckpt_delete(c, "a", 2), 0);
        r = (struct repl_seen){ 0 };
        EXPECT(catalog_commit_request_foreach(c, repl_cb, &r), 0);
        CHECK(r.n == 1 && strcmp(r.seen[0], "b/5") == 0);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);
        unlink_db(path);
}

/* Schema 7: a copy's fault row moves bad -> unrepairable -> repaired, and
 * neither needs (nor goes with) a checkpoint row. */
static void test_copy_faults(void) {
        struct catalog *c = NULL;
        struct catalog_copy_fault f;
        uint32_t bad, repaired, unrepairable;
        char path[128];

        side_path(path, sizeof(path), "faults.db");
        EXPECT(catalog_open(&c, path), 0);
        EXPECT(catalog_copy_fault_get(c, "j", 3, 1, CATALOG_COPY_LOCAL, &f), -ENOENT);
        EXPECT(catalog_copy_unrepairable(c, "j", 3, 1), 0);
        EXPECT(catalog_step_unrepairable(c, "j", 3), 0);
        EXPECT(catalog_copy_fault_set(c, "j", 3, 1, CATALOG_COPY_LOCAL, CATALOG_FAULT_BAD,
                                      "shard w block 2 failed its CRC32C", NULL), 0);
        EXPECT(catalog_copy_fault_set(c, "j", 3, 1, 7, CATALOG_FAULT_BAD, "MANIFEST does not parse",
                                      NULL), 0);
        EXPECT(catalog_copy_fault_get(c, "j", 3, 1, CATALOG_COPY_LOCAL, &f), 0);
        CHECK(f.state == CATALOG_FAULT_BAD && f.detected_at > 0 && f.repaired_at == 0 &&
              strcmp(f.detail, "shard w block 2 failed its CRC32C") == 0 && f.source[0] == 0);
        EXPECT(catalog_copy_fault_set(c, "j", 3, 1, CATALOG_COPY_LOCAL,
                                      CATALOG_FAULT_UNREPAIRABLE, "shard w block 2 failed its "
                                      "CRC32C", "the neighbours: none up"), 0);
        EXPECT(catalog_copy_unrepairable(c, "j", 3, 1), 1);
        EXPECT(catalog_copy_unrepairable(c, "j", 3, 0), 0);
        /* any rank of the step (the job-wide LATEST), not another step or job */
        EXPECT(catalog_step_unrepairable(c, "j", 3), 1);
        EXPECT(catalog_step_unrepairable(c, "j", 4), 0);
        EXPECT(catalog_step_unrepairable(c, "k", 3), 0);
        EXPECT(catalog_step_unrepairable(c, "j", (uint64_t)CKPT_STEP_MAX + 1), 0);
        EXPECT(catalog_copy_fault_counts(c, &bad, &repaired, &unrepairable), 0);
        CHECK(bad == 1 && repaired == 0 && unrepairable == 1);
        EXPECT(catalog_copy_fault_set(c, "j", 3, 1, CATALOG_COPY_LOCAL, CATALOG_FAULT_REPAIRED,
                                      "", "a neighbour"), 0);
        EXPECT(catalog_copy_fault_get(c, "j", 3, 1, CATALOG_COPY_LOCAL, &f), 0);
        /* the repair keeps what was wrong and says where the good copy came from */
        CHECK(f.state == CATALOG_FAULT_REPAIRED && f.repaired_at > 0 &&
              strcmp(f.detail, "shard w block 2 failed its CRC32C") == 0 &&
              strcmp(f.source, "a neighbour") == 0);
        EXPECT(catalog_copy_unrepairable(c, "j", 3, 1), 0);
        EXPECT(catalog_step_unrepairable(c, "j", 3), 0);
        /* a replica area's copy counts for the step like the local tier's */
        EXPECT(catalog_copy_fault_set(c, "j", 5, 0, 7, CATALOG_FAULT_UNREPAIRABLE,
                                      "shard w block 0 failed its CRC32C", NULL), 0);
        EXPECT(catalog_step_unrepairable(c, "j", 5), 1);
        EXPECT(catalog_copy_fault_set(c, "j", 5, 0, 7, CATALOG_FAULT_REPAIRED, "", "node 7"), 0);
        EXPECT(catalog_step_unrepairable(c, "j", 5), 0);
        EXPECT(catalog_copy_fault_set(c, "j", (uint64_t)CKPT_STEP_MAX + 1, 1, 0,
                                      CATALOG_FAULT_BAD, "", NULL), -EINVAL);
        EXPECT(catalog_copy_fault_set(c, "j", 3, 1, 0, 3, "", NULL), -EINVAL);
        c = catalog_free(c);
        EXPECT(catalog_open(&c, path), 0);
        EXPECT(catalog_copy_fault_counts(c, &bad, &repaired, &unrepairable), 0);
        CHECK(bad == 1 && repaired == 2 && unrepairable == 0);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);
        unlink_db(path);
}

/* Schema 6: the scrub's one row, and the walk over committed ranks in
 * (job, step, rank) order that skips uncommitted steps. */
static void test_scrub_progress(void) {
        struct catalog *c = NULL;
        struct catalog_scrub_progress p = { 0 }, q;
        char path[128], job[CKPT_NAME_MAX + 1];
        uint64_t step, bytes;
        uint32_t rank;

        side_path(path, sizeof(path), "scrub.db");
        EXPECT(catalog_open(&c, path), 0);
        EXPECT(catalog_committed_rank_next(c, "", 0, 0, job, &step, &rank), -ENOENT);
        EXPECT(catalog_committed_bytes(c, &bytes), 0);
        EXPECT(bytes, 0);
        remote_rank(c, "b", 3, CKPT_STATE_COMMITTED);
        remote_rank(c, "a", 2, CKPT_STATE_COMMITTED);
        remote_rank(c, "a", 5, CKPT_STATE_LOCAL); /* not committed: not walked */
        remote_rank(c, "a", 9, CKPT_STATE_COMMITTED);
        EXPECT(catalog_committed_bytes(c, &bytes), 0);
        EXPECT(bytes, 3 * 300);
        EXPECT(catalog_committed_rank_next(c, "", 0, 0, job, &step, &rank), 0);
        CHECK(strcmp(job, "a") == 0 && step == 2 && rank == 0);
        EXPECT(catalog_committed_rank_next(c, "a", 2, 0, job, &step, &rank), 0); /* at: itself */
        CHECK(strcmp(job, "a") == 0 && step == 2 && rank == 0);
        EXPECT(catalog_committed_rank_next(c, "a", 2, 1, job, &step, &rank), 0);
        CHECK(strcmp(job, "a") == 0 && step == 9 && rank == 0);
        EXPECT(catalog_committed_rank_next(c, "a", 10, 0, job, &step, &rank), 0);
        CHECK(strcmp(job, "b") == 0 && step == 3 && rank == 0);
        EXPECT(catalog_committed_rank_next(c, "b", 3, 1, job, &step, &rank), -ENOENT);

        EXPECT(catalog_scrub_progress_get(c, &q), -ENOENT);
        p.pass = 4;
        p.pass_started_at = 1700000000;
        p.area = 2;
        snprintf(p.job, sizeof(p.job), "a");
        p.step = 9;
        p.rank = 1;
        snprintf(p.shard, sizeof(p.shard), "w");
        p.offset = 3u << 20;
        p.bytes_verified = 123456789;
        p.copies_verified = 7;
        p.copies_bad = 2;
        snprintf(p.last_finding, sizeof(p.last_finding), "job a step 9 rank 1: shard w: ...");
        EXPECT(catalog_scrub_progress_set(c, &p), 0);
        p.copies_bad = 3; /* an upsert: still one row */
        EXPECT(catalog_scrub_progress_set(c, &p), 0);
        c = catalog_free(c);
        EXPECT(raw_int_at(path, "SELECT COUNT(*) FROM scrub_progress"), 1);
        EXPECT(catalog_open(&c, path), 0);
        memset(&q, 0xff, sizeof(q));
        EXPECT(catalog_scrub_progress_get(c, &q), 0);
        CHECK(q.pass == 4 && q.pass_started_at == 1700000000 && q.pass_finished_at == 0 &&
              q.area == 2 && strcmp(q.job, "a") == 0 && q.step == 9 && q.rank == 1 &&
              strcmp(q.shard, "w") == 0 && q.offset == 3u << 20 &&
              q.bytes_verified == 123456789 && q.copies_verified == 7 && q.copies_bad == 3 &&
              strcmp(q.last_finding, p.last_finding) == 0);
        p.step = (uint64_t)CKPT_STEP_MAX + 1;
        EXPECT(catalog_scrub_progress_set(c, &p), -EINVAL);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);
        unlink_db(path);
}

static void test_remote(void) {
        struct catalog *c = NULL;
        char path[128];

        side_path(path, sizeof(path), "remote.db");
        EXPECT(catalog_open(&c, path), 0);
        test_remote_objects(c, path);
        test_remote_parts(c, path);
        test_ckpt_remote_and_pins(c, path);
        test_remote_pending(c);
        EXPECT(catalog_check(c), 0);

        /* Everything survives a reopen. */
        c = catalog_free(c);
        EXPECT(catalog_open(&c, path), 0);
        EXPECT(catalog_pinned(c, "r", 2), 1);
        {
                struct catalog_remote_object o;
                uint8_t rs;

                EXPECT(catalog_remote_object_get(c, "r", 2, 0, "a", &o), 0);
                CHECK(strcmp(o.upload_id, "up-2") == 0);
                EXPECT(catalog_ckpt_remote_get(c, "p", 12, &rs, NULL, 0), 0);
                EXPECT(rs, CATALOG_REMOTE_DONE);
        }
        c = catalog_free(c);
        unlink_db(path);
}

int main(void) {
        struct catalog *c = NULL;
        int r;

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        snprintf(db_path, sizeof(db_path), "%s/catalog.db", dir);

        r = catalog_open(&c, db_path);
        if (r < 0)
                FAIL("catalog_open: %s", strerror(-r));
        test_schema();
        /* Opening an existing, current database migrates nothing and keeps
         * the (empty) contents. */
        c = reopen(c);
        EXPECT(raw_int("PRAGMA user_version"), CATALOG_SCHEMA_VERSION);

        test_jobs(c);
        test_checkpoints(c);
        test_ckpt_paging(c);
        test_ranks(c);
        test_latest(c);
        test_job_list(c);
        test_delete(c);
        test_foreach(c);
        test_durability(&c);
        EXPECT(catalog_check(c), 0);
        c = catalog_free(c);
        CHECK(c == NULL);
        CHECK(catalog_free(NULL) == NULL);

        test_refuse();
        test_migrate_v1();
        test_refuse_newer();
        test_remote();
        test_replication();
        test_job_tiers();
        test_commit_requests();
        test_scrub_progress();
        test_copy_faults();

        cleanup_dir();
        printf("test-catalog: ok\n");
        return 0;
}
