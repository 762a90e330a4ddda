/* SPDX-License-Identifier: MIT */
/*
 * bucket_retention — the store's retention, one job at a time; see
 * bucket_retention.h.  One state machine per run, one request at a time:
 *
 *   LIST_STEPS (ListObjectsV2 <job>/steps/ with delimiter, all pages)
 *   -> HEAD (COMMIT of each step, newest first, until the policy has seen
 *      enough committed ones: retention_seen_enough)
 *   -> retention_decide (retention/, the policy all tiers share)
 *   -> per step it drops, oldest first:
 *      LIST_KEYS (all of its keys) -> DELETE (COMMIT first, then the rest)
 *
 * This file is the store's deleter; which steps go is not decided here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/bucket_retention.h"
#include "remote/objects.h"
#include "retention/retention.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"

enum ret_phase { RET_LIST_STEPS, RET_HEAD, RET_LIST_KEYS, RET_DELETE };

/* One job's run. */
struct fret {
        struct list link;         /* on bucket_retention.runs */
        struct bucket_retention *br;
        char job[CKPT_NAME_MAX + 1];
        enum ret_phase phase;
        bool again;               /* asked to run again while running */
        uint64_t *steps;          /* ascending */
        size_t nsteps, cap;
        struct retention_step *rsteps;       /* steps[], newest first, for the policy */
        enum retention_verdict *verdicts;    /* for rsteps[] */
        size_t cursor;            /* HEAD walk: index into rsteps */
        uint32_t committed_seen;
        size_t del_step;          /* index into steps[] of the step being deleted */
        struct s3_object_list olist;
        char token[S3_TOKEN_MAX + 1];
        char (*keys)[S3_KEY_MAX + 1];
        size_t nkeys, kcap, del_next;
        struct s3_request req;
        bool busy;
        /* a delete run (bucket_retention_delete): one step, no policy */
        bool deleting;
        int error;                /* of a delete run: the first failure */
        bucket_retention_deleted_fn deleted;
        void *userdata;
};

struct bucket_retention {
        struct s3_client *s3;
        struct catalog *catalog;
        char prefix[OBJECT_KEY_MAX + 1];
        struct retention_policy policy;
        struct list runs;         /* struct fret */
        bool freeing;
};

static void ret_next(struct fret *rt);

/* The store's policy: keep the newest `keep` committed steps; a step
 * without COMMIT goes only once it is older than all of them (the walk
 * stops HEADing there, so below the cut it is not known either way). */
struct retention_policy bucket_retention_policy(const struct retention_policy *configured) {
        struct retention_policy p = *configured;
        p.uncommitted = RETENTION_UNCOMMITTED_BELOW_KEPT;
        return p;
}

static struct retention_policy ret_policy(const struct bucket_retention *br) {
        return bucket_retention_policy(&br->policy);
}

/* May the HEAD walk stop: is every older step decided whatever it is? */
static bool ret_seen_enough(const struct fret *rt) {
        const struct retention_policy policy = ret_policy(rt->br);
        return retention_seen_enough(&policy, rt->committed_seen);
}

/* All steps listed: lay them out newest first for the HEAD walk, none
 * known to be committed yet.  0 or -ENOMEM. */
static int ret_steps_prepare(struct fret *rt) {
        if (rt->nsteps == 0)
                return 0;
        rt->rsteps = calloc(rt->nsteps, sizeof(*rt->rsteps));
        if (!rt->rsteps)
                return -ENOMEM;
        for (size_t i = 0; i < rt->nsteps; i++)
                rt->rsteps[i] = (struct retention_step){
                        .step = rt->steps[rt->nsteps - 1 - i],
                        .commit = RETENTION_UNKNOWN,
                };
        return 0;
}

/* The HEAD walk is over: ask the policy.  Pins are this node's catalog's
 * (they keep a step here and in the store alike).  Returns the number of
 * steps to delete, or -errno (nothing is deleted). */
