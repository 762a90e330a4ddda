/* SPDX-License-Identifier: MIT */
/*
 * test-memtier — the memory tier against a real pool: a committed rank's
 * shards are found, located and checked; the pool's evictor gives back the
 * oldest step first when a request finds no memory, and a shard a client
 * saw goes back revoked (the slot gets new memory before it is lent
 * again); a changed byte fails the check; committing a step drops the older
 * one; a failed rank and a partial shard are never served.
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

/* Save (job, step, rank 0): one shard "w" of `size` bytes in a whole slot,
 * filled with `byte`, kept and landed; returns the extent. */
static struct pool_extent save(struct pool *p, struct memtier *mt, const char *job,
                               uint64_t step, uint64_t size, int byte) {
        struct pool_extent e;
        CHECK(pool_try_acquire(p, UID, UNITS, &e) == 1 && e.count == UNITS);
        memset(pool_extent_addr(&e), byte, size);
        CHECK(memtier_keep(mt, job, step, 0, UID, "w", size, 0, size, &e));
        struct manifest *m;
        CHECK(manifest_new(&m, job, step, 0, 1, UID) == 0);
        uint32_t blocks[UNITS];
        uint64_t nblocks = (size + MANIFEST_BLOCK_SIZE - 1) / MANIFEST_BLOCK_SIZE;
        for (uint64_t i = 0; i < nblocks; i++)
                blocks[i] = crc32c(0, (char *)pool_extent_addr(&e) + i * MANIFEST_BLOCK_SIZE,
                                   i + 1 < nblocks ? MANIFEST_BLOCK_SIZE
                                                   : size - i * MANIFEST_BLOCK_SIZE);
        CHECK(manifest_add_shard(m, "w", size, crc32c(0, pool_extent_addr(&e), size), blocks) == 0);
        memtier_rank_landed(mt, m);
        manifest_free(m);
        return e;
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
        CHECK(!memtier_find(mt, "j", 1, 0, "w"));
        CHECK(!memtier_step_resident(mt, "j", 1) && memtier_steps(mt) == 0);
        memtier_step_committed(mt, "j", 1);
        struct memtier_shard *sh = memtier_find(mt, "j", 1, 0, "w");
        CHECK(sh && memtier_shard_size(sh) == size && memtier_step_resident(mt, "j", 1));
        CHECK(memtier_steps(mt) == 1 && memtier_bytes(mt) == SLOT);
        CHECK(!memtier_find(mt, "j", 1, 0, "other") && !memtier_find(mt, "j", 2, 0, "w"));

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
        memtier_step_committed(mt, "j", 2);
        CHECK(!memtier_find(mt, "j", 1, 0, "w") && memtier_find(mt, "j", 2, 0, "w"));
        CHECK(pool_slots_used(pool) == 1 && memtier_bytes(mt) == SLOT);

        /* another job's step fills the pool; a request finding no memory
         * has the oldest (job j step 2) given back, and is served */
        struct pool_extent e3 = save(pool, mt, "k", 7, SLOT, 0x33);
        memtier_step_committed(mt, "k", 7);
        CHECK(pool_slots_used(pool) == 2);
        /* a client looks at k/7 through a READ reply */
        struct memtier_shard *k7 = memtier_find(mt, "k", 7, 0, "w");
        CHECK(k7);
        memtier_pin(k7);
        CHECK(pool_try_acquire(pool, UID, UNITS, &x) == 1 && x.slot == e2.slot);
        CHECK(!memtier_find(mt, "j", 2, 0, "w") && memtier_find(mt, "k", 7, 0, "w"));
        /* the next request takes k/7's slot: revoked, since a READ points
         * at it, so it gets new memory first */
        uint32_t gen = e3.slot->gen;
        struct pool_extent y;
        CHECK(pool_try_acquire(pool, UID, UNITS, &y) == 1 && y.slot == e3.slot);
        CHECK(y.slot->gen == gen + 1 && ((unsigned char *)pool_extent_addr(&y))[0] == 0);
        CHECK(!memtier_find(mt, "k", 7, 0, "w") && memtier_bytes(mt) == 0);
        memtier_unpin(mt, k7, false); /* frees the orphan */
        /* nothing left to give back: the pool is simply full */
        CHECK(pool_try_acquire(pool, UID, 1, &e) == 0);
        pool_release(pool, &x);
        pool_release(pool, &y);

        /* a shard not wholly kept is never served; a failed rank goes */
        CHECK(pool_try_acquire(pool, UID, 1, &e) == 1);
        CHECK(memtier_keep(mt, "j", 3, 0, UID, "w", 2 * POOL_UNIT, 0, POOL_UNIT, &e));
        struct manifest *m;
        uint32_t blocks[2] = { 0, 0 };
        CHECK(manifest_new(&m, "j", 3, 0, 1, UID) == 0);
        CHECK(manifest_add_shard(m, "w", 2 * POOL_UNIT, 0, blocks) == 0);
        memtier_rank_landed(mt, m);
        manifest_free(m);
        memtier_step_committed(mt, "j", 3);
        CHECK(!memtier_find(mt, "j", 3, 0, "w") && memtier_bytes(mt) == 0);
        CHECK(pool_slots_used(pool) == 0);
        CHECK(pool_try_acquire(pool, UID, 1, &e) == 1);
        CHECK(memtier_keep(mt, "j", 4, 0, UID, "w", POOL_UNIT, 0, POOL_UNIT, &e));
        memtier_drop_rank(mt, "j", 4, 0);
        CHECK(memtier_bytes(mt) == 0 && pool_slots_used(pool) == 0);

        mt = memtier_free(mt);
        pool_free(pool);
        loop_free(loop);
        printf("memtier: ok\n");
        return 0;
}
