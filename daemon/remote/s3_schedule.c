/* SPDX-License-Identifier: MIT */
/*
 * s3_schedule — when each transfer of the client runs.  A transfer
 * moves through the client's lists: hash_wait → hashing (Content-MD5 on
 * the worker pool; bounded so a flush of a thousand parts neither floods
 * the pool nor holds a thousand dup'd fds) → queue (FIFO, waiting for one
 * of max_concurrent slots) → active (an attempt on the wire, s3.c) →
 * done, or → backoff (a loop timer, exponential with full jitter) → queue
 * again, ahead of what has not started.  Pause holds everything where it
 * is; the bandwidth cap is split evenly among the uploads on the wire.
 * Work is started from the kick, a zero timer, so that no start call runs
 * done() inside itself.
 *
 * Separate from the curl glue (s3.c) because this is policy — order,
 * limits, retries — that holds whatever carries the bytes; it owns the
 * lists, their counts and the timers of struct s3_client and
 * s3_transfer (s3_internal.h), and asks s3.c to start, pause, cap or
 * remove an attempt.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include "remote/s3_internal.h"
#include "util/cleanup.h"
#include "util/log.h"

#define HASH_CHUNK (1u << 20)

/*
 * Content-MD5 jobs on the worker pool at once.  One MD5 pass runs at
 * ~0.6 GB/s per core, several times an upload's rate, so two keep the wire
 * fed; more only take cores from the trainer and from the save path's own
 * checksum jobs queued behind them on the same workers (a pause cannot
 * stop a hash already running).
 */
#define S3_HASHING_MAX 2

/* Content-MD5 of an fd range, computed on a worker thread.  It owns a dup
 * of the fd, so a request cancelled meanwhile leaves it reading a file
 * that is still the right one; the work item then frees itself. */
struct hash_work {
        struct work work;
        struct s3_transfer *transfer; /* NULL once orphaned */
        int fd;
        uint64_t offset;
        uint64_t length;
        int error;
        unsigned char md5[MD5_LEN];
};

static void pump(struct s3_client *c);
static void hash_pump(struct s3_client *c);

void s3_schedule_init(struct s3_client *c) {
        list_init(&c->hash_wait);
        list_init(&c->hashing);
        list_init(&c->queue);
        list_init(&c->active);
        list_init(&c->backoff);
        if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != sizeof(c->rng))
                c->rng = (uint64_t)loop_now_ms() ^ ((uint64_t)getpid() << 32);
        c->rng |= 1;
}

static uint64_t client_random(struct s3_client *c) {
        /* xorshift64*: the jitter only has to decorrelate clients */
        uint64_t x = c->rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c->rng = x;
        return x * 0x2545F4914F6CDD1Dull;
}

static void transfer_move(struct s3_transfer *t, struct list *to, enum transfer_state state) {
        list_unlink(&t->link);
        list_add_tail(to, &t->link);
        t->state = state;
}

void s3_schedule_forget(struct s3_transfer *t) {
        list_unlink(&t->link);
        loop_timer_cancel(&t->retry_timer);
        if (t->work)
                t->work->transfer = NULL; /* the work frees itself */
}

/* ---- on the wire ---- */

static void bandwidth_update(struct s3_client *c) {
        struct list *pos, *tmp;
        unsigned uploads = 0;

        if (!c->max_send_bytes_per_sec)
                return;
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                uploads += t->has_body && t->body_length > 0;
        }
        if (!uploads)
                return;
        curl_off_t each = (curl_off_t)(c->max_send_bytes_per_sec / uploads);
        if (each < 1)
                each = 1;
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                if (t->has_body && t->body_length > 0)
                        s3_attempt_set_send_speed(t, each);
        }
}

void s3_client_pause(struct s3_client *c, bool paused) {
        struct list *pos, *tmp;

        if (c->paused == paused)
                return;
        c->paused = paused;
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                s3_attempt_pause(t, paused);
        }
        if (!paused) {
                pump(c);
                hash_pump(c);
        }
}

