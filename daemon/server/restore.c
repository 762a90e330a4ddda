/* SPDX-License-Identifier: MIT */
/*
 * restore — serving checkpoints back: latest committed step, shard lists,
 * byte ranges through a slot, and read-only mappings.
 *
 * A rank this node lacks comes from a replica area here, a neighbour, or the
 * object store, in that order, for the step the request names: READ and
 * SHARD_LIST never substitute another step.  Choosing an older step when no
 * copy of the newest is left anywhere is LATEST_RANK's job, because the
 * whole job must agree on it: each rank asks for the newest step it can be
 * restored from, and the trainer takes the minimum over its ranks.
 *
 * READ reads the MANIFEST blocks covering the range with O_DIRECT into a
 * slot and checks every block's CRC32C on a worker before the client sees
 * a byte; a mismatch is -EIO and is logged against the job.  MAP hands over
 * a read-only fd; the client checks the whole-shard CRC32C itself.
 *
 * Only committed steps are served: SHARD_LIST, READ and MAP of a step this
 * node holds but has not committed get -ENOENT saying so.
 *
 * Reading is allowed to the job's owner and to root.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "server/conn.h"
#include "server/heal.h"
#include "metrics/metrics.h"
#include "server/restore.h"
#include "server/save.h"
#include "server/server.h"
#include "util/cleanup.h"
#include "util/log.h"

struct read_op {
        struct work work;
        struct store *store;    /* the local tier or a replica area */
        struct store_xfer xfer;
        struct conn *conn;      /* who gets the reply; NULL: nobody (yet) */
        struct server *srv;
        uint32_t uid;           /* whose open-file budget xfer.fd counts against */
        bool has_window;
        struct pool_extent window;
        bool prefetch;          /* started ahead of a request, not yet claimed */
        bool ready;             /* read and verified (or failed): result known */
        bool after_heal;        /* serves a request again after its copy was repaired */
        int error;              /* of a prefetch that failed */
        char job[CKPT_NAME_MAX + 1];
        char shard[CKPT_NAME_MAX + 1];
        /* the shard after this one by name (SHARD_LIST's order) when the
         * range ends at the shard's end; "" otherwise or when none */
        char following[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
        uint64_t offset, length;   /* bytes the reply covers */
        uint64_t span_start;       /* first block's offset in the shard */
        uint64_t span_length;      /* bytes of whole blocks read */
        uint64_t shard_size;
        uint64_t first_block, nblocks;
        uint32_t *expected;        /* nblocks CRCs, owned */
        int64_t bad_block;         /* -1 if all good */
};

/* ---- from the object store -------------------------------------------------------------- */

/* Where LATEST_RANK's walk down the committed steps stands. */
enum walk_stage {
        WALK_PEERS,        /* asking the neighbours for the candidate's rank */
        WALK_STORE,        /* asking the object store for it (or waiting to) */
        WALK_STORE_LATEST, /* no candidate left: the store's newest COMMIT below the bound */
};

/* The walk's question to the neighbours.  peers.c always answers (a link
 * that breaks passes the question to the next neighbour, or fails it) but
 * has no way to take a question back: a client that leaves abandons the
 * ticket (cf NULL); the ticket lives until peers.c answers. */
struct walk_ticket {
        struct conn_fetch *cf;
};

struct rank_walk {
        enum walk_stage stage;
        uint64_t below;       /* the next candidate is older than this */
        uint64_t step;        /* the candidate being tried */
        uint32_t world_size;
        bool have_newest;
        uint64_t newest;      /* the first candidate */
        uint32_t skipped;     /* candidates passed over */
        char peers_why[128];  /* what the neighbours said about the candidate */
        char newest_why[256]; /* why the newest was not restorable */
        struct walk_ticket *ticket; /* WALK_PEERS: the question out */
        /* WALK_STORE: waiting while the store fetches that step for
         * someone else */
        struct loop_timer timer;
};

struct conn_fetch {
        struct fetch_request fr;
        struct conn *c;             /* NULL: the client left during a neighbour fetch */
        bool peers_busy;            /* asking the neighbours (not the object store) */
        bool healing;               /* waiting for heal_rank() to repair the copy */
        uint16_t type;
        union {
                struct ckpt_req_job_step job_step;
                struct ckpt_req_shard_list shard_list;
                struct ckpt_req_read read;
                struct ckpt_req_fetch fetch;
                struct ckpt_req_latest_rank latest_rank;
        } req;
        struct rank_walk walk;      /* LATEST_RANK only */
        /* another request's restore of the same step from the object store
         * is running (the fetcher runs one per step): try again when it
         * may have landed, rather than fail a request a moment too early */
        struct loop_timer busy_retry;
};

/* How often a request parked behind another restore of its step looks
 * again.  A restore of a rank takes tens of milliseconds at least. */
#define FETCH_BUSY_RETRY_MS 20

static void serve_again(struct conn_fetch *cf);
static void serve(struct conn_fetch *cf, bool retry);
static void walk_fetched(struct conn_fetch *cf, int error, const char *msg);

static void fetch_request_done(struct fetch_request *fr, int error, const char *msg) {
        struct conn_fetch *cf = container_of(fr, struct conn_fetch, fr);
        struct conn *c = cf->c;

        c->fetch = NULL;
        if (cf->type == CKPT_MSG_LATEST_RANK) {
                walk_fetched(cf, error, msg);
                return;
        }
        if (cf->type == CKPT_MSG_FETCH) {
                if (error < 0) {
                        conn_error(c, error, "%s", msg ? msg : strerror(-error));
                } else {
                        struct ckpt_reply rep = { 0 };
                        rep.fetch.step = fr->out_step;
                        rep.fetch.world_size = fr->world_size;
                        rep.fetch.ranks = fr->ranks;
                        rep.fetch.shards = fr->shards;
                        rep.fetch.bytes = fr->bytes;
                        conn_reply(c, &rep, -1);
                }
                free(cf);
                return;
        }
        if (error < 0 && error != -ENOENT) {
                conn_error(c, error, "restoring from the object store failed: %s",
                           msg ? msg : strerror(-error));
                free(cf);
                return;
        }
        if (cf->type == CKPT_MSG_LATEST && error == 0) {
                /* The store's newest committed step (its ranks may have come
                 * along, or come later rank by rank). */
                struct ckpt_reply rep = { 0 };
                rep.latest.step = fr->out_step;
                rep.latest.world_size = fr->world_size;
                conn_reply(c, &rep, -1);
                free(cf);
                return;
        }
        serve_again(cf);
}

/* Serve the request again; if the fetches found nothing it answers with
 * its usual "not here" error.  Frees cf. */
static void serve_again(struct conn_fetch *cf) {
        serve(cf, true);
}

/* Serve cf's request; retry: without starting another fetch.  Frees cf. */
static void serve(struct conn_fetch *cf, bool retry) {
        struct conn *c = cf->c;

        c->fetch_retry = retry;
        switch (cf->type) {
        case CKPT_MSG_LATEST:
                restore_handle_latest(c, &cf->req.job_step);
                break;
        case CKPT_MSG_SHARD_LIST:
                restore_handle_shard_list(c, &cf->req.shard_list);
                break;
        case CKPT_MSG_READ:
                restore_handle_read(c, &cf->req.read);
                break;
        case CKPT_MSG_MAP:
                restore_handle_map(c, &cf->req.read);
                break;
        }
        c->fetch_retry = false;
        free(cf);
}

static void busy_retry(struct loop_timer *t) {
        struct conn_fetch *cf = container_of(t, struct conn_fetch, busy_retry);

        cf->c->fetch = NULL;
        serve(cf, false);
}

/* The object store, after the neighbours found nothing (or right away). */
static bool fetch_from_store(struct conn_fetch *cf) {
        struct conn *c = cf->c;
        struct server *srv = c->srv;

        if (!srv->fetcher)
                return false;
        cf->fr.done = fetch_request_done;
        int r = fetch_start(srv->fetcher, &cf->fr);
        if (r == -EBUSY && (cf->type == CKPT_MSG_LATEST || cf->type == CKPT_MSG_SHARD_LIST ||
                            cf->type == CKPT_MSG_READ || cf->type == CKPT_MSG_MAP)) {
                /* the step is being restored for another request (two
                 * ranks of a resharded load asking for it at once): once
                 * that lands this one is served from the local tier, or
                 * starts its own fetch for what is still missing */
                log_debug("job %s step %" PRIu64 ": waiting for the restore from the object "
                          "store already running", cf->fr.job, cf->fr.step);
                c->fetch = cf;
                loop_timer_start(srv->loop, &cf->busy_retry, FETCH_BUSY_RETRY_MS, busy_retry);
                return true;
        }
        if (r < 0)
                return false;
        c->fetch = cf;
        log_info("job %s: step %s not on this node; restoring from the object store", cf->fr.job,
                 cf->fr.step == CKPT_STEP_LATEST ? "latest" : "requested");
        return true;
}

/* A neighbour sent the rank (or none had it): serve, or ask the store. */
static void peer_rank_done(void *userdata, int error, uint32_t ranks, const char *message) {
        struct conn_fetch *cf = userdata;
        struct conn *c = cf->c;
        (void)ranks;
        (void)message;

        if (!c) {
                free(cf); /* the client went away meanwhile */
                return;
        }
        c->fetch = NULL;
        cf->peers_busy = false;
        if (error < 0 && fetch_from_store(cf))
                return;
        serve_again(cf);
}

