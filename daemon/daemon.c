/* SPDX-License-Identifier: MIT */
/*
 * daemon — wires the modules together and talks to systemd.
 *
 * Start-up order matters: the catalog is reconciled with the disk before
 * the socket accepts anyone, so the first client already sees exactly what
 * survived; READY=1 is sent only then.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "crc32c.h"
#include "daemon.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/store.h"
#include "metrics/endpoint.h"
#include "pool/pool.h"
#include "peer/auth.h"
#include "peer/peers.h"
#include "step/coordinator.h"
#include "remote/audit.h"
#include "remote/credentials.h"
#include "remote/fetch.h"
#include "remote/flush.h"
#include "remote/s3.h"
#include "scrub/scrub.h"
#include "server/cluster_view.h"
#include "server/exposition.h"
#include "server/delete.h"
#include "server/heal.h"
#include "server/save.h"
#include "server/server.h"
#include "server/suspect.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

struct daemon {
        struct config *cfg;
        const char *config_path;
        int argc;
        char **argv;
        struct loop *loop;
        struct worker_pool *workers;
        struct pool *pool;
        struct catalog *catalog;
        struct store *store;
        struct server *server;
        struct s3_client *s3;
        struct flusher *flusher;
        struct audit *audit;
        struct fetcher *fetcher;
        struct peers *peers;
        struct replica_area *areas;
        size_t nareas;
        struct scrub *scrub;
        struct metrics_endpoint *metrics; /* NULL: [metrics] listen is empty */
        /* the cluster-wide commit: node 0's coordinator, and the messages
         * between this node and its own coordinator (delivered from a
         * timer, never inside the call that sends them) */
        struct coordinator *coord;
        struct list local_msgs;
        struct loop_timer local_timer;
        char remote_target[CKPT_ERRMSG_MAX + 1];
        int signal_fd;
        struct loop_watch signal_watch;
        struct loop_timer watchdog;
        struct loop_timer yield_timer;
        uint64_t watchdog_ms;
        struct loop_hook flush_hook;
        uint64_t status_ms;
        char status[256];
};

/* ---- metrics ---------------------------------------------------------------------- */

/* The HTTP endpoint's scrape: everything, every job (whoever may reach the
 * port is the operator's choice, ckptd.conf(5) [metrics] listen). */
static int daemon_metrics_render(void *userdata, char **out, size_t *len) {
        struct daemon *d = userdata;
        return exposition_render(d->server, -1, out, len);
}

static int daemon_metrics_open(struct daemon *d) {
        const struct node_address *a = &d->cfg->metrics_listen;

        if (!a->host)
                return 0;
        return metrics_endpoint_new(&d->metrics, d->loop, a->host, a->port,
                                    daemon_metrics_render, d);
}

/* ---- reconcile ------------------------------------------------------------------- */

struct reconcile {
        struct store *store;
        struct catalog *catalog;
        uint32_t ranks_in_step; /* ranks seen since the last step callback */
        uint32_t *ranks;        /* which ones */
        size_t ranks_cap;
        bool ranks_lost;        /* out of memory recording them */
        struct {
                char job[CKPT_NAME_MAX + 1];
                uint64_t step;
        } *seen;
        size_t nseen, cap;
        uint32_t steps, committed;
};

static void reconcile_rank(void *userdata, const struct manifest *m) {
        struct reconcile *rc = userdata;
        struct catalog *cat = rc->catalog;

        /* A rank already indexed with exactly these shards keeps its rows:
         * they carry the object-store tier's progress (upload ids, parts),
         * which a rebuild would throw away and a flush would redo. */
        /* (void): reconcile is best effort per row: catalog.c logs a fault, and the next start
         * tries again from the same files */
        (void)catalog_job_add(cat, m->job, m->uid);
        if (catalog_rank_matches(cat, m) != 1)
                /* (void): reconcile is best effort per row: catalog.c logs a fault, and the
                 * next start tries again from the same files */
                (void)catalog_rank_add(cat, m);
        if (rc->ranks_in_step == rc->ranks_cap && !rc->ranks_lost) {
                size_t cap = rc->ranks_cap ? rc->ranks_cap * 2 : 64;
                uint32_t *n = realloc(rc->ranks, cap * sizeof(*n));
                if (n) {
                        rc->ranks = n;
                        rc->ranks_cap = cap;
                } else {
                        rc->ranks_lost = true; /* then nothing is pruned */
                }
        }
        if (!rc->ranks_lost)
                rc->ranks[rc->ranks_in_step] = m->rank;
        rc->ranks_in_step++;
}

