/* SPDX-License-Identifier: MIT */
/*
 * Unit test for cluster/topology: the worked examples of docs/replication.md
 * (both placement rules), every rejection with its exact message (the
 * message is what a user sees at start, and it must say which values would
 * work), and an exhaustive sweep over small clusters for the properties the
 * replication code relies on: a clique has F distinct members including n,
 * targets exclude n, and for every n and every t in targets(n), n is in
 * sources(t) (and the converse), so what a sender sends is what a receiver
 * expects.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/topology.h"

#include "check.h"

#define MAXF 64

static struct topology topo(uint32_t count, uint32_t jump, uint32_t factor,
                            enum placement placement) {
        return (struct topology){ .count = count, .index = 0, .jump = jump, .factor = factor,
                                  .placement = placement };
}

static const char *rule_name(const struct topology *t) {
        return t->placement == PLACEMENT_RING ? "ring" : "clique";
}

/* "{0,2,4}" for messages */
static const char *fmt_list(const uint32_t *v, size_t n, char *buf, size_t size) {
        size_t used = 0;

        used += (size_t)snprintf(buf, size, "{");
        for (size_t i = 0; i < n && used < size; i++)
                used += (size_t)snprintf(buf + used, size - used, "%s%u", i ? "," : "", v[i]);
        if (used < size)
                snprintf(buf + used, size - used, "}");
        return buf;
}

typedef size_t (*query_fn)(const struct topology *, uint32_t, uint32_t *, size_t);

/* query(t, n) must answer exactly want[0..want_n-1], in that order. */
static void check_query(const char *what, query_fn query, const struct topology *t, uint32_t n,
                        const uint32_t *want, size_t want_n) {
        uint32_t got[MAXF];
        char a[256], b[256];
        size_t got_n;

        memset(got, 0xff, sizeof(got));
        got_n = query(t, n, got, MAXF);
        CHECK(got_n == want_n && memcmp(got, want, want_n * sizeof(*want)) == 0,
              "%s N=%u J=%u F=%u %s, node %u: got %s, want %s", what, t->count, t->jump,
              t->factor, rule_name(t), n, fmt_list(got, got_n < MAXF ? got_n : MAXF, a, sizeof(a)),
              fmt_list(want, want_n, b, sizeof(b)));
}

#define LIST(...) (const uint32_t[]){ __VA_ARGS__ }, sizeof((const uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t)
#define CLIQUE(t, n, ...) check_query("clique", topology_clique, t, n, LIST(__VA_ARGS__))
#define TARGETS(t, n, ...) check_query("targets", topology_targets, t, n, LIST(__VA_ARGS__))
#define SOURCES(t, n, ...) check_query("sources", topology_sources, t, n, LIST(__VA_ARGS__))

static void check_valid(const struct topology *t) {
        char err[1024] = "";
        int r = topology_check(t, err, sizeof(err));
        CHECK(r == 0, "N=%u index=%u J=%u F=%u %s rejected: %d %s", t->count, t->index, t->jump,
              t->factor, rule_name(t), r, err);
}

/* Every member of each clique in cliques[] (F entries each) must report
 * exactly that clique, and the others as targets and sources. */
static void check_cliques(const struct topology *t, const uint32_t *cliques, size_t n_cliques) {
        uint32_t f = t->factor;

        check_valid(t);
        CHECK(n_cliques * f == t->count, "the example covers every node");
        for (size_t c = 0; c < n_cliques; c++) {
                const uint32_t *members = cliques + c * f;
                for (uint32_t m = 0; m < f; m++) {
                        uint32_t others[MAXF];
                        size_t n_others = 0;

                        for (uint32_t o = 0; o < f; o++)
                                if (o != m)
                                        others[n_others++] = members[o];
                        check_query("clique", topology_clique, t, members[m], members, f);
                        check_query("targets", topology_targets, t, members[m], others,
                                    n_others);
                        check_query("sources", topology_sources, t, members[m], others,
                                    n_others);
                }
        }
}

/* ---- the worked examples ------------------------------------------------ */