/* The local tier lacks what req wants: ask the neighbours (a rank), then
 * the object store, and answer req afterwards.  true: a fetch runs and the
 * reply comes later. */
/* A request of c's (req, of `type`) to be served again later. */
static struct conn_fetch *conn_fetch_new(struct conn *c, uint16_t type, const void *req,
                                         size_t len, const char *job, uint64_t step) {
        struct conn_fetch *cf = calloc(1, sizeof(*cf));
        if (!cf)
                return NULL;
        cf->c = c;
        cf->type = type;
        memcpy(&cf->req, req, MIN(len, sizeof(cf->req)));
        snprintf(cf->fr.job, sizeof(cf->fr.job), "%s", job);
        cf->fr.step = step;
        return cf;
}

/* heal_rank's answer to a READ or MAP parked on it: serve it again from
 * the repaired copy, or fail naming every copy tried. */
static void request_healed(void *userdata, int error, const char *msg) {
        struct conn_fetch *cf = userdata;
        struct conn *c = cf->c;

        if (!c) {
                free(cf); /* the client went away meanwhile */
                return;
        }
        c->fetch = NULL;
        cf->healing = false;
        if (error < 0) {
                conn_error(c, error, "%s", msg);
                free(cf);
                return;
        }
        serve_again(cf);
}

/*
 * The copy a READ or MAP (req, a struct ckpt_req_read) was served from is
 * corrupt (why: shard, block, what): park the request, have heal_rank()
 * replace the copy, and serve the request again from the repaired one
 * (request_healed).  Never for a request that is itself served again
 * after a repair.  true: parked, the answer comes later.
 */
static bool restore_heal(struct conn *c, uint16_t type, const struct ckpt_req_read *req,
                         const char *why) {
        if (c->fetch_retry || c->fetch)
                return false;
        struct conn_fetch *cf = conn_fetch_new(c, type, req, sizeof(*req), req->job.str,
                                               req->step);
        if (!cf)
                return false;
        /* what was read ahead of the bad copy goes, and its memory with it */
        restore_drop_prefetches_of(c);
        cf->healing = true;
        c->fetch = cf;
        if (heal_rank(c->srv, req->job.str, req->step, req->rank, why, request_healed, cf) < 0) {
                c->fetch = NULL;
                free(cf);
                return false;
        }
        return true;
}

static bool restore_from_store(struct conn *c, uint16_t type, const void *req, size_t len,
                               const char *job, uint64_t step, uint8_t which, uint32_t index) {
        struct server *srv = c->srv;

        if ((!srv->fetcher && !srv->peers) || c->fetch_retry || c->fetch)
                return false;
        struct conn_fetch *cf = conn_fetch_new(c, type, req, len, job, step);
        if (!cf)
                return false;
        cf->fr.which = which;
        cf->fr.index = index;
        cf->fr.uid = c->uid;
        cf->fr.lenient = type == CKPT_MSG_LATEST;
        if (srv->peers && which == CKPT_FETCH_RANK && step != CKPT_STEP_LATEST &&
            peers_fetch_rank(srv->peers, job, step, index, peer_rank_done, cf) == 0) {
                cf->peers_busy = true;
                c->fetch = cf;
                log_info("job %s step %" PRIu64 " rank %u not on this node; asking the neighbours",
                         job, step, index);
                return true;
        }
        if (fetch_from_store(cf))
                return true;
        free(cf);
        return false;
}

/* ckptctl restore --from-peers: the reply waits for the neighbours. */
struct peer_fetch {
        struct conn *c; /* NULL once the connection went away */
        struct server *srv;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t heals;           /* local copies recorded corrupt being healed first */
        uint32_t healed;          /* of them repaired */
        int heal_error;
        char heal_msg[CKPT_ERRMSG_MAX];
};

static void peer_fetch_done(void *userdata, int error, uint32_t ranks, const char *message) {
        struct peer_fetch *pf = userdata;
        struct conn *c = pf->c;

        ranks += pf->healed;
        if (!error && !ranks && pf->heal_error) {
                error = pf->heal_error;
                message = pf->heal_msg;
        }
        if (c) {
                c->peer_fetch = NULL;
                if (error < 0) {
                        conn_error(c, error, "%s", message ? message : strerror(-error));
                } else {
                        struct ckpt_reply rep = { 0 };
                        rep.fetch.step = pf->step == CKPT_STEP_LATEST ? 0 : pf->step;
                        rep.fetch.ranks = ranks;
                        rep.fetch.world_size = ranks ? ranks : 1;
                        conn_reply(c, &rep, -1);
                }
        }
        free(pf);
}

static void peer_fetch_start(struct peer_fetch *pf) {
        struct conn *c = pf->c;
        int r = peers_restore(pf->srv->peers, pf->job, pf->step, peer_fetch_done, pf);
        if (r < 0) {
                if (c) {
                        c->peer_fetch = NULL;
                        conn_error(c, r, "cannot start the restore: %s", strerror(-r));
                }
                free(pf);
        }
}

static void peer_fetch_healed(void *userdata, int error, const char *msg) {
        struct peer_fetch *pf = userdata;

        if (error == 0) {
                pf->healed++;
        } else if (!pf->heal_error) {
                pf->heal_error = error;
                snprintf(pf->heal_msg, sizeof(pf->heal_msg), "%s", msg);
        }
        if (--pf->heals == 0)
                peer_fetch_start(pf);
}

/* A local copy recorded corrupt counts as present to the neighbours'
 * listing: heal those first (heal.c asks the neighbours and the store),
 * then restore what is missing.  The number of heals started. */
static uint32_t peer_fetch_heal_first(struct peer_fetch *pf) {
        uint64_t steps[64];
        uint32_t ranks[64];
        size_t n = 0;

        /* -ENOBUFS: the first 64 now, the rest at the next restore */
        int r = catalog_copy_faults_open(pf->srv->catalog, pf->job, pf->step, CATALOG_COPY_LOCAL,
                                         steps, ranks, 64, &n);
        if (r < 0 && r != -ENOBUFS)
                return 0;
        pf->heals = 1; /* held while starting: none answers before the loop ends */
        for (size_t i = 0; i < MIN(n, (size_t)64); i++) {
                struct catalog_copy_fault f;
                if (catalog_copy_fault_get(pf->srv->catalog, pf->job, steps[i], ranks[i],
                                           CATALOG_COPY_LOCAL, &f) < 0)
                        continue;
                if (heal_rank(pf->srv, pf->job, steps[i], ranks[i], f.detail, peer_fetch_healed,
                              pf) == 0)
                        pf->heals++;
        }
        return --pf->heals;
}

void restore_handle_fetch(struct conn *c, const struct ckpt_req_fetch *req) {
        struct server *srv = c->srv;

        if (req->which == CKPT_FETCH_PEERS) {
                if (!srv->peers) {
                        conn_error(c, -EOPNOTSUPP, "replication is off ([cluster] "
                                   "replication_factor 1 or no peers): no neighbour holds copies");
                        return;
                }
                if (c->uid != 0) {
                        conn_error(c, -EACCES, "only root restores a node's ranks from its "
                                   "neighbours");
                        return;
                }
                struct peer_fetch *pf = calloc(1, sizeof(*pf));
                if (!pf) {
                        conn_error(c, -ENOMEM, "out of memory");
                        return;
                }
                pf->c = c;
                pf->srv = srv;
                snprintf(pf->job, sizeof(pf->job), "%s", req->job.str);
                pf->step = req->step;
                c->peer_fetch = pf;
                if (peer_fetch_heal_first(pf) == 0)
                        peer_fetch_start(pf);
                return;
        }

        if (!srv->fetcher) {
                conn_error(c, -EOPNOTSUPP, "no object store is configured ([remote] endpoint)");
                return;
        }
        int r = conn_check_job(c, req->job.str, true);
        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", req->job.str);
                return;
        }
        if (!restore_from_store(c, CKPT_MSG_FETCH, req, sizeof(*req), req->job.str, req->step,
                                req->which, req->index))
                conn_error(c, -EBUSY, "cannot start the restore (that step is being fetched "
                           "already, or out of memory)");
}

static int check_read_access(struct conn *c, const char *job) {
        int r = conn_check_job(c, job, false);
        if (r == -EACCES)
                conn_error(c, r, "job '%s' belongs to another user", job);
        else if (r < 0)
                conn_error(c, r, "no job named '%s'", job);
        return r;
}

/* Steps passed over by the job-wide LATEST, for its message and log:
 * "21, 19" (", ..." once the text is full). */
struct damaged_steps {
        unsigned count;
        char text[160];
};

static void damaged_steps_add(struct damaged_steps *d, uint64_t step) {
        size_t len = strlen(d->text);
        char one[32];

        snprintf(one, sizeof(one), "%s%" PRIu64, d->count ? ", " : "", step);
        d->count++;
        if (len + strlen(one) + sizeof(", ...") > sizeof(d->text)) {
                if (!strstr(d->text, "..."))
                        snprintf(d->text + len, sizeof(d->text) - len, ", ...");
                return;
        }
        snprintf(d->text + len, sizeof(d->text) - len, "%s", one);
}

/*
 * The newest committed step the job as a whole can restore from: a step
 * in which some rank is recorded unrepairable here (a corrupt copy, and
 * heal.c found no good one on the neighbours or in the object store) is
 * passed over, as LATEST_RANK passes over it for that rank, so that
 * ckpt_latest() never names a step that ckpt_latest_rank() of one of its
 * ranks refuses.  A copy in a replica area counts like one in the local
 * tier: those records live in this node's catalog too, and LATEST_RANK
 * consults them the same way.  Only this node's records are known; a
 * neighbour's unrepairable copy of a rank this node does not hold is not.
 */
