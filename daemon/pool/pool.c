/* SPDX-License-Identifier: MIT */
/*
 * pool — memfd slots, prefaulted once, registered with the ring, handed out
 * FIFO with a timeout.  See pool.h for the isolation rule and the shares.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pool/pool.h"
#include "util/cleanup.h"
#include "util/log.h"

/* Slots touched before pool_new() returns when the rest are touched in the
 * background: enough for a few transfers to start at once. */
#define POOL_FIRST_SLOTS 2

struct pool {
        struct loop *loop;
        uint64_t slot_size;
        uint32_t ready;            /* slots [0, ready) are touched, registered, lendable */
        /* the toucher thread maps slots [ready at start, count) in order and
         * says so through efd; the loop registers them and raises ready */
        pthread_t toucher;
        bool toucher_running;
        uint32_t toucher_first;
        atomic_uint touched;
        atomic_int toucher_error;
        atomic_bool toucher_stop;
        int efd;
        struct loop_watch efd_watch;
        uint64_t started_ms;
        uint32_t units_per_slot;
        uint32_t count;
        uint32_t slots_used;
        uint64_t units_used;
        uint32_t nwaiters;
        bool fixed;
        struct slot *slots;
        struct list waiters;
        struct pool_limits limits;
        /* every uid holding a slot or waiting, unordered; entries go when
         * both counts are 0 */
        struct pool_holder *users;
        uint32_t nusers, users_cap;
        /* serves waiters after a change that may let one through but must
         * not run their callbacks from inside the caller (a cancel, new
         * limits) */
        struct loop_timer wake_timer;
        /* the memory tier's hook (pool_set_evictor); evicting: inside it,
         * where releases serve no waiter (the request that asked comes
         * first, then the queue from the loop) */
        bool (*evict)(void *data);
        void *evict_data;
        bool evicting;
};

/* ---- who holds what ----------------------------------------------------------------- */

static struct pool_holder *user_find(const struct pool *p, uint32_t uid) {
        for (uint32_t i = 0; i < p->nusers; i++)
                if (p->users[i].uid == uid)
                        return &p->users[i];
        return NULL;
}

/* The entry of uid, created when missing; NULL only when out of memory
 * (the holding then goes uncounted: shares are a policy, not a safety
 * property, and the pool itself stays bounded). */
static struct pool_holder *user_get(struct pool *p, uint32_t uid) {
        struct pool_holder *u = user_find(p, uid);
        if (u)
                return u;
        if (p->nusers == p->users_cap) {
                uint32_t cap = p->users_cap ? p->users_cap * 2 : 16;
                struct pool_holder *n = realloc(p->users, cap * sizeof(*n));
                if (!n) {
                        log_error("pool: out of memory counting uid %u's slots", uid);
                        return NULL;
                }
                p->users = n;
                p->users_cap = cap;
        }
        u = &p->users[p->nusers++];
        *u = (struct pool_holder){ .uid = uid };
        return u;
}

static void user_put(struct pool *p, struct pool_holder *u) {
        if (u->slots || u->waiters || u->units)
                return;
        *u = p->users[--p->nusers];
}

static uint32_t share_of(const struct pool *p, const struct pool_holder *u) {
        uint32_t share = p->count;
        if (p->limits.fair_share) {
                uint32_t active = p->nusers + (u ? 0 : 1);
                share = (p->count + active - 1) / active;
        }
        if (p->limits.max_slots_per_uid)
                share = MIN(share, p->limits.max_slots_per_uid);
        return MAX(share, 1u);
}

