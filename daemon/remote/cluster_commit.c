/* SPDX-License-Identifier: MIT */
/*
 * cluster_commit — a step's COMMIT object; see cluster_commit.h.  The
 * state machine, one request at a time:
 *
 *   coordinator: LIST <step>/nodes/ (all pages) -> until node_count
 *                manifests are listed, poll -> GET each manifest -> check
 *                -> PUT COMMIT If-None-Match: * -> done
 *   other nodes: HEAD COMMIT -> poll until it exists -> done
 *
 * A manifest that changed size between LIST and GET, or vanished, sends
 * the coordinator back to listing; -EEXIST on the PUT is success (the same
 * manifests made the COMMIT already there).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt-proto.h"
#include "remote/cluster_commit.h"
#include "remote/objects.h"
#include "util/cleanup.h"
#include "util/log.h"

#define COMMIT_POLL_MIN_MS 100
#define COMMIT_POLL_MAX_MS 5000
/* A node manifest is a few bytes per MiB of checkpoint; anything bigger
 * than this is not one of ours. */
#define COMMIT_MANIFEST_MAX (256u << 20)

struct cluster_commit {
        struct loop *loop;
        struct s3_client *s3;
        const struct cluster_commit_ops *ops;
        void *userdata;
        char prefix[OBJECT_KEY_MAX + 1];
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t node_index, node_count;
        bool stopped;             /* cluster_commit_stop(): requests end quietly */
        bool freeing;             /* ... and without telling the owner */
        struct loop_timer timer;  /* the next poll */
        uint64_t poll_ms;
        struct s3_request req;    /* listing, GETs, COMMIT PUT or HEAD */
        bool req_busy;
        /* coordinator */
        struct s3_object_list olist;
        uint64_t *manifest_sizes; /* node_count entries, UINT64_MAX: missing */
        uint32_t manifests_seen;
        uint32_t fetch_next;
        struct node_manifest **nms;
        char **texts;
        size_t *lens;
        char *commit_text;
        size_t commit_len;
};

static bool commit_is_coordinator(const struct cluster_commit *cc) {
        return cc->node_index == 0;
}

