/* SPDX-License-Identifier: MIT */
/*
 * Unit test of daemon/step/coordinator: the cluster-wide commit decision,
 * driven with STEP_REPORTs as the nodes would send them; every STEP_STATE
 * it sends is recorded and checked (to whom, which state, what it says).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "step/coordinator.h"

#define SENT_MAX 256

static struct sent {
        uint32_t node;
        struct peer_step_state m;
} sent[SENT_MAX];
static size_t nsent;

static void record_send(void *userdata, uint32_t node, const struct peer_step_state *m) {
        (void)userdata;
        if (nsent < SENT_MAX)
                sent[nsent++] = (struct sent){ .node = node, .m = *m };
}

static const struct coordinator_ops ops = { .send = record_send };

static struct peer_step_report rep;

static void report(struct coordinator *co, uint32_t node, const char *job, uint64_t step,
                   uint32_t world, uint32_t uid, uint8_t flags, uint32_t first, uint32_t n) {
        memset(&rep, 0, sizeof(rep));
        rep.job.len = (uint16_t)strlen(job);
        memcpy(rep.job.str, job, rep.job.len);
        rep.uid = uid;
        rep.step = step;
        rep.world_size = world;
        rep.flags = flags;
        rep.committed_at = flags & PEER_REPORT_COMMITTED ? 111 : 0;
        rep.nranks = n;
        for (uint32_t i = 0; i < n; i++)
                rep.ranks[i] = first + i;
        coordinator_report(co, node, &rep, 1000);
}

/* How many states went to node since mark (with that state); the last one in *last. */
static unsigned count(size_t mark, uint32_t node, uint8_t state, const struct peer_step_state **last) {
        unsigned k = 0;
        for (size_t i = mark; i < nsent; i++)
                if (sent[i].node == node && sent[i].m.state == state) {
                        k++;
                        if (last)
                                *last = &sent[i].m;
                }
        return k;
}

/* 4 nodes, 2 ranks each: the commit asked on node 0 before the others saved. */
static void test_decide(void) {
        struct coordinator *co;
        const struct peer_step_state *m = NULL;

        CHECK(coordinator_new(&co, 4, &ops, NULL) == 0, "new");
        nsent = 0;
        report(co, 0, "j", 7, 8, 1000, PEER_REPORT_COMMIT, 0, 2);
        CHECK(count(0, 0, PEER_STEP_PENDING, &m) == 1, "a commit ask gets PENDING");
        CHECK(m && strcmp(m->message, "ranks 2-7 of 8 are not saved (nodes with none saved: "
                                      "1, 2, 3)") == 0,
              "what is missing: '%s'", m ? m->message : "");
        report(co, 1, "j", 7, 8, 1000, 0, 2, 2);
        report(co, 3, "j", 7, 8, 1000, 0, 6, 1);
        size_t mark = nsent;
        report(co, 0, "j", 7, 8, 1000, PEER_REPORT_COMMIT, 0, 2);
        CHECK(count(mark, 0, PEER_STEP_PENDING, &m) == 1 &&
                      strcmp(m->message, "ranks 4-5, 7 of 8 are not saved (nodes with none "
                                         "saved: 2)") == 0,
              "still missing: '%s'", m ? m->message : "");
        CHECK(count(0, 0, PEER_STEP_DECIDED, NULL) == 0, "not decided with ranks missing");
        report(co, 2, "j", 7, 8, 1000, 0, 4, 2);
        mark = nsent;
        report(co, 3, "j", 7, 8, 1000, 0, 6, 2);
        for (uint32_t n = 0; n < 4; n++)
                CHECK(count(mark, n, PEER_STEP_DECIDED, &m) == 1 && m->committed_at == 1000 &&
                              m->world_size == 8,
                      "node %u told DECIDED once the last rank landed", n);
        uint32_t steps, pending;
        coordinator_counts(co, &steps, &pending);
        CHECK(steps == 1 && pending == 0, "counts %u %u", steps, pending);
        /* acknowledgements: EVERYWHERE only after the last holder */
        mark = nsent;
        for (uint32_t n = 0; n < 3; n++)
                report(co, n, "j", 7, 8, 1000, PEER_REPORT_COMMITTED, n * 2, 2);
        CHECK(nsent == mark, "nothing until every holder recorded it (%zu sent)", nsent - mark);
        /* node 1 asks again meanwhile: told who has not recorded it */
        report(co, 1, "j", 7, 8, 1000, PEER_REPORT_COMMIT | PEER_REPORT_COMMITTED, 2, 2);
        CHECK(count(mark, 1, PEER_STEP_DECIDED, &m) == 1 &&
                      strcmp(m->message, "decided; not yet recorded by node 3") == 0,
              "an ask while node 3 has not recorded it: '%s'", m ? m->message : "");
        mark = nsent;
        report(co, 3, "j", 7, 8, 1000, PEER_REPORT_COMMITTED, 6, 2);
        for (uint32_t n = 0; n < 4; n++)
                CHECK(count(mark, n, PEER_STEP_EVERYWHERE, NULL) == 1, "node %u EVERYWHERE", n);
        /* asking again after that: answered at once */
        mark = nsent;
        report(co, 2, "j", 7, 8, 1000, PEER_REPORT_COMMIT | PEER_REPORT_COMMITTED, 4, 2);
        CHECK(count(mark, 2, PEER_STEP_EVERYWHERE, NULL) == 1 && nsent == mark + 1,
              "a late ask is answered EVERYWHERE");
        coordinator_free(co);
}