static int slot_map(struct slot *s, uint64_t size) {
        _cleanup_close_ int fd = memfd_create("ckptd-slot", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (ftruncate(fd, (off_t)size) < 0)
                return -errno;
        void *addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (addr == MAP_FAILED)
                return -errno;
        /* Every page allocated and mapped writable here, once, instead of
         * on a trainer's first save (fresh memory is written at a fraction
         * of the speed of memory already touched).  MADV_POPULATE_WRITE
         * (Linux 5.14) does it in one pass: 0.35 s per GiB here, against
         * 0.61 s for what this did before, MAP_POPULATE (which maps a shared
         * mapping read-only, so each first write faults again) and a
         * memset; writes afterwards run at the same speed.  Older kernels
         * refuse the advice: the memset alone faults every page in.
         * MADV_HUGEPAGE first: where the administrator allows shmem huge
         * pages on advice (shmem_enabled = advise), the slot is backed by
         * 2 MiB pages, which take 0.12 s per GiB to populate instead of
         * 0.30 s with 4 KiB ones and make each O_DIRECT request a few large
         * segments; elsewhere the kernel ignores the hint (pool_new logs
         * which). */
        (void)madvise(addr, size, MADV_HUGEPAGE);
        if (madvise(addr, size, MADV_POPULATE_WRITE) < 0)
                memset(addr, 0, size);
        s->memfd = TAKE_FD(fd);
        s->addr = addr;
        return 0;
}

/* The kernel's policy for huge pages in shmem (and so memfd) mappings: the
 * bracketed word of shmem_enabled, or "unknown" where it cannot be read. */
static const char *shmem_huge_policy(char *buf, size_t len) {
        _cleanup_close_ int fd = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled",
                                      O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, len - 1);
        if (n <= 0)
                return "unknown";
        buf[n] = '\0';
        char *start = strchr(buf, '[');
        char *end = start ? strchr(start, ']') : NULL;
        if (!end)
                return "unknown";
        *end = '\0';
        return start + 1;
}

static void slot_unmap(struct slot *s, uint64_t size) {
        if (s->addr)
                munmap(s->addr, size);
        s->addr = NULL;
        s->memfd = safe_close(s->memfd);
}

static int pool_register(struct pool *p, struct slot *s) {
        struct iovec iov = { .iov_base = s->addr, .iov_len = p->slot_size };
        int r = io_uring_register_buffers_update_tag(loop_ring(p->loop), s->id, &iov, NULL, 1);
        return r < 0 ? r : 0;
}

/* ---- touching in the background ------------------------------------------------------ */

static void *toucher_run(void *arg) {
        struct pool *p = arg;
        uint64_t one = 1;

        for (uint32_t i = p->toucher_first; i < p->count; i++) {
                if (atomic_load(&p->toucher_stop))
                        break;
                int r = slot_map(&p->slots[i], p->slot_size);
                if (r < 0) {
                        atomic_store(&p->toucher_error, r);
                        break;
                }
                /* release: the slot's fields are visible before the count */
                atomic_store_explicit(&p->touched, i + 1, memory_order_release);
                /* a failed write (the counter saturated) still leaves it
                 * readable: the loop wakes either way */
                (void)!write(p->efd, &one, sizeof(one));
        }
        (void)!write(p->efd, &one, sizeof(one)); /* the end, or an error to report */
        return NULL;
}

static void pool_wake(struct pool *p);

static void toucher_stop(struct pool *p) {
        if (p->toucher_running) {
                atomic_store(&p->toucher_stop, true);
                pthread_join(p->toucher, NULL);
                p->toucher_running = false;
        }
        if (p->efd >= 0) {
                loop_watch_del(p->loop, &p->efd_watch);
                p->efd = safe_close(p->efd);
        }
}