static void reconcile_step(void *userdata, const char *job, uint64_t step,
                           const struct commit_record *committed) {
        struct reconcile *rc = userdata;
        uint32_t ranks = rc->ranks_in_step;

        bool lost = rc->ranks_lost;
        rc->ranks_in_step = 0;
        rc->ranks_lost = false;
        if (ranks == 0 && committed && catalog_job_uid(rc->catalog, job, NULL) == 0) {
                /* every rank of a committed step is gone from this node: the
                 * step stays, damaged (its ranks come back from a neighbour
                 * or the object store), rather than be forgotten here */
                /* (void): reconcile is best effort per row: catalog.c logs a fault, and the
                 * next start tries again from the same files */
                (void)catalog_ckpt_upsert(rc->catalog, job, step, committed->world_size,
                                          CKPT_STATE_COMMITTED, committed->committed_at);
        } else if (ranks == 0) {
                /* nothing survived of this step (a first rank interrupted) */
                /* (void): reconcile is best effort per row: catalog.c logs a fault, and the
                 * next start tries again from the same files */
                (void)catalog_ckpt_delete(rc->catalog, job, step);
                store_step_delete(rc->store, job, step);
                return;
        }
        /* Ranks indexed but no longer on disk go (the ranks seen are in
         * scan order, which is not sorted: a linear search is fine for the
         * few ranks a node holds). */
        uint32_t indexed[256];
        size_t nindexed = 0;
        if (!lost && catalog_ranks(rc->catalog, job, step, indexed, 256, &nindexed) == 0) {
                for (size_t i = 0; i < nindexed; i++) {
                        bool seen = false;
                        for (uint32_t k = 0; k < ranks && !seen; k++)
                                seen = rc->ranks[k] == indexed[i];
                        if (!seen)
                                /* (void): reconcile is best effort per row: catalog.c logs a
                                 * fault, and the next start tries again from the same files */
                                (void)catalog_rank_delete(rc->catalog, job, step, indexed[i]);
                }
        }
        struct ckpt_ckpt_entry e;
        if (catalog_ckpt_get(rc->catalog, job, step, &e) < 0)
                return;
        if (committed) {
                /* (void): reconcile is best effort per row: catalog.c logs a fault, and the
                 * next start tries again from the same files */
                (void)catalog_ckpt_upsert(rc->catalog, job, step, e.world_size,
                                          CKPT_STATE_COMMITTED, committed->committed_at);
                /* (void): reconcile is best effort per row, as above */
                (void)catalog_ckpt_set_ranks_committed(rc->catalog, job, step,
                                                       committed->nranks);
        } else
                /* (void): reconcile is best effort per row: catalog.c logs a fault, and the
                 * next start tries again from the same files */
                (void)catalog_ckpt_upsert(rc->catalog, job, step, e.world_size, CKPT_STATE_LOCAL,
                                          0);
        rc->steps++;
        rc->committed += committed != NULL;
        if (rc->nseen == rc->cap) {
                size_t cap = rc->cap ? rc->cap * 2 : 64;
                void *n = realloc(rc->seen, cap * sizeof(*rc->seen));
                if (!n)
                        return;
                rc->seen = n;
                rc->cap = cap;
        }
        snprintf(rc->seen[rc->nseen].job, sizeof(rc->seen[0].job), "%s", job);
        rc->seen[rc->nseen].step = step;
        rc->nseen++;
}

static int reconcile_sweep(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct reconcile *rc = userdata;
        (void)state;
        for (size_t i = 0; i < rc->nseen; i++)
                if (rc->seen[i].step == step && !strcmp(rc->seen[i].job, job))
                        return 0;
        log_notice("reconcile: job %s step %" PRIu64 " is in the catalog but not on disk; "
                   "forgetting it", job, step);
        /* (void): reconcile is best effort per row: catalog.c logs a fault, and the next start
         * tries again from the same files */
        (void)catalog_ckpt_delete(rc->catalog, job, step);
        return 0;
}

/* The disk is the truth: make the catalog say exactly what it holds (the
 * local tier, or a replica area). */
static int reconcile_tier(struct store *store, struct catalog *catalog, const char *what) {
        struct reconcile rc = { .store = store, .catalog = catalog };
        const struct store_scan_ops ops = { .rank = reconcile_rank, .step = reconcile_step };

        store_trash_empty(store);
        int r = store_scan(store, &ops, &rc);
        if (r == 0)
                r = catalog_ckpt_foreach(catalog, NULL, reconcile_sweep, &rc);
        free(rc.seen);
        free(rc.ranks);
        if (r < 0)
                return r;
        r = catalog_flush(catalog);
        log_info("reconcile%s: %u checkpoints on disk, %u committed", what, rc.steps, rc.committed);
        return r;
}

/* The tiers' policies from the configuration (config_validate checked
 * the keep_every values, so a parse failure here leaves keep_every off).
 * Each tier sets its own mode for uncommitted steps. */
static struct retention_policy daemon_retention_of(uint32_t keep, const char *every) {
        struct retention_policy p = { .keep = keep };
        char why[160];
        if (retention_every_parse(every, &p.every_steps, &p.every_seconds, why, sizeof(why)) < 0)
                p.every_steps = p.every_seconds = 0;
        return p;
}

static struct retention_policy daemon_retention_local(const struct config *cfg) {
        return daemon_retention_of(cfg->keep, cfg->keep_every);
}

static struct retention_policy daemon_retention_replica(const struct config *cfg) {
        return daemon_retention_of(cfg->replica_keep_latest ? cfg->replica_keep_latest : cfg->keep,
                                   cfg->replica_keep_every ? cfg->replica_keep_every
                                                           : cfg->keep_every);
}

static struct retention_policy daemon_retention_remote(const struct config *cfg) {
        return daemon_retention_of(cfg->remote_keep, cfg->remote_keep_every);
}

static void daemon_retention_all(struct daemon *d) {
        struct ckpt_rep_job_list *page = calloc(1, sizeof(*page));
        if (!page)
                return;
        uint32_t start = 0;
        for (;;) {
                if (catalog_job_list(d->catalog, start, -1, page) < 0 || page->count == 0)
                        break;
                for (uint32_t i = 0; i < page->count; i++)
                        step_retention_run(d->server, page->entries[i].name.str);
                start += page->count;
                if (start >= page->total)
                        break;
        }
        free(page);
}

/* ---- the object-store tier ------------------------------------------------------------- */

/*
 * The flush and the replication yield to saves: while any save is staging
 * or being written, uploads and outgoing replica data hold still (no request, no MD5 hashing starts; transfers on the
 * wire pause).  A trainer blocks for its copy into the slot, and on a node
 * where the store's traffic shares cores and memory bandwidth with it, a
 * running flush made staging several times slower (docs/BENCHMARKS.md).
 * Bounded: after DAEMON_YIELD_MAX_MS of continuous saving the flush goes on
 * anyway, so a job that saves all the time still gets its steps stored.
 */
