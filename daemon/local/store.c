/* SPDX-License-Identifier: MIT */
/*
 * store — the local tier (see store.h for layout and rules).
 *
 * Three parts: the transfer engine (slot <-> file through the ring, split
 * into io_size pieces, queue_depth in flight), the rank/step lifecycle
 * (tmp dir -> fsync -> MANIFEST -> atomic rename; COMMITTED record; trash),
 * and the start-up scan that rebuilds what exists from the disk alone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt-proto.h"
#include "local/store.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"

#define STORE_ALIGN 4096u
#define MANIFEST_READ_MAX (256u << 20)

struct store {
        char *state_dir;
        int state_fd, jobs_fd, trash_fd;
        struct loop *loop;
        struct worker_pool *workers;
        struct pool *pool;
        struct store_options opts;
        struct list queue; /* xfers with bytes not yet submitted */
        uint32_t inflight;
        uint64_t bytes_written, bytes_read;
        uint64_t trash_seq;
        uint64_t tmp_seq;          /* rank writers' directory names */
        bool direct_unsupported_logged;
        /* one-entry manifest cache: restores read a rank's shards in turn */
        char cache_job[CKPT_NAME_MAX + 1];
        uint64_t cache_step;
        uint32_t cache_rank;
        struct manifest *cache;
};

struct store_piece {
        struct loop_req req;
        struct store *store;
        struct store_xfer *xfer;
        uint64_t offset; /* within the xfer */
        uint64_t length;
};

struct rank_writer {
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
        int jobs_fd;           /* borrowed from the store */
        int job_fd, step_fd;   /* owned */
        char tmp_name[64];
        char final_name[32];
        int tmp_fd;            /* owned */
        uint32_t nfiles, cap;
        int *fds;              /* owned */
        uint64_t *sizes;
};

static void step_dir_name(char buf[32], uint64_t step) {
        snprintf(buf, 32, "%020" PRIu64, step);
}

int store_open(struct store **out, const char *state_dir, struct loop *loop,
               struct worker_pool *workers, struct pool *pool,
               const struct store_options *opts) {
        _cleanup_free_ struct store *s = calloc(1, sizeof(*s));
        int r;

        if (!s)
                return -ENOMEM;
        s->state_fd = s->jobs_fd = s->trash_fd = -1;
        s->loop = loop;
        s->workers = workers;
        s->pool = pool;
        s->opts = *opts;
        list_init(&s->queue);
        s->state_dir = strdup(state_dir);
        if (!s->state_dir)
                return -ENOMEM;

        r = fs_mkdir_p(state_dir, 0750);
        if (r < 0) {
                log_error("store: cannot create state directory %s: %s", state_dir, strerror(-r));
                free(s->state_dir);
                return r;
        }
        s->state_fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->state_fd < 0)
                goto fail_errno;
        if (mkdirat(s->state_fd, "jobs", 0750) < 0 && errno != EEXIST)
                goto fail_errno;
        if (mkdirat(s->state_fd, "trash", 0700) < 0 && errno != EEXIST)
                goto fail_errno;
        s->jobs_fd = openat(s->state_fd, "jobs", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->jobs_fd < 0)
                goto fail_errno;
        s->trash_fd = openat(s->state_fd, "trash", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (s->trash_fd < 0)
                goto fail_errno;
        *out = TAKE_PTR(s);
        return 0;

fail_errno:
        r = -errno;
        log_error("store: cannot open state directory %s: %m", state_dir);
        safe_close(s->state_fd);
        safe_close(s->jobs_fd);
        safe_close(s->trash_fd);
        free(s->state_dir);
        return r;
}

struct store *store_free(struct store *s) {
        if (!s)
                return NULL;
        manifest_free(s->cache);
        safe_close(s->state_fd);
        safe_close(s->jobs_fd);
        safe_close(s->trash_fd);
        free(s->state_dir);
        free(s);
        return NULL;
}

void store_set_options(struct store *s, const struct store_options *opts) {
        s->opts = *opts;
}

const char *store_dir(const struct store *s) {
        return s->state_dir;
}

uint64_t store_bytes_written(const struct store *s) {
        return s->bytes_written;
}

uint64_t store_bytes_read(const struct store *s) {
        return s->bytes_read;
}

/* ---- transfer engine ------------------------------------------------------ */

static void store_pump(struct store *s);

static void xfer_maybe_done(struct store_xfer *x) {
        if (x->inflight > 0)
                return;
        if (x->error) {
                if (list_linked(&x->link))
                        list_unlink(&x->link);
                x->done(x, x->error);
        } else if (x->completed == x->length) {
                x->done(x, 0);
        }
}

static void piece_submit(struct store *s, struct store_xfer *x, uint64_t offset, uint64_t length);