static void test_examples_clique(void) {
        struct topology t;

        /* DESIGN.md's example: N=8, J=2, F=2. */
        t = topo(8, 2, 2, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0, 2, 1, 3, 4, 6, 5, 7 }, 4);
        CLIQUE(&t, 5, 5, 7);
        TARGETS(&t, 0, 2);
        SOURCES(&t, 7, 5);

        t = topo(12, 1, 3, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 }, 4);
        CLIQUE(&t, 10, 9, 10, 11);
        TARGETS(&t, 10, 9, 11);
        TARGETS(&t, 3, 4, 5);
        SOURCES(&t, 8, 6, 7);

        t = topo(8, 1, 2, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0, 1, 2, 3, 4, 5, 6, 7 }, 4);

        t = topo(16, 4, 2, PLACEMENT_CLIQUE);
        check_cliques(&t,
                      (const uint32_t[]){ 0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15 },
                      8);

        /* J=2 F=3 over two blocks of six. */
        t = topo(12, 2, 3, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11 }, 4);

        /* F = N: one clique of everyone. */
        t = topo(4, 1, 4, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0, 1, 2, 3 }, 1);

        /* F = 1: no replication, whatever the jump (5 is no multiple of 2). */
        t = topo(5, 2, 1, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0, 1, 2, 3, 4 }, 5);
        t = topo(1, 1, 1, PLACEMENT_CLIQUE);
        check_cliques(&t, (const uint32_t[]){ 0 }, 1);

        /* The largest job config allows: 16 cliques of 16, 4096 apart. */
        t = topo(65536, 4096, 16, PLACEMENT_CLIQUE);
        check_valid(&t);
        CLIQUE(&t, 65535, 4095, 8191, 12287, 16383, 20479, 24575, 28671, 32767, 36863, 40959,
               45055, 49151, 53247, 57343, 61439, 65535);
        TARGETS(&t, 0, 4096, 8192, 12288, 16384, 20480, 24576, 28672, 32768, 36864, 40960,
                45056, 49152, 53248, 57344, 61440);
}

static void test_examples_ring(void) {
        struct topology t;

        /* docs/replication.md: N=5, J=1, F=3. */
        t = topo(5, 1, 3, PLACEMENT_RING);
        check_valid(&t);
        TARGETS(&t, 4, 0, 1);
        SOURCES(&t, 0, 4, 3);
        /* the whole table of docs/replication.md */
        TARGETS(&t, 0, 1, 2);
        TARGETS(&t, 1, 2, 3);
        TARGETS(&t, 2, 3, 4);
        TARGETS(&t, 3, 4, 0);
        SOURCES(&t, 1, 0, 4);
        SOURCES(&t, 2, 1, 0);
        SOURCES(&t, 3, 2, 1);
        SOURCES(&t, 4, 3, 2);
        CLIQUE(&t, 4, 0, 1, 4);
        CLIQUE(&t, 3, 0, 3, 4);
        CLIQUE(&t, 1, 1, 2, 3);

        /* J=2: (F-1)*J = 4 = N-1, the longest span the rule allows. */
        t = topo(5, 2, 3, PLACEMENT_RING);
        check_valid(&t);
        TARGETS(&t, 0, 2, 4);
        TARGETS(&t, 3, 0, 2);
        SOURCES(&t, 0, 3, 1);
        CLIQUE(&t, 3, 0, 2, 3);

        /* A ring works where a clique cannot: N=7 is prime. */
        t = topo(7, 3, 2, PLACEMENT_RING);
        check_valid(&t);
        TARGETS(&t, 0, 3);
        TARGETS(&t, 4, 0);
        TARGETS(&t, 6, 2);
        TARGETS(&t, 5, 1);
        SOURCES(&t, 1, 5);
        CLIQUE(&t, 5, 1, 5);
        t.placement = PLACEMENT_CLIQUE;
        CHECK(topology_check(&t, NULL, 0) == -EINVAL, "clique N=7 J=3 F=2 is refused");

        /* N = F: everyone holds everyone. */
        t = topo(3, 1, 3, PLACEMENT_RING);
        check_valid(&t);
        TARGETS(&t, 2, 0, 1);
        SOURCES(&t, 2, 1, 0);
        CLIQUE(&t, 2, 0, 1, 2);

        /* F = 1: nothing to place. */
        t = topo(6, 4, 1, PLACEMENT_RING);
        check_valid(&t);
        CLIQUE(&t, 5, 5);
        CHECK(topology_targets(&t, 5, NULL, 0) == 0 && topology_sources(&t, 5, NULL, 0) == 0,
              "F=1 has no targets or sources");

        /* n + k*J beyond 32 bits: the arithmetic must not wrap. */
        t = topo(UINT32_MAX, UINT32_C(1) << 31, 2, PLACEMENT_RING);
        check_valid(&t);
        TARGETS(&t, UINT32_MAX - 1, 2147483647);
        SOURCES(&t, 2147483647, UINT32_MAX - 1);
        CLIQUE(&t, UINT32_MAX - 1, 2147483647, UINT32_MAX - 1);
}

