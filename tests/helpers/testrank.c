/* SPDX-License-Identifier: MIT */
/*
 * ckpt-testrank — one trainer rank for the integration tests, built on the
 * public libckpt API only.  It saves shards of deterministic content
 * (datagen.h) and verifies restores against the same generator, so tests
 * compare real bytes, not hard-coded results.
 *
 *   ckpt-testrank save   --job J --step S --rank R --world W --shards a:SIZE,b:SIZE
 *                        [--seed N] [--zero-copy] [--commit] [--wait-local]
 *                        [--exit-after-finish] [--torn] [--hold MS]
 *                        [--commit-async]  (after the finish, and --wait-local if
 *                                           given: ckpt_commit_async, then exit)
 *                        prints "replaced" when the save replaces an earlier
 *                        copy of the rank (ckpt_save_replaced)
 *   ckpt-testrank verify --job J --step S --rank R --shards ... [--seed N] [--map]
 *                        [--piece BYTES]
 *   ckpt-testrank read   --job J --step S --rank R --shard NAME[,NAME...] --offset O --length L
 *                        [--seed N] [--piece BYTES]   each shard named, in turn on one
 *                        connection
 *   ckpt-testrank latest --job J           prints "STEP WORLD"
 *   ckpt-testrank latest --job J --rank R [--below S]
 *                        the step rank R restores from (ckpt_latest_rank), one
 *                        "key value" line each: "step S", "world W", "newest N",
 *                        and when it fell back a last line
 *                        "fell back from step N (rank R not restorable there)"
 *   ckpt-testrank commit --job J --step S
 *   ckpt-testrank commit-async --job J --step S   prints "asked" on success
 *   ckpt-testrank wait   --job J --step S --tier staged|local|committed|remote|replicated|remote
 *                        [--timeout MS]
 *   ckpt-testrank list   --job J --step S --rank R      prints "name size crc"
 *
 * Exit 0 on success; on failure prints "ERROR <errno-name> <code>: <daemon message>" to
 * stderr and exits 1; a content mismatch exits 3.  The socket comes from
 * $CKPT_SOCKET.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "datagen.h"

struct shard_spec {
        char name[256];
        uint64_t size;
};

static struct {
        const char *job, *shard, *tier;
        uint64_t step, seed, offset, length, piece, below;
        uint32_t rank, world;
        bool rank_set;
        uint32_t timeout;
        struct shard_spec shards[256];
        int nshards;
        bool zero_copy, commit, wait_local, exit_after_finish, torn, map, commit_async;
        uint32_t hold_ms;
} opt = { .world = 1, .timeout = 60000, .below = CKPT_STEP_LATEST };

static struct ckpt_conn *conn;

static int fail(int r, const char *what) {
        fprintf(stderr, "ERROR %s %d: %s: %s\n", strerrorname_np(-r) ? strerrorname_np(-r) : "?", r,
                what, conn && *ckpt_last_error(conn) ? ckpt_last_error(conn) : ckpt_strerror(r));
        return 1;
}

static uint64_t parse_size(const char *s) {
        char *end;
        uint64_t v = strtoull(s, &end, 10);
        if (*end == 'K' || *end == 'k')
                v <<= 10;
        else if (*end == 'M' || *end == 'm')
                v <<= 20;
        else if (*end == 'G' || *end == 'g')
                v <<= 30;
        return v;
}

static void parse_shards(char *s) {
        for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
                char *colon = strrchr(tok, ':');
                if (!colon || opt.nshards == 256) {
                        fprintf(stderr, "bad --shards entry '%s' (want name:size)\n", tok);
                        exit(2);
                }
                *colon = 0;
                snprintf(opt.shards[opt.nshards].name, 256, "%s", tok);
                opt.shards[opt.nshards].size = parse_size(colon + 1);
                opt.nshards++;
        }
}

static atomic_bool scribbling;

static void *scribbler(void *arg) {
        volatile uint8_t *p = arg;
        uint64_t i = 0;
        /* never the same byte values twice in a row at a position */
        while (atomic_load(&scribbling)) {
                p[i % 4096] = (uint8_t)(i + i / 4096);
                i++;
        }
        return NULL;
}

static struct ckpt_save *s; /* open save, aborted in main() on error */

static struct ckpt_save *TAKE_SAVE(void) {
        struct ckpt_save *t = s;
        s = NULL;
        return t;
}

