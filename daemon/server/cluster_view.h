/* SPDX-License-Identifier: MIT */
/*
 * cluster_view — the CLUSTER request (`ckptctl cluster`): every node's
 * reachability, newest committed step per job, steps owed to replication
 * targets, degraded links and errors, as this node sees them now.
 *
 * CLUSTER index 0 gathers a new view: this node's own status at once, and
 * a NODE_STATUS_REQ to every other node over whatever authenticated link
 * this node has to it (peers_node_status_ask), all at once; for a node it
 * has no link to at all (neither replicates to the other), through the
 * coordinator, node 0, which every node links to: it asks that node and
 * answers (cluster_view_relay), so every node sees the whole cluster.  A
 * node whose link is not up is "down"; one whose answer has not come within
 * CLUSTER_VIEW_DEADLINE_MS "unreachable" (a stopped or overloaded daemon
 * keeps its TCP link up).  The reply to index 0 comes when every asked
 * node answered or at the deadline; the view stays with the connection,
 * and CLUSTER index 1, 2, ... read the other nodes of that same view (one
 * node per reply: docs/protocol.md, CLUSTER).
 *
 * Privacy: the STATUS rule (server.c, status_restrict): a uid other than
 * root sees only its own jobs and errors, on every node: the peer request
 * carries the uid and each node filters what it answers.
 *
 * cluster_view.c owns struct cluster_view, conn.cluster, the server's
 * list of views being gathered and (on the coordinator) its list of
 * requests relayed.  Loop thread only.
 */
#pragma once

#include <stdint.h>

#include "ckpt-proto.h"
#include "peer-proto.h"

#define CLUSTER_VIEW_DEADLINE_MS 2000
/* The coordinator's own deadline for a node it asks on another's behalf:
 * below the asker's, so that its "unreachable" reaches the asker in time. */
#define CLUSTER_RELAY_DEADLINE_MS 1500

struct conn;
struct server;

void cluster_view_handle(struct conn *c, const struct ckpt_req_cluster *req);
/* c closes: drop its view (a gathering under way too). */
void cluster_view_conn_closed(struct conn *c);

/* This node's status for a NODE_STATUS answer or its own row: only what
 * uid may see (PEER_UID_ANY: everything). */
void cluster_view_local(struct server *srv, uint32_t uid, struct peer_node_status *st);
/* node answered NODE_STATUS (from the peers' hook): fill it into the view
 * asked with that id, if one still waits; an answer nobody waits for (late,
 * or bad) changes nothing. */
void cluster_view_answer(struct server *srv, uint32_t node, const struct peer_node_status *st);
/* On the coordinator: origin asks for node req->about's status, having no
 * link to it; ask it and answer origin (its NODE_STATUS, or reach down,
 * unknown or, after CLUSTER_RELAY_DEADLINE_MS, unreachable).  Anywhere
 * else, or about itself or origin: refused (answered unknown). */
void cluster_view_relay(struct server *srv, uint32_t origin,
                        const struct peer_node_status_req *req);
/* The server stops: drop the relays waiting (their askers time out). */
void cluster_view_free_all(struct server *srv);
