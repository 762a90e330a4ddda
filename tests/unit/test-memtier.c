/* SPDX-License-Identifier: MIT */
/*
 * test-memtier — the memory tier against a real pool: a committed rank's
 * shards are found, located and checked; the pool's evictor gives back the
 * oldest step first when a request finds no memory, and a shard a client
 * saw goes back revoked (the slot gets new memory before it is lent
 * again); a changed byte fails the check; committing a step drops the older
 * one; a failed rank and a partial shard are never served.  A replica (kept
 * under its source node) is never found as this node's own, is given back
 * before this node's own ranks, and is copied out checked (memtier_copy,
 * what a peer link sends from).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "io/loop.h"
#include "local/manifest.h"
#include "memory/memtier.h"
#include "pool/pool.h"

#define UNITS 4
#define SLOT (UNITS * POOL_UNIT)
#define CHECK(cond)                                                                           \
        do {                                                                                  \
                if (!(cond)) {                                                                \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
                        exit(1);                                                              \
                }                                                                             \
        } while (0)

#define UID 1000

/* Save (job, step, rank 0) of src: one shard "w" of `size` bytes in a
 * whole slot, filled with `byte`, kept and landed; returns the extent. */
static struct pool_extent save_of(struct pool *p, struct memtier *mt, uint32_t src,
                                  const char *job, uint64_t step, uint64_t size, int byte) {
        struct pool_extent e;
        CHECK(pool_try_acquire(p, UID, UNITS, &e) == 1 && e.count == UNITS);
        memset(pool_extent_addr(&e), byte, size);
        CHECK(memtier_keep(mt, src, job, step, 0, UID, "w", size, 0, size, &e));
        struct manifest *m;
        CHECK(manifest_new(&m, job, step, 0, 1, UID) == 0);
        uint32_t blocks[UNITS];
        uint64_t nblocks = (size + MANIFEST_BLOCK_SIZE - 1) / MANIFEST_BLOCK_SIZE;
        for (uint64_t i = 0; i < nblocks; i++)
                blocks[i] = crc32c(0, (char *)pool_extent_addr(&e) + i * MANIFEST_BLOCK_SIZE,
                                   i + 1 < nblocks ? MANIFEST_BLOCK_SIZE
                                                   : size - i * MANIFEST_BLOCK_SIZE);
        CHECK(manifest_add_shard(m, "w", size, crc32c(0, pool_extent_addr(&e), size), blocks) == 0);
        memtier_rank_landed(mt, src, m);
        manifest_free(m);
        return e;
}

static struct pool_extent save(struct pool *p, struct memtier *mt, const char *job,
                               uint64_t step, uint64_t size, int byte) {
        return save_of(p, mt, MEMTIER_OWN, job, step, size, byte);
}