/* ---- rejections -------------------------------------------------------- */

static void check_reject(struct topology t, uint32_t index, const char *want) {
        char err[1024], small[16];
        int r;

        t.index = index;
        memset(err, 'x', sizeof(err));
        r = topology_check(&t, err, sizeof(err));
        CHECK(r == -EINVAL, "N=%u index=%u J=%u F=%u %s: returned %d", t.count, index, t.jump,
              t.factor, rule_name(&t), r);
        CHECK(strcmp(err, want) == 0, "N=%u index=%u J=%u F=%u %s:\n got: %s\nwant: %s", t.count,
              index, t.jump, t.factor, rule_name(&t), err, want);
        /* The same answer without a buffer, and a short buffer holds the
         * message's start, terminated. */
        CHECK(topology_check(&t, NULL, 0) == -EINVAL, "no buffer");
        CHECK(topology_check(&t, small, 0) == -EINVAL, "errsize 0");
        CHECK(topology_check(&t, small, sizeof(small)) == -EINVAL &&
                      strlen(small) == sizeof(small) - 1 &&
                      strncmp(small, want, sizeof(small) - 1) == 0,
              "short buffer: '%s'", small);
        /* A topology that fails the check answers no query. */
        if (t.count > 0) {
                uint32_t out[MAXF];
                CHECK(topology_clique(&t, 0, out, MAXF) == 0 &&
                              topology_targets(&t, 0, out, MAXF) == 0 &&
                              topology_sources(&t, 0, out, MAXF) == 0,
                      "queries on an invalid topology answer 0");
        }
}