static int ret_decide(struct fret *rt) {
        struct bucket_retention *br = rt->br;
        const struct retention_policy policy = ret_policy(br);

        if (rt->nsteps == 0)
                return 0;
        rt->verdicts = calloc(rt->nsteps, sizeof(*rt->verdicts));
        if (!rt->verdicts)
                return -ENOMEM;
        retention_pins_from_catalog(rt->rsteps, rt->nsteps, br->catalog, rt->job);
        return retention_decide(&policy, rt->rsteps, rt->nsteps, rt->verdicts);
}

static void ret_finish(struct fret *rt) {
        struct bucket_retention *br = rt->br;
        bool again = rt->again;
        char job[CKPT_NAME_MAX + 1];

        snprintf(job, sizeof(job), "%s", rt->job);
        if (rt->deleting && rt->deleted)
                rt->deleted(rt->userdata, rt->job, rt->steps[0],
                            br->freeing ? -ECANCELED : rt->error);
        list_unlink(&rt->link);
        free(rt->steps);
        free(rt->rsteps);
        free(rt->verdicts);
        free(rt->keys);
        free(rt->olist.objects);
        free(rt->olist.prefixes);
        free(rt);
        if (again && !br->freeing)
                bucket_retention_run(br, job);
}

static void ret_done(struct s3_request *req, int error) {
        struct fret *rt = container_of(req, struct fret, req);
        struct bucket_retention *br = rt->br;

        rt->busy = false;
        if (error == -ECANCELED || br->freeing) {
                ret_finish(rt);
                return;
        }
        switch (rt->phase) {
        case RET_LIST_STEPS:
        case RET_LIST_KEYS:
                if (error < 0) {
                        log_warn("retention (store): job %s: listing failed: %s", rt->job,
                                    strerror(-error));
                        rt->error = error;
                        ret_finish(rt);
                        return;
                }
                if (rt->phase == RET_LIST_STEPS) {
                        char dir[OBJECT_KEY_MAX + 1];
                        object_key_steps_dir(dir, sizeof(dir), br->prefix, rt->job);
                        for (size_t i = 0; i < rt->olist.prefix_count; i++) {
                                uint64_t step;
                                if (object_key_parse_step_dir(dir, rt->olist.prefixes[i].prefix,
                                                              &step) < 0)
                                                              continue;
                                if (rt->nsteps == rt->cap) {
                                        size_t cap = rt->cap ? rt->cap * 2 : 64;
                                        uint64_t *n = realloc(rt->steps, cap * sizeof(*n));
                                        if (!n) {
                                                ret_finish(rt);
                                                return;
                                        }
                                        rt->steps = n;
                                        rt->cap = cap;
                                }
                                rt->steps[rt->nsteps++] = step;
                        }
                } else {
                        for (size_t i = 0; i < rt->olist.count; i++) {
                                if (rt->nkeys == rt->kcap) {
                                        size_t cap = rt->kcap ? rt->kcap * 2 : 64;
                                        void *n = realloc(rt->keys, cap * sizeof(*rt->keys));
                                        if (!n) {
                                                ret_finish(rt);
                                                return;
                                        }
                                        rt->keys = n;
                                        rt->kcap = cap;
                                }
                                snprintf(rt->keys[rt->nkeys++], sizeof(rt->keys[0]), "%s",
                                         rt->olist.objects[i].key);
                        }
                }
                if (rt->olist.truncated) {
                        snprintf(rt->token, sizeof(rt->token), "%s", rt->olist.next_token);
                } else {
                        rt->token[0] = 0;
                        if (rt->phase == RET_LIST_STEPS) {
                                if (ret_steps_prepare(rt) < 0) {
                                        ret_finish(rt);
                                        return;
                                }
                                rt->phase = RET_HEAD;
                                rt->cursor = 0;
                        } else {
                                /* COMMIT first: a reader must never trust a
                                 * step whose shards are going away. */
                                for (size_t i = 0; i < rt->nkeys; i++) {
                                        size_t l = strlen(rt->keys[i]);
                                        if (l >= 7 && !strcmp(rt->keys[i] + l - 7, "/COMMIT") &&
                                            i > 0) {
                                                char tmp[S3_KEY_MAX + 1];
                                                memcpy(tmp, rt->keys[0], sizeof(tmp));
                                                memcpy(rt->keys[0], rt->keys[i], sizeof(tmp));
                                                memcpy(rt->keys[i], tmp, sizeof(tmp));
                                                break;
                                        }
                                }
                                rt->phase = RET_DELETE;
                                rt->del_next = 0;
                        }
                }
                break;
        case RET_HEAD: {
                if (error < 0 && error != -ENOENT) {
                        ret_finish(rt);
                        return;
                }
                rt->rsteps[rt->cursor].commit = error == 0 ? RETENTION_COMMITTED
                                                           : RETENTION_UNCOMMITTED;
                if (error == 0)
                        rt->committed_seen++;
                rt->cursor++;
                break;
        }
        case RET_DELETE:
                if (error < 0) {
                        log_warn("retention (store): delete %s: %s", rt->keys[rt->del_next],
                                    strerror(-error));
                        if (!rt->error)
                                rt->error = error;
                }
                rt->del_next++;
                break;
        }
        ret_next(rt);
}