static void piece_done(struct loop_req *req, int res) {
        struct store_piece *p = container_of(req, struct store_piece, req);
        struct store *s = p->store;
        struct store_xfer *x = p->xfer;
        uint64_t offset = p->offset, length = p->length;

        free(p);
        s->inflight--;
        x->inflight--;

        if (res < 0) {
                if (!x->error) {
                        x->error = res;
                        log_error("store: %s at offset %" PRIu64 " failed: %s",
                                  x->write ? "write" : "read", x->file_offset + offset,
                                  strerror(-res));
                }
        } else if ((uint64_t)res < length) {
                if (x->write) {
                        /* Short O_DIRECT writes are rare but legal: send the
                         * rest as a new piece. */
                        x->completed += (uint64_t)res;
                        s->bytes_written += (uint64_t)res;
                        if (res == 0) {
                                if (!x->error)
                                        x->error = -EIO;
                        } else {
                                piece_submit(s, x, offset + (uint64_t)res, length - (uint64_t)res);
                        }
                } else {
                        /* End of file: the rest of the window is padding. */
                        memset((char *)x->slot->addr + x->slot_offset + offset + (uint64_t)res, 0,
                               length - (uint64_t)res);
                        x->completed += length;
                        s->bytes_read += (uint64_t)res;
                }
        } else {
                x->completed += length;
                if (x->write)
                        s->bytes_written += length;
                else
                        s->bytes_read += length;
        }

        xfer_maybe_done(x);
        store_pump(s);
}

static void piece_submit(struct store *s, struct store_xfer *x, uint64_t offset, uint64_t length) {
        struct store_piece *p = calloc(1, sizeof(*p));
        if (!p) {
                if (!x->error)
                        x->error = -ENOMEM;
                return;
        }
        p->req.done = piece_done;
        p->store = s;
        p->xfer = x;
        p->offset = offset;
        p->length = length;

        struct io_uring_sqe *sqe = loop_sqe(s->loop, &p->req);
        void *addr = (char *)x->slot->addr + x->slot_offset + offset;
        off_t foff = (off_t)(x->file_offset + offset);
        if (pool_fixed(s->pool)) {
                if (x->write)
                        io_uring_prep_write_fixed(sqe, x->fd, addr, (unsigned)length, foff,
                                                  (int)x->slot->id);
                else
                        io_uring_prep_read_fixed(sqe, x->fd, addr, (unsigned)length, foff,
                                                 (int)x->slot->id);
        } else {
                if (x->write)
                        io_uring_prep_write(sqe, x->fd, addr, (unsigned)length, (uint64_t)foff);
                else
                        io_uring_prep_read(sqe, x->fd, addr, (unsigned)length, (uint64_t)foff);
        }
        x->inflight++;
        s->inflight++;
}

static void store_pump(struct store *s) {
        while (s->inflight < s->opts.queue_depth && !list_empty(&s->queue)) {
                struct store_xfer *x = list_first_entry(&s->queue, struct store_xfer, link);
                if (x->error) {
                        list_unlink(&x->link);
                        xfer_maybe_done(x);
                        continue;
                }
                uint64_t len = MIN(s->opts.io_size, x->length - x->submitted);
                piece_submit(s, x, x->submitted, len);
                x->submitted += len;
                if (x->submitted == x->length)
                        list_unlink(&x->link);
        }
}

static void store_queue(struct store *s, struct store_xfer *x) {
        x->submitted = x->completed = 0;
        x->inflight = 0;
        x->error = 0;
        list_init(&x->link);
        if (x->length == 0) {
                x->done(x, 0);
                return;
        }
        list_add_tail(&s->queue, &x->link);
        store_pump(s);
}

void store_write(struct store *s, struct store_xfer *x) {
        x->write = true;
        store_queue(s, x);
}

void store_read(struct store *s, struct store_xfer *x) {
        x->write = false;
        store_queue(s, x);
}

uint64_t store_pad_tail(struct store *s, void *window, uint64_t len) {
        if (!s->opts.direct_io)
                return len;
        uint64_t padded = ALIGN_UP(len, STORE_ALIGN);
        if (padded > len)
                memset((char *)window + len, 0, padded - len);
        return padded;
}

/* ---- rank writer ------------------------------------------------------------ */

static struct rank_writer *rank_writer_free(struct rank_writer *rw) {
        if (!rw)
                return NULL;
        for (uint32_t i = 0; i < rw->nfiles; i++)
                safe_close(rw->fds[i]);
        free(rw->fds);
        free(rw->sizes);
        safe_close(rw->tmp_fd);
        safe_close(rw->step_fd);
        safe_close(rw->job_fd);
        free(rw);
        return NULL;
}
DEFINE_CLEANUP(struct rank_writer *, rank_writer_free)

/* A unique name in trash/ for a tree about to be deleted. */
static void store_trash_name(struct store *s, char buf[64]) {
        snprintf(buf, 64, "%ld-%" PRIu64, (long)getpid(), ++s->trash_seq);
}

struct trash_work {
        struct work work;
        int trash_fd;
        char name[64];
};

