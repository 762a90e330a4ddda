/* SPDX-License-Identifier: MIT */
/*
 * memtier-bench — the memory tier's restore next to memcpy (bench/memtier.sh).
 *
 *   memtier-bench save    --size BYTES --step S     one shard "w", committed
 *   memtier-bench measure --size BYTES --step S [--runs R]
 *
 * measure prints "key=seconds" medians of R runs:
 *   memcpy=    memcpy of BYTES between two buffers already touched (the
 *              limit a restore into a trainer's buffer can reach)
 *   read=      ckpt_read of the whole shard into the same destination
 *   map=       ckpt_map of the shard (the call; ckpt_unmap not counted)
 *   map_touch= ckpt_map plus reading one byte per page of it
 * and checks the bytes read and mapped against what save wrote.  The
 * socket is $CKPT_SOCKET.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"

#define JOB "memtier-bench"
#define SHARD "w"

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Deterministic bytes, cheap to make and to check. */
static void fill(uint8_t *p, uint64_t n, uint64_t step) {
        uint64_t *w = (uint64_t *)p;
        for (uint64_t i = 0; i < n / 8; i++)
                w[i] = (i + 1) * 0x9e3779b97f4a7c15ull ^ step;
        for (uint64_t i = n / 8 * 8; i < n; i++)
                p[i] = (uint8_t)(i ^ step);
}

static int fail(struct ckpt_conn *c, int r, const char *what) {
        fprintf(stderr, "memtier-bench: %s: %s (%s)\n", what, ckpt_strerror(r),
                c ? ckpt_last_error(c) : "");
        return 1;
}

int main(int argc, char **argv) {
        uint64_t size = 1ull << 30, step = 1;
        int runs = 5;
        static const struct option opts[] = {
                { "size", required_argument, NULL, 's' },
                { "step", required_argument, NULL, 't' },
                { "runs", required_argument, NULL, 'r' },
                { 0 },
        };
        int o;
        while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
                if (o == 's')
                        size = strtoull(optarg, NULL, 0);
                else if (o == 't')
                        step = strtoull(optarg, NULL, 0);
                else if (o == 'r')
                        runs = atoi(optarg);
                else
                        return 2;
        }
        if (optind != argc - 1 || runs < 1 || runs > 100 || size == 0) {
                fprintf(stderr, "usage: memtier-bench save|measure [--size B] [--step S] "
                                "[--runs R]\n");
                return 2;
        }
        const char *mode = argv[optind];
        struct ckpt_conn *c = NULL;
        int r = ckpt_connect(NULL, &c);
        if (r < 0)
                return fail(NULL, r, "connect");
        uint8_t *want = malloc(size), *dst = malloc(size);
        if (!want || !dst)
                return fail(c, -ENOMEM, "malloc");
        fill(want, size, step);
        memset(dst, 1, size); /* touched: no page faults in what is timed */

        if (!strcmp(mode, "save")) {
                struct ckpt_save *s;
                r = ckpt_save_begin(c, JOB, step, 0, 1, &s);
                if (r == 0)
                        r = ckpt_save_write(s, SHARD, want, size);
                if (r == 0)
                        r = ckpt_save_finish(s);
                if (r == 0)
                        r = ckpt_commit(c, JOB, step, 120000);
                if (r < 0)
                        return fail(c, r, "save");
                ckpt_disconnect(c);
                return 0;
        }
        double t_memcpy[100], t_read[100], t_map[100], t_touch[100];
        for (int i = 0; i < runs; i++) {
                /* interleaved: a burst of other load lands on both sides */
                double t0 = now();
                memcpy(dst, want, size);
                t_memcpy[i] = now() - t0;
                memset(dst, 0, 4096);

                t0 = now();
                int64_t got = ckpt_read(c, JOB, step, 0, SHARD, 0, dst, size);
                t_read[i] = now() - t0;
                if (got < 0)
                        return fail(c, (int)got, "ckpt_read");
                if ((uint64_t)got != size || memcmp(dst, want, size))
                        return fail(c, -EIO, "ckpt_read returned other bytes");

                const void *p;
                uint64_t mapped;
                t0 = now();
                r = ckpt_map(c, JOB, step, 0, SHARD, &p, &mapped);
                t_map[i] = now() - t0;
                if (r < 0)
                        return fail(c, r, "ckpt_map");
                volatile uint8_t sink = 0;
                for (uint64_t off = 0; off < mapped; off += 4096)
                        sink ^= ((const uint8_t *)p)[off];
                (void)sink;
                t_touch[i] = now() - t0;
                if (mapped != size || memcmp(p, want, size))
                        return fail(c, -EIO, "ckpt_map mapped other bytes");
                ckpt_unmap(p, mapped);
        }
        printf("memcpy=%.6f\nread=%.6f\nmap=%.6f\nmap_touch=%.6f\n", median(t_memcpy, runs),
               median(t_read, runs), median(t_map, runs), median(t_touch, runs));
        ckpt_disconnect(c);
        free(want);
        free(dst);
        return 0;
}