static void test_reject(void) {
        check_reject(topo(0, 1, 1, PLACEMENT_CLIQUE), 0,
                     "node_count = 0: a job has at least one node");
        check_reject(topo(4, 1, 1, PLACEMENT_CLIQUE), 4,
                     "node_index = 4 must be less than node_count = 4 (nodes are numbered "
                     "0..3)");
        check_reject(topo(4, 0, 2, PLACEMENT_CLIQUE), 0,
                     "replication_jump = 0 is not a jump: use 1 (clique members are "
                     "neighbours) or more");
        check_reject(topo(4, 0, 1, PLACEMENT_RING), 0,
                     "replication_jump = 0 is not a jump: use 1 (clique members are "
                     "neighbours) or more");
        check_reject(topo(4, 1, 0, PLACEMENT_CLIQUE), 0,
                     "replication_factor = 0 would keep no copy at all: use 1 (no "
                     "replication) or more");
        check_reject(topo(4, 1, 5, PLACEMENT_CLIQUE), 0,
                     "replication_factor = 5 is larger than node_count = 4: 5 copies need 5 "
                     "distinct nodes; use replication_factor 1..4");
        check_reject(topo(4, 1, 5, PLACEMENT_RING), 0,
                     "replication_factor = 5 is larger than node_count = 4: 5 copies need 5 "
                     "distinct nodes; use replication_factor 1..4");
        check_reject(topo(1, 1, 2, PLACEMENT_RING), 0,
                     "replication_factor = 2 is larger than node_count = 1: 2 copies need 2 "
                     "distinct nodes; use replication_factor 1..1");
        check_reject(topo(4, 1, 1, (enum placement)7), 0,
                     "placement = 7 is neither clique (0) nor ring (1)");

        /* clique: both neighbours, the jumps that divide N/F, ring works */
        check_reject(topo(10, 2, 2, PLACEMENT_CLIQUE), 3,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 2 * 2 = 4, and node_count = 10 is not: "
                     "node_count = 8 or 12 would work with these; for node_count = 10 and "
                     "replication_factor = 2, replication_jump = 1 or 5 would work; or use "
                     "placement = ring, which accepts these values");
        /* F does not divide N: no jump helps */
        check_reject(topo(10, 1, 3, PLACEMENT_CLIQUE), 0,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 1 * 3 = 3, and node_count = 10 is not: "
                     "node_count = 9 or 12 would work with these; for node_count = 10 no "
                     "replication_jump works with replication_factor = 3 (10 is not a "
                     "multiple of 3); or use placement = ring, which accepts these values");
        /* no valid N below */
        check_reject(topo(3, 2, 2, PLACEMENT_CLIQUE), 0,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 2 * 2 = 4, and node_count = 3 is not: "
                     "node_count = 4 would work with these; for node_count = 3 no "
                     "replication_jump works with replication_factor = 2 (3 is not a "
                     "multiple of 2); or use placement = ring, which accepts these values");
        /* ring would not work either */
        check_reject(topo(2, 2, 2, PLACEMENT_CLIQUE), 1,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 2 * 2 = 4, and node_count = 2 is not: "
                     "node_count = 4 would work with these; for node_count = 2 and "
                     "replication_factor = 2, replication_jump = 1 would work; placement = "
                     "ring would not accept these values either (it needs node_count > "
                     "(replication_factor - 1) * replication_jump = 2)");
        /* N/F a square (9: 1, 3, 9) */
        check_reject(topo(18, 4, 2, PLACEMENT_CLIQUE), 0,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 4 * 2 = 8, and node_count = 18 is not: "
                     "node_count = 16 or 24 would work with these; for node_count = 18 and "
                     "replication_factor = 2, replication_jump = 1, 3 or 9 would work; or use "
                     "placement = ring, which accepts these values");
        /* exactly 12 divisors are still listed (60) */
        check_reject(topo(120, 7, 2, PLACEMENT_CLIQUE), 0,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 7 * 2 = 14, and node_count = 120 is not: "
                     "node_count = 112 or 126 would work with these; for node_count = 120 and "
                     "replication_factor = 2, replication_jump = 1, 2, 3, 4, 5, 6, 10, 12, 15, "
                     "20, 30 or 60 would work; or use placement = ring, which accepts these "
                     "values");
        /* 13 divisors (4096, a square) are summarised */
        check_reject(topo(8192, 3, 2, PLACEMENT_CLIQUE), 0,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 3 * 2 = 6, and node_count = 8192 is not: "
                     "node_count = 8190 or 8196 would work with these; for node_count = 8192 "
                     "and replication_factor = 2, replication_jump = any divisor of 4096 (1, "
                     "2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, ...) would work; or use "
                     "placement = ring, which accepts these values");
        check_reject(topo(1440, 7, 2, PLACEMENT_CLIQUE), 0,
                     "placement = clique needs node_count to be a multiple of replication_jump "
                     "* replication_factor = 7 * 2 = 14, and node_count = 1440 is not: "
                     "node_count = 1428 or 1442 would work with these; for node_count = 1440 "
                     "and replication_factor = 2, replication_jump = any divisor of 720 (1, 2, "
                     "3, 4, 5, 6, 8, 9, 10, 12, 15, 16, ...) would work; or use placement = "
                     "ring, which accepts these values");

        /* ring: the span reaches around */
        check_reject(topo(5, 2, 4, PLACEMENT_RING), 0,
                     "placement = ring needs node_count > (replication_factor - 1) * "
                     "replication_jump = 3 * 2 = 6 (or a node's replicas would come back to "
                     "the node itself or land twice on one node), but node_count = 5: "
                     "node_count = 7 or more, replication_jump at most 1, or "
                     "replication_factor at most 3 would work");
        /* span == N: replica F-1 would be n itself */
        check_reject(topo(4, 4, 2, PLACEMENT_RING), 2,
                     "placement = ring needs node_count > (replication_factor - 1) * "
                     "replication_jump = 1 * 4 = 4 (or a node's replicas would come back to "
                     "the node itself or land twice on one node), but node_count = 4: "
                     "node_count = 5 or more, replication_jump at most 3, or "
                     "replication_factor = 1 (no replication) would work");
        /* Refused although 0, 3, 6 mod 5 happen not to collide: one lap. */
        check_reject(topo(5, 3, 3, PLACEMENT_RING), 0,
                     "placement = ring needs node_count > (replication_factor - 1) * "
                     "replication_jump = 2 * 3 = 6 (or a node's replicas would come back to "
                     "the node itself or land twice on one node), but node_count = 5: "
                     "node_count = 7 or more, replication_jump at most 2, or "
                     "replication_factor at most 2 would work");
}