static void trash_work_run(struct work *w) {
        struct trash_work *t = container_of(w, struct trash_work, work);
        int r = fs_rm_rf_at(t->trash_fd, t->name);
        if (r < 0)
                log_warn("store: removing trash/%s: %s", t->name, strerror(-r));
}

static void trash_work_done(struct work *w) {
        free(container_of(w, struct trash_work, work));
}

/* Move dirfd/name into trash and delete it on a worker.  The rename is
 * atomic, so a crash leaves either the old tree or trash (emptied at start). */
static int store_trash(struct store *s, int dirfd, const char *name) {
        struct trash_work *t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        store_trash_name(s, t->name);
        if (renameat(dirfd, name, s->trash_fd, t->name) < 0) {
                int r = -errno;
                free(t);
                return r;
        }
        t->trash_fd = s->trash_fd;
        t->work.run = trash_work_run;
        t->work.done = trash_work_done;
        worker_pool_submit(s->workers, &t->work);
        return 0;
}

int store_rank_begin(struct store *s, const char *job, uint64_t step, uint32_t rank,
                     struct rank_writer **out) {
        _cleanup_(rank_writer_freep) struct rank_writer *rw = calloc(1, sizeof(*rw));
        char step_name[32];
        int r;

        if (!rw)
                return -ENOMEM;
        rw->job_fd = rw->step_fd = rw->tmp_fd = -1;
        snprintf(rw->job, sizeof(rw->job), "%s", job);
        rw->step = step;
        rw->rank = rank;
        rw->jobs_fd = s->jobs_fd;
        /* Each attempt has its own: two at the same rank (a transfer sent
         * again while the first one's finish still runs) never touch each
         * other's directory; the last to finish is the one kept. */
        snprintf(rw->tmp_name, sizeof(rw->tmp_name), ".rank-%u.%ld-%" PRIu64 ".tmp", rank,
                 (long)getpid(), ++s->tmp_seq);
        snprintf(rw->final_name, sizeof(rw->final_name), "rank-%u", rank);
        step_dir_name(step_name, step);

        if (mkdirat(s->jobs_fd, job, 0750) < 0 && errno != EEXIST)
                goto fail_errno;
        rw->job_fd = openat(s->jobs_fd, job, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (rw->job_fd < 0)
                goto fail_errno;
        if (mkdirat(rw->job_fd, step_name, 0750) < 0 && errno != EEXIST)
                goto fail_errno;
        rw->step_fd = openat(rw->job_fd, step_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (rw->step_fd < 0)
                goto fail_errno;
        if (mkdirat(rw->step_fd, rw->tmp_name, 0750) < 0)
                goto fail_errno;
        rw->tmp_fd = openat(rw->step_fd, rw->tmp_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rw->tmp_fd < 0)
                goto fail_errno;
        *out = TAKE_PTR(rw);
        return 0;

fail_errno:
        r = -errno;
        log_error("store: job %s step %" PRIu64 " rank %u: cannot create directory: %m", job, step,
                  rank);
        return r;
}

void store_rank_abort(struct store *s, struct rank_writer *rw) {
        if (!rw)
                return;
        int r = store_trash(s, rw->step_fd, rw->tmp_name);
        if (r < 0 && r != -ENOENT)
                log_warn("store: job %s step %" PRIu64 ": cannot remove %s: %s", rw->job, rw->step,
                         rw->tmp_name, strerror(-r));
        rank_writer_free(rw);
}

int store_shard_create(struct store *s, struct rank_writer *rw, const char *name, uint64_t size,
                       int *fd_out) {
        int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
        int fd, r;

        if (rw->nfiles == rw->cap) {
                uint32_t cap = rw->cap ? rw->cap * 2 : 8;
                int *fds = realloc(rw->fds, cap * sizeof(*fds));
                if (!fds)
                        return -ENOMEM;
                rw->fds = fds;
                uint64_t *sizes = realloc(rw->sizes, cap * sizeof(*sizes));
                if (!sizes)
                        return -ENOMEM;
                rw->sizes = sizes;
                rw->cap = cap;
        }

        fd = openat(rw->tmp_fd, name, flags | (s->opts.direct_io ? O_DIRECT : 0), 0640);
        if (fd < 0 && errno == EINVAL && s->opts.direct_io) {
                /* tmpfs and some FUSE filesystems refuse O_DIRECT. */
                if (!s->direct_unsupported_logged) {
                        log_warn("store: %s does not support O_DIRECT; writing through the page "
                                 "cache. Set direct_io=no to silence this.",
                                 s->state_dir);
                        s->direct_unsupported_logged = true;
                }
                s->opts.direct_io = false;
                /* the refused open may already have created the file */
                unlinkat(rw->tmp_fd, name, 0);
                fd = openat(rw->tmp_fd, name, flags, 0640);
        }
        if (fd < 0) {
                r = -errno;
                log_error("store: job %s step %" PRIu64 " rank %u: cannot create shard %s: %m",
                          rw->job, rw->step, rw->rank, name);
                return r;
        }
        if (size > 0) {
                /* Allocate up front: a full disk fails here, before a byte
                 * is staged, and writes never extend the file. */
                if (fallocate(fd, 0, 0, (off_t)ALIGN_UP(size, STORE_ALIGN)) < 0 &&
                    errno != EOPNOTSUPP) {
                        r = -errno;
                        log_error("store: job %s step %" PRIu64 " rank %u shard %s: cannot "
                                  "allocate %" PRIu64 " bytes: %m",
                                  rw->job, rw->step, rw->rank, name, size);
                        close(fd);
                        unlinkat(rw->tmp_fd, name, 0);
                        return r;
                }
        }
        rw->fds[rw->nfiles] = fd;
        rw->sizes[rw->nfiles] = size;
        rw->nfiles++;
        *fd_out = fd;
        return 0;
}

struct finish_work {
        struct work work;
        struct store *store;
        struct rank_writer *rw;
        const struct manifest *manifest;
        char old_trash[64];
        int trash_fd;
        int error;
        void (*cb)(void *userdata, int error);
        void *userdata;
};

static int finish_rank(struct finish_work *f) {
        struct rank_writer *rw = f->rw;
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r;

        for (uint32_t i = 0; i < rw->nfiles; i++) {
                /* O_DIRECT writes were padded to 4K; cut the padding off. */
                if (ftruncate(rw->fds[i], (off_t)rw->sizes[i]) < 0)
                        return -errno;
                if (fsync(rw->fds[i]) < 0)
                        return -errno;
        }

        r = manifest_format(f->manifest, &text, &len);
        if (r < 0)
                return r;
        _cleanup_close_ int mfd = openat(rw->tmp_fd, MANIFEST_FILE,
                                         O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
        if (mfd < 0)
                return -errno;
        r = fs_write_all(mfd, text, len);
        if (r < 0)
                return r;
        if (fsync(mfd) < 0 || fsync(rw->tmp_fd) < 0)
                return -errno;

        /* Swap in atomically: a rank saved again (step not committed yet)
         * replaces the old copy in one step, never leaving neither. */
        if (renameat2(rw->step_fd, rw->tmp_name, rw->step_fd, rw->final_name, RENAME_NOREPLACE) < 0) {
                if (errno != EEXIST)
                        return -errno;
                if (renameat2(rw->step_fd, rw->tmp_name, rw->step_fd, rw->final_name,
                              RENAME_EXCHANGE) < 0)
                        return -errno;
                /* the old copy now has the tmp name */
                if (renameat(rw->step_fd, rw->tmp_name, f->trash_fd, f->old_trash) == 0)
                        fs_rm_rf_at(f->trash_fd, f->old_trash);
        }
        /* Make the new directory entries durable up the tree. */
        if (fsync(rw->step_fd) < 0 || fsync(rw->job_fd) < 0 || fsync(rw->jobs_fd) < 0)
                return -errno;
        return 0;
}

static void finish_work_run(struct work *w) {
        struct finish_work *f = container_of(w, struct finish_work, work);
        f->error = finish_rank(f);
        if (f->error < 0)
                log_error("store: job %s step %" PRIu64 " rank %u: cannot finish on disk: %s",
                          f->rw->job, f->rw->step, f->rw->rank, strerror(-f->error));
}

static void finish_work_done(struct work *w) {
        struct finish_work *f = container_of(w, struct finish_work, work);
        struct store *s = f->store;

        if (f->error < 0) {
                store_rank_abort(s, f->rw);
        } else {
                store_manifest_forget(s, f->rw->job, f->rw->step);
                rank_writer_free(f->rw);
        }
        f->cb(f->userdata, f->error);
        free(f);
}

void store_rank_finish(struct store *s, struct rank_writer *rw, const struct manifest *m,
                       void (*cb)(void *userdata, int error), void *userdata) {
        struct finish_work *f = calloc(1, sizeof(*f));
        if (!f) {
                store_rank_abort(s, rw);
                cb(userdata, -ENOMEM);
                return;
        }
        f->store = s;
        f->rw = rw;
        f->manifest = m;
        f->trash_fd = s->trash_fd;
        store_trash_name(s, f->old_trash);
        f->cb = cb;
        f->userdata = userdata;
        f->work.run = finish_work_run;
        f->work.done = finish_work_done;
        worker_pool_submit(s->workers, &f->work);
}

/* ---- steps ---------------------------------------------------------------- */

struct commit_work {
        struct work work;
        int jobs_fd;
        const struct commit_record *record;
        int error;
        void (*cb)(void *userdata, int error);
        void *userdata;
};

static void commit_work_run(struct work *w) {
        struct commit_work *c = container_of(w, struct commit_work, work);
        _cleanup_free_ char *text = NULL;
        char path[CKPT_NAME_MAX + 40], step_name[32];
        size_t len;

        step_dir_name(step_name, c->record->step);
        snprintf(path, sizeof(path), "%s/%s", c->record->job, step_name);
        _cleanup_close_ int fd = openat(c->jobs_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                c->error = -errno;
        } else {
                c->error = commit_record_format(c->record, &text, &len);
                if (c->error == 0)
                        c->error = fs_write_atomic_at(fd, COMMIT_FILE, text, len, 0640);
        }
        if (c->error < 0)
                log_error("store: job %s step %" PRIu64 ": cannot write commit record: %s",
                          c->record->job, c->record->step, strerror(-c->error));
}

static void commit_work_done(struct work *w) {
        struct commit_work *c = container_of(w, struct commit_work, work);
        c->cb(c->userdata, c->error);
        free(c);
}

void store_step_commit(struct store *s, const struct commit_record *r,
                       void (*cb)(void *userdata, int error), void *userdata) {
        struct commit_work *c = calloc(1, sizeof(*c));
        if (!c) {
                cb(userdata, -ENOMEM);
                return;
        }
        c->jobs_fd = s->jobs_fd;
        c->record = r;
        c->cb = cb;
        c->userdata = userdata;
        c->work.run = commit_work_run;
        c->work.done = commit_work_done;
        worker_pool_submit(s->workers, &c->work);
}

int store_step_delete(struct store *s, const char *job, uint64_t step) {
        char path[CKPT_NAME_MAX + 40], step_name[32];

        step_dir_name(step_name, step);
        snprintf(path, sizeof(path), "%s/%s", job, step_name);
        store_manifest_forget(s, job, step);
        int r = store_trash(s, s->jobs_fd, path);
        if (r < 0 && r != -ENOENT) {
                log_error("store: job %s step %" PRIu64 ": cannot delete: %s", job, step,
                          strerror(-r));
                return r;
        }
        return 0;
}

int store_job_delete(struct store *s, const char *job) {
        if (s->cache && !strcmp(s->cache_job, job))
                s->cache = manifest_free(s->cache);
        int r = store_trash(s, s->jobs_fd, job);
        if (r < 0 && r != -ENOENT) {
                log_error("store: job %s: cannot delete: %s", job, strerror(-r));
                return r;
        }
        return 0;
}

bool store_step_committed(struct store *s, const char *job, uint64_t step) {
        char path[CKPT_NAME_MAX + 64], step_name[32];

        step_dir_name(step_name, step);
        snprintf(path, sizeof(path), "%s/%s/%s", job, step_name, COMMIT_FILE);
        return faccessat(s->jobs_fd, path, F_OK, 0) == 0;
}

/* ---- reading ----------------------------------------------------------------- */

void store_manifest_forget(struct store *s, const char *job, uint64_t step) {
        if (s->cache && !strcmp(s->cache_job, job) && s->cache_step == step)
                s->cache = manifest_free(s->cache);
}

static int store_manifest_load(int rank_fd, const char *job, uint64_t step, uint32_t rank,
                               struct manifest **out) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = fs_read_at(rank_fd, MANIFEST_FILE, MANIFEST_READ_MAX, &text, &len);
        if (r < 0)
                return r;
        r = manifest_parse(out, text, len);
        if (r < 0) {
                log_error("store: job %s step %" PRIu64 " rank %u: MANIFEST is corrupt", job, step,
                          rank);
                return -EIO;
        }
        return 0;
}

int store_shard_open(struct store *s, const char *job, uint64_t step, uint32_t rank,
                     const char *shard, bool direct, int *fd_out,
                     const struct manifest **m_out, const struct manifest_shard **sh_out) {
        char path[CKPT_NAME_MAX + 64], step_name[32];
        int r;

        step_dir_name(step_name, step);
        snprintf(path, sizeof(path), "%s/%s/rank-%u", job, step_name, rank);
        _cleanup_close_ int rank_fd = openat(s->jobs_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rank_fd < 0)
                return -errno;

        if (!s->cache || strcmp(s->cache_job, job) || s->cache_step != step ||
            s->cache_rank != rank) {
                struct manifest *m;
                r = store_manifest_load(rank_fd, job, step, rank, &m);
                if (r < 0)
                        return r;
                manifest_free(s->cache);
                s->cache = m;
                snprintf(s->cache_job, sizeof(s->cache_job), "%s", job);
                s->cache_step = step;
                s->cache_rank = rank;
        }
        const struct manifest_shard *sh = manifest_find(s->cache, shard);
        if (!sh)
                return -ENOENT;

        int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW;
        int fd = openat(rank_fd, shard, flags | (direct && s->opts.direct_io ? O_DIRECT : 0));
        if (fd < 0 && errno == EINVAL)
                fd = openat(rank_fd, shard, flags);
        if (fd < 0) {
                r = -errno;
                log_error("store: job %s step %" PRIu64 " rank %u: shard %s listed in MANIFEST "
                          "but cannot be opened: %m",
                          job, step, rank, shard);
                return r == -ENOENT ? -EIO : r;
        }
        *fd_out = fd;
        *m_out = s->cache;
        *sh_out = sh;
        return 0;
}

static int rank_dir_open(struct store *s, const char *job, uint64_t step, uint32_t rank) {
        char path[CKPT_NAME_MAX + 64], step_name[32];

        step_dir_name(step_name, step);
        snprintf(path, sizeof(path), "%s/%s/rank-%u", job, step_name, rank);
        int fd = openat(s->jobs_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

int store_rank_manifest(struct store *s, const char *job, uint64_t step, uint32_t rank,
                        struct manifest **out) {
        _cleanup_close_ int rank_fd = rank_dir_open(s, job, step, rank);
        if (rank_fd < 0)
                return rank_fd;
        return store_manifest_load(rank_fd, job, step, rank, out);
}

/* O_DIRECT needs an aligned buffer; 4 KiB covers every logical block size. */
#define VERIFY_ALIGN 4096

static int shard_fault(struct store_shard_fault *f, enum store_shard_bad bad, int64_t block,
                       int error, uint64_t size) {
        f->bad = bad;
        f->block = block;
        f->error = error;
        f->size = size;
        return error;
}

int store_shard_verify(int fd, const struct manifest *m, const struct manifest_shard *sh,
                       unsigned flags, struct store_shard_fault *f) {
        _cleanup_free_ uint8_t *buf = NULL;
        const uint64_t bs = m->block_size;
        struct stat st;
        int r = 0;

        shard_fault(f, STORE_SHARD_GOOD, -1, 0, 0);
        if (fstat(fd, &st) < 0)
                return shard_fault(f, STORE_SHARD_IO, -1, -errno, 0);
        /* a file of another size is not the copy that was saved */
        if (!(flags & STORE_VERIFY_BLOCKS_ONLY) && (uint64_t)st.st_size != sh->size)
                return shard_fault(f, STORE_SHARD_SIZE,
                                   (int64_t)(MIN((uint64_t)st.st_size, sh->size) / bs), -EBADMSG,
                                   (uint64_t)st.st_size);
        if (flags & STORE_VERIFY_DIRECT) {
                int fl = fcntl(fd, F_GETFL);
                if (fl >= 0)
                        (void)fcntl(fd, F_SETFL, fl | O_DIRECT);
        }
        if (posix_memalign((void **)&buf, VERIFY_ALIGN, ALIGN_UP((size_t)bs, VERIFY_ALIGN)) != 0)
                return shard_fault(f, STORE_SHARD_IO, -1, -ENOMEM, 0);
        for (uint64_t off = 0; off < sh->size && r == 0; off += bs) {
                size_t want = (size_t)MIN(bs, sh->size - off);
                int64_t b = (int64_t)(off / bs);
                size_t got = 0;
                while (got < want && r == 0) {
                        /* O_DIRECT reads whole aligned units: ask for the
                         * block rounded up, the file's end stops it short */
                        ssize_t n = pread(fd, buf + got, ALIGN_UP(want, VERIFY_ALIGN) - got,
                                          (off_t)(off + got));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0)
                                r = shard_fault(f, STORE_SHARD_IO, b, -errno, 0);
                        else if (n == 0)
                                r = shard_fault(f, STORE_SHARD_SHORT, b, -EBADMSG, off + got);
                        else
                                got += (size_t)n;
                }
                if (r == 0 && manifest_shard_check(sh, off, buf, want) >= 0)
                        r = shard_fault(f, STORE_SHARD_CRC, b, -EBADMSG, 0);
        }
        /* a verify reads everything once: keep it out of the cache */
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        return r;
}

/* store_rank_verify's words for a bad shard (the VERIFY reply's and the
 * heal's texts): why stays "" when it is good.  Returns whether they start
 * by naming the block ("block 2 failed its CRC32C"), which the copy's
 * detail then follows the shard's name with directly. */
static bool shard_why(const struct manifest_shard *sh, const struct store_shard_fault *f,
                      char *why, size_t why_size) {
        switch (f->bad) {
        case STORE_SHARD_GOOD:
                why[0] = '\0';
                return false;
        case STORE_SHARD_SIZE:
                snprintf(why, why_size, "the file has %" PRIu64 " bytes, the MANIFEST says %" PRIu64,
                         f->size, sh->size);
                return false;
        case STORE_SHARD_MISSING:
                snprintf(why, why_size, "the file is missing");
                return false;
        case STORE_SHARD_SHORT:
                snprintf(why, why_size, "block %" PRId64 ": short read", f->block);
                return true;
        case STORE_SHARD_CRC:
                snprintf(why, why_size, "block %" PRId64 " failed its CRC32C", f->block);
                return true;
        case STORE_SHARD_IO:
                break;
        }
        if (f->block < 0) {
                snprintf(why, why_size, "%s", strerror(-f->error));
                return false;
        }
        snprintf(why, why_size, "block %" PRId64 ": %s", f->block, strerror(-f->error));
        return true;
}

int store_rank_verify(const struct store *s, const char *job, uint64_t step, uint32_t rank,
                      unsigned flags, char *detail, size_t detail_size, uint32_t *shards,
                      uint64_t *bytes, store_shard_result_fn on_shard, void *userdata) {
        char path[CKPT_NAME_MAX + 64], step_name[32];
        _cleanup_free_ char *text = NULL;
        struct manifest *m = NULL;
        size_t len;
        int r;

        detail[0] = '\0';
        if (shards)
                *shards = 0;
        if (bytes)
                *bytes = 0;
        step_dir_name(step_name, step);
        snprintf(path, sizeof(path), "%s/%s/rank-%u", job, step_name, rank);
        _cleanup_close_ int rank_fd = openat(s->jobs_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rank_fd < 0) {
                r = -errno;
                snprintf(detail, detail_size, "the rank directory cannot be opened: %s",
                         strerror(-r));
                return r == -ENOENT ? -ENOENT : -EIO;
        }
        r = fs_read_at(rank_fd, MANIFEST_FILE, MANIFEST_READ_MAX, &text, &len);
        if (r < 0) {
                snprintf(detail, detail_size, "MANIFEST cannot be read: %s", strerror(-r));
                return -EIO;
        }
        if (manifest_parse(&m, text, len) < 0) {
                snprintf(detail, detail_size, "MANIFEST does not parse");
                return -EIO;
        }
        if (strcmp(m->job, job) || m->step != step || m->rank != rank) {
                snprintf(detail, detail_size, "MANIFEST names job %s step %" PRIu64 " rank %u",
                         m->job, m->step, m->rank);
                manifest_free(m);
                return -EIO;
        }
        if (shards)
                *shards = m->nshards;
        if (bytes)
                *bytes = manifest_bytes(m);
        r = 0;
        for (uint32_t i = 0; i < m->nshards && (r == 0 || on_shard); i++) {
                const struct manifest_shard *sh = &m->shards[i];
                struct store_shard_fault f;
                char why[CKPT_NAME_MAX + 128] = "";
                _cleanup_close_ int fd = openat(rank_fd, sh->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                if (fd < 0) {
                        int e = -errno;
                        shard_fault(&f, e == -ENOENT ? STORE_SHARD_MISSING : STORE_SHARD_IO, -1,
                                    e == -ENOENT ? -EBADMSG : e, 0);
                } else if (store_shard_verify(fd, m, sh, flags, &f) == -ENOMEM && f.block < 0) {
                        manifest_free(m);
                        return -ENOMEM;
                }
                bool names_block = shard_why(sh, &f, why, sizeof(why));
                if (why[0] && r == 0) {
                        /* the copy's detail is its first bad shard */
                        snprintf(detail, detail_size, "shard %s%s%s", sh->name,
                                 names_block ? " " : ": ", why);
                        r = -EIO;
                }
                if (on_shard)
                        on_shard(userdata, sh->name, sh->size, why, f.block, f.error);
        }
        manifest_free(m);
        return r;
}

int store_shard_open_buffered(struct store *s, const char *job, uint64_t step, uint32_t rank,
                              const char *shard, int *fd_out) {
        if (ckpt_name_validate(shard, strlen(shard)) < 0)
                return -EINVAL;
        _cleanup_close_ int rank_fd = rank_dir_open(s, job, step, rank);
        if (rank_fd < 0)
                return rank_fd;
        int fd = openat(rank_fd, shard, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        *fd_out = fd;
        return 0;
}

/* ---- start-up scan -------------------------------------------------------------- */

static bool parse_u64_dec(const char *s, size_t len, uint64_t *out) {
        uint64_t v = 0;
        if (len == 0)
                return false;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                if (v > (UINT64_MAX - 9) / 10)
                        return false;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        *out = v;
        return true;
}

static void scan_step(struct store *s, int job_fd, const char *job, const char *step_name,
                      uint64_t step, const struct store_scan_ops *ops, void *userdata) {
        _cleanup_close_ int step_fd = openat(job_fd, step_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (step_fd < 0)
                return;
        _cleanup_closedir_ DIR *d = fs_opendir_at(step_fd, ".");
        if (!d)
                return;
        uint32_t *ranks = NULL;
        size_t nranks = 0, cap = 0;
        struct dirent *de;
        bool has_commit = false;

        while ((de = readdir(d))) {
                const char *n = de->d_name;
                if (!strcmp(n, ".") || !strcmp(n, ".."))
                        continue;
                if (n[0] == '.' || !strcmp(n, COMMIT_FILE ".tmp")) {
                        /* interrupted rank write or commit: never visible */
                        log_info("store: job %s step %" PRIu64 ": removing leftover %s", job, step,
                                 n);
                        store_trash(s, step_fd, n);
                        continue;
                }
                if (!strcmp(n, COMMIT_FILE)) {
                        has_commit = true;
                        continue;
                }
                uint64_t rank;
                char canonical[32];
                if (strncmp(n, "rank-", 5) || !parse_u64_dec(n + 5, strlen(n + 5), &rank) ||
                    rank >= CKPT_WORLD_MAX ||
                    (snprintf(canonical, sizeof(canonical), "rank-%" PRIu64, rank), strcmp(canonical, n))) {
                        log_warn("store: job %s step %" PRIu64 ": ignoring unexpected entry %s", job,
                                 step, n);
                        continue;
                }
                _cleanup_close_ int rank_fd = openat(step_fd, n, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                struct manifest *m = NULL;
                int r = rank_fd < 0 ? -errno
                                    : store_manifest_load(rank_fd, job, step, (uint32_t)rank, &m);
                if (r == 0 && (strcmp(m->job, job) || m->step != step || m->rank != rank))
                        r = -EIO;
                if (r < 0) {
                        log_error("store: job %s step %" PRIu64 " %s: unreadable or inconsistent "
                                  "MANIFEST; moving it to trash",
                                  job, step, n);
                        manifest_free(m);
                        store_trash(s, step_fd, n);
                        continue;
                }
                ops->rank(userdata, m);
                manifest_free(m);
                if (nranks == cap) {
                        cap = cap ? cap * 2 : 16;
                        uint32_t *nr = realloc(ranks, cap * sizeof(*nr));
                        if (!nr)
                                break;
                        ranks = nr;
                }
                ranks[nranks++] = (uint32_t)rank;
        }

        struct commit_record rec = { 0 };
        bool committed = false;
        if (has_commit) {
                _cleanup_free_ char *text = NULL;
                size_t len;
                int r = fs_read_at(step_fd, COMMIT_FILE, 1u << 24, &text, &len);
                if (r == 0)
                        r = commit_record_parse(&rec, text, len);
                if (r == 0 && (strcmp(rec.job, job) || rec.step != step))
                        r = -EIO;
                if (r < 0)
                        log_error("store: job %s step %" PRIu64 ": commit record is invalid (%s); "
                                  "the step is NOT considered committed", job, step, strerror(-r));
                else
                        committed = true;
                /* A rank it names that is gone (moved away, or its MANIFEST
                 * was bad and it went to trash above) leaves the step
                 * committed: the cluster committed it and the other ranks
                 * are good.  The step is damaged here (catalog.md): the
                 * rank is restored from a neighbour or the object store
                 * like any rank this node lacks, and retention does not
                 * count the step among the newest it keeps. */
                for (uint32_t i = 0; committed && i < rec.nranks; i++) {
                        bool found = false;
                        for (size_t j = 0; j < nranks; j++)
                                found |= ranks[j] == rec.ranks[i];
                        if (!found)
                                log_error("store: job %s step %" PRIu64 ": rank %u, named by the "
                                          "commit record, is missing; the step stays committed "
                                          "with that rank damaged on this node", job, step,
                                          rec.ranks[i]);
                }
        }
        ops->step(userdata, job, step, committed ? &rec : NULL);
        commit_record_clear(&rec);
        free(ranks);
}

int store_scan(struct store *s, const struct store_scan_ops *ops, void *userdata) {
        _cleanup_closedir_ DIR *jobs = fs_opendir_at(s->jobs_fd, ".");
        if (!jobs)
                return -errno;
        struct dirent *je;
        while ((je = readdir(jobs))) {
                if (!strcmp(je->d_name, ".") || !strcmp(je->d_name, ".."))
                        continue;
                if (ckpt_name_validate(je->d_name, strlen(je->d_name)) < 0) {
                        log_warn("store: ignoring jobs/%s: not a valid job name", je->d_name);
                        continue;
                }
                _cleanup_close_ int job_fd =
                        openat(s->jobs_fd, je->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (job_fd < 0)
                        continue;
                _cleanup_closedir_ DIR *steps = fs_opendir_at(job_fd, ".");
                if (!steps)
                        continue;
                struct dirent *se;
                while ((se = readdir(steps))) {
                        uint64_t step;
                        if (!strcmp(se->d_name, ".") || !strcmp(se->d_name, ".."))
                                continue;
                        if (strlen(se->d_name) != 20 ||
                            !parse_u64_dec(se->d_name, 20, &step) || step > CKPT_STEP_MAX) {
                                log_warn("store: ignoring jobs/%s/%s", je->d_name, se->d_name);
                                continue;
                        }
                        scan_step(s, job_fd, je->d_name, se->d_name, step, ops, userdata);
                }
        }
        return 0;
}

void store_trash_empty(struct store *s) {
        _cleanup_closedir_ DIR *d = fs_opendir_at(s->trash_fd, ".");
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                fs_rm_rf_at(s->trash_fd, de->d_name);
        }
}
