/* SPDX-License-Identifier: MIT */
/*
 * peers — the neighbour tier put together (see peers.h).  The layers, each
 * using only the ones below it:
 *
 *   peer/link               TCP links: framing, handshake, frame MACs,
 *                           queues, the listener, reconnect, keepalive;
 *   peer/transfer           one rank over a link, either way;
 *   peer/replication        the steps owed to each target and pushing them;
 *   peer/neighbour_restore  pulling this node's ranks back, and answering
 *                           such requests;
 *   peer/replica_area, peer/rkeys  what this node holds of others', and a
 *                           small set of ranks.
 *
 * This file owns the parts (struct peers), answers the layers' hooks —
 * which store a received rank goes to, which message goes to which layer,
 * what a target's link does when it comes up, goes down or has room — and
 * keeps the public API of peers.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer-proto.h"
#include "peer/auth.h"
#include "peer/link.h"
#include "peer/neighbour_restore.h"
#include "peer/peers.h"
#include "peer/replica_area.h"
#include "peer/replication.h"
#include "peer/transfer.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"

struct peers {
        struct store *store;
        struct catalog *catalog;
        struct replica_area *areas;
        size_t nareas;
        struct peers_options opts;
        uint8_t psk[PEER_PSK_MAX];
        uint32_t *sources;         /* the areas' source nodes, for the links */
        struct link_env links;
        struct transfer_env transfers;
        /* the replication targets: one dialer each, the same slot in
         * repl.targets and restore.targets */
        struct dialer targets[LINK_NODES_MAX];
        size_t ntargets;
        /* the control link to the coordinator: a target's dialer when the
         * coordinator is a target (coord_slot), else `coord` (slot
         * COORD_SLOT); NULL on the coordinator itself */
        struct dialer coord;
        struct dialer *to_coord;
        struct peers_control control;
        /* link_env.sources: the areas' sources, and on the coordinator
         * every other node (control links) */
        uint32_t *accept;
        size_t naccept;
        struct replication repl;
        struct neighbour_restore restore;
};

static struct peers *peers_of_env(struct link_env *env) {
        return container_of(env, struct peers, links);
}

/* Ask for ranks to restore, then start rank transfers of the steps owed,
 * on target slot's link while its window has room. */
static void target_pump(struct peers *ps, size_t slot) {
        if (slot >= ps->ntargets)
                return; /* the control-only link to the coordinator */
        struct plink *l = ps->targets[slot].l;

        if (!l || l->state != L_READY || ps->links.freeing)
                return;
        if (!neighbour_restore_pump(&ps->restore, slot, l))
                return;
        replication_pump(&ps->repl, slot, l);
        link_flush(l);
}

static void pump_hook(void *owner, size_t slot) {
        target_pump(owner, slot);
}

static void listed_hook(void *owner, size_t slot, const struct rkeys *held) {
        struct peers *ps = owner;
        replication_reseed(&ps->repl, slot, held);
}

#define COORD_SLOT SIZE_MAX

static void coordinator_up(struct peers *ps) {
        if (ps->control.coordinator_up)
                ps->control.coordinator_up(ps->control.userdata);
}

static void target_up(struct dialer *d) {
        struct peers *ps = peers_of_env(d->env);

        replication_connected(&ps->repl, d->slot);
        neighbour_restore_connected(&ps->restore, d->slot);
        if (d == ps->to_coord)
                coordinator_up(ps);
        target_pump(ps, d->slot);
}

static void coord_up(struct dialer *d) {
        coordinator_up(peers_of_env(d->env));
}

static void coord_down(struct dialer *d) {
        (void)d; /* nothing rides on it but control messages */
}

static void target_down(struct dialer *d) {
        struct peers *ps = peers_of_env(d->env);
        neighbour_restore_disconnected(&ps->restore, d->slot);
}

/* ---- the transfers' hooks ------------------------------------------------------------------- */

/* Where a received rank goes: a replica area for a replication source's
 * own ranks, the local tier for an answer this node asked for. */