void s3_client_set_bandwidth(struct s3_client *c, uint64_t bytes_per_sec) {
        struct list *pos, *tmp;

        c->max_send_bytes_per_sec = bytes_per_sec;
        if (bytes_per_sec) {
                bandwidth_update(c);
                return;
        }
        list_for_each_safe(pos, tmp, &c->active) {
                struct s3_transfer *t = list_entry(pos, struct s3_transfer, link);
                if (t->has_body && t->body_length > 0)
                        s3_attempt_set_send_speed(t, 0);
        }
}

static void pump(struct s3_client *c) {
        while (!c->closing && !c->paused && c->nactive < c->max_concurrent &&
               !list_empty(&c->queue)) {
                struct s3_transfer *t = list_first_entry(&c->queue, struct s3_transfer, link);
                int r = s3_attempt_start(t);
                if (r < 0) {
                        t->why = "cannot set the request up";
                        s3_transfer_finish(t, r, true);
                        continue;
                }
                transfer_move(t, &c->active, T_ACTIVE);
                c->nactive++;
                if (c->nactive > c->stats.max_active)
                        c->stats.max_active = c->nactive;
                bandwidth_update(c);
        }
}

/* ---- retries ---- */

static void on_retry_timer(struct loop_timer *timer) {
        struct s3_transfer *t = container_of(timer, struct s3_transfer, retry_timer);
        struct s3_client *c = t->client;

        /* a retry goes ahead of requests that have not started yet */
        list_unlink(&t->link);
        list_add_tail(c->queue.next, &t->link);
        t->state = T_QUEUED;
        pump(c);
}

/* Retryable and attempts left: back off for a uniform time in
 * [0, min(cap, base * 2^(attempts-1))], then queue again. */
void s3_schedule_attempt_ended(struct s3_transfer *t, int error, bool permanent) {
        struct s3_client *c = t->client;
        struct s3_result *res = &t->req->result;

        c->nactive--;
        if (error && !permanent && res->attempts < c->retry_max_attempts && !c->closing) {
                unsigned shift = res->attempts - 1;
                uint64_t window = shift >= 32 ? c->retry_cap_ms
                                              : (uint64_t)c->retry_base_ms << shift;
                if (window > c->retry_cap_ms)
                        window = c->retry_cap_ms;
                uint64_t delay = client_random(c) % (window + 1);
                char why[1024];

                res->error = error;
                s3_describe_failure(t, why, sizeof(why));
                log_info("s3: %s %s %s: %s, attempt %u of %u, retrying in %" PRIu64 " ms",
                         s3_op_name(t->op), t->method, t->log_url, why, res->attempts,
                         c->retry_max_attempts, delay);
                c->stats.retries[t->op]++;
                transfer_move(t, &c->backoff, T_BACKOFF);
                loop_timer_start(c->loop, &t->retry_timer, delay, on_retry_timer);
        } else {
                s3_transfer_finish(t, error, permanent);
        }
        bandwidth_update(c);
        pump(c);
}

/* ---- hashing on the worker pool ---- */

static void hash_run(struct work *w) {
        struct hash_work *h = container_of(w, struct hash_work, work);
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        unsigned char *buf = malloc(HASH_CHUNK);
        uint64_t done = 0;

        h->error = 0;
        if (!ctx || !buf) {
                h->error = -ENOMEM;
                goto out;
        }
        if (EVP_DigestInit_ex(ctx, EVP_md5(), NULL) != 1) {
                h->error = -EIO;
                goto out;
        }
        while (done < h->length) {
                size_t want = h->length - done < HASH_CHUNK ? (size_t)(h->length - done) : HASH_CHUNK;
                ssize_t n = pread(h->fd, buf, want, (off_t)(h->offset + done));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        h->error = -errno;
                        goto out;
                }
                if (n == 0) {
                        h->error = -EIO; /* the range runs past the end of the file */
                        goto out;
                }
                if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
                        h->error = -EIO;
                        goto out;
                }
                done += (uint64_t)n;
        }
        if (EVP_DigestFinal_ex(ctx, h->md5, NULL) != 1)
                h->error = -EIO;
out:
        free(buf);
        EVP_MD_CTX_free(ctx);
}

static void queue_add(struct s3_transfer *t) {
        transfer_move(t, &t->client->queue, T_QUEUED);
}

