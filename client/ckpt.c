/* SPDX-License-Identifier: MIT */
/*
 * libckpt — see ckpt.h.  Thin by design: the daemon owns the memory and
 * the durability; the library maps slots, copies (with the CRC32C folded
 * into the copy) and speaks the protocol.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ckpt.h"
#include "conn.h"
#include "copy.h"
#include "crc32c.h"

#define MIN_U64(a, b) ((a) < (b) ? (a) : (b))

_Static_assert(CKPT_REPLY_GRACE_MS == WIRE_REPLY_GRACE_MS, "ckpt.h promises conn.c's grace");

struct slot_map {
        void *addr;
        uint32_t gen;
};

struct ckpt_conn {
        pthread_mutex_t lock;
        struct wire wire;
        uint64_t slot_size;
        uint32_t slot_count;
        uint32_t block_size;
        struct slot_map *slots;
};

struct ckpt_shard {
        struct ckpt_shard *next;
        struct ckpt_save *save;
        uint32_t id;
        uint64_t size;
        uint64_t committed;
        bool window_open;
        uint32_t slot_id;
        uint64_t win_offset, win_length;
        void *win_addr;
};

struct ckpt_save {
        struct ckpt_conn *conn;
        uint32_t id;
        int replaced; /* ckpt_save_replaced()'s answer */
        struct ckpt_shard *shards;
};

static int name_check(struct ckpt_conn *c, struct ckpt_name *n, const char *str) {
        if (!str) {
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg), "name is NULL");
                return -EINVAL;
        }
        int r = ckpt_name_set(n, str);
        if (r == -ENAMETOOLONG)
                r = -EINVAL; /* one code for every invalid name, as ckpt.h says */
        if (r < 0)
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                         "invalid name '%.64s%s': use 1-%u characters of A-Z a-z 0-9 . _ + = : @ -, "
                         "not starting with '.' or '-'",
                         str, strlen(str) > 64 ? "..." : "", CKPT_NAME_MAX);
        return r;
}

/* Map the slot named by a reply (fd attached on first use of a generation). */
static int slot_attach(struct ckpt_conn *c, const struct ckpt_rep_slot *rs, int fd, void **addr) {
        if (rs->slot_id >= c->slot_count || rs->slot_offset > c->slot_size ||
            rs->length > c->slot_size - rs->slot_offset) {
                if (fd >= 0)
                        close(fd);
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg), "daemon named an invalid slot");
                return -EPROTO;
        }
        struct slot_map *m = &c->slots[rs->slot_id];
        if (rs->has_fd) {
                if (fd < 0) {
                        snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                                 "daemon announced a slot descriptor but none arrived");
                        return -EPROTO;
                }
                /* MAP_POPULATE: the pages exist already (the daemon touched
                 * them); fill our page tables now, not a fault per page
                 * during the copy. */
                void *p = mmap(NULL, c->slot_size, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_POPULATE, fd, 0);
                int err = errno;
                close(fd);
                if (p == MAP_FAILED) {
                        snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                                 "cannot map shared-memory slot: %s", strerror(err));
                        return -err;
                }
                if (m->addr)
                        munmap(m->addr, c->slot_size);
                m->addr = p;
                m->gen = rs->slot_gen;
        } else {
                if (fd >= 0)
                        close(fd);
                if (!m->addr || m->gen != rs->slot_gen) {
                        snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                                 "daemon reused a slot this connection has not mapped");
                        return -EPROTO;
                }
        }
        *addr = (char *)m->addr + rs->slot_offset;
        return 0;
}

/* Why the last ckpt_connect() of this thread failed: there is no
 * connection to hold the message (ckpt_last_error(NULL) returns it). */
static _Thread_local char connect_errmsg[CKPT_ERRMSG_MAX + 1];