static int place_hook(void *owner, struct plink *l, const struct peer_rank_begin *b, bool asked,
                      struct rx *rx) {
        struct peers *ps = owner;

        if (b->purpose == PEER_PURPOSE_REPLICATE) {
                /* only the sender's own ranks, and only from a node whose
                 * replicas this node is meant to hold */
                struct replica_area *a =
                        l->client ? NULL : replica_area_for(ps->areas, ps->nareas, l->node);
                if (!a || b->src_node != l->node) {
                        link_close(l, -EPERM, "node %u may not replicate node %u's ranks here",
                                   l->node, b->src_node);
                        return -1;
                }
                rx->store = a->store;
                rx->catalog = a->catalog;
                rx->memory_src = a->src;
                return 0;
        }
        if (!l->client || !asked) {
                link_close(l, -EPROTO, "a restore transfer nobody asked for");
                return -1;
        }
        /* a rank asked for to replace a corrupt replica lands in its area */
        bool replacing;
        struct replica_area *into = neighbour_restore_into(&ps->restore, l, rx->in.stream,
                                                           &replacing);
        rx->replacing = replacing;
        rx->store = into ? into->store : ps->store;
        rx->catalog = into ? into->catalog : ps->catalog;
        rx->memory_src = into ? into->src : MEMTIER_OWN;
        rx->local = true;
        return 0;
}

static void committed_hook(void *owner, const struct rx *rx) {
        struct peers *ps = owner;
        neighbour_restore_landed(&ps->restore, rx);
}

/* replicas follow the same retention as local checkpoints */
static void landed_in_area_hook(void *owner, struct store *store, struct catalog *catalog,
                                const char *job) {
        struct peers *ps = owner;
        replica_area_retention(store, catalog, job, &ps->opts.retention);
}

static void window_hook(void *owner, struct plink *l) {
        if (l->dialer)
                target_pump(owner, l->dialer->slot);
}

static const struct transfer_hooks transfer_hooks = {
        .place = place_hook,
        .committed = committed_hook,
        .landed_in_area = landed_in_area_hook,
        .window = window_hook,
};

/* ---- the links' hooks: which layer a message is for -------------------------------------- */

/* The commit's messages: reports only to the coordinator, states only
 * from it. */
static void on_control(struct peers *ps, struct plink *l, const struct peer_msg *m) {
        bool report = m->hdr.type == PEER_MSG_STEP_REPORT;

        if (report ? ps->links.self != PEERS_COORDINATOR || l->client
                   : l->node != PEERS_COORDINATOR || !l->client) {
                link_close(l, -EPROTO, "%s from node %u: only node %u coordinates commits",
                           peer_msg_type_name(m->hdr.type), l->node, PEERS_COORDINATOR);
                return;
        }
        if (ps->control.message)
                ps->control.message(ps->control.userdata, l->node, m);
}

/* A neighbour restoring a rank from this node found this node's copy bad
 * (transfer.h, TRANSFER_COPY_BAD_FMT): the layer above heals it.  true:
 * it was such a report. */
static bool peers_copy_reported(struct peers *ps, struct plink *l, const struct peer_msg *m) {
        char job[CKPT_NAME_MAX + 1];
        const char *detail;
        uint64_t step;
        uint32_t rank;

        if (m->error.error != -EBADMSG ||
            transfer_copy_bad_parse(m->error.message, job, &step, &rank, &detail) < 0)
                return false;
        log_error("peers: node %u (%s) reports this node's copy of job %s step %" PRIu64
                  " rank %u corrupt: %s", l->node, l->addr, job, step, rank, detail);
        if (ps->opts.copy_bad)
                ps->opts.copy_bad(ps->restore.restored_userdata, l->node, job, step, rank,
                                  detail);
        return true;
}

/* The cluster view's messages ride on any authenticated link, control
 * links included: a node answers whoever holds the key, and asks over
 * whatever link it has. */
