/* SPDX-License-Identifier: MIT */
/*
 * ckpt-example-trainer — what a training job does with libckpt, end to end.
 *
 * It forks RANKS "trainer ranks".  For each of STEPS steps every rank fills
 * its tensors (deterministically, so the restore can be checked), hands
 * them to ckptd (the only time it waits), and goes on; the parent plays the
 * job's barrier and commits the step.  Then it restores the latest
 * committed step as a restarted job would — list each rank's shards, read
 * them back — and checks every byte.
 *
 *   ckpt-example-trainer [--socket PATH] [--job NAME] [--ranks N] [--steps N] [--mib N]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static const char *socket_path;
static const char *job = "example-job";
static unsigned ranks = 4, steps = 3, mib = 64;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Tensor contents: a function of (step, rank, tensor, index). */
static void fill(uint64_t *p, size_t words, uint64_t step, unsigned rank, unsigned tensor) {
        uint64_t x = step * 1000003u + rank * 7919u + tensor * 104729u + 1;
        for (size_t i = 0; i < words; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p[i] = x;
        }
}

struct tensor {
        const char *name;
        size_t bytes;
};

static void layout(struct tensor t[3]) {
        t[0] = (struct tensor){ "model.weights", (size_t)mib << 20 };
        t[1] = (struct tensor){ "optimizer.state", (size_t)mib << 19 };
        t[2] = (struct tensor){ "rng.state", 4104 }; /* not a multiple of 4 KiB */
}

static int rank_save(unsigned rank, uint64_t step) {
        struct ckpt_conn *c;
        struct ckpt_save *s;
        struct tensor t[3];
        int r;

        layout(t);
        r = ckpt_connect(socket_path, &c);
        if (r < 0) {
                fprintf(stderr, "rank %u: cannot connect to ckptd: %s\n", rank, ckpt_strerror(r));
                return 1;
        }
        void *bufs[3];
        for (int i = 0; i < 3; i++) {
                bufs[i] = malloc(t[i].bytes);
                if (!bufs[i])
                        return 1;
                fill(bufs[i], t[i].bytes / 8, step, rank, (unsigned)i);
        }
        double t0 = now();
        r = ckpt_save_begin(c, job, step, rank, ranks, &s);
        for (int i = 0; r == 0 && i < 3; i++)
                r = ckpt_save_write(s, t[i].name, bufs[i], t[i].bytes);
        if (r == 0)
                r = ckpt_save_finish(s);
        else
                ckpt_save_abort(s);
        double blocked = now() - t0;
        if (r < 0) {
                fprintf(stderr, "rank %u: save of step %" PRIu64 " failed: %s (%s)\n", rank, step,
                        ckpt_strerror(r), ckpt_last_error(c));
                return 1;
        }
        if (rank == 0)
                printf("  step %" PRIu64 ": rank 0 handed %.1f MiB to ckptd in %.1f ms\n", step,
                       (double)(t[0].bytes + t[1].bytes + t[2].bytes) / 1048576, blocked * 1e3);
        for (int i = 0; i < 3; i++)
                free(bufs[i]);
        ckpt_disconnect(c);
        return 0;
}

