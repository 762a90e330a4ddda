/* SPDX-License-Identifier: MIT */
/*
 * audit — this node's objects in the store, checked (see audit.h).  A pass
 * is a list of (job, step) taken at its start; the step being checked holds
 * the manifests of its ranks on this node; one object at a time goes
 *
 *   HEAD -> sampled ranged GETs -> next object
 *
 * and a finding verifies the local copy of the shard on a worker before the
 * object is marked for a new upload.  Every callback continues the walk;
 * object_next() loops over what needs no request, so the stack stays flat.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "remote/audit.h"
#include "remote/upload.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

#define AUDIT_STEPS_MAX 100000 /* a pass lists at most this many steps */
#define AUDIT_RANKS_MAX 256    /* ranks of one step on one node that are checked */
#define AUDIT_SAMPLE_MAX 64

struct audit_step {
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
};

struct audit {
        struct loop *loop;
        struct worker_pool *workers;
        struct s3_client *s3;
        struct catalog *catalog;
        struct store *store;
        struct flusher *flusher;
        struct audit_options opts;
        char prefix[1024];
        struct audit_ops ops;
        void *userdata;
        struct loop_timer timer;      /* the next pass */
        bool running, freeing;

        /* the pass */
        struct audit_step *steps;
        size_t nsteps, steps_cap, at;
        /* the step steps[at] */
        struct manifest *ranks[AUDIT_RANKS_MAX];
        size_t nranks, rank_at, shard_at;
        bool step_repair;             /* an object of it is pending again */
        /* the object ranks[rank_at]->shards[shard_at] */
        struct catalog_remote_object obj;
        uint64_t blocks[AUDIT_SAMPLE_MAX];
        uint32_t nblocks, block_at;
        struct s3_request req;
        bool req_busy;
        uint8_t *buf;                 /* one block */
        char finding[CATALOG_KEY_MAX + 512]; /* "object KEY what" */
        /* the local copy's check after a finding */
        struct work work;
        bool work_busy;
        int vfd;
        const struct manifest_shard *vsh;
        int verr;
        int64_t vbad;

        struct audit_stats stats;
};

static void object_next(struct audit *a);
static void pass_schedule(struct audit *a);
static void audit_release(struct audit *a);

static const struct manifest_shard *cur_shard(const struct audit *a) {
        return &a->ranks[a->rank_at]->shards[a->shard_at];
}

static void step_clear(struct audit *a) {
        for (size_t i = 0; i < a->nranks; i++)
                a->ranks[i] = manifest_free(a->ranks[i]);
        a->nranks = a->rank_at = a->shard_at = 0;
        a->step_repair = false;
}

/* ---- the local copy of a shard the store has wrong ---------------------------------------- */

static void verify_run(struct work *w) {
        struct audit *a = container_of(w, struct audit, work);
        struct store_shard_fault f;

        /* blocks only: the re-upload sends the manifest's sh->size bytes */
        int r = store_shard_verify(a->vfd, a->ranks[a->rank_at], a->vsh, STORE_VERIFY_BLOCKS_ONLY,
                                   &f);
        a->verr = f.bad == STORE_SHARD_IO ? r : 0;
        a->vbad = f.bad == STORE_SHARD_IO ? -1 : f.block;
}

static void verify_done(struct work *w) {
        struct audit *a = container_of(w, struct audit, work);
        const struct manifest *m = a->ranks[a->rank_at];
        const struct manifest_shard *sh = cur_shard(a);

        a->work_busy = false;
        a->vfd = safe_close(a->vfd);
        if (a->freeing) {
                audit_release(a); /* audit_free() left that to this */
                return;
        }
        if (a->verr < 0 || a->vbad >= 0) {
                char why[96];
                if (a->verr < 0)
                        snprintf(why, sizeof(why), "cannot be read (%s)", strerror(-a->verr));
                else
                        snprintf(why, sizeof(why), "fails its CRC32C at block %" PRId64, a->vbad);
                log_error("audit: job %s step %" PRIu64 " rank %u shard %s: the local copy %s as "
                          "well; not uploaded again (the local tier's copy is healed first)",
                          m->job, m->step, m->rank, sh->name, why);
                a->shard_at++;
                object_next(a);
                return;
        }
        /* the upload starts from nothing: a single PUT or a new multipart
         * upload, the old parts forgotten */
        char note[CATALOG_ERROR_MAX + 1];
        /* the catalog keeps a bounded error text: the finding's head */
        snprintf(note, sizeof(note), "audit: %.200s", a->finding);
        int r = upload_object_reset(a->catalog, m->job, m->step, m->rank, sh->name, a->obj.key,
                                    sh->size, note);
        if (r < 0) {
                log_error("audit: job %s step %" PRIu64 " rank %u shard %s: cannot mark the "
                          "object for a new upload: %s", m->job, m->step, m->rank, sh->name,
                          strerror(-r));
        } else {
                a->step_repair = true;
                a->stats.objects_repaired++;
                log_event(LOG_NOTICE, LOG_CTX(.id = LOG_ID_HEAL, .job = m->job, LOG_STEP(m->step),
                                              LOG_RANK(m->rank)),
                          "audit: job %s step %" PRIu64 " rank %u shard %s: the local copy "
                           "verifies; the object %s is uploaded again from it", m->job, m->step,
                           m->rank, sh->name, a->obj.key);
        }
        a->shard_at++;
        object_next(a);
}

