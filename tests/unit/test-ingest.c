/* SPDX-License-Identifier: MIT */
/*
 * test-ingest — a rank landing through step/ingest on a real filesystem,
 * real store, catalog, worker pool and pool memory:
 *
 *   - a chunk whose bytes do not match the manifest is refused with the
 *     bad block named and never reaches the file; sent again intact, it
 *     is written;
 *   - the finish renames the rank into place and only then adds its rows
 *     (the rank is in the catalog once the callback runs);
 *   - the commit record, then the step committed in the catalog at the
 *     record's committed_at;
 *   - a chunk of a rank that failed meanwhile is skipped, and an aborted
 *     rank leaves no directory behind.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "crc32c.h"
#include "catalog/catalog.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/manifest.h"
#include "local/store.h"
#include "pool/pool.h"
#include "step/ingest.h"
#include "util/cleanup.h"

#define SLOT (4u << 20)
#define SHARD_SIZE (MANIFEST_BLOCK_SIZE + 100) /* two blocks, the last one short */
#define STEP_DIR "jobs/j/00000000000000000007"

struct test {
        struct loop *loop;
        struct pool *pool;
        struct store *store;
        struct catalog *catalog;
        struct worker_pool *workers;
        struct manifest *m;
        uint8_t *data;
        struct ingest in;
        struct ingest_commit commit;
        struct commit_record record;
        bool rank_failed;
        int phase;
        /* what the callbacks saw */
        int ends[3], errors[3];
        int64_t bad_block;
        int finish_error, commit_error;
};

static struct test t;

struct tchunk {
        struct ingest_chunk ic;
        int index;
};

static bool test_failed(const struct ingest *in) {
        (void)in;
        return t.rank_failed;
}

static void next(void);

static void chunk_done(struct ingest_chunk *ic, int error) {
        struct tchunk *ch = container_of(ic, struct tchunk, ic);

        t.ends[ch->index] = (int)ic->end;
        t.errors[ch->index] = error;
        if (ic->end == INGEST_REJECTED)
                t.bad_block = ic->bad_block;
        pool_release(t.pool, &ic->ext);
        free(ch);
        next();
}

static const struct ingest_ops ops = {
        .failed = test_failed,
        .chunk_done = chunk_done,
};

/* Chunk `index` (0: block 0, 1: the short block 1), its bytes copied
 * into fresh pool memory, one byte flipped when `corrupt`. */
static void submit(int index, bool corrupt) {
        struct tchunk *ch = calloc(1, sizeof(*ch));
        uint64_t offset = index == 0 ? 0 : MANIFEST_BLOCK_SIZE;
        uint64_t length = index == 0 ? MANIFEST_BLOCK_SIZE : SHARD_SIZE - MANIFEST_BLOCK_SIZE;

        CHECK(ch != NULL, "calloc");
        ch->index = index;
        ch->ic.shard = 0;
        ch->ic.offset = offset;
        ch->ic.length = length;
        CHECK(pool_try_acquire_whole(t.pool, 0, pool_units_for(t.pool, length), &ch->ic.ext) == 1,
              "pool memory");
        uint8_t *p = pool_extent_addr(&ch->ic.ext);
        memcpy(p, t.data + offset, length);
        if (corrupt)
                p[length / 2] ^= 0xff;
        ingest_chunk_submit(&t.in, &ch->ic);
}

static void committed(void *userdata, int error) {
        CHECK(userdata == &t, "commit userdata");
        t.commit_error = error;
        next();
}

static void finished(void *userdata, int error) {
        CHECK(userdata == &t, "finish userdata");
        t.finish_error = error;
        next();
}

/* The test as a sequence of steps, each started by the callback of the
 * one before. */
static void next(void) {
        switch (t.phase++) {
        case 0: /* block 1 arrives torn */
                submit(1, true);
                break;
        case 1:
                CHECK(t.ends[1] == INGEST_REJECTED && t.errors[1] == -EBADMSG,
                      "torn chunk: end %d error %d", t.ends[1], t.errors[1]);
                CHECK(t.bad_block == 1, "bad block %lld, not 1", (long long)t.bad_block);
                submit(1, false);
                break;
        case 2:
                CHECK(t.ends[1] == INGEST_WRITE && t.errors[1] == 0, "block 1: end %d error %d",
                      t.ends[1], t.errors[1]);
                submit(0, false);
                break;
        case 3:
                CHECK(t.ends[0] == INGEST_WRITE && t.errors[0] == 0, "block 0: end %d error %d",
                      t.ends[0], t.errors[0]);
                CHECK(catalog_rank_exists(t.catalog, "j", 7, 0) != 1, "rank row before the finish");
                ingest_finish(&t.in, t.m, finished, &t);
                CHECK(!ingest_open(&t.in), "open after ingest_finish");
                break;
        case 4: {
                CHECK(t.finish_error == 0, "finish: %s", strerror(-t.finish_error));
                CHECK(catalog_rank_exists(t.catalog, "j", 7, 0) == 1, "no rank row after the finish");
                snprintf(t.record.job, sizeof(t.record.job), "j");
                t.record.step = 7;
                t.record.world_size = 1;
                t.record.nranks = 1;
                t.record.ranks = calloc(1, sizeof(uint32_t));
                t.record.committed_at = 1234567;
                ingest_commit_step(&t.commit, t.store, t.catalog, &t.record, committed, &t);
                break;
        }
        case 5: {
                CHECK(t.commit_error == 0, "commit: %s", strerror(-t.commit_error));
                CHECK(store_step_committed(t.store, "j", 7), "no COMMITTED record");
                struct ckpt_ckpt_entry e;
                CHECK(catalog_ckpt_get(t.catalog, "j", 7, &e) == 0, "no checkpoint row");
                CHECK(e.state == CKPT_STATE_COMMITTED && e.committed_at == 1234567,
                      "state %u committed_at %lld", e.state, (long long)e.committed_at);
                /* rank 0 of step 8: fails while its chunk is checked */
                CHECK(ingest_begin(&t.in, t.store, t.catalog, t.workers, &ops, "j", 8, 0, t.m) == 0,
                      "second begin");
                t.rank_failed = true;
                submit(0, false);
                break;
        }
        case 6:
                CHECK(t.ends[0] == INGEST_SKIPPED, "chunk of a failed rank: end %d", t.ends[0]);
                ingest_abort(&t.in);
                CHECK(!ingest_open(&t.in), "open after abort");
                ingest_abort(&t.in); /* twice: nothing happens */
                loop_stop(t.loop);
                break;
        }
}