#define DAEMON_YIELD_MAX_MS 30000

static void daemon_background_pause(struct daemon *d, bool paused) {
        if (d->s3)
                s3_client_pause(d->s3, paused);
        if (d->peers)
                peers_pause(d->peers, paused);
}

static void daemon_yield_timeout(struct loop_timer *t) {
        struct daemon *d = container_of(t, struct daemon, yield_timer);
        log_debug("saves busy for %u s; flushing and replicating anyway",
                  DAEMON_YIELD_MAX_MS / 1000);
        daemon_background_pause(d, false);
}

static void daemon_on_saving(struct server *srv, bool saving) {
        struct daemon *d = srv->userdata;

        /* the scrub holds for as long as saves are open, with no cap: it
         * has no deadline, and its reads would compete with the saves'
         * writes for the disk */
        if (d->scrub)
                scrub_pause(d->scrub, saving);
        if (!d->s3 && !d->peers)
                return;
        if (saving) {
                daemon_background_pause(d, true);
                loop_timer_start(d->loop, &d->yield_timer, DAEMON_YIELD_MAX_MS,
                                 daemon_yield_timeout);
        } else {
                loop_timer_cancel(&d->yield_timer);
                daemon_background_pause(d, false);
        }
}

static void daemon_remote_changed(void *userdata, const char *job, uint64_t step) {
        struct daemon *d = userdata;
        step_changed(d->server, job, step);
}

/* The audit found a bad object of job's in the store: the job's error. */
static void daemon_audit_finding(void *userdata, const char *job, const char *message) {
        struct daemon *d = userdata;
        if (d->server)
                server_job_error(d->server, job, "%s", message);
}

static int daemon_remote_open(struct daemon *d) {
        const struct config *cfg = d->cfg;
        char err[512] = "";
        struct credentials *creds = NULL;
        int r;

        const struct credentials_config cc = {
                .access_key_id = cfg->remote_access_key_id,
                .secret_access_key = cfg->remote_secret_access_key,
                .region = cfg->remote_region,
                .profile = cfg->remote_profile,
                .credentials_file = cfg->remote_credentials_file,
        };
        r = credentials_load(&creds, &cc, err, sizeof(err));
        if (r < 0) {
                log_error("object store: no usable credentials: %s", err);
                return r;
        }
        const struct s3_config sc = {
                .endpoint = cfg->remote_endpoint,
                .region = cfg->remote_region,
                .bucket = cfg->remote_bucket,
                .addressing = (enum s3_addressing)cfg->remote_addressing,
                .credentials = creds,
                .ca_file = cfg->remote_ca_file,
                .max_concurrent = cfg->remote_concurrency,
                .max_send_bytes_per_sec = cfg->remote_bandwidth,
                .retry_max_attempts = cfg->remote_retry_attempts,
        };
        r = s3_client_new(&d->s3, d->loop, d->workers, &sc, err, sizeof(err));
        log_info("object store: %s bucket %s%s%s, credentials from %s", cfg->remote_endpoint,
                 cfg->remote_bucket, cfg->remote_prefix ? " prefix " : "",
                 cfg->remote_prefix ? cfg->remote_prefix : "", creds->origin);
        credentials_free(creds);
        if (r < 0) {
                log_error("object store: %s", err);
                return r;
        }
        const struct flush_options fo = {
                .bucket = cfg->remote_bucket,
                .prefix = cfg->remote_prefix ? cfg->remote_prefix : "",
                .node_index = cfg->cluster_node_index,
                .node_count = cfg->cluster_node_count,
                .part_size = cfg->remote_part_size,
                .concurrency = cfg->remote_concurrency,
                .retention = daemon_retention_remote(cfg),
        };
        r = flush_new(&d->flusher, d->loop, d->s3, d->catalog, d->store, &fo,
                      daemon_remote_changed, d);
        if (r < 0)
                return r;
        const struct fetch_options feo = {
                .prefix = fo.prefix,
                .concurrency = cfg->remote_concurrency,
                .pool_wait_ms = cfg->pool_wait_ms,
        };
        r = fetch_new(&d->fetcher, d->loop, d->s3, d->catalog, d->store, d->pool, d->workers,
                      &feo);
        if (r < 0)
                return r;
        const struct audit_options ao = {
                .interval_ms = cfg->remote_audit_interval_ms,
                .sample = cfg->remote_audit_sample,
                .prefix = fo.prefix,
        };
        static const struct audit_ops aops = { .finding = daemon_audit_finding };
        r = audit_new(&d->audit, d->loop, d->workers, d->s3, d->catalog, d->store, d->flusher,
                      &ao, &aops, d);
        if (r < 0)
                return r;
        snprintf(d->remote_target, sizeof(d->remote_target), "%s %s/%s", cfg->remote_endpoint,
                 cfg->remote_bucket, fo.prefix);
        return 0;
}

/* ---- the neighbour tier ------------------------------------------------------------------- */

static void daemon_peers_changed(void *userdata, const char *job, uint64_t step) {
        struct daemon *d = userdata;
        step_changed(d->server, job, step);
}

static void daemon_peers_restored(void *userdata, const char *job, uint64_t step) {
        struct daemon *d = userdata;
        flush_step_in_store(d->flusher, job, step);
}

static void daemon_copy_healed(void *userdata, int error, const char *msg) {
        (void)userdata;
        (void)error;
        (void)msg; /* heal.c logged and recorded the outcome */
}

