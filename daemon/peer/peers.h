/* SPDX-License-Identifier: MIT */
/*
 * peers — the neighbour tier: replication of committed steps to the nodes
 * the replication rule names, replica areas for the nodes that replicate
 * to this one, and restore of this node's ranks from its neighbours.
 *
 * Connections: every node listens on its [cluster] peers entry; it
 * connects to its replication targets and keeps those connections (with
 * reconnect and backoff).  All requests go from the connecting side: it
 * pushes ranks to replicate (RANK_BEGIN/DATA/RANK_END, answered by
 * RANK_ACK), lists what the target holds of it (LIST_REQ) and pulls ranks
 * back (GET_RANK).  The accepting side only answers, and only nodes whose
 * shards it is meant to hold (its replication sources) may connect.  Both
 * prove knowledge of the pre-shared key (docs/peer-protocol.md).
 *
 * Replicas are written by the receiving daemon through its own local-tier
 * code into a replica area per source node,
 * <state>/replica/node-<src>/{jobs/...,catalog.db}: same layout, manifests
 * and checks as the local tier, its own catalog.  A rank is acknowledged
 * only after its every block matched the manifest's CRC32C, the files were
 * fsynced and the rank directory renamed into place.
 *
 * The tier is built in layers under peer/ (docs/architecture.md): link
 * (transport) <- transfer (one rank) <- replication, neighbour_restore
 * (policy); peers.c puts them together behind this API.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "ckpt-proto.h"
#include "peer-proto.h"
#include "cluster/node_address.h"
#include "cluster/topology.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/store.h"
#include "peer/replica_area.h"
#include "peer/replication.h"
#include "pool/pool.h"
#include "retention/retention.h"

struct peers;

struct peers_options {
        struct topology topo;
        const struct node_address *addrs; /* topo.count entries */
        const char *listen_host;         /* NULL: any */
        uint16_t listen_port;
        const uint8_t *psk;
        size_t psk_len;
        uint64_t connect_timeout_ms;
        uint64_t handshake_timeout_ms;   /* accept (or connect) to authenticated; 0: none */
        uint64_t keepalive_ms;           /* TCP keepalive idle time; 0: off */
        /* [cluster] peer_frame_mac = no: frames after the handshake go
         * without tags (false, the zero value, is the safe default) */
        bool frames_unsealed;
        uint32_t unauth_max;             /* accepted, unauthenticated links; 0: no cap */
        uint32_t unauth_per_address;     /* of them from one address; 0: no cap */
        struct retention_policy retention; /* of each area (replica_area sets the mode) */
        bool restore_on_start;           /* pull missing ranks from the targets */
        /* a step of this node landed here from a neighbour (NULL: no
         * one to tell); called with peers_new()'s userdata */
        void (*restored)(void *userdata, const char *job, uint64_t step);
        /* node, restoring (job, step, rank) from this node, found this
         * node's copy bad (detail: shard, block): heal it (NULL: nobody
         * to tell); called with peers_new()'s userdata */
        void (*copy_bad)(void *userdata, uint32_t node, const char *job, uint64_t step,
                         uint32_t rank, const char *detail);
        uint64_t pool_wait_ms;
};

/* The cluster-wide commit's messages (docs/commit.md) go over the same
 * links: every node other than the coordinator (node 0) keeps a control
 * link to it (its replication link when node 0 is a target, else one of
 * its own), and the coordinator accepts one from every node.  peers only
 * carries them; what they mean is the layer above's. */
#define PEERS_COORDINATOR 0u