static void start(struct loop_timer *timer) {
        (void)timer;
        next();
}

static int tmp_dirs(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int n = 0;
        if (!d)
                return 0;
        while ((de = readdir(d)))
                n += !strncmp(de->d_name, ".rank-", 6);
        closedir(d);
        return n;
}

int main(void) {
        char dir[] = "/tmp/ckpt-test-ingest-XXXXXX";
        char path[700];
        struct loop_timer timer = { 0 };

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        int r = loop_new(&t.loop, 64);
        if (r < 0) {
                fprintf(stderr, "io_uring unavailable (%s): skipping\n", strerror(-r));
                rmdir(dir);
                return 77;
        }
        CHECK(worker_pool_new(&t.workers, t.loop, 1) == 0, "worker pool");
        CHECK(pool_new(&t.pool, t.loop, 2 * SLOT, SLOT, false, false) == 0, "pool_new");
        const struct store_options so = { .io_size = 1 << 20, .queue_depth = 4, .direct_io = false };
        CHECK(store_open(&t.store, dir, t.loop, t.workers, t.pool, &so) == 0, "store_open %s", dir);
        snprintf(path, sizeof(path), "%s/catalog.db", dir);
        CHECK(catalog_open(&t.catalog, path) == 0, "catalog_open %s", path);

        /* the shard's bytes and its manifest */
        t.data = malloc(SHARD_SIZE);
        CHECK(t.data != NULL, "malloc");
        for (uint32_t i = 0; i < SHARD_SIZE; i++)
                t.data[i] = (uint8_t)(i * 7 + i / 4096);
        uint32_t blocks[2] = { crc32c(0, t.data, MANIFEST_BLOCK_SIZE),
                               crc32c(0, t.data + MANIFEST_BLOCK_SIZE,
                                      SHARD_SIZE - MANIFEST_BLOCK_SIZE) };
        uint32_t whole = crc32c(0, t.data, SHARD_SIZE);
        CHECK(manifest_new(&t.m, "j", 7, 0, 1, 0) == 0, "manifest_new");
        CHECK(manifest_add_unique_shard(t.m, "a", SHARD_SIZE, whole, blocks) == 0, "shard");

        CHECK(ingest_begin(&t.in, t.store, t.catalog, t.workers, &ops, "j", 7, 0, t.m) == 0,
              "ingest_begin");
        CHECK(ingest_open(&t.in), "not open after begin");
        loop_timer_start(t.loop, &timer, 0, start);
        CHECK(loop_run(t.loop) == 0, "loop_run");
        CHECK(t.phase == 7, "stopped at phase %d", t.phase);

        /* the shard on disk is the intact bytes */
        snprintf(path, sizeof(path), "%s/" STEP_DIR "/rank-0/a", dir);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL, "open %s", path);
        if (f) {
                uint8_t *back = malloc(SHARD_SIZE + 1);
                size_t n = back ? fread(back, 1, SHARD_SIZE + 1, f) : 0;
                CHECK(n == SHARD_SIZE && !memcmp(back, t.data, SHARD_SIZE),
                      "shard on disk: %zu bytes, or not the bytes sent", n);
                free(back);
                fclose(f);
        }

        worker_pool_free(t.workers); /* runs the abort's removal to the end */
        snprintf(path, sizeof(path), "%s/jobs/j/00000000000000000008", dir);
        CHECK(tmp_dirs(path) == 0, "%d attempt directories left", tmp_dirs(path));
        commit_record_clear(&t.record);
        manifest_free(t.m);
        free(t.data);
        catalog_free(t.catalog);
        store_free(t.store);
        pool_free(t.pool);
        loop_free(t.loop);
        char cmd[800];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cleanup of %s", dir);
        return check_exit_code();
}
