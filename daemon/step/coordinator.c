/* SPDX-License-Identifier: MIT */
/*
 * coordinator — see coordinator.h; the protocol is docs/commit.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "step/coordinator.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"

#define NO_NODE UINT32_MAX

/* What the coordinator knows of one node for one step. */
enum holder {
        HOLDS_NONE = 0,  /* reported no rank of it */
        HOLDS_RANKS = 1, /* reported ranks, not yet the decision */
        HOLDS_RECORDED = 2, /* reported the decision recorded */
};

struct cstep {
        struct list link;       /* coordinator.steps, oldest first */
        char job[CKPT_NAME_MAX + 1];
        uint32_t uid;
        uint64_t step;
        uint32_t world_size;
        uint32_t world_node;    /* the node whose report fixed world_size */
        uint32_t *rank_node;    /* world_size entries: who holds it, NO_NODE */
        uint32_t missing;       /* ranks held nowhere */
        uint8_t *holder;        /* node_count entries: enum holder */
        uint8_t *asked;         /* node_count entries: a trainer there asked */
        uint32_t unrecorded;    /* nodes at HOLDS_RANKS (keeps advance() O(1)) */
        /* what is missing, as PENDING says it: rebuilt only after a
         * change, so the nodes' repeated asks cost no walk over the ranks */
        char missing_text[PEER_ERRMSG_MAX + 1];
        bool missing_text_ok;
        /* the last node whose report was refused for its world_size, and
         * that size (NO_NODE: none): the others' commits say why they wait */
        uint32_t refused_node, refused_world;
        bool commit_asked;
        bool decided;           /* made here, or learned from a COMMITTED report */
        bool everywhere;        /* every holder recorded it; told */
        int64_t committed_at;
};

struct coordinator {
        uint32_t node_count;
        struct coordinator_ops ops;
        void *userdata;
        struct list steps;
        uint32_t nsteps;
        uint64_t nranks;        /* world sizes of the steps remembered, summed */
};

static void cstep_free(struct coordinator *co, struct cstep *s) {
        co->nsteps--;
        co->nranks -= s->world_size;
        list_unlink(&s->link);
        free(s->rank_node);
        free(s->holder);
        free(s->asked);
        free(s);
}

int coordinator_new(struct coordinator **out, uint32_t node_count,
                    const struct coordinator_ops *ops, void *userdata) {
        struct coordinator *co = calloc(1, sizeof(*co));
        if (!co)
                return -ENOMEM;
        co->node_count = node_count;
        co->ops = *ops;
        co->userdata = userdata;
        list_init(&co->steps);
        *out = co;
        return 0;
}

struct coordinator *coordinator_free(struct coordinator *co) {
        if (!co)
                return NULL;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &co->steps)
                cstep_free(co, list_entry(pos, struct cstep, link));
        free(co);
        return NULL;
}

void coordinator_counts(const struct coordinator *co, uint32_t *steps, uint32_t *pending) {
        const struct list *pos;
        *steps = co->nsteps;
        *pending = 0;
        for (pos = co->steps.next; pos != &co->steps; pos = pos->next)
                *pending += !list_entry(pos, struct cstep, link)->decided;
}

static struct cstep *cstep_find(struct coordinator *co, const struct ckpt_name *job, uint64_t step) {
        struct list *pos;
        for (pos = co->steps.next; pos != &co->steps; pos = pos->next) {
                struct cstep *s = list_entry(pos, struct cstep, link);
                if (s->step == step && strlen(s->job) == job->len &&
                    memcmp(s->job, job->str, job->len) == 0)
                        return s;
        }
        return NULL;
}

/* Room for one more step: forget the oldest one committed everywhere.
 * Steps still being decided are never forgotten; with all of them
 * undecided, the new one is refused (the reporter retries at its next
 * report). */