static int do_save(void) {
        int r = ckpt_save_begin(conn, opt.job, opt.step, opt.rank, opt.world, &s);
        if (r < 0)
                return fail(r, "save_begin");
        r = ckpt_save_replaced(s);
        if (r < 0)
                return fail(r, "save_replaced");
        if (r == 1) {
                printf("replaced\n"); /* an earlier copy of the rank */
                fflush(stdout);
        }
        for (int i = 0; i < opt.nshards; i++) {
                struct shard_spec *sp = &opt.shards[i];
                uint64_t key = datagen_key(opt.job, opt.step, opt.rank, sp->name, opt.seed);
                if (!opt.zero_copy && !opt.torn) {
                        void *buf = malloc(sp->size ? sp->size : 1);
                        if (!buf)
                                return fail(-ENOMEM, "malloc");
                        datagen_fill(key, 0, buf, sp->size);
                        r = ckpt_save_write(s, sp->name, buf, sp->size);
                        free(buf);
                        if (r < 0)
                                return fail(r, "save_write");
                        continue;
                }
                struct ckpt_shard *sh;
                r = ckpt_shard_begin(s, sp->name, sp->size, &sh);
                if (r < 0)
                        return fail(r, "shard_begin");
                for (uint64_t done = 0; done < sp->size;) {
                        void *buf;
                        uint64_t off, len;
                        r = ckpt_shard_buffer(sh, &buf, &off, &len);
                        if (r < 0)
                                return fail(r, "shard_buffer");
                        if (opt.hold_ms) {
                                /* a slow trainer sitting on its window */
                                printf("holding\n");
                                fflush(stdout);
                                usleep(opt.hold_ms * 1000u);
                        }
                        datagen_fill(key, off, buf, len);
                        pthread_t t;
                        if (opt.torn) {
                                /* a buggy trainer that keeps writing into a
                                 * committed window */
                                atomic_store(&scribbling, true);
                                pthread_create(&t, NULL, scribbler, buf);
                                usleep(1000);
                        }
                        r = ckpt_shard_commit(sh);
                        if (opt.torn) {
                                usleep(200000);
                                atomic_store(&scribbling, false);
                                pthread_join(t, NULL);
                        }
                        if (r < 0)
                                return fail(r, "shard_commit");
                        done = off + len;
                }
        }
        r = ckpt_save_finish(TAKE_SAVE());
        if (r < 0)
                return fail(r, "save_finish");
        if (opt.exit_after_finish) {
                /* die right away: the daemon owns the bytes now */
                _exit(0);
        }
        /* A torn window is found when the daemon checks it, after the
         * finish: waiting for the disk is where a trainer learns of it. */
        if (opt.wait_local || opt.torn) {
                r = ckpt_wait(conn, opt.job, opt.step, CKPT_LOCAL, opt.timeout);
                if (r < 0)
                        return fail(r, "wait local");
        }
        if (opt.commit_async) {
                /* ask, and go: the daemon commits once every rank is saved */
                r = ckpt_commit_async(conn, opt.job, opt.step);
                if (r < 0)
                        return fail(r, "commit_async");
                printf("asked\n");
                fflush(stdout);
                _exit(0);
        }
        if (opt.commit) {
                r = ckpt_commit(conn, opt.job, opt.step, opt.timeout);
                if (r < 0)
                        return fail(r, "commit");
        }
        return 0;
}

static int verify_range(const char *shard, uint64_t offset, uint64_t length) {
        uint64_t key = datagen_key(opt.job, opt.step, opt.rank, shard, opt.seed);
        uint8_t *got = malloc(length ? length : 1), *want = malloc(length ? length : 1);
        if (!got || !want)
                return fail(-ENOMEM, "malloc");
        uint64_t piece = opt.piece ? opt.piece : length;
        uint64_t done = 0;
        while (done < length) {
                uint64_t n = length - done < piece ? length - done : piece;
                int64_t r = ckpt_read(conn, opt.job, opt.step, opt.rank, shard, offset + done,
                                      got + done, n);
                if (r < 0) {
                        free(got);
                        free(want);
                        return fail((int)r, "read");
                }
                if ((uint64_t)r != n) {
                        fprintf(stderr, "MISMATCH %s: short read %" PRId64 " of %" PRIu64 "\n", shard, r, n);
                        free(got);
                        free(want);
                        return 3;
                }
                done += n;
        }
        datagen_fill(key, offset, want, length);
        int rc = 0;
        if (memcmp(got, want, length)) {
                for (uint64_t i = 0; i < length; i++)
                        if (got[i] != want[i]) {
                                fprintf(stderr, "MISMATCH %s at byte %" PRIu64 "\n", shard, offset + i);
                                break;
                        }
                rc = 3;
        }
        free(got);
        free(want);
        return rc;
}