void restore_handle_latest(struct conn *c, const struct ckpt_req_job_step *req) {
        struct ckpt_reply rep = { 0 };
        struct server *srv = c->srv;
        struct damaged_steps damaged = { 0 };

        int r = conn_check_job(c, req->job.str, false);
        if (r == -ENOENT &&
            restore_from_store(c, CKPT_MSG_LATEST, req, sizeof(*req), req->job.str,
                               CKPT_STEP_LATEST, CKPT_FETCH_NODE, srv->opts.node_index))
                return;
        if (check_read_access(c, req->job.str) < 0)
                return;
        /* a loop over the committed steps, not one query: damaged steps
         * are rare, and retention keeps few steps besides them */
        for (uint64_t below = CKPT_STEP_LATEST;; below = rep.latest.step) {
                r = catalog_latest_committed_below(srv->catalog, req->job.str, below,
                                                   &rep.latest.step, &rep.latest.world_size);
                if (r < 0 || !heal_step_unrepairable(srv, req->job.str, rep.latest.step))
                        break;
                damaged_steps_add(&damaged, rep.latest.step);
        }
        if (r == 0 && damaged.count)
                log_notice("job %s: newest restorable step %" PRIu64 "; passed over committed "
                           "step%s %s: a rank of %s has no good copy left", req->job.str,
                           rep.latest.step, damaged.count == 1 ? "" : "s", damaged.text,
                           damaged.count == 1 ? "it" : "each");
        /* Every committed step here damaged: the object store is not
         * asked for its newest, which is the newest of these (heal.c asked
         * the store for the rank before it recorded the copy
         * unrepairable).  A step the store keeps below the ones here
         * (retention dropped it locally) is `ckptctl restore JOB STEP`'s
         * to bring back, by hand. */
        if (r == -ENOENT && damaged.count) {
                conn_error(c, r, "job '%s' has no committed checkpoint to restore from: committed "
                           "step%s %s %s a rank with no good copy left (`ckptctl verify %s STEP` "
                           "names it)", req->job.str, damaged.count == 1 ? "" : "s", damaged.text,
                           damaged.count == 1 ? "has" : "each have", req->job.str);
                return;
        }
        if (r == -ENOENT &&
            restore_from_store(c, CKPT_MSG_LATEST, req, sizeof(*req), req->job.str,
                               CKPT_STEP_LATEST, CKPT_FETCH_NODE, srv->opts.node_index))
                return;
        if (r == -ENOENT)
                conn_error(c, r, "job '%s' has no committed checkpoint", req->job.str);
        else if (r < 0)
                conn_error(c, r, "catalog error");
        else
                conn_reply(c, &rep, -1);
}

/*
 * Where this node holds (job, step, rank): in its local tier or in the
 * replica area of the node that saved it.  0 with *store and *catalog
 * set; -ENOENT; -EACCES when the caller is neither the job's owner (as
 * recorded with that copy) nor root.
 */
static int locate(struct conn *c, const char *job, uint64_t step, uint32_t rank,
                  struct store **store, struct catalog **catalog) {
        struct server *srv = c->srv;

        if (catalog_rank_exists(srv->catalog, job, step, rank) == 1) {
                int r = conn_check_job(c, job, false);
                if (r < 0)
                        return r;
                *store = srv->store;
                *catalog = srv->catalog;
                return 0;
        }
        struct replica_area *a = srv->peers ? peers_area_of(srv->peers, job, step, rank) : NULL;
        if (!a)
                return -ENOENT;
        uint32_t owner;
        if (catalog_job_uid(a->catalog, job, &owner) < 0)
                return -ENOENT;
        if (c->uid != 0 && c->uid != owner)
                return -EACCES;
        *store = a->store;
        *catalog = a->catalog;
        return 0;
}

/*
 * ckptd(8): a restore reads only committed checkpoints.  A step this node
 * knows of (in its own catalog or in the replica area that holds the rank)
 * and has not committed is refused whichever rank is asked for, with a
 * message that says so, rather than served half-saved or looked for on the
 * neighbours or in the object store (which never hold a step that is not
 * committed).  `ckptctl list` and `show` still describe such a step.
 * true: refused, the error reply is sent.
 */
static bool refuse_uncommitted(struct conn *c, struct catalog *catalog, const char *job,
                               uint64_t step) {
        struct ckpt_ckpt_entry e;

        /* -ENOENT: not known here; another catalog error was logged by the
         * catalog and the read goes on as before (the files decide) */
        if (catalog_ckpt_get(catalog, job, step, &e) < 0 || e.state == CKPT_STATE_COMMITTED)
                return false;
        const char *why = e.state == CKPT_STATE_FAILED   ? "; a rank's save failed"
                          : e.state == CKPT_STATE_SAVING ? "; ranks are still being saved"
                                                         : "";
        conn_error(c, -ENOENT, "step %" PRIu64 " of job '%s' is not committed (%u of %u ranks "
                   "saved on this node%s): a restore reads only committed steps; commit it "
                   "(ckpt_commit) once every rank is saved, or restore the newest committed "
                   "step (ckpt_latest)", step, job, e.ranks_local, e.world_size, why);
        return true;
}

/*
 * locate() for SHARD_LIST, READ and MAP: 0 with *store and *catalog set;
 * -ENOENT (not on this node: a neighbour or the object store may have it);
 * -EACCES; or 1 when the step is here but not committed and the error
 * reply has been sent (refuse_uncommitted).
 */
/* Whether catalog knows (job, step) and it is not committed there. */
static bool known_uncommitted(struct catalog *catalog, const char *job, uint64_t step) {
        struct ckpt_ckpt_entry e;
        return catalog_ckpt_get(catalog, job, step, &e) == 0 && e.state != CKPT_STATE_COMMITTED;
}

/*
 * A restore of (job, step) from the object store is under way, so the step
 * is committed (the store holds only committed steps) and will be here once
 * the restore has written its commit record; until then its first ranks
 * look like a step not committed.  Park the request (req, of `type`) and
 * serve it again shortly.  true: parked.
 */
static bool park_behind_fetch(struct conn *c, uint16_t type, const void *req, size_t len,
                              const char *job, uint64_t step) {
        struct server *srv = c->srv;

        if (!srv->fetcher || c->fetch || !fetch_running(srv->fetcher, job, step))
                return false;
        struct conn_fetch *cf = conn_fetch_new(c, type, req, len, job, step);
        if (!cf)
                return false;
        c->fetch = cf;
        loop_timer_start(srv->loop, &cf->busy_retry, FETCH_BUSY_RETRY_MS, busy_retry);
        return true;
}

static int locate_committed(struct conn *c, uint16_t type, const void *req, size_t len,
                            const char *job, uint64_t step, uint32_t rank, struct store **store,
                            struct catalog **catalog) {
        int r = locate(c, job, step, rank, store, catalog);
        /* the rank is here, or not but the step is: not a rank to fetch */
        struct catalog *known = r == 0 ? *catalog
                                : r == -ENOENT && conn_check_job(c, job, false) == 0
                                        ? c->srv->catalog
                                        : NULL;
        if (!known)
                return r;
        if (known_uncommitted(known, job, step) && park_behind_fetch(c, type, req, len, job, step))
                return 1;
        if (refuse_uncommitted(c, known, job, step))
                return 1;
        return r;
}

/* The error reply for a failed locate(). */
static void locate_error(struct conn *c, int r, const char *job, uint64_t step, uint32_t rank) {
        if (r == -EACCES)
                conn_error(c, r, "job '%s' belongs to another user", job);
        else
                conn_error(c, -ENOENT, "job '%s' has no rank %u of step %" PRIu64 " on this node",
                           job, rank, step);
}

/* ---- LATEST_RANK: the newest step a rank can be restored from -------------------------- */

/*
 * Candidates are the committed steps this node knows of for the job, in its
 * own catalog and in its replica areas' (a job restarted on other nodes
 * finds the steps its old nodes replicated here), newest first.  For each:
 * the rank here or in a replica area; else a neighbour (peers_fetch_rank,
 * which copies it into the local tier); else the object store (a fetch of
 * that rank of that step).  A candidate nobody holds the rank of is skipped
 * with a NOTICE that says why, and the walk goes on below it.  With no
 * candidate left, the store is asked for its newest COMMIT below the bound.
 * One conn_fetch carries the walk from one asynchronous step to the next;
 * restore_conn_closed() ends it if the client leaves.
 */

/* The newest committed step < below of job that this node knows of, among
 * the copies the caller may read.  -ENOENT: none. */
static int walk_candidate(struct conn *c, const char *job, uint64_t below, uint64_t *step,
                          uint32_t *world_size) {
        struct server *srv = c->srv;
        bool found = false;
        uint64_t s;
        uint32_t ws;

        int r = conn_check_job(c, job, false);
        if (r == 0) {
                r = catalog_latest_committed_below(srv->catalog, job, below, &s, &ws);
                if (r < 0 && r != -ENOENT)
                        return r;
                if (r == 0) {
                        *step = s;
                        *world_size = ws;
                        found = true;
                }
        } else if (r != -ENOENT && r != -EACCES) {
                return r;
        }
        size_t n;
        const struct replica_area *areas = peers_areas(srv->peers, &n);
        for (size_t i = 0; i < n; i++) {
                uint32_t owner;
                /* an area's catalog that fails is logged by it and ignored:
                 * the other copies may still serve */
                if (catalog_job_uid(areas[i].catalog, job, &owner) < 0 ||
                    (c->uid != 0 && c->uid != owner))
                        continue;
                if (catalog_latest_committed_below(areas[i].catalog, job, below, &s, &ws) == 0 &&
                    (!found || s > *step)) {
                        *step = s;
                        *world_size = ws;
                        found = true;
                }
        }
        return found ? 0 : -ENOENT;
}

