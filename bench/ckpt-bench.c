/* SPDX-License-Identifier: MIT */
/*
 * ckpt-bench — measure what a trainer pays and what the disk gets, against
 * a running ckptd, for bench/run.sh.
 *
 * The claims in DESIGN.md are ratios ("staging costs about a memcpy", "the
 * local tier writes at disk speed"), so this client measures the ckptd side
 * of each ratio in one process, against the same prefaulted source buffers
 * (N bytes as K equal tensors), and prints one `key=value` line per number;
 * the reference side (fio, torch) and the medians are run.sh's job.
 *
 *   ckpt-bench [OPTIONS] all|memcpy|stage|zerocopy|restore|random-read|flush-stage|commit
 *
 *   --socket PATH      the daemon's socket ($CKPT_SOCKET if unset)
 *   --job NAME         job to save under (default: bench)
 *   --size BYTES       bytes per save (K/M/G suffixes; default 1G)
 *   --tensors K        shards per save (default 64)
 *   --daemon-pid PID   read the daemon's CPU time from /proc/PID/stat, and
 *                      (random-read) its disk reads from /proc/PID/io
 *   --no-commit        leave steps uncommitted (default: commit each, so
 *                      the daemon's retention keeps the disk bounded)
 *   --restore-streams N  also time a restore with N connections reading
 *                      shards in parallel (restore_parallel_mbps), each a
 *                      contiguous run of the shard list
 *   --restore-strided  ... or each every N-th shard instead
 *   --settle S         before the timed restore: sync(), then S seconds of
 *                      quiet (the disk's state right after the save's
 *                      writes and retention deletes is not what a restore
 *                      after a restart meets; bench/run.sh --settle)
 *
 * commit (bench/commit.sh) takes its own options:
 *
 *   --sockets P0,P1,.. node i's daemon socket (default: --socket, one node)
 *   --base-sockets P0,.. as many daemons of another build, measured in turns
 *                      with --sockets step by step ("base_commit_step=" lines)
 *   --ranks-per-node R rank connections per node (default 2); --size and
 *                      --tensors are then per rank
 *   --steps N          timed steps (default 20), after --warmup W (default 2)
 *   --timeout MS       for every wait and commit (default 60000)
 *
 * Every mode that talks to the daemon first does one untimed warm-up save
 * on the same connection, so the pool slots are already mapped here and the
 * timed save measures the steady state a trainer sees from its second save
 * on.  Steps are numbered after the job's latest committed step.
 *
 * random-read (part of all, after restore) makes RANDOM_READS ckpt_reads of
 * 4 KiB at random 4 KiB-aligned offsets of random shards of the saved
 * step, on the one connection, and prints the bytes the daemon read from
 * disk meanwhile (random_read_disk_bytes, from /proc/PID/io read_bytes:
 * the daemon reads O_DIRECT, so that is what its read-ahead cost; -1
 * without --daemon-pid or when unreadable).  Issue 13's bound: at most
 * 4 blocks of 1 MiB per read.
 *
 * flush-stage (bench/remote.sh, a daemon with the object-store tier on) is
 * not part of `all`: it times one staging with the daemon idle, then
 * commits a step A, stages a step B at once while A is being uploaded, and
 * waits for A to reach tier remote, so the script can tell whether the
 * flush really overlapped B's staging.  It does its own warm-ups, in a
 * second job (see mode_flush_stage), and commits only A.
 *
 * commit measures the commit latency of issue 10 across several daemons
 * from one process, so that every timestamp is on one CLOCK_MONOTONIC (see
 * mode_commit): one line per timed step, "commit_step=S latency_s=..."
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

#define WAIT_TIMEOUT_MS (300u * 1000)

struct bench {
        const char *socket;
        const char *job;
        uint64_t size;
        uint32_t tensors;
        uint64_t tensor_size;
        long daemon_pid;
        bool commit;
        uint32_t restore_streams;
        bool restore_strided;
        double settle_s; /* before the timed restore: sync, then this quiet */
        char *src; /* size bytes, prefaulted, non-zero pattern */
        char *dst; /* size bytes, prefaulted */
        struct ckpt_conn *conn;
        uint64_t next_step;
        bool have_saved;
        uint64_t saved_step; /* a fully local step, for restore */
        /* commit mode */
        const char *sockets; /* comma-separated, node 0 first */
        const char *base_sockets; /* the same for the daemons compared with */
        uint32_t ranks_per_node;
        uint32_t steps, warmup;
        uint32_t timeout_ms;
};

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_size(const char *s, uint64_t *out) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s)
                return -EINVAL;
        uint64_t mult = 1;
        switch (*end) {
        case 'k': case 'K': mult = 1ull << 10; end++; break;
        case 'm': case 'M': mult = 1ull << 20; end++; break;
        case 'g': case 'G': mult = 1ull << 30; end++; break;
        case '\0': break;
        default: return -EINVAL;
        }
        if (*end == 'i' && end[1] == 'B')
                end += 2;
        if (*end)
                return -EINVAL;
        *out = v * mult;
        return 0;
}

/* Anonymous memory with every page written, so no timed copy pays a page
 * fault on either side. */
static char *alloc_prefaulted(uint64_t size, bool pattern) {
        char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                       -1, 0);
        if (p == MAP_FAILED)
                return NULL;
        if (pattern) {
                uint64_t *w = (uint64_t *)p;
                for (uint64_t i = 0; i < size / 8; i++)
                        w[i] = i * 0x9e3779b97f4a7c15ull;
        } else {
                memset(p, 0x5a, size);
        }
        return p;
}