static void on_node_status(struct peers *ps, struct plink *l, const struct peer_msg *m) {
        if (m->hdr.type == PEER_MSG_NODE_STATUS) {
                if (ps->control.node_status_answer)
                        ps->control.node_status_answer(ps->control.userdata, l->node,
                                                       &m->node_status);
                return;
        }
        if (m->node_status_req.about != PEER_NODE_SELF) {
                /* another node's status, relayed (the layer above answers
                 * when it has it, or says why not) */
                if (ps->control.node_status_relay)
                        ps->control.node_status_relay(ps->control.userdata, l->node,
                                                      &m->node_status_req);
                return;
        }
        _cleanup_free_ struct peer_msg *rep = calloc(1, sizeof(*rep));
        if (!rep) {
                link_send_error(l, 0, -ENOMEM, "no memory for a NODE_STATUS");
                return;
        }
        rep->hdr.type = PEER_MSG_NODE_STATUS;
        if (ps->control.node_status)
                ps->control.node_status(ps->control.userdata, m->node_status_req.uid,
                                        &rep->node_status);
        rep->node_status.nonce = m->node_status_req.nonce;
        rep->node_status.about = PEER_NODE_SELF;
        rep->node_status.reach = CKPT_NODE_REACHABLE;
        rep->hdr.seq = link_next_seq(l);
        if (link_send(l, rep) == 0)
                link_flush(l);
}

static void on_message(struct plink *l, const struct peer_msg *m) {
        struct peers *ps = peers_of_env(l->env);

        if (m->hdr.type == PEER_MSG_STEP_REPORT || m->hdr.type == PEER_MSG_STEP_STATE) {
                on_control(ps, l, m);
                return;
        }
        if (m->hdr.type == PEER_MSG_NODE_STATUS_REQ || m->hdr.type == PEER_MSG_NODE_STATUS) {
                on_node_status(ps, l, m);
                return;
        }
        /* A control-only link (a node that does not replicate to this
         * one, or this node's own link to the coordinator when that is no
         * replication target) carries nothing but the commit's messages
         * and errors about the connection. */
        bool control_only = l->client ? l->dialer && l->dialer->slot == COORD_SLOT
                                      : !replica_area_for(ps->areas, ps->nareas, l->node);
        if (control_only && (m->hdr.type != PEER_MSG_ERROR || m->hdr.stream != 0)) {
                link_close(l, -EPERM, "node %u: a control link carries only the commit's "
                           "messages, not %s",
                           l->node, peer_msg_type_name(m->hdr.type));
                return;
        }
        if (control_only) {
                log_error("peers: node %u (%s) reports: %s", l->node, l->addr, m->error.message);
                link_close(l, m->error.error, "node %u reports: %s", l->node, m->error.message);
                return;
        }

        switch (m->hdr.type) {
        case PEER_MSG_RANK_BEGIN: {
                bool asked = m->rank_begin.purpose == PEER_PURPOSE_RESTORE &&
                             neighbour_restore_asked(&ps->restore, l, m->hdr.stream);
                transfer_rx_begin(&ps->transfers, l, m, asked);
                break;
        }
        case PEER_MSG_RANK_END:
                neighbour_restore_rank_end(&ps->restore, l, transfer_rx_find(l, m->hdr.stream));
                transfer_rx_end(l, m);
                if (l->state == L_READY && l->dialer)
                        target_pump(ps, l->dialer->slot);
                break;
        case PEER_MSG_RANK_ACK:
                replication_rank_acked(&ps->repl, l, m);
                break;
        case PEER_MSG_LIST_REQ:
                if (l->client) {
                        link_close(l, -EPROTO, "LIST_REQ sent to the connecting side");
                        return;
                }
                neighbour_restore_answer_list(&ps->restore, l, m);
                break;
        case PEER_MSG_LIST_REP:
                neighbour_restore_list_reply(&ps->restore, l, m);
                break;
        case PEER_MSG_GET_RANK:
                if (l->client) {
                        link_close(l, -EPROTO, "GET_RANK sent to the connecting side");
                        return;
                }
                neighbour_restore_answer_get(&ps->restore, l, m);
                break;
        case PEER_MSG_ERROR:
                if (neighbour_restore_error(&ps->restore, l, m))
                        break;
                if (m->hdr.stream && !l->client && peers_copy_reported(ps, l, m))
                        break;
                log_error("peers: node %u (%s) reports: %s", l->node, l->addr, m->error.message);
                /* an ERROR about the connection ends it (the other side
                 * closes it after sending); the reason goes to status */
                if (m->hdr.stream == 0)
                        link_close(l, m->error.error, "node %u reports: %s", l->node,
                                   m->error.message);
                break;
        default:
                link_close(l, -EPROTO, "unexpected %s", peer_msg_type_name(m->hdr.type));
                break;
        }
}

