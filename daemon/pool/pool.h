/* SPDX-License-Identifier: MIT */
/*
 * pool — the shared-memory slots shard bytes travel through.
 *
 * The pool is `count` slots of `slot_size` bytes, each its own memfd, mapped
 * in the daemon and (once granted) in the client.  Every slot is written
 * once at start so the first save does not pay for page faults (fresh
 * memory runs at a fraction of the speed of memory already touched), and it
 * is registered with the ring as a fixed buffer so O_DIRECT writes and reads
 * skip per-I/O page pinning.
 *
 * Memory stays bounded: a request for a slot when none is free waits in FIFO
 * order up to a timeout, then fails with -ETIMEDOUT.
 *
 * Isolation between users: a client keeps its mapping of a slot's memfd for
 * as long as it likes, so a slot granted to uid A is never handed to uid B
 * with the same memory.  Each slot remembers the uid it last served; the
 * pool prefers free slots of the same uid, then never-used ones, and when it
 * must give another uid's slot away it replaces the slot's memfd first (new
 * generation number, new memory, re-registered).  On a node that runs one
 * job's trainers under one uid that never happens.
 *
 * Not thread-safe: loop thread only (the memory itself is read by workers).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "io/loop.h"
#include "util/list.h"

#define POOL_UID_NONE UINT32_MAX

struct slot {
        uint32_t id;
        uint32_t gen;        /* bumped when the memory is replaced */
        int memfd;
        void *addr;          /* daemon's mapping, slot_size bytes */
        uint32_t owner_uid;  /* last uid it served, or POOL_UID_NONE */
        bool busy;
        struct list link;    /* on the free list while !busy */
};

struct pool_waiter {
        struct list link;
        struct loop_timer timer;
        struct pool *pool;
        uint32_t uid;
        /* Called once: with a slot (now busy, owned by the waiter), or with
         * NULL and -ETIMEDOUT / -ECANCELED (pool shutting down). */
        void (*cb)(struct pool_waiter *w, struct slot *slot, int error);
};

struct pool;

int pool_new(struct pool **out, struct loop *loop, uint64_t pool_size, uint64_t slot_size,
             bool register_buffers);
/* Fails every waiter with -ECANCELED; all slots must be released. */
struct pool *pool_free(struct pool *p);

uint64_t pool_slot_size(const struct pool *p);
uint32_t pool_slot_count(const struct pool *p);
uint32_t pool_slots_used(const struct pool *p);
uint32_t pool_waiters(const struct pool *p);
/* True when slots are registered fixed buffers (index = slot id). */
bool pool_fixed(const struct pool *p);
struct slot *pool_slot(struct pool *p, uint32_t id); /* NULL if out of range */

/* Take a free slot for uid now, or NULL (expected when the pool is busy).
 * -errno only on failure to replace memory: returned through *error. */
struct slot *pool_try_acquire(struct pool *p, uint32_t uid, int *error);

/* Queue for a slot; cb runs later (never from inside this call). */
void pool_wait(struct pool *p, struct pool_waiter *w, uint32_t uid, uint64_t timeout_ms,
               void (*cb)(struct pool_waiter *w, struct slot *slot, int error));
void pool_wait_cancel(struct pool *p, struct pool_waiter *w);

/* Return a slot; the oldest waiter gets it. */
void pool_release(struct pool *p, struct slot *slot);