static bool make_room(struct coordinator *co, uint32_t world_size) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &co->steps) {
                if (co->nsteps < COORDINATOR_STEPS_MAX &&
                    co->nranks + world_size <= COORDINATOR_RANKS_MAX)
                        return true;
                struct cstep *s = list_entry(pos, struct cstep, link);
                if (s->everywhere)
                        cstep_free(co, s);
        }
        return co->nsteps < COORDINATOR_STEPS_MAX &&
               co->nranks + world_size <= COORDINATOR_RANKS_MAX;
}

static struct cstep *cstep_new(struct coordinator *co, const struct peer_step_report *r,
                               uint32_t node) {
        if (!make_room(co, r->world_size))
                return NULL;
        _cleanup_free_ struct cstep *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->rank_node = malloc((size_t)r->world_size * sizeof(*s->rank_node));
        s->holder = calloc(co->node_count, 1);
        s->asked = calloc(co->node_count, 1);
        if (!s->rank_node || !s->holder || !s->asked) {
                free(s->rank_node);
                free(s->holder);
                free(s->asked);
                return NULL;
        }
        for (uint32_t i = 0; i < r->world_size; i++)
                s->rank_node[i] = NO_NODE;
        memcpy(s->job, r->job.str, r->job.len);
        s->job[r->job.len] = 0;
        s->uid = r->uid;
        s->step = r->step;
        s->world_size = r->world_size;
        s->world_node = node;
        s->missing = r->world_size;
        s->refused_node = NO_NODE;
        list_add_tail(&co->steps, &s->link);
        co->nsteps++;
        co->nranks += s->world_size;
        struct cstep *ret = s;
        s = NULL;
        return ret;
}

static void set_holder(struct cstep *s, uint32_t node, uint8_t h) {
        if ((s->holder[node] == HOLDS_NONE) != (h == HOLDS_NONE))
                s->missing_text_ok = false; /* "nodes with none saved" changed */
        s->unrecorded -= s->holder[node] == HOLDS_RANKS;
        s->holder[node] = h;
        s->unrecorded += h == HOLDS_RANKS;
}

static void state_init(struct peer_step_state *m, const struct cstep *s, uint8_t state) {
        memset(m, 0, sizeof(*m));
        m->job.len = (uint16_t)strlen(s->job);
        memcpy(m->job.str, s->job, m->job.len);
        m->step = s->step;
        m->world_size = s->world_size;
        m->state = state;
        if (state == PEER_STEP_DECIDED || state == PEER_STEP_EVERYWHERE)
                m->committed_at = s->committed_at;
}

static void send_state(struct coordinator *co, uint32_t node, const struct cstep *s,
                       uint8_t state) {
        struct peer_step_state m;
        state_init(&m, s, state);
        co->ops.send(co->userdata, node, &m);
}