/* Replicas: their own key, given back first, copied out checked. */
static void replicas(struct pool *pool, struct memtier *mt) {
        uint64_t bad;

        /* node 3's rank 0 of r/5 is not this node's rank 0 of r/5 */
        (void)save(pool, mt, "r", 5, 2 * POOL_UNIT, 0x44);
        struct pool_extent rep = save_of(pool, mt, 3, "r", 5, 3 * POOL_UNIT + 9, 0x55);
        memtier_step_committed(mt, 3, "r", 5);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "r", 5, 0, "w")); /* only node 3's committed */
        CHECK(!memtier_step_resident(mt, "r", 5) && memtier_steps(mt) == 0);
        memtier_step_committed(mt, MEMTIER_OWN, "r", 5);
        struct memtier_shard *o = memtier_find(mt, MEMTIER_OWN, "r", 5, 0, "w");
        struct memtier_shard *r = memtier_find(mt, 3, "r", 5, 0, "w");
        CHECK(o && r && o != r && memtier_shard_size(o) == 2 * POOL_UNIT &&
              memtier_shard_size(r) == 3 * POOL_UNIT + 9);
        CHECK(!memtier_find(mt, 4, "r", 5, 0, "w"));
        /* a step of the job counts once, for this node's own ranks */
        CHECK(memtier_steps(mt) == 1 && memtier_step_resident(mt, "r", 5));

        /* copied out whole blocks at a time, and the copy is what is checked */
        static char buf[4 * POOL_UNIT];
        memset(buf, 0, sizeof(buf));
        CHECK(memtier_copy(r, POOL_UNIT, 2 * POOL_UNIT + 9, buf, &bad) == 0);
        for (uint64_t i = 0; i < 2 * POOL_UNIT + 9; i++)
                CHECK((unsigned char)buf[i] == 0x55);
        CHECK(memtier_copy(r, 3, POOL_UNIT, buf, &bad) == -EINVAL);      /* not on a block */
        CHECK(memtier_copy(r, 0, POOL_UNIT + 1, buf, &bad) == -EINVAL);  /* ends mid-block */
        CHECK(memtier_copy(r, 0, 4 * POOL_UNIT, buf, &bad) == -EINVAL);  /* past the end */
        ((char *)pool_extent_addr(&rep))[3 * POOL_UNIT + 2] ^= 1;
        CHECK(memtier_copy(r, 0, 3 * POOL_UNIT + 9, buf, &bad) == -EBADMSG && bad == 3);
        CHECK(memtier_copy(r, 0, 3 * POOL_UNIT, buf, &bad) == 0);
        ((char *)pool_extent_addr(&rep))[3 * POOL_UNIT + 2] ^= 1;

        /* the pool is full (two slots): the replica goes back first, though
         * it is the newer of the two */
        struct pool_extent x;
        CHECK(pool_try_acquire(pool, UID, UNITS, &x) == 1 && x.slot == rep.slot);
        CHECK(!memtier_find(mt, 3, "r", 5, 0, "w") &&
              memtier_find(mt, MEMTIER_OWN, "r", 5, 0, "w"));
        pool_release(pool, &x);

        /* a shard spread over two extents is copied across them */
        memtier_drop_step(mt, MEMTIER_OWN, "r", 5);
        CHECK(memtier_bytes(mt) == 0 && pool_slots_used(pool) == 0);
        struct pool_extent a, b;
        CHECK(pool_try_acquire(pool, UID, 1, &a) == 1 && pool_try_acquire(pool, UID, 1, &b) == 1);
        memset(pool_extent_addr(&a), 0x66, POOL_UNIT);
        memset(pool_extent_addr(&b), 0x77, POOL_UNIT);
        /* kept in the other order: windows are written in any order */
        CHECK(memtier_keep(mt, 3, "s", 1, 2, UID, "w", 2 * POOL_UNIT, POOL_UNIT, POOL_UNIT, &b));
        CHECK(memtier_keep(mt, 3, "s", 1, 2, UID, "w", 2 * POOL_UNIT, 0, POOL_UNIT, &a));
        struct manifest *m;
        uint32_t blocks[2] = { crc32c(0, pool_extent_addr(&a), POOL_UNIT),
                               crc32c(0, pool_extent_addr(&b), POOL_UNIT) };
        CHECK(manifest_new(&m, "s", 1, 2, 4, UID) == 0);
        uint32_t whole = crc32c(crc32c(0, pool_extent_addr(&a), POOL_UNIT), pool_extent_addr(&b),
                                POOL_UNIT);
        CHECK(manifest_add_shard(m, "w", 2 * POOL_UNIT, whole, blocks) == 0);
        memtier_rank_landed(mt, 3, m);
        manifest_free(m);
        memtier_step_committed(mt, 3, "s", 1);
        r = memtier_find(mt, 3, "s", 1, 2, "w");
        CHECK(r && memtier_copy(r, 0, 2 * POOL_UNIT, buf, &bad) == 0);
        CHECK((unsigned char)buf[POOL_UNIT - 1] == 0x66 && (unsigned char)buf[POOL_UNIT] == 0x77);
        /* a replica's step of its own tier goes with it */
        memtier_drop_step(mt, MEMTIER_OWN, "s", 1);
        CHECK(memtier_find(mt, 3, "s", 1, 2, "w"));
        memtier_drop_step(mt, 3, "s", 1);
        CHECK(memtier_bytes(mt) == 0 && pool_slots_used(pool) == 0);
}