/* A neighbour found the copy of a rank this node sent it corrupt: heal it
 * (or record it unrepairable, so it is not offered again). */
static void daemon_copy_bad(void *userdata, uint32_t node, const char *job, uint64_t step,
                            uint32_t rank, const char *detail) {
        struct daemon *d = userdata;
        char why[CKPT_ERRMSG_MAX];

        snprintf(why, sizeof(why), "node %u found: %s", node, detail);
        int r = heal_rank(d->server, job, step, rank, why, daemon_copy_healed, NULL);
        if (r < 0)
                log_warn("peers: node %u reports a corrupt copy of job %s step %" PRIu64
                         " rank %u, which this node does not hold (%s)", node, job, step, rank,
                         strerror(-r));
}

/* ---- the cluster-wide commit (docs/commit.md) ------------------------------------------- */

struct local_msg {
        struct list link;
        struct peer_msg m;
};

static void daemon_local_deliver(struct loop_timer *t) {
        struct daemon *d = container_of(t, struct daemon, local_timer);

        while (!list_empty(&d->local_msgs)) {
                struct local_msg *lm = list_entry(d->local_msgs.next, struct local_msg, link);
                list_unlink(&lm->link);
                if (lm->m.hdr.type == PEER_MSG_STEP_REPORT)
                        coordinator_report(d->coord, d->cfg->cluster_node_index,
                                           &lm->m.step_report, (int64_t)time(NULL));
                else
                        step_cluster_state(d->server, &lm->m.step_state);
                free(lm);
        }
}

static int daemon_local_queue(struct daemon *d, const struct peer_msg *m) {
        struct local_msg *lm = malloc(sizeof(*lm));
        if (!lm)
                return -ENOMEM;
        lm->m = *m;
        list_add_tail(&d->local_msgs, &lm->link);
        if (!loop_timer_armed(&d->local_timer))
                loop_timer_start(d->loop, &d->local_timer, 0, daemon_local_deliver);
        return 0;
}

/* The coordinator's word to node (this one too). */
static void daemon_coord_send(void *userdata, uint32_t node, const struct peer_step_state *state) {
        struct daemon *d = userdata;
        _cleanup_free_ struct peer_msg *m = calloc(1, sizeof(*m));

        if (!m)
                return; /* the node's next report gets the word again */
        m->hdr.type = PEER_MSG_STEP_STATE;
        m->step_state = *state;
        if (node == d->cfg->cluster_node_index)
                (void)daemon_local_queue(d, m);
        else
                /* -ENOTCONN: the node reports again when its link is back */
                (void)peers_control_send(d->peers, node, m);
}

static int daemon_cluster_report(struct server *srv, struct peer_msg *m) {
        struct daemon *d = srv->userdata;
        if (d->coord)
                return daemon_local_queue(d, m);
        return peers_control_send(d->peers, PEERS_COORDINATOR, m);
}

static bool daemon_cluster_reachable(struct server *srv) {
        struct daemon *d = srv->userdata;
        return d->coord || peers_coordinator_up(d->peers);
}

static void daemon_control_message(void *userdata, uint32_t node, const struct peer_msg *m) {
        struct daemon *d = userdata;
        if (m->hdr.type == PEER_MSG_STEP_REPORT) {
                if (d->coord)
                        coordinator_report(d->coord, node, &m->step_report, (int64_t)time(NULL));
        } else {
                step_cluster_state(d->server, &m->step_state);
        }
}

static void daemon_node_status(void *userdata, uint32_t uid, struct peer_node_status *st) {
        struct daemon *d = userdata;
        cluster_view_local(d->server, uid, st);
}

static void daemon_node_status_answer(void *userdata, uint32_t node,
                                      const struct peer_node_status *st) {
        struct daemon *d = userdata;
        cluster_view_answer(d->server, node, st);
}

static void daemon_node_status_relay(void *userdata, uint32_t node,
                                     const struct peer_node_status_req *req) {
        struct daemon *d = userdata;
        cluster_view_relay(d->server, node, req);
}

static void daemon_coordinator_up(void *userdata) {
        struct daemon *d = userdata;
        step_cluster_sync(d->server);
}

/* With more than one node, commits are the cluster's: node 0 runs the
 * coordinator, every node reports to it over the peer links. */
static int daemon_cluster_open(struct daemon *d) {
        const struct config *cfg = d->cfg;

        if (cfg->cluster_node_count <= 1 || !d->peers)
                return 0;
        if (cfg->cluster_node_index == PEERS_COORDINATOR) {
                const struct coordinator_ops ops = { .send = daemon_coord_send };
                int r = coordinator_new(&d->coord, cfg->cluster_node_count, &ops, d);
                if (r < 0)
                        return r;
        }
        const struct peers_control control = {
                .message = daemon_control_message,
                .coordinator_up = daemon_coordinator_up,
                .node_status = daemon_node_status,
                .node_status_answer = daemon_node_status_answer,
                .node_status_relay = daemon_node_status_relay,
                .userdata = d,
        };
        peers_set_control(d->peers, &control);
        d->server->cluster_report = daemon_cluster_report;
        d->server->cluster_reachable = daemon_cluster_reachable;
        if (d->coord)
                /* the coordinator learns this node's steps like any other's */
                step_cluster_sync(d->server);
        return 0;
}

/* Replica areas (one per node that replicates here, reconciled like the
 * local tier) and the peer server: with replication, or with more than
 * one node (the commit's control links). */