/* Also for a client that went away (restore_conn_closed). */
static void walk_free(struct conn_fetch *cf) {
        loop_timer_cancel(&cf->walk.timer);
        if (cf->walk.ticket)
                cf->walk.ticket->cf = NULL; /* freed when peers.c answers */
        free(cf);
}

static void walk_answer(struct conn_fetch *cf, uint64_t step, uint32_t world_size) {
        struct rank_walk *w = &cf->walk;
        const struct ckpt_req_latest_rank *req = &cf->req.latest_rank;
        struct ckpt_reply rep = { 0 };

        rep.latest_rank.step = step;
        rep.latest_rank.world_size = world_size;
        rep.latest_rank.newest = w->have_newest && w->newest > step ? w->newest : step;
        rep.latest_rank.skipped = w->skipped;
        if (rep.latest_rank.newest != step)
                log_notice("job %s rank %u: restorable from step %" PRIu64 ", not from the "
                           "newest committed step %" PRIu64 ": %u newer step%s passed over "
                           "(step %" PRIu64 ": %s)", req->job.str, req->rank, step,
                           rep.latest_rank.newest, w->skipped, w->skipped == 1 ? "" : "s",
                           w->newest, w->newest_why);
        conn_reply(cf->c, &rep, -1);
        walk_free(cf);
}

/* Nothing left to try: -ENOENT naming the newest step tried and why. */
static void walk_fail(struct conn_fetch *cf) {
        struct rank_walk *w = &cf->walk;
        const struct ckpt_req_latest_rank *req = &cf->req.latest_rank;
        char bound[48] = "";

        if (req->below != CKPT_STEP_LATEST)
                snprintf(bound, sizeof(bound), " below %" PRIu64, req->below);
        if (w->have_newest)
                conn_error(cf->c, -ENOENT, "job '%s' has no committed step%s of which rank %u can "
                           "be restored (newest committed: %" PRIu64 ": %s)", req->job.str, bound,
                           req->rank, w->newest, w->newest_why);
        else
                conn_error(cf->c, -ENOENT, "job '%s' has no committed step%s of which rank %u can "
                           "be restored (newest committed: none known on this node%s)",
                           req->job.str, bound, req->rank,
                           cf->c->srv->fetcher ? " or in the object store" : "");
        walk_free(cf);
}

static void walk_run(struct conn_fetch *cf);

/* The candidate is not restorable: say why, and move the bound below it
 * (the caller goes on with walk_run()). */
static void walk_skip(struct conn_fetch *cf, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void walk_skip(struct conn_fetch *cf, const char *fmt, ...) {
        struct rank_walk *w = &cf->walk;
        const struct ckpt_req_latest_rank *req = &cf->req.latest_rank;
        char why[sizeof(w->newest_why)];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        if (w->skipped == 0)
                snprintf(w->newest_why, sizeof(w->newest_why), "%s", why);
        log_notice("job %s rank %u: step %" PRIu64 " is not restorable (%s); trying an older "
                   "step", req->job.str, req->rank, w->step, why);
        w->skipped++;
        w->below = w->step;
}

/* After the neighbours: the reason the candidate is not restorable. */
static void walk_skip_unheld(struct conn_fetch *cf, const char *store_why) {
        walk_skip(cf, "not on this node, %s, %s", cf->walk.peers_why, store_why);
}

static void walk_retry(struct loop_timer *t);

/* The walk's rank of step (CKPT_STEP_LATEST: the store's newest COMMIT
 * below `below`, 0 no bound) from the object store into the local tier. */
static int walk_fetch_start(struct conn_fetch *cf, uint64_t step, uint64_t below) {
        cf->fr = (struct fetch_request){
                .step = step,
                .below = below,
                .which = CKPT_FETCH_RANK,
                .index = cf->req.latest_rank.rank,
                .uid = (uint32_t)cf->c->uid,
                .done = fetch_request_done,
        };
        snprintf(cf->fr.job, sizeof(cf->fr.job), "%s", cf->req.latest_rank.job.str);
        return fetch_start(cf->c->srv->fetcher, &cf->fr);
}

/* Ask the object store for the candidate's rank.  true: the answer comes
 * later (walk_fetched or walk_retry); false: *why says why not. */
static bool walk_try_store(struct conn_fetch *cf, char *why, size_t size) {
        struct conn *c = cf->c;
        struct server *srv = c->srv;
        struct rank_walk *w = &cf->walk;

        if (!srv->fetcher) {
                snprintf(why, size, "no object store configured");
                return false;
        }
        w->stage = WALK_STORE;
        int r = walk_fetch_start(cf, w->step, 0);
        if (r == -EBUSY) {
                /* Another request fetches this step (another rank of this
                 * node, most likely): skipping the step now would make the
                 * job fall back for nothing.  Look again shortly. */
                loop_timer_start(srv->loop, &w->timer, 200, walk_retry);
                c->fetch = cf;
                return true;
        }
        if (r < 0) {
                snprintf(why, size, "not fetched from the object store: %s", strerror(-r));
                return false;
        }
        c->fetch = cf;
        log_info("job %s step %" PRIu64 " rank %u: asking the object store",
                 cf->req.latest_rank.job.str, w->step, cf->req.latest_rank.rank);
        return true;
}

/* The neighbours found nothing (or are not there): the store, or skip.
 * true: the store answers later; false: skipped, go on with walk_run(). */
static bool walk_after_peers(struct conn_fetch *cf) {
        char why[128];

        if (walk_try_store(cf, why, sizeof(why)))
                return true;
        walk_skip_unheld(cf, why);
        return false;
}

/* Is the candidate's rank here now (a neighbour or the store sent it)?
 * Answers and returns true if so, or on an error that ends the walk. */
static bool walk_found(struct conn_fetch *cf) {
        const struct ckpt_req_latest_rank *req = &cf->req.latest_rank;
        struct store *store;
        struct catalog *catalog;

        int r = locate(cf->c, req->job.str, cf->walk.step, req->rank, &store, &catalog);
        if (r == 0) {
                walk_answer(cf, cf->walk.step, cf->walk.world_size);
                return true;
        }
        if (r == -EACCES) {
                locate_error(cf->c, r, req->job.str, cf->walk.step, req->rank);
                walk_free(cf);
                return true;
        }
        return false;
}

static void walk_retry(struct loop_timer *t) {
        struct conn_fetch *cf = container_of(t, struct conn_fetch, walk.timer);

        cf->c->fetch = NULL;
        if (walk_found(cf))
                return;
        if (!walk_after_peers(cf))
                walk_run(cf);
}

/* peers_fetch_rank's answer. */
static void walk_peers_done(void *userdata, int error, uint32_t ranks, const char *msg) {
        struct walk_ticket *t = userdata;
        struct conn_fetch *cf = t->cf;
        (void)ranks;

        free(t);
        if (!cf)
                return; /* abandoned: the client left */
        cf->walk.ticket = NULL;
        cf->c->fetch = NULL;
        if (error == 0 && walk_found(cf))
                return;
        if (error == 0 || error == -ENOENT)
                snprintf(cf->walk.peers_why, sizeof(cf->walk.peers_why), "on no neighbour");
        else
                snprintf(cf->walk.peers_why, sizeof(cf->walk.peers_why), "not from the "
                         "neighbours: %s", msg ? msg : strerror(-error));
        if (!walk_after_peers(cf))
                walk_run(cf);
}

/* A fetch from the object store ended (fetch_request_done). */
static void walk_fetched(struct conn_fetch *cf, int error, const char *msg) {
        const struct ckpt_req_latest_rank *req = &cf->req.latest_rank;
        char why[CKPT_ERRMSG_MAX / 2];

        if (cf->walk.stage == WALK_STORE_LATEST) {
                if (error == 0) {
                        /* the rank came along: it is in the local tier now */
                        walk_answer(cf, cf->fr.out_step, cf->fr.world_size);
                } else if (error == -ENOENT) {
                        log_info("job %s rank %u: the object store has nothing older: %s",
                                 req->job.str, req->rank, msg ? msg : strerror(-error));
                        walk_fail(cf);
                } else {
                        /* not "nothing to restore": the trainer must not start
                         * from scratch because the store did not answer */
                        conn_error(cf->c, error, "job '%s' rank %u: no committed step to restore "
                                   "on this node; asking the object store failed: %s",
                                   req->job.str, req->rank, msg ? msg : strerror(-error));
                        walk_free(cf);
                }
                return;
        }
        if (error == 0 && walk_found(cf))
                return;
        if (error == 0 || error == -ENOENT)
                snprintf(why, sizeof(why), "not in the object store");
        else
                snprintf(why, sizeof(why), "the object store: %s", msg ? msg : strerror(-error));
        walk_skip_unheld(cf, why);
        walk_run(cf);
}

/* No candidate is left here: the store's newest committed step below the
 * bound that holds the rank, or -ENOENT. */
static void walk_store_latest(struct conn_fetch *cf) {
        struct conn *c = cf->c;
        struct server *srv = c->srv;
        struct rank_walk *w = &cf->walk;

        if (!srv->fetcher || w->below == 0) {
                walk_fail(cf);
                return;
        }
        w->stage = WALK_STORE_LATEST;
        int r = walk_fetch_start(cf, CKPT_STEP_LATEST, w->below);
        if (r < 0) {
                conn_error(c, r, "job '%s' rank %u: no committed step to restore on this node; "
                           "cannot ask the object store: %s", cf->req.latest_rank.job.str,
                           cf->req.latest_rank.rank, strerror(-r));
                walk_free(cf);
                return;
        }
        c->fetch = cf;
        log_info("job %s rank %u: no committed step here to restore it from; asking the "
                 "object store", cf->req.latest_rank.job.str, cf->req.latest_rank.rank);
}

/* Try candidates, newest first, until one needs to wait for a neighbour or
 * the store, one serves, or none is left.  A loop, not a recursion: a job
 * may have many committed steps that are all gone. */
static void walk_run(struct conn_fetch *cf) {
        struct conn *c = cf->c;
        struct server *srv = c->srv;
        struct rank_walk *w = &cf->walk;
        const struct ckpt_req_latest_rank *req = &cf->req.latest_rank;

        for (;;) {
                int r = walk_candidate(c, req->job.str, w->below, &w->step, &w->world_size);
                if (r == -ENOENT) {
                        walk_store_latest(cf);
                        return;
                }
                if (r < 0) {
                        conn_error(c, r, "cannot look up the committed steps of job '%s': "
                                   "catalog error", req->job.str);
                        walk_free(cf);
                        return;
                }
                if (!w->have_newest) {
                        w->have_newest = true;
                        w->newest = w->step;
                }
                if (req->rank >= w->world_size) {
                        walk_skip(cf, "its world size is %u: there is no rank %u",
                                  w->world_size, req->rank);
                        continue;
                }
                /* a copy here found corrupt and not repairable: another
                 * copy of the step would have repaired it (heal.c tried
                 * the neighbours and the store), so go older */
                if (heal_unrepairable(srv, req->job.str, w->step, req->rank)) {
                        walk_skip(cf, "its copy on node %u is corrupt and no good copy was found",
                                  srv->opts.node_index);
                        continue;
                }
                if (walk_found(cf))
                        return;
                if (!srv->peers) {
                        snprintf(w->peers_why, sizeof(w->peers_why), "replication is off");
                } else {
                        struct walk_ticket *t = calloc(1, sizeof(*t));
                        r = t ? peers_fetch_rank(srv->peers, req->job.str, w->step, req->rank,
                                                 walk_peers_done, t)
                              : -ENOMEM;
                        if (r == 0) {
                                t->cf = cf;
                                w->ticket = t;
                                w->stage = WALK_PEERS;
                                c->fetch = cf;
                                log_info("job %s step %" PRIu64 " rank %u not on this node; "
                                         "asking the neighbours", req->job.str, w->step,
                                         req->rank);
                                return;
                        }
                        free(t);
                        snprintf(w->peers_why, sizeof(w->peers_why), "%s",
                                 r == -EHOSTUNREACH ? "no neighbour is up" : strerror(-r));
                }
                if (walk_after_peers(cf))
                        return;
        }
}

void restore_handle_latest_rank(struct conn *c, const struct ckpt_req_latest_rank *req) {
        int r = conn_check_job(c, req->job.str, false);
        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", req->job.str);
                return;
        }
        /* -ENOENT: not saved here; replica areas or the store may know it */
        if (r < 0 && r != -ENOENT) {
                conn_error(c, r, "catalog error");
                return;
        }
        struct conn_fetch *cf = calloc(1, sizeof(*cf));
        if (!cf) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        cf->c = c;
        cf->type = CKPT_MSG_LATEST_RANK;
        cf->req.latest_rank = *req;
        cf->walk.below = req->below;
        walk_run(cf);
}

