/* SPDX-License-Identifier: MIT */
/*
 * pool — the shared-memory slots shard bytes travel through.
 *
 * The pool is `count` slots of `slot_size` bytes, each its own memfd, mapped
 * in the daemon and (once granted) in the client.  Every slot is written
 * once before it is first lent so the first save does not pay for page
 * faults (fresh memory runs at a fraction of the speed of memory already
 * touched) — the first few at pool_new(), the rest on a thread meanwhile —
 * and it is registered with the ring as a fixed buffer so O_DIRECT writes
 * and reads skip per-I/O page pinning.
 *
 * Slots are the unit of mapping, fd passing and registration; what the pool
 * lends is an extent: a run of POOL_UNIT (1 MiB) units inside one slot.  So
 * a 4 KiB shard holds 1 MiB of the pool while it is in flight, not a whole
 * slot, and pool memory in use tracks the bytes in flight.  A request gets
 * the units it asks for when a run that long is free, else the longest run
 * free (a shorter window just means one more round trip).
 *
 * Memory stays bounded: a request when no unit is free waits in FIFO order
 * up to a timeout, then fails with -ETIMEDOUT.
 *
 * Isolation between users: a client keeps its mapping of a slot's memfd for
 * as long as it likes, so a slot granted to uid A is never handed to uid B
 * with the same memory.  Each slot remembers the uid it last served and
 * lends extents only to that uid while any of them is out; the pool prefers
 * slots of the same uid, then never-used ones, and when it must give another
 * uid's (fully free) slot away it replaces the slot's memfd first (new
 * generation number, new memory, re-registered).  On a node that runs one
 * job's trainers under one uid that never happens.
 *
 * Fair shares between uids: because of that rule the unit that uids compete
 * for is the slot, so a uid's holding is the number of slots with any unit
 * lent to it (docs/design-decisions.md, "Fair shares of the slot pool").  A
 * uid is active while it holds a slot or has a request queued.  With
 * `fair_share` each active uid may hold ceil(slots / active uids) slots, the
 * whole pool when it is alone; `max_slots_per_uid` caps it further.  A uid
 * at its share still packs windows into the slots it holds but takes no
 * fresh one; one over it (a second uid arrived while it held everything)
 * gets nothing until its windows come back below the share.  Its queued
 * requests never hold up the queue: pool_wake() passes over a waiter whose
 * uid is at its share and serves the next.  The "whole" variants are the
 * daemon's own transfers (a peer's frame, an object-store range): their
 * slots count towards the uid whose data they carry, but they are never
 * refused for a share — they hold memory only until it is on disk, and
 * their own limits bound them.
 *
 * Memory that a client may still write into (a window lent and never handed
 * back: its save was aborted, or its lease ran out) is returned with
 * pool_revoke(): the slot then lends nothing more until it is fully free,
 * and gets new memory before it is lent again, so a late write lands in
 * memory nobody reads.
 *
 * Memory kept after its transfer (the memory tier, memory/memtier.h: the
 * newest committed step of each job) stays lent in the pool's books; the
 * pool knows nothing of it but a hook, pool_set_evictor(): a request that
 * finds no memory first asks the hook to give some back, again and again
 * until the request is served or the hook has nothing left, before it
 * fails or waits.  So staging always wins, and the kept memory never
 * holds up a transfer.
 *
 * Not thread-safe: loop thread only (the memory itself is read by workers).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "io/loop.h"
#include "util/list.h"

#define POOL_UID_NONE UINT32_MAX
#define POOL_UNIT (1u << 20)
#define POOL_UNITS_MAX 1024 /* per slot: slot_size <= 1 GiB */

struct slot {
        uint32_t id;
        uint32_t gen;        /* bumped when the memory is replaced */
        int memfd;
        void *addr;          /* daemon's mapping, slot_size bytes */
        uint32_t owner_uid;  /* last uid it served, or POOL_UID_NONE */
        bool renew;          /* revoked memory in it: replace before lending again */
        uint32_t used_units;
        uint64_t used_map[POOL_UNITS_MAX / 64]; /* bit set: unit lent */
};

/* Units [first, first + count) of a slot. */
struct pool_extent {
        struct slot *slot;
        uint32_t first, count;
};

static inline void *pool_extent_addr(const struct pool_extent *e) {
        return (char *)e->slot->addr + (uint64_t)e->first * POOL_UNIT;
}
static inline uint64_t pool_extent_offset(const struct pool_extent *e) {
        return (uint64_t)e->first * POOL_UNIT;
}
static inline uint64_t pool_extent_bytes(const struct pool_extent *e) {
        return (uint64_t)e->count * POOL_UNIT;
}

struct pool_waiter {
        struct list link;
        struct loop_timer timer;
        struct pool *pool;
        uint32_t uid;
        uint32_t want;
        bool whole;                /* only all `want` units in one run will do */
        /* Called once: with an extent (now lent to the waiter), or with
         * NULL and -ETIMEDOUT / -ECANCELED (pool shutting down). */
        void (*cb)(struct pool_waiter *w, const struct pool_extent *e, int error);
};

