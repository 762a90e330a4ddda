/* SPDX-License-Identifier: MIT */
/*
 * topology — which nodes hold replicas of which node's shards
 * (docs/replication.md, "Placement"; DESIGN.md, "Replication-jump rule").
 *
 * Pure arithmetic on five numbers from [cluster] (node_count, node_index,
 * replication_jump, replication_factor, placement): no allocation, no I/O,
 * so config, the replication sender, the receiver and the restore planner
 * all ask the same functions and cannot disagree about where a copy lives.
 *
 * Two rules place the F-1 replicas of node n (N nodes, jump J, factor F):
 *
 *   clique  Nodes form cliques of F members spaced J apart:
 *           b = (n mod J) + (n div (J*F))*J*F, clique = { b + k*J : k < F };
 *           every member holds a replica of every other member's shards.
 *           N=8 J=2 F=2: {0,2} {1,3} {4,6} {5,7}.  Megatron-LM's rule.
 *   ring    Node n's replicas go to (n + k*J) mod N, k = 1..F-1; works for
 *           any N that leaves room for F distinct nodes.  N=5 J=1 F=3:
 *           targets(4) = {0,1}, sources(0) = {4,3}.
 *
 * Validation (topology_check), in this order, the first failure reported:
 *   1. count >= 1;
 *   2. index < count;
 *   3. jump >= 1 and factor >= 1;
 *   4. factor <= count (F copies need F distinct nodes);
 *   5. placement is PLACEMENT_CLIQUE or PLACEMENT_RING;
 *   6. factor == 1 (no replication) passes whatever the jump: every clique
 *      is {n} and there are no targets, so J places nothing;
 *   7. clique: count is a multiple of jump * factor, so that every clique
 *      is complete (the last block of J*F nodes would otherwise name nodes
 *      that do not exist);
 *   8. ring: (factor - 1) * jump < count.  Then the F-1 steps of J from n
 *      stay within one lap of the ring, so no replica lands on n itself or
 *      twice on one node (the condition is sufficient; a few larger J would
 *      also avoid collisions by luck of the modulus, and are refused anyway
 *      so that the rule stays "one lap").
 * Nothing bounds count, jump or factor from above here; config does.
 *
 * Thread-safety: every function is pure; call from any thread.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum placement { PLACEMENT_CLIQUE = 0, PLACEMENT_RING = 1 };

struct topology {
        uint32_t count;      /* N nodes */
        uint32_t index;      /* this node */
        uint32_t jump;       /* J >= 1 */
        uint32_t factor;     /* F >= 1; 1 = no replication */
        enum placement placement;
};

/* 0, or -EINVAL with a message for a person in err (err may be NULL or
 * errsize 0 to ask only yes/no).  The rules are the list above.  Messages
 * name the values by their [cluster] key names (node_count,
 * replication_jump, ...) without the section, so that config can prefix
 * "[cluster] ", and say which values would work:
 *   - factor > count: the factors that fit;
 *   - clique with count not a multiple of jump*factor: the nearest valid
 *     node_count below (when there is one) and above for this jump and
 *     factor, the replication_jump values that work for this node_count and
 *     factor (or that none does, when factor does not divide node_count),
 *     and whether placement = ring would accept these values;
 *   - ring with (factor-1)*jump >= count: the smallest node_count, the
 *     largest replication_jump and the largest replication_factor that work
 *     with the other two values.
 * The exact texts are pinned by tests/unit/test-topology.c. */
int topology_check(const struct topology *t, char *err, size_t errsize);

/* The common shape of the three queries below: n is a node number
 * (0..count-1, not necessarily t->index); the answer's nodes are written to
 * out[0..min(count, cap)-1] and the full count is returned, so a caller
 * with cap >= t->factor gets them all (out may be NULL when cap is 0).  A
 * topology that fails topology_check(), or n >= count, answers 0. */

/* Members of node n's clique in ascending order, n included: F of them.
 * Clique rule: { b + k*J }.  Ring: {n} U targets(n), also ascending. */
size_t topology_clique(const struct topology *t, uint32_t n, uint32_t *out, size_t cap);

/* Nodes that hold replicas of node n's shards (n excluded): F-1 of them,
 * in replica order k = 1..F-1 (the order a sender should prefer).
 * Clique: the other clique members, ascending.  Ring: (n + k*J) mod N. */
size_t topology_targets(const struct topology *t, uint32_t n, uint32_t *out, size_t cap);

/* Nodes whose shards node n holds replicas of (n excluded): F-1 of them.
 * Clique: the same nodes as topology_targets().  Ring: (n - k*J) mod N,
 * k = 1..F-1.  For every n and every t in targets(n), n is in
 * sources(t). */
size_t topology_sources(const struct topology *t, uint32_t n, uint32_t *out, size_t cap);
