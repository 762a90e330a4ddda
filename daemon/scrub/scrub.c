/* SPDX-License-Identifier: MIT */
/*
 * scrub — the background scrub (see scrub.h for what, when and how).
 *
 * The loop thread runs a small state machine: find the next committed rank
 * in the catalog, have the scrub's thread open it and parse its MANIFEST,
 * check the manifest, then have the thread read each shard a chunk at a
 * time and check its blocks, spacing the reads by the rate.  Exactly one
 * struct scrub_io is ever handed to the thread; while it is (io_busy) the
 * thread owns it and reads only s->m (not changed until it comes back) and
 * s->buf.  Everything else is the loop thread's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/ioprio.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "io/worker.h"
#include "local/manifest.h"
#include "scrub/scrub.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"

#define SCRUB_ALIGN 4096u
#define SCRUB_MANIFEST_MAX (256u << 20)
/* At most this often the position goes to the catalog (and at every
 * finding, pass start and end): a restart repeats at most this much. */
#define SCRUB_PERSIST_MS 1000
/* A catalog fault while looking for the next rank: try again after. */
#define SCRUB_RETRY_MS 10000
/* Smallest read under a rate: one read per 1/8 s keeps the pace even. */
#define SCRUB_CHUNK_MIN (64u << 10)

DEFINE_CLEANUP(struct manifest *, manifest_free)

enum scrub_fail {
        FAIL_NONE,
        FAIL_RANK_DIR,       /* the rank directory cannot be opened */
        FAIL_MANIFEST_READ,  /* MANIFEST missing or unreadable */
        FAIL_MANIFEST_PARSE, /* MANIFEST does not parse */
        FAIL_OPEN,           /* a shard file cannot be opened */
        FAIL_SIZE,           /* a shard file of the wrong size */
        FAIL_READ,           /* a read failed */
        FAIL_SHORT,          /* the file ended early (changed under us) */
};

struct scrub_io {
        struct work work;
        struct scrub *s;
        bool manifest;            /* in: open the rank, read its MANIFEST; else a shard read */
        bool want_idle;           /* in: read at I/O class idle (else the default) */
        bool named;               /* the thread has its name */
        int ioprio;               /* the class the thread reads at: -1 not set yet */
        int ioprio_error;         /* out: ioprio_set's -errno, 0 */
        char path[PATH_MAX];      /* in (manifest): the rank directory */
        int rank_fd;              /* owned, kept from the manifest to the rank's end */
        const struct manifest_shard *sh; /* in (read): borrowed from s->m */
        uint32_t block_size;
        int fd;                   /* the shard file, owned; -1: open it first */
        uint64_t offset;          /* in/out: next byte to verify */
        uint64_t length;          /* in: bytes to verify now */
        uint32_t block_crc;       /* in/out: CRC so far of the block offset is in */
        bool direct;              /* out: the file is read with O_DIRECT */
        /* out */
        enum scrub_fail fail;
        int error;                /* -errno of the failure */
        uint64_t file_size;
        struct manifest *m;       /* parsed manifest, handed to the loop */
        int64_t bad_block;        /* -1: none */
        uint64_t verified;        /* bytes checked by this read */
};

struct scrub_finding {
        int64_t uid; /* the job's owner; -1: not known (root only) */
        char text[CKPT_ERRMSG_MAX + 1];
};

struct scrub {
        struct loop *loop;
        struct catalog *progress;
        struct scrub_target *targets;
        size_t ntargets;
        struct scrub_options opts;
        struct scrub_ops ops;
        void *userdata;
        struct worker_pool *thread;
        void *buf;
        struct scrub_io io;
        bool io_busy, paused, freeing;
        struct loop_timer timer; /* the next pass, the next read under the rate, a retry */

        struct catalog_scrub_progress p;
        size_t target;       /* index of p.area in targets */
        struct manifest *m;  /* of the rank being verified; NULL: find the next rank */
        uint32_t shard_index;
        bool rank_bad;
        uint64_t last_persist_ms;
        uint64_t bytes_total;