static void commit_fail(struct cluster_commit *cc, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void commit_fail(struct cluster_commit *cc, const char *fmt, ...) {
        char msg[CKPT_ERRMSG_MAX + 1];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        cc->ops->failed(cc->userdata, msg);
}

static void commit_done(struct cluster_commit *cc) {
        cc->ops->done(cc->userdata);
}

/* Bookkeeping every request's done() starts with.  false: the commit was
 * stopped meanwhile, and there is nothing more to do. */
static bool commit_req_ended(struct cluster_commit *cc) {
        cc->req_busy = false;
        if (!cc->stopped)
                return true;
        if (!cc->freeing)
                cc->ops->idle(cc->userdata);
        return false;
}


static void commit_poll_later(struct cluster_commit *cc);
static void commit_list(struct cluster_commit *cc, const char *token);
static void commit_fetch_next(struct cluster_commit *cc);

static void commit_head_done(struct s3_request *req, int error) {
        struct cluster_commit *cc = container_of(req, struct cluster_commit, req);

        if (!commit_req_ended(cc))
                return;
        if (error == 0) {
                commit_done(cc);
        } else if (error == -ENOENT) {
                commit_poll_later(cc);
        } else if (error != -ECANCELED) {
                if (req->result.permanent) {
                        char why[400];
                        s3_result_describe(&req->result, error, why, sizeof(why));
                        commit_fail(cc, "HeadObject COMMIT: %s", why);
                } else {
                        commit_poll_later(cc);
                }
        }
}

static void commit_head(struct cluster_commit *cc) {
        char key[OBJECT_KEY_MAX + 1];

        object_key_commit(key, sizeof(key), cc->prefix, cc->job, cc->step);
        cc->req = (struct s3_request){ .done = commit_head_done };
        int r = s3_head_object(cc->s3, &cc->req, key);
        if (r < 0) {
                commit_fail(cc, "cannot start HeadObject %s: %s", key, strerror(-r));
                return;
        }
        cc->req_busy = true;
}

static void commit_poll_timeout(struct loop_timer *t) {
        struct cluster_commit *cc = container_of(t, struct cluster_commit, timer);
        if (commit_is_coordinator(cc))
                commit_list(cc, NULL);
        else
                commit_head(cc);
}

static void commit_poll_later(struct cluster_commit *cc) {
        cc->poll_ms = cc->poll_ms ? MIN(cc->poll_ms * 2, COMMIT_POLL_MAX_MS) : COMMIT_POLL_MIN_MS;
        loop_timer_start(cc->loop, &cc->timer, cc->poll_ms, commit_poll_timeout);
}

static void commit_put_done(struct s3_request *req, int error) {
        struct cluster_commit *cc = container_of(req, struct cluster_commit, req);

        if (!commit_req_ended(cc))
                return;
        if (error == 0 || error == -EEXIST) {
                /* -EEXIST: another coordinator (or our own earlier attempt
                 * whose answer was lost) wrote it first; it was built from
                 * the same manifests. */
                if (error == -EEXIST)
                        log_info("flush: job %s step %" PRIu64 ": COMMIT already written",
                                 cc->job, cc->step);
                commit_done(cc);
                return;
        }
        if (error == -ECANCELED)
                return;
        if (!req->result.permanent) {
                commit_poll_later(cc);
                return;
        }
        char why[400];
        s3_result_describe(&req->result, error, why, sizeof(why));
        commit_fail(cc, "PutObject COMMIT: %s", why);
}

static void commit_write(struct cluster_commit *cc) {
        char err[256] = "";
        char key[OBJECT_KEY_MAX + 1];
        struct commit_object co = { 0 };
        uint32_t n = cc->node_count;

        int r = commit_object_build(&co, (const struct node_manifest *const *)cc->nms,
                                    (const char *const *)cc->texts, cc->lens, n,
                                    (int64_t)time(NULL), err, sizeof(err));
        if (r < 0) {
                commit_fail(cc, "the node manifests do not make a checkpoint: %s", err);
                return;
        }
        free(cc->commit_text);
        cc->commit_text = NULL;
        r = commit_object_format(&co, &cc->commit_text, &cc->commit_len);
        commit_object_clear(&co);
        if (r < 0 || cc->commit_len > S3_MEMORY_BODY_MAX) {
                commit_fail(cc, "cannot format the COMMIT object: %s",
                            r < 0 ? strerror(-r) : "too large");
                return;
        }
        object_key_commit(key, sizeof(key), cc->prefix, cc->job, cc->step);
        struct s3_body body = s3_body_mem(cc->commit_text, cc->commit_len);
        cc->req = (struct s3_request){ .done = commit_put_done };
        r = s3_put_object(cc->s3, &cc->req, key, &body, S3_PUT_IF_NONE_MATCH);
        if (r < 0) {
                commit_fail(cc, "cannot start PutObject %s: %s", key, strerror(-r));
                return;
        }
        cc->req_busy = true;
}

static void commit_get_done(struct s3_request *req, int error) {
        struct cluster_commit *cc = container_of(req, struct cluster_commit, req);
        uint32_t node = cc->fetch_next;

        if (!commit_req_ended(cc))
                return;
        if (error < 0) {
                if (error == -ECANCELED)
                        return;
                if (req->result.permanent && error != -ENOENT && error != -EFBIG) {
                        char why[400];
                        s3_result_describe(&req->result, error, why, sizeof(why));
                        commit_fail(cc, "GetObject of node %u's manifest: %s", node, why);
                        return;
                }
                /* rewritten meanwhile (size changed) or gone: list again */
                commit_poll_later(cc);
                return;
        }
        int r = node_manifest_parse(&cc->nms[node], cc->texts[node], cc->lens[node]);
        if (r < 0) {
                commit_fail(cc, "node %u's manifest in the store is malformed (%s)", node,
                            strerror(-r));
                return;
        }
        if (strcmp(cc->nms[node]->job, cc->job) || cc->nms[node]->step != cc->step ||
            cc->nms[node]->node != node || cc->nms[node]->node_count != cc->node_count) {
                commit_fail(cc, "node %u's manifest describes job %s step %" PRIu64
                            " node %u of %u", node, cc->nms[node]->job, cc->nms[node]->step,
                            cc->nms[node]->node, cc->nms[node]->node_count);
                return;
        }
        cc->fetch_next++;
        commit_fetch_next(cc);
}

static void commit_fetch_next(struct cluster_commit *cc) {
        uint32_t n = cc->node_count;
        char key[OBJECT_KEY_MAX + 1];

        if (cc->fetch_next >= n) {
                commit_write(cc);
                return;
        }
        uint32_t node = cc->fetch_next;
        uint64_t size = cc->manifest_sizes[node];
        node_manifest_free(cc->nms[node]);
        cc->nms[node] = NULL;
        free(cc->texts[node]);
        cc->texts[node] = malloc(size ? size : 1);
        cc->lens[node] = size;
        if (!cc->texts[node]) {
                commit_fail(cc, "out of memory");
                return;
        }
        object_key_node_manifest(key, sizeof(key), cc->prefix, cc->job, cc->step, node);
        cc->req = (struct s3_request){ .done = commit_get_done };
        int r = s3_get_object(cc->s3, &cc->req, key, cc->texts[node], size);
        if (r < 0) {
                commit_fail(cc, "cannot start GetObject %s: %s", key, strerror(-r));
                return;
        }
        cc->req_busy = true;
}

static void commit_list_done(struct s3_request *req, int error) {
        struct cluster_commit *cc = container_of(req, struct cluster_commit, req);
        uint32_t n = cc->node_count;
        char dir[OBJECT_KEY_MAX + 1];

        if (!commit_req_ended(cc))
                return;
        if (error < 0) {
                if (error == -ECANCELED)
                        return;
                if (req->result.permanent) {
                        char why[400];
                        s3_result_describe(&req->result, error, why, sizeof(why));
                        commit_fail(cc, "listing the node manifests: %s", why);
                } else {
                        commit_poll_later(cc);
                }
                return;
        }
        object_key_step_dir(dir, sizeof(dir), cc->prefix, cc->job, cc->step);
        size_t dlen = strlen(dir);
        for (size_t i = 0; i < cc->olist.count; i++) {
                const struct s3_object *ob = &cc->olist.objects[i];
                unsigned node;
                char tail[32];
                if (strncmp(ob->key, dir, dlen))
                        continue;
                if (sscanf(ob->key + dlen, "nodes/%u.manifes%31s", &node, tail) != 2 ||
                    strcmp(tail, "t") || node >= n)
                        continue;
                char expect[OBJECT_KEY_MAX + 1];
                object_key_node_manifest(expect, sizeof(expect), cc->prefix, cc->job, cc->step,
                                         node);
                if (strcmp(expect, ob->key) || ob->size > COMMIT_MANIFEST_MAX)
                        continue;
                if (cc->manifest_sizes[node] == UINT64_MAX)
                        cc->manifests_seen++;
                cc->manifest_sizes[node] = ob->size;
        }
        if (cc->olist.truncated) {
                char token[S3_TOKEN_MAX + 1];
                snprintf(token, sizeof(token), "%s", cc->olist.next_token);
                commit_list(cc, token);
                return;
        }
        if (cc->manifests_seen < n) {
                log_debug("flush: job %s step %" PRIu64 ": %u of %u node manifests present",
                          cc->job, cc->step, cc->manifests_seen, n);
                commit_poll_later(cc);
                return;
        }
        cc->fetch_next = 0;
        commit_fetch_next(cc);
}

static void commit_list(struct cluster_commit *cc, const char *token) {
        uint32_t n = cc->node_count;
        char prefix[OBJECT_KEY_MAX + 16];

        if (!token) {
                for (uint32_t i = 0; i < n; i++)
                        cc->manifest_sizes[i] = UINT64_MAX;
                cc->manifests_seen = 0;
        }
        object_key_step_dir(prefix, sizeof(prefix), cc->prefix, cc->job, cc->step);
        strncat(prefix, "nodes/", sizeof(prefix) - strlen(prefix) - 1);
        cc->olist.count = 0;
        cc->req = (struct s3_request){ .done = commit_list_done };
        int r = s3_list_objects(cc->s3, &cc->req, prefix, NULL, token, &cc->olist);
        if (r < 0) {
                commit_fail(cc, "cannot start ListObjectsV2 %s: %s", prefix, strerror(-r));
                return;
        }
        cc->req_busy = true;
}

void cluster_commit_start(struct cluster_commit *cc) {
        uint32_t n = cc->node_count;

        cc->poll_ms = 0;
        if (!commit_is_coordinator(cc)) {
                commit_head(cc);
                return;
        }
        if (!cc->manifest_sizes) {
                cc->manifest_sizes = calloc(n, sizeof(*cc->manifest_sizes));
                cc->nms = calloc(n, sizeof(*cc->nms));
                cc->texts = calloc(n, sizeof(*cc->texts));
                cc->lens = calloc(n, sizeof(*cc->lens));
                cc->olist.objects = calloc(S3_LIST_MAX, sizeof(*cc->olist.objects));
                cc->olist.capacity = S3_LIST_MAX;
                if (!cc->manifest_sizes || !cc->nms || !cc->texts || !cc->lens ||
                    !cc->olist.objects) {
                        commit_fail(cc, "out of memory");
                        return;
                }
        }
        commit_list(cc, NULL);
}

void cluster_commit_stop(struct cluster_commit *cc) {
        cc->stopped = true;
        loop_timer_cancel(&cc->timer);
        if (cc->req_busy)
                s3_request_cancel(cc->s3, &cc->req);
}

bool cluster_commit_busy(const struct cluster_commit *cc) {
        return cc->req_busy;
}

int cluster_commit_new(struct cluster_commit **out, struct loop *loop, struct s3_client *s3,
                       const struct cluster_commit_options *opts,
                       const struct cluster_commit_ops *ops, void *userdata) {
        if (!out || !loop || !s3 || !opts || !opts->job || !ops || !ops->done || !ops->failed ||
            !ops->idle || opts->node_count < 1 || opts->node_index >= opts->node_count)
                return -EINVAL;
        struct cluster_commit *cc = calloc(1, sizeof(*cc));
        if (!cc)
                return -ENOMEM;
        cc->loop = loop;
        cc->s3 = s3;
        cc->ops = ops;
        cc->userdata = userdata;
        snprintf(cc->prefix, sizeof(cc->prefix), "%s", opts->prefix ? opts->prefix : "");
        snprintf(cc->job, sizeof(cc->job), "%s", opts->job);
        cc->step = opts->step;
        cc->node_index = opts->node_index;
        cc->node_count = opts->node_count;
        *out = cc;
        return 0;
}

struct cluster_commit *cluster_commit_free(struct cluster_commit *cc) {
        if (!cc)
                return NULL;
        cc->freeing = true;
        cluster_commit_stop(cc);
        free(cc->olist.objects);
        free(cc->manifest_sizes);
        if (cc->nms) {
                for (uint32_t i = 0; i < cc->node_count; i++) {
                        node_manifest_free(cc->nms[i]);
                        free(cc->texts[i]);
                }
        }
        free(cc->nms);
        free(cc->texts);
        free(cc->lens);
        free(cc->commit_text);
        free(cc);
        return NULL;
}