void restore_handle_shard_list(struct conn *c, const struct ckpt_req_shard_list *req) {
        struct store *store;
        struct catalog *catalog;
        int r = locate_committed(c, CKPT_MSG_SHARD_LIST, req, sizeof(*req), req->job.str,
                                 req->step, req->rank, &store, &catalog);
        if (r > 0)
                return;
        /* not on this node: a neighbour or the object store, then again */
        if (r == -ENOENT &&
            restore_from_store(c, CKPT_MSG_SHARD_LIST, req, sizeof(*req), req->job.str, req->step,
                               CKPT_FETCH_RANK, req->rank))
                return;
        if (r < 0) {
                locate_error(c, r, req->job.str, req->step, req->rank);
                return;
        }
        struct ckpt_reply *rep = calloc(1, sizeof(*rep));
        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        r = catalog_shard_list(catalog, req->job.str, req->step, req->rank, req->start,
                               &rep->shard_list);
        if (r == -ENOENT)
                conn_error(c, r, "job '%s' has no rank %u of step %" PRIu64 " on this node",
                           req->job.str, req->rank, req->step);
        else if (r < 0)
                conn_error(c, r, "catalog error");
        else
                conn_reply(c, rep, -1);
        free(rep);
}

/* The shard file is read (or the op is dropped): close it, and give its
 * descriptor back to the uid's budget. */
static void read_op_close_file(struct read_op *op) {
        if (op->xfer.fd < 0)
                return;
        op->xfer.fd = safe_close(op->xfer.fd);
        fd_budget_give(&op->srv->files, op->uid, 1);
}

static struct read_op *read_op_free(struct read_op *op) {
        struct server *srv = op->srv;

        if (op->has_window)
                pool_release(srv->pool, &op->window);
        read_op_close_file(op);
        free(op->expected);
        free(op);
        srv->read_ops--;
        server_check_drained(srv);
        return NULL;
}

static void read_verify_run(struct work *w) {
        struct read_op *op = container_of(w, struct read_op, work);
        const uint8_t *p = pool_extent_addr(&op->window);

        op->bad_block = -1;
        for (uint64_t i = 0; i < op->nblocks; i++) {
                uint64_t start = i * MANIFEST_BLOCK_SIZE;
                uint64_t len = MIN((uint64_t)MANIFEST_BLOCK_SIZE,
                                   op->shard_size - (op->span_start + start));
                if (crc32c(0, p + start, len) != op->expected[i]) {
                        op->bad_block = (int64_t)(op->first_block + i);
                        return;
                }
        }
}

static void read_prefetch_next(struct conn *c, const struct read_op *prev);

/* A READ window not released within [pool] window_lease: take it back, as
 * a save's (save.c), so a reader that never sends READ_DONE cannot keep
 * pool memory.  Revoked, not released: the client can still write into
 * its mapping, and that memory must reach no save. */
static void read_lease_expired(struct loop_timer *t) {
        struct read_lease *l = container_of(t, struct read_lease, timer);
        struct conn *c = l->conn;
        size_t i = (size_t)(l - c->read_leases);

        log_notice("client %u (pid %d uid %u): READ window in slot %u not released within "
                   "%" PRIu64 " ms ([pool] window_lease); taken back", c->id, (int)c->pid,
                   (unsigned)c->uid, c->reads[i].slot->id, c->srv->opts.window_lease_ms);
        c->read_revoked[i] = c->reads[i].slot->id + 1;
        pool_revoke(c->srv->pool, &c->reads[i]);
        c->reads[i].slot = NULL;
}

/* Answer op's client: the verified window, or the error. */
static void read_finish(struct read_op *op) {
        struct conn *c = op->conn;

        if (op->error < 0) {
                conn_error(c, op->error, "reading shard '%s' failed: %s", op->shard,
                           strerror(-op->error));
                read_op_free(op);
                return;
        }
        /* A read-ahead verified its whole span; the request that claims it
         * may cover less.  The blocks before the first bad one are good, so
         * only a request reaching that block is concerned (on-disk.md: a
         * ranged read is verified by the blocks it touches). */
        if (op->bad_block >= 0 &&
            (uint64_t)op->bad_block * MANIFEST_BLOCK_SIZE < op->offset + op->length) {
                /* not the client's problem while a good copy exists: have
                 * the copy repaired and serve the range again from it */
                char why[CKPT_NAME_MAX + 64];
                snprintf(why, sizeof(why), "shard %s block %" PRId64 " failed its CRC32C",
                         op->shard, op->bad_block);
                struct ckpt_req_read req = { .step = op->step, .rank = op->rank,
                                             .offset = op->offset, .length = op->length };
                ckpt_name_set(&req.job, op->job);
                ckpt_name_set(&req.shard, op->shard);
                c->pending = NULL;
                if (!op->after_heal && restore_heal(c, CKPT_MSG_READ, &req, why)) {
                        read_op_free(op);
                        return;
                }
                conn_error(c, -EIO, "shard '%s' block %" PRId64 " of rank %u step %" PRIu64
                           " failed its CRC32C on node %u%s", op->shard, op->bad_block, op->rank,
                           op->step, c->srv->opts.node_index,
                           op->after_heal ? " again after its copy was repaired" : "");
                read_op_free(op);
                return;
        }
        int lease = -1;
        for (int i = 0; i < SERVER_READS_PER_CONN; i++)
                if (!c->reads[i].slot) {
                        lease = i;
                        break;
                }
        /* a free lease was checked before the request was accepted */
        c->reads[lease] = op->window;
        c->read_revoked[lease] = 0;
        if (c->srv->opts.window_lease_ms) {
                c->read_leases[lease].conn = c;
                loop_timer_start(c->srv->loop, &c->read_leases[lease].timer,
                                 c->srv->opts.window_lease_ms, read_lease_expired);
        }
        op->has_window = false;
        c->pending = NULL;
        metrics_count(METRIC_READS, 1);
        metrics_count(METRIC_RESTORED_BYTES, op->length);
        metrics_observe_us(METRIC_READ_SECONDS, metrics_now_us() - c->read_asked_us);
        conn_reply_slot(c, &c->reads[lease], op->offset - op->span_start, op->offset, op->length);
        /* a restore reads on: have the next window on its way while the
         * client copies this one */
        c->ra.next = op->offset + op->length;
        c->ra.at_end = c->ra.next >= op->shard_size;
        snprintf(c->ra.following, sizeof(c->ra.following), "%s",
                 c->ra.at_end ? op->following : "");
        if (!c->closing)
                read_prefetch_next(c, op);
        read_op_free(op);
}