int ckpt_connect(const char *socket_path, struct ckpt_conn **out) {
        struct ckpt_conn *c = calloc(1, sizeof(*c));
        struct ckpt_rep_hello hello;
        uint32_t timeout_ms;

        connect_errmsg[0] = 0;
        if (!c)
                return -ENOMEM;
        int r = wire_timeout_from_env(&timeout_ms, connect_errmsg, sizeof(connect_errmsg));
        if (r == 0)
                r = wire_open_within(&c->wire, socket_path, "ckpt_connect", timeout_ms, &hello);
        if (r < 0) {
                if (!connect_errmsg[0])
                        snprintf(connect_errmsg, sizeof(connect_errmsg), "%s", c->wire.errmsg);
                free(c);
                return r;
        }
        c->slot_size = hello.slot_size;
        c->slot_count = hello.slot_count;
        c->block_size = hello.block_size;
        if (c->slot_count == 0 || c->slot_size == 0 || c->block_size == 0 ||
            c->slot_size % c->block_size) {
                snprintf(connect_errmsg, sizeof(connect_errmsg),
                         "ckptd announced an invalid pool (%" PRIu32 " slots of %" PRIu64
                         " bytes, %" PRIu32 "-byte blocks)",
                         c->slot_count, c->slot_size, c->block_size);
                wire_close(&c->wire);
                free(c);
                return -EPROTO;
        }
        c->slots = calloc(c->slot_count, sizeof(*c->slots));
        if (!c->slots) {
                wire_close(&c->wire);
                free(c);
                return -ENOMEM;
        }
        pthread_mutex_init(&c->lock, NULL);
        *out = c;
        return 0;
}

int ckpt_set_timeout(struct ckpt_conn *c, uint32_t timeout_ms) {
        if (!c)
                return -EINVAL;
        pthread_mutex_lock(&c->lock);
        c->wire.timeout_ms = timeout_ms;
        pthread_mutex_unlock(&c->lock);
        return 0;
}

void ckpt_disconnect(struct ckpt_conn *c) {
        if (!c)
                return;
        wire_close(&c->wire);
        for (uint32_t i = 0; i < c->slot_count; i++)
                if (c->slots[i].addr)
                        munmap(c->slots[i].addr, c->slot_size);
        free(c->slots);
        pthread_mutex_destroy(&c->lock);
        free(c);
}

const char *ckpt_last_error(struct ckpt_conn *c) {
        return c ? c->wire.errmsg : connect_errmsg;
}

const char *ckpt_strerror(int err) {
        switch (err) {
        case 0:
                return "success";
        case -ENOENT:
                return "not found (no daemon at the socket path, or no such job, step, rank or "
                       "shard)";
        case -ECONNREFUSED:
                return "ckptd is not running (connection refused)";
        case -EINVAL:
                return "invalid argument or name";
        case -EACCES:
                return "the job belongs to another user";
        case -ETIMEDOUT:
                return "timed out (no free shared-memory slot, the step did not reach the tier "
                       "in time, or ckptd did not answer within the client's deadline)";
        case -ENOTCONN:
                return "the connection to ckptd is closed (after a deadline ran out or the "
                       "daemon went away): reconnect";
        case -ETIME:
                return "a window was not committed (or released) within the daemon's window "
                       "lease, and was taken back: the save failed";
        case -EBADMSG:
                return "torn shard: bytes changed after they were committed";
        case -EIO:
                return "stored data failed its checksum, or an I/O error";
        case -ENOSPC:
                return "the daemon's disk is full";
        case -EPROTONOSUPPORT:
                return "libckpt and ckptd speak different protocol versions";
        case -EPROTO:
                return "request out of order (e.g. finishing with incomplete shards, committing "
                       "with ranks missing)";
        case -EEXIST:
                return "already exists (step already committed, or shard name reused)";
        case -EBUSY:
                return "busy (rank already being saved, or step being committed)";
        case -ECONNRESET:
        case -EPIPE:
                return "lost the connection to ckptd";
        case -ERANGE:
                return "offset beyond the end of the shard";
        case -ESHUTDOWN:
                return "ckptd is shutting down";
        case -ECANCELED:
                return "the save was aborted";
        case -EOPNOTSUPP:
                return "not supported by this ckptd (too old, or the tier is not configured)";
        default:
                return err < 0 ? strerror(-err) : "not an error code";
        }
}

/* ---- save ---------------------------------------------------------------------- */