/* ---- properties over every small cluster ------------------------------- */

static bool contains(const uint32_t *v, size_t n, uint32_t x) {
        for (size_t i = 0; i < n; i++)
                if (v[i] == x)
                        return true;
        return false;
}

/* Everything that must hold for node n of a valid topology t. */
static void check_node(const struct topology *t, uint32_t n) {
        uint32_t clique[MAXF], targets[MAXF], sources[MAXF], back[MAXF], part[MAXF];
        size_t nc, nt, ns, f = t->factor;

        nc = topology_clique(t, n, clique, MAXF);
        nt = topology_targets(t, n, targets, MAXF);
        ns = topology_sources(t, n, sources, MAXF);
        CHECK(nc == f && nt == f - 1 && ns == f - 1,
              "N=%u J=%u F=%u %s node %u: %zu members, %zu targets, %zu sources", t->count,
              t->jump, t->factor, rule_name(t), n, nc, nt, ns);
        if (nc != f || nt != f - 1 || ns != f - 1)
                return;

        CHECK(contains(clique, nc, n), "clique of %u lacks it", n);
        for (size_t i = 0; i < nc; i++) {
                CHECK(clique[i] < t->count, "member %u >= N", clique[i]);
                CHECK(i == 0 || clique[i - 1] < clique[i], "clique not ascending/distinct");
        }
        for (size_t i = 0; i < nt; i++) {
                CHECK(targets[i] < t->count && targets[i] != n, "target %u of %u", targets[i], n);
                CHECK(!contains(targets, i, targets[i]), "target %u twice", targets[i]);
                /* the clique is {n} U targets(n) */
                CHECK(contains(clique, nc, targets[i]), "target %u outside the clique",
                      targets[i]);
                /* whoever n sends to expects n */
                size_t nb = topology_sources(t, targets[i], back, MAXF);
                CHECK(contains(back, nb, n), "N=%u J=%u F=%u %s: %u -> %u but not in sources",
                      t->count, t->jump, t->factor, rule_name(t), n, targets[i]);
        }
        for (size_t i = 0; i < ns; i++) {
                CHECK(sources[i] < t->count && sources[i] != n, "source %u of %u", sources[i],
                      n);
                CHECK(!contains(sources, i, sources[i]), "source %u twice", sources[i]);
                size_t nb = topology_targets(t, sources[i], back, MAXF);
                CHECK(contains(back, nb, n), "N=%u J=%u F=%u %s: source %u does not target %u",
                      t->count, t->jump, t->factor, rule_name(t), sources[i], n);
        }

        if (t->placement == PLACEMENT_CLIQUE) {
                /* members J apart, and each member sees the same clique */
                for (size_t i = 1; i < nc; i++)
                        CHECK(clique[i] - clique[i - 1] == t->jump, "clique spacing");
                for (size_t i = 0; i < nc; i++) {
                        uint32_t other[MAXF];
                        CHECK(topology_clique(t, clique[i], other, MAXF) == nc &&
                                      memcmp(other, clique, nc * sizeof(*clique)) == 0,
                              "member %u of %u's clique sees another clique", clique[i], n);
                }
                CHECK(memcmp(targets, sources, nt * sizeof(*targets)) == 0,
                      "clique: sources = targets");
        } else {
                /* replica order k = 1..F-1 */
                for (size_t k = 1; k < f; k++) {
                        CHECK(targets[k - 1] == (n + k * t->jump) % t->count, "ring target %zu",
                              k);
                        CHECK(sources[k - 1] ==
                                      (n + t->count - (k * t->jump) % t->count) % t->count,
                              "ring source %zu", k);
                }
        }

        /* A short buffer gets the start of the same answer. */
        for (size_t cap = 0; cap < nc; cap++) {
                memset(part, 0xff, sizeof(part));
                CHECK(topology_clique(t, n, part, cap) == nc &&
                              memcmp(part, clique, cap * sizeof(*part)) == 0 &&
                              part[cap] == UINT32_MAX,
                      "clique with cap %zu", cap);
        }
        for (size_t cap = 0; cap < nt; cap++) {
                memset(part, 0xff, sizeof(part));
                CHECK(topology_targets(t, n, part, cap) == nt &&
                              memcmp(part, targets, cap * sizeof(*part)) == 0 &&
                              part[cap] == UINT32_MAX,
                      "targets with cap %zu", cap);
                memset(part, 0xff, sizeof(part));
                CHECK(topology_sources(t, n, part, cap) == ns &&
                              memcmp(part, sources, cap * sizeof(*part)) == 0 &&
                              part[cap] == UINT32_MAX,
                      "sources with cap %zu", cap);
        }
}

