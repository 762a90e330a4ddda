/* SPDX-License-Identifier: MIT */
/*
 * test-pool — the slot pool against a real io_uring: bounded memory, FIFO
 * hand-off to waiters, timeouts, and that a slot never carries one uid's
 * bytes to another uid.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/loop.h"
#include "pool/pool.h"

#define SLOT (1u << 20)
#define CHECK(cond)                                                                  \
        do {                                                                         \
                if (!(cond)) {                                                       \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
                        exit(1);                                                     \
                }                                                                    \
        } while (0)

static struct loop *the_loop;
static struct slot *got[8];
static int got_err[8];
static int calls;

static void on_slot(struct pool_waiter *w, struct slot *s, int err) {
        (void)w;
        got[calls] = s;
        got_err[calls] = err;
        calls++;
        if (!s && the_loop)
                loop_stop(the_loop);
}

static void stop_loop(struct loop_timer *t) {
        (void)t;
        loop_stop(the_loop);
}

int main(void) {
        struct loop *loop;
        struct pool *pool;
        int err;

        int r = loop_new(&loop, 64);
        if (r < 0) {
                fprintf(stderr, "io_uring unavailable (%s): skipping\n", strerror(-r));
                return 77;
        }
        CHECK(pool_new(&pool, loop, 4 * SLOT, SLOT, true) == 0);
        CHECK(pool_slot_count(pool) == 4);
        CHECK(pool_slot_size(pool) == SLOT);
        if (geteuid() == 0)
                CHECK(pool_fixed(pool)); /* root has no memlock limit */

        /* every slot is prefaulted and zeroed, and maps as a memfd */
        struct slot *s[4];
        for (int i = 0; i < 4; i++) {
                s[i] = pool_try_acquire(pool, 1000, &err);
                CHECK(s[i] && err == 0);
                CHECK(((unsigned char *)s[i]->addr)[SLOT - 1] == 0);
                void *m = mmap(NULL, SLOT, PROT_READ, MAP_SHARED, s[i]->memfd, 0);
                CHECK(m != MAP_FAILED);
                memset(s[i]->addr, 0xA0 + i, SLOT);
                CHECK(((unsigned char *)m)[12345] == 0xA0 + i); /* same memory */
                munmap(m, SLOT);
        }
        CHECK(pool_slots_used(pool) == 4);
        /* memory stays bounded: a fifth slot does not exist */
        CHECK(pool_try_acquire(pool, 1000, &err) == NULL && err == 0);

        /* waiters are served FIFO when slots come back */
        struct pool_waiter w1 = { 0 }, w2 = { 0 }, w3 = { 0 };
        pool_wait(pool, &w1, 1000, 10000, on_slot);
        pool_wait(pool, &w2, 1000, 10000, on_slot);
        CHECK(pool_waiters(pool) == 2 && calls == 0);
        uint32_t gen_before = s[0]->gen;
        pool_release(pool, s[0]);
        CHECK(calls == 1 && got[0] == s[0] && got_err[0] == 0);
        CHECK(got[0]->gen == gen_before); /* same uid: same memory */
        CHECK(((unsigned char *)got[0]->addr)[5] == 0xA0);
        pool_release(pool, s[1]);
        CHECK(calls == 2 && got[1] == s[1]);
        CHECK(pool_waiters(pool) == 0);

        /* a waiter that nobody serves times out with -ETIMEDOUT, from the
         * loop's timer scan */
        pool_wait(pool, &w3, 1000, 50, on_slot);
        struct loop_timer stopper = { 0 };
        the_loop = loop;
        uint64_t t0 = loop_now_ms();
        loop_timer_start(loop, &stopper, 2000, stop_loop);
        CHECK(loop_run(loop) == 0);
        CHECK(calls == 3 && got[2] == NULL && got_err[2] == -ETIMEDOUT);
        CHECK(pool_waiters(pool) == 0);
        uint64_t waited = loop_now_ms() - t0;
        CHECK(waited >= 50 && waited < 1900); /* stopped by the waiter, not the guard */
        loop_timer_cancel(&stopper);

        /* isolation: slot 0 held uid 1000's bytes; uid 2000 must get fresh
         * memory, never uid 1000's */
        pool_wait_cancel(pool, &w3); /* no-op: already fired */
        pool_release(pool, got[0]);
        pool_release(pool, got[1]);
        pool_release(pool, s[2]);
        pool_release(pool, s[3]);
        CHECK(pool_slots_used(pool) == 0);
        struct slot *other = pool_try_acquire(pool, 2000, &err);
        CHECK(other && err == 0);
        CHECK(other->gen == 1); /* memory replaced */
        for (size_t off = 0; off < SLOT; off += 4096)
                CHECK(((unsigned char *)other->addr)[off] == 0);
        /* uid 1000 still prefers its own slots */
        struct slot *mine = pool_try_acquire(pool, 1000, &err);
        CHECK(mine && mine->gen == 0 && mine->owner_uid == 1000);
        CHECK(((unsigned char *)mine->addr)[7] >= 0xA0);
        pool_release(pool, other);
        pool_release(pool, mine);

        pool_free(pool);
        loop_free(loop);
        printf("pool: ok\n");
        return 0;
}