/* read: the same range of each shard --shard names (comma-separated), in
 * turn on the one connection, as a restore walking a rank's shards does. */
static int read_shards(void) {
        char names[4096];
        char *save = NULL;
        int r = 0;

        if (!opt.shard || strlen(opt.shard) >= sizeof(names))
                return fail(-EINVAL, "--shard");
        snprintf(names, sizeof(names), "%s", opt.shard);
        for (char *n = strtok_r(names, ",", &save); n && r == 0; n = strtok_r(NULL, ",", &save))
                r = verify_range(n, opt.offset, opt.length);
        return r;
}

static int verify_list(struct ckpt_shard_info *list, size_t n);

static int do_verify(void) {
        struct ckpt_shard_info *list;
        size_t n;
        int r = ckpt_shard_list(conn, opt.job, opt.step, opt.rank, &list, &n);
        if (r < 0)
                return fail(r, "shard_list");
        r = verify_list(list, n);
        ckpt_shard_list_free(list);
        return r;
}

static int verify_list(struct ckpt_shard_info *list, size_t n) {
        int r;
        if ((int)n != opt.nshards) {
                fprintf(stderr, "MISMATCH: rank has %zu shards, expected %d\n", n, opt.nshards);
                return 3;
        }
        for (int i = 0; i < opt.nshards; i++) {
                struct shard_spec *sp = &opt.shards[i];
                bool found = false;
                for (size_t j = 0; j < n; j++)
                        if (!strcmp(list[j].name, sp->name)) {
                                found = true;
                                if (list[j].size != sp->size) {
                                        fprintf(stderr, "MISMATCH %s: size %" PRIu64 " != %" PRIu64 "\n",
                                                sp->name, list[j].size, sp->size);
                                        return 3;
                                }
                        }
                if (!found) {
                        fprintf(stderr, "MISMATCH: shard %s missing\n", sp->name);
                        return 3;
                }
                r = verify_range(sp->name, 0, sp->size);
                if (r)
                        return r;
                /* one byte past the end reads nothing */
                uint8_t b;
                int64_t got = ckpt_read(conn, opt.job, opt.step, opt.rank, sp->name, sp->size, &b, 1);
                if (got != 0) {
                        fprintf(stderr, "MISMATCH %s: read at EOF returned %" PRId64 "\n", sp->name, got);
                        return 3;
                }
                if (opt.map) {
                        const void *addr;
                        uint64_t size;
                        r = ckpt_map(conn, opt.job, opt.step, opt.rank, sp->name, &addr, &size);
                        if (r < 0)
                                return fail(r, "map");
                        uint64_t key = datagen_key(opt.job, opt.step, opt.rank, sp->name, opt.seed);
                        uint8_t *want = malloc(size ? size : 1);
                        datagen_fill(key, 0, want, size);
                        bool same = size == sp->size && !memcmp(addr, want, size);
                        free(want);
                        ckpt_unmap(addr, size);
                        if (!same) {
                                fprintf(stderr, "MISMATCH %s: mapped bytes differ\n", sp->name);
                                return 3;
                        }
                }
        }
        return 0;
}