int ckpt_save_begin(struct ckpt_conn *c, const char *job, uint64_t step, uint32_t rank,
                    uint32_t world_size, struct ckpt_save **out) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SAVE_BEGIN };
        struct ckpt_reply rep;

        int r = name_check(c, &req.save_begin.job, job);
        if (r < 0)
                return r;
        if (world_size == 0 || rank >= world_size || step > CKPT_STEP_MAX) {
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                         "need rank < world_size, world_size >= 1 and step <= 2^63-1");
                return -EINVAL;
        }
        req.save_begin.step = step;
        req.save_begin.rank = rank;
        req.save_begin.world_size = world_size;
        struct ckpt_save *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_save_begin", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        if (r < 0) {
                free(s);
                return r;
        }
        s->conn = c;
        s->id = rep.id.id;
        /* a daemon that speaks only version 2 cannot say */
        s->replaced = req.hdr.version >= CKPT_PROTO_VERSION_REPLACED ? rep.id.replaced
                                                                     : -EOPNOTSUPP;
        *out = s;
        return 0;
}

int ckpt_save_replaced(const struct ckpt_save *s) {
        return s ? s->replaced : -EINVAL;
}

static void save_free(struct ckpt_save *s) {
        while (s->shards) {
                struct ckpt_shard *n = s->shards->next;
                free(s->shards);
                s->shards = n;
        }
        free(s);
}

/* what: the public call on whose behalf (named in deadline messages). */
static int shard_begin(struct ckpt_save *s, const char *name, uint64_t size,
                       struct ckpt_shard **out, const char *what) {
        struct ckpt_conn *c = s->conn;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_BEGIN };
        struct ckpt_reply rep;

        int r = name_check(c, &req.shard_begin.shard, name);
        if (r < 0)
                return r;
        if (size > CKPT_SHARD_SIZE_MAX)
                return -EFBIG;
        req.shard_begin.save_id = s->id;
        req.shard_begin.size = size;
        struct ckpt_shard *sh = calloc(1, sizeof(*sh));
        if (!sh)
                return -ENOMEM;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, what, WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        if (r < 0) {
                free(sh);
                return r;
        }
        sh->save = s;
        sh->id = rep.id.id;
        sh->size = size;
        sh->next = s->shards;
        s->shards = sh;
        *out = sh;
        return 0;
}

int ckpt_shard_begin(struct ckpt_save *s, const char *name, uint64_t size,
                     struct ckpt_shard **out) {
        return shard_begin(s, name, size, out, "ckpt_shard_begin");
}

static int shard_buffer(struct ckpt_shard *sh, void **buf, uint64_t *offset, uint64_t *len,
                        const char *what) {
        struct ckpt_conn *c = sh->save->conn;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_CHUNK_GET };
        struct ckpt_reply rep;
        int fd, r;

        if (sh->window_open) {
                *buf = sh->win_addr;
                *offset = sh->win_offset;
                *len = sh->win_length;
                return 0;
        }
        if (sh->committed >= sh->size)
                return -ERANGE;
        req.chunk_get.shard_id = sh->id;
        req.chunk_get.offset = sh->committed;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, what, WIRE_TIMEOUT_CONN, &req, &rep, &fd);
        if (r == 0)
                r = slot_attach(c, &rep.slot, fd, &sh->win_addr);
        pthread_mutex_unlock(&c->lock);
        if (r < 0)
                return r;
        if (rep.slot.offset != sh->committed || rep.slot.length == 0 ||
            rep.slot.length > sh->size - sh->committed)
                return -EPROTO;
        sh->window_open = true;
        sh->slot_id = rep.slot.slot_id;
        sh->win_offset = rep.slot.offset;
        sh->win_length = rep.slot.length;
        *buf = sh->win_addr;
        *offset = sh->win_offset;
        *len = sh->win_length;
        return 0;
}

int ckpt_shard_buffer(struct ckpt_shard *sh, void **buf, uint64_t *offset, uint64_t *len) {
        return shard_buffer(sh, buf, offset, len, "ckpt_shard_buffer");
}

