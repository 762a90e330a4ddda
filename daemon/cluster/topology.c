/* SPDX-License-Identifier: MIT */
/*
 * topology — the placement rules of docs/replication.md as arithmetic.
 *
 * The queries check the topology themselves (cheaply, without building a
 * message) rather than trusting callers to have called topology_check():
 * a clique formula fed an N that is not a multiple of J*F names nodes that
 * do not exist, and a ring with (F-1)*J >= N names n itself, and either
 * would send a replica to the wrong place silently.  Answering 0 instead
 * makes such a bug visible as "no replicas" at the first test.
 *
 * Arithmetic is done in 64 bits: J*F and n + k*J overflow 32 bits for
 * values the struct can hold, though config bounds them far lower.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "cluster/topology.h"
#include "util/errbuf.h"

/* A message assembled piece by piece into the caller's buffer; once full,
 * further pieces are dropped (snprintf truncates the last one). */
struct msg {
        char *buf;
        size_t size, used;
};

static void msg_add(struct msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_add(struct msg *m, const char *fmt, ...) {
        va_list ap;
        int w;

        if (!m->buf || m->used >= m->size)
                return;
        va_start(ap, fmt);
        w = vsnprintf(m->buf + m->used, m->size - m->used, fmt, ap);
        va_end(ap);
        if (w > 0)
                m->used += (size_t)w;
}

/* Divisors of a 32-bit number: at most 1344 (for 3 066 842 880), so at
 * most 672 of them are <= its square root. */
#define SMALL_DIVISORS_MAX 672
/* How many replication_jump values a message lists before it says "any
 * divisor of M" instead. */
#define JUMPS_LISTED_MAX 12

/* "1, 2, 4 or 8" — the divisors of m, ascending; more than
 * JUMPS_LISTED_MAX of them become "any divisor of m (1, 2, 3, ...)". */
static void add_divisors(struct msg *m, uint32_t value) {
        uint32_t small[SMALL_DIVISORS_MAX], all[JUMPS_LISTED_MAX + 1];
        size_t n_small = 0, n_all = 0, total;
        bool square = false;

        for (uint64_t d = 1; d * d <= value; d++) {
                if (value % d)
                        continue;
                if (n_small < SMALL_DIVISORS_MAX)
                        small[n_small++] = (uint32_t)d;
                if (d * d == value)
                        square = true;
        }
        total = 2 * n_small - (square ? 1 : 0);
        /* ascending: the small ones, then value/small[] from the top */
        for (size_t i = 0; i < n_small && n_all <= JUMPS_LISTED_MAX; i++)
                all[n_all++] = small[i];
        for (size_t i = n_small - (square ? 1 : 0); i-- > 0 && n_all <= JUMPS_LISTED_MAX;)
                all[n_all++] = value / small[i];

        if (total > JUMPS_LISTED_MAX) {
                msg_add(m, "any divisor of %u (", value);
                for (size_t i = 0; i < JUMPS_LISTED_MAX; i++)
                        msg_add(m, "%u, ", all[i]);
                msg_add(m, "...)");
                return;
        }
        for (size_t i = 0; i < n_all; i++)
                msg_add(m, "%s%u", i == 0 ? "" : i + 1 == n_all ? " or " : ", ", all[i]);
}

static int clique_error(const struct topology *t, char *err, size_t errsize) {
        uint64_t block = (uint64_t)t->jump * t->factor;
        uint64_t below = t->count / block * block, above = below + block;
        uint64_t ring_span = (uint64_t)(t->factor - 1) * t->jump;
        struct msg m = { err, errsize, 0 };

        if (!err || !errsize)
                return -EINVAL;
        msg_add(&m, "placement = clique needs node_count to be a multiple of replication_jump "
                    "* replication_factor = %u * %u = %llu, and node_count = %u is not: ",
                t->jump, t->factor, (unsigned long long)block, t->count);
        if (below)
                msg_add(&m, "node_count = %llu or %llu", (unsigned long long)below,
                        (unsigned long long)above);
        else
                msg_add(&m, "node_count = %llu", (unsigned long long)above);
        msg_add(&m, " would work with these; ");
        if (t->count % t->factor)
                msg_add(&m, "for node_count = %u no replication_jump works with "
                            "replication_factor = %u (%u is not a multiple of %u); ",
                        t->count, t->factor, t->count, t->factor);
        else {
                msg_add(&m, "for node_count = %u and replication_factor = %u, "
                            "replication_jump = ", t->count, t->factor);
                add_divisors(&m, t->count / t->factor);
                msg_add(&m, " would work; ");
        }
        if (ring_span < t->count)
                msg_add(&m, "or use placement = ring, which accepts these values");
        else
                msg_add(&m, "placement = ring would not accept these values either (it needs "
                            "node_count > (replication_factor - 1) * replication_jump = %llu)",
                        (unsigned long long)ring_span);
        return -EINVAL;
}

static int ring_error(const struct topology *t, char *err, size_t errsize) {
        uint64_t span = (uint64_t)(t->factor - 1) * t->jump;
        /* factor <= count and factor >= 2 here, so both are >= 1 */
        uint32_t jump_max = (t->count - 1) / (t->factor - 1);
        uint32_t factor_max = (t->count - 1) / t->jump + 1;
        struct msg m = { err, errsize, 0 };

        if (!err || !errsize)
                return -EINVAL;
        msg_add(&m, "placement = ring needs node_count > (replication_factor - 1) * "
                    "replication_jump = %u * %u = %llu (or a node's replicas would come "
                    "back to the node itself or land twice on one node), but node_count = %u: "
                    "node_count = %llu or more, replication_jump at most %u",
                t->factor - 1, t->jump, (unsigned long long)span, t->count,
                (unsigned long long)span + 1, jump_max);
        if (factor_max > 1)
                msg_add(&m, ", or replication_factor at most %u would work", factor_max);
        else
                msg_add(&m, ", or replication_factor = 1 (no replication) would work");
        return -EINVAL;
}

int topology_check(const struct topology *t, char *err, size_t errsize) {
        if (t->count == 0)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "node_count = 0: a job has at least one node");
        if (t->index >= t->count)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "node_index = %u must be less than node_count = %u (nodes "
                                   "are numbered 0..%u)", t->index, t->count, t->count - 1);
        if (t->jump == 0)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "replication_jump = 0 is not a jump: use 1 (clique members "
                                   "are neighbours) or more");
        if (t->factor == 0)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "replication_factor = 0 would keep no copy at all: use 1 "
                                   "(no replication) or more");
        if (t->factor > t->count)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "replication_factor = %u is larger than node_count = %u: "
                                   "%u copies need %u distinct nodes; use replication_factor "
                                   "1..%u", t->factor, t->count, t->factor, t->factor,
                                   t->count);
        if (t->placement != PLACEMENT_CLIQUE && t->placement != PLACEMENT_RING)
                return errbuf_fail(-EINVAL, err, errsize,
                                   "placement = %d is neither clique (0) nor ring (1)",
                                   (int)t->placement);
        if (t->factor == 1)
                return 0;
        if (t->placement == PLACEMENT_CLIQUE && t->count % ((uint64_t)t->jump * t->factor))
                return clique_error(t, err, errsize);
        if (t->placement == PLACEMENT_RING && (uint64_t)(t->factor - 1) * t->jump >= t->count)
                return ring_error(t, err, errsize);
        return 0;
}

