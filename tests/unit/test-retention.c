/* SPDX-License-Identifier: MIT */
/*
 * test-retention (meson: retention-policy) — the one retention policy, in the cases each tier relies
 * on: the newest `keep` committed steps stay and older committed ones go;
 * pinned steps stay and still count as kept; fewer committed than keep
 * drops nothing committed; keep 0 keeps everything; uncommitted steps are
 * never counted, and are dropped only as their tier's mode says (local:
 * below the newest committed; replica areas: never; store: below the
 * keep-th committed, where a step not HEADed is dropped too but one above
 * it is kept); a damaged committed step (a rank of it missing here) is
 * kept but never counted, so it pushes no intact step out, and goes once
 * `keep` intact steps are newer; and a list out of order is refused with
 * nothing dropped.
 * keep_every (steps and duration): the first committed intact step of
 * each older window stays, the others go; the window of the newest
 * `keep` is not reopened; a damaged or uncommitted step opens no window;
 * a pin keeps a step besides the window's first; a commit time set back
 * opens no window; the HEAD walk never stops early with a window; the
 * value parser and the reasons a user reads.
 * Last, retention_plan_from_catalog on a real catalog (sqlite in a
 * temporary directory): the rows, their states and pins it reads are the
 * ones a tier's catalog holds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "retention/retention.h"

#include "check.h"

#define C RETENTION_COMMITTED
#define U RETENTION_UNCOMMITTED
#define X RETENTION_UNKNOWN

/* Decide steps (newest first) and write one letter per verdict into out:
 * k (newest kept), u (uncommitted kept), p (pinned), D (damaged, kept),
 * d (old, dropped),
 * a (abandoned, dropped).  Returns retention_decide's value. */
static int decide(uint32_t keep, enum retention_uncommitted mode,
                  const struct retention_step *steps, size_t n, char *out) {
        enum retention_verdict v[32];
        const struct retention_policy p = { .keep = keep, .uncommitted = mode };
        memset(v, 0xff, sizeof(v));
        int r = retention_decide(&p, steps, n, v);
        for (size_t i = 0; i < n; i++) {
                switch (v[i]) {
                case RETENTION_KEEP_NEWEST: out[i] = 'k'; break;
                case RETENTION_KEEP_UNCOMMITTED: out[i] = 'u'; break;
                case RETENTION_KEEP_PINNED: out[i] = 'p'; break;
                case RETENTION_KEEP_DAMAGED: out[i] = 'D'; break;
                case RETENTION_DROP_OLD: out[i] = 'd'; break;
                case RETENTION_DROP_ABANDONED: out[i] = 'a'; break;
                default: out[i] = '?'; break;
                }
        }
        out[n] = 0;
        return r;
}

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define EXPECT(keep, mode, steps, want, drops)                                           \
        do {                                                                             \
                char got[40];                                                            \
                int r_ = decide(keep, mode, steps, N(steps), got);                       \
                CHECK(r_ == (drops) && !strcmp(got, want),                               \
                      "keep %u mode %d: got %s (%d drops), want %s (%d)", (unsigned)(keep), \
                      (int)(mode), got, r_, want, (int)(drops));                         \
        } while (0)

/* Decide with keep_every and return the letters (e: kept for its window). */
static int decide_every(uint32_t keep, uint64_t every_steps, uint64_t every_seconds,
                        const struct retention_step *steps, size_t n, char *out) {
        enum retention_verdict v[32];
        const struct retention_policy p = { .keep = keep, .every_steps = every_steps,
                                            .every_seconds = every_seconds,
                                            .uncommitted = RETENTION_UNCOMMITTED_BELOW_NEWEST };
        int r = retention_decide(&p, steps, n, v);
        for (size_t i = 0; i < n && r >= 0; i++)
                out[i] = v[i] == RETENTION_KEEP_EVERY    ? 'e'
                         : v[i] == RETENTION_KEEP_NEWEST ? 'k'
                         : v[i] == RETENTION_KEEP_PINNED ? 'p'
                         : v[i] == RETENTION_KEEP_DAMAGED ? 'D'
                         : v[i] == RETENTION_KEEP_UNCOMMITTED ? 'u'
                         : v[i] == RETENTION_DROP_OLD ? 'd'
                         : v[i] == RETENTION_DROP_ABANDONED ? 'a' : '?';
        out[r >= 0 ? n : 0] = 0;
        return r;
}