static void read_verify_done(struct work *w) {
        struct read_op *op = container_of(w, struct read_op, work);

        if (op->bad_block >= 0) {
                server_job_error(op->srv, op->job, "job %s step %" PRIu64 " rank %u shard %s: block "
                                 "%" PRId64 " fails its CRC32C: the copy on disk is corrupt",
                                 op->job, op->step, op->rank, op->shard, op->bad_block);
        }
        op->ready = true;
        if (op->conn)
                read_finish(op);
        else if (!op->prefetch)
                read_op_free(op); /* orphaned: its client went away */
        /* else: an unclaimed prefetch waits for its request */
}

static void read_done(struct store_xfer *x, int error) {
        struct read_op *op = container_of(x, struct read_op, xfer);

        read_op_close_file(op);
        if (error < 0) {
                op->error = error;
                op->ready = true;
                if (op->conn)
                        read_finish(op);
                else if (!op->prefetch)
                        read_op_free(op);
                return;
        }
        op->work.run = read_verify_run;
        op->work.done = read_verify_done;
        worker_pool_submit(op->srv->workers, &op->work);
}

/* The window is lent: read the blocks covering the range into it. */
static void read_submit(struct read_op *op) {
        /* a shorter extent than asked for reads fewer whole blocks */
        uint64_t room = pool_extent_bytes(&op->window);
        if (op->span_length > room) {
                op->span_length = room;
                op->length = op->span_start + room - op->offset;
        }
        op->nblocks = (op->span_length + MANIFEST_BLOCK_SIZE - 1) / MANIFEST_BLOCK_SIZE;
        op->xfer.slot = op->window.slot;
        op->xfer.slot_offset = pool_extent_offset(&op->window);
        op->xfer.file_offset = op->span_start;
        op->xfer.length = ALIGN_UP(op->span_length, 4096);
        op->xfer.done = read_done;
        store_read(op->store, &op->xfer);
}

static void read_window_ready(struct pool_waiter *w, const struct pool_extent *e, int error) {
        struct conn *c = container_of(w, struct conn, waiter);
        struct read_op *op = c->pending;

        if (!e) {
                char why[CKPT_ERRMSG_MAX];
                save_describe_pool(c->srv, (uint32_t)c->uid, why, sizeof(why));
                conn_error(c, error, "no shared-memory slot became free within %" PRIu64 " ms: %s",
                           c->srv->opts.pool_wait_ms, why);
                read_op_free(op);
                return;
        }
        op->window = *e;
        op->has_window = true;
        read_submit(op);
}

/* The name of the shard after `shard` in name order in m (the order
 * SHARD_LIST gives, which a restore walks), into out; "" when it is the
 * last.  One pass over m, as manifest_find() makes for every READ. */
static void shard_following(const struct manifest *m, const char *shard, char *out, size_t len) {
        const char *best = NULL;

        for (uint32_t i = 0; i < m->nshards; i++) {
                const char *n = m->shards[i].name;
                if (strcmp(n, shard) > 0 && (!best || strcmp(n, best) < 0))
                        best = n;
        }
        snprintf(out, len, "%s", best ? best : "");
}

/*
 * A read of [offset, offset+length) of a shard on disk: open it, clip the
 * range to the shard and to one slot of whole blocks.  Returns the op, or
 * NULL with *error and msg set; *eof when offset is exactly the end.
 */
static struct read_op *read_op_new(struct server *srv, uint32_t uid, struct store *store,
                                   const char *job, uint64_t step,
                                   uint32_t rank, const char *shard, uint64_t offset,
                                   uint64_t length, int *error, bool *eof, char *msg, size_t msglen) {
        const struct manifest *m;
        const struct manifest_shard *sh;
        int fd;

        *eof = false;
        int r = server_take_files(srv, uid, 1, "a READ", msg, msglen);
        if (r < 0) {
                *error = r;
                return NULL;
        }
        r = store_shard_open(store, job, step, rank, shard, true, &fd, &m, &sh);
        if (r < 0) {
                fd_budget_give(&srv->files, uid, 1);
                snprintf(msg, msglen, "cannot open shard '%s' of rank %u step %" PRIu64 ": %s",
                         shard, rank, step, strerror(-r));
                *error = r;
                return NULL;
        }
        if (offset > sh->size) {
                safe_close(fd);
                fd_budget_give(&srv->files, uid, 1);
                snprintf(msg, msglen, "offset %" PRIu64 " is beyond the end of shard '%s' (%" PRIu64
                         " bytes)", offset, shard, sh->size);
                *error = -ERANGE;
                return NULL;
        }
        length = MIN(length, sh->size - offset);
        if (length == 0) {
                safe_close(fd);
                fd_budget_give(&srv->files, uid, 1);
                *eof = true;
                return NULL;
        }
        struct read_op *op = calloc(1, sizeof(*op));
        if (!op) {
                safe_close(fd);
                fd_budget_give(&srv->files, uid, 1);
                snprintf(msg, msglen, "out of memory");
                *error = -ENOMEM;
                return NULL;
        }
        op->srv = srv;
        op->store = store;
        srv->read_ops++;
        op->uid = uid;
        op->xfer.fd = fd;
        snprintf(op->job, sizeof(op->job), "%s", job);
        snprintf(op->shard, sizeof(op->shard), "%s", shard);
        op->step = step;
        op->rank = rank;
        op->offset = offset;
        op->shard_size = sh->size;
        op->span_start = ALIGN_DOWN(offset, (uint64_t)MANIFEST_BLOCK_SIZE);
        uint64_t end = MIN(ALIGN_UP(offset + length, (uint64_t)MANIFEST_BLOCK_SIZE), sh->size);
        end = MIN(end, op->span_start + pool_slot_size(srv->pool));
        op->span_length = end - op->span_start;
        op->length = MIN(length, end - offset);
        if (op->offset + op->length == sh->size)
                shard_following(m, shard, op->following, sizeof(op->following));
        op->first_block = op->span_start / MANIFEST_BLOCK_SIZE;
        uint64_t nblocks = (op->span_length + MANIFEST_BLOCK_SIZE - 1) / MANIFEST_BLOCK_SIZE;
        op->expected = calloc(nblocks, sizeof(uint32_t));
        if (!op->expected) {
                read_op_free(op);
                snprintf(msg, msglen, "out of memory");
                *error = -ENOMEM;
                return NULL;
        }
        memcpy(op->expected, sh->block_crcs + op->first_block, nblocks * sizeof(uint32_t));
        return op;
}

static void read_prefetch_forget(struct read_op *op) {
        op->prefetch = false;
        if (op->ready)
                read_op_free(op);
        /* else orphaned: freed when its I/O or check completes */
}

void restore_drop_prefetches_of(struct conn *c) {
        for (unsigned i = 0; i < c->nprefetch; i++)
                read_prefetch_forget(c->prefetch[i]);
        c->nprefetch = 0;
}

/* Queue read-aheads after prev (or after the last one queued), in pieces
 * the size of the reader's READs, until c->ra.window bytes past prev are
 * on their way, the queue is full, the rank's shards end, or memory is
 * short.  Past the end of a shard only for a reader that has already gone
 * on from one shard's end to the start of the next (c->ra.across): which
 * shard a reader wants next is otherwise a guess, and a wrong one read a
 * whole window for nothing (issue 13).  A restore reading every shard
 * whole in SHARD_LIST's order, one READ each, then finds the next shard
 * read while it copies this one, instead of the disk idling between its
 * READs. */
static void read_prefetch_next(struct conn *c, const struct read_op *prev) {
        struct server *srv = c->srv;
        char msg[CKPT_ERRMSG_MAX];
        uint64_t ahead = 0; /* bytes on their way past prev, in the reader's order */
        bool eof;
        int error;

        for (unsigned i = 0; i < c->nprefetch; i++)
                ahead += c->prefetch[i]->length;
        while (c->nprefetch < SERVER_PREFETCH_DEPTH && !srv->draining) {
                const struct read_op *base = c->nprefetch ? c->prefetch[c->nprefetch - 1] : prev;
                const char *shard = base->shard;
                uint64_t next = base->offset + base->length;
                if (ahead >= c->ra.window)
                        return;
                if (next >= base->shard_size) {
                        if (!c->ra.across || !base->following[0])
                                return;
                        shard = base->following;
                        next = 0;
                }
                /* end on a block boundary: the next READ starts there, and a
                 * piece ending inside a block would read that block twice */
                uint64_t end = ALIGN_UP(next + MIN(c->ra.piece, c->ra.window - ahead),
                                        (uint64_t)MANIFEST_BLOCK_SIZE);
                struct read_op *op = read_op_new(srv, (uint32_t)c->uid, base->store, base->job,
                                                 base->step, base->rank, shard, next,
                                                 end - next, &error, &eof, msg, sizeof(msg));
                if (!op)
                        return; /* the real request will report any problem */
                /* Only with memory to spare: a read-ahead never waits for the
                 * pool, never while a save waits for it, and never takes
                 * what the memory tier keeps. */
                uint32_t want = pool_units_for(srv->pool, op->span_length);
                if (pool_waiters(srv->pool) > 0 ||
                    pool_try_acquire_spare(srv->pool, (uint32_t)c->uid, want, &op->window) <= 0) {
                        read_op_free(op);
                        return;
                }
                op->has_window = true;
                op->prefetch = true;
                c->prefetch[c->nprefetch++] = op;
                read_submit(op);
                ahead += op->length;
        }
}