static void ret_next(struct fret *rt) {
        struct bucket_retention *br = rt->br;
        char buf[OBJECT_KEY_MAX + 1];
        int r = 0;

        rt->req = (struct s3_request){ .done = ret_done };
        for (;;) {
                switch (rt->phase) {
                case RET_LIST_STEPS:
                        object_key_steps_dir(buf, sizeof(buf), br->prefix, rt->job);
                        rt->olist.count = rt->olist.prefix_count = 0;
                        r = s3_list_objects(br->s3, &rt->req, buf, "/", rt->token, &rt->olist);
                        goto started;
                case RET_HEAD:
                        if (ret_seen_enough(rt) || rt->cursor >= rt->nsteps) {
                                if (ret_decide(rt) <= 0) {
                                        ret_finish(rt);
                                        return;
                                }
                                rt->del_step = 0;
                                goto next_step;
                        }
                        object_key_commit(buf, sizeof(buf), br->prefix, rt->job,
                                          rt->steps[rt->nsteps - 1 - rt->cursor]);
                        r = s3_head_object(br->s3, &rt->req, buf);
                        goto started;
                case RET_LIST_KEYS:
                        object_key_step_dir(buf, sizeof(buf), br->prefix, rt->job,
                                            rt->steps[rt->del_step]);
                        rt->olist.count = 0;
                        r = s3_list_objects(br->s3, &rt->req, buf, NULL, rt->token, &rt->olist);
                        goto started;
                case RET_DELETE:
                        if (rt->del_next < rt->nkeys) {
                                r = s3_delete_object(br->s3, &rt->req, rt->keys[rt->del_next]);
                                goto started;
                        }
                        if (rt->deleting)
                                log_info("store: job %s step %" PRIu64 " deleted (%zu objects, "
                                         "ckptctl delete)", rt->job, rt->steps[rt->del_step],
                                         rt->nkeys);
                        else
                                log_info("retention (store): job %s step %" PRIu64 " removed "
                                         "(%zu objects, %s)", rt->job, rt->steps[rt->del_step],
                                         rt->nkeys,
                                         retention_verdict_str(
                                                 rt->verdicts[rt->nsteps - 1 - rt->del_step]));
                        rt->del_step++;
                        goto next_step;
                }
        next_step:
                /* the next step the policy drops, oldest first (rsteps[] is
                 * steps[] reversed) */
                while (rt->del_step < rt->nsteps &&
                       !retention_verdict_drops(rt->verdicts[rt->nsteps - 1 - rt->del_step]))
                        rt->del_step++;
                if (rt->del_step >= rt->nsteps) {
                        ret_finish(rt);
                        return;
                }
                rt->phase = RET_LIST_KEYS;
                rt->nkeys = 0;
                rt->token[0] = 0;
        }
started:
        if (r < 0) {
                log_warn("retention (store): job %s: %s", rt->job, strerror(-r));
                rt->error = r;
                ret_finish(rt);
                return;
        }
        rt->busy = true;
}