static int daemon_peers_open(struct daemon *d, const struct store_options *so) {
        const struct config *cfg = d->cfg;
        char err[256] = "", path[4096];
        uint8_t psk[PEER_PSK_MAX];
        size_t psk_len = 0;
        uint32_t srcs[16];
        int r;

        if ((cfg->cluster_replication_factor <= 1 && cfg->cluster_node_count <= 1) ||
            !cfg->cluster_npeers)
                return 0;
        const struct topology topo = {
                .count = cfg->cluster_node_count,
                .index = cfg->cluster_node_index,
                .jump = cfg->cluster_replication_jump,
                .factor = cfg->cluster_replication_factor,
                .placement = (enum placement)cfg->cluster_placement,
        };
        psk_len = sizeof(psk); /* in: capacity, out: length */
        r = peer_psk_load(cfg->cluster_psk_file, psk, &psk_len, err, sizeof(err));
        if (r < 0) {
                log_error("peers: %s", err);
                return r;
        }
        size_t n = topology_sources(&topo, topo.index, srcs, 16);
        d->areas = calloc(n ? n : 1, sizeof(*d->areas));
        if (!d->areas) {
                explicit_bzero(psk, sizeof(psk));
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                struct replica_area *a = &d->areas[d->nareas++];
                char what[64];
                a->src = srcs[i];
                snprintf(path, sizeof(path), "%s/replica/node-%u", cfg->state_dir, srcs[i]);
                r = store_open(&a->store, path, d->loop, d->workers, d->pool, so);
                if (r == 0) {
                        snprintf(path, sizeof(path), "%s/replica/node-%u/catalog.db",
                                 cfg->state_dir, srcs[i]);
                        r = catalog_open(&a->catalog, path);
                }
                if (r == 0) {
                        snprintf(what, sizeof(what), " (replicas of node %u)", srcs[i]);
                        r = reconcile_tier(a->store, a->catalog, what);
                }
                if (r < 0) {
                        log_error("peers: cannot open the replica area of node %u: %s", srcs[i],
                                  strerror(-r));
                        explicit_bzero(psk, sizeof(psk));
                        return r;
                }
        }
        const struct node_address *self = &cfg->cluster_peers[topo.index];
        const struct peers_options po = {
                .topo = topo,
                .addrs = cfg->cluster_peers,
                .listen_host = cfg->cluster_listen.host,
                .listen_port = cfg->cluster_listen.host ? cfg->cluster_listen.port : self->port,
                .psk = psk,
                .psk_len = psk_len,
                .connect_timeout_ms = cfg->cluster_peer_connect_timeout_ms,
                .handshake_timeout_ms = cfg->cluster_peer_handshake_timeout_ms,
                .keepalive_ms = cfg->cluster_peer_keepalive_ms,
                .frames_unsealed = !cfg->cluster_peer_frame_mac,
                .unauth_max = cfg->cluster_peer_unauthenticated_max,
                .unauth_per_address = cfg->cluster_peer_unauthenticated_per_address,
                .retention = daemon_retention_replica(cfg),
                .restore_on_start = true,
                .restored = d->flusher ? daemon_peers_restored : NULL,
                .copy_bad = daemon_copy_bad,
                .pool_wait_ms = cfg->pool_wait_ms,
        };
        if (!cfg->cluster_peer_frame_mac)
                log_warn("peers: frames after the handshake carry no MAC ([cluster] "
                         "peer_frame_mac = no): anyone on the path can change replica bytes; "
                         "use only on a trusted network");
        r = peers_new(&d->peers, d->loop, d->workers, d->pool, d->store, d->catalog, d->areas,
                      d->nareas, &po, daemon_peers_changed, d);
        explicit_bzero(psk, sizeof(psk));
        if (r == 0) {
                peers_set_copy_bad(d->peers, suspect_copy_bad, d->server);
                peers_set_memory(d->peers, d->server->memtier);
        }
        return r;
}

/* ---- the background scrub ---------------------------------------------------------------- */

static void daemon_scrub_options(const struct config *cfg, struct scrub_options *out) {
        *out = (struct scrub_options){
                .enabled = cfg->scrub_enabled,
                .rate = cfg->scrub_rate,
                .interval_ms = cfg->scrub_interval_ms,
                .idle_priority = cfg->scrub_idle_priority,
        };
}

/* What the scrub found.  For now it is logged and counted as the job's
 * error (server_job_error); the repair (heal_rank) hooks in here. */
/* heal_copy's answer to a scrub finding: heal logged the outcome (the
 * source, or every copy tried); the next pass checks the copy again. */
static void daemon_scrub_healed(void *userdata, int error, const char *msg) {
        (void)userdata;
        (void)error;
        (void)msg;
}

static void daemon_scrub_bad_copy(void *userdata, const char *job, uint64_t step, uint32_t rank,
                                  int32_t area, const char *shard, int64_t block,
                                  const char *detail) {
        struct daemon *d = userdata;
        char where[48] = "";
        (void)block;

        if (area >= 0)
                snprintf(where, sizeof(where), " (replica of node %d)", area);
        server_job_event(d->server, LOG_CTX(.id = LOG_ID_SCRUB_FINDING, .job = job, LOG_STEP(step),
                                            LOG_RANK(rank)),
                         "scrub: job %s step %" PRIu64 " rank %u%s%s%s: %s", job, step, rank, where, shard ? ": shard " : "", shard ? shard : "",
                         detail);
        /* the scrub goes on; heal records the fault, repairs the copy from
         * a good one (or records it unrepairable) and logs which */
        char why[CKPT_NAME_MAX + 160];
        snprintf(why, sizeof(why), "scrub: %s%s%.120s", shard ? shard : "", shard ? ": " : "",
                 detail);
        int r = heal_copy(d->server, job, step, rank,
                          area < 0 ? CATALOG_COPY_LOCAL : (uint32_t)area, why,
                          daemon_scrub_healed, NULL);
        if (r < 0)
                log_warn("scrub: job %s step %" PRIu64 " rank %u%s: cannot start its repair: %s",
                         job, step, rank, where, strerror(-r));
}