/* Whether n can be asked about: a valid topology and a node of it. */
static bool query_ok(const struct topology *t, uint32_t n) {
        return topology_check(t, NULL, 0) == 0 && n < t->count;
}

static void put(uint32_t *out, size_t cap, size_t i, uint64_t node) {
        if (i < cap)
                out[i] = (uint32_t)node;
}

size_t topology_clique(const struct topology *t, uint32_t n, uint32_t *out, size_t cap) {
        uint64_t block, base, step = t->jump;
        size_t i = 0;

        if (!query_ok(t, n))
                return 0;
        if (t->placement == PLACEMENT_CLIQUE) {
                block = step * t->factor;
                base = n % step + n / block * block;
                for (uint64_t k = 0; k < t->factor; k++)
                        put(out, cap, i++, base + k * step);
                return i;
        }
        /* Ring: n + k*J for k < F spans less than one lap, so it wraps at
         * most once; the wrapped members are the small ones, in k order,
         * and the unwrapped ones (n and up) follow, also in k order. */
        for (uint64_t k = 0; k < t->factor; k++)
                if (n + k * step >= t->count)
                        put(out, cap, i++, n + k * step - t->count);
        for (uint64_t k = 0; k < t->factor; k++)
                if (n + k * step < t->count)
                        put(out, cap, i++, n + k * step);
        return i;
}

/* Clique targets and sources: the clique without n. */
static size_t clique_others(const struct topology *t, uint32_t n, uint32_t *out, size_t cap) {
        uint64_t step = t->jump, block = step * t->factor;
        uint64_t base = n % step + n / block * block;
        size_t i = 0;

        for (uint64_t k = 0; k < t->factor; k++)
                if (base + k * step != n)
                        put(out, cap, i++, base + k * step);
        return i;
}

size_t topology_targets(const struct topology *t, uint32_t n, uint32_t *out, size_t cap) {
        size_t i = 0;

        if (!query_ok(t, n))
                return 0;
        if (t->placement == PLACEMENT_CLIQUE)
                return clique_others(t, n, out, cap);
        for (uint64_t k = 1; k < t->factor; k++)
                put(out, cap, i++, (n + k * t->jump) % t->count);
        return i;
}

size_t topology_sources(const struct topology *t, uint32_t n, uint32_t *out, size_t cap) {
        size_t i = 0;

        if (!query_ok(t, n))
                return 0;
        if (t->placement == PLACEMENT_CLIQUE)
                return clique_others(t, n, out, cap);
        /* (k*J) < N here, so n + N - k*J neither underflows nor needs a
         * second reduction before the last one. */
        for (uint64_t k = 1; k < t->factor; k++)
                put(out, cap, i++, (n + t->count - k * t->jump) % t->count);
        return i;
}