/* utime+stime of a process in seconds (clock ticks), -1 if unreadable. */
static double proc_cpu_s(long pid) {
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* comm may contain spaces and parentheses: fields start after the
         * last ')'; utime and stime are fields 14 and 15. */
        char *p = strrchr(buf, ')');
        if (!p)
                return -1;
        unsigned long long utime, stime;
        if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                   &stime) != 2)
                return -1;
        return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* Bytes a process has read from block devices (/proc/PID/io read_bytes),
 * -1 if unreadable (another user's process without ptrace rights). */
static int64_t proc_read_bytes(long pid) {
        char path[64], line[128];
        int64_t v = -1;
        snprintf(path, sizeof(path), "/proc/%ld/io", pid);
        FILE *f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "read_bytes: %" SCNd64, &v) == 1)
                        break;
        fclose(f);
        return v;
}

static void shard_name(char *buf, size_t len, uint32_t i) {
        snprintf(buf, len, "tensor-%04u", i);
}

static int fail(struct bench *b, const char *what, int r) {
        fprintf(stderr, "ckpt-bench: %s: %s (%s)\n", what, ckpt_strerror(r),
                b->conn ? ckpt_last_error(b->conn) : "");
        return r;
}

static int bench_connect(struct bench *b) {
        if (b->conn)
                return 0;
        int r = ckpt_connect(b->socket, &b->conn);
        if (r < 0)
                return fail(b, "connect", r);
        uint64_t latest;
        r = ckpt_latest(b->conn, b->job, &latest, NULL);
        if (r == -ENOENT)
                b->next_step = 1;
        else if (r < 0)
                return fail(b, "latest", r);
        else
                b->next_step = latest + 1;
        return 0;
}

struct save_times {
        double begin, first_byte, last_byte, finished, local;
        double cpu_before, cpu_after;
};

/* One save of the whole buffer, by copy (ckpt_save_write) or zero-copy
 * (buffer, memcpy from the source, commit), then wait for tier local and
 * (unless disabled) commit.  Fills t; the commit is outside every time. */
static int bench_save(struct bench *b, bool zero_copy, struct save_times *t) {
        uint64_t step = b->next_step++;
        struct ckpt_save *s;
        char name[32];
        int r;

        t->cpu_before = b->daemon_pid > 0 ? proc_cpu_s(b->daemon_pid) : -1;
        t->begin = now_s();
        r = ckpt_save_begin(b->conn, b->job, step, 0, 1, &s);
        if (r < 0)
                return fail(b, "save_begin", r);
        t->first_byte = now_s();
        for (uint32_t i = 0; i < b->tensors; i++) {
                const char *src = b->src + (uint64_t)i * b->tensor_size;
                shard_name(name, sizeof(name), i);
                if (!zero_copy) {
                        r = ckpt_save_write(s, name, src, b->tensor_size);
                        if (r < 0) {
                                fail(b, "save_write", r);
                                ckpt_save_abort(s);
                                return r;
                        }
                        continue;
                }
                struct ckpt_shard *sh;
                r = ckpt_shard_begin(s, name, b->tensor_size, &sh);
                while (r == 0) {
                        void *buf;
                        uint64_t off, len;
                        r = ckpt_shard_buffer(sh, &buf, &off, &len);
                        if (r < 0)
                                break;
                        memcpy(buf, src + off, len);
                        r = ckpt_shard_commit(sh);
                }
                if (r < 0) {
                        fail(b, "zero-copy shard", r);
                        ckpt_save_abort(s);
                        return r;
                }
        }
        t->last_byte = now_s();
        r = ckpt_save_finish(s);
        t->finished = now_s();
        if (r < 0)
                return fail(b, "save_finish", r);
        r = ckpt_wait(b->conn, b->job, step, CKPT_LOCAL, WAIT_TIMEOUT_MS);
        t->local = now_s();
        t->cpu_after = b->daemon_pid > 0 ? proc_cpu_s(b->daemon_pid) : -1;
        if (r < 0)
                return fail(b, "wait local", r);
        if (b->commit) {
                r = ckpt_commit(b->conn, b->job, step, WAIT_TIMEOUT_MS);
                if (r < 0)
                        return fail(b, "commit", r);
        }
        b->have_saved = true;
        b->saved_step = step;
        return 0;
}

static int bench_warmup(struct bench *b) {
        struct save_times t;
        int r = bench_connect(b);
        if (r < 0)
                return r;
        return bench_save(b, false, &t);
}

static void mode_memcpy(struct bench *b) {
        double t0 = now_s();
        for (uint32_t i = 0; i < b->tensors; i++) {
                uint64_t off = (uint64_t)i * b->tensor_size;
                memcpy(b->dst + off, b->src + off, b->tensor_size);
        }
        double t1 = now_s();
        /* keep the copy observable */
        if (b->dst[b->size - 1] != b->src[b->size - 1])
                fprintf(stderr, "ckpt-bench: memcpy mismatch\n");
        printf("memcpy_s=%.6f\n", t1 - t0);
}

static int mode_stage(struct bench *b) {
        struct save_times t;
        int r = bench_save(b, false, &t);
        if (r < 0)
                return r;
        double gb = (double)b->size / 1e9;
        printf("staging_s=%.6f\n", t.finished - t.begin);
        printf("staging_copy_s=%.6f\n", t.last_byte - t.first_byte);
        printf("staging_finish_s=%.6f\n", t.finished - t.last_byte);
        printf("local_from_first_byte_s=%.6f\n", t.local - t.first_byte);
        printf("local_from_begin_s=%.6f\n", t.local - t.begin);
        printf("local_after_finish_s=%.6f\n", t.local - t.finished);
        printf("local_mbps=%.1f\n", (double)b->size / (t.local - t.first_byte) / 1e6);
        if (t.cpu_before >= 0 && t.cpu_after >= 0) {
                printf("daemon_cpu_s=%.3f\n", t.cpu_after - t.cpu_before);
                printf("daemon_cpu_s_per_gb=%.4f\n", (t.cpu_after - t.cpu_before) / gb);
        }
        return 0;
}