int main(void) {
        struct loop *loop;
        struct pool *pool;
        struct memtier *mt;
        struct pool_extent e, x;
        uint64_t in, bad;

        int r = loop_new(&loop, 64);
        if (r < 0) {
                fprintf(stderr, "io_uring unavailable (%s): skipping\n", strerror(-r));
                return 77;
        }
        CHECK(pool_new(&pool, loop, 2 * SLOT, SLOT, false, false) == 0);
        CHECK(memtier_new(&mt, pool) == 0);

        /* not readable before its step commits */
        uint64_t size = 3 * POOL_UNIT + 5;
        struct pool_extent e1 = save(pool, mt, "j", 1, size, 0x11);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "j", 1, 0, "w"));
        CHECK(!memtier_step_resident(mt, "j", 1) && memtier_steps(mt) == 0);
        memtier_step_committed(mt, MEMTIER_OWN, "j", 1);
        struct memtier_shard *sh = memtier_find(mt, MEMTIER_OWN, "j", 1, 0, "w");
        CHECK(sh && memtier_shard_size(sh) == size && memtier_step_resident(mt, "j", 1));
        CHECK(memtier_steps(mt) == 1 && memtier_bytes(mt) == SLOT);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "j", 1, 0, "other") &&
              !memtier_find(mt, MEMTIER_OWN, "j", 2, 0, "w"));

        /* located in one run, checked, and mappable as one */
        CHECK(memtier_locate(sh, POOL_UNIT + 3, 1ull << 30, &e, &in) == size - POOL_UNIT - 3);
        CHECK(e.slot == e1.slot && in == POOL_UNIT + 3);
        CHECK(memtier_verify(sh, POOL_UNIT + 3, size - POOL_UNIT - 3, &bad) == 0);
        struct slot *slot;
        uint64_t off;
        CHECK(memtier_contiguous(sh, &slot, &off) && slot == e1.slot && off == 0);

        /* a byte changed in memory fails the blocks that hold it only */
        ((char *)pool_extent_addr(&e1))[2 * POOL_UNIT + 7] ^= 1;
        CHECK(memtier_verify(sh, 0, POOL_UNIT, &bad) == 0);
        CHECK(memtier_verify(sh, 0, size, &bad) == -EBADMSG && bad == 2);
        ((char *)pool_extent_addr(&e1))[2 * POOL_UNIT + 7] ^= 1;

        /* step 2 of the same job, committed: step 1 goes back to the pool */
        struct pool_extent e2 = save(pool, mt, "j", 2, POOL_UNIT, 0x22);
        CHECK(pool_slots_used(pool) == 2);
        memtier_step_committed(mt, MEMTIER_OWN, "j", 2);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "j", 1, 0, "w") &&
              memtier_find(mt, MEMTIER_OWN, "j", 2, 0, "w"));
        CHECK(pool_slots_used(pool) == 1 && memtier_bytes(mt) == SLOT);

        /* another job's step fills the pool; a request finding no memory
         * has the oldest (job j step 2) given back, and is served */
        struct pool_extent e3 = save(pool, mt, "k", 7, SLOT, 0x33);
        memtier_step_committed(mt, MEMTIER_OWN, "k", 7);
        CHECK(pool_slots_used(pool) == 2);
        /* a client looks at k/7 through a READ reply */
        struct memtier_shard *k7 = memtier_find(mt, MEMTIER_OWN, "k", 7, 0, "w");
        CHECK(k7);
        memtier_pin(k7);
        CHECK(pool_try_acquire(pool, UID, UNITS, &x) == 1 && x.slot == e2.slot);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "j", 2, 0, "w") &&
              memtier_find(mt, MEMTIER_OWN, "k", 7, 0, "w"));
        /* the next request takes k/7's slot: revoked, since a READ points
         * at it, so it gets new memory first */
        uint32_t gen = e3.slot->gen;
        struct pool_extent y;
        CHECK(pool_try_acquire(pool, UID, UNITS, &y) == 1 && y.slot == e3.slot);
        CHECK(y.slot->gen == gen + 1 && ((unsigned char *)pool_extent_addr(&y))[0] == 0);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "k", 7, 0, "w") && memtier_bytes(mt) == 0);
        memtier_unpin(mt, k7, false); /* frees the orphan */
        /* nothing left to give back: the pool is simply full */
        CHECK(pool_try_acquire(pool, UID, 1, &e) == 0);
        pool_release(pool, &x);
        pool_release(pool, &y);

        /* a shard not wholly kept is never served; a failed rank goes */
        CHECK(pool_try_acquire(pool, UID, 1, &e) == 1);
        CHECK(memtier_keep(mt, MEMTIER_OWN, "j", 3, 0, UID, "w", 2 * POOL_UNIT, 0, POOL_UNIT, &e));
        struct manifest *m;
        uint32_t blocks[2] = { 0, 0 };
        CHECK(manifest_new(&m, "j", 3, 0, 1, UID) == 0);
        CHECK(manifest_add_shard(m, "w", 2 * POOL_UNIT, 0, blocks) == 0);
        memtier_rank_landed(mt, MEMTIER_OWN, m);
        manifest_free(m);
        memtier_step_committed(mt, MEMTIER_OWN, "j", 3);
        CHECK(!memtier_find(mt, MEMTIER_OWN, "j", 3, 0, "w") && memtier_bytes(mt) == 0);
        CHECK(pool_slots_used(pool) == 0);
        CHECK(pool_try_acquire(pool, UID, 1, &e) == 1);
        CHECK(memtier_keep(mt, MEMTIER_OWN, "j", 4, 0, UID, "w", POOL_UNIT, 0, POOL_UNIT, &e));
        memtier_drop_rank(mt, MEMTIER_OWN, "j", 4, 0);
        CHECK(memtier_bytes(mt) == 0 && pool_slots_used(pool) == 0);

        replicas(pool, mt);

        mt = memtier_free(mt);
        pool_free(pool);
        loop_free(loop);
        printf("memtier: ok\n");
        return 0;
}
