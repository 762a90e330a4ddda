/* SPDX-License-Identifier: MIT */
/*
 * The CLUSTER request: see cluster_view.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/cluster_view.h"
#include "server/conn.h"
#include "server/server.h"
#include "util/cleanup.h"
#include "util/log.h"

/* One gathering, then the view it gathered: one reply per node. */
struct cluster_view {
        struct list link;          /* server.cluster_views, while gathering */
        struct conn *conn;
        uint64_t id;               /* the NODE_STATUS_REQs' nonce: tells views apart */
        uint32_t total, waiting;
        bool gathering;
        struct loop_timer timer;   /* CLUSTER_VIEW_DEADLINE_MS */
        bool *asked;               /* per node: an answer is awaited */
        bool *relayed;             /* per node: asked through the coordinator */
        struct ckpt_rep_cluster *nodes; /* total entries */
};

/* On the coordinator: a node's NODE_STATUS_REQ about another node, asked
 * on its behalf (docs/peer-protocol.md, "Node status"). */
struct cluster_relay {
        struct list link;          /* server.cluster_relays */
        struct server *srv;
        uint64_t id;               /* the nonce of the request sent on */
        uint64_t origin_nonce;     /* the asker's nonce, for the answer */
        uint32_t origin, about;    /* the asking node, the node asked */
        struct loop_timer timer;   /* CLUSTER_RELAY_DEADLINE_MS */
};

static uint64_t next_id = 1;

static void relay_free(struct cluster_relay *r) {
        list_unlink(&r->link);
        loop_timer_cancel(&r->timer);
        free(r);
}

void cluster_view_free_all(struct server *srv) {
        while (!list_empty(&srv->cluster_relays))
                relay_free(list_entry(srv->cluster_relays.next, struct cluster_relay, link));
}

/* Answer the asking node what became of its relayed request.  st: the
 * node's answer (reach reachable), or NULL with reach and why. */
static void relay_answer(struct server *srv, uint32_t origin, uint64_t nonce, uint32_t about,
                         const struct peer_node_status *st, uint8_t reach, const char *why) {
        _cleanup_free_ struct peer_node_status *out = calloc(1, sizeof(*out));
        if (!out)
                return; /* the asker's deadline says "unreachable" */
        if (st)
                *out = *st;
        else
                text_copy(out->last_error, sizeof(out->last_error), why);
        out->nonce = nonce;
        out->about = about;
        out->reach = reach;
        int r = srv->peers ? peers_node_status_send(srv->peers, origin, out) : -ENOTCONN;
        if (r < 0)
                log_debug("cluster view: cannot answer node %u about node %u: %s", origin, about,
                          strerror(-r));
}

static void relay_deadline(struct loop_timer *t) {
        struct cluster_relay *r = container_of(t, struct cluster_relay, timer);
        char why[64];
        snprintf(why, sizeof(why), "no answer to node %u within %u ms", r->srv->opts.node_index,
                 CLUSTER_RELAY_DEADLINE_MS);
        relay_answer(r->srv, r->origin, r->origin_nonce, r->about, NULL, CKPT_NODE_UNREACHABLE,
                     why);
        relay_free(r);
}

void cluster_view_relay(struct server *srv, uint32_t origin, const struct peer_node_status_req *req) {
        uint32_t total = srv->opts.node_count ? srv->opts.node_count : 1;
        char why[CKPT_CLUSTER_ERROR_MAX + 1];

        /* Only the coordinator relays (it has a link to every node), and
         * only one hop: a request about itself or the asker is no relay. */
        if (srv->opts.node_index != PEERS_COORDINATOR || req->about >= total ||
            req->about == origin || req->about == srv->opts.node_index) {
                log_warn("cluster view: node %u asked node %u to relay to node %u: refused",
                         origin, srv->opts.node_index, req->about);
                snprintf(why, sizeof(why), "node %u does not relay to node %u",
                         srv->opts.node_index, req->about);
                if (req->about < total)
                        relay_answer(srv, origin, req->nonce, req->about, NULL, CKPT_NODE_UNKNOWN,
                                     why);
                return;
        }
        struct cluster_relay *r = calloc(1, sizeof(*r));
        if (!r)
                return;
        r->srv = srv;
        r->id = next_id++;
        r->origin_nonce = req->nonce;
        r->origin = origin;
        r->about = req->about;
        int e = peers_node_status_ask(srv->peers, req->about, r->id, req->uid, PEER_NODE_SELF,
                                      why, sizeof(why));
        if (e < 0) {
                relay_answer(srv, origin, req->nonce, req->about, NULL,
                             e == -ENOLINK ? CKPT_NODE_UNKNOWN : CKPT_NODE_DOWN, why);
                free(r);
                return;
        }
        list_add_tail(&srv->cluster_relays, &r->link);
        loop_timer_start(srv->loop, &r->timer, CLUSTER_RELAY_DEADLINE_MS, relay_deadline);
}