static int shard_put(struct ckpt_shard *sh, uint32_t crc, const char *what) {
        struct ckpt_conn *c = sh->save->conn;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_CHUNK_PUT };
        struct ckpt_reply rep;

        req.chunk_put.shard_id = sh->id;
        req.chunk_put.slot_id = sh->slot_id;
        req.chunk_put.offset = sh->win_offset;
        req.chunk_put.length = sh->win_length;
        req.chunk_put.crc32c = crc;
        pthread_mutex_lock(&c->lock);
        int r = wire_call_within(&c->wire, what, WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        if (r < 0)
                return r;
        sh->window_open = false;
        sh->committed += sh->win_length;
        return sh->committed == sh->size ? 1 : 0;
}

int ckpt_shard_commit(struct ckpt_shard *sh) {
        if (!sh->window_open)
                return -EINVAL;
        return shard_put(sh, crc32c(0, sh->win_addr, sh->win_length), "ckpt_shard_commit");
}

int ckpt_save_write(struct ckpt_save *s, const char *name, const void *data, uint64_t size) {
        struct ckpt_shard *sh;
        int r = shard_begin(s, name, size, &sh, "ckpt_save_write");

        while (r >= 0 && sh->committed < sh->size) {
                void *buf;
                uint64_t off, len;
                r = shard_buffer(sh, &buf, &off, &len, "ckpt_save_write");
                if (r < 0)
                        break;
                /* the one copy a trainer waits for, checksummed on the way */
                uint32_t crc = crc32c_copy(0, buf, (const char *)data + off, len);
                r = shard_put(sh, crc, "ckpt_save_write");
        }
        return r < 0 ? r : 0;
}

int ckpt_save_finish(struct ckpt_save *s) {
        struct ckpt_conn *c = s->conn;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SAVE_FINISH };
        struct ckpt_reply rep;

        req.save.save_id = s->id;
        pthread_mutex_lock(&c->lock);
        int r = wire_call_within(&c->wire, "ckpt_save_finish", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        save_free(s);
        return r;
}

void ckpt_save_abort(struct ckpt_save *s) {
        if (!s)
                return;
        struct ckpt_conn *c = s->conn;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SAVE_ABORT };
        struct ckpt_reply rep;

        req.save.save_id = s->id;
        pthread_mutex_lock(&c->lock);
        (void)wire_call_within(&c->wire, "ckpt_save_abort", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        save_free(s);
}

int ckpt_wait(struct ckpt_conn *c, const char *job, uint64_t step, enum ckpt_wait_tier tier,
              uint32_t timeout_ms) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_WAIT };
        struct ckpt_reply rep;

        int r = name_check(c, &req.wait.job, job);
        if (r < 0)
                return r;
        if (tier < CKPT_STAGED || tier > CKPT_REPLICATED)
                return -EINVAL;
        req.wait.step = step;
        req.wait.tier = (uint8_t)tier;
        req.wait.timeout_ms = timeout_ms;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_wait", wire_timeout_plus_grace(&c->wire, timeout_ms),
                             &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        return r;
}

int ckpt_commit(struct ckpt_conn *c, const char *job, uint64_t step, uint32_t timeout_ms) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_COMMIT };
        struct ckpt_reply rep;

        int r = name_check(c, &req.job_step.job, job);
        if (r < 0)
                return r;
        req.job_step.step = step;
        req.job_step.timeout_ms = timeout_ms;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_commit",
                             wire_timeout_plus_grace(&c->wire, timeout_ms), &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        return r;
}