void bucket_retention_run(struct bucket_retention *br, const char *job) {
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &br->runs) {
                struct fret *rt = list_entry(pos, struct fret, link);
                if (!rt->deleting && !strcmp(rt->job, job)) {
                        rt->again = true;
                        return;
                }
        }
        struct fret *rt = calloc(1, sizeof(*rt));
        if (!rt)
                return;
        rt->br = br;
        snprintf(rt->job, sizeof(rt->job), "%s", job);
        rt->olist.objects = calloc(S3_LIST_MAX, sizeof(*rt->olist.objects));
        rt->olist.prefixes = calloc(S3_LIST_MAX, sizeof(*rt->olist.prefixes));
        rt->olist.capacity = S3_LIST_MAX;
        list_init(&rt->link);
        list_add_tail(&br->runs, &rt->link);
        if (!rt->olist.objects || !rt->olist.prefixes) {
                ret_finish(rt);
                return;
        }
        rt->phase = RET_LIST_STEPS;
        ret_next(rt);
}

int bucket_retention_delete(struct bucket_retention *br, const char *job, uint64_t step,
                            bucket_retention_deleted_fn deleted, void *userdata) {
        struct fret *rt = calloc(1, sizeof(*rt));
        if (!rt)
                return -ENOMEM;
        rt->br = br;
        rt->deleting = true;
        snprintf(rt->job, sizeof(rt->job), "%s", job);
        rt->steps = calloc(1, sizeof(*rt->steps));
        rt->rsteps = calloc(1, sizeof(*rt->rsteps));
        rt->verdicts = calloc(1, sizeof(*rt->verdicts));
        rt->olist.objects = calloc(S3_LIST_MAX, sizeof(*rt->olist.objects));
        rt->olist.capacity = S3_LIST_MAX;
        list_init(&rt->link);
        list_add_tail(&br->runs, &rt->link);
        if (!rt->steps || !rt->rsteps || !rt->verdicts || !rt->olist.objects) {
                ret_finish(rt); /* deleted is not set yet: the caller hears -ENOMEM */
                return -ENOMEM;
        }
        rt->deleted = deleted;
        rt->userdata = userdata;
        /* the step's keys, then DELETE each, COMMIT first: the path of a
         * step the policy drops (ret_next's LIST_KEYS) */
        rt->steps[0] = step;
        rt->rsteps[0] = (struct retention_step){ .step = step, .commit = RETENTION_UNKNOWN };
        rt->verdicts[0] = RETENTION_DROP_OLD;
        rt->nsteps = rt->cap = 1;
        rt->del_step = 0;
        rt->phase = RET_LIST_KEYS;
        ret_next(rt);
        return 0;
}

int bucket_retention_new(struct bucket_retention **out, struct s3_client *s3,
                         struct catalog *catalog, const char *prefix,
                         const struct retention_policy *p) {
        if (!out || !s3 || !catalog || !p || p->keep < 1 || p->every_seconds)
                return -EINVAL;
        struct bucket_retention *br = calloc(1, sizeof(*br));
        if (!br)
                return -ENOMEM;
        br->s3 = s3;
        br->catalog = catalog;
        br->policy = *p;
        snprintf(br->prefix, sizeof(br->prefix), "%s", prefix ? prefix : "");
        list_init(&br->runs);
        *out = br;
        return 0;
}

struct bucket_retention *bucket_retention_free(struct bucket_retention *br) {
        struct list *pos, *tmp;

        if (!br)
                return NULL;
        /* every done() runs now, sees freeing and only frees its run */
        br->freeing = true;
        list_for_each_safe(pos, tmp, &br->runs) {
                struct fret *rt = list_entry(pos, struct fret, link);
                if (rt->busy)
                        s3_request_cancel(br->s3, &rt->req); /* frees rt */
                else
                        ret_finish(rt);
        }
        free(br);
        return NULL;
}

void bucket_retention_set_policy(struct bucket_retention *br, const struct retention_policy *p) {
        br->policy = *p;
}
