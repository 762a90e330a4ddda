/* SPDX-License-Identifier: MIT */
/*
 * worker — a small thread pool for CPU-heavy work (checksumming gigabytes,
 * removing directory trees) that must not stall the event loop.
 *
 * Hand-off is explicit: the loop thread submits a struct work; a worker runs
 * work->run() (touching only what the work item owns); the loop thread then
 * gets work->done() through an eventfd it watches.  The item is owned by the
 * pool between submit and done.
 */
#pragma once

#include "io/loop.h"
#include "util/list.h"

struct work {
        struct list link;
        void (*run)(struct work *w);  /* worker thread */
        void (*done)(struct work *w); /* loop thread */
};

struct worker_pool;

int worker_pool_new(struct worker_pool **out, struct loop *loop, unsigned threads);
/* Stops the threads after the queued work ran; done() callbacks of work
 * still queued are run (from the caller's thread).  Accepts NULL. */
struct worker_pool *worker_pool_free(struct worker_pool *p);
void worker_pool_submit(struct worker_pool *p, struct work *w);
/* Items submitted whose done() has not run yet. */
unsigned worker_pool_pending(struct worker_pool *p);