/* The local tier and every replica area, in that order. */
static int daemon_scrub_open(struct daemon *d) {
        struct scrub_options so;
        _cleanup_free_ struct scrub_target *targets = calloc(d->nareas + 1, sizeof(*targets));

        if (!targets)
                return -ENOMEM;
        targets[0] = (struct scrub_target){ .area = -1, .store = d->store, .catalog = d->catalog };
        for (size_t i = 0; i < d->nareas; i++)
                targets[i + 1] = (struct scrub_target){
                        .area = (int32_t)d->areas[i].src,
                        .store = d->areas[i].store,
                        .catalog = d->areas[i].catalog,
                };
        daemon_scrub_options(d->cfg, &so);
        const struct scrub_ops ops = { .bad_copy = daemon_scrub_bad_copy };
        int r = scrub_new(&d->scrub, d->loop, d->catalog, targets, d->nareas + 1, &so, &ops, d);
        if (r < 0)
                log_error("scrub: cannot start: %s", strerror(-r));
        d->server->scrub = d->scrub;
        return r;
}

/* ---- systemd ------------------------------------------------------------------------- */

static void daemon_watchdog(struct loop_timer *t) {
        struct daemon *d = container_of(t, struct daemon, watchdog);
        /* The ping comes from the loop thread, so a wedged loop stops it
         * and systemd restarts us. */
        sd_notify(0, "WATCHDOG=1");
        loop_timer_start(d->loop, &d->watchdog, d->watchdog_ms, daemon_watchdog);
}

static void daemon_before_sleep(struct loop_hook *h) {
        struct daemon *d = container_of(h, struct daemon, flush_hook);

        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(d->catalog);

        uint64_t now = loop_now_ms();
        if (now - d->status_ms < 1000)
                return;
        d->status_ms = now;
        char status[256];
        struct server *srv = d->server;
        snprintf(status, sizeof(status),
                 "STATUS=%u clients, %u saves active, %" PRIu64 " MiB in flight, %u/%u slots used",
                 srv->nconns, srv->saves_active, srv->bytes_in_flight >> 20,
                 pool_slots_used(d->pool), pool_slot_count(d->pool));
        if (strcmp(status, d->status)) {
                sd_notify(0, status);
                memcpy(d->status, status, sizeof(status));
        }
}

static void daemon_drained(struct server *srv) {
        log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_DAEMON_STOP),
                  "all acknowledged saves are on disk; exiting");
        loop_stop(srv->loop);
}

/* The reloadable limits on who holds how much of the pool. */
static void daemon_apply_pool_limits(struct daemon *d) {
        const struct config *cfg = d->cfg;
        struct pool_limits limits = {
                .fair_share = cfg->fair_share,
                .max_slots_per_uid = cfg->max_slots_per_uid,
        };
        pool_set_limits(d->pool, &limits);
        if (d->server) {
                d->server->opts.window_lease_ms = cfg->window_lease_ms;
                d->server->opts.max_slots_per_connection = cfg->max_slots_per_connection;
        }
}

static void daemon_reload(struct daemon *d) {
        struct config fresh;
        int r;

        sd_notify(0, "RELOADING=1");
        r = config_init(&fresh);
        if (r == 0 && d->config_path) {
                r = config_load_file(&fresh, d->config_path, stderr);
                if (r == -ENOENT)
                        r = 0;
        }
        if (r == 0)
                r = config_parse_args(&fresh, d->argc, d->argv, stderr);
        if (r >= 0)
                r = config_validate(&fresh, stderr);
        if (r < 0) {
                log_error("reload: configuration invalid, keeping the running one");
        } else {
                config_reload(d->cfg, &fresh);
                log_set_level(d->cfg->log_level);
                d->server->opts.retention = daemon_retention_local(d->cfg);
                if (d->peers) {
                        const struct retention_policy rp = daemon_retention_replica(d->cfg);
                        peers_set_retention(d->peers, &rp);
                }
                d->server->opts.pool_wait_ms = d->cfg->pool_wait_ms;
                daemon_apply_pool_limits(d);
                if (d->scrub) {
                        struct scrub_options so;
                        daemon_scrub_options(d->cfg, &so);
                        scrub_set_options(d->scrub, &so);
                }
                if (d->flusher) {
                        const struct retention_policy sp = daemon_retention_remote(d->cfg);
                        flush_set_retention(d->flusher, &sp);
                        s3_client_set_bandwidth(d->s3, d->cfg->remote_bandwidth);
                        flush_retry_failed(d->flusher);
                        const struct audit_options ao = {
                                .interval_ms = d->cfg->remote_audit_interval_ms,
                                .sample = d->cfg->remote_audit_sample,
                                .prefix = d->cfg->remote_prefix ? d->cfg->remote_prefix : "",
                        };
                        audit_set_options(d->audit, &ao);
                }
                log_info("reload: done");
                daemon_retention_all(d);
        }
        config_clear(&fresh);
        sd_notify(0, "READY=1");
}