static bool on_data(struct plink *l, const struct peer_msg *m) {
        return transfer_rx_data(&peers_of_env(l->env)->transfers, l, m);
}

static void on_payload(struct plink *l, void *cookie) {
        transfer_rx_payload(&peers_of_env(l->env)->transfers, l, cookie);
}

static void on_payload_drop(struct plink *l, void *cookie) {
        transfer_rx_payload_drop(&peers_of_env(l->env)->transfers, l, cookie);
}

static const struct link_ops link_ops = {
        .message = on_message,
        .data = on_data,
        .payload = on_payload,
        .payload_drop = on_payload_drop,
};

/* ---- the public API --------------------------------------------------------------------------- */

void peers_set_control(struct peers *ps, const struct peers_control *control) {
        ps->control = *control;
}

/* The coordinator's link from node: the one node dialed (a node keeps
 * exactly one link to the coordinator). */
static struct plink *link_from(struct peers *ps, uint32_t node) {
        struct list *pos;
        for (pos = ps->links.links.next; pos != &ps->links.links; pos = pos->next) {
                struct plink *l = list_entry(pos, struct plink, link);
                if (!l->client && l->node == node && l->state == L_READY)
                        return l;
        }
        return NULL;
}

int peers_control_send(struct peers *ps, uint32_t node, struct peer_msg *m) {
        struct plink *l;

        if (ps->links.freeing)
                return -ENOTCONN;
        if (ps->links.self == PEERS_COORDINATOR)
                l = link_from(ps, node);
        else
                l = ps->to_coord && dialer_up(ps->to_coord) ? ps->to_coord->l : NULL;
        if (!l)
                return -ENOTCONN;
        m->hdr.stream = 0;
        m->hdr.seq = link_next_seq(l);
        int r = link_send(l, m);
        if (r == 0)
                link_flush(l);
        return r;
}

/* This node's dialer to node (a target's, or the control link's), NULL:
 * it dials none there. */
static struct dialer *dialer_to(struct peers *ps, uint32_t node) {
        for (size_t i = 0; i < ps->ntargets; i++)
                if (ps->targets[i].node == node)
                        return &ps->targets[i];
        return ps->to_coord && ps->to_coord->node == node ? ps->to_coord : NULL;
}

/* The authenticated link up to node, any kind; NULL: none. */
static struct plink *link_to(struct peers *ps, uint32_t node) {
        struct dialer *d = dialer_to(ps, node);
        return d && dialer_up(d) ? d->l : link_from(ps, node);
}

int peers_node_status_send(struct peers *ps, uint32_t node, const struct peer_node_status *st) {
        struct plink *l = ps->links.freeing ? NULL : link_to(ps, node);
        if (!l)
                return -ENOTCONN;
        _cleanup_free_ struct peer_msg *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->hdr.type = PEER_MSG_NODE_STATUS;
        m->node_status = *st;
        m->hdr.seq = link_next_seq(l);
        int r = link_send(l, m);
        if (r == 0)
                link_flush(l);
        return r;
}