static void refuse(struct coordinator *co, uint32_t node, const struct peer_step_report *r,
                   int error, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void refuse(struct coordinator *co, uint32_t node, const struct peer_step_report *r,
                   int error, const char *fmt, ...) {
        struct peer_step_state m = { 0 };
        va_list ap;

        m.job = r->job;
        m.step = r->step;
        m.state = PEER_STEP_REFUSED;
        m.error = error;
        va_start(ap, fmt);
        vsnprintf(m.message, sizeof(m.message), fmt, ap);
        va_end(ap);
        log_warn("coordinator: job %.*s step %" PRIu64 ": refused node %u's report: %s",
                 (int)r->job.len, r->job.str, r->step, node, m.message);
        co->ops.send(co->userdata, node, &m);
}

/* "ranks 4-5, 9 of 12 are not saved (nodes with none saved: 2, 4)" */
static void describe_missing(const struct coordinator *co, const struct cstep *s, char *buf,
                             size_t size) {
        size_t at = 0;
        int n;
        bool first = true, cut = false;

#define PUT(...)                                                                          \
        do {                                                                              \
                n = snprintf(buf + at, size - at, __VA_ARGS__);                           \
                if (n < 0 || (size_t)n >= size - at - 48) {                               \
                        cut = true;                                                       \
                        break;                                                            \
                }                                                                         \
                at += (size_t)n;                                                          \
        } while (0)

        buf[0] = 0;
        PUT("rank%s ", s->missing == 1 ? "" : "s");
        for (uint32_t i = 0; i < s->world_size && !cut; i++) {
                if (s->rank_node[i] != NO_NODE)
                        continue;
                uint32_t j = i;
                while (j + 1 < s->world_size && s->rank_node[j + 1] == NO_NODE)
                        j++;
                if (j == i)
                        PUT("%s%u", first ? "" : ", ", i);
                else
                        PUT("%s%u-%u", first ? "" : ", ", i, j);
                first = false;
                i = j;
        }
        if (cut) {
                at += (size_t)snprintf(buf + at, size - at, ", ...");
                cut = false;
        }
        PUT(" of %u %s not saved", s->world_size, s->missing == 1 ? "is" : "are");
        first = true;
        for (uint32_t nd = 0; nd < co->node_count && !cut; nd++) {
                if (s->holder[nd] != HOLDS_NONE)
                        continue;
                PUT("%s%u", first ? " (nodes with none saved: " : ", ", nd);
                first = false;
        }
        if (cut)
                at += (size_t)snprintf(buf + at, size - at, ", ...");
        if (!first && at + 2 < size)
                at += (size_t)snprintf(buf + at, size - at, ")");
        if (s->refused_node != NO_NODE && at + 100 < size)
                snprintf(buf + at, size - at, "; node %u saved ranks of it with world_size %u, "
                         "refused", s->refused_node, s->refused_world);
#undef PUT
}

/* asked: a commit ask, which wants to know what is missing (its timeout
 * says it); a BEGIN only wants the world_size agreed, and at 2,048 nodes
 * every node's BEGIN comes at once: no walk over the ranks for it. */
static void send_pending(struct coordinator *co, uint32_t node, struct cstep *s,
                         bool asked) {
        struct peer_step_state m;
        state_init(&m, s, PEER_STEP_PENDING);
        if (!asked) {
                snprintf(m.message, sizeof(m.message), "world_size %u agreed", s->world_size);
        } else if (s->missing) {
                if (!s->missing_text_ok) {
                        describe_missing(co, s, s->missing_text, sizeof(s->missing_text));
                        s->missing_text_ok = true;
                }
                memcpy(m.message, s->missing_text, sizeof(m.message));
        }
        else
                snprintf(m.message, sizeof(m.message), "every rank is saved; no commit asked for");
        co->ops.send(co->userdata, node, &m);
}

/* DECIDED to an asking node, saying whose record is still missing:
 * "decided; not yet recorded by nodes 3, 5" (a node cut off, or down). */
static void send_decided_waiting(struct coordinator *co, uint32_t node, const struct cstep *s) {
        struct peer_step_state m;
        size_t at = 0, size = sizeof(m.message);
        bool first = true;
        int n;

        state_init(&m, s, PEER_STEP_DECIDED);
        n = snprintf(m.message, size, "decided; not yet recorded by node%s",
                     s->unrecorded == 1 ? "" : "s");
        at = n > 0 ? (size_t)n : 0;
        for (uint32_t nd = 0; nd < co->node_count && at + 32 < size; nd++) {
                if (s->holder[nd] != HOLDS_RANKS)
                        continue;
                n = snprintf(m.message + at, size - at, "%s %u", first ? "" : ",", nd);
                at += n > 0 ? (size_t)n : 0;
                first = false;
        }
        if (first) /* none: every known holder recorded it, some ranks' holders are unknown */
                snprintf(m.message, size, "decided; %u of %u ranks have not been reported by "
                         "their nodes since node 0 started", s->missing, s->world_size);
        co->ops.send(co->userdata, node, &m);
}

/* After any change: decide, tell the holders that have not recorded the
 * decision, and tell everyone once every holder has. */
static void advance(struct coordinator *co, struct cstep *s, int64_t now) {
        if (!s->decided && s->commit_asked && s->missing == 0) {
                s->decided = true;
                s->committed_at = now;
                log_info("coordinator: job %s step %" PRIu64 ": committed (%u ranks)", s->job,
                         s->step, s->world_size);
                for (uint32_t nd = 0; nd < co->node_count; nd++)
                        if (s->holder[nd] == HOLDS_RANKS)
                                send_state(co, nd, s, PEER_STEP_DECIDED);
        }
        /* every rank's holder known and every holder recorded it (a
         * decision learned after a restart waits for the holders of the
         * ranks not reported yet) */
        if (!s->decided || s->everywhere || s->unrecorded || s->missing)
                return;
        s->everywhere = true;
        for (uint32_t nd = 0; nd < co->node_count; nd++)
                if (s->holder[nd] != HOLDS_NONE || s->asked[nd])
                        send_state(co, nd, s, PEER_STEP_EVERYWHERE);
}

void coordinator_report(struct coordinator *co, uint32_t node,
                        const struct peer_step_report *r, int64_t now) {
        if (node >= co->node_count)
                return;
        struct cstep *s = cstep_find(co, &r->job, r->step);
        if (s && s->uid != r->uid) {
                refuse(co, node, r, -EACCES,
                       "job '%s' belongs to uid %u on the other nodes, not %u", s->job, s->uid,
                       r->uid);
                return;
        }
        if (s && s->world_size != r->world_size) {
                s->refused_node = node;
                s->refused_world = r->world_size;
                s->missing_text_ok = false;
                refuse(co, node, r, -EINVAL,
                       "step %" PRIu64 " of job '%s' has world_size %u in the cluster (first "
                       "saved on node %u), not %u",
                       s->step, s->job, s->world_size, s->world_node, r->world_size);
                return;
        }
        if (!s && !(s = cstep_new(co, r, node))) {
                refuse(co, node, r, -ENOMEM,
                       "the coordinator (node 0) holds %u undecided steps of %" PRIu64
                       " ranks in all and has no room for another",
                       co->nsteps, co->nranks);
                return;
        }
        bool was_decided = s->decided;
        for (uint32_t i = 0; i < r->nranks; i++) {
                uint32_t rk = r->ranks[i];
                if (s->rank_node[rk] == NO_NODE) {
                        s->missing--;
                        s->missing_text_ok = false;
                }
                s->rank_node[rk] = node;
        }
        if (r->nranks && s->holder[node] == HOLDS_NONE)
                set_holder(s, node, HOLDS_RANKS);
        if (r->flags & PEER_REPORT_COMMITTED) {
                set_holder(s, node, HOLDS_RECORDED);
                if (!s->decided) {
                        /* a decision made before this coordinator started
                         * (or before it forgot the step): the recorder's
                         * word is the decision */
                        s->decided = true;
                        s->committed_at = r->committed_at;
                        log_info("coordinator: job %s step %" PRIu64 ": committed, as node %u "
                                 "recorded",
                                 s->job, s->step, node);
                        for (uint32_t nd = 0; nd < co->node_count; nd++)
                                if (s->holder[nd] == HOLDS_RANKS)
                                        send_state(co, nd, s, PEER_STEP_DECIDED);
                }
        }
        if (r->flags & PEER_REPORT_COMMIT) {
                s->commit_asked = true;
                s->asked[node] = 1;
        }
        /* a holder that missed the decision (it was down, or the link) */
        if (was_decided && s->holder[node] == HOLDS_RANKS)
                send_state(co, node, s, PEER_STEP_DECIDED);
        bool everywhere = s->everywhere;
        advance(co, s, now);
        if (everywhere && (s->asked[node] || (r->flags & PEER_REPORT_COMMIT)))
                /* told before, and this node asks (again, or its trainers
                 * wait for the word after recording the decision late) */
                send_state(co, node, s, PEER_STEP_EVERYWHERE);
        else if (r->flags & (PEER_REPORT_BEGIN | PEER_REPORT_COMMIT)) {
                if (!s->decided)
                        send_pending(co, node, s, r->flags & PEER_REPORT_COMMIT);
                else if (was_decided && !s->everywhere && (r->flags & PEER_REPORT_COMMIT))
                        /* decided, not yet recorded everywhere: say by whom
                         * (a holder that has not recorded it records it now) */
                        send_decided_waiting(co, node, s);
        }
}