/* The object is bad: say so, and check the local copy before a re-upload. */
static void object_bad(struct audit *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void object_bad(struct audit *a, const char *fmt, ...) {
        const struct manifest *m = a->ranks[a->rank_at];
        const struct manifest_shard *sh = cur_shard(a);
        char what[384], msg[sizeof(a->finding) + 2 * CKPT_NAME_MAX + 128];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        snprintf(a->finding, sizeof(a->finding), "object %s %s", a->obj.key, what);
        snprintf(msg, sizeof(msg), "audit: job %s step %" PRIu64 " rank %u shard %s: the object-store "
                 "copy is bad: %s", m->job, m->step, m->rank, sh->name, a->finding);
        a->stats.objects_bad++;
        if (a->ops.finding)
                a->ops.finding(a->userdata, m->job, msg); /* logs it */
        else
                log_error("audit: %s", msg);
        int r = store_shard_open_buffered(a->store, m->job, m->step, m->rank, sh->name, &a->vfd);
        if (r < 0) {
                log_error("audit: job %s step %" PRIu64 " rank %u shard %s: no local copy to "
                          "upload again (%s)", m->job, m->step, m->rank, sh->name, strerror(-r));
                a->shard_at++;
                object_next(a);
                return;
        }
        a->vsh = sh;
        a->work.run = verify_run;
        a->work.done = verify_done;
        a->work_busy = true;
        worker_pool_submit(a->workers, &a->work);
}

/* A request failed for a reason that says nothing about the object (the
 * store is slow or away): try it at the next pass. */
static void object_skip(struct audit *a, const char *what, int error) {
        const struct manifest *m = a->ranks[a->rank_at];
        log_debug("audit: job %s step %" PRIu64 " rank %u shard %s: %s failed (%s); checked at "
                  "the next pass", m->job, m->step, m->rank, cur_shard(a)->name, what,
                  a->req.result.message[0] ? a->req.result.message : strerror(-error));
        a->shard_at++;
        object_next(a);
}

/* ---- the object's checks --------------------------------------------------------------------- */

static void sample_next(struct audit *a);

static void get_done(struct s3_request *req, int error) {
        struct audit *a = container_of(req, struct audit, req);
        const struct manifest_shard *sh = cur_shard(a);
        uint64_t b = a->blocks[a->block_at];
        uint64_t off = b * MANIFEST_BLOCK_SIZE;
        size_t len = (size_t)MIN((uint64_t)MANIFEST_BLOCK_SIZE, sh->size - off);

        a->req_busy = false;
        if (a->freeing || error == -ECANCELED)
                return;
        if (error == -ERANGE) {
                object_bad(a, "ends before block %" PRIu64, b);
                return;
        }
        if (error < 0) {
                object_skip(a, "a ranged GET", error);
                return;
        }
        a->stats.bytes_read += len;
        if (crc32c(0, a->buf, len) != sh->block_crcs[b]) {
                object_bad(a, "fails its CRC32C at block %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64
                           ")", b, off, off + len);
                return;
        }
        a->block_at++;
        sample_next(a);
}

static void sample_next(struct audit *a) {
        const struct manifest_shard *sh = cur_shard(a);

        if (a->block_at >= a->nblocks) {
                a->stats.objects_checked++;
                a->shard_at++;
                object_next(a);
                return;
        }
        uint64_t off = a->blocks[a->block_at] * MANIFEST_BLOCK_SIZE;
        size_t len = (size_t)MIN((uint64_t)MANIFEST_BLOCK_SIZE, sh->size - off);
        a->req.done = get_done;
        int r = s3_get_object_range(a->s3, &a->req, a->obj.key, off, a->buf, len);
        if (r < 0) {
                object_skip(a, "a ranged GET", r);
                return;
        }
        a->req_busy = true;
}

/* The blocks read back: the first, the last, and evenly between. */
static void sample_choose(struct audit *a, uint64_t nblocks) {
        uint32_t n = (uint32_t)MIN((uint64_t)MIN(a->opts.sample, AUDIT_SAMPLE_MAX), nblocks);
        a->nblocks = n;
        a->block_at = 0;
        for (uint32_t i = 0; i < n; i++)
                a->blocks[i] = n == 1 ? 0 : i * (nblocks - 1) / (n - 1);
}

/* ETags compare without their quotes (a store may quote one and not the
 * other). */
static bool etag_same(const char *x, const char *y) {
        size_t lx = strlen(x), ly = strlen(y);
        if (lx >= 2 && x[0] == '"' && x[lx - 1] == '"')
                x++, lx -= 2;
        if (ly >= 2 && y[0] == '"' && y[ly - 1] == '"')
                y++, ly -= 2;
        return lx == ly && !memcmp(x, y, lx);
}

static void head_done(struct s3_request *req, int error) {
        struct audit *a = container_of(req, struct audit, req);
        const struct manifest_shard *sh = cur_shard(a);

        a->req_busy = false;
        if (a->freeing || error == -ECANCELED)
                return;
        if (error == -ENOENT) {
                object_bad(a, "is missing");
                return;
        }
        if (error < 0) {
                object_skip(a, "HEAD", error);
                return;
        }
        if (a->req.result.bytes != sh->size) {
                object_bad(a, "holds %" PRIu64 " bytes, the shard %" PRIu64, a->req.result.bytes,
                           sh->size);
                return;
        }
        if (a->obj.etag[0] && a->req.result.etag[0] && !etag_same(a->obj.etag, a->req.result.etag)) {
                object_bad(a, "has ETag %s, the upload recorded %s", a->req.result.etag,
                           a->obj.etag);
                return;
        }
        sample_choose(a, sh->nblocks);
        sample_next(a);
}

/* ---- the walk ---------------------------------------------------------------------------------- */

/* Load the manifests of this node's ranks of steps[at]; false: nothing to
 * check there. */
static bool step_load(struct audit *a) {
        const struct audit_step *s = &a->steps[a->at];
        uint32_t ranks[AUDIT_RANKS_MAX];
        size_t n = 0;
        uint8_t rs;

        if (catalog_ckpt_remote_get(a->catalog, s->job, s->step, &rs, NULL, 0) < 0 ||
            rs != CATALOG_REMOTE_DONE || flush_busy(a->flusher, s->job, s->step))
                return false;
        if (catalog_ranks(a->catalog, s->job, s->step, ranks, AUDIT_RANKS_MAX, &n) < 0)
                return false;
        n = MIN(n, (size_t)AUDIT_RANKS_MAX);
        for (size_t i = 0; i < n; i++) {
                struct manifest *m = NULL;
                if (store_rank_manifest(a->store, s->job, s->step, ranks[i], &m) == 0)
                        a->ranks[a->nranks++] = m;
        }
        return a->nranks > 0;
}

/* The step's objects are checked: flush it again if one is pending. */
static void step_end(struct audit *a) {
        const struct audit_step *s = &a->steps[a->at];

        if (a->step_repair) {
                int r = flush_step_again(a->flusher, s->job, s->step);
                if (r < 0)
                        log_error("audit: job %s step %" PRIu64 ": cannot queue the new upload: "
                                  "%s", s->job, s->step, strerror(-r));
        }
        step_clear(a);
        a->at++;
}

static void pass_end(struct audit *a) {
        free(a->steps);
        a->steps = NULL;
        a->nsteps = a->steps_cap = a->at = 0;
        a->running = false;
        a->stats.passes++;
        log_debug("audit: pass %" PRIu64 " done: %" PRIu64 " objects checked, %" PRIu64
                  " bad so far", a->stats.passes, a->stats.objects_checked, a->stats.objects_bad);
        pass_schedule(a);
}

/* Start the next object's HEAD, or move on to the next step, or end the
 * pass. */
static void object_next(struct audit *a) {
        for (;;) {
                if (a->nranks == 0) {
                        if (a->at >= a->nsteps) {
                                pass_end(a);
                                return;
                        }
                        if (!step_load(a)) {
                                step_clear(a);
                                a->at++;
                                continue;
                        }
                }
                if (a->rank_at < a->nranks && a->shard_at >= a->ranks[a->rank_at]->nshards) {
                        a->rank_at++;
                        a->shard_at = 0;
                        continue;
                }
                if (a->rank_at >= a->nranks) {
                        step_end(a);
                        continue;
                }
                const struct manifest *m = a->ranks[a->rank_at];
                const struct manifest_shard *sh = cur_shard(a);
                if (catalog_remote_object_get(a->catalog, m->job, m->step, m->rank, sh->name,
                                              &a->obj) < 0 ||
                    a->obj.state != CATALOG_OBJECT_DONE) {
                        a->shard_at++;
                        continue;
                }
                a->req.done = head_done;
                int r = s3_head_object(a->s3, &a->req, a->obj.key);
                if (r < 0) {
                        log_warn("audit: cannot HEAD %s: %s", a->obj.key, strerror(-r));
                        a->shard_at++;
                        continue;
                }
                a->req_busy = true;
                return;
        }
}

static int pass_collect(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct audit *a = userdata;

        if (state != CKPT_STATE_COMMITTED || a->nsteps >= AUDIT_STEPS_MAX)
                return 0;
        if (a->nsteps == a->steps_cap) {
                size_t ncap = a->steps_cap ? a->steps_cap * 2 : 64;
                struct audit_step *n = realloc(a->steps, ncap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                a->steps = n;
                a->steps_cap = ncap;
        }
        snprintf(a->steps[a->nsteps].job, sizeof(a->steps[0].job), "%s", job);
        a->steps[a->nsteps].step = step;
        a->nsteps++;
        return 0;
}

void audit_start(struct audit *a) {
        if (!a || a->running || a->freeing)
                return;
        loop_timer_cancel(&a->timer);
        a->running = true;
        a->nsteps = a->at = 0;
        int r = catalog_ckpt_foreach(a->catalog, NULL, pass_collect, a);
        if (r < 0)
                log_warn("audit: cannot list the steps: %s", strerror(-r));
        object_next(a);
}

static void pass_timer(struct loop_timer *t) {
        audit_start(container_of(t, struct audit, timer));
}

static void pass_schedule(struct audit *a) {
        if (a->opts.interval_ms && !a->running && !a->freeing)
                loop_timer_start(a->loop, &a->timer, a->opts.interval_ms, pass_timer);
}

/* ---- life ------------------------------------------------------------------------------------- */

int audit_new(struct audit **out, struct loop *loop, struct worker_pool *workers,
              struct s3_client *s3, struct catalog *catalog, struct store *store,
              struct flusher *flusher, const struct audit_options *opts,
              const struct audit_ops *ops, void *userdata) {
        struct audit *a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->buf = malloc(MANIFEST_BLOCK_SIZE);
        if (!a->buf) {
                free(a);
                return -ENOMEM;
        }
        a->loop = loop;
        a->workers = workers;
        a->s3 = s3;
        a->catalog = catalog;
        a->store = store;
        a->flusher = flusher;
        a->ops = *ops;
        a->userdata = userdata;
        a->vfd = -1;
        list_init(&a->timer.link);
        audit_set_options(a, opts);
        *out = a;
        return 0;
}

void audit_set_options(struct audit *a, const struct audit_options *opts) {
        a->opts = *opts;
        snprintf(a->prefix, sizeof(a->prefix), "%s", opts->prefix ? opts->prefix : "");
        a->opts.prefix = a->prefix;
        loop_timer_cancel(&a->timer);
        pass_schedule(a);
}

struct audit *audit_free(struct audit *a) {
        if (!a)
                return NULL;
        a->freeing = true;
        loop_timer_cancel(&a->timer);
        if (a->req_busy)
                s3_request_cancel(a->s3, &a->req);
        /* A check of the local copy still on a worker reads the manifests
         * and the fd: its done() frees the audit (the pool runs it at the
         * latest when it is freed itself). */
        if (!a->work_busy)
                audit_release(a);
        return NULL;
}

static void audit_release(struct audit *a) {
        step_clear(a);
        free(a->steps);
        free(a->buf);
        free(a);
}

void audit_get_stats(const struct audit *a, struct audit_stats *out) {
        *out = a->stats;
        out->running = a->running;
}