static int mode_zerocopy(struct bench *b) {
        struct save_times t;
        int r = bench_save(b, true, &t);
        if (r < 0)
                return r;
        printf("zerocopy_s=%.6f\n", t.finished - t.begin);
        return 0;
}

/* One reader of a restore, on its own connection (calls on one connection
 * are serialised): shards first, first + step, ... below end of the list,
 * each read whole into its place in dst.  Contiguous runs (step 1) are how
 * a trainer would split a restore between threads; strided (step n) is
 * there to show what the daemon's read-ahead does with it. */
struct restore_stream {
        struct bench *bench;
        struct ckpt_conn *conn;
        const struct ckpt_shard_info *list;
        const uint64_t *offsets;
        size_t first, end, step;
        int error;
        char what[640];
};

static void *restore_stream_run(void *arg) {
        struct restore_stream *st = arg;
        struct bench *b = st->bench;

        for (size_t i = st->first; i < st->end; i += st->step) {
                int64_t got = ckpt_read(st->conn, b->job, b->saved_step, 0, st->list[i].name, 0,
                                        b->dst + st->offsets[i], st->list[i].size);
                if (got < 0 || (uint64_t)got != st->list[i].size) {
                        st->error = got < 0 ? (int)got : -EIO;
                        snprintf(st->what, sizeof(st->what), "read %s: %s", st->list[i].name,
                                 got < 0 ? ckpt_last_error(st->conn) : "short read");
                        break;
                }
        }
        return NULL;
}

/*
 * Read the whole saved step back into dst with `streams` connections in
 * parallel (1: what a plain single-threaded restore gets).  Extra
 * connections first read their shards once, untimed, so that they have
 * mapped the pool slots, as the main connection has from its saves.
 */
static int restore_pass(struct bench *b, const struct ckpt_shard_info *list,
                        const uint64_t *offsets, size_t count, uint32_t streams,
                        double *seconds) {
        struct restore_stream st[16];
        pthread_t th[16];
        int r = 0;

        if (streams < 1 || streams > 16)
                return -EINVAL;
        memset(st, 0, sizeof(st));
        for (uint32_t i = 0; i < streams; i++) {
                st[i] = (struct restore_stream){ .bench = b, .list = list, .offsets = offsets };
                if (b->restore_strided) {
                        st[i].first = i;
                        st[i].end = count;
                        st[i].step = streams;
                } else {
                        st[i].first = count * i / streams;
                        st[i].end = count * (i + 1) / streams;
                        st[i].step = 1;
                }
                if (i == 0) {
                        st[i].conn = b->conn;
                        continue;
                }
                r = ckpt_connect(b->socket, &st[i].conn);
                if (r < 0) {
                        fail(b, "connect (restore stream)", r);
                        break;
                }
                restore_stream_run(&st[i]);
                if (st[i].error < 0) {
                        r = st[i].error;
                        fprintf(stderr, "ckpt-bench: %s\n", st[i].what);
                        break;
                }
        }
        if (r == 0) {
                double t0 = now_s();
                uint32_t started = 0;
                for (uint32_t i = 1; i < streams; i++, started++)
                        if (pthread_create(&th[i], NULL, restore_stream_run, &st[i]) != 0)
                                break;
                restore_stream_run(&st[0]);
                for (uint32_t i = 1; i <= started; i++)
                        pthread_join(th[i], NULL);
                *seconds = now_s() - t0;
                if (started != streams - 1)
                        r = -EAGAIN;
                for (uint32_t i = 0; r == 0 && i < streams; i++)
                        if (st[i].error < 0) {
                                r = st[i].error;
                                fprintf(stderr, "ckpt-bench: %s\n", st[i].what);
                        }
        }
        for (uint32_t i = 1; i < streams; i++)
                ckpt_disconnect(st[i].conn);
        return r;
}

/* The shards of the step restore and random-read read (saved first if
 * this process has saved none), sorted by name: shard i is tensor i. */
static int saved_shard_list(struct bench *b, struct ckpt_shard_info **list, size_t *count) {
        int r;

        if (!b->have_saved) {
                struct save_times t;
                r = bench_save(b, false, &t);
                if (r < 0)
                        return r;
        }
        r = ckpt_shard_list(b->conn, b->job, b->saved_step, 0, list, count);
        return r < 0 ? fail(b, "shard_list", r) : 0;
}

static int mode_restore(struct bench *b) {
        struct ckpt_shard_info *list;
        size_t count;
        int r;

        r = saved_shard_list(b, &list, &count);
        if (r < 0)
                return r;
        uint64_t *offsets = calloc(count ? count : 1, sizeof(*offsets));
        uint64_t total = 0;
        for (size_t i = 0; offsets && i < count; i++) {
                offsets[i] = total;
                total += list[i].size;
        }
        if (!offsets || total > b->size) {
                fprintf(stderr, "ckpt-bench: step %" PRIu64 " holds more than --size\n",
                        b->saved_step);
                free(offsets);
                ckpt_shard_list_free(list);
                return -EINVAL;
        }

        if (b->settle_s > 0) {
                sync();
                uint64_t ms = (uint64_t)(b->settle_s * 1000);
                struct timespec ts = { .tv_sec = (time_t)(ms / 1000),
                                       .tv_nsec = (long)(ms % 1000) * 1000000 };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
                }
        }
        double secs;
        r = restore_pass(b, list, offsets, count, 1, &secs);
        /* the bytes read back are the bytes saved (shards sort by name, as
         * saved); outside the timed part */
        if (r == 0 && memcmp(b->dst, b->src, total) != 0) {
                fprintf(stderr, "ckpt-bench: restored bytes differ from saved bytes\n");
                r = -EIO;
        }
        if (r == 0) {
                printf("restore_s=%.6f\n", secs);
                printf("restore_mbps=%.1f\n", (double)total / secs / 1e6);
        }
        if (r == 0 && b->restore_streams > 1) {
                memset(b->dst, 0, total);
                r = restore_pass(b, list, offsets, count, b->restore_streams, &secs);
                if (r == 0 && memcmp(b->dst, b->src, total) != 0) {
                        fprintf(stderr, "ckpt-bench: restored bytes differ from saved bytes\n");
                        r = -EIO;
                }
                if (r == 0) {
                        printf("restore_streams=%u\n", b->restore_streams);
                        printf("restore_parallel_mbps=%.1f\n", (double)total / secs / 1e6);
                }
        }
        free(offsets);
        ckpt_shard_list_free(list);
        return r;
}