        uint64_t tokens;     /* bytes that may be read now (rate > 0) */
        uint64_t tokens_ms;  /* when tokens was last topped up */
        uint64_t run_ms, run_since_ms, run_bytes; /* for the measured rate */
        uint64_t findings_count;
        struct scrub_finding findings[SCRUB_FINDINGS_KEPT]; /* [0] newest */
        size_t nfindings;
};

static void scrub_kick(struct scrub *s);

static bool scrub_in_pass(const struct scrub *s) {
        return s->p.pass > 0 && s->p.pass_finished_at == 0;
}

static int64_t wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the scrub's thread --------------------------------------------------------- */

static void io_manifest(struct scrub_io *io) {
        _cleanup_free_ char *text = NULL;
        size_t len;

        if (io->rank_fd >= 0)
                io->rank_fd = safe_close(io->rank_fd);
        io->rank_fd = open(io->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (io->rank_fd < 0) {
                io->fail = FAIL_RANK_DIR;
                io->error = -errno;
                return;
        }
        int r = fs_read_at(io->rank_fd, MANIFEST_FILE, SCRUB_MANIFEST_MAX, &text, &len);
        if (r < 0) {
                io->fail = FAIL_MANIFEST_READ;
                io->error = r;
                return;
        }
        r = manifest_parse(&io->m, text, len);
        if (r < 0) {
                io->fail = FAIL_MANIFEST_PARSE;
                io->error = r;
        }
}

static void io_shard_close(struct scrub_io *io) {
        io->fd = safe_close(io->fd);
}

static void io_shard_read(struct scrub_io *io) {
        const struct manifest_shard *sh = io->sh;

        if (io->fd < 0) {
                int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
                io->direct = true;
                io->fd = openat(io->rank_fd, sh->name, flags | O_DIRECT);
                if (io->fd < 0 && errno == EINVAL) {
                        /* a filesystem without O_DIRECT (tmpfs) */
                        io->direct = false;
                        io->fd = openat(io->rank_fd, sh->name, flags);
                }
                if (io->fd < 0) {
                        io->fail = FAIL_OPEN;
                        io->error = -errno;
                        return;
                }
                struct stat st;
                if (fstat(io->fd, &st) < 0) {
                        io->fail = FAIL_READ;
                        io->error = -errno;
                        io_shard_close(io);
                        return;
                }
                io->file_size = (uint64_t)st.st_size;
                if (io->file_size != sh->size) {
                        io->fail = FAIL_SIZE;
                        io->error = -EIO;
                        io_shard_close(io);
                        return;
                }
        }
        /* offset is a block boundary or where the last read stopped, both
         * multiples of 4 KiB; the length read is rounded up for O_DIRECT
         * (the file ends before it on the last piece) */
        uint64_t want = io->length, got = 0;
        uint64_t asked = ALIGN_UP(want, SCRUB_ALIGN);
        while (got < want) {
                ssize_t n = pread(io->fd, (char *)io->s->buf + got, asked - got,
                                  (off_t)(io->offset + got));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        io->fail = FAIL_READ;
                        io->error = -errno;
                        io_shard_close(io);
                        return;
                }
                if (n == 0)
                        break;
                got += (uint64_t)n;
        }
        if (got < want) {
                io->fail = FAIL_SHORT;
                io->error = -EIO;
                io->file_size = io->offset + got;
                io_shard_close(io);
                return;
        }
        const unsigned char *p = io->s->buf;
        uint64_t pos = io->offset, left = want;
        while (left > 0) {
                uint64_t block = pos / io->block_size;
                uint64_t end = MIN((block + 1) * io->block_size, sh->size);
                uint64_t take = MIN(left, end - pos);
                io->block_crc = crc32c(io->block_crc, p, take);
                p += take;
                pos += take;
                left -= take;
                if (pos == end) {
                        if (io->block_crc != sh->block_crcs[block]) {
                                io->bad_block = (int64_t)block;
                                break;
                        }
                        io->block_crc = 0;
                }
        }
        io->verified = pos - io->offset;
        io->offset = pos;
        if (io->bad_block >= 0 || pos == sh->size)
                io_shard_close(io);
}

