/* SPDX-License-Identifier: MIT */
/*
 * Unit test for the catalog: schema creation and migration bookkeeping,
 * every query's answer against rows we put in, paging totals and order at
 * the page boundaries the wire protocol uses, cascading deletes, iteration
 * that mutates the catalog from its callback, the batch transaction (not
 * visible to another connection until flushed, durable once flushed or
 * freed), and refusal of a database from a newer build.  A second sqlite
 * connection looks at the file directly, so the test checks what is on
 * disk, not just what the module says about itself.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static sqlite3 *raw_open(void) {
        sqlite3 *db = NULL;

        if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK)
                FAIL("raw open %s: %s", db_path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_busy_timeout(db, 5000);
        return db;
}

static long long raw_int(const char *sql) {
        sqlite3 *db = raw_open();
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
        EXPECT(raw_int("PRAGMA user_version"), 1);
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
        EXPECT(raw_int("PRAGMA user_version"), 1);

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

static void cleanup_dir(void) {
        static const char *const suffixes[] = { "", "-wal", "-shm" };
        char path[128];

        for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
                snprintf(path, sizeof(path), "%s%s", db_path, suffixes[i]);
                unlink(path);
        }
        rmdir(dir);
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
        EXPECT(raw_int("PRAGMA user_version"), 1);

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

        cleanup_dir();
        printf("test-catalog: ok\n");
        return 0;
}