struct pool;

/* How much of the pool one uid may hold (see the top of this file). */
struct pool_limits {
        bool fair_share;            /* ceil(slots / active uids) each */
        uint32_t max_slots_per_uid; /* 0: no fixed cap */
};

/* One uid's holding, for messages that say who holds the pool. */
struct pool_holder {
        uint32_t uid;
        uint32_t slots;   /* slots with any unit lent to it */
        uint64_t units;   /* units lent to it */
        uint32_t waiters; /* requests of it queued */
};

/*
 * background: touch the first POOL_FIRST_SLOTS slots now and the rest on a
 * thread, lending each as it becomes ready (a daemon answers, and a node
 * restores, within a fraction of a second instead of after touching the
 * whole pool: ~1.3 s per GiB here).  Otherwise every slot is ready on
 * return.
 */
int pool_new(struct pool **out, struct loop *loop, uint64_t pool_size, uint64_t slot_size,
             bool register_buffers, bool background);
/* Fails every waiter with -ECANCELED; all slots must be released. */
struct pool *pool_free(struct pool *p);

uint64_t pool_slot_size(const struct pool *p);
uint32_t pool_slot_count(const struct pool *p);
uint32_t pool_slots_ready(const struct pool *p); /* touched and lendable */
uint32_t pool_slots_used(const struct pool *p); /* slots with any unit lent */
uint64_t pool_bytes_used(const struct pool *p);
uint32_t pool_waiters(const struct pool *p);
/* True when slots are registered fixed buffers (index = slot id). */
bool pool_fixed(const struct pool *p);
struct slot *pool_slot(struct pool *p, uint32_t id); /* NULL if out of range */

/* The default is fair_share on, no fixed cap.  A change that raises a share
 * serves the waiters it lets through (later, from the loop). */
void pool_set_limits(struct pool *p, const struct pool_limits *limits);
/* Slots uid holds now, and the most it may hold were it to ask now (its
 * share counts uid as active). */
uint32_t pool_uid_slots(const struct pool *p, uint32_t uid);
uint32_t pool_uid_share(const struct pool *p, uint32_t uid);
/* uids holding slots or waiting. */
uint32_t pool_active_uids(const struct pool *p);
/* Up to max holders, largest holding first; returns how many were filled. */
uint32_t pool_holders(const struct pool *p, struct pool_holder *out, uint32_t max);

/* Lend uid up to `want` units (1 <= want <= units per slot) now: returns
 * 1 and fills *e, or 0 when nothing is free or uid is at its share
 * (expected when the pool is busy), or -errno when replacing a slot's
 * memory failed. */
int pool_try_acquire(struct pool *p, uint32_t uid, uint32_t want, struct pool_extent *e);
/* The same, but all `want` units or nothing: for data whose size is fixed
 * before the memory is found (a peer's frame, an object-store range).
 * Daemon-internal: never refused for uid's share. */
int pool_try_acquire_whole(struct pool *p, uint32_t uid, uint32_t want, struct pool_extent *e);
/* pool_try_acquire(), but only from memory free now: the memory tier is
 * not asked to give any back (a read-ahead is worth less than a kept step). */
int pool_try_acquire_spare(struct pool *p, uint32_t uid, uint32_t want, struct pool_extent *e);

/* Queue for units; cb runs later (never from inside this call), with up to
 * `want` units: fewer when only a shorter run is free.  Waiters are served
 * in order, except that one whose uid is at its share is passed over. */
void pool_wait(struct pool *p, struct pool_waiter *w, uint32_t uid, uint32_t want,
               uint64_t timeout_ms,
               void (*cb)(struct pool_waiter *w, const struct pool_extent *e, int error));
/* The same, served only with all `want` units in one run (a waiter that
 * could not use fewer; the queue stays in order behind it). */
void pool_wait_whole(struct pool *p, struct pool_waiter *w, uint32_t uid, uint32_t want,
                     uint64_t timeout_ms,
                     void (*cb)(struct pool_waiter *w, const struct pool_extent *e, int error));
void pool_wait_cancel(struct pool *p, struct pool_waiter *w);

/* Return an extent; waiters are served in order. */
void pool_release(struct pool *p, const struct pool_extent *e);
/* Return an extent whose holder may still write into it (a client's window
 * that was never handed back): nothing more of its slot is lent until the
 * slot is free and has new memory. */
void pool_revoke(struct pool *p, const struct pool_extent *e);

/* The memory tier's hook: evict() gives back (pool_release / pool_revoke)
 * the oldest memory it keeps and returns true, or false when it keeps
 * none.  Called from inside a request that found no memory (never from a
 * release); its releases serve no waiter until it returns.  NULL: none. */
void pool_set_evictor(struct pool *p, bool (*evict)(void *data), void *data);

/* Units needed for `bytes` (rounded up), capped at one slot. */
uint32_t pool_units_for(const struct pool *p, uint64_t bytes);
