/* SPDX-License-Identifier: MIT */
/*
 * test-store — a rank's temporary directory on a real filesystem: two
 * attempts at the same rank (a peer transfer sent again while the first
 * one still finishes) each write their own directory; aborting one leaves
 * the other alone, and the attempt that finishes last is the rank kept.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/manifest.h"
#include "local/store.h"

#define STEP_DIR "jobs/j/00000000000000000007"

static int finished_error = 1;

static void on_finished(void *userdata, int error) {
        (void)userdata;
        finished_error = error;
}

/* Entries of dir that start with ".rank-0." (attempts in progress). */
static int tmp_dirs(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *de;
        int n = 0;
        if (!d)
                return -1;
        while ((de = readdir(d)))
                n += !strncmp(de->d_name, ".rank-0.", 8);
        closedir(d);
        return n;
}

static bool has_file(const char *dir, const char *sub, const char *name) {
        char path[700];
        snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
        return access(path, F_OK) == 0;
}

int main(void) {
        char dir[] = "/tmp/ckpt-test-store-XXXXXX";
        struct loop *loop;
        struct worker_pool *workers;
        struct store *store;
        struct rank_writer *first, *second, *third;
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

        /* two attempts side by side, each in its own directory */
        CHECK(store_rank_begin(store, "j", 7, 0, &first) == 0, "first begin");
        CHECK(store_shard_create(store, first, "a", 4096, &fd) == 0, "first shard");
        CHECK(store_rank_begin(store, "j", 7, 0, &second) == 0, "second begin");
        CHECK(store_shard_create(store, second, "b", 4096, &fd) == 0, "second shard");
        CHECK(tmp_dirs(step) == 2, "two attempts, %d directories", tmp_dirs(step));

        /* the first one ends late: the second's directory stays */
        store_rank_abort(store, first);
        CHECK(tmp_dirs(step) == 1, "after aborting the first: %d directories", tmp_dirs(step));

        /* the second finishes: rank-0 is its files, nothing else is left */
        struct manifest *m = NULL;
        CHECK(manifest_new(&m, "j", 7, 0, 1, 0) == 0, "manifest_new");
        if (m)
                store_rank_finish(store, second, m, on_finished, NULL);
        else
                store_rank_abort(store, second);
        /* (the finish runs on a worker; freeing the pool runs it to the end) */
        /* a third attempt, aborted at once: nothing of it stays */
        CHECK(store_rank_begin(store, "j", 7, 0, &third) == 0, "third begin");
        store_rank_abort(store, third);

        worker_pool_free(workers);
        if (m) {
                CHECK(finished_error == 0, "finish: %s", strerror(-finished_error));
                CHECK(has_file(step, "rank-0", "b") && !has_file(step, "rank-0", "a"),
                      "rank-0 is not the second attempt's");
        }
        CHECK(tmp_dirs(step) == 0, "%d attempt directories left", tmp_dirs(step));
        manifest_free(m);
        store_free(store);
        loop_free(loop);
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0, "cleanup of %s", dir);
        return check_exit_code();
}