int ckpt_commit_async(struct ckpt_conn *c, const char *job, uint64_t step) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_COMMIT_ASYNC };
        struct ckpt_reply rep;

        int r = name_check(c, &req.job_step.job, job);
        if (r < 0)
                return r;
        req.job_step.step = step;
        pthread_mutex_lock(&c->lock);
        if (c->wire.proto && c->wire.proto < CKPT_PROTO_VERSION_COMMIT_ASYNC) {
                /* an older daemon has no such request: it would refuse the
                 * type as malformed, so do not send it */
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                         "this ckptd speaks protocol version %u, and commit requests "
                         "(ckpt_commit_async) need version %u: upgrade ckptd, or call "
                         "ckpt_commit() and wait", c->wire.proto, CKPT_PROTO_VERSION_COMMIT_ASYNC);
                pthread_mutex_unlock(&c->lock);
                return -EOPNOTSUPP;
        }
        r = wire_call_within(&c->wire, "ckpt_commit_async", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* ---- restore --------------------------------------------------------------------- */

int ckpt_latest(struct ckpt_conn *c, const char *job, uint64_t *step, uint32_t *world_size) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_LATEST };
        struct ckpt_reply rep;

        int r = name_check(c, &req.job_step.job, job);
        if (r < 0)
                return r;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_latest", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        if (r < 0)
                return r;
        if (step)
                *step = rep.latest.step;
        if (world_size)
                *world_size = rep.latest.world_size;
        return 0;
}

int ckpt_latest_rank(struct ckpt_conn *c, const char *job, uint32_t rank, uint64_t below,
                     uint64_t *step, uint32_t *world_size, uint64_t *newest) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_LATEST_RANK };
        struct ckpt_reply rep;

        int r = name_check(c, &req.latest_rank.job, job);
        if (r < 0)
                return r;
        if (rank >= CKPT_WORLD_MAX || (below != CKPT_STEP_LATEST && below > CKPT_STEP_MAX)) {
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                         "need rank < 2^20 and below <= 2^63-1 (or CKPT_STEP_LATEST: no bound)");
                return -EINVAL;
        }
        req.latest_rank.rank = rank;
        req.latest_rank.below = below;
        rep.hdr.type = 0;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_latest_rank", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        if (r == -EBADMSG && rep.hdr.type == CKPT_MSG_ERROR) {
                /* A daemon that predates LATEST_RANK finds its type unknown
                 * and calls the request malformed (ours never is: the
                 * encoder checked it). */
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                         "this ckptd does not know LATEST_RANK (it predates the fallback to "
                         "older steps): upgrade ckptd, or use ckpt_latest()");
                return -EOPNOTSUPP;
        }
        if (r < 0)
                return r;
        if (step)
                *step = rep.latest_rank.step;
        if (world_size)
                *world_size = rep.latest_rank.world_size;
        if (newest)
                *newest = rep.latest_rank.newest;
        return 0;
}

int ckpt_shard_list(struct ckpt_conn *c, const char *job, uint64_t step, uint32_t rank,
                    struct ckpt_shard_info **list, size_t *count) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_LIST };
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        struct ckpt_shard_info *out = NULL;
        size_t n = 0;
        int r;

        if (!rep)
                return -ENOMEM;
        r = name_check(c, &req.shard_list.job, job);
        req.shard_list.step = step;
        req.shard_list.rank = rank;
        while (r == 0) {
                req.shard_list.start = (uint32_t)n;
                req.hdr.type = CKPT_MSG_SHARD_LIST;
                pthread_mutex_lock(&c->lock);
                r = wire_call_within(&c->wire, "ckpt_shard_list", WIRE_TIMEOUT_CONN, &req, rep, NULL);
                pthread_mutex_unlock(&c->lock);
                if (r < 0)
                        break;
                const struct ckpt_rep_shard_list *l = &rep->shard_list;
                if (!out) {
                        out = calloc(l->total ? l->total : 1, sizeof(*out));
                        if (!out) {
                                r = -ENOMEM;
                                break;
                        }
                }
                for (uint32_t i = 0; i < l->count && n < l->total; i++, n++) {
                        snprintf(out[n].name, sizeof(out[n].name), "%s", l->entries[i].name.str);
                        out[n].size = l->entries[i].size;
                        out[n].crc32c = l->entries[i].crc32c;
                }
                if (n >= l->total || l->count == 0)
                        break;
        }
        free(rep);
        if (r < 0) {
                free(out);
                return r;
        }
        *list = out;
        *count = n;
        return 0;
}

void ckpt_shard_list_free(struct ckpt_shard_info *list) {
        free(list);
}