/* Loop thread: slots the toucher finished become lendable. */
static void pool_on_touched(struct loop_watch *w, uint32_t events) {
        struct pool *p = container_of(w, struct pool, efd_watch);
        uint64_t v;
        (void)events;

        if (read(p->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                log_warn("pool: reading the toucher's eventfd: %m");
        uint32_t n = atomic_load_explicit(&p->touched, memory_order_acquire);
        for (uint32_t i = p->ready; i < n && p->fixed; i++) {
                if (pool_register(p, &p->slots[i]) < 0) {
                        log_error("pool: registering slot %u failed; disabling fixed buffers", i);
                        io_uring_unregister_buffers(loop_ring(p->loop));
                        p->fixed = false;
                }
        }
        if (n > p->ready) {
                p->ready = n;
                pool_wake(p);
        }
        int err = atomic_load(&p->toucher_error);
        if (n == p->count) {
                log_info("pool: all %u slots ready (%" PRIu64 " ms after start)", p->count,
                         loop_now_ms() - p->started_ms);
                toucher_stop(p);
        } else if (err < 0) {
                log_error("pool: cannot allocate slot %u of %llu bytes: %s; the pool stays at %u "
                          "of %u slots", n, (unsigned long long)p->slot_size, strerror(-err), n,
                          p->count);
                toucher_stop(p);
        }
}

static int pool_start_toucher(struct pool *p) {
        p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->efd < 0)
                return -errno;
        int r = loop_watch_add(p->loop, &p->efd_watch, p->efd, EPOLLIN, pool_on_touched);
        if (r < 0) {
                p->efd = safe_close(p->efd);
                return r;
        }
        p->toucher_first = p->ready;
        r = pthread_create(&p->toucher, NULL, toucher_run, p);
        if (r != 0) {
                loop_watch_del(p->loop, &p->efd_watch);
                p->efd = safe_close(p->efd);
                return -r;
        }
        p->toucher_running = true;
        return 0;
}

int pool_new(struct pool **out, struct loop *loop, uint64_t pool_size, uint64_t slot_size,
             bool register_buffers, bool background) {
        struct pool *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        p->loop = loop;
        p->slot_size = slot_size;
        p->count = (uint32_t)(pool_size / slot_size);
        p->units_per_slot = (uint32_t)(slot_size / POOL_UNIT);
        if (p->count == 0 || p->units_per_slot == 0 || p->units_per_slot > POOL_UNITS_MAX ||
            slot_size % POOL_UNIT) {
                free(p);
                return -EINVAL;
        }
        list_init(&p->waiters);
        list_init(&p->wake_timer.link);
        p->limits.fair_share = true;
        p->slots = calloc(p->count, sizeof(*p->slots));
        if (!p->slots) {
                free(p);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < p->count; i++) {
                p->slots[i].id = i;
                p->slots[i].memfd = -1;
                p->slots[i].owner_uid = POOL_UID_NONE;
        }
        p->efd = -1;
        p->started_ms = loop_now_ms();
        uint32_t now = background ? MIN(p->count, (uint32_t)POOL_FIRST_SLOTS) : p->count;
        for (uint32_t i = 0; i < now; i++) {
                r = slot_map(&p->slots[i], slot_size);
                if (r < 0) {
                        log_error("pool: cannot allocate slot %u of %llu bytes: %s", i,
                                  (unsigned long long)slot_size, strerror(-r));
                        pool_free(p);
                        return r;
                }
        }

        if (register_buffers) {
                r = io_uring_register_buffers_sparse(loop_ring(loop), p->count);
                for (uint32_t i = 0; r >= 0 && i < now; i++)
                        r = pool_register(p, &p->slots[i]);
                if (r < 0) {
                        /* Typically RLIMIT_MEMLOCK for an unprivileged user:
                         * correct without, just more work per I/O. */
                        log_notice("pool: fixed buffers unavailable (%s); using plain O_DIRECT "
                                   "I/O. Raise the memlock limit (LimitMEMLOCK=) to enable them.",
                                   strerror(-r));
                        io_uring_unregister_buffers(loop_ring(loop));
                } else {
                        p->fixed = true;
                }
        }
        p->ready = now;
        atomic_init(&p->touched, now);
        atomic_init(&p->toucher_error, 0);
        atomic_init(&p->toucher_stop, false);
        if (now < p->count) {
                r = pool_start_toucher(p);
                if (r < 0) {
                        log_error("pool: cannot start touching the slots in the background: %s",
                                  strerror(-r));
                        pool_free(p);
                        return r;
                }
        }
        char policy[128];
        log_info("pool: %u slots of %llu MiB (%s; shmem huge pages: %s)%s", p->count,
                 (unsigned long long)(slot_size >> 20), p->fixed ? "fixed buffers" : "plain",
                 shmem_huge_policy(policy, sizeof(policy)),
                 now < p->count ? "; the rest are being touched in the background" : "");
        *out = p;
        return 0;
}

struct pool *pool_free(struct pool *p) {
        if (!p)
                return NULL;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &p->waiters) {
                struct pool_waiter *w = list_entry(pos, struct pool_waiter, link);
                list_unlink(&w->link);
                loop_timer_cancel(&w->timer);
                p->nwaiters--;
                w->cb(w, NULL, -ECANCELED);
        }
        loop_timer_cancel(&p->wake_timer);
        toucher_stop(p); /* before the slots it writes go */
        if (p->fixed)
                io_uring_unregister_buffers(loop_ring(p->loop));
        for (uint32_t i = 0; i < p->count; i++)
                slot_unmap(&p->slots[i], p->slot_size);
        free(p->slots);
        free(p->users);
        free(p);
        return NULL;
}