static int restore_and_check(void) {
        struct ckpt_conn *c;
        uint64_t step;
        uint32_t world;
        struct tensor t[3];
        int r;

        layout(t);
        r = ckpt_connect(socket_path, &c);
        if (r < 0)
                return 1;
        r = ckpt_latest(c, job, &step, &world);
        if (r < 0) {
                fprintf(stderr, "no committed checkpoint: %s\n", ckpt_last_error(c));
                return 1;
        }
        printf("restoring job '%s' step %" PRIu64 " (%u ranks)\n", job, step, world);
        uint64_t bytes = 0;
        double t0 = now();
        for (uint32_t rank = 0; rank < world; rank++) {
                struct ckpt_shard_info *list;
                size_t n;
                r = ckpt_shard_list(c, job, step, rank, &list, &n);
                if (r < 0 || n != 3) {
                        fprintf(stderr, "rank %u: shard list failed: %s\n", rank, ckpt_last_error(c));
                        return 1;
                }
                for (int i = 0; i < 3; i++) {
                        void *got = malloc(t[i].bytes), *want = malloc(t[i].bytes);
                        int64_t n_read = ckpt_read(c, job, step, rank, t[i].name, 0, got, t[i].bytes);
                        if (n_read != (int64_t)t[i].bytes) {
                                fprintf(stderr, "rank %u %s: read failed: %s\n", rank, t[i].name,
                                        n_read < 0 ? ckpt_last_error(c) : "short read");
                                return 1;
                        }
                        fill(want, t[i].bytes / 8, step, rank, (unsigned)i);
                        if (memcmp(got, want, t[i].bytes / 8 * 8)) {
                                fprintf(stderr, "rank %u %s: restored bytes differ!\n", rank,
                                        t[i].name);
                                return 1;
                        }
                        bytes += t[i].bytes;
                        free(got);
                        free(want);
                }
                ckpt_shard_list_free(list);
        }
        double dt = now() - t0;
        printf("restored %.1f MiB from %u ranks in %.2f s (%.2f GB/s): every byte matches\n",
               (double)bytes / 1048576, world, dt, (double)bytes / dt / 1e9);
        ckpt_disconnect(c);
        return 0;
}

int main(int argc, char **argv) {
        static const struct option longopts[] = {
                { "socket", required_argument, NULL, 's' }, { "job", required_argument, NULL, 'j' },
                { "ranks", required_argument, NULL, 'r' },  { "steps", required_argument, NULL, 'n' },
                { "mib", required_argument, NULL, 'm' },    {}
        };
        int ch;
        while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
                switch (ch) {
                case 's': socket_path = optarg; break;
                case 'j': job = optarg; break;
                case 'r': ranks = (unsigned)atoi(optarg); break;
                case 'n': steps = (unsigned)atoi(optarg); break;
                case 'm': mib = (unsigned)atoi(optarg); break;
                default:
                        fprintf(stderr, "usage: %s [--socket PATH] [--job NAME] [--ranks N] [--steps N] "
                                        "[--mib N]\n", argv[0]);
                        return 2;
                }
        }
        if (ranks == 0 || steps == 0 || mib == 0)
                return 2;

        struct ckpt_conn *c;
        int r = ckpt_connect(socket_path, &c);
        if (r < 0) {
                fprintf(stderr, "cannot reach ckptd: %s\n", ckpt_strerror(r));
                return 1;
        }
        uint64_t first = 1;
        uint64_t latest;
        if (ckpt_latest(c, job, &latest, NULL) == 0)
                first = latest + 1; /* a re-run continues where the job left off */

        printf("training job '%s': %u ranks, %u steps, %.1f MiB per rank per step\n", job, ranks,
               steps, (double)mib * 1.5);
        for (uint64_t step = first; step < first + steps; step++) {
                fflush(stdout); /* or the children print our buffer again */
                for (unsigned rank = 0; rank < ranks; rank++) {
                        pid_t pid = fork();
                        if (pid == 0) {
                                int rc = rank_save(rank, step);
                                fflush(stdout);
                                _exit(rc);
                        }
                }
                /* the job's barrier: every rank has finished its save */
                int failed = 0, status;
                while (wait(&status) > 0)
                        failed |= !WIFEXITED(status) || WEXITSTATUS(status);
                if (failed)
                        return 1;
                double t0 = now();
                r = ckpt_commit(c, job, step, 120000);
                if (r < 0) {
                        fprintf(stderr, "commit of step %" PRIu64 " failed: %s\n", step,
                                ckpt_last_error(c));
                        return 1;
                }
                printf("  step %" PRIu64 ": committed (%.0f ms after the barrier)\n", step,
                       (now() - t0) * 1e3);
        }
        ckpt_disconnect(c);
        return restore_and_check();
}