/*
 * What an upload costs the trainer: staging time with the daemon idle, and
 * staging time of a save begun right after a commit, while that step is
 * being uploaded.  Only A is committed, so nothing else starts a flush.
 *
 * The untimed warm-ups and the idle save go to a second job, JOB-idle: a
 * commit drops the job's older uncommitted steps, and deleting gigabytes of
 * them while B stages would be charged to the flush (it made staging 4x
 * slower with no object store at all).  So JOB holds only A and B, and the
 * daemon should be fresh (steps are numbered after JOB's latest committed
 * step, in both jobs).  A's wait for CKPT_REMOTE tells whether the flush was
 * still running when B's staging ended (flush_overlapped=1).
 */
#define RANDOM_READS 1000
#define RANDOM_READ_SIZE 4096

/* See the top of the file.  The offsets come from a fixed seed, so every
 * run reads the same places. */
static int mode_random_read(struct bench *b) {
        struct ckpt_shard_info *list;
        size_t count;
        uint64_t x = 0x9e3779b97f4a7c15ull; /* xorshift64 state */
        char buf[RANDOM_READ_SIZE];
        int r;

        r = saved_shard_list(b, &list, &count);
        if (r < 0)
                return r;
        int64_t before = b->daemon_pid > 0 ? proc_read_bytes(b->daemon_pid) : -1;
        double t0 = now_s();
        for (int i = 0; i < RANDOM_READS && count > 0; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                /* shard i of the list (by name) is tensor i, at i x tensor_size in src */
                size_t idx = x % count;
                const struct ckpt_shard_info *sh = &list[idx];
                uint64_t units = sh->size / RANDOM_READ_SIZE;
                uint64_t off = units ? (x >> 20) % units * RANDOM_READ_SIZE : 0;
                uint64_t len = sh->size - off < RANDOM_READ_SIZE ? sh->size - off : RANDOM_READ_SIZE;
                int64_t got = ckpt_read(b->conn, b->job, b->saved_step, 0, sh->name, off, buf, len);
                if (got < 0 || (uint64_t)got != len) {
                        fprintf(stderr, "ckpt-bench: random read of %s at %" PRIu64 ": %s\n",
                                sh->name, off, got < 0 ? ckpt_last_error(b->conn) : "short read");
                        ckpt_shard_list_free(list);
                        return got < 0 ? (int)got : -EIO;
                }
                if (memcmp(buf, b->src + idx * b->tensor_size + off, len) != 0) {
                        fprintf(stderr, "ckpt-bench: random read of %s at %" PRIu64 " returned "
                                "other bytes than saved\n", sh->name, off);
                        ckpt_shard_list_free(list);
                        return -EIO;
                }
        }
        double secs = now_s() - t0;
        /* a read-ahead still in flight would be counted late: let it land */
        usleep(300 * 1000);
        int64_t after = b->daemon_pid > 0 ? proc_read_bytes(b->daemon_pid) : -1;
        ckpt_shard_list_free(list);
        printf("random_reads=%d\n", RANDOM_READS);
        printf("random_read_s=%.6f\n", secs);
        printf("random_read_disk_bytes=%" PRId64 "\n",
               before >= 0 && after >= 0 ? after - before : (int64_t)-1);
        return 0;
}

static int mode_flush_stage(struct bench *b) {
        struct save_times idle, a, busy;
        char idle_job[256];
        const char *job = b->job;
        int r;

        r = bench_connect(b);
        if (r < 0)
                return r;
        snprintf(idle_job, sizeof(idle_job), "%s-idle", job);
        /* two warm-ups: with a pool of twice --size the saves alternate
         * between two sets of slots, and both must be mapped here already,
         * or the first save into the second set pays page faults that have
         * nothing to do with the flush */
        b->job = idle_job;
        r = bench_save(b, false, &idle);
        if (r >= 0)
                r = bench_save(b, false, &idle);
        if (r >= 0)
                r = bench_save(b, false, &idle);
        b->job = job;
        if (r >= 0)
                r = bench_save(b, false, &a);
        if (r < 0)
                return r;
        uint64_t step_a = b->saved_step;
        double commit_begin = now_s();
        r = ckpt_commit(b->conn, b->job, step_a, WAIT_TIMEOUT_MS);
        double commit_end = now_s();
        if (r < 0)
                return fail(b, "commit", r);

        r = bench_save(b, false, &busy);
        if (r < 0)
                return r;

        printf("stage_idle_s=%.6f\n", idle.finished - idle.begin);
        printf("stage_busy_s=%.6f\n", busy.finished - busy.begin);
        printf("stage_busy_after_commit_s=%.6f\n", busy.begin - commit_end);
        printf("commit_s=%.6f\n", commit_end - commit_begin);
        fflush(stdout);

        r = ckpt_wait(b->conn, b->job, step_a, CKPT_REMOTE, 600u * 1000);
        double remote = now_s();
        if (r < 0)
                return fail(b, "wait remote", r);
        printf("flush_step=%" PRIu64 "\n", step_a);
        printf("flush_s=%.6f\n", remote - commit_end);
        printf("flush_mbps=%.1f\n", (double)b->size / (remote - commit_end) / 1e6);
        /* the flush began before B's first byte (the commit had returned);
         * if it ended after B's finish, it ran for the whole staging */
        printf("flush_left_after_stage_s=%.6f\n", remote - busy.finished);
        printf("flush_overlapped=%d\n", remote > busy.finished ? 1 : 0);
        return 0;
}

