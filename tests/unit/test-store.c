/* SPDX-License-Identifier: MIT */
/*
 * test-store — a rank's temporary directory on a real filesystem: a second
 * attempt at the same rank moves the first one's directory to the trash,
 * and the first attempt's late abort (its chunks still finishing when the
 * second began, as after a broken peer link) leaves the second's alone.
 * Moving to the trash is a rename, done at once; the workers empty it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/store.h"
#include "util/fs.h"

#define STEP_DIR "jobs/j/00000000000000000007"

static bool exists(const char *dir, const char *name) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        return access(path, F_OK) == 0;
}

int main(void) {
        char dir[] = "/tmp/ckpt-test-store-XXXXXX";
        struct loop *loop;
        struct worker_pool *workers;
        struct store *store;
        struct rank_writer *first, *second;
        int fd;

        int r = loop_new(&loop, 64);
        if (r < 0) {
                fprintf(stderr, "io_uring unavailable (%s): skipping\n", strerror(-r));
                return 77;
        }
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        CHECK(worker_pool_new(&workers, loop, 1) == 0, "worker pool");
        const struct store_options so = { .io_size = 1 << 20, .queue_depth = 4, .direct_io = false };
        CHECK(store_open(&store, dir, loop, workers, NULL, &so) == 0, "store_open %s", dir);

        char step[600];
        snprintf(step, sizeof(step), "%s/" STEP_DIR, dir);

        CHECK(store_rank_begin(store, "j", 7, 0, &first) == 0, "first begin");
        CHECK(store_shard_create(store, first, "a", 4096, &fd) == 0, "first shard");
        CHECK(exists(step, ".rank-0.tmp/a"), "the first attempt's shard is in place");

        /* the second attempt takes the name; the first's files go to trash */
        CHECK(store_rank_begin(store, "j", 7, 0, &second) == 0, "second begin");
        CHECK(exists(step, ".rank-0.tmp") && !exists(step, ".rank-0.tmp/a"),
              "the second attempt starts from an empty directory");
        CHECK(store_shard_create(store, second, "b", 4096, &fd) == 0, "second shard");

        /* the first attempt ends late: the second's directory stays */
        store_rank_abort(store, first);
        CHECK(exists(step, ".rank-0.tmp/b"),
              "aborting the first attempt removed the second attempt's directory");

        /* the second one's own abort does remove it */
        store_rank_abort(store, second);
        CHECK(!exists(step, ".rank-0.tmp"), "the aborted attempt's directory is still there");

        /* the trash is emptied on the workers: they finish before the store closes */
        worker_pool_free(workers);
        store_free(store);
        loop_free(loop);
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cleanup of %s", dir);
        return check_exit_code();
}