/* No commit asked: all ranks present decide nothing. */
static void test_no_ask(void) {
        struct coordinator *co;
        CHECK(coordinator_new(&co, 2, &ops, NULL) == 0, "new");
        nsent = 0;
        report(co, 0, "j", 1, 2, 5, 0, 0, 1);
        report(co, 1, "j", 1, 2, 5, 0, 1, 1);
        CHECK(nsent == 0, "no decision without a commit ask (%zu sent)", nsent);
        report(co, 1, "j", 1, 2, 5, PEER_REPORT_COMMIT, 1, 1);
        CHECK(count(0, 0, PEER_STEP_DECIDED, NULL) == 1 && count(0, 1, PEER_STEP_DECIDED, NULL) == 1,
              "the ask decides it");
        coordinator_free(co);
}

/* world_size and owner disagreements are refused, naming both values. */
static void test_refusals(void) {
        struct coordinator *co;
        const struct peer_step_state *m = NULL;

        CHECK(coordinator_new(&co, 3, &ops, NULL) == 0, "new");
        nsent = 0;
        report(co, 1, "llama", 9, 4, 1000, PEER_REPORT_BEGIN, 0, 0);
        CHECK(count(0, 1, PEER_STEP_PENDING, NULL) == 1, "BEGIN is answered");
        report(co, 2, "llama", 9, 8, 1000, PEER_REPORT_BEGIN, 0, 0);
        CHECK(count(0, 2, PEER_STEP_REFUSED, &m) == 1 && m->error == -22 &&
                      strcmp(m->message, "step 9 of job 'llama' has world_size 4 in the cluster "
                                         "(first saved on node 1), not 8") == 0,
              "world_size refused: '%s'", m ? m->message : "");
        size_t mark = nsent;
        report(co, 0, "llama", 9, 4, 2000, 0, 0, 1);
        CHECK(count(mark, 0, PEER_STEP_REFUSED, &m) == 1 && m->error == -13,
              "another owner refused");
        /* the refused reports changed nothing: ranks 0..3 still missing */
        mark = nsent;
        report(co, 1, "llama", 9, 4, 1000, PEER_REPORT_COMMIT, 0, 2);
        CHECK(count(mark, 1, PEER_STEP_PENDING, &m) == 1 &&
                      strcmp(m->message, "ranks 2-3 of 4 are not saved (nodes with none saved: "
                                         "0, 2); node 2 saved ranks of it with world_size 8, "
                                         "refused") == 0,
              "after refusals: '%s'", m ? m->message : "");
        coordinator_free(co);
}

/* A restarted coordinator learns a decision from a node's COMMITTED report
 * and tells the holders that missed it; it never decides it again. */