static struct cluster_view *view_free(struct cluster_view *v) {
        if (!v)
                return NULL;
        if (v->gathering)
                list_unlink(&v->link);
        loop_timer_cancel(&v->timer);
        free(v->asked);
        free(v->relayed);
        free(v->nodes);
        free(v);
        return NULL;
}

void cluster_view_conn_closed(struct conn *c) {
        c->cluster = view_free(c->cluster);
}

static uint32_t conn_peer_uid(const struct conn *c) {
        return c->uid == 0 ? PEER_UID_ANY : (uint32_t)c->uid;
}

void cluster_view_local(struct server *srv, uint32_t uid, struct peer_node_status *st) {
        int64_t who = uid == PEER_UID_ANY ? -1 : (int64_t)uid;
        _cleanup_free_ struct ckpt_rep_job_list *page = malloc(sizeof(*page));

        memset(st, 0, sizeof(*st));
        for (uint32_t start = 0; page;) {
                if (catalog_job_list(srv->catalog, start, who, page) < 0 || page->count == 0)
                        break;
                for (uint32_t i = 0; i < page->count; i++) {
                        const struct ckpt_job_entry *e = &page->entries[i];
                        if (e->latest_committed < 0)
                                continue; /* the view is about committed steps */
                        if (st->njobs == CKPT_CLUSTER_JOBS) {
                                st->jobs_omitted++;
                                continue;
                        }
                        st->uids[st->njobs] = e->uid;
                        struct ckpt_cluster_job *j = &st->jobs[st->njobs++];
                        j->job = e->name;
                        j->newest_step = (uint64_t)e->latest_committed;
                        j->steps_owed = srv->peers ? peers_job_owed(srv->peers, e->name.str) : 0;
                }
                start += page->count;
                if (start >= page->total)
                        break;
        }
        if (srv->peers)
                st->nlinks = peers_links_down(srv->peers, st->links, CKPT_CLUSTER_LINKS);
        uint64_t errors;
        const char *last;
        server_errors_seen(srv, who, &errors, &last);
        st->errors = errors > UINT32_MAX ? UINT32_MAX : (uint32_t)errors;
        text_copy(st->last_error, sizeof(st->last_error), last);
}

static void node_name(struct server *srv, uint32_t node, char *buf, size_t size) {
        if (srv->peers) {
                peers_node_name(srv->peers, node, buf, size);
                return;
        }
        if (gethostname(buf, size) < 0)
                snprintf(buf, size, "node %u", node);
        buf[size - 1] = '\0';
}

/* What uid (PEER_UID_ANY: root) may see of a node's answer: the node
 * filtered by the request's uid already; a job of another owner is left
 * out here too, whatever the node sent. */
static void fill_row(struct ckpt_rep_cluster *row, const struct peer_node_status *st,
                     uint32_t uid) {
        row->njobs = 0;
        row->jobs_omitted = st->jobs_omitted;
        for (uint32_t i = 0; i < st->njobs; i++)
                if (uid == PEER_UID_ANY || st->uids[i] == uid)
                        row->jobs[row->njobs++] = st->jobs[i];
        row->nlinks = 0;
        /* a link to a node outside this cluster is the answer's error:
         * left out, not passed on to the client */
        for (uint32_t i = 0; i < st->nlinks; i++)
                if (st->links[i] < row->total)
                        row->links[row->nlinks++] = st->links[i];
        row->errors = st->errors;
        memcpy(row->last_error, st->last_error, sizeof(row->last_error));
}

static void reply_node(struct conn *c, uint32_t index) {
        struct cluster_view *v = c->cluster;
        _cleanup_free_ struct ckpt_reply *rep = calloc(1, sizeof(*rep));

        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        rep->cluster = v->nodes[index];
        conn_reply(c, rep, -1);
}

static void gathered(struct cluster_view *v) {
        for (uint32_t n = 0; n < v->total; n++)
                if (v->asked[n]) {
                        v->nodes[n].reach = CKPT_NODE_UNREACHABLE;
                        snprintf(v->nodes[n].last_error, sizeof(v->nodes[n].last_error),
                                 "no answer within %u ms", CLUSTER_VIEW_DEADLINE_MS);
                        v->asked[n] = false;
                }
        v->gathering = false;
        list_unlink(&v->link);
        loop_timer_cancel(&v->timer);
        reply_node(v->conn, 0);
}

static void deadline(struct loop_timer *t) {
        gathered(container_of(t, struct cluster_view, timer));
}