static void hash_done(struct work *w) {
        struct hash_work *h = container_of(w, struct hash_work, work);
        struct s3_transfer *t = h->transfer;

        safe_close(h->fd);
        if (!t) {
                free(h);
                return;
        }
        struct s3_client *c = t->client;
        int error = h->error;
        t->work = NULL;
        c->nhashing--;
        if (!error) {
                error = s3_md5_base64(h->md5, t->content_md5);
                t->has_md5 = error == 0;
                c->stats.bytes_hashed += h->length;
        }
        free(h);
        if (error < 0) {
                t->why = error == -EIO ? "the body's range runs past the end of its file"
                                       : "cannot read the body's file to hash it";
                s3_transfer_finish(t, error, true);
        } else {
                queue_add(t);
                pump(c);
        }
        hash_pump(c);
}

static void hash_pump(struct s3_client *c) {
        while (!c->closing && !c->paused && c->nhashing < S3_HASHING_MAX &&
               !list_empty(&c->hash_wait)) {
                struct s3_transfer *t = list_first_entry(&c->hash_wait, struct s3_transfer, link);
                struct hash_work *h = calloc(1, sizeof(*h));
                int fd = h ? fcntl(t->body_fd, F_DUPFD_CLOEXEC, 3) : -1;
                if (fd < 0) {
                        int r = h ? -errno : -ENOMEM;
                        free(h);
                        t->why = "cannot duplicate the body's fd";
                        s3_transfer_finish(t, r, true);
                        continue;
                }
                h->work.run = hash_run;
                h->work.done = hash_done;
                h->transfer = t;
                h->fd = fd;
                h->offset = t->body_offset;
                h->length = t->body_length;
                t->work = h;
                c->nhashing++;
                transfer_move(t, &c->hashing, T_HASHING);
                worker_pool_submit(c->workers, &h->work);
        }
}

/* ---- starting ---- */

static void on_kick(struct loop_timer *timer) {
        struct s3_client *c = container_of(timer, struct s3_client, kick);

        hash_pump(c);
        pump(c);
}

/* Start what can start, on the next turn of the loop rather than now: a
 * start call must never run done() (a request failing to start) inside
 * itself. */
static void kick(struct s3_client *c) {
        if (!loop_timer_armed(&c->kick))
                loop_timer_start(c->loop, &c->kick, 0, on_kick);
}

void s3_schedule_submit(struct s3_transfer *t) {
        struct s3_client *c = t->client;

        if (t->body_fd >= 0 && !t->has_md5)
                transfer_move(t, &c->hash_wait, T_HASH_WAIT);
        else
                queue_add(t);
        kick(c);
}

/* ---- cancel ---- */

static void transfer_cancel(struct s3_transfer *t) {
        struct s3_client *c = t->client;

        switch (t->state) {
        case T_ACTIVE:
                s3_attempt_remove(t);
                c->nactive--;
                break;
        case T_HASHING:
                c->nhashing--;
                break;
        default:
                break;
        }
        s3_transfer_finish(t, -ECANCELED, false);
}

void s3_request_cancel(struct s3_client *c, struct s3_request *req) {
        if (!c || !req || !req->transfer || req->transfer->client != c)
                return;
        transfer_cancel(req->transfer);
        bandwidth_update(c);
        pump(c);
        hash_pump(c);
}

void s3_schedule_stop(struct s3_client *c) {
        struct list *lists[] = { &c->active, &c->backoff, &c->queue, &c->hashing, &c->hash_wait };
        for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
                while (!list_empty(lists[i]))
                        transfer_cancel(list_first_entry(lists[i], struct s3_transfer, link));
        loop_timer_cancel(&c->kick);
}

void s3_client_stats(const struct s3_client *c, struct s3_stats *out) {
        struct list *pos, *tmp;
        unsigned queued = 0;
        const struct list *lists[] = { &c->hash_wait, &c->hashing, &c->queue, &c->backoff };

        *out = c->stats;
        for (size_t i = 0; i < ARRAY_SIZE(lists); i++)
                list_for_each_safe(pos, tmp, (struct list *)lists[i])
                        queued++;
        out->active = c->nactive;
        out->queued = queued;
}