static void test_sweep(void) {
        unsigned valid[2] = { 0, 0 }, invalid[2] = { 0, 0 };

        for (uint32_t count = 1; count <= 36; count++)
                for (uint32_t jump = 1; jump <= count + 1; jump++)
                        for (uint32_t factor = 1; factor <= count + 1 && factor <= 12; factor++)
                                for (int p = 0; p < 2; p++) {
                                        struct topology t = topo(count, jump, factor,
                                                                 (enum placement)p);
                                        uint32_t out[MAXF];
                                        bool want;
                                        int r = topology_check(&t, NULL, 0);

                                        /* the header's rules, restated */
                                        if (factor > count)
                                                want = false;
                                        else if (factor == 1)
                                                want = true;
                                        else if (p == PLACEMENT_CLIQUE)
                                                want = count % (jump * factor) == 0;
                                        else
                                                want = (factor - 1) * jump < count;
                                        CHECK((r == 0) == want,
                                              "N=%u J=%u F=%u %s: check %d, want %s", count,
                                              jump, factor, p ? "ring" : "clique", r,
                                              want ? "valid" : "invalid");
                                        if (r < 0) {
                                                invalid[p]++;
                                                CHECK(topology_clique(&t, 0, out, MAXF) == 0,
                                                      "invalid topology answers");
                                                continue;
                                        }
                                        valid[p]++;
                                        for (uint32_t n = 0; n < count; n++)
                                                check_node(&t, n);
                                        /* a node outside the job has no clique */
                                        CHECK(topology_clique(&t, count, out, MAXF) == 0 &&
                                                      topology_targets(&t, count, out, MAXF) ==
                                                              0 &&
                                                      topology_sources(&t, count, out, MAXF) ==
                                                              0,
                                              "node %u of %u", count, count);
                                }
        /* the sweep saw both outcomes of both rules, plenty of each */
        CHECK(valid[0] > 200 && valid[1] > 1000 && invalid[0] > 1000 && invalid[1] > 500,
              "sweep: clique %u valid %u invalid, ring %u valid %u invalid", valid[0],
              invalid[0], valid[1], invalid[1]);
}

/* The clique rule partitions the nodes: every node is in exactly one
 * clique, so a node's shards are never replicated into two groups. */
static void test_partition(void) {
        static const uint32_t cases[][3] = { { 8, 2, 2 }, { 12, 1, 3 }, { 16, 4, 2 },
                                             { 24, 3, 4 }, { 36, 6, 3 }, { 30, 5, 2 } };

        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                struct topology t = topo(cases[c][0], cases[c][1], cases[c][2],
                                         PLACEMENT_CLIQUE);
                unsigned seen[64] = { 0 };
                uint32_t members[MAXF];

                check_valid(&t);
                for (uint32_t n = 0; n < t.count; n++) {
                        size_t nm = topology_clique(&t, n, members, MAXF);
                        if (members[0] != n)
                                continue; /* count each clique once, from its base */
                        for (size_t i = 0; i < nm; i++)
                                seen[members[i]]++;
                }
                for (uint32_t n = 0; n < t.count; n++)
                        CHECK(seen[n] == 1, "N=%u J=%u F=%u: node %u in %u cliques", t.count,
                              t.jump, t.factor, n, seen[n]);
        }
}

int main(void) {
        test_examples_clique();
        test_examples_ring();
        test_reject();
        test_sweep();
        test_partition();

        if (failures) {
                fprintf(stderr, "test-topology: %u check(s) failed\n", failures);
                return 1;
        }
        printf("test-topology: ok\n");
        return 0;
}