uint64_t pool_slot_size(const struct pool *p) {
        return p->slot_size;
}
uint32_t pool_slot_count(const struct pool *p) {
        return p->count;
}
uint32_t pool_slots_ready(const struct pool *p) {
        return p->ready;
}
uint32_t pool_slots_used(const struct pool *p) {
        return p->slots_used;
}
uint64_t pool_bytes_used(const struct pool *p) {
        return p->units_used * POOL_UNIT;
}
uint32_t pool_units_for(const struct pool *p, uint64_t bytes) {
        uint64_t units = (bytes + POOL_UNIT - 1) / POOL_UNIT;
        if (units == 0)
                units = 1;
        return (uint32_t)MIN(units, (uint64_t)p->units_per_slot);
}
uint32_t pool_waiters(const struct pool *p) {
        return p->nwaiters;
}
bool pool_fixed(const struct pool *p) {
        return p->fixed;
}

struct slot *pool_slot(struct pool *p, uint32_t id) {
        return id < p->ready ? &p->slots[id] : NULL;
}

static void pool_wake_later(struct pool *p);

void pool_set_limits(struct pool *p, const struct pool_limits *limits) {
        p->limits = *limits;
        pool_wake_later(p);
}

uint32_t pool_uid_slots(const struct pool *p, uint32_t uid) {
        const struct pool_holder *u = user_find(p, uid);
        return u ? u->slots : 0;
}

uint32_t pool_uid_share(const struct pool *p, uint32_t uid) {
        return share_of(p, user_find(p, uid));
}

uint32_t pool_active_uids(const struct pool *p) {
        return p->nusers;
}

uint32_t pool_holders(const struct pool *p, struct pool_holder *out, uint32_t max) {
        uint32_t n = 0;

        /* insertion into a short sorted list: max is a handful, users few */
        for (uint32_t i = 0; i < p->nusers; i++) {
                const struct pool_holder *u = &p->users[i];
                uint32_t at = n < max ? n++ : max;
                if (at == max) {
                        if (max == 0 || u->slots <= out[max - 1].slots)
                                continue;
                        at = max - 1;
                }
                while (at > 0 && out[at - 1].slots < u->slots) {
                        out[at] = out[at - 1];
                        at--;
                }
                out[at] = *u;
        }
        return n;
}

/* Give slot s, currently holding another uid's memory, fresh memory. */
static int slot_renew(struct pool *p, struct slot *s) {
        struct slot fresh = { .memfd = -1 };
        int r = slot_map(&fresh, p->slot_size);
        if (r < 0) {
                log_error("pool: cannot replace memory of slot %u: %s", s->id, strerror(-r));
                return r;
        }
        slot_unmap(s, p->slot_size);
        s->memfd = fresh.memfd;
        s->addr = fresh.addr;
        s->gen++;
        s->renew = false;
        if (p->fixed) {
                r = pool_register(p, s);
                if (r < 0) {
                        /* Cannot happen short of a kernel bug; plain I/O is
                         * still correct, so degrade rather than fail. */
                        log_error("pool: re-registering slot %u failed: %s; disabling fixed "
                                  "buffers",
                                  s->id, strerror(-r));
                        io_uring_unregister_buffers(loop_ring(p->loop));
                        p->fixed = false;
                }
        }
        return 0;
}

static bool unit_used(const struct slot *s, uint32_t u) {
        return s->used_map[u / 64] >> (u % 64) & 1;
}

/* Longest run of free units in s, up to want; first-fit among runs that
 * reach want. */
static uint32_t slot_find_run(const struct pool *p, const struct slot *s, uint32_t want,
                              uint32_t *first) {
        uint32_t best = 0, best_at = 0, run = 0;

        for (uint32_t u = 0; u < p->units_per_slot; u++) {
                if (unit_used(s, u)) {
                        run = 0;
                        continue;
                }
                run++;
                if (run > best) {
                        best = run;
                        best_at = u + 1 - run;
                        if (best >= want)
                                break;
                }
        }
        *first = best_at;
        return MIN(best, want);
}