struct peers_control {
        /* a STEP_REPORT from node (on the coordinator), or a STEP_STATE
         * from the coordinator (node PEERS_COORDINATOR) */
        void (*message)(void *userdata, uint32_t node, const struct peer_msg *m);
        /* this node's control link to the coordinator is up (again):
         * report what the coordinator must know */
        void (*coordinator_up)(void *userdata);
        /* the cluster view (`ckptctl cluster`): fill this node's answer to
         * a NODE_STATUS_REQ, naming only what uid may see (PEER_UID_ANY:
         * everything); and a NODE_STATUS answer from node (NULL: this
         * node does not take part) */
        void (*node_status)(void *userdata, uint32_t uid, struct peer_node_status *st);
        void (*node_status_answer)(void *userdata, uint32_t node,
                                   const struct peer_node_status *st);
        /* a NODE_STATUS_REQ from node about another node (req->about): ask
         * that one and answer node with peers_node_status_send(), in time */
        void (*node_status_relay)(void *userdata, uint32_t node,
                                  const struct peer_node_status_req *req);
        void *userdata;
};

/* areas: one per replication source (borrowed, must outlive peers).
 * on_changed(userdata, job, step): the step's replication state moved. */
int peers_new(struct peers **out, struct loop *loop, struct worker_pool *workers,
              struct pool *pool, struct store *store, struct catalog *catalog,
              struct replica_area *areas, size_t nareas, const struct peers_options *opts,
              void (*on_changed)(void *userdata, const char *job, uint64_t step),
              void *userdata);
struct peers *peers_free(struct peers *ps);

/* Install the control hooks (before the first link comes up: right after
 * peers_new()). */
void peers_set_control(struct peers *ps, const struct peers_control *control);
/* Send a STEP_REPORT to the coordinator (from a node other than it) or a
 * STEP_STATE to node (from the coordinator).  0, or -ENOTCONN: no link up
 * now (the reconnect's coordinator_up() is when to report again). */
int peers_control_send(struct peers *ps, uint32_t node, struct peer_msg *m);
/* Ask node for its status (NODE_STATUS_REQ nonce, uid) over whichever
 * authenticated link this node has to it: a target's, the control link,
 * or one the node opened to here.  0: asked (the answer comes through
 * control.node_status_answer, or never: the caller's deadline decides);
 * -ENOTCONN: the link to it is not up, why (size bytes) says why ("link
 * down: <last link error>"); -ENOLINK: the two nodes have no link at all
 * (neither replicates to the other; why says to ask node 0); -ENOMEM, why
 * says so too.  about: PEER_NODE_SELF, or (asking the coordinator) the
 * node it is to ask in turn, for a node with no link to that one. */
int peers_node_status_ask(struct peers *ps, uint32_t node, uint64_t nonce, uint32_t uid,
                          uint32_t about, char *why, size_t size);
/* Send st (a relayed answer) to node over any authenticated link up to it:
 * 0, -ENOTCONN (none), -ENOMEM, or link_send's error. */
int peers_node_status_send(struct peers *ps, uint32_t node, const struct peer_node_status *st);
/* The nodes this node's own links (to its targets and the coordinator)
 * go to that are down now, at most max of them; how many were written. */
uint32_t peers_links_down(const struct peers *ps, uint32_t *nodes, uint32_t max);
/* Steps of job owed to the replication targets, summed over them. */
uint32_t peers_job_owed(const struct peers *ps, const char *job);
/* node's peer address as configured ("host:port"). */
void peers_node_name(const struct peers *ps, uint32_t node, char *buf, size_t size);
/* This node's control link to the coordinator is up (false on node 0). */
bool peers_coordinator_up(const struct peers *ps);
/* Replication is on: this node has replication targets. */
bool peers_replicates(const struct peers *ps);

/* A step was committed here: record it pending for every target and send. */
int peers_step_committed(struct peers *ps, const char *job, uint64_t step);

/* 1: every target holds every local rank of (job, step); 0: not yet;
 * -ENOENT no such step; another -errno: a target refused a rank for its
 * CRC and it is not sent again.  why (size bytes) names the target, the
 * rank and the reason of a failure, also of one retried at the next
 * connect (then 0; "" when nothing failed). */
int peers_replicated(struct peers *ps, const char *job, uint64_t step, char *why, size_t size);

/* Retention removed (job, step) here: a copy of it a target refused is
 * owed no more. */
