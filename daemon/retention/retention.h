/* SPDX-License-Identifier: MIT */
/*
 * retention — which steps of a job a tier removes: one policy for the
 * local tier (server/save.c), the replica areas (peer/replica_area.c) and
 * the object store (remote/bucket_retention.c).  Each tier lists its steps,
 * asks retention_decide() and removes the ones it is told to with its own
 * deleter (files, files of an area, objects); how a step is removed, and
 * whether it is busy right now, stays with the tier.
 *
 * The rule, for all tiers, three layers (docs/design-decisions.md,
 * "Retention layers"): walking the steps newest first, the first `keep`
 * (keep_latest) committed ones that are not damaged stay (a damaged step
 * among them stays too, uncounted); of the older committed ones, the first
 * (lowest-numbered) intact step of each keep_every window stays — windows
 * of `every_steps` step numbers ([k*N, (k+1)*N)) or of `every_seconds` of
 * commit time (since the epoch, UTC) — and every other one goes; a pinned
 * step stays whatever the rule says (a pinned step among the newest `keep`
 * is one of them; an older pinned one is kept besides them).  The newest
 * committed step always stays (keep >= 1, or keep 0: all).  Steps that are
 * not committed are where the tiers differ, on purpose (enum
 * retention_uncommitted says why each one does what).
 *
 * This is the one owner of the decision: the tiers' passes and `ckptctl
 * retention --dry-run` (server/retention_request.c) call retention_decide
 * and explain it with retention_reason, so what the dry run shows is what
 * a pass removes.
 *
 * The decision (retention_decide) is a pure function of struct
 * retention_step, which a tier fills from what it knows; for a tier whose
 * steps are the rows of a catalog (local, replica areas)
 * retention_plan_from_catalog lists them, reads their pins and decides.
 * Knows the catalog's types, nothing of the tiers.  retention_decide: any
 * thread; the plan: the catalog's thread (the loop).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct catalog;

/* What a tier knows of a step's commit. */
enum retention_commit {
        RETENTION_UNCOMMITTED = 0,
        RETENTION_COMMITTED = 1,
        /* not looked at (the store HEADs COMMIT only until `keep` committed
         * steps are seen); only legal below that cut, where it does not
         * matter — above it an unknown step is kept */
        RETENTION_UNKNOWN = 2,
};

/* What becomes of a step that is not committed. */
enum retention_uncommitted {
        /* never removed: replica areas — an uncommitted replica may be a
         * step whose COMMITTED record is still on its way from the source */
        RETENTION_UNCOMMITTED_KEEP,
        /* removed once a newer step is committed: the local tier — a trainer
         * that moved on will never commit it, and its files hold disk */
        RETENTION_UNCOMMITTED_BELOW_NEWEST,
        /* removed once it is older than the keep-th newest committed step:
         * the object store, which only knows a step is committed by HEADing
         * its COMMIT object and stops HEADing there */
        RETENTION_UNCOMMITTED_BELOW_KEPT,
};

struct retention_policy {
        uint32_t keep;                    /* keep_latest: committed steps kept; 0: all */
        /* keep_every, at most one of the two set (0: off): the first
         * committed step of each window of every_steps step numbers, or of
         * every_seconds of commit time, is kept besides the newest */
        uint64_t every_steps;
        uint64_t every_seconds;
        enum retention_uncommitted uncommitted;
};

/* Parse a keep_every value: "" or "off" (no window: both 0), a step count
 * ("1000": every_steps), or a duration with a unit s, m, h or d ("6h":
 * every_seconds).  Returns 0, or -EINVAL (zero, overflow, any other text;
 * nothing set) with why[0..n) saying what is wrong. */
int retention_every_parse(const char *s, uint64_t *every_steps, uint64_t *every_seconds,
                          char *why, size_t n);
/* The value in the form retention_every_parse takes ("1000", "6h", "off"). */
void retention_every_format(const struct retention_policy *p, char *buf, size_t n);

