/* SPDX-License-Identifier: MIT */
/*
 * coordinator — the cluster-wide commit decision (docs/commit.md), run by
 * node 0 of a multi-node cluster.
 *
 * Every node reports, per step, the ranks on its local disk and whether a
 * trainer there asked for the commit (STEP_REPORT).  The coordinator
 * decides a step committed when a commit was asked for and every rank
 * 0..world_size-1 is on some node's disk, all with one world_size, and
 * tells each node that holds ranks of it (STEP_STATE DECIDED); each records
 * it durably (its COMMITTED record) and reports back (flag COMMITTED).
 * When every holder has, it tells them and every node that asked
 * (EVERYWHERE): that is when ckpt_commit returns.
 *
 * The decision lives in the nodes' COMMITTED records, not here: this table
 * is memory only.  A restarted coordinator relearns it from the reports
 * every node sends when its control link comes up (a COMMITTED report is a
 * decision), and sends it on to the holders that have not recorded it.
 * So losing node 0 loses no decision, and a decision is never made twice
 * differently: all ranks present is all it takes, and committed_at is the
 * first recorder's.
 *
 * A pure state machine: no I/O, no clock, no loop.  It answers through
 * ops->send (which delivers to the node, itself included, later — never
 * back into this module from inside the call).
 *
 * Ownership: struct coordinator and every entry in it belong to this
 * module; the messages passed to ops->send are lent for the call.
 */
#pragma once

#include <stdint.h>

#include "peer-proto.h"

struct coordinator;

struct coordinator_ops {
        void (*send)(void *userdata, uint32_t node, const struct peer_step_state *state);
};

/* The most steps remembered; beyond it the oldest step committed
 * everywhere is forgotten first (a late report of it is answered from the
 * report itself: a COMMITTED one is a decision again). */
#define COORDINATOR_STEPS_MAX 4096
/* ... and at most this many ranks over all of them (4 bytes each): a node
 * that reports huge world sizes cannot make node 0 allocate without bound */
#define COORDINATOR_RANKS_MAX (1u << 24)

int coordinator_new(struct coordinator **out, uint32_t node_count,
                    const struct coordinator_ops *ops, void *userdata);
struct coordinator *coordinator_free(struct coordinator *co); /* accepts NULL */

/* A STEP_REPORT from node (node < node_count; this node's own too), at
 * unix time now.  Answers and decisions go out through ops->send. */
void coordinator_report(struct coordinator *co, uint32_t node,
                        const struct peer_step_report *r, int64_t now);

/* Steps in the table and how many of them wait for a decision (status). */
void coordinator_counts(const struct coordinator *co, uint32_t *steps, uint32_t *pending);