int main(int argc, char **argv) {
        static const struct option longopts[] = {
                { "job", required_argument, NULL, 'j' },
                { "step", required_argument, NULL, 's' },
                { "rank", required_argument, NULL, 'r' },
                { "world", required_argument, NULL, 'w' },
                { "shards", required_argument, NULL, 'S' },
                { "shard", required_argument, NULL, 'n' },
                { "seed", required_argument, NULL, 'x' },
                { "offset", required_argument, NULL, 'o' },
                { "length", required_argument, NULL, 'l' },
                { "piece", required_argument, NULL, 'p' },
                { "tier", required_argument, NULL, 't' },
                { "timeout", required_argument, NULL, 'T' },
                { "zero-copy", no_argument, NULL, 'z' },
                { "commit", no_argument, NULL, 'c' },
                { "commit-async", no_argument, NULL, 'A' },
                { "wait-local", no_argument, NULL, 'L' },
                { "exit-after-finish", no_argument, NULL, 'E' },
                { "torn", no_argument, NULL, 'X' },
                { "map", no_argument, NULL, 'm' },
                { "hold", required_argument, NULL, 'H' },
                { "below", required_argument, NULL, 'B' },
                {}
        };
        if (argc < 2) {
                fprintf(stderr, "usage: ckpt-testrank save|verify|read|latest|commit|commit-async|wait|list ...\n");
                return 2;
        }
        const char *cmd = argv[1];
        int c;
        optind = 2;
        while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
                switch (c) {
                case 'j': opt.job = optarg; break;
                case 's': opt.step = strtoull(optarg, NULL, 10); break;
                case 'r':
                        opt.rank = (uint32_t)strtoul(optarg, NULL, 10);
                        opt.rank_set = true;
                        break;
                case 'w': opt.world = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'S': parse_shards(optarg); break;
                case 'n': opt.shard = optarg; break;
                case 'x': opt.seed = strtoull(optarg, NULL, 10); break;
                case 'o': opt.offset = parse_size(optarg); break;
                case 'l': opt.length = parse_size(optarg); break;
                case 'p': opt.piece = parse_size(optarg); break;
                case 't': opt.tier = optarg; break;
                case 'T': opt.timeout = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'z': opt.zero_copy = true; break;
                case 'c': opt.commit = true; break;
                case 'A': opt.commit_async = true; break;
                case 'L': opt.wait_local = true; break;
                case 'E': opt.exit_after_finish = true; break;
                case 'X': opt.torn = true; break;
                case 'm': opt.map = true; break;
                case 'H': opt.hold_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'B': opt.below = strtoull(optarg, NULL, 10); break;
                default: return 2;
                }
        }
        if (!opt.job) {
                fprintf(stderr, "--job is required\n");
                return 2;
        }
        int r = ckpt_connect(NULL, &conn);
        if (r < 0)
                return fail(r, "connect");

        if (!strcmp(cmd, "save")) {
                r = do_save();
                if (s)
                        ckpt_save_abort(TAKE_SAVE());
        }
        else if (!strcmp(cmd, "verify"))
                r = do_verify();
        else if (!strcmp(cmd, "read"))
                r = read_shards();
        else if (!strcmp(cmd, "latest") && opt.rank_set) {
                uint64_t step, newest;
                uint32_t world;
                r = ckpt_latest_rank(conn, opt.job, opt.rank, opt.below, &step, &world, &newest);
                if (r < 0) {
                        r = fail(r, "latest_rank");
                } else {
                        printf("step %" PRIu64 "\nworld %u\nnewest %" PRIu64 "\n", step, world,
                               newest);
                        if (newest != step)
                                printf("fell back from step %" PRIu64 " (rank %u not restorable "
                                       "there)\n", newest, opt.rank);
                }
        } else if (!strcmp(cmd, "latest")) {
                uint64_t step;
                uint32_t world;
                r = ckpt_latest(conn, opt.job, &step, &world);
                if (r < 0)
                        r = fail(r, "latest");
                else
                        printf("%" PRIu64 " %u\n", step, world);
        } else if (!strcmp(cmd, "commit")) {
                r = ckpt_commit(conn, opt.job, opt.step, opt.timeout);
                if (r < 0)
                        r = fail(r, "commit");
        } else if (!strcmp(cmd, "commit-async")) {
                r = ckpt_commit_async(conn, opt.job, opt.step);
                if (r < 0)
                        r = fail(r, "commit_async");
                else
                        printf("asked\n");
        } else if (!strcmp(cmd, "wait")) {
                enum ckpt_wait_tier t = !strcmp(opt.tier ? opt.tier : "", "staged") ? CKPT_STAGED
                                        : !strcmp(opt.tier ? opt.tier : "", "committed") ? CKPT_COMMITTED
                                        : !strcmp(opt.tier ? opt.tier : "", "remote")    ? CKPT_REMOTE
                                        : !strcmp(opt.tier ? opt.tier : "", "replicated") ? CKPT_REPLICATED
                                                                                         : CKPT_LOCAL;
                r = ckpt_wait(conn, opt.job, opt.step, t, opt.timeout);
                if (r < 0)
                        r = fail(r, "wait");
        } else if (!strcmp(cmd, "list")) {
                struct ckpt_shard_info *list;
                size_t n;
                r = ckpt_shard_list(conn, opt.job, opt.step, opt.rank, &list, &n);
                if (r < 0) {
                        r = fail(r, "list");
                } else {
                        for (size_t i = 0; i < n; i++)
                                printf("%s %" PRIu64 " %08x\n", list[i].name, list[i].size,
                                       list[i].crc32c);
                        ckpt_shard_list_free(list);
                }
        } else {
                fprintf(stderr, "unknown command %s\n", cmd);
                r = 2;
        }
        ckpt_disconnect(conn);
        return r;
}