int64_t ckpt_read(struct ckpt_conn *c, const char *job, uint64_t step, uint32_t rank,
                  const char *shard, uint64_t offset, void *buf, uint64_t len) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_READ };
        struct ckpt_reply rep;
        uint64_t done = 0;
        int r;

        r = name_check(c, &req.read.job, job);
        if (r == 0)
                r = name_check(c, &req.read.shard, shard);
        if (r < 0)
                return r;
        req.read.step = step;
        req.read.rank = rank;
        pthread_mutex_lock(&c->lock);
        while (done < len) {
                uint64_t off = offset + done;
                /* one slot holds whole CRC blocks: stay inside one */
                uint64_t piece = MIN_U64(len - done, c->slot_size - off % c->block_size);
                int fd;
                void *src = NULL;

                req.hdr.type = CKPT_MSG_READ;
                req.read.offset = off;
                req.read.length = piece;
                r = wire_call_within(&c->wire, "ckpt_read", WIRE_TIMEOUT_CONN, &req, &rep, &fd);
                if (r < 0)
                        break;
                uint64_t got = rep.slot.length;
                if (got == 0) {
                        /* end of the shard: the reply names no slot */
                        if (fd >= 0)
                                close(fd);
                        break;
                }
                r = slot_attach(c, &rep.slot, fd, &src);
                if (r < 0)
                        break;
                if (got > piece || rep.slot.offset != off) {
                        r = -EPROTO;
                        break;
                }
                /* streaming stores: a restore is far larger than any cache */
                copy_large((char *)buf + done, src, got);
                struct ckpt_request rd = { .hdr.type = CKPT_MSG_READ_DONE };
                struct ckpt_reply rdrep;
                rd.read_done.slot_id = rep.slot.slot_id;
                r = wire_call_within(&c->wire, "ckpt_read", WIRE_TIMEOUT_CONN, &rd, &rdrep, NULL);
                if (r < 0)
                        break;
                /* the daemon may return less than asked (a shorter
                 * window when the pool is busy): ask again for the rest */
                done += got;
        }
        pthread_mutex_unlock(&c->lock);
        return r < 0 ? r : (int64_t)done;
}

static const char empty_mapping[1];

int ckpt_map(struct ckpt_conn *c, const char *job, uint64_t step, uint32_t rank,
             const char *shard, const void **addr, uint64_t *size) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_MAP };
        struct ckpt_reply rep;
        int fd, r;

        r = name_check(c, &req.read.job, job);
        if (r == 0)
                r = name_check(c, &req.read.shard, shard);
        if (r < 0)
                return r;
        req.read.step = step;
        req.read.rank = rank;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_map", WIRE_TIMEOUT_CONN, &req, &rep, &fd);
        pthread_mutex_unlock(&c->lock);
        if (r < 0)
                return r;
        if (fd < 0)
                return -EPROTO;
        if (rep.map.size == 0) {
                close(fd);
                *addr = empty_mapping;
                *size = 0;
                return 0;
        }
        if (rep.map.memory) {
                /* The daemon's memory tier: its slot, read-only, the shard
                 * at rep.map.offset.  Neither populated nor checked here:
                 * the pages are resident already (a fault maps each on
                 * first touch), and the daemon checked every block when the
                 * shard was staged, so ckpt_map() costs microseconds rather
                 * than a pass over the shard (docs/design-decisions.md,
                 * "The memory tier"). */
                void *p = mmap(NULL, rep.map.size, PROT_READ, MAP_SHARED, fd,
                               (off_t)rep.map.offset);
                int err = errno;
                close(fd);
                if (p == MAP_FAILED)
                        return -err;
                *addr = p;
                *size = rep.map.size;
                return 0;
        }
        void *p = mmap(NULL, rep.map.size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
        int err = errno;
        close(fd);
        if (p == MAP_FAILED)
                return -err;
        if (crc32c(0, p, rep.map.size) != rep.map.crc32c) {
                munmap(p, rep.map.size);
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg),
                         "shard '%s' does not match its checksum: the stored copy is corrupt", shard);
                return -EIO;
        }
        *addr = p;
        *size = rep.map.size;
        return 0;
}