static void test_relearn(void) {
        struct coordinator *co;
        const struct peer_step_state *m = NULL;

        CHECK(coordinator_new(&co, 3, &ops, NULL) == 0, "new");
        nsent = 0;
        report(co, 2, "j", 4, 3, 0, 0, 2, 1); /* node 2 missed the decision */
        CHECK(nsent == 0, "nothing to say yet");
        report(co, 0, "j", 4, 3, 0, PEER_REPORT_COMMITTED, 0, 1);
        CHECK(count(0, 2, PEER_STEP_DECIDED, &m) == 1 && m->committed_at == 111,
              "node 2 gets the recorded decision with its time");
        CHECK(count(0, 0, PEER_STEP_DECIDED, NULL) == 0, "the recorder is not told again");
        size_t mark = nsent;
        report(co, 1, "j", 4, 3, 0, 0, 1, 1); /* node 1 reconnects later */
        CHECK(count(mark, 1, PEER_STEP_DECIDED, NULL) == 1, "late holder gets it too");
        mark = nsent;
        report(co, 1, "j", 4, 3, 0, PEER_REPORT_COMMITTED, 1, 1);
        report(co, 2, "j", 4, 3, 0, PEER_REPORT_COMMITTED, 2, 1);
        CHECK(count(mark, 0, PEER_STEP_EVERYWHERE, NULL) == 1 &&
                      count(mark, 1, PEER_STEP_EVERYWHERE, NULL) == 1 &&
                      count(mark, 2, PEER_STEP_EVERYWHERE, NULL) == 1,
              "EVERYWHERE once all three recorded");
        coordinator_free(co);
}

/* The table is bounded: steps committed everywhere are forgotten first;
 * with every slot undecided, a new step is refused (-ENOMEM). */
static void test_bound(void) {
        struct coordinator *co;
        const struct peer_step_state *m = NULL;

        CHECK(coordinator_new(&co, 1, &ops, NULL) == 0, "new");
        nsent = 0;
        for (uint64_t st = 0; st < COORDINATOR_STEPS_MAX; st++)
                report(co, 0, "j", st, 1, 0, 0, 0, 0); /* nothing to say: still remembered */
        uint32_t steps, pending;
        coordinator_counts(co, &steps, &pending);
        CHECK(steps == COORDINATOR_STEPS_MAX && pending == COORDINATOR_STEPS_MAX, "full %u %u",
              steps, pending);
        report(co, 0, "j", 999999, 1, 0, PEER_REPORT_COMMIT, 0, 1);
        CHECK(count(0, 0, PEER_STEP_REFUSED, &m) == 1 && m->error == -12, "full of undecided");
        /* step 0 decided and recorded: its slot is reused */
        report(co, 0, "j", 0, 1, 0, PEER_REPORT_COMMIT, 0, 1);
        report(co, 0, "j", 0, 1, 0, PEER_REPORT_COMMITTED, 0, 1);
        size_t mark = nsent;
        report(co, 0, "j", 999999, 1, 0, PEER_REPORT_COMMIT, 0, 1);
        CHECK(count(mark, 0, PEER_STEP_DECIDED, NULL) == 1, "room made by forgetting step 0");
        coordinator_free(co);
}

/* The ranks remembered are bounded too: 16 steps of 2^20 ranks fill it. */
static void test_rank_bound(void) {
        struct coordinator *co;
        const struct peer_step_state *m = NULL;

        CHECK(coordinator_new(&co, 2, &ops, NULL) == 0, "new");
        nsent = 0;
        for (uint64_t st = 0; st < COORDINATOR_RANKS_MAX / CKPT_WORLD_MAX; st++)
                report(co, 0, "big", st, CKPT_WORLD_MAX, 0, 0, 0, 1);
        CHECK(nsent == 0, "16 huge steps fit (%zu sent)", nsent);
        report(co, 1, "big", 99, CKPT_WORLD_MAX, 0, PEER_REPORT_BEGIN, 0, 0);
        CHECK(count(0, 1, PEER_STEP_REFUSED, &m) == 1 && m->error == -12 &&
                      strstr(m->message, "16777216 ranks in all"),
              "a 17th is refused: '%s'", m ? m->message : "");
        report(co, 1, "small", 1, 2, 0, PEER_REPORT_BEGIN, 0, 0);
        CHECK(count(0, 1, PEER_STEP_PENDING, NULL) == 0, "no room for 2 more ranks either");
        coordinator_free(co);
}

int main(void) {
        test_decide();
        test_no_ask();
        test_refusals();
        test_relearn();
        test_bound();
        test_rank_bound();
        return check_exit_code();
}