/* Size the read-ahead for req.  The first READ of a shard, or one that
 * does not start where the previous one of that shard ended, reads only
 * the blocks it covers: a random reader costs no more than its own range.
 * Each READ that goes on where the previous one ended doubles the window,
 * up to SERVER_PREFETCH_DEPTH slots, so a restore streaming a shard keeps
 * the disk busy after a few READs.  So does a READ at offset 0 of the
 * shard that follows (by name) one this connection read whole: a restore
 * of many shards of one READ each is one stream, and its window grows
 * across them (read_prefetch_next then reads on into the next shard). */
static void read_ahead_note(struct conn *c, const struct ckpt_req_read *req) {
        struct read_ahead *ra = &c->ra;
        uint64_t slot = pool_slot_size(c->srv->pool);
        uint64_t piece = MIN(ALIGN_UP(MAX(req->length, 1), (uint64_t)MANIFEST_BLOCK_SIZE), slot);
        bool same_rank = ra->step == req->step && ra->rank == req->rank &&
                         !strcmp(ra->job, req->job.str);
        bool on = same_rank && ra->next == req->offset && !strcmp(ra->shard, req->shard.str);
        bool across = same_rank && !on && req->offset == 0 && ra->from_start && ra->at_end &&
                      ra->following[0] && !strcmp(ra->following, req->shard.str);

        if (on || across) {
                ra->window = MIN(MAX(2 * ra->window, piece), SERVER_PREFETCH_DEPTH * slot);
                if (across) {
                        ra->across = true;
                        snprintf(ra->shard, sizeof(ra->shard), "%s", req->shard.str);
                }
        } else {
                ra->window = 0;
                ra->across = false;
                ra->from_start = req->offset == 0;
                snprintf(ra->job, sizeof(ra->job), "%s", req->job.str);
                snprintf(ra->shard, sizeof(ra->shard), "%s", req->shard.str);
                ra->step = req->step;
                ra->rank = req->rank;
        }
        ra->piece = piece;
        /* read_finish() sets where this READ ended once it is answered */
        ra->next = UINT64_MAX;
        ra->at_end = false;
}

/* Is req the read at the very end of the shard the previous READ read to
 * its end (a reader checking that nothing follows, as ckpt-testrank does)?
 * It is answered without touching the read-ahead: the next shard, read
 * ahead for a restore walking the shards, stays on its way. */
static bool read_ahead_at_end(const struct read_ahead *ra, const struct ckpt_req_read *req) {
        return ra->at_end && ra->next == req->offset && ra->step == req->step &&
               ra->rank == req->rank && !strcmp(ra->job, req->job.str) &&
               !strcmp(ra->shard, req->shard.str);
}

/* Does the request ask for what the prefetch holds? */
static bool read_prefetch_matches(const struct read_op *op, const struct ckpt_req_read *req) {
        return op->step == req->step && op->rank == req->rank && op->offset == req->offset &&
               !strcmp(op->job, req->job.str) && !strcmp(op->shard, req->shard.str);
}

/* The most one READ served from the memory tier covers: its blocks are
 * checked on the loop before the reply, so a long READ is served in
 * pieces that keep the loop responsive (and the client copies one while
 * the daemon checks the next). */
#define MEMORY_READ_MAX (16u << 20)

/*
 * A READ of a shard the memory tier holds: point the client at the bytes
 * in the slot, each block checked against the MANIFEST's CRC32C first; the
 * disk is not touched.  true: answered; false: serve it from the disk (not
 * resident, or the memory no longer matches: the shard is dropped).
 */
static void memory_ahead_forget(struct conn *c) {
        if (c->mem_ahead.shard)
                memtier_unpin(c->srv->memtier, c->mem_ahead.shard, false);
        c->mem_ahead.shard = NULL;
}

/* Check the piece after [offset, offset + len) now, while the client
 * copies this one on another core: a reader going on finds it checked,
 * and the check costs it nothing on this reply's path (the memory can
 * change after any check; what a check guarantees is the same either
 * way: the bytes matched their CRC32C when the daemon looked). */
static void memory_check_ahead(struct conn *c, struct memtier_shard *sh, uint64_t next) {
        struct pool_extent e;
        uint64_t in, bad;

        memory_ahead_forget(c);
        if (next >= memtier_shard_size(sh))
                return;
        uint64_t len = memtier_locate(sh, next, MEMORY_READ_MAX, &e, &in);
        if (len == 0 || memtier_verify(sh, next, len, &bad) < 0)
                return; /* the READ of it checks again, and says what is wrong */
        memtier_pin(sh);
        c->mem_ahead = (struct memory_ahead){ .shard = sh, .start = next, .end = next + len };
}

static bool read_from_memory(struct conn *c, const struct ckpt_req_read *req, int lease) {
        struct server *srv = c->srv;
        struct memtier_shard *sh = memtier_find(srv->memtier, MEMTIER_OWN, req->job.str,
                                                req->step, req->rank, req->shard.str);
        if (!sh || req->offset > memtier_shard_size(sh))
                return false; /* the disk path says what is wrong */
        restore_drop_prefetches_of(c);
        if (req->offset == memtier_shard_size(sh) || req->length == 0) {
                /* end of the shard: an empty window that names no slot */
                struct ckpt_reply rep = { 0 };
                rep.slot.offset = req->offset;
                conn_reply(c, &rep, -1);
                return true;
        }
        struct pool_extent e;
        uint64_t in, bad;
        uint64_t len = memtier_locate(sh, req->offset, MIN(req->length, (uint64_t)MEMORY_READ_MAX),
                                      &e, &in);
        if (len == 0)
                return false;
        bool checked = c->mem_ahead.shard == sh && req->offset >= c->mem_ahead.start &&
                       req->offset + len <= c->mem_ahead.end;
        if (!checked && memtier_verify(sh, req->offset, len, &bad) < 0) {
                server_job_error(srv, req->job.str, "job %s step %" PRIu64 " rank %u shard %s: "
                                 "block %" PRIu64 " changed in memory after it was saved (a "
                                 "trainer wrote into a slot); dropped from the memory tier, "
                                 "read from disk", req->job.str, req->step, req->rank,
                                 req->shard.str, bad);
                memtier_drop_shard(srv->memtier, sh);
                return false;
        }
        memtier_pin(sh);
        c->reads[lease] = e;
        c->read_resident[lease] = sh;
        c->read_revoked[lease] = 0;
        metrics_count(METRIC_READS, 1);
        metrics_count(METRIC_RESTORED_BYTES, len);
        metrics_observe_us(METRIC_READ_SECONDS, metrics_now_us() - c->read_asked_us);
        conn_reply_slot(c, &e, in, req->offset, len);
        memory_check_ahead(c, sh, req->offset + len);
        return true;
}