/*
 * Commit latency (issue 10): last rank on local disk -> every node reports
 * the step committed.
 *
 * Per step: every rank (ranks_per_node connections per node, ranks
 * node * ranks_per_node + k) begins its save and writes its shards; then
 * one waiter per node, on a connection of its own, blocks in
 * ckpt_wait(COMMITTED) (the step exists on its node by then, as the wait
 * requires); 5 ms later, so that the waits are queued in the daemons, every
 * rank finishes its save in a thread of its own and waits for CKPT_LOCAL.
 * When the last of them returns (t_local), rank 0 on node 0 calls
 * ckpt_commit at once, as a trainer does after its barrier.  latency_s is
 * the last waiter's return - t_local: what a poller would only see late.
 *
 * Today's daemons commit per node: a commit on node 0 never reaches the
 * others.  The first warm-up step finds out: when node 0's commit has
 * returned and another node's waiter has not within 2 s, every later step
 * also commits on every node (one rank each, in parallel, at the same
 * instant) and the output says commit_mode=per-node, so a number from the
 * old protocol cannot pass for the cluster commit.
 */
struct commit_node;

struct commit_rank {
        struct bench *bench;
        struct ckpt_conn *conn;
        uint32_t rank, world;
        uint64_t step;
        struct ckpt_save *save;
        double t_local;
        int error;
};

struct commit_waiter {
        struct commit_node *node;
        struct ckpt_conn *conn;
        pthread_t thread;
        double t_committed;
        int error;
        bool done;
};

struct commit_node {
        struct commit_bench *cb;
        uint32_t index;
        struct commit_rank *ranks; /* ranks_per_node of them */
        struct commit_waiter waiter;
        /* a per-node commit (today's daemons) */
        pthread_t commit_thread;
        int commit_error;
};

struct commit_bench {
        struct bench *bench;
        const char *label; /* of its output lines: "commit", "base_commit" */
        uint32_t nodes;
        struct commit_node *node;
        uint64_t step;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        uint32_t waiters_done;
        bool per_node;
};

static int connect_to(const char *socket, struct ckpt_conn **out) {
        int r = ckpt_connect(socket, out);
        if (r < 0)
                fprintf(stderr, "ckpt-bench: connect %s: %s (%s)\n", socket, ckpt_strerror(r),
                        ckpt_last_error(NULL));
        return r;
}

static void *commit_waiter_run(void *arg) {
        struct commit_waiter *w = arg;
        struct commit_bench *cb = w->node->cb;

        int r = ckpt_wait(w->conn, cb->bench->job, cb->step, CKPT_COMMITTED,
                          cb->bench->timeout_ms);
        double t = now_s();
        if (r < 0)
                fprintf(stderr, "ckpt-bench: node %u: wait committed, step %" PRIu64 ": %s (%s)\n",
                        w->node->index, cb->step, ckpt_strerror(r), ckpt_last_error(w->conn));
        pthread_mutex_lock(&cb->lock);
        w->t_committed = t;
        w->error = r;
        w->done = true;
        cb->waiters_done++;
        pthread_cond_broadcast(&cb->cond);
        pthread_mutex_unlock(&cb->lock);
        return NULL;
}

static void *commit_rank_finish(void *arg) {
        struct commit_rank *cr = arg;
        struct bench *b = cr->bench;

        cr->error = ckpt_save_finish(cr->save);
        cr->save = NULL;
        if (cr->error < 0) {
                fprintf(stderr, "ckpt-bench: rank %u: save_finish: %s (%s)\n", cr->rank,
                        ckpt_strerror(cr->error), ckpt_last_error(cr->conn));
                return NULL;
        }
        cr->error = ckpt_wait(cr->conn, b->job, cr->step, CKPT_LOCAL, b->timeout_ms);
        cr->t_local = now_s();
        if (cr->error < 0)
                fprintf(stderr, "ckpt-bench: rank %u: wait local: %s (%s)\n", cr->rank,
                        ckpt_strerror(cr->error), ckpt_last_error(cr->conn));
        return NULL;
}

static void *commit_node_commit(void *arg) {
        struct commit_node *n = arg;
        struct bench *b = n->cb->bench;

        n->commit_error = ckpt_commit(n->ranks[0].conn, b->job, n->cb->step, b->timeout_ms);
        if (n->commit_error < 0)
                fprintf(stderr, "ckpt-bench: node %u: commit: %s (%s)\n", n->index,
                        ckpt_strerror(n->commit_error), ckpt_last_error(n->ranks[0].conn));
        return NULL;
}

/* Wait until every waiter is done or `deadline` (CLOCK_MONOTONIC seconds,
 * 0: none) passes; true when all are done. */
