/* SPDX-License-Identifier: MIT */
/*
 * cluster_commit — the last phase of a step's flush: the step's COMMIT
 * object (docs/object-layout.md).
 *
 * After this node's manifest is in the store, the coordinator (node 0)
 * lists <step>/nodes/ until all node_count manifests are there, reads them,
 * checks that together they cover every rank exactly once
 * (commit_object_build) and writes COMMIT with If-None-Match: * — written
 * once even if two coordinators race, or an earlier attempt's answer was
 * lost.  Every other node polls with HEAD until COMMIT exists.  Polls back
 * off from 100 ms to 5 s; a retryable failure polls again, a permanent one
 * ends the commit through ops->failed.
 *
 * Owns: struct cluster_commit — its one S3 request, its poll timer and the
 * manifests it fetched.  Borrows the loop and the S3 client.  The owner
 * (remote/flush, one per step) decides what done and failed mean for the
 * step's state.  Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "io/loop.h"
#include "remote/s3.h"

struct cluster_commit;

struct cluster_commit_options {
        const char *prefix;       /* bucket key prefix, "" for none (copied) */
        const char *job;          /* copied */
        uint64_t step;
        uint32_t node_index, node_count;
};

/* Calls to the owner, each from a done() or timer callback, never from
 * inside a cluster_commit_* call but cluster_commit_start (failed, out of
 * memory) and cluster_commit_stop (idle). */
struct cluster_commit_ops {
        /* COMMIT is in the store. */
        void (*done)(void *userdata);
        /* A permanent failure; msg says what (the owner adds job and step). */
        void (*failed)(void *userdata, const char *msg);
        /* A request ended after cluster_commit_stop(): the owner may free
         * the commit once cluster_commit_busy() is false. */
        void (*idle)(void *userdata);
};

/* loop, s3, ops and userdata are borrowed and must outlive the commit. */
int cluster_commit_new(struct cluster_commit **out, struct loop *loop, struct s3_client *s3,
                       const struct cluster_commit_options *opts,
                       const struct cluster_commit_ops *ops, void *userdata);
/* Frees without calling the owner (a request still in flight is cancelled
 * silently).  Accepts NULL; returns NULL. */
struct cluster_commit *cluster_commit_free(struct cluster_commit *cc);

/* Begin, once: the coordinator lists the node manifests, every other node
 * HEADs COMMIT. */
void cluster_commit_start(struct cluster_commit *cc);
/* Stop: the poll timer is cancelled and the request in flight cancelled;
 * its done() calls ops->idle. */
void cluster_commit_stop(struct cluster_commit *cc);
/* True while a request of the commit is at the S3 client. */
bool cluster_commit_busy(const struct cluster_commit *cc);