static void daemon_on_signal(struct loop_watch *w, uint32_t events) {
        struct daemon *d = container_of(w, struct daemon, signal_watch);
        struct signalfd_siginfo si;
        (void)events;

        while (read(d->signal_fd, &si, sizeof(si)) == sizeof(si)) {
                switch (si.ssi_signo) {
                case SIGTERM:
                case SIGINT:
                        log_info("received %s: draining in-flight saves",
                                 si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
                        sd_notify(0, "STOPPING=1\nSTATUS=draining in-flight saves");
                        server_drain(d->server);
                        break;
                case SIGHUP:
                        log_info("received SIGHUP: reloading configuration");
                        daemon_reload(d);
                        break;
                default:
                        break;
                }
        }
}

/* ---- lifecycle -------------------------------------------------------------------------- */

/* File descriptors the daemon needs besides shard files: the ring, epoll,
 * signalfd, worker eventfds, the catalogs (db, -wal, -shm each, the replica
 * areas' too), the pool's memfd, both listeners and their reserve fds,
 * object-store connections, stdio.  Generous on purpose. */
#define FD_BASE 256
/* Peer links besides the unauthenticated ones: one to each target, one
 * from each source (both at most 16). */
#define FD_PEER_LINKS 32

/* Raise the soft RLIMIT_NOFILE to the hard limit (the common practice of
 * daemons: the hard limit is the administrator's choice, the soft one a
 * default for interactive shells), then warn when the configured
 * connection limits cannot fit: past that point, shard files and sockets
 * compete for the last descriptors and saves fail with EMFILE
 * (docs/design-decisions.md "File descriptors"). */
static void daemon_fd_budget(const struct config *cfg) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return;
        if (rl.rlim_cur < rl.rlim_max) {
                struct rlimit want = { .rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max };
                if (setrlimit(RLIMIT_NOFILE, &want) == 0)
                        rl = want;
        }
        uint64_t need = FD_BASE + (uint64_t)cfg->client_connections_max;
        if ((cfg->cluster_replication_factor > 1 || cfg->cluster_node_count > 1) &&
            cfg->cluster_npeers)
                /* the coordinator also holds every node's control link */
                need += FD_PEER_LINKS + cfg->cluster_peer_unauthenticated_max +
                        (cfg->cluster_node_index == 0 ? cfg->cluster_node_count : 0) +
                        (uint64_t)16 * cfg->cluster_peer_unauthenticated_per_address;
        if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
                log_warn("file descriptors: RLIMIT_NOFILE is %llu, but the connection limits "
                         "([daemon] client_connections_max = %u%s) need %" PRIu64
                         " before any shard file is open: raise LimitNOFILE= (ckptd.service) "
                         "or lower the limits; connections past the descriptors left are "
                         "refused",
                         (unsigned long long)rl.rlim_cur, cfg->client_connections_max,
                         cfg->cluster_replication_factor > 1 ? " and the [cluster] peer caps"
                                                            : "",
                         need);
        /* One uid at its budget must leave the others, and the listeners,
         * descriptors to work with: that is what the budget is for. */
        else if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need + cfg->open_files_per_uid)
                log_warn("file descriptors: RLIMIT_NOFILE is %llu; the connection limits need %"
                         PRIu64 ", and one uid may hold %u open files ([daemon] "
                         "open_files_per_uid), so one user's saves can take the last "
                         "descriptors from everyone else's: raise LimitNOFILE= (ckptd.service) "
                         "to at least %" PRIu64 " or lower open_files_per_uid",
                         (unsigned long long)rl.rlim_cur, need, cfg->open_files_per_uid,
                         need + cfg->open_files_per_uid);
}