static bool commit_waiters_wait(struct commit_bench *cb, double deadline) {
        pthread_mutex_lock(&cb->lock);
        while (cb->waiters_done < cb->nodes) {
                if (deadline <= 0) {
                        pthread_cond_wait(&cb->cond, &cb->lock);
                        continue;
                }
                /* the condvar's clock is CLOCK_REALTIME: poll in 1 ms steps
                 * (only the first warm-up step has a deadline) */
                pthread_mutex_unlock(&cb->lock);
                if (now_s() >= deadline)
                        return false;
                usleep(1000);
                pthread_mutex_lock(&cb->lock);
        }
        pthread_mutex_unlock(&cb->lock);
        return true;
}

/* Issue the per-node commits of today's daemons on nodes first.. at once. */
static int commit_per_node(struct commit_bench *cb, uint32_t first) {
        int r = 0;
        uint32_t started = first;
        for (uint32_t i = first; i < cb->nodes; i++, started++)
                if (pthread_create(&cb->node[i].commit_thread, NULL, commit_node_commit,
                                   &cb->node[i]) != 0) {
                        r = -EAGAIN;
                        break;
                }
        for (uint32_t i = first; i < started; i++) {
                pthread_join(cb->node[i].commit_thread, NULL);
                if (cb->node[i].commit_error < 0 && r == 0)
                        r = cb->node[i].commit_error;
        }
        return r;
}

/* A step failed while the waiters block on their connections: the
 * benchmark is over, and exiting is the only clean way to leave threads
 * that are inside ckpt_wait() (disconnecting under them is not). */
static _Noreturn void commit_abandon(void) {
        fflush(stdout);
        fprintf(stderr, "ckpt-bench: commit: giving up at the first failed step\n");
        exit(1);
}

/* One step; timed ones print their line. */
static int commit_step(struct commit_bench *cb, bool timed, bool detect) {
        struct bench *b = cb->bench;
        uint32_t rpn = b->ranks_per_node, world = cb->nodes * rpn;
        char name[32];
        int r = 0;

        cb->waiters_done = 0;
        for (uint32_t i = 0; i < cb->nodes; i++)
                for (uint32_t k = 0; k < rpn; k++) {
                        struct commit_rank *cr = &cb->node[i].ranks[k];
                        cr->step = cb->step;
                        cr->error = 0;
                        r = ckpt_save_begin(cr->conn, b->job, cb->step, cr->rank, world, &cr->save);
                        if (r < 0) {
                                fprintf(stderr, "ckpt-bench: rank %u: save_begin step %" PRIu64
                                                ": %s (%s)\n", cr->rank, cb->step,
                                        ckpt_strerror(r), ckpt_last_error(cr->conn));
                                return r;
                        }
                        for (uint32_t t = 0; t < b->tensors; t++) {
                                shard_name(name, sizeof(name), t);
                                r = ckpt_save_write(cr->save, name,
                                                    b->src + (uint64_t)t * b->tensor_size,
                                                    b->tensor_size);
                                if (r < 0) {
                                        fprintf(stderr, "ckpt-bench: rank %u: save_write: %s (%s)\n",
                                                cr->rank, ckpt_strerror(r),
                                                ckpt_last_error(cr->conn));
                                        return r;
                                }
                        }
                }

        uint32_t waiting = 0;
        for (; waiting < cb->nodes; waiting++) {
                struct commit_waiter *w = &cb->node[waiting].waiter;
                w->done = false;
                w->error = 0;
                if (pthread_create(&w->thread, NULL, commit_waiter_run, w) != 0)
                        break;
        }
        if (waiting < cb->nodes) {
                fprintf(stderr, "ckpt-bench: cannot start a waiter thread\n");
                return -EAGAIN;
        }
        usleep(5000);

        pthread_t *th = calloc(world, sizeof(*th));
        uint32_t started = 0;
        if (!th)
                r = -ENOMEM;
        for (uint32_t i = 0; i < cb->nodes && r == 0; i++)
                for (uint32_t k = 0; k < rpn; k++, started++)
                        if (pthread_create(&th[started], NULL, commit_rank_finish,
                                           &cb->node[i].ranks[k]) != 0) {
                                r = -EAGAIN;
                                break;
                        }
        for (uint32_t j = 0; j < started; j++)
                pthread_join(th[j], NULL);
        free(th);
        double t_local = 0;
        for (uint32_t i = 0; i < cb->nodes; i++)
                for (uint32_t k = 0; k < rpn; k++) {
                        struct commit_rank *cr = &cb->node[i].ranks[k];
                        if (cr->error < 0 && r == 0)
                                r = cr->error;
                        t_local = cr->t_local > t_local ? cr->t_local : t_local;
                }
        if (r < 0)
                commit_abandon();

        double t_issue = now_s();
        if (cb->per_node) {
                r = commit_per_node(cb, 0);
        } else {
                r = ckpt_commit(cb->node[0].ranks[0].conn, b->job, cb->step, b->timeout_ms);
                if (r < 0)
                        fprintf(stderr, "ckpt-bench: commit step %" PRIu64 ": %s (%s)\n", cb->step,
                                ckpt_strerror(r), ckpt_last_error(cb->node[0].ranks[0].conn));
        }
        double t_call = now_s();
        if (r == 0 && detect && !cb->per_node && !commit_waiters_wait(cb, t_call + 2.0)) {
                fprintf(stderr, "ckpt-bench: node 0's commit did not reach every node within "
                                "2 s: per-node commits from now on (a daemon before the cluster "
                                "commit)\n");
                cb->per_node = true;
                r = commit_per_node(cb, 1);
        }
        if (r == 0)
                commit_waiters_wait(cb, 0);
        if (r < 0)
                commit_abandon();
        for (uint32_t i = 0; i < waiting; i++)
                pthread_join(cb->node[i].waiter.thread, NULL);

        double last = 0, first = 0;
        for (uint32_t i = 0; i < cb->nodes; i++) {
                struct commit_waiter *w = &cb->node[i].waiter;
                if (w->error < 0)
                        return w->error;
                last = w->t_committed > last ? w->t_committed : last;
                first = i == 0 || w->t_committed < first ? w->t_committed : first;
        }
        if (!timed)
                return 0;
        printf("%s_step=%" PRIu64 " latency_s=%.6f call_s=%.6f issue_s=%.6f first_node_s=%.6f "
               "nodes_s=", cb->label, cb->step, last - t_local, t_call - t_issue, t_issue - t_local,
               first - t_local);
        for (uint32_t i = 0; i < cb->nodes; i++)
                printf("%s%.6f", i ? "," : "", cb->node[i].waiter.t_committed - t_local);
        printf("\n");
        fflush(stdout);
        return 0;
}