static void slot_mark(struct pool *p, struct slot *s, uint32_t first, uint32_t count, bool used) {
        for (uint32_t u = first; u < first + count; u++) {
                if (used)
                        s->used_map[u / 64] |= 1ull << (u % 64);
                else
                        s->used_map[u / 64] &= ~(1ull << (u % 64));
        }
        /* the owner cannot change while any unit is lent */
        struct pool_holder *u = used ? user_get(p, s->owner_uid) : user_find(p, s->owner_uid);
        if (used) {
                if (s->used_units == 0) {
                        p->slots_used++;
                        if (u)
                                u->slots++;
                }
                s->used_units += count;
                p->units_used += count;
                if (u)
                        u->units += count;
        } else {
                s->used_units -= count;
                p->units_used -= count;
                if (u)
                        u->units -= MIN(u->units, (uint64_t)count);
                if (s->used_units == 0) {
                        p->slots_used--;
                        if (u && u->slots)
                                u->slots--;
                }
                if (u)
                        user_put(p, u);
        }
}

/*
 * The extent for a request of uid: the best run in a slot uid holds already
 * (no more of the pool becomes uid's), else a free slot of its own, a
 * never-used one, or another uid's (new memory first).  A slot with revoked
 * memory lends nothing until it is free, then is renewed like another uid's.
 * A capped request (a client's) takes a free slot only while uid holds
 * fewer slots than its share, and nothing at all while it holds more.
 */
static int pool_acquire(struct pool *p, uint32_t uid, uint32_t want, bool whole, bool capped,
                        struct pool_extent *e) {
        struct slot *best = NULL, *mine = NULL, *unused = NULL, *other = NULL;
        uint32_t best_len = 0, best_first = 0;
        bool may_grow = true;

        if (capped) {
                const struct pool_holder *u = user_find(p, uid);
                uint32_t held = u ? u->slots : 0, share = share_of(p, u);
                if (held > share)
                        return 0;
                may_grow = held < share;
        }
        want = MIN(MAX(want, 1u), p->units_per_slot);
        for (uint32_t i = 0; i < p->ready; i++) {
                struct slot *s = &p->slots[i];
                if (s->used_units > 0) {
                        if (s->owner_uid != uid || s->renew)
                                continue;
                        uint32_t first, len = slot_find_run(p, s, want, &first);
                        if (len > best_len) {
                                best = s;
                                best_len = len;
                                best_first = first;
                                if (len == want)
                                        break;
                        }
                } else if (s->renew) {
                        if (!other)
                                other = s;
                } else if (s->owner_uid == uid) {
                        if (!mine)
                                mine = s;
                } else if (s->owner_uid == POOL_UID_NONE) {
                        if (!unused)
                                unused = s;
                } else if (!other) {
                        other = s;
                }
        }
        /* A whole fresh slot beats a short run in a slot of our own. */
        if (best_len < want && may_grow && (mine || unused || other)) {
                best = mine ? mine : unused ? unused : other;
                if (best == other) {
                        int r = slot_renew(p, best);
                        if (r < 0)
                                return r;
                }
                best->owner_uid = uid;
                best_len = want;
                best_first = 0;
        }
        if (!best || best_len == 0 || (whole && best_len < want))
                return 0;
        slot_mark(p, best, best_first, best_len, true);
        e->slot = best;
        e->first = best_first;
        e->count = best_len;
        return 1;
}

/* pool_acquire(), but when it finds nothing, first have the memory tier
 * give back what it keeps, oldest first, until the request is served or
 * the tier has nothing left: staging always wins over a step kept only to
 * be restored fast. */
static int pool_acquire_evicting(struct pool *p, uint32_t uid, uint32_t want, bool whole,
                                 bool capped, struct pool_extent *e) {
        int r = pool_acquire(p, uid, want, whole, capped, e);
        bool gave = false;

        while (r == 0 && p->evict && !p->evicting) {
                p->evicting = true;
                bool more = p->evict(p->evict_data);
                p->evicting = false;
                if (!more)
                        break;
                gave = true;
                r = pool_acquire(p, uid, want, whole, capped, e);
        }
        /* what was given back and not taken may serve the queue */
        if (gave)
                pool_wake_later(p);
        return r;
}

int pool_try_acquire(struct pool *p, uint32_t uid, uint32_t want, struct pool_extent *e) {
        return pool_acquire_evicting(p, uid, want, false, true, e);
}

int pool_try_acquire_whole(struct pool *p, uint32_t uid, uint32_t want, struct pool_extent *e) {
        return pool_acquire_evicting(p, uid, want, true, false, e);
}

