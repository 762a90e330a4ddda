/* SPDX-License-Identifier: MIT */
/*
 * test-pool — the slot pool against a real io_uring: bounded memory, small
 * windows packed into one slot, FIFO hand-off to waiters, timeouts from the
 * loop, that a slot never carries one uid's bytes to another uid, fair
 * shares between uids, and that revoked memory is renewed before reuse.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/loop.h"
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

static struct loop *the_loop;
static struct pool_extent got[8];
static int got_err[8];
static int calls;

static void on_extent(struct pool_waiter *w, const struct pool_extent *e, int err) {
        (void)w;
        if (e)
                got[calls] = *e;
        else
                memset(&got[calls], 0, sizeof(got[calls]));
        got_err[calls] = err;
        calls++;
        if (!e && the_loop)
                loop_stop(the_loop);
}

static void stop_loop(struct loop_timer *t) {
        (void)t;
        loop_stop(the_loop);
}

static struct pool *bg_pool;

static void stop_when_ready(struct loop_timer *t) {
        if (pool_slots_ready(bg_pool) == pool_slot_count(bg_pool))
                loop_stop(the_loop);
        else
                loop_timer_start(the_loop, t, 5, stop_when_ready);
}

int main(void) {
        struct loop *loop;
        struct pool *pool;
        struct pool_extent e[4], x;

        int r = loop_new(&loop, 64);
        if (r < 0) {
                fprintf(stderr, "io_uring unavailable (%s): skipping\n", strerror(-r));
                return 77;
        }
        the_loop = loop;
        CHECK(pool_new(&pool, loop, 4 * SLOT, SLOT, true, false) == 0);
        CHECK(pool_slot_count(pool) == 4 && pool_slot_size(pool) == SLOT);
        if (geteuid() == 0)
                CHECK(pool_fixed(pool)); /* root has no memlock limit */
        CHECK(pool_units_for(pool, 0) == 1 && pool_units_for(pool, 1) == 1);
        CHECK(pool_units_for(pool, POOL_UNIT + 1) == 2 && pool_units_for(pool, 1ull << 40) == UNITS);

        /* whole-slot windows: every slot prefaulted, zeroed, and the memfd
         * maps the same memory the daemon sees */
        for (int i = 0; i < 4; i++) {
                CHECK(pool_try_acquire(pool, 1000, UNITS, &e[i]) == 1);
                CHECK(e[i].count == UNITS && e[i].first == 0);
                unsigned char *a = pool_extent_addr(&e[i]);
                CHECK(a[SLOT - 1] == 0);
                void *m = mmap(NULL, SLOT, PROT_READ, MAP_SHARED, e[i].slot->memfd, 0);
                CHECK(m != MAP_FAILED);
                memset(a, 0xA0 + i, SLOT);
                CHECK(((unsigned char *)m)[12345] == 0xA0 + i);
                munmap(m, SLOT);
        }
        CHECK(pool_slots_used(pool) == 4 && pool_bytes_used(pool) == 4ull * SLOT);
        /* memory stays bounded: nothing more to lend */
        CHECK(pool_try_acquire(pool, 1000, 1, &x) == 0);
        for (int i = 0; i < 4; i++)
                pool_release(pool, &e[i]);
        CHECK(pool_slots_used(pool) == 0 && pool_bytes_used(pool) == 0);

        /* small windows pack into one slot instead of taking four */
        for (int i = 0; i < 4; i++) {
                CHECK(pool_try_acquire(pool, 1000, 1, &e[i]) == 1);
                CHECK(e[i].count == 1);
        }
        CHECK(pool_slots_used(pool) == 1);
        CHECK(e[0].slot == e[3].slot && e[3].first == 3);
        /* release the middle two: a 3-unit request prefers a fresh slot ... */
        pool_release(pool, &e[1]);
        pool_release(pool, &e[2]);
        CHECK(pool_try_acquire(pool, 1000, 3, &x) == 1 && x.count == 3 && x.slot != e[0].slot);
        pool_release(pool, &x);
        /* ... and when none is left, the longest free run (2 units) */
        struct pool_extent full[3];
        int nfull = 0;
        for (int i = 0; i < 4; i++) {
                if (&pool_slot(pool, (uint32_t)i)[0] == e[0].slot)
                        continue;
                CHECK(pool_try_acquire(pool, 1000, UNITS, &full[nfull]) == 1);
                nfull++;
        }
        CHECK(nfull == 3);
        CHECK(pool_try_acquire(pool, 1000, 3, &x) == 1 && x.count == 2 && x.first == 1);
        pool_release(pool, &x);

        /* waiters are served FIFO when units come back */
        struct pool_waiter w1 = { 0 }, w2 = { 0 }, w3 = { 0 };
        CHECK(pool_try_acquire(pool, 1000, 2, &x) == 1);
        pool_wait(pool, &w1, 1000, 1, 10000, on_extent);
        pool_wait(pool, &w2, 1000, UNITS, 10000, on_extent);
        CHECK(pool_waiters(pool) == 2 && calls == 0);
        pool_release(pool, &x);
        /* w1 got one unit; w2 wants a whole slot and one unit is still not
         * enough... but a short run is better than waiting: it gets 1 */
        CHECK(calls == 2 && got_err[0] == 0 && got[0].count == 1);
        CHECK(got_err[1] == 0 && got[1].count == 1);
        CHECK(pool_waiters(pool) == 0);
        CHECK(((unsigned char *)pool_extent_addr(&got[0]))[5] >= 0xA0); /* same uid: same memory */

        /* a waiter that nobody serves times out with -ETIMEDOUT, fired by
         * the loop's timer scan */
        pool_wait(pool, &w3, 1000, 1, 50, on_extent);
        struct loop_timer guard = { 0 };
        uint64_t t0 = loop_now_ms();
        loop_timer_start(loop, &guard, 2000, stop_loop);
        CHECK(loop_run(loop) == 0);
        uint64_t waited = loop_now_ms() - t0;
        CHECK(calls == 3 && got[2].slot == NULL && got_err[2] == -ETIMEDOUT);
        CHECK(waited >= 50 && waited < 1900);
        CHECK(pool_waiters(pool) == 0);
        loop_timer_cancel(&guard);
        pool_wait_cancel(pool, &w3); /* no-op: already fired */

        /* isolation: every slot held uid 1000's bytes; uid 2000 gets fresh
         * memory (new generation), never uid 1000's */
        pool_release(pool, &got[0]);
        pool_release(pool, &got[1]);
        pool_release(pool, &e[0]);
        pool_release(pool, &e[3]);
        for (int i = 0; i < 3; i++)
                pool_release(pool, &full[i]);
        CHECK(pool_slots_used(pool) == 0);
        struct pool_extent other;
        CHECK(pool_try_acquire(pool, 2000, UNITS, &other) == 1);
        CHECK(other.slot->gen == 1 && other.slot->owner_uid == 2000);
        for (size_t off = 0; off < SLOT; off += 4096)
                CHECK(((unsigned char *)pool_extent_addr(&other))[off] == 0);
        /* while uid 2000 holds units of a slot, uid 1000 cannot share it
         * (and, two uids being active, takes its half of the pool) */
        struct pool_extent mine[3];
        for (int i = 0; i < 2; i++) {
                CHECK(pool_try_acquire(pool, 1000, UNITS, &mine[i]) == 1);
                CHECK(mine[i].slot != other.slot && mine[i].slot->gen == 0);
        }
        CHECK(pool_try_acquire(pool, 1000, 1, &x) == 0);
        CHECK(pool_uid_slots(pool, 1000) == 2 && pool_uid_share(pool, 1000) == 2);
        pool_set_limits(pool, &(struct pool_limits){ .fair_share = false });
        CHECK(pool_try_acquire(pool, 1000, UNITS, &mine[2]) == 1);
        CHECK(mine[2].slot != other.slot && mine[2].slot->gen == 0);
        CHECK(pool_try_acquire(pool, 1000, 1, &x) == 0);
        pool_set_limits(pool, &(struct pool_limits){ .fair_share = true });
        pool_release(pool, &other);
        for (int i = 0; i < 3; i++)
                pool_release(pool, &mine[i]);

        /* whole requests (a peer's frame, an object-store range: the size is
         * fixed before the memory is found): never served with a shorter
         * run, where a plain request takes what there is */
        struct pool_extent a, b, rest[3];
        CHECK(pool_try_acquire(pool, 1000, 2, &a) == 1 && a.count == 2);
        CHECK(pool_try_acquire(pool, 1000, 2, &b) == 1 && b.count == 2 && b.slot == a.slot);
        for (int i = 0; i < 3; i++)
                CHECK(pool_try_acquire(pool, 1000, UNITS, &rest[i]) == 1);
        pool_release(pool, &a); /* two units free, in one slot */
        CHECK(pool_try_acquire_whole(pool, 1000, UNITS, &x) == 0);
        CHECK(pool_try_acquire_whole(pool, 1000, 2, &x) == 1 && x.count == 2);
        pool_release(pool, &x);
        calls = 0;
        struct pool_waiter whole, plain;
        memset(&whole, 0, sizeof(whole));
        memset(&plain, 0, sizeof(plain));
        pool_wait_whole(pool, &whole, 1000, UNITS, 5000, on_extent);
        pool_wait(pool, &plain, 1000, UNITS, 5000, on_extent);
        CHECK(calls == 0); /* two units free: the whole waiter waits, the plain one behind it */
        pool_release(pool, &b); /* the slot is free: the whole waiter gets all of it */
        CHECK(calls == 1 && got_err[0] == 0 && got[0].count == UNITS);
        pool_release(pool, &rest[0]); /* the plain one, next in line */
        CHECK(calls == 2 && got[1].count == UNITS);
        pool_release(pool, &got[0]);
        pool_release(pool, &got[1]);
        /* a plain waiter alone takes a short run */
        CHECK(pool_try_acquire(pool, 1000, 2, &a) == 1 && pool_try_acquire(pool, 1000, 2, &b) == 1);
        CHECK(pool_try_acquire(pool, 1000, UNITS, &rest[0]) == 1);
        CHECK(pool_try_acquire(pool, 1000, UNITS, &x) == 0);
        pool_wait(pool, &plain, 1000, UNITS, 5000, on_extent);
        pool_release(pool, &a);
        CHECK(calls == 3 && got[2].count == 2);
        pool_release(pool, &got[2]);
        pool_release(pool, &b);
        for (int i = 0; i < 3; i++)
                pool_release(pool, &rest[i]);
        CHECK(pool_slots_used(pool) == 0 && pool_waiters(pool) == 0);

        /* fair shares: uid 1000 alone takes the whole pool; once uid 2000
         * waits, 1000's share is half of it, 1000's own waiter (queued
         * first) is passed over and 2000's is served from what 1000 gives
         * back, until 1000 is under its share again */
        struct pool_extent hog[4], mine2[2];
        for (int i = 0; i < 4; i++)
                CHECK(pool_try_acquire(pool, 1000, UNITS, &hog[i]) == 1);
        CHECK(pool_uid_slots(pool, 1000) == 4 && pool_uid_share(pool, 1000) == 4);
        CHECK(pool_uid_share(pool, 2000) == 2); /* were 2000 to ask */
        calls = 0;
        struct pool_waiter wa = { 0 }, wb2 = { 0 };
        pool_wait(pool, &wa, 1000, UNITS, 5000, on_extent);
        pool_wait(pool, &wb2, 2000, UNITS, 5000, on_extent);
        CHECK(pool_active_uids(pool) == 2 && pool_uid_share(pool, 1000) == 2);
        struct pool_holder h[2];
        CHECK(pool_holders(pool, h, 2) == 2 && h[0].uid == 1000 && h[0].slots == 4 &&
              h[0].waiters == 1 && h[1].uid == 2000 && h[1].slots == 0 && h[1].waiters == 1);
        pool_release(pool, &hog[0]);
        CHECK(calls == 1 && got_err[0] == 0 && got[0].slot->owner_uid == 2000);
        mine2[0] = got[0];
        CHECK(got[0].slot->gen > 0); /* uid 1000's memory was replaced */
        pool_release(pool, &hog[1]); /* 1000 at its share: its waiter still waits */
        CHECK(calls == 1 && pool_waiters(pool) == 1);
        CHECK(pool_try_acquire(pool, 2000, UNITS, &mine2[1]) == 1);
        CHECK(pool_try_acquire(pool, 2000, 1, &x) == 0); /* 2000 at its share too */
        pool_release(pool, &hog[2]); /* 1000 under its share: now it is served */
        CHECK(calls == 2 && got_err[1] == 0 && got[1].slot->owner_uid == 1000);
        hog[2] = got[1];
        /* a fixed cap: one slot per uid */
        pool_set_limits(pool, &(struct pool_limits){ .fair_share = true, .max_slots_per_uid = 1 });
        CHECK(pool_uid_share(pool, 1000) == 1 && pool_uid_share(pool, 3000) == 1);
        pool_release(pool, &hog[2]);
        pool_release(pool, &hog[3]);
        CHECK(pool_try_acquire(pool, 1000, UNITS, &hog[0]) == 1);
        CHECK(pool_try_acquire(pool, 1000, UNITS, &x) == 0);
        /* daemon-internal transfers are not held to a share */
        CHECK(pool_try_acquire_whole(pool, 1000, UNITS, &hog[1]) == 1);
        CHECK(pool_uid_slots(pool, 1000) == 2);
        pool_set_limits(pool, &(struct pool_limits){ .fair_share = true });
        pool_release(pool, &hog[0]);
        pool_release(pool, &hog[1]);

        /* revoked memory: nothing more of its slot is lent while the rest
         * of it is out, and it has new memory before it is lent again */
        pool_release(pool, &mine2[1]);
        struct pool_extent ra, rb;
        pool_release(pool, &mine2[0]);
        CHECK(pool_slots_used(pool) == 0 && pool_active_uids(pool) == 0);
        CHECK(pool_try_acquire(pool, 2000, 2, &ra) == 1 && pool_try_acquire(pool, 2000, 2, &rb) == 1);
        CHECK(ra.slot == rb.slot);
        struct slot *rs = ra.slot;
        uint32_t gen = rs->gen;
        memset(pool_extent_addr(&ra), 0x5a, 2 * POOL_UNIT);
        pool_revoke(pool, &ra);
        CHECK(rs->renew);
        CHECK(pool_try_acquire(pool, 2000, 2, &ra) == 1 && ra.slot != rs);
        pool_release(pool, &ra);
        pool_release(pool, &rb);
        /* lent again (a whole slot), it comes with new, zeroed memory */
        int seen = 0;
        for (int i = 0; i < 4; i++) {
                CHECK(pool_try_acquire(pool, 2000, UNITS, &hog[i]) == 1);
                if (hog[i].slot != rs)
                        continue;
                seen++;
                CHECK(rs->gen == gen + 1 && !rs->renew);
                CHECK(((unsigned char *)pool_extent_addr(&hog[i]))[POOL_UNIT] == 0);
        }
        CHECK(seen == 1);
        for (int i = 0; i < 4; i++)
                pool_release(pool, &hog[i]);
        CHECK(pool_slots_used(pool) == 0 && pool_waiters(pool) == 0 && pool_active_uids(pool) == 0);

        pool_free(pool);

        /* background touching: two slots lendable at once, a waiter for a
         * third is served when the toucher gets there, then all 8 (a fresh
         * loop: the first one has been stopped) */
        loop_free(loop);
        CHECK(loop_new(&loop, 64) == 0);
        the_loop = loop;
        CHECK(pool_new(&pool, loop, 8 * SLOT, SLOT, true, true) == 0);
        bg_pool = pool;
        CHECK(pool_slot_count(pool) == 8 && pool_slots_ready(pool) == 2);
        struct pool_extent bg[8];
        CHECK(pool_try_acquire(pool, 1000, UNITS, &bg[0]) == 1);
        CHECK(pool_try_acquire(pool, 1000, UNITS, &bg[1]) == 1);
        /* the loop has not run: nothing more is lendable yet */
        CHECK(pool_try_acquire(pool, 1000, UNITS, &x) == 0);
        calls = 0;
        struct pool_waiter wb;
        memset(&wb, 0, sizeof(wb));
        pool_wait(pool, &wb, 1000, UNITS, 5000, on_extent);
        struct loop_timer guard2 = { 0 }, tick = { 0 };
        loop_timer_start(loop, &guard2, 5000, stop_loop);
        loop_timer_start(loop, &tick, 5, stop_when_ready);
        CHECK(loop_run(loop) == 0);
        loop_timer_cancel(&guard2);
        loop_timer_cancel(&tick);
        CHECK(pool_slots_ready(pool) == 8);
        CHECK(calls == 1 && got_err[0] == 0 && got[0].count == UNITS);
        bg[2] = got[0];
        for (int i = 3; i < 8; i++)
                CHECK(pool_try_acquire(pool, 1000, UNITS, &bg[i]) == 1);
        CHECK(pool_try_acquire(pool, 1000, 1, &x) == 0);
        for (int i = 0; i < 8; i++) {
                for (int j = 0; j < i; j++)
                        CHECK(bg[i].slot != bg[j].slot);
                CHECK(((unsigned char *)pool_extent_addr(&bg[i]))[SLOT - 1] == 0);
                pool_release(pool, &bg[i]);
        }
        pool_free(pool);
        /* freed while still touching: the toucher stops, nothing leaks */
        CHECK(pool_new(&pool, loop, 8 * SLOT, SLOT, true, true) == 0);
        pool_free(pool);

        loop_free(loop);
        printf("pool: ok\n");
        return 0;
}