/* Connect ranks and waiters to the daemons of `list` (node 0 first) and
 * find the first step to save; cb->bench must be set. */
static int commit_bench_open(struct commit_bench *cb, const char *list, const char *label) {
        struct bench *b = cb->bench;
        char *sockets = strdup(list ? list : "");
        char *save_ptr = NULL, *tok;
        int r = 0;

        if (!sockets)
                return -ENOMEM;
        cb->label = label;
        pthread_mutex_init(&cb->lock, NULL);
        pthread_cond_init(&cb->cond, NULL);
        for (const char *p = sockets; *p; p++)
                cb->nodes += *p == ',';
        cb->nodes++;
        cb->node = calloc(cb->nodes, sizeof(*cb->node));
        if (!cb->node) {
                free(sockets);
                return -ENOMEM;
        }
        uint32_t i = 0;
        for (tok = strtok_r(sockets, ",", &save_ptr); tok && r == 0;
             tok = strtok_r(NULL, ",", &save_ptr), i++) {
                struct commit_node *n = &cb->node[i];
                n->cb = cb;
                n->index = i;
                n->waiter.node = n;
                n->ranks = calloc(b->ranks_per_node, sizeof(*n->ranks));
                if (!n->ranks) {
                        r = -ENOMEM;
                        break;
                }
                r = connect_to(tok, &n->waiter.conn);
                for (uint32_t k = 0; r == 0 && k < b->ranks_per_node; k++) {
                        n->ranks[k] = (struct commit_rank){ .bench = b,
                                                            .rank = i * b->ranks_per_node + k };
                        r = connect_to(tok, &n->ranks[k].conn);
                }
        }
        free(sockets);
        if (r == 0 && i != cb->nodes) {
                fprintf(stderr, "ckpt-bench: an empty entry in the socket list '%s'\n", list);
                r = -EINVAL;
        }
        if (r == 0) {
                uint64_t latest;
                r = ckpt_latest(cb->node[0].ranks[0].conn, b->job, &latest, NULL);
                cb->step = r == 0 ? latest + 1 : 1;
                r = r == -ENOENT ? 0 : r;
                if (r < 0)
                        fprintf(stderr, "ckpt-bench: latest: %s (%s)\n", ckpt_strerror(r),
                                ckpt_last_error(cb->node[0].ranks[0].conn));
        }
        return r;
}

static void commit_bench_close(struct commit_bench *cb) {
        for (uint32_t i = 0; cb->node && i < cb->nodes; i++) {
                ckpt_disconnect(cb->node[i].waiter.conn);
                for (uint32_t k = 0; cb->node[i].ranks && k < cb->bench->ranks_per_node; k++)
                        ckpt_disconnect(cb->node[i].ranks[k].conn);
                free(cb->node[i].ranks);
        }
        free(cb->node);
        pthread_cond_destroy(&cb->cond);
        pthread_mutex_destroy(&cb->lock);
}

/*
 * --sockets, and with --base-sockets a second set of daemons (another
 * build) measured in the same run: the two take turns step by step, which
 * goes first alternating, so that a burst of someone else's load on this
 * machine lands on both about equally.
 */
static int mode_commit(struct bench *b) {
        struct commit_bench cb[2] = { { .bench = b }, { .bench = b } };
        uint32_t sets = b->base_sockets ? 2 : 1;
        int r = commit_bench_open(&cb[0], b->sockets ? b->sockets : b->socket, "commit");

        if (r == 0 && sets == 2)
                r = commit_bench_open(&cb[1], b->base_sockets, "base_commit");
        if (r == 0 && sets == 2 && cb[1].nodes != cb[0].nodes) {
                fprintf(stderr, "ckpt-bench: --sockets and --base-sockets name different "
                                "numbers of daemons\n");
                r = -EINVAL;
        }
        if (r == 0) {
                printf("nodes=%u\nranks_per_node=%u\nsteps=%u\n", cb[0].nodes, b->ranks_per_node,
                       b->steps);
                fflush(stdout);
        }
        for (uint32_t s = 0; r == 0 && s < b->warmup + b->steps; s++)
                for (uint32_t j = 0; r == 0 && j < sets; j++) {
                        struct commit_bench *c = &cb[(s + j) % sets];
                        r = commit_step(c, s >= b->warmup, s == 0 && c->nodes > 1);
                        c->step++;
                }
        for (uint32_t j = 0; r == 0 && j < sets; j++)
                printf("%s_mode=%s\n", cb[j].label, cb[j].per_node ? "per-node" : "cluster");
        for (uint32_t j = 0; j < sets; j++)
                commit_bench_close(&cb[j]);
        return r;
}