void restore_handle_read(struct conn *c, const struct ckpt_req_read *req) {
        struct server *srv = c->srv;
        char msg[CKPT_ERRMSG_MAX];
        bool eof;
        int error;

        c->read_asked_us = metrics_now_us();
        if (srv->draining) {
                conn_error(c, -ESHUTDOWN, "ckptd is shutting down; retry when it is back");
                return;
        }
        /* One READ fills at most one slot (docs/protocol.md): a longer one is
         * refused, not quietly shortened, so a client that got the geometry
         * wrong learns it instead of reading less than it thinks. */
        if (req->length > pool_slot_size(srv->pool)) {
                conn_error(c, -EINVAL, "READ of %" PRIu64 " bytes exceeds the slot size of %" PRIu64
                           " bytes (HELLO's slot_size): read a larger range in several READs",
                           req->length, pool_slot_size(srv->pool));
                return;
        }
        struct store *store;
        struct catalog *catalog;
        int r = locate_committed(c, CKPT_MSG_READ, req, sizeof(*req), req->job.str, req->step,
                                 req->rank, &store, &catalog);
        if (r > 0)
                return;
        /* not on this node: a neighbour or the object store, then again */
        if (r == -ENOENT &&
            restore_from_store(c, CKPT_MSG_READ, req, sizeof(*req), req->job.str, req->step,
                               CKPT_FETCH_RANK, req->rank))
                return;
        if (r < 0) {
                locate_error(c, r, req->job.str, req->step, req->rank);
                return;
        }
        int lease = -1;
        for (int i = SERVER_READS_PER_CONN - 1; i >= 0; i--)
                if (!c->reads[i].slot)
                        lease = i;
        if (lease < 0) {
                conn_error(c, -EMFILE, "%u reads outstanding on this connection; send READ_DONE "
                           "first", SERVER_READS_PER_CONN);
                return;
        }
        if (srv->memtier && read_from_memory(c, req, lease))
                return;
        if (read_ahead_at_end(&c->ra, req)) {
                /* end of the shard: an empty window that names no slot */
                struct ckpt_reply rep = { 0 };
                rep.slot.offset = req->offset;
                conn_reply(c, &rep, -1);
                return;
        }
        read_ahead_note(c, req);
        if (c->nprefetch && read_prefetch_matches(c->prefetch[0], req)) {
                struct read_op *op = c->prefetch[0];
                memmove(c->prefetch, c->prefetch + 1, --c->nprefetch * sizeof(c->prefetch[0]));
                op->prefetch = false;
                op->conn = c;
                op->after_heal = c->fetch_retry;
                op->length = MIN(op->length, req->length);
                c->pending = op;
                if (op->ready)
                        read_finish(op);
                /* else read_verify_done() answers */
                return;
        }
        restore_drop_prefetches_of(c);

        struct read_op *op = read_op_new(srv, (uint32_t)c->uid, store, req->job.str, req->step,
                                         req->rank, req->shard.str,
                                         req->offset, req->length, &error, &eof, msg, sizeof(msg));
        if (eof) {
                /* end of the shard: an empty window that names no slot */
                struct ckpt_reply rep = { 0 };
                rep.slot.offset = req->offset;
                conn_reply(c, &rep, -1);
                return;
        }
        if (!op) {
                /* a shard file missing, a MANIFEST that no longer parses
                 * (store_shard_open's -EIO): the copy is corrupt */
                if (error == -EIO && restore_heal(c, CKPT_MSG_READ, req, msg))
                        return;
                conn_error(c, error, "%s", msg);
                return;
        }
        op->conn = c;
        op->after_heal = c->fetch_retry;
        c->pending = op;

        uint32_t want = pool_units_for(srv->pool, op->span_length);
        r = pool_try_acquire(srv->pool, (uint32_t)c->uid, want, &op->window);
        if (r > 0) {
                op->has_window = true;
                read_submit(op);
                return;
        }
        if (r < 0) {
                conn_error(c, r, "cannot prepare a slot: %s", strerror(-r));
                read_op_free(op);
                return;
        }
        /* memory staged but unchecked, or read ahead, is the first to go */
        server_relieve_memory(srv);
        r = pool_try_acquire(srv->pool, (uint32_t)c->uid, want, &op->window);
        if (r > 0) {
                op->has_window = true;
                read_submit(op);
                return;
        }
        pool_wait(srv->pool, &c->waiter, (uint32_t)c->uid, want, srv->opts.pool_wait_ms,
                  read_window_ready);
}

void restore_drop_prefetches(struct server *srv) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &srv->conns) {
                struct conn *c = list_entry(pos, struct conn, link);
                restore_drop_prefetches_of(c);
        }
}

/* READ_DONE (or the connection went): the window goes back to the pool,
 * or the memory tier's shard is no longer pinned by it. */
static void read_lease_return(struct conn *c, int i) {
        loop_timer_cancel(&c->read_leases[i].timer);
        if (c->read_resident[i])
                memtier_unpin(c->srv->memtier, c->read_resident[i], false);
        else
                pool_release(c->srv->pool, &c->reads[i]);
        c->read_resident[i] = NULL;
        c->reads[i].slot = NULL;
}

void restore_handle_read_done(struct conn *c, const struct ckpt_req_read_done *req) {
        for (int i = 0; i < SERVER_READS_PER_CONN; i++) {
                if (c->reads[i].slot && c->reads[i].slot->id == req->slot_id) {
                        read_lease_return(c, i);
                        conn_reply_empty(c);
                        return;
                }
        }
        for (int i = 0; i < SERVER_READS_PER_CONN; i++) {
                if (c->read_revoked[i] != req->slot_id + 1)
                        continue;
                c->read_revoked[i] = 0;
                conn_error(c, -ETIME, "the READ window in slot %u was taken back: it was not "
                           "released (READ_DONE) within %" PRIu64 " ms ([pool] window_lease); "
                           "READ the range again if it is still needed", req->slot_id,
                           c->srv->opts.window_lease_ms);
                return;
        }
        conn_error(c, -EINVAL, "slot %u is not lent to this connection by a READ", req->slot_id);
}

/*
 * MAP of a shard the memory tier holds in one run of one slot: hand over
 * a read-only descriptor of the slot's memfd and where the shard starts in
 * it.  Neither side checks the CRC32C here: the daemon checked every block
 * when the shard was staged, and checking 1 GiB costs ~0.1 s where the
 * mapping costs microseconds (docs/design-decisions.md, "The memory
 * tier").  From now on the tier revokes rather than releases the shard
 * when it gives it back, so the mapping never shows a later save's bytes.
 * true: answered.
 */
static bool map_from_memory(struct conn *c, const struct ckpt_req_read *req) {
        struct memtier_shard *sh = memtier_find(c->srv->memtier, MEMTIER_OWN, req->job.str,
                                                req->step, req->rank, req->shard.str);
        struct slot *slot;
        uint64_t offset;
        char path[64];

        /* an older client maps from offset 0 and checks the CRC32C */
        if (!sh || c->busy_version < CKPT_PROTO_VERSION_MEMORY ||
            !memtier_contiguous(sh, &slot, &offset))
                return false;
        /* a descriptor of the same memory that cannot be mapped writable */
        snprintf(path, sizeof(path), "/proc/self/fd/%d", slot->memfd);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                log_notice("MAP of job %s step %" PRIu64 " rank %u shard %s: cannot reopen slot "
                           "%u read-only (%m); mapping the file instead", req->job.str,
                           req->step, req->rank, req->shard.str, slot->id);
                return false;
        }
        memtier_expose(sh);
        struct ckpt_reply rep = { 0 };
        rep.map.size = memtier_shard_size(sh);
        rep.map.crc32c = memtier_shard_crc32c(sh);
        rep.map.has_fd = 1;
        rep.map.offset = offset;
        rep.map.memory = 1;
        conn_reply(c, &rep, fd);
        return true;
}

void restore_handle_map(struct conn *c, const struct ckpt_req_read *req) {
        const struct manifest *m;
        const struct manifest_shard *sh;
        int fd;

        struct store *store;
        struct catalog *catalog;
        int r = locate_committed(c, CKPT_MSG_MAP, req, sizeof(*req), req->job.str, req->step,
                                 req->rank, &store, &catalog);
        if (r > 0)
                return;
        /* not on this node: a neighbour or the object store, then again */
        if (r == -ENOENT &&
            restore_from_store(c, CKPT_MSG_MAP, req, sizeof(*req), req->job.str, req->step,
                               CKPT_FETCH_RANK, req->rank))
                return;
        if (r < 0) {
                locate_error(c, r, req->job.str, req->step, req->rank);
                return;
        }
        if (c->srv->memtier && map_from_memory(c, req))
                return;
        /* MAP hands over the file and the client checks the whole-shard
         * CRC32C itself; a copy known corrupt with no good one left is
         * not handed over at all */
        if (heal_unrepairable(c->srv, req->job.str, req->step, req->rank)) {
                conn_error(c, -EIO, "rank %u of step %" PRIu64 " of job '%s' is corrupt on node "
                           "%u and no good copy could be found (ckptctl verify shows what); "
                           "restore an older step", req->rank, req->step, req->job.str,
                           c->srv->opts.node_index);
                return;
        }
        r = store_shard_open(store, req->job.str, req->step, req->rank, req->shard.str,
                             false, &fd, &m, &sh);
        if (r == -EIO) {
                char why[CKPT_NAME_MAX + 64];
                snprintf(why, sizeof(why), "shard %s cannot be opened (its file or the MANIFEST "
                         "is damaged)", req->shard.str);
                if (restore_heal(c, CKPT_MSG_MAP, req, why))
                        return;
        }
        if (r < 0) {
                conn_error(c, r, "cannot open shard '%s': %s", req->shard.str, strerror(-r));
                return;
        }
        struct ckpt_reply rep = { 0 };
        rep.map.size = sh->size;
        rep.map.crc32c = sh->crc32c;
        rep.map.has_fd = 1;
        conn_reply(c, &rep, fd);
}

void restore_conn_closed(struct conn *c) {
        if (c->fetch && (c->fetch->peers_busy || c->fetch->healing)) {
                c->fetch->c = NULL; /* peer_rank_done / request_healed frees it */
                c->fetch = NULL;
        }
        if (c->peer_fetch) {
                c->peer_fetch->c = NULL; /* the restore goes on; nobody to answer */
                c->peer_fetch = NULL;
        }
        if (c->fetch && c->fetch->type == CKPT_MSG_LATEST_RANK) {
                /* a fetch the walk started finishes populating, quietly */
                fetch_cancel(c->srv->fetcher, &c->fetch->fr);
                walk_free(c->fetch);
                c->fetch = NULL;
        }
        if (c->fetch) {
                loop_timer_cancel(&c->fetch->busy_retry);
                fetch_cancel(c->srv->fetcher, &c->fetch->fr);
                free(c->fetch);
                c->fetch = NULL;
        }
        if (c->busy && c->busy_type == CKPT_MSG_READ && c->pending) {
                struct read_op *op = c->pending;
                /* Waiting for a slot: the waiter was cancelled, free now.
                 * Otherwise I/O or a worker still holds it: orphan it. */
                if (!op->has_window)
                        read_op_free(op);
                else
                        op->conn = NULL;
        }
        restore_drop_prefetches_of(c);
        memory_ahead_forget(c);
        for (int i = 0; i < SERVER_READS_PER_CONN; i++)
                if (c->reads[i].slot)
                        read_lease_return(c, i);
}