#define EXPECT_EVERY(keep, es, et, steps, want, drops)                                   \
        do {                                                                             \
                char got_[40];                                                           \
                int r_ = decide_every(keep, es, et, steps, N(steps), got_);              \
                CHECK(r_ == (drops) && !strcmp(got_, want),                               \
                      "keep %u every %u/%us: got %s (%d drops), want %s (%d)",           \
                      (unsigned)(keep), (unsigned)(es), (unsigned)(et), got_, r_, want,   \
                      (int)(drops));                                                     \
        } while (0)

static void check_every(void) {
        /* steps 500..3500 every 250; every 1000: windows 0-999 (500, 750),
         * 1000-1999 (1000..1750), 2000-2999, 3000-3999 (3000..3500) */
        struct retention_step s[13];
        for (size_t i = 0; i < 13; i++)
                s[i] = (struct retention_step){ .step = 3500 - 250 * i, .commit = C };
        /* 3500 3250 k k; 3000 first of 3000s (e); 2750 2500 2250 d; 2000 e;
         * 1750 1500 1250 d; 1000 e; 750 d; 500 e */
        EXPECT_EVERY(2, 1000, 0, s, "kkedddedddede", 7);
        /* keep 4 reaches into the 3000s window: its first (3000) is among the
         * newest; 2750 does not open it again */
        char got[40];
        int r = decide_every(4, 1000, 0, s, 13, got);
        CHECK(r == 6 && !strcmp(got, "kkkkddedddede"), "keep 4 every 1000: %s %d", got, r);
        /* every 1 step: everything older is the first of its own window */
        r = decide_every(1, 1, 0, s, 13, got);
        CHECK(r == 0 && !strcmp(got, "keeeeeeeeeeee"), "every 1: %s %d", got, r);
        /* a window larger than every step: only the oldest opens it */
        r = decide_every(1, 1000000, 0, s, 13, got);
        CHECK(r == 11 && !strcmp(got, "kddddddddddde"), "every 1e6: %s %d", got, r);

        /* damaged and uncommitted steps open no window; the next intact one
         * does; a pin keeps a step besides its window's first */
        const struct retention_step mixed[] = {
                { 2100, C, false, false, 0 }, { 1900, C, true, false, 0 },
                { 1500, C, false, false, 0 }, { 1200, U, false, false, 0 },
                { 1100, C, false, false, 0 }, { 1000, C, false, true, 0 },
                { 900, C, false, false, 0 },
        };
        /* 2100 k; 1900 pinned (1100 is the first of 1000-1999, the oldest
         * intact one); 1500 d; 1200 a; 1100 e; 1000 damaged: d; 900 e */
        EXPECT_EVERY(1, 1000, 0, mixed, "kpdaede", 3);

        /* duration: commit times, windows of 3600 s from the epoch */
        const struct retention_step timed[] = {
                { 70, C, false, false, 7300 }, { 60, C, false, false, 7250 },
                { 50, C, false, false, 7210 }, { 40, C, false, false, 7200 },
                { 30, C, false, false, 3700 }, { 20, C, false, false, 3650 },
                { 10, C, false, false, 100 },
        };
        /* 70 k; 60 50 d; 40 e (7200 opens 7200-10799); 30 d; 20 e; 10 e */
        EXPECT_EVERY(1, 0, 3600, timed, "kddedee", 3);
        /* a clock set back: 25's time is in an older window than 20's; it
         * opens none (20 stays the first of 3600-7199) */
        const struct retention_step back[] = {
                { 30, C, false, false, 5000 }, { 25, C, false, false, 100 },
                { 20, C, false, false, 3650 }, { 10, C, false, false, 200 },
        };
        EXPECT_EVERY(1, 0, 3600, back, "kdee", 1);
        /* both kinds at once is not a policy */
        CHECK(decide_every(1, 10, 10, timed, N(timed), got) == -EINVAL, "steps and seconds");

        /* a window needs every step known: the store HEADs them all */
        const struct retention_policy ev = { .keep = 2, .every_steps = 100 };
        CHECK(!retention_seen_enough(&ev, 1000), "keep_every never has seen enough");

        /* the parser */
        uint64_t es = 9, et = 9;
        char why[160];
        CHECK(retention_every_parse("1000", &es, &et, why, sizeof(why)) == 0 && es == 1000 &&
              et == 0, "1000");
        CHECK(retention_every_parse("6h", &es, &et, why, sizeof(why)) == 0 && es == 0 &&
              et == 21600, "6h");
        CHECK(retention_every_parse("2d", &es, &et, why, sizeof(why)) == 0 && et == 172800, "2d");
        CHECK(retention_every_parse("off", &es, &et, why, sizeof(why)) == 0 && es == 0 && et == 0,
              "off");
        CHECK(retention_every_parse("", &es, &et, why, sizeof(why)) == 0 && es == 0 && et == 0,
              "empty");
        const char *bad[] = { "0", "0h", "h", "6x", "6hh", "-1", " 6h", "1.5h",
                              "99999999999999999999", "6 h" };
        for (size_t i = 0; i < N(bad); i++) {
                es = 7;
                why[0] = 0;
                CHECK(retention_every_parse(bad[i], &es, &et, why, sizeof(why)) == -EINVAL &&
                      es == 7 && why[0], "'%s' refused", bad[i]);
        }

        /* the reasons a user reads */
        const struct retention_policy p1 = { .keep = 2, .every_steps = 1000 };
        const struct retention_step st = { .step = 3000, .commit = C };
        char buf[160];
        retention_reason(buf, sizeof(buf), &p1, &st, RETENTION_KEEP_NEWEST);
        CHECK(!strcmp(buf, "kept: newest 2"), "%s", buf);
        retention_reason(buf, sizeof(buf), &p1, &st, RETENTION_KEEP_EVERY);
        CHECK(!strcmp(buf, "kept: every 1000 steps (window 3000-3999)"), "%s", buf);
        retention_reason(buf, sizeof(buf), &p1, &st, RETENTION_KEEP_PINNED);
        CHECK(!strcmp(buf, "kept: pinned"), "%s", buf);
        retention_reason(buf, sizeof(buf), &p1, &st, RETENTION_DROP_OLD);
        CHECK(!strcmp(buf, "goes: older than the newest 2 and not the first of its window "
                           "(every 1000)"), "%s", buf);
        const struct retention_policy p2 = { .keep = 3 };
        retention_reason(buf, sizeof(buf), &p2, &st, RETENTION_DROP_OLD);
        CHECK(!strcmp(buf, "goes: older than the newest 3"), "%s", buf);
        const struct retention_policy p3 = { .keep = 1, .every_seconds = 21600 };
        const struct retention_step tt = { .step = 5, .commit = C, .committed_at = 1764633600 + 3 };
        retention_reason(buf, sizeof(buf), &p3, &tt, RETENTION_KEEP_EVERY);
        CHECK(!strcmp(buf, "kept: every 6h (window from 2025-12-02 00:00:00 UTC)"), "%s", buf);
        retention_every_format(&p3, buf, sizeof(buf));
        CHECK(!strcmp(buf, "6h"), "%s", buf);
        const struct retention_policy p4 = { .keep = 1, .every_seconds = 90 };
        retention_every_format(&p4, buf, sizeof(buf));
        CHECK(!strcmp(buf, "90s"), "%s", buf);
}