static void io_run(struct work *w) {
        struct scrub_io *io = container_of(w, struct scrub_io, work);

        if (!io->named) {
                /* for ps -L, top -H and ionice -p: the thread that reads */
                io->named = true;
                prctl(PR_SET_NAME, "ckptd-scrub");
        }
        int want = io->want_idle ? IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)
                                 : IOPRIO_PRIO_VALUE(IOPRIO_CLASS_NONE, 0);
        if (io->ioprio != want) {
                /* this thread only (who = 0: the calling thread): the
                 * scrub's reads yield to everyone else's where the I/O
                 * scheduler knows classes (BFQ; mq-deadline since 5.14);
                 * class none: the default, from the thread's nice value */
                io->ioprio = want;
                if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, want) < 0)
                        io->ioprio_error = -errno;
        }
        io->fail = FAIL_NONE;
        io->error = 0;
        io->bad_block = -1;
        io->verified = 0;
        io->m = NULL;
        if (io->manifest)
                io_manifest(io);
        else
                io_shard_read(io); /* an empty shard: only opened and its size checked */
}

/* ---- position and findings ------------------------------------------------------ */

static void scrub_persist(struct scrub *s, bool now) {
        uint64_t t = loop_now_ms();
        if (!now && t - s->last_persist_ms < SCRUB_PERSIST_MS)
                return;
        s->last_persist_ms = t;
        /* the position's offset is the block boundary the read stopped
         * in, so the bytes after it are counted again after a restart */
        struct catalog_scrub_progress p = s->p;
        if (s->m && s->shard_index < s->m->nshards && s->io.fd >= 0 && !s->io_busy) {
                uint64_t at = ALIGN_DOWN(s->io.offset, s->m->block_size);
                p.offset = at;
                p.bytes_verified -= MIN(p.bytes_verified, s->io.offset - at);
        }
        /* (void): catalog.c logs a fault; the scrub goes on and a restart
         * repeats more of the pass */
        (void)catalog_scrub_progress_set(s->progress, &p);
}

/* Long names make long findings: they are cut, not refused. */
static void copy_truncated(char *dst, size_t size, const char *src) {
        size_t n = strnlen(src, size - 1);
        memcpy(dst, src, n);
        dst[n] = '\0';
}

static const char *area_words(int32_t area, char *buf, size_t n) {
        if (area < 0)
                return "";
        snprintf(buf, n, " (replica of node %d)", area);
        return buf;
}