int daemon_new(struct daemon **out, struct config *cfg, const char *config_path, int argc,
               char **argv) {
        struct daemon *d = calloc(1, sizeof(*d));
        char path[4096];
        int r;

        if (!d)
                return -ENOMEM;
        d->cfg = cfg;
        d->config_path = config_path;
        d->argc = argc;
        d->argv = argv;
        d->signal_fd = -1;
        list_init(&d->local_msgs);
        daemon_fd_budget(cfg);

        /* Block the signals we handle before any thread exists, so every
         * thread inherits the mask and they arrive only via the signalfd. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);

        r = loop_new(&d->loop, MAX(256u, cfg->queue_depth * 2 + 64));
        if (r < 0)
                goto fail;
        r = worker_pool_new(&d->workers, d->loop, cfg->workers);
        if (r < 0)
                goto fail;

        struct store_options so = {
                .io_size = cfg->io_size,
                .queue_depth = cfg->queue_depth,
                .direct_io = cfg->direct_io,
        };
        r = pool_new(&d->pool, d->loop, cfg->pool_size, cfg->slot_size, cfg->register_buffers,
                     true);
        if (r < 0)
                goto fail;
        r = store_open(&d->store, cfg->state_dir, d->loop, d->workers, d->pool, &so);
        if (r < 0)
                goto fail;
        snprintf(path, sizeof(path), "%s/catalog.db", cfg->state_dir);
        r = catalog_open(&d->catalog, path);
        if (r < 0)
                goto fail;

        if (config_remote_enabled(cfg)) {
                r = daemon_remote_open(d);
                if (r < 0)
                        goto fail;
        }

        struct server_options sopts = {
                .node_index = cfg->cluster_node_index,
                .node_count = cfg->cluster_node_count,
                .remote_target = d->flusher ? d->remote_target : NULL,
                .pool_wait_ms = cfg->pool_wait_ms,
                .retention = daemon_retention_local(cfg),
                .socket_mode = cfg->socket_mode,
                .socket_group = cfg->socket_group,
                .state_dir = cfg->state_dir,
                .conn_max = cfg->client_connections_max,
                .conn_per_uid = cfg->client_connections_per_uid,
                .files_per_uid = cfg->open_files_per_uid,
                .memory_tier = cfg->memory_tier,
        };
        r = server_new(&d->server, d->loop, d->pool, d->store, d->catalog, d->workers, &sopts);
        if (r < 0)
                goto fail;
        d->server->on_drained = daemon_drained;
        daemon_apply_pool_limits(d);
        d->server->flusher = d->flusher;
        d->server->audit = d->audit;
        d->server->userdata = d;
        d->server->on_saving = daemon_on_saving;
        d->server->fetcher = d->fetcher;
        if (d->fetcher)
                fetch_set_files(d->fetcher, &d->server->files);

        r = reconcile_tier(d->store, d->catalog, "");
        if (r < 0) {
                log_error("reconcile with %s failed: %s", cfg->state_dir, strerror(-r));
                goto fail;
        }
        r = daemon_peers_open(d, &so);
        if (r < 0)
                goto fail;
        /* the server's peers are the replication tier's: none without targets */
        d->server->peers = peers_replicates(d->peers) ? d->peers : NULL;
        r = daemon_cluster_open(d);
        if (r < 0)
                goto fail;
        /* the commit requests recorded before the restart: once the
         * cluster's links are set (they decide who commits), and before
         * retention, which removes a request's step with it when it goes */
        step_commit_requests_resume(d->server);
        /* before retention: a step a crash left half deleted goes first */
        delete_resume(d->server);
        daemon_retention_all(d);
        /* after retention, so that the first pass does not walk steps on
         * their way out */
        r = daemon_scrub_open(d);
        if (r < 0)
                goto fail;
        if (d->flusher)
                flush_resume(d->flusher);
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(d->catalog);

        d->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (d->signal_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = loop_watch_add(d->loop, &d->signal_watch, d->signal_fd, EPOLLIN, daemon_on_signal);
        if (r < 0)
                goto fail;

        int n = sd_listen_fds(1);
        if (n > 1) {
                log_error("systemd passed %d sockets; ckptd.socket must have exactly one", n);
                r = -EINVAL;
                goto fail;
        }
        if (n == 1) {
                r = server_listen_fd(d->server, SD_LISTEN_FDS_START);
                log_info("listening on the socket passed by systemd");
        } else {
                r = server_listen_path(d->server, cfg->socket_path);
                if (r == 0)
                        log_info("listening on %s", cfg->socket_path);
        }
        if (r < 0)
                goto fail;
        r = daemon_metrics_open(d);
        if (r < 0)
                goto fail;

        uint64_t usec = 0;
        if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
                d->watchdog_ms = MAX(usec / 2000, 1u);
                loop_timer_start(d->loop, &d->watchdog, d->watchdog_ms, daemon_watchdog);
        }
        d->flush_hook.run = daemon_before_sleep;
        loop_hook_add(d->loop, &d->flush_hook);

        log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_DAEMON_START),
                  "ckptd ready: state %s, pool %" PRIu64 " MiB in %u slots, crc32c %s",
                 cfg->state_dir, cfg->pool_size >> 20, pool_slot_count(d->pool), crc32c_impl());
        sd_notifyf(0, "READY=1\nSTATUS=serving, state in %s", cfg->state_dir);
        *out = d;
        return 0;

fail:
        daemon_free(d);
        return r;
}

int daemon_run(struct daemon *d) {
        int r = loop_run(d->loop);
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(d->catalog);
        return r;
}

struct daemon *daemon_free(struct daemon *d) {
        if (!d)
                return NULL;
        if (d->signal_fd >= 0) {
                loop_watch_del(d->loop, &d->signal_watch);
                close(d->signal_fd);
        }
        /* first: a scrape reads the server and everything it points to */
        d->metrics = metrics_endpoint_free(d->metrics);
        /* before what it borrows (catalogs, stores); it waits for its read */
        if (d->server)
                d->server->scrub = NULL;
        d->scrub = scrub_free(d->scrub);
        /* From here on the S3 client starts nothing: the worker pool goes
         * next, and cancelling a request (fetch_free, flush_free below)
         * would otherwise hand the next body waiting for its Content-MD5 to
         * the freed pool (test_remote.py case 9).  What is held stays held
         * until s3_client_free() cancels it. */
        if (d->s3)
                s3_client_pause(d->s3, true);
        /* workers first: their done() callbacks may still reference saves
         * the server owns */
        d->workers = worker_pool_free(d->workers);
        /* the object-store tier before what its callbacks touch (catalog,
         * store, pool): freeing the client cancels its requests */
        /* nothing reports to node 0 any more: the steps the server frees
         * last would otherwise send through the links freed here */
        if (d->server) {
                d->server->cluster_report = NULL;
                d->server->cluster_reachable = NULL;
        }
        d->peers = peers_free(d->peers);
        d->coord = coordinator_free(d->coord);
        loop_timer_cancel(&d->local_timer);
        while (!list_empty(&d->local_msgs)) {
                struct local_msg *lm = list_entry(d->local_msgs.next, struct local_msg, link);
                list_unlink(&lm->link);
                free(lm);
        }
        for (size_t i = 0; i < d->nareas; i++) {
                d->areas[i].catalog = catalog_free(d->areas[i].catalog);
                d->areas[i].store = store_free(d->areas[i].store);
        }
        free(d->areas);
        if (d->server)
                d->server->audit = NULL;
        d->audit = audit_free(d->audit);
        d->fetcher = fetch_free(d->fetcher);
        d->flusher = flush_free(d->flusher);
        d->s3 = s3_client_free(d->s3);
        d->server = server_free(d->server);
        d->catalog = catalog_free(d->catalog);
        d->store = store_free(d->store);
        d->pool = pool_free(d->pool);
        d->loop = loop_free(d->loop);
        free(d);
        return NULL;
}
