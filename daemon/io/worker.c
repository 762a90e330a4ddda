/* SPDX-License-Identifier: MIT */
/*
 * worker — see worker.h.  A mutex-protected queue in, a mutex-protected
 * queue out, and an eventfd that wakes the loop when the out queue fills.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/worker.h"
#include "util/cleanup.h"
#include "util/log.h"

struct worker_pool {
        struct loop *loop;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct list todo;
        struct list done;
        bool stop;
        unsigned nthreads;
        pthread_t *threads;
        int event_fd;
        struct loop_watch watch;
        unsigned pending;
};

static void *worker_main(void *arg) {
        struct worker_pool *p = arg;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                while (list_empty(&p->todo) && !p->stop)
                        pthread_cond_wait(&p->cond, &p->lock);
                if (list_empty(&p->todo))
                        break;
                struct work *w = list_first_entry(&p->todo, struct work, link);
                list_unlink(&w->link);
                pthread_mutex_unlock(&p->lock);

                w->run(w);

                pthread_mutex_lock(&p->lock);
                bool wake = list_empty(&p->done);
                list_add_tail(&p->done, &w->link);
                if (wake) {
                        uint64_t one = 1;
                        if (write(p->event_fd, &one, sizeof(one)) < 0) {
                                /* eventfd counter cannot overflow here */
                        }
                }
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

static void worker_pool_dispatch(struct worker_pool *p) {
        struct list done;

        list_init(&done);
        pthread_mutex_lock(&p->lock);
        if (!list_empty(&p->done)) {
                /* splice the whole done list out under the lock */
                done.next = p->done.next;
                done.prev = p->done.prev;
                done.next->prev = &done;
                done.prev->next = &done;
                list_init(&p->done);
        }
        pthread_mutex_unlock(&p->lock);

        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &done) {
                struct work *w = list_entry(pos, struct work, link);
                list_unlink(&w->link);
                p->pending--;
                w->done(w);
        }
}

static void worker_pool_on_event(struct loop_watch *watch, uint32_t events) {
        struct worker_pool *p = container_of(watch, struct worker_pool, watch);
        uint64_t n;

        (void)events;
        if (read(p->event_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
                log_warn("worker: eventfd read: %m");
        worker_pool_dispatch(p);
}

int worker_pool_new(struct worker_pool **out, struct loop *loop, unsigned threads) {
        struct worker_pool *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        p->loop = loop;
        p->watch.fd = -1;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        list_init(&p->todo);
        list_init(&p->done);
        p->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->event_fd < 0) {
                r = -errno;
                goto fail;
        }
        r = loop_watch_add(loop, &p->watch, p->event_fd, EPOLLIN, worker_pool_on_event);
        if (r < 0)
                goto fail;
        p->threads = calloc(threads, sizeof(*p->threads));
        if (!p->threads) {
                r = -ENOMEM;
                goto fail;
        }
        for (unsigned i = 0; i < threads; i++) {
                r = -pthread_create(&p->threads[i], NULL, worker_main, p);
                if (r < 0)
                        goto fail;
                p->nthreads++;
        }
        *out = p;
        return 0;
fail:
        log_error("worker: cannot start pool: %s", strerror(-r));
        worker_pool_free(p);
        return r;
}

struct worker_pool *worker_pool_free(struct worker_pool *p) {
        if (!p)
                return NULL;
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->nthreads; i++)
                pthread_join(p->threads[i], NULL);
        worker_pool_dispatch(p);
        if (p->event_fd >= 0) {
                loop_watch_del(p->loop, &p->watch);
                close(p->event_fd);
        }
        free(p->threads);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
        return NULL;
}

void worker_pool_submit(struct worker_pool *p, struct work *w) {
        p->pending++;
        pthread_mutex_lock(&p->lock);
        list_add_tail(&p->todo, &w->link);
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
}

unsigned worker_pool_pending(struct worker_pool *p) {
        return p->pending;
}