static void scrub_found(struct scrub *s, const char *shard, int64_t block, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void scrub_found(struct scrub *s, const char *shard, int64_t block, const char *fmt, ...) {
        const struct scrub_target *t = &s->targets[s->target];
        char detail[CKPT_ERRMSG_MAX], where[48];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(detail, sizeof(detail), fmt, ap);
        va_end(ap);
        s->rank_bad = true;
        s->findings_count++;

        memmove(&s->findings[1], &s->findings[0],
                sizeof(s->findings[0]) * (SCRUB_FINDINGS_KEPT - 1));
        s->nfindings = MIN(s->nfindings + 1, (size_t)SCRUB_FINDINGS_KEPT);
        struct scrub_finding *f = &s->findings[0];
        uint32_t uid;
        f->uid = catalog_job_uid(t->catalog, s->p.job, &uid) == 0 ? (int64_t)uid : -1;
        char text[2 * CKPT_ERRMSG_MAX + 2 * CKPT_NAME_MAX];
        snprintf(text, sizeof(text), "job %s step %" PRIu64 " rank %u%s%s%s: %s", s->p.job,
                 s->p.step, s->p.rank, area_words(t->area, where, sizeof(where)),
                 shard ? ": shard " : "", shard ? shard : "", detail);
        copy_truncated(f->text, sizeof(f->text), text);
        copy_truncated(s->p.last_finding, sizeof(s->p.last_finding), text);
        log_debug("scrub: pass %" PRIu64 ": %s", s->p.pass, f->text);
        if (s->ops.bad_copy)
                s->ops.bad_copy(s->userdata, s->p.job, s->p.step, s->p.rank, t->area, shard, block,
                                detail);
}

/* ---- the walk ---------------------------------------------------------------------- */

static void running_update(struct scrub *s) {
        bool running = scrub_in_pass(s) && s->opts.enabled && !s->paused && !s->freeing;
        uint64_t now = loop_now_ms();
        if (running && !s->run_since_ms) {
                s->run_since_ms = now;
                /* a fresh stretch starts with one chunk's worth, not with
                 * what it saved up while held */
                s->tokens = 0;
                s->tokens_ms = now;
        } else if (!running && s->run_since_ms) {
                s->run_ms += now - s->run_since_ms;
                s->run_since_ms = 0;
        }
}

static void scrub_bytes_total(struct scrub *s) {
        s->bytes_total = 0;
        for (size_t i = 0; i < s->ntargets; i++) {
                uint64_t b;
                if (catalog_committed_bytes(s->targets[i].catalog, &b) == 0)
                        s->bytes_total += b;
        }
}

static void position_reset(struct scrub *s, size_t target) {
        s->target = target;
        s->p.area = target < s->ntargets ? s->targets[target].area : -1;
        s->p.job[0] = '\0';
        s->p.step = 0;
        s->p.rank = 0;
        s->p.shard[0] = '\0';
        s->p.offset = 0;
}

static void pass_begin(struct scrub *s) {
        s->p.pass++;
        s->p.pass_started_at = wall_ms() / 1000;
        s->p.pass_finished_at = 0;
        s->p.bytes_verified = s->p.copies_verified = s->p.copies_bad = 0;
        position_reset(s, 0);
        scrub_bytes_total(s);
        log_info("scrub: pass %" PRIu64 " started over %" PRIu64 " MiB of committed copies",
                 s->p.pass, s->bytes_total >> 20);
        scrub_persist(s, true);
}

static void pass_end(struct scrub *s) {
        s->p.pass_finished_at = wall_ms() / 1000;
        log_info("scrub: pass %" PRIu64 " done: %" PRIu64 " copies (%" PRIu64 " MiB) verified, %"
                 PRIu64 " bad", s->p.pass, s->p.copies_verified, s->p.bytes_verified >> 20,
                 s->p.copies_bad);
        position_reset(s, 0);
        scrub_persist(s, true);
}

/* counted: the rank was a copy (not one removed under the scrub) */
static void rank_end(struct scrub *s, bool counted) {
        s->p.copies_verified += counted;
        s->p.copies_bad += counted && s->rank_bad;
        s->rank_bad = false;
        s->m = manifest_free(s->m);
        s->io.rank_fd = safe_close(s->io.rank_fd);
        s->p.rank++;
        s->p.shard[0] = '\0';
        s->p.offset = 0;
        s->shard_index = 0;
}

static void shard_next(struct scrub *s) {
        s->shard_index++;
        s->p.offset = 0;
        s->io.offset = 0;
        s->io.block_crc = 0;
        s->io.fd = safe_close(s->io.fd);
        if (s->m && s->shard_index < s->m->nshards)
                snprintf(s->p.shard, sizeof(s->p.shard), "%s", s->m->shards[s->shard_index].name);
}

static void io_submit(struct scrub *s) {
        s->io.want_idle = s->opts.idle_priority;
        s->io_busy = true;
        worker_pool_submit(s->thread, &s->io.work);
}

static void timer_fired(struct loop_timer *t) {
        struct scrub *s = container_of(t, struct scrub, timer);
        if (!scrub_in_pass(s) && s->opts.enabled && !s->paused)
                pass_begin(s);
        scrub_kick(s);
}

static uint64_t chunk_size(const struct scrub *s) {
        if (!s->opts.rate)
                return SCRUB_BUFFER_SIZE;
        uint64_t c = ALIGN_DOWN(s->opts.rate / 8, SCRUB_ALIGN);
        return MIN(MAX(c, (uint64_t)SCRUB_CHUNK_MIN), (uint64_t)SCRUB_BUFFER_SIZE);
}

/* Whether `len` bytes may be read now; else the timer is armed for when. */
static bool rate_allows(struct scrub *s, uint64_t len) {
        if (!s->opts.rate)
                return true;
        uint64_t now = loop_now_ms();
        /* two reads' worth: a timer that fires late (the loop was busy)
         * is made up for by the next read, instead of lost */
        uint64_t burst = 2 * chunk_size(s);
        /* (the elapsed time bounded, so that a long wait cannot overflow) */
        uint64_t elapsed = MIN(now - s->tokens_ms, (uint64_t)10000);
        s->tokens = MIN(burst, s->tokens + elapsed * s->opts.rate / 1000);
        s->tokens_ms = now;
        if (s->tokens >= len) {
                s->tokens -= len;
                return true;
        }
        uint64_t wait = ((len - s->tokens) * 1000 + s->opts.rate - 1) / s->opts.rate;
        loop_timer_start(s->loop, &s->timer, MAX(wait, (uint64_t)1), timer_fired);
        return false;
}

/* The next thing to do, unless something is under way or waited for. */
static void scrub_kick(struct scrub *s) {
        if (s->io_busy || s->freeing || loop_timer_armed(&s->timer))
                return;
        running_update(s);
        if (!s->opts.enabled || s->paused)
                return;
        if (!scrub_in_pass(s)) {
                int64_t now = wall_ms();
                /* at most an interval from now: a clock set back must not
                 * put the next pass off by as much */
                int64_t next = MIN(s->p.pass_started_at * 1000, now) +
                               (int64_t)s->opts.interval_ms;
                if (next > now) {
                        loop_timer_start(s->loop, &s->timer, (uint64_t)(next - now), timer_fired);
                        return;
                }
                pass_begin(s);
                running_update(s);
        }
        for (;;) {
                if (!s->m) {
                        if (s->target >= s->ntargets) {
                                pass_end(s);
                                running_update(s);
                                scrub_kick(s); /* arms the next pass */
                                return;
                        }
                        const struct scrub_target *t = &s->targets[s->target];
                        char job[CKPT_NAME_MAX + 1];
                        uint64_t step;
                        uint32_t rank;
                        int r = catalog_committed_rank_next(t->catalog, s->p.job, s->p.step,
                                                            s->p.rank, job, &step, &rank);
                        if (r == -ENOENT) {
                                position_reset(s, s->target + 1);
                                continue;
                        }
                        if (r < 0) {
                                loop_timer_start(s->loop, &s->timer, SCRUB_RETRY_MS, timer_fired);
                                return;
                        }
                        if (strcmp(job, s->p.job) || step != s->p.step || rank != s->p.rank) {
                                /* a rank of its own, not the one a restart left off in */
                                snprintf(s->p.job, sizeof(s->p.job), "%s", job);
                                s->p.step = step;
                                s->p.rank = rank;
                                s->p.shard[0] = '\0';
                                s->p.offset = 0;
                        }
                        char step_name[32];
                        snprintf(step_name, sizeof(step_name), "%020" PRIu64, step);
                        int n = snprintf(s->io.path, sizeof(s->io.path), "%s/jobs/%s/%s/rank-%u",
                                         store_dir(t->store), job, step_name, rank);
                        if (n < 0 || (size_t)n >= sizeof(s->io.path)) {
                                s->p.rank++;
                                continue;
                        }
                        s->io.manifest = true;
                        io_submit(s);
                        return;
                }
                if (s->shard_index >= s->m->nshards) {
                        rank_end(s, true);
                        scrub_persist(s, false);
                        continue;
                }
                const struct manifest_shard *sh = &s->m->shards[s->shard_index];
                uint64_t len = MIN(chunk_size(s), sh->size - MIN(sh->size, s->io.offset));
                if (len && !rate_allows(s, len))
                        return;
                s->io.manifest = false;
                s->io.sh = sh;
                s->io.block_size = s->m->block_size;
                s->io.length = len;
                io_submit(s);
                return;
        }
}

/* Whether the rank being verified is still a committed one in the
 * catalog: a file that vanished under the scrub because retention removed
 * its step (or a repair replaced the rank) is no finding. */
static bool rank_still_committed(struct scrub *s) {
        const struct scrub_target *t = &s->targets[s->target];
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;

        return catalog_committed_rank_next(t->catalog, s->p.job, s->p.step, s->p.rank, job, &step,
                                           &rank) == 0 &&
               !strcmp(job, s->p.job) && step == s->p.step && rank == s->p.rank;
}

/* The MANIFEST came back: check it, then verify its shards (from where a
 * restart left off, if this is that rank). */
static void manifest_done(struct scrub *s) {
        struct scrub_io *io = &s->io;
        const struct scrub_target *t = &s->targets[s->target];
        _cleanup_(manifest_freep) struct manifest *m = io->m;
        io->m = NULL;

        if (io->fail == FAIL_RANK_DIR) {
                bool counted = rank_still_committed(s);
                if (counted)
                        scrub_found(s, NULL, -1, "the rank directory cannot be opened: %s",
                                    strerror(-io->error));
                rank_end(s, counted);
                return;
        }
        if (io->fail == FAIL_MANIFEST_READ) {
                scrub_found(s, NULL, -1, io->error == -ENOENT ? "MANIFEST is missing"
                                                               : "MANIFEST cannot be read: %s",
                            strerror(-io->error));
                rank_end(s, true);
                return;
        }
        if (io->fail == FAIL_MANIFEST_PARSE) {
                scrub_found(s, NULL, -1, "MANIFEST does not parse (%s)", strerror(-io->error));
                rank_end(s, true);
                return;
        }
        if (strcmp(m->job, s->p.job) || m->step != s->p.step || m->rank != s->p.rank) {
                scrub_found(s, NULL, -1, "MANIFEST is another rank's: it names job %s step %"
                            PRIu64 " rank %u", m->job, m->step, m->rank);
                rank_end(s, true);
                return;
        }
        if (catalog_rank_matches(t->catalog, m) != 1) {
                scrub_found(s, NULL, -1, "MANIFEST does not match the shards the catalog "
                            "recorded at commit (names, sizes or CRC32Cs differ)");
                rank_end(s, true);
                return;
        }
        s->m = m;
        m = NULL;
        s->shard_index = 0;
        uint64_t offset = 0;
        if (s->p.shard[0]) {
                for (uint32_t i = 0; i < s->m->nshards; i++)
                        if (!strcmp(s->m->shards[i].name, s->p.shard)) {
                                s->shard_index = i;
                                offset = s->p.offset;
                                break;
                        }
                const struct manifest_shard *sh = &s->m->shards[s->shard_index];
                if (offset % s->m->block_size || offset > sh->size)
                        offset = 0;
        }
        if (s->m->nshards)
                snprintf(s->p.shard, sizeof(s->p.shard), "%s", s->m->shards[s->shard_index].name);
        s->p.offset = offset;
        io->offset = offset;
        io->block_crc = 0;
        io->fd = safe_close(io->fd);
}

static void read_done(struct scrub *s) {
        struct scrub_io *io = &s->io;
        const struct manifest_shard *sh = &s->m->shards[s->shard_index];

        s->p.bytes_verified += io->verified;
        s->run_bytes += io->verified;
        bool bad = true;
        switch (io->fail) {
        case FAIL_OPEN:
                if (io->error == -ENOENT && !rank_still_committed(s)) {
                        rank_end(s, false);
                        return;
                }
                if (io->error == -ENOENT)
                        scrub_found(s, sh->name, -1, "the file is missing");
                else
                        scrub_found(s, sh->name, -1, "the file cannot be opened: %s",
                                    strerror(-io->error));
                break;
        case FAIL_SIZE:
                scrub_found(s, sh->name, -1, "the file is %" PRIu64 " bytes, MANIFEST says %"
                            PRIu64, io->file_size, sh->size);
                break;
        case FAIL_SHORT:
                scrub_found(s, sh->name, -1, "the file ends at byte %" PRIu64 ", MANIFEST says %"
                            PRIu64, io->file_size, sh->size);
                break;
        case FAIL_READ:
                scrub_found(s, sh->name, -1, "read failed near byte %" PRIu64 ": %s",
                            io->offset, strerror(-io->error));
                break;
        default:
                if (io->bad_block < 0) {
                        bad = false;
                        break;
                }
                uint64_t from = (uint64_t)io->bad_block * s->m->block_size;
                uint64_t to = MIN(from + s->m->block_size, sh->size);
                scrub_found(s, sh->name, io->bad_block,
                            "block %" PRId64 " (bytes %" PRIu64 " to %" PRIu64 ") failed its "
                            "CRC32C", io->bad_block, from, to - 1);
                break;
        }
        if (bad) {
                /* the rest of a bad shard is not read: the copy is bad
                 * either way, and its repair replaces all of it */
                shard_next(s);
                scrub_persist(s, true);
                return;
        }
        if (io->fd < 0) /* the shard is done */
                shard_next(s);
        else
                s->p.offset = ALIGN_DOWN(io->offset, s->m->block_size);
        scrub_persist(s, false);
}

static void io_done(struct work *w) {
        struct scrub_io *io = container_of(w, struct scrub_io, work);
        struct scrub *s = io->s;

        s->io_busy = false;
        if (io->ioprio_error) {
                log_warn("scrub: cannot read at I/O class idle (%s); reading at the default "
                         "class, still at the configured rate", strerror(-io->ioprio_error));
                io->ioprio_error = 0;
        }
        if (s->freeing) {
                io->m = manifest_free(io->m);
                return;
        }
        if (io->manifest)
                manifest_done(s);
        else
                read_done(s);
        scrub_kick(s);
}

/* ---- the API ----------------------------------------------------------------------- */

int scrub_new(struct scrub **out, struct loop *loop, struct catalog *progress,
              const struct scrub_target *targets, size_t ntargets,
              const struct scrub_options *opts, const struct scrub_ops *ops, void *userdata) {
        struct scrub *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return -ENOMEM;
        s->loop = loop;
        s->progress = progress;
        s->opts = *opts;
        s->ops = *ops;
        s->userdata = userdata;
        s->io.s = s;
        s->io.fd = s->io.rank_fd = -1;
        s->io.ioprio = -1;
        s->io.work.run = io_run;
        s->io.work.done = io_done;
        list_init(&s->timer.link);
        s->targets = calloc(ntargets ? ntargets : 1, sizeof(*targets));
        r = s->targets ? posix_memalign(&s->buf, SCRUB_ALIGN, SCRUB_BUFFER_SIZE) : ENOMEM;
        if (r) {
                s->buf = NULL;
                scrub_free(s);
                return -r;
        }
        memcpy(s->targets, targets, ntargets * sizeof(*targets));
        s->ntargets = ntargets;
        r = worker_pool_new(&s->thread, loop, 1);
        if (r < 0) {
                scrub_free(s);
                return r;
        }
        r = catalog_scrub_progress_get(progress, &s->p);
        if (r < 0) {
                /* never scrubbed here (or the row is unreadable): the
                 * first pass comes an interval from now, as if a pass 0
                 * had started now — a new node has nothing to verify,
                 * and an upgraded one is not read end to end at once */
                memset(&s->p, 0, sizeof(s->p));
                s->p.pass_started_at = s->p.pass_finished_at = wall_ms() / 1000;
                position_reset(s, 0);
                scrub_persist(s, true);
        } else if (scrub_in_pass(s)) {
                size_t i = 0;
                while (i < ntargets && targets[i].area != s->p.area)
                        i++;
                s->target = i;
                if (i == ntargets) /* that replica area is gone: walk the rest again */
                        position_reset(s, 0);
                scrub_bytes_total(s);
                log_info("scrub: resuming pass %" PRIu64 " at job %s step %" PRIu64 " rank %u "
                         "shard %s offset %" PRIu64 " (%" PRIu64 " MiB verified)", s->p.pass,
                         s->p.job[0] ? s->p.job : "-", s->p.step, s->p.rank,
                         s->p.shard[0] ? s->p.shard : "-", s->p.offset,
                         s->p.bytes_verified >> 20);
        }
        scrub_kick(s);
        *out = s;
        return 0;
}

struct scrub *scrub_free(struct scrub *s) {
        if (!s)
                return NULL;
        s->freeing = true;
        loop_timer_cancel(&s->timer);
        /* the read in flight finishes; its done() sees freeing */
        s->thread = worker_pool_free(s->thread);
        if (s->targets && s->p.pass_started_at)
                scrub_persist(s, true);
        s->io.fd = safe_close(s->io.fd);
        s->io.rank_fd = safe_close(s->io.rank_fd);
        manifest_free(s->m);
        free(s->buf);
        free(s->targets);
        free(s);
        return NULL;
}

void scrub_set_options(struct scrub *s, const struct scrub_options *opts) {
        s->opts = *opts;
        /* whatever the timer waits for (the next pass, the next read, a
         * retry) is worked out again under the new options */
        loop_timer_cancel(&s->timer);
        s->tokens = 0;
        s->tokens_ms = loop_now_ms();
        running_update(s);
        scrub_kick(s);
}

void scrub_pause(struct scrub *s, bool paused) {
        if (s->paused == paused)
                return;
        s->paused = paused;
        if (paused)
                running_update(s);
        else
                scrub_kick(s);
}

void scrub_status(const struct scrub *s, int64_t uid, struct ckpt_rep_status *st) {
        if (!s || !s->opts.enabled) {
                st->scrub_state = CKPT_SCRUB_OFF;
                return;
        }
        bool in_pass = scrub_in_pass(s);
        st->scrub_state = !in_pass ? CKPT_SCRUB_WAITING
                        : s->paused ? CKPT_SCRUB_PAUSED
                                    : CKPT_SCRUB_RUNNING;
        st->scrub_pass = s->p.pass;
        st->scrub_bytes_verified = s->p.bytes_verified;
        st->scrub_bytes_total = MAX(s->bytes_total, s->p.bytes_verified);
        st->scrub_copies_verified = s->p.copies_verified;
        st->scrub_copies_bad = s->p.copies_bad;
        st->scrub_rate = s->opts.rate;
        uint64_t ms = s->run_ms + (s->run_since_ms ? loop_now_ms() - s->run_since_ms : 0);
        st->scrub_rate_measured = ms ? s->run_bytes * 1000 / ms : 0;
        st->scrub_pass_started_at = s->p.pass_started_at;
        st->scrub_pass_finished_at = in_pass ? 0 : s->p.pass_finished_at;
        if (!in_pass)
                st->scrub_next_pass_at = s->p.pass_started_at +
                                         (int64_t)(s->opts.interval_ms / 1000);
        st->scrub_findings = s->findings_count;
        size_t used = 0;
        st->scrub_last_findings[0] = '\0';
        for (size_t i = 0; i < s->nfindings; i++) {
                const struct scrub_finding *f = &s->findings[i];
                if (uid >= 0 && f->uid != uid)
                        continue;
                int n = snprintf(st->scrub_last_findings + used,
                                 sizeof(st->scrub_last_findings) - used, "%s%s",
                                 used ? "; " : "", f->text);
                if (n < 0 || (size_t)n >= sizeof(st->scrub_last_findings) - used)
                        break;
                used += (size_t)n;
        }
}