/* A catalog with job "j": steps 10..60, committed but 50 and 30, 20 pinned. */
static void check_catalog_plan(void) {
        char dir[] = "/tmp/test-retention-XXXXXX";
        char path[64];
        struct catalog *c = NULL;

        if (!mkdtemp(dir)) {
                CHECK(0, "mkdtemp: %s", strerror(errno));
                return;
        }
        snprintf(path, sizeof(path), "%s/catalog.db", dir);
        int r = catalog_open(&c, path);
        CHECK(r == 0, "catalog_open: %s", strerror(-r));
        if (r < 0)
                goto out;
        CHECK(catalog_job_add(c, "j", 1000) == 0, "job");
        for (uint64_t step = 10; step <= 60; step += 10) {
                uint8_t state = step == 50 || step == 30 ? CKPT_STATE_LOCAL : CKPT_STATE_COMMITTED;
                CHECK(catalog_ckpt_upsert(c, "j", step, 4, state, 0) == 0, "step %u",
                      (unsigned)step);
        }
        CHECK(catalog_pin(c, "j", 20, true) == 0, "pin 20");

        struct retention_plan plan;
        const struct retention_policy local = { .keep = 2,
                                                .uncommitted = RETENTION_UNCOMMITTED_BELOW_NEWEST };
        r = retention_plan_from_catalog(&plan, c, "j", &local);
        /* 60 k, 50 a, 40 k, 30 a, 20 p, 10 d */
        CHECK(r == 3 && plan.n == 6, "local plan: %d drops of %zu", r, plan.n);
        if (plan.n == 6) {
                const uint64_t want_step[] = { 60, 50, 40, 30, 20, 10 };
                const enum retention_verdict want[] = {
                        RETENTION_KEEP_NEWEST, RETENTION_DROP_ABANDONED, RETENTION_KEEP_NEWEST,
                        RETENTION_DROP_ABANDONED, RETENTION_KEEP_PINNED, RETENTION_DROP_OLD,
                };
                for (size_t i = 0; i < 6; i++)
                        CHECK(plan.steps[i].step == want_step[i] && plan.verdicts[i] == want[i],
                              "row %zu: step %u verdict %s", i, (unsigned)plan.steps[i].step,
                              retention_verdict_str(plan.verdicts[i]));
        }
        retention_plan_clear(&plan);
        CHECK(plan.steps == NULL && plan.verdicts == NULL && plan.n == 0, "cleared");

        const struct retention_policy area = { .keep = 2, .uncommitted = RETENTION_UNCOMMITTED_KEEP };
        r = retention_plan_from_catalog(&plan, c, "j", &area);
        CHECK(r == 1, "area plan: %d drops (want 10 only)", r);
        retention_plan_clear(&plan);

        /* damage: the reconcile recorded 2 committed ranks of step 40 and
         * one is indexed; step 30 has its 1; 20's count is unknown (0) */
        CHECK(catalog_job_add(c, "d", 1000) == 0, "job d");
        for (uint64_t step = 20; step <= 40; step += 10)
                CHECK(catalog_ckpt_upsert(c, "d", step, 2, CKPT_STATE_COMMITTED, 0) == 0,
                      "d step %u", (unsigned)step);
        struct manifest rank0 = { .job = "d", .step = 40, .rank = 0, .world_size = 2,
                                  .uid = 1000 };
        CHECK(catalog_rank_add(c, &rank0) == 0, "d 40 rank 0");
        rank0.step = 30;
        CHECK(catalog_rank_add(c, &rank0) == 0, "d 30 rank 0");
        CHECK(catalog_ckpt_set_ranks_committed(c, "d", 40, 2) == 0, "40 names 2 ranks");
        CHECK(catalog_ckpt_set_ranks_committed(c, "d", 30, 1) == 0, "30 names 1 rank");
        CHECK(catalog_ckpt_set_ranks_committed(c, "d", 99, 1) == -ENOENT, "no step 99");
        CHECK(catalog_ckpt_damaged(c, "d", 40) == 1, "40 is damaged");
        CHECK(catalog_ckpt_damaged(c, "d", 30) == 0, "30 is intact");
        CHECK(catalog_ckpt_damaged(c, "d", 20) == 0, "20: not known, intact");
        /* a replica area's unrepairable copy says nothing of this tier's;
         * the local tier's makes the step damaged until it is repaired */
        CHECK(catalog_copy_fault_set(c, "d", 30, 0, 5, CATALOG_FAULT_UNREPAIRABLE, "x", NULL) == 0,
              "30 rank 0 in area 5 unrepairable");
        CHECK(catalog_ckpt_damaged(c, "d", 30) == 0, "30: an area's fault is not this tier's");
        CHECK(catalog_copy_fault_set(c, "d", 30, 0, CATALOG_COPY_LOCAL, CATALOG_FAULT_UNREPAIRABLE,
                                     "x", NULL) == 0, "30 rank 0 unrepairable");
        CHECK(catalog_ckpt_damaged(c, "d", 30) == 1, "30: damaged while unrepairable");
        CHECK(catalog_copy_fault_set(c, "d", 30, 0, CATALOG_COPY_LOCAL, CATALOG_FAULT_REPAIRED, "",
                                     "a neighbour") == 0, "30 rank 0 repaired");
        CHECK(catalog_ckpt_damaged(c, "d", 30) == 0, "30: intact once repaired");
        const struct retention_policy keep1 = { .keep = 1,
                                                .uncommitted = RETENTION_UNCOMMITTED_BELOW_NEWEST };
        r = retention_plan_from_catalog(&plan, c, "d", &keep1);
        /* 40 D, 30 k, 20 d */
        CHECK(r == 1 && plan.n == 3 && plan.verdicts[0] == RETENTION_KEEP_DAMAGED &&
              plan.verdicts[1] == RETENTION_KEEP_NEWEST && plan.verdicts[2] == RETENTION_DROP_OLD,
              "damaged plan: %d drops of %zu", r, plan.n);
        retention_plan_clear(&plan);

        /* a job the catalog does not know: nothing to decide */
        r = retention_plan_from_catalog(&plan, c, "other", &local);
        CHECK(r == 0 && plan.n == 0, "unknown job: %d, %zu steps", r, plan.n);
        retention_plan_clear(&plan);
out:
        catalog_free(c);
        unlink(path);
        snprintf(path, sizeof(path), "%s/catalog.db-wal", dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/catalog.db-shm", dir);
        unlink(path);
        CHECK(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
}

int main(void) {
        const enum retention_uncommitted LOCAL = RETENTION_UNCOMMITTED_BELOW_NEWEST;
        const enum retention_uncommitted AREA = RETENTION_UNCOMMITTED_KEEP;
        const enum retention_uncommitted STORE = RETENTION_UNCOMMITTED_BELOW_KEPT;

        /* keep: the newest 3 committed stay, older committed go, in every mode */
        const struct retention_step five[] = {
                { 50, C, false }, { 40, C, false }, { 30, C, false }, { 20, C, false },
                { 10, C, false },
        };
        EXPECT(3, LOCAL, five, "kkkdd", 2);
        EXPECT(3, AREA, five, "kkkdd", 2);
        EXPECT(3, STORE, five, "kkkdd", 2);
        EXPECT(1, LOCAL, five, "kdddd", 4);  /* the newest committed never goes */
        EXPECT(0, AREA, five, "kkkkk", 0);   /* replica areas: keep 0 keeps all */

        /* fewer committed than keep: nothing committed goes */
        const struct retention_step two[] = { { 9, C, false }, { 4, C, false } };
        EXPECT(3, LOCAL, two, "kk", 0);
        EXPECT(3, STORE, two, "kk", 0);
        EXPECT(2, AREA, two, "kk", 0);

        /* pins: a pinned old step stays, and counts as one of the kept (pinning
         * does not make retention keep one more unpinned step) */
        const struct retention_step pinned[] = {
                { 50, C, false }, { 40, C, true }, { 30, C, false }, { 20, C, true },
                { 10, C, false },
        };
        EXPECT(2, LOCAL, pinned, "kkdpd", 2);
        EXPECT(2, AREA, pinned, "kkdpd", 2);
        EXPECT(2, STORE, pinned, "kkdpd", 2);

        /* uncommitted steps are never counted as kept; where they go differs */
        const struct retention_step mixed[] = {
                { 70, U, false }, /* newer than every committed: the trainer's current save */
                { 60, C, false },
                { 50, U, false }, /* below the newest committed */
                { 40, C, false },
                { 30, U, false }, /* below the keep-th committed */
                { 20, C, false },
                { 10, U, true },  /* pinned, would go */
        };
        EXPECT(2, LOCAL, mixed, "ukakadp", 3);
        EXPECT(2, AREA, mixed, "ukukudu", 1);
        EXPECT(2, STORE, mixed, "ukukadp", 2);
        EXPECT(0, AREA, mixed, "ukukuku", 0);

        /* damaged steps (issue 12, reproduction 4): never counted among the
         * newest, kept while fewer than keep intact steps are newer */
        const struct retention_step damaged[] = {
                { 50, C, false, false }, { 40, C, false, true }, { 30, C, false, false },
                { 20, C, false, true }, { 10, C, false, false },
        };
        EXPECT(3, LOCAL, damaged, "kDkDk", 0);
        EXPECT(2, LOCAL, damaged, "kDkdd", 2);
        EXPECT(2, AREA, damaged, "kDkdd", 2);
        EXPECT(1, STORE, damaged, "kdddd", 4);
        EXPECT(0, LOCAL, damaged, "kDkDk", 0);
        const struct retention_step damaged_pinned[] = {
                { 30, C, false, false }, { 20, C, false, false }, { 10, C, true, true },
        };
        EXPECT(1, LOCAL, damaged_pinned, "kdp", 1);

        /* no committed step at all: nothing goes, in any mode */
        const struct retention_step none[] = { { 3, U, false }, { 2, U, false } };
        EXPECT(1, LOCAL, none, "uu", 0);
        EXPECT(1, AREA, none, "uu", 0);
        EXPECT(1, STORE, none, "uu", 0);

        /* the store: steps below the cut were never HEADed; they go, committed
         * or not, unless pinned */
        const struct retention_step walked[] = {
                { 90, U, false }, { 80, C, false }, { 70, C, false }, { 60, X, false },
                { 50, X, true }, { 40, X, false },
        };
        EXPECT(2, STORE, walked, "ukkapa", 2);
        /* ... and a step not known to be committed above the cut stays */
        const struct retention_step short_walk[] = { { 9, C, false }, { 8, X, false } };
        EXPECT(2, STORE, short_walk, "ku", 0);
        struct retention_policy store2 = { .keep = 2, .uncommitted = STORE };
        CHECK(!retention_seen_enough(&store2, 1), "one committed of 2 is not enough");
        CHECK(retention_seen_enough(&store2, 2), "two committed of 2 are enough");
        struct retention_policy all = { .keep = 0, .uncommitted = AREA };
        CHECK(!retention_seen_enough(&all, 1000), "keep 0 never has seen enough");

        /* out of order (or a step twice): refused, nothing to drop */
        const struct retention_step disorder[] = { { 1, C, false }, { 2, C, false } };
        char got[8];
        CHECK(decide(1, LOCAL, disorder, 2, got) == -EINVAL, "ascending list");
        const struct retention_step twice[] = { { 2, C, false }, { 2, C, false } };
        CHECK(decide(1, LOCAL, twice, 2, got) == -EINVAL, "a step twice");
        struct retention_policy one = { .keep = 1, .uncommitted = LOCAL };
        CHECK(retention_decide(&one, NULL, 0, NULL) == 0, "an empty job");
        CHECK(retention_decide(&one, NULL, 1, NULL) == -EINVAL, "NULL steps");

        for (int v = RETENTION_KEEP_NEWEST; v <= RETENTION_DROP_ABANDONED; v++)
                CHECK(retention_verdict_str(v) && *retention_verdict_str(v), "verdict %d", v);
        CHECK(!retention_verdict_drops(RETENTION_KEEP_PINNED), "a pinned step is kept");

        check_every();
        check_catalog_plan();
        return check_exit_code();
}