void ckpt_unmap(const void *addr, uint64_t size) {
        if (addr && addr != empty_mapping && size > 0)
                munmap((void *)addr, size);
}

/* ---- one shard from several buffers --------------------------------------------------- */

int ckpt_save_writev(struct ckpt_save *s, const char *name, const struct iovec *iov, int iovcnt) {
        uint64_t size = 0;

        if (!s || iovcnt < 0 || (iovcnt > 0 && !iov))
                return -EINVAL;
        for (int i = 0; i < iovcnt; i++) {
                if (iov[i].iov_len && !iov[i].iov_base)
                        return -EINVAL;
                if (iov[i].iov_len > CKPT_SHARD_SIZE_MAX - size)
                        return -EFBIG;
                size += iov[i].iov_len;
        }
        struct ckpt_shard *sh;
        int r = shard_begin(s, name, size, &sh, "ckpt_save_writev");
        /* where the next byte comes from: piece `at`, `used` bytes into it */
        int at = 0;
        size_t used = 0;
        while (r >= 0 && sh->committed < sh->size) {
                void *buf;
                uint64_t off, len;
                r = shard_buffer(sh, &buf, &off, &len, "ckpt_save_writev");
                if (r < 0)
                        break;
                /* Fill the window piece by piece: each byte is copied once,
                 * with the CRC32C folded in, as in ckpt_save_write(). */
                uint32_t crc = 0;
                uint64_t filled = 0;
                while (filled < len) {
                        while (iov[at].iov_len == used) {
                                at++;
                                used = 0;
                        }
                        size_t n = (size_t)MIN_U64(len - filled, iov[at].iov_len - used);
                        crc = crc32c_copy(crc, (char *)buf + filled,
                                          (const char *)iov[at].iov_base + used, n);
                        filled += n;
                        used += n;
                }
                r = shard_put(sh, crc, "ckpt_save_writev");
        }
        return r < 0 ? r : 0;
}

/* ---- pins and listings ------------------------------------------------------------------ */

int ckpt_pin(struct ckpt_conn *c, const char *job, uint64_t step, int pinned) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_PIN };
        struct ckpt_reply rep;

        int r = name_check(c, &req.pin.job, job);
        if (r < 0)
                return r;
        if (step > CKPT_STEP_MAX) {
                snprintf(c->wire.errmsg, sizeof(c->wire.errmsg), "need step <= 2^63-1");
                return -EINVAL;
        }
        req.pin.step = step;
        req.pin.pinned = pinned != 0;
        pthread_mutex_lock(&c->lock);
        r = wire_call_within(&c->wire, "ckpt_pin", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        pthread_mutex_unlock(&c->lock);
        return r;
}

/*
 * Every page of a JOB_LIST or CKPT_LIST answer: calls `take` for each
 * page's entries until `total` entries arrived (or a page is empty: the
 * list shrank meanwhile).  The daemon pages so that each reply stays under
 * CKPT_MSG_MAX; a list that changes between pages may repeat or skip an
 * entry, which a listing can live with.
 */
typedef int (*page_take_fn)(const struct ckpt_reply *rep, size_t at, void *out, uint32_t *count,
                            uint32_t *total);

static int list_pages(struct ckpt_conn *c, struct ckpt_request *req, const char *what,
                      size_t entry_size, page_take_fn take, void **list, size_t *count) {
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        char *all = NULL;
        size_t n = 0;
        int r = 0;

        if (!rep)
                return -ENOMEM;
        uint16_t type = req->hdr.type;
        for (;;) {
                req->hdr.type = type;
                req->list.start = (uint32_t)n;
                pthread_mutex_lock(&c->lock);
                r = wire_call_within(&c->wire, what, WIRE_TIMEOUT_CONN, req, rep, NULL);
                pthread_mutex_unlock(&c->lock);
                if (r < 0)
                        break;
                uint32_t got, total;
                (void)take(rep, 0, NULL, &got, &total);
                char *grown = realloc(all, (n + got + 1) * entry_size);
                if (!grown) {
                        r = -ENOMEM;
                        break;
                }
                all = grown;
                memset(all + n * entry_size, 0, (got + 1) * entry_size);
                (void)take(rep, n, all, &got, &total);
                n += got;
                if (got == 0 || n >= total)
                        break;
        }
        free(rep);
        if (r < 0) {
                free(all);
                return r;
        }
        *list = all;
        *count = n;
        return 0;
}