int peers_node_status_ask(struct peers *ps, uint32_t node, uint64_t nonce, uint32_t uid,
                          uint32_t about, char *why, size_t size) {
        struct dialer *d = dialer_to(ps, node);
        struct plink *l = link_to(ps, node);

        if (!l || ps->links.freeing) {
                bool dials_here = false;
                for (size_t i = 0; i < ps->naccept; i++)
                        dials_here |= ps->accept[i] == node;
                if (d)
                        snprintf(why, size, "link down%s%s", d->last_error[0] ? ": " : "",
                                 d->last_error);
                else if (dials_here)
                        snprintf(why, size, "its link to node %u is not up (it connects to "
                                 "this node)", ps->links.self);
                else {
                        snprintf(why, size, "no link from node %u (it neither replicates to "
                                 "nor from it: ask node %u, linked to every node)",
                                 ps->links.self, PEERS_COORDINATOR);
                        return -ENOLINK;
                }
                return -ENOTCONN;
        }
        /* a struct peer_msg is ~70 KiB (LIST_REP): not on the stack */
        _cleanup_free_ struct peer_msg *m = calloc(1, sizeof(*m));
        if (!m) {
                snprintf(why, size, "out of memory");
                return -ENOMEM;
        }
        m->hdr.type = PEER_MSG_NODE_STATUS_REQ;
        m->node_status_req.nonce = nonce;
        m->node_status_req.uid = uid;
        m->node_status_req.about = about;
        m->hdr.seq = link_next_seq(l);
        int r = link_send(l, m);
        if (r < 0) {
                snprintf(why, size, "cannot send: %s", strerror(-r));
                return -ENOTCONN;
        }
        link_flush(l);
        return 0;
}

uint32_t peers_links_down(const struct peers *ps, uint32_t *nodes, uint32_t max) {
        uint32_t n = 0;
        for (size_t i = 0; i < ps->ntargets && n < max; i++)
                if (!dialer_up(&ps->targets[i]))
                        nodes[n++] = ps->targets[i].node;
        if (ps->to_coord == &ps->coord && !dialer_up(&ps->coord) && n < max)
                nodes[n++] = ps->coord.node;
        return n;
}

uint32_t peers_job_owed(const struct peers *ps, const char *job) {
        return replication_job_owed(&ps->repl, job);
}

void peers_node_name(const struct peers *ps, uint32_t node, char *buf, size_t size) {
        node_address_format(&ps->opts.addrs[node], buf, size);
}

bool peers_coordinator_up(const struct peers *ps) {
        return ps->to_coord && dialer_up(ps->to_coord);
}

bool peers_replicates(const struct peers *ps) {
        return ps && ps->ntargets > 0;
}

int peers_step_committed(struct peers *ps, const char *job, uint64_t step) {
        return replication_step_committed(&ps->repl, job, step);
}

int peers_replicated(struct peers *ps, const char *job, uint64_t step, char *why, size_t size) {
        return replication_replicated(&ps->repl, job, step, why, size);
}

void peers_step_removed(struct peers *ps, const char *job, uint64_t step) {
        replication_step_removed(&ps->repl, job, step);
}

void peers_set_copy_bad(struct peers *ps, replication_copy_bad_fn copy_bad, void *userdata) {
        ps->repl.copy_bad = copy_bad;
        ps->repl.copy_bad_userdata = userdata;
}

void peers_set_memory(struct peers *ps, struct memtier *memory) {
        ps->transfers.memory = memory;
        ps->repl.memory = memory;
        ps->restore.memory = memory;
}

struct replica_area *peers_area_of(struct peers *ps, const char *job, uint64_t step,
                                   uint32_t rank) {
        return ps ? replica_area_holding(ps->areas, ps->nareas, job, step, rank) : NULL;
}

int peers_restore(struct peers *ps, const char *job, uint64_t step,
                  void (*done)(void *userdata, int error, uint32_t ranks, const char *message),
                  void *userdata) {
        return neighbour_restore_start(&ps->restore, job, step, done, userdata);
}

int peers_fetch_rank(struct peers *ps, const char *job, uint64_t step, uint32_t rank,
                     void (*done)(void *userdata, int error, uint32_t ranks, const char *message),
                     void *userdata) {
        return neighbour_restore_fetch_rank(&ps->restore, job, step, rank, false, NULL, done,
                                            userdata);
}

int peers_fetch_rank_into(struct peers *ps, struct replica_area *into, const char *job,
                          uint64_t step, uint32_t rank,
                          void (*done)(void *userdata, int error, uint32_t ranks,
                                       const char *message),
                          void *userdata) {
        return neighbour_restore_fetch_rank(&ps->restore, job, step, rank, true, into, done,
                                            userdata);
}