static void usage(FILE *f) {
        fprintf(f, "usage: ckpt-bench [--socket PATH] [--job NAME] [--size BYTES] [--tensors K]\n"
                   "                  [--daemon-pid PID] [--no-commit] [--restore-streams N]\n"
                   "                  [--restore-strided] [--settle S] [--sockets P0,P1,..] "
                   "[--base-sockets P0,P1,..]\n"
                   "                  [--ranks-per-node R]"
                   " [--steps N] [--warmup W] [--timeout MS]\n"
                   "                  all|memcpy|stage|zerocopy|restore|random-read|flush-stage|"
                   "commit\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "job", required_argument, NULL, 'j' },
                { "size", required_argument, NULL, 'n' },
                { "tensors", required_argument, NULL, 'k' },
                { "daemon-pid", required_argument, NULL, 'p' },
                { "no-commit", no_argument, NULL, 'C' },
                { "restore-streams", required_argument, NULL, 'R' },
                { "restore-strided", no_argument, NULL, 'S' },
                { "settle", required_argument, NULL, 'Q' },
                { "sockets", required_argument, NULL, 'P' },
                { "base-sockets", required_argument, NULL, 'B' },
                { "ranks-per-node", required_argument, NULL, 'r' },
                { "steps", required_argument, NULL, 'N' },
                { "warmup", required_argument, NULL, 'W' },
                { "timeout", required_argument, NULL, 'T' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        struct bench b = { .job = "bench", .size = 1ull << 30, .tensors = 64, .commit = true,
                           .restore_streams = 1, .ranks_per_node = 2, .steps = 20,
                           .warmup = 2, .timeout_ms = 60000 };
        int c;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (c) {
                case 's': b.socket = optarg; break;
                case 'j': b.job = optarg; break;
                case 'n':
                        if (parse_size(optarg, &b.size) < 0 || b.size == 0) {
                                fprintf(stderr, "ckpt-bench: bad --size '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'k': b.tensors = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'p': b.daemon_pid = strtol(optarg, NULL, 10); break;
                case 'C': b.commit = false; break;
                case 'S': b.restore_strided = true; break;
                case 'Q': {
                        char *end;
                        b.settle_s = strtod(optarg, &end);
                        if (end == optarg || *end || !(b.settle_s >= 0 && b.settle_s <= 600)) {
                                fprintf(stderr, "ckpt-bench: --settle must be 0-600 seconds\n");
                                return 2;
                        }
                        break;
                }
                case 'R':
                        b.restore_streams = (uint32_t)strtoul(optarg, NULL, 10);
                        if (b.restore_streams < 1 || b.restore_streams > 16) {
                                fprintf(stderr, "ckpt-bench: --restore-streams must be 1-16\n");
                                return 2;
                        }
                        break;
                case 'P': b.sockets = optarg; break;
                case 'B': b.base_sockets = optarg; break;
                case 'r': b.ranks_per_node = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'N': b.steps = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'W': b.warmup = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'T': b.timeout_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind != argc - 1) {
                usage(stderr);
                return 2;
        }
        const char *mode = argv[optind];
        if (strcmp(mode, "all") && strcmp(mode, "memcpy") && strcmp(mode, "stage") &&
            strcmp(mode, "zerocopy") && strcmp(mode, "restore") && strcmp(mode, "random-read") &&
            strcmp(mode, "flush-stage") && strcmp(mode, "commit")) {
                usage(stderr);
                return 2;
        }
        if (b.tensors == 0 || b.size % b.tensors || (b.size / b.tensors) % 8) {
                fprintf(stderr, "ckpt-bench: --size must split into --tensors equal parts "
                                "(multiples of 8 bytes)\n");
                return 2;
        }
        b.tensor_size = b.size / b.tensors;
        if (b.ranks_per_node < 1 || b.ranks_per_node > 64) {
                fprintf(stderr, "ckpt-bench: --ranks-per-node must be 1-64\n");
                return 2;
        }
        bool flush_stage = !strcmp(mode, "flush-stage");
        bool commit = !strcmp(mode, "commit");
        if (commit && b.warmup < 1) {
                fprintf(stderr, "ckpt-bench: commit needs --warmup 1 or more (the first step "
                                "finds out whether a commit on node 0 reaches every node)\n");
                return 2;
        }
        b.src = alloc_prefaulted(b.size, true);
        /* flush-stage and commit read nothing back: no second buffer to hold */
        b.dst = flush_stage || commit ? b.src : alloc_prefaulted(b.size, false);
        /* no commit but the one of A that mode_flush_stage() makes itself */
        if (flush_stage)
                b.commit = false;
        if (!b.src || !b.dst) {
                fprintf(stderr, "ckpt-bench: cannot allocate 2 x %" PRIu64 " bytes\n", b.size);
                return 1;
        }
        printf("bytes=%" PRIu64 "\ntensors=%u\n", b.size, b.tensors);

        bool all = !strcmp(mode, "all");
        int r = 0;
        if (commit) {
                r = mode_commit(&b);
                fflush(stdout);
                return r < 0 ? 1 : 0;
        }
        if (strcmp(mode, "memcpy") && !flush_stage)
                r = bench_warmup(&b);
        /* the reference copy right before the staging it is compared with,
         * with the daemon idle (the warm-up is on disk by now) */
        if (r >= 0 && (all || !strcmp(mode, "memcpy")))
                mode_memcpy(&b);
        if (r >= 0 && (all || !strcmp(mode, "stage")))
                r = mode_stage(&b);
        if (r >= 0 && (all || !strcmp(mode, "zerocopy")))
                r = mode_zerocopy(&b);
        if (r >= 0 && (all || !strcmp(mode, "restore")))
                r = mode_restore(&b);
        if (r >= 0 && (all || !strcmp(mode, "random-read")))
                r = mode_random_read(&b);
        if (r >= 0 && flush_stage)
                r = mode_flush_stage(&b);
        ckpt_disconnect(b.conn);
        fflush(stdout);
        return r < 0 ? 1 : 0;
}