static int take_jobs(const struct ckpt_reply *rep, size_t at, void *out, uint32_t *count,
                     uint32_t *total) {
        const struct ckpt_rep_job_list *l = &rep->job_list;
        *count = l->count;
        *total = l->total;
        for (uint32_t i = 0; out && i < l->count; i++) {
                struct ckpt_job_info *j = (struct ckpt_job_info *)out + at + i;
                const struct ckpt_job_entry *e = &l->entries[i];
                snprintf(j->name, sizeof(j->name), "%s", e->name.str);
                j->uid = e->uid;
                j->latest_committed = e->latest_committed;
                j->checkpoints = e->checkpoints;
                j->committed = e->committed;
                j->bytes_local = e->bytes_local;
                j->errors = e->errors;
        }
        return 0;
}

static int take_steps(const struct ckpt_reply *rep, size_t at, void *out, uint32_t *count,
                      uint32_t *total) {
        const struct ckpt_rep_ckpt_list *l = &rep->ckpt_list;
        *count = l->count;
        *total = l->total;
        for (uint32_t i = 0; out && i < l->count; i++) {
                struct ckpt_step_info *s = (struct ckpt_step_info *)out + at + i;
                const struct ckpt_ckpt_entry *e = &l->entries[i];
                s->step = e->step;
                s->world_size = e->world_size;
                s->ranks_local = e->ranks_local;
                s->state = e->state;
                s->remote_state = e->remote_state;
                s->pinned = e->pinned;
                s->replicas = e->replicas;
                s->bytes = e->bytes;
                s->shards = e->shards;
                s->committed_at = e->committed_at;
        }
        return 0;
}

int ckpt_jobs(struct ckpt_conn *c, struct ckpt_job_info **list, size_t *count) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_JOB_LIST };

        if (!c || !list || !count)
                return -EINVAL;
        return list_pages(c, &req, "ckpt_jobs", sizeof(**list), take_jobs, (void **)list, count);
}

void ckpt_jobs_free(struct ckpt_job_info *list) {
        free(list);
}

int ckpt_steps(struct ckpt_conn *c, const char *job, struct ckpt_step_info **list,
               size_t *count) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_CKPT_LIST };

        if (!c || !list || !count)
                return -EINVAL;
        int r = name_check(c, &req.list.job, job);
        if (r < 0)
                return r;
        return list_pages(c, &req, "ckpt_steps", sizeof(**list), take_steps, (void **)list,
                          count);
}

void ckpt_steps_free(struct ckpt_step_info *list) {
        free(list);
}

/* The public enums are the protocol's values, spelled for users. */
_Static_assert((int)CKPT_STEP_SAVING == (int)CKPT_STATE_SAVING &&
                       (int)CKPT_STEP_LOCAL == (int)CKPT_STATE_LOCAL &&
                       (int)CKPT_STEP_COMMITTED == (int)CKPT_STATE_COMMITTED &&
                       (int)CKPT_STEP_FAILED == (int)CKPT_STATE_FAILED,
               "enum ckpt_step_state follows enum ckpt_state");
_Static_assert((int)CKPT_STEP_REMOTE_NONE == (int)CKPT_REMOTE_NONE &&
                       (int)CKPT_STEP_REMOTE_FLUSHING == (int)CKPT_REMOTE_FLUSHING &&
                       (int)CKPT_STEP_REMOTE_MANIFEST == (int)CKPT_REMOTE_MANIFEST &&
                       (int)CKPT_STEP_REMOTE_DONE == (int)CKPT_REMOTE_DONE &&
                       (int)CKPT_STEP_REMOTE_FAILED == (int)CKPT_REMOTE_FAILED,
               "enum ckpt_step_remote follows enum ckpt_remote_state");