int peers_adopt(struct peers *ps, int fd, const char *host) {
        return link_adopt(&ps->links, fd, host);
}

void peers_status(struct peers *ps, char *text, size_t size, uint32_t *connected,
                  uint32_t *total, uint32_t *pending_steps) {
        size_t off = 0;

        *connected = *total = *pending_steps = 0;
        text[0] = 0;
        for (size_t i = 0; i < ps->ntargets; i++) {
                struct dialer *t = &ps->targets[i];
                uint32_t steps_pending = ps->repl.targets[i].steps_pending;
                uint32_t steps_failed = ps->repl.targets[i].steps_failed;
                bool up = dialer_up(t);
                char addr[80];
                node_address_format(&ps->opts.addrs[t->node], addr, sizeof(addr));
                (*total)++;
                *connected += up;
                *pending_steps += steps_pending;
                /* which steps and why is the jobs' owners' to see: the
                 * last error of status (server_job_error), and the log */
                char failed[48] = "";
                if (steps_failed)
                        snprintf(failed, sizeof(failed), " (%u refused or failed)", steps_failed);
                int n = snprintf(text + off, size - off, "%snode %u %s %s%s, %u steps owed%s%s%s",
                                 i ? "; " : "", t->node, addr, up ? "up" : "down",
                                 !up && t->down_since ? " (since a disconnect)" : "",
                                 steps_pending, failed,
                                 t->last_error[0] ? ", last link error: " : "", t->last_error);
                if (n < 0 || (size_t)n >= size - off)
                        break;
                off += (size_t)n;
        }
}

uint32_t peers_target_count(const struct peers *ps) {
        return (uint32_t)ps->ntargets;
}

void peers_target(const struct peers *ps, uint32_t i, uint32_t *node, bool *up,
                  uint32_t *steps_owed) {
        const struct dialer *t = &ps->targets[i];

        *node = t->node;
        *up = dialer_up(t);
        *steps_owed = ps->repl.targets[i].steps_pending;
}

void peers_pause(struct peers *ps, bool paused) {
        link_env_pause(&ps->links, paused);
}

const struct retention_policy *peers_retention(const struct peers *ps) {
        return &ps->opts.retention;
}

void peers_set_retention(struct peers *ps, const struct retention_policy *p) {
        ps->opts.retention = *p;
        ps->repl.keep = p->keep;
}