void cluster_view_answer(struct server *srv, uint32_t node, const struct peer_node_status *st) {
        struct list *pos;

        /* the answer to a request relayed for another node */
        list_for_each(pos, &srv->cluster_relays) {
                struct cluster_relay *r = list_entry(pos, struct cluster_relay, link);
                if (r->id != st->nonce)
                        continue;
                if (node == r->about && st->about == PEER_NODE_SELF)
                        relay_answer(srv, r->origin, r->origin_nonce, r->about, st,
                                     CKPT_NODE_REACHABLE, NULL);
                else
                        log_warn("cluster view: node %u answered a relay to node %u", node,
                                 r->about);
                relay_free(r);
                return;
        }
        list_for_each(pos, &srv->cluster_views) {
                struct cluster_view *v = list_entry(pos, struct cluster_view, link);
                if (v->id != st->nonce)
                        continue;
                /* a node's own answer, or the coordinator's about one it
                 * was asked to relay to */
                bool relayed = st->about != PEER_NODE_SELF;
                uint32_t about = relayed ? st->about : node;
                if (about >= v->total || !v->asked[about] ||
                    relayed != (v->relayed[about] && node == PEERS_COORDINATOR)) {
                        log_warn("cluster view: an answer from node %u about node %u nobody "
                                 "waits for", node, about);
                        return;
                }
                struct ckpt_rep_cluster *row = &v->nodes[about];
                row->reach = st->reach;
                if (st->reach == CKPT_NODE_REACHABLE)
                        fill_row(row, st, conn_peer_uid(v->conn));
                else
                        memcpy(row->last_error, st->last_error, sizeof(row->last_error));
                v->asked[about] = false;
                if (--v->waiting == 0)
                        gathered(v);
                return;
        }
}

static int gather(struct conn *c) {
        struct server *srv = c->srv;
        uint32_t total = srv->opts.node_count ? srv->opts.node_count : 1;
        struct cluster_view *v = calloc(1, sizeof(*v));

        if (!v)
                return -ENOMEM;
        v->conn = c;
        v->total = total;
        v->id = next_id++;
        v->asked = calloc(total, sizeof(*v->asked));
        v->relayed = calloc(total, sizeof(*v->relayed));
        v->nodes = calloc(total, sizeof(*v->nodes));
        if (!v->asked || !v->relayed || !v->nodes) {
                view_free(v);
                return -ENOMEM;
        }
        c->cluster = view_free(c->cluster);
        c->cluster = v;
        _cleanup_free_ struct peer_node_status *st = malloc(sizeof(*st));
        if (!st)
                return -ENOMEM;
        for (uint32_t n = 0; n < total; n++) {
                struct ckpt_rep_cluster *row = &v->nodes[n];
                row->total = total;
                row->index = n;
                node_name(srv, n, row->node, sizeof(row->node));
                if (n == srv->opts.node_index) {
                        cluster_view_local(srv, conn_peer_uid(c), st);
                        fill_row(row, st, conn_peer_uid(c));
                        continue;
                }
                row->reach = CKPT_NODE_DOWN;
                if (!srv->peers) {
                        snprintf(row->last_error, sizeof(row->last_error),
                                 "no peer links on this node ([cluster] peers)");
                        continue;
                }
                char why[CKPT_CLUSTER_ERROR_MAX + 1];
                int r = peers_node_status_ask(srv->peers, n, v->id, conn_peer_uid(c),
                                              PEER_NODE_SELF, why, sizeof(why));
                /* no link at all: the coordinator, linked to every node,
                 * asks it for this one */
                if (r == -ENOLINK && srv->opts.node_index != PEERS_COORDINATOR) {
                        char via[CKPT_CLUSTER_ERROR_MAX + 1];
                        if (peers_node_status_ask(srv->peers, PEERS_COORDINATOR, v->id,
                                                  conn_peer_uid(c), n, via, sizeof(via)) == 0) {
                                v->relayed[n] = true;
                                r = 0;
                        }
                }
                if (r < 0) {
                        /* no link at all says nothing about the node */
                        if (r == -ENOLINK)
                                row->reach = CKPT_NODE_UNKNOWN;
                        text_copy(row->last_error, sizeof(row->last_error), why);
                        continue;
                }
                row->reach = CKPT_NODE_REACHABLE;
                v->asked[n] = true;
                v->waiting++;
        }
        v->gathering = true;
        list_add_tail(&srv->cluster_views, &v->link);
        if (v->waiting == 0)
                gathered(v);
        else
                loop_timer_start(srv->loop, &v->timer, CLUSTER_VIEW_DEADLINE_MS, deadline);
        return 0;
}

void cluster_view_handle(struct conn *c, const struct ckpt_req_cluster *req) {
        if (req->index == 0) {
                int r = gather(c);
                if (r < 0) {
                        c->cluster = view_free(c->cluster);
                        conn_error(c, r, "cannot gather the cluster view: %s", strerror(-r));
                }
                return; /* answered when gathered */
        }
        struct cluster_view *v = c->cluster;
        if (!v || v->gathering || req->index >= v->total) {
                conn_error(c, -EINVAL, "node %u of the cluster view: %s", req->index,
                           !v ? "ask for node 0 first (it gathers the view)"
                              : "the view has fewer nodes");
                return;
        }
        reply_node(c, req->index);
}