int pool_try_acquire_spare(struct pool *p, uint32_t uid, uint32_t want, struct pool_extent *e) {
        return pool_acquire(p, uid, want, false, true, e);
}

void pool_set_evictor(struct pool *p, bool (*evict)(void *data), void *data) {
        p->evict = evict;
        p->evict_data = data;
}

/* A waiter joins or leaves the queue: it makes its uid active. */
static void waiter_count(struct pool *p, struct pool_waiter *w, bool join) {
        struct pool_holder *u = join ? user_get(p, w->uid) : user_find(p, w->uid);
        if (!u)
                return;
        if (join) {
                u->waiters++;
                return;
        }
        if (u->waiters)
                u->waiters--;
        user_put(p, u);
}

static void waiter_leave(struct pool *p, struct pool_waiter *w) {
        list_unlink(&w->link);
        loop_timer_cancel(&w->timer);
        p->nwaiters--;
        waiter_count(p, w, false);
}

static void pool_waiter_timeout(struct loop_timer *t) {
        struct pool_waiter *w = container_of(t, struct pool_waiter, timer);
        struct pool *p = w->pool;

        waiter_leave(p, w);
        /* one uid fewer may raise the others' shares */
        pool_wake_later(p);
        w->cb(w, NULL, -ETIMEDOUT);
}

void pool_wait(struct pool *p, struct pool_waiter *w, uint32_t uid, uint32_t want,
               uint64_t timeout_ms,
               void (*cb)(struct pool_waiter *w, const struct pool_extent *e, int error)) {
        w->pool = p;
        w->uid = uid;
        w->want = want;
        w->whole = false;
        w->cb = cb;
        list_add_tail(&p->waiters, &w->link);
        p->nwaiters++;
        waiter_count(p, w, true);
        loop_timer_start(p->loop, &w->timer, timeout_ms, pool_waiter_timeout);
}

void pool_wait_whole(struct pool *p, struct pool_waiter *w, uint32_t uid, uint32_t want,
                     uint64_t timeout_ms,
                     void (*cb)(struct pool_waiter *w, const struct pool_extent *e, int error)) {
        pool_wait(p, w, uid, want, timeout_ms, cb);
        w->whole = true;
}

void pool_wait_cancel(struct pool *p, struct pool_waiter *w) {
        if (!list_linked(&w->link))
                return;
        waiter_leave(p, w);
        pool_wake_later(p);
}

void pool_release(struct pool *p, const struct pool_extent *e) {
        slot_mark(p, e->slot, e->first, e->count, false);
        pool_wake(p);
}

void pool_revoke(struct pool *p, const struct pool_extent *e) {
        e->slot->renew = true;
        pool_release(p, e);
}

static void pool_wake_timer(struct loop_timer *t) {
        pool_wake(container_of(t, struct pool, wake_timer));
}

static void pool_wake_later(struct pool *p) {
        if (!list_empty(&p->waiters) && !loop_timer_armed(&p->wake_timer))
                loop_timer_start(p->loop, &p->wake_timer, 0, pool_wake_timer);
}

/*
 * Serve waiters, oldest first, while memory is free.  A waiter whose uid is
 * at its share is passed over (it waits for its own uid's memory, which
 * others' requests do not hold up); the first one that finds no memory
 * stops the round, so a large request is not starved by smaller ones
 * behind it.  A waiter served is unlinked before its callback, which may
 * queue or cancel others: the walk restarts from the head after each.
 */
static void pool_wake(struct pool *p) {
        struct list *pos = p->waiters.next;

        if (p->evicting)
                return; /* pool_acquire_evicting() serves the queue after */
        while (pos != &p->waiters) {
                struct pool_waiter *w = list_entry(pos, struct pool_waiter, link);
                struct pool_extent got;
                int r = pool_acquire_evicting(p, w->uid, w->want, w->whole, !w->whole, &got);
                if (r == 0) {
                        const struct pool_holder *u = user_find(p, w->uid);
                        if (w->whole || !u || u->slots < share_of(p, u))
                                return;
                        pos = pos->next;
                        continue;
                }
                waiter_leave(p, w);
                w->cb(w, r > 0 ? &got : NULL, r > 0 ? 0 : r);
                pos = p->waiters.next;
        }
}