int peers_new(struct peers **out, struct loop *loop, struct worker_pool *workers,
              struct pool *pool, struct store *store, struct catalog *catalog,
              struct replica_area *areas, size_t nareas, const struct peers_options *opts,
              void (*on_changed)(void *userdata, const char *job, uint64_t step),
              void *userdata) {
        struct peers *ps = calloc(1, sizeof(*ps));
        uint32_t targets[LINK_NODES_MAX];
        int r;

        if (!ps)
                return -ENOMEM;
        ps->store = store;
        ps->catalog = catalog;
        ps->areas = areas;
        ps->nareas = nareas;
        ps->opts = *opts;
        if (opts->psk_len > sizeof(ps->psk)) {
                free(ps);
                return -EINVAL;
        }
        memcpy(ps->psk, opts->psk, opts->psk_len);
        ps->sources = calloc(nareas ? nareas : 1, sizeof(*ps->sources));
        ps->accept = calloc(opts->topo.count, sizeof(*ps->accept));
        if (!ps->sources || !ps->accept) {
                free(ps->sources);
                free(ps->accept);
                free(ps);
                return -ENOMEM;
        }
        for (size_t i = 0; i < nareas; i++)
                ps->sources[i] = ps->accept[ps->naccept++] = areas[i].src;
        if (opts->topo.index == PEERS_COORDINATOR)
                for (uint32_t n = 0; n < opts->topo.count; n++)
                        if (n != opts->topo.index && !replica_area_for(areas, nareas, n))
                                ps->accept[ps->naccept++] = n;

        ps->links = (struct link_env){
                .loop = loop,
                .ops = &link_ops,
                .addrs = opts->addrs,
                .self = opts->topo.index,
                .node_count = opts->topo.count,
                .psk = ps->psk,
                .psk_len = opts->psk_len,
                .listen_host = opts->listen_host,
                .listen_port = opts->listen_port,
                .connect_timeout_ms = opts->connect_timeout_ms,
                .handshake_timeout_ms = opts->handshake_timeout_ms,
                .keepalive_ms = opts->keepalive_ms,
                .frames_unsealed = opts->frames_unsealed,
                .unauth_max = opts->unauth_max,
                .unauth_per_address = opts->unauth_per_address,
                .sources = ps->accept,
                .nsources = ps->naccept,
        };
        ps->transfers = (struct transfer_env){
                .workers = workers,
                .pool = pool,
                .pool_wait_ms = opts->pool_wait_ms,
                .hooks = &transfer_hooks,
                .owner = ps,
        };
        list_init(&ps->transfers.commits);
        ps->repl.store = store;
        ps->repl.catalog = catalog;
        ps->repl.self = opts->topo.index;
        ps->repl.keep = opts->retention.keep;
        ps->repl.workers = workers;
        ps->repl.pump = pump_hook;
        ps->repl.owner = ps;
        ps->repl.on_changed = on_changed;
        ps->repl.userdata = userdata;
        ps->restore.store = store;
        ps->restore.catalog = catalog;
        ps->restore.self = opts->topo.index;
        ps->restore.areas = areas;
        ps->restore.nareas = nareas;
        ps->restore.restore_on_start = opts->restore_on_start;
        ps->restore.restored = opts->restored;
        ps->restore.restored_userdata = userdata;
        ps->restore.pump = pump_hook;
        ps->restore.listed = listed_hook;
        ps->restore.owner = ps;
        neighbour_restore_init(&ps->restore);

        r = link_env_listen(&ps->links);
        if (r < 0) {
                free(ps->sources);
                free(ps->accept);
                free(ps);
                return r;
        }
        size_t n = topology_targets(&opts->topo, opts->topo.index, targets, LINK_NODES_MAX);
        for (size_t i = 0; i < n && i < LINK_NODES_MAX; i++) {
                size_t slot = ps->ntargets++;
                struct dialer *d = &ps->targets[slot];
                d->env = &ps->links;
                d->node = targets[i];
                d->slot = slot;
                d->up = target_up;
                d->down = target_down;
                replication_target_init(&ps->repl, slot, d);
                neighbour_restore_target_init(&ps->restore, slot, d);
                ps->repl.ntargets = ps->restore.ntargets = ps->ntargets;
                if (d->node == PEERS_COORDINATOR)
                        ps->to_coord = d;
        }
        if (opts->topo.index != PEERS_COORDINATOR && !ps->to_coord) {
                ps->coord.env = &ps->links;
                ps->coord.node = PEERS_COORDINATOR;
                ps->coord.slot = COORD_SLOT;
                ps->coord.up = coord_up;
                ps->coord.down = coord_down;
                ps->to_coord = &ps->coord;
        }
        /* connect only now: a link's up() may use any of them */
        for (size_t i = 0; i < ps->ntargets; i++)
                dialer_connect(&ps->targets[i]);
        if (ps->to_coord == &ps->coord)
                dialer_connect(&ps->coord);
        *out = ps;
        return 0;
}

struct peers *peers_free(struct peers *ps) {
        if (!ps)
                return NULL;
        ps->links.freeing = true;
        for (size_t i = 0; i < ps->ntargets; i++)
                dialer_stop(&ps->targets[i]);
        if (ps->to_coord == &ps->coord)
                dialer_stop(&ps->coord);
        replication_clear(&ps->repl);
        neighbour_restore_clear(&ps->restore);
        link_env_close(&ps->links);
        neighbour_restore_drop_jobs(&ps->restore);
        explicit_bzero(ps->psk, sizeof(ps->psk));
        free(ps->sources);
        free(ps->accept);
        free(ps);
        return NULL;
}

const struct replica_area *peers_areas(const struct peers *ps, size_t *count) {
        *count = ps ? ps->nareas : 0;
        return ps ? ps->areas : NULL;
}