struct retention_step {
        uint64_t step;
        enum retention_commit commit;
        bool pinned;
        /* committed, but a rank of it this tier held is missing or bad
         * (catalog_ckpt_damaged): not one of the `keep` newest, so that a
         * damaged step never pushes an intact one out */
        bool damaged;
        /* unix seconds of the commit (0: not known, the window of time 0);
         * read only with every_seconds.  Commit times of a job grow with its
         * steps; a step committed earlier than an older one (a clock set
         * back) opens no window of its own */
        int64_t committed_at;
};

/* Why a step stays or goes. */
enum retention_verdict {
        RETENTION_KEEP_NEWEST,        /* committed, among the newest `keep` */
        RETENTION_KEEP_UNCOMMITTED,   /* not committed, and the mode spares it */
        RETENTION_KEEP_PINNED,        /* would go, but is pinned */
        RETENTION_KEEP_DAMAGED,       /* committed but damaged, newer than the
                                       * keep-th intact step: kept, not counted */
        RETENTION_KEEP_EVERY,         /* committed, older than the newest `keep`,
                                       * the first of its keep_every window */
        RETENTION_DROP_OLD,           /* committed, older than the newest `keep` */
        RETENTION_DROP_ABANDONED,     /* not committed (or unknown), and older than
                                       * the mode allows */
};

static inline bool retention_verdict_drops(enum retention_verdict v) {
        return v == RETENTION_DROP_OLD || v == RETENTION_DROP_ABANDONED;
}

/* A short phrase saying why ("older than the newest kept"...), for logs
 * and tests; never NULL. */
const char *retention_verdict_str(enum retention_verdict v);

/* The verdict on s under p as a user reads it, into buf[0..n): "kept:
 * newest 2", "kept: every 1000 steps (window 3000-3999)", "kept: every 6h
 * (window from 2026-12-02 12:00:00 UTC)", "kept: pinned", "goes: older
 * than the newest 2 and not the first of its window"... */
void retention_reason(char *buf, size_t n, const struct retention_policy *p,
                      const struct retention_step *s, enum retention_verdict v);

/*
 * Decide every step of one job.  steps[0..n) must be newest first (as
 * catalog_ckpt_foreach lists them); verdicts[i] is set for steps[i].
 * Returns the number of steps to drop, or -EINVAL (NULL with n > 0, or
 * steps out of order), in which case nothing is to be dropped.
 */
int retention_decide(const struct retention_policy *p, const struct retention_step *steps,
                     size_t n, enum retention_verdict *verdicts);

/* True once `committed_seen` committed steps (counted newest first) are
 * enough for the policy to decide every older step without knowing whether
 * they are committed: the store stops HEADing there. */
bool retention_seen_enough(const struct retention_policy *p, uint32_t committed_seen);

/* A job's steps as a catalog lists them (newest first) and the policy's
 * verdict on each. */
struct retention_plan {
        struct retention_step *steps;
        enum retention_verdict *verdicts;
        size_t n;
};

/*
 * List job's steps in catalog (committed = CKPT_STATE_COMMITTED there),
 * read their pins from the same catalog, and decide under p.  Returns the
 * number of steps to drop (plan filled; free with retention_plan_clear
 * whatever the result), or -errno (the listing failed, -ENOMEM), in which
 * case nothing is to be dropped.
 */
int retention_plan_from_catalog(struct retention_plan *plan, struct catalog *catalog,
                                const char *job, const struct retention_policy *p);
void retention_plan_clear(struct retention_plan *plan);

/* Set steps[i].damaged from catalog (catalog_ckpt_damaged; a lookup that
 * fails counts as not damaged). */
void retention_damage_from_catalog(struct retention_step *steps, size_t n,
                                   struct catalog *catalog, const char *job);

/* Set steps[i].committed_at from catalog's rows of job (0 where a
 * lookup fails). */
void retention_times_from_catalog(struct retention_step *steps, size_t n,
                                  struct catalog *catalog, const char *job);

/* Set steps[i].pinned from catalog's pins of job (a lookup that fails
 * counts as not pinned, as everywhere retention reads pins). */
void retention_pins_from_catalog(struct retention_step *steps, size_t n, struct catalog *catalog,
                                 const char *job);