void peers_step_removed(struct peers *ps, const char *job, uint64_t step);

/* Who repairs this node's copy of a rank when a target refused it (a block
 * failed its CRC32C there) and its re-check here found it bad
 * (peer/replication.h, replication_copy_bad_fn; docs/replication.md, "A
 * refused replica").  Without one such a copy is unrepairable. */
void peers_set_copy_bad(struct peers *ps, replication_copy_bad_fn copy_bad, void *userdata);
/* The memory tier (NULL: off; set before the loop runs): what the links
 * send the newest step from, and where received ranks stay. */
void peers_set_memory(struct peers *ps, struct memtier *memory);

/* Where (job, step, rank) is held on this node outside the local tier:
 * the replica area, or NULL. */
struct replica_area *peers_area_of(struct peers *ps, const char *job, uint64_t step,
                                   uint32_t rank);

/* Pull the ranks of (job, step) (CKPT_STEP_LATEST: every committed step
 * the targets hold of this node that is missing here) from the targets
 * into the local tier.  done(userdata, error, ranks, message) runs once. */
int peers_restore(struct peers *ps, const char *job, uint64_t step,
                  void (*done)(void *userdata, int error, uint32_t ranks, const char *message),
                  void *userdata);

/* Pull one rank (any node's: a job restarted on other nodes reads ranks
 * their old nodes saved) from the first target that holds it, into the
 * local tier.  0: done() runs later; -EHOSTUNREACH: no target is up. */
int peers_fetch_rank(struct peers *ps, const char *job, uint64_t step, uint32_t rank,
                     void (*done)(void *userdata, int error, uint32_t ranks, const char *message),
                     void *userdata);

/* The same to replace a corrupt copy (server/heal.c): into the replica
 * area `into` (the rank is asked of the targets, which in a clique
 * include the node that saved it), or NULL: the local tier.  The copy
 * is swapped in atomically like any received rank, and the step's
 * replication and object-store state are left alone. */
int peers_fetch_rank_into(struct peers *ps, struct replica_area *into, const char *job,
                          uint64_t step, uint32_t rank,
                          void (*done)(void *userdata, int error, uint32_t ranks,
                                       const char *message),
                          void *userdata);

/* Fill the peer fields of a status reply (text for ckptctl).  The steps
 * owed count the ones a target refused. */
void peers_status(struct peers *ps, char *text, size_t size, uint32_t *connected,
                  uint32_t *total, uint32_t *pending_steps);

/* The same per replication target, for the metrics: how many targets,
 * and of target i (< peers_target_count) its node index, whether its link
 * is up and the steps owed to it (refused ones included, as above). */
uint32_t peers_target_count(const struct peers *ps);
void peers_target(const struct peers *ps, uint32_t i, uint32_t *node, bool *up,
                  uint32_t *steps_owed);

void peers_set_retention(struct peers *ps, const struct retention_policy *p);
/* The replica areas' policy as configured (replica_area_policy sets its
 * mode for uncommitted steps). */
const struct retention_policy *peers_retention(const struct peers *ps);

/* Hold outgoing rank data between frames (saves are staging here); the
 * handshake, acknowledgements and requests still flow. */
void peers_pause(struct peers *ps, bool paused);

/*
 * Take fd, a connected stream socket (ownership passes to ps, which closes
 * it on failure too), as a connection accepted from `host` (for the log):
 * it gets the handshake and everything after it exactly like one from the
 * peer listener.  The seam through which tests/fuzz/fuzz-peer-link.c drives
 * the link state machine with a socketpair; the daemon itself only accepts
 * from its listener.  0 or -errno.
 */
int peers_adopt(struct peers *ps, int fd, const char *host);

/* The replica areas this node holds for its sources, *count of them (0 and
 * NULL for a NULL ps).  Read-only: for looking up what they hold (restore
 * planning); the caller must not change or free them. */
const struct replica_area *peers_areas(const struct peers *ps, size_t *count);
