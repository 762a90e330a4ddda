/* SPDX-License-Identifier: MIT */
/*
 * server — listening socket, connections, message framing and dispatch.
 *
 * Every packet is decoded by proto/ (which validates everything); anything
 * malformed gets an ERROR reply naming what was wrong and changes nothing.
 * The peer's credentials come from SO_PEERCRED, once, at accept.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckptd-config.h"
#include "crc32c.h"
#include "metrics/metrics.h"
#include "server/conn.h"
#include "server/exposition.h"
#include "server/delete.h"
#include "server/heal.h"
#include "server/restore.h"
#include "server/retention_request.h"
#include "server/save.h"
#include "scrub/scrub.h"
#include "server/server.h"
#include "server/verify.h"
#include "server/cluster_view.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"

struct outmsg {
        struct list link;
        int fd; /* attached via SCM_RIGHTS, owned, -1 if none */
        size_t len;
        uint8_t data[];
};

/* Errors of one uid's jobs since start.  The daemon-wide last error
 * (log_last_error) may name any job and any trainer's pid, so only root
 * sees it; everyone else sees the errors of their own jobs. */
struct uid_errors {
        struct list link;
        uint32_t uid;
        uint64_t count;
        char last[CKPT_ERRMSG_MAX + 1];
};

static void conn_close(struct conn *c);

/* ---- sending ------------------------------------------------------------------ */

static int conn_send_raw(struct conn *c, const void *data, size_t len, int fd) {
        struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } ctrl;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };

        if (fd >= 0) {
                memset(&ctrl, 0, sizeof(ctrl));
                msg.msg_control = ctrl.buf;
                msg.msg_controllen = sizeof(ctrl.buf);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        }
        ssize_t n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0)
                return -errno;
        return 0;
}

static void conn_update_events(struct conn *c) {
        uint32_t ev = 0;
        if (!c->busy && !c->closing)
                ev |= EPOLLIN;
        if (!list_empty(&c->outq))
                ev |= EPOLLOUT;
        loop_watch_mod(c->srv->loop, &c->watch, ev);
}

static void conn_flush(struct conn *c) {
        while (!list_empty(&c->outq)) {
                struct outmsg *m = list_first_entry(&c->outq, struct outmsg, link);
                int r = conn_send_raw(c, m->data, m->len, m->fd);
                if (r == -EAGAIN)
                        break;
                list_unlink(&m->link);
                safe_close(m->fd);
                free(m);
                if (r < 0) {
                        conn_close(c);
                        return;
                }
        }
        conn_update_events(c);
}

/* Queue or send one encoded message; takes ownership of fd. */
static void conn_send(struct conn *c, const void *data, size_t len, int fd) {
        if (c->closing) {
                safe_close(fd);
                return;
        }
        if (list_empty(&c->outq)) {
                int r = conn_send_raw(c, data, len, fd);
                if (r == 0) {
                        safe_close(fd);
                        return;
                }
                if (r != -EAGAIN) {
                        safe_close(fd);
                        log_debug("server: client %u: send failed: %s", c->id, strerror(-r));
                        conn_close(c);
                        return;
                }
        }
        struct outmsg *m = malloc(sizeof(*m) + len);
        if (!m) {
                safe_close(fd);
                conn_close(c);
                return;
        }
        m->fd = fd;
        m->len = len;
        memcpy(m->data, data, len);
        list_add_tail(&c->outq, &m->link);
        conn_update_events(c);
}

void conn_reply(struct conn *c, struct ckpt_reply *rep, int fd) {
        static uint8_t buf[CKPT_MSG_MAX];

        if (rep->hdr.type != CKPT_MSG_ERROR)
                rep->hdr.type = c->busy_type | CKPT_MSG_REPLY;
        rep->hdr.seq = c->busy_seq;
        rep->hdr.version = c->busy_version;
        int n = ckpt_reply_encode(rep, buf, sizeof(buf));
        if (n < 0) {
                /* A reply we cannot encode is our bug; say so rather than
                 * leave the client hanging. */
                log_error("server: cannot encode %s reply: %s", ckpt_msg_type_name(c->busy_type),
                          strerror(-n));
                safe_close(fd);
                struct ckpt_reply err = { .hdr.type = CKPT_MSG_ERROR, .hdr.seq = c->busy_seq,
                                          .hdr.version = c->busy_version };
                err.error.error = -EIO;
                snprintf(err.error.message, sizeof(err.error.message),
                         "internal error: daemon could not encode its reply");
                n = ckpt_reply_encode(&err, buf, sizeof(buf));
                if (n < 0)
                        return;
                fd = -1;
        }
        conn_send(c, buf, (size_t)n, fd);
        conn_done(c);
        if (c->owed_shutdown) {
                c->owed_shutdown = false;
                server_check_drained(c->srv);
        }
}

void conn_reply_empty(struct conn *c) {
        struct ckpt_reply rep = { 0 };
        conn_reply(c, &rep, -1);
}

/* Copy a text into a field of cap bytes (NUL included), cut at a
 * character boundary: a text field is at most CKPT_ERRMSG_MAX bytes on the
 * wire, and what is cut ends up in JSON. */
void text_copy(char *dst, size_t cap, const char *src) {
        size_t len = strlen(src), keep = MIN(len, cap - 1);
        while (keep < len && keep > 0 && ((unsigned char)src[keep] & 0xc0) == 0x80)
                keep--;
        memcpy(dst, src, keep);
        dst[keep] = '\0';
}

void conn_error(struct conn *c, int error, const char *fmt, ...) {
        struct ckpt_reply rep = { .hdr.type = CKPT_MSG_ERROR };
        char msg[2 * CKPT_ERRMSG_MAX];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        text_copy(rep.error.message, sizeof(rep.error.message), msg);
        metrics_count(METRIC_ERRORS_REQUEST, 1);
        if (error >= 0 || error <= -4096)
                error = -EIO;
        rep.error.error = error;
        log_info("client %u (pid %d uid %u): %s: %s", c->id, (int)c->pid, (unsigned)c->uid,
                 ckpt_msg_type_name(c->busy_type), rep.error.message);
        conn_reply(c, &rep, -1);
}

void conn_done(struct conn *c) {
        if (!c->busy)
                return;
        c->busy = false;
        c->pending = NULL;
        if (!c->closing)
                conn_update_events(c);
}

void conn_reply_slot(struct conn *c, const struct pool_extent *e, uint64_t offset_in_extent,
                     uint64_t offset, uint64_t length) {
        struct ckpt_reply rep = { 0 };
        struct slot *slot = e->slot;
        int fd = -1;

        rep.slot.slot_id = slot->id;
        rep.slot.slot_gen = slot->gen;
        rep.slot.slot_offset = pool_extent_offset(e) + offset_in_extent;
        rep.slot.offset = offset;
        rep.slot.length = length;
        if (c->slot_gen_sent[slot->id] != slot->gen + 1) {
                fd = fcntl(slot->memfd, F_DUPFD_CLOEXEC, 3);
                if (fd < 0) {
                        conn_error(c, -errno, "cannot pass shared memory: %m");
                        return;
                }
                rep.slot.has_fd = 1;
                c->slot_gen_sent[slot->id] = slot->gen + 1;
        }
        conn_reply(c, &rep, fd);
}

/* Whose jobs a client may see: its own, or everyone's for root. */
static int64_t conn_visible_uid(const struct conn *c) {
        return c->uid == 0 ? -1 : (int64_t)c->uid;
}

/* -EMFILE with msg when uid may not hold n more descriptors. */
static int files_refused(struct server *srv, uint32_t uid, uint32_t n, const char *what,
                         char *msg, size_t msglen) {
        int r = fd_budget_check(&srv->files, uid, n);

        if (r < 0)
                snprintf(msg, msglen, "uid %u holds %u open files on this node (in unfinished "
                         "saves and reads), its limit ([daemon] open_files_per_uid = %u), and %s "
                         "needs %u more: finish or abort some of its saves first",
                         (unsigned)uid, fd_budget_held(&srv->files, uid), srv->files.per_uid,
                         what, n);
        return r;
}

int server_take_files(struct server *srv, uint32_t uid, uint32_t n, const char *what, char *msg,
                      size_t msglen) {
        int r = files_refused(srv, uid, n, what, msg, msglen);

        if (r < 0)
                return r;
        r = fd_budget_take(&srv->files, uid, n);
        if (r < 0)
                snprintf(msg, msglen, "out of memory counting open files");
        return r;
}

/* Check (take = false) or take n descriptors for c's uid; a refusal is
 * sent to c. */
static int conn_files(struct conn *c, uint32_t n, const char *what, bool take) {
        char msg[CKPT_ERRMSG_MAX + 1];
        uint32_t uid = (uint32_t)c->uid;
        int r = take ? server_take_files(c->srv, uid, n, what, msg, sizeof(msg))
                     : files_refused(c->srv, uid, n, what, msg, sizeof(msg));

        if (r < 0)
                conn_error(c, r, "%s", msg);
        return r;
}

int conn_take_files(struct conn *c, uint32_t n, const char *what) {
        return conn_files(c, n, what, true);
}

int conn_check_files(struct conn *c, uint32_t n, const char *what) {
        return conn_files(c, n, what, false);
}

int conn_check_job(struct conn *c, const char *job, bool write) {
        uint32_t owner;
        int r = catalog_job_uid(c->srv->catalog, job, &owner);
        if (r < 0)
                return r;
        if (owner == (uint32_t)c->uid || (!write && c->uid == 0))
                return 0;
        return -EACCES;
}

/* ---- requests ----------------------------------------------------------------- */

static void handle_hello(struct conn *c, const struct ckpt_req_hello *req) {
        struct ckpt_reply rep = { 0 };

        if (req->proto_min > CKPT_PROTO_VERSION || req->proto_max < CKPT_PROTO_VERSION_MIN) {
                conn_error(c, -EPROTONOSUPPORT,
                           "client speaks protocol versions %u..%u, this daemon speaks %u..%u: "
                           "upgrade libckpt or ckptd so they match",
                           req->proto_min, req->proto_max, CKPT_PROTO_VERSION_MIN,
                           CKPT_PROTO_VERSION);
                return;
        }
        c->hello = true;
        /* the newest both speak; each later request says its own in its
         * header, and is answered in it */
        rep.hello.proto = MIN(req->proto_max, (uint16_t)CKPT_PROTO_VERSION);
        rep.hello.slot_count = pool_slot_count(c->srv->pool);
        rep.hello.slot_size = pool_slot_size(c->srv->pool);
        rep.hello.block_size = MANIFEST_BLOCK_SIZE;
        snprintf(rep.hello.daemon_version, sizeof(rep.hello.daemon_version), "%s", CKPTD_VERSION);
        conn_reply(c, &rep, -1);
}

static struct uid_errors *uid_errors_find(struct server *srv, uint32_t uid) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &srv->uid_errors) {
                struct uid_errors *e = list_entry(pos, struct uid_errors, link);
                if (e->uid == uid)
                        return e;
        }
        return NULL;
}

static void job_error_record(struct server *srv, const struct log_ctx *ctx, const char *fmt,
                             va_list ap) {
        char msg[2 * CKPT_ERRMSG_MAX];
        const char *job = ctx->job;
        uint32_t owner;

        vsnprintf(msg, sizeof(msg), fmt, ap);
        log_event(LOG_ERR, ctx, "%s", msg);
        metrics_count(METRIC_ERRORS_JOB, 1);
        /* (void): -ENOENT: the job has no row yet (its first save failed); the message is
         * logged above either way */
        (void)catalog_job_error(srv->catalog, job);
        if (catalog_job_uid(srv->catalog, job, &owner) < 0)
                return; /* no such job (yet): root sees it in the daemon's last error */
        struct uid_errors *e = uid_errors_find(srv, owner);
        if (!e) {
                e = calloc(1, sizeof(*e));
                if (!e)
                        return;
                e->uid = owner;
                list_add_tail(&srv->uid_errors, &e->link);
        }
        e->count++;
        text_copy(e->last, sizeof(e->last), msg);
}

void server_job_error(struct server *srv, const char *job, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        job_error_record(srv, LOG_CTX(.job = job), fmt, ap);
        va_end(ap);
}

void server_job_event(struct server *srv, const struct log_ctx *ctx, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        job_error_record(srv, ctx, fmt, ap);
        va_end(ap);
}

/* STATUS shows everyone the daemon's own state (pool, load, tiers' health)
 * but what names a job or a process only to the job's owner and root:
 * the last error and the error count, and the object store's last error. */
static void status_restrict(struct conn *c, struct ckpt_rep_status *st) {
        struct server *srv = c->srv;

        if (c->uid == 0)
                return;
        const char *last;
        server_errors_seen(srv, (int64_t)c->uid, &st->errors, &last);
        snprintf(st->last_error, sizeof(st->last_error), "%s", last);
        if (srv->flusher && st->remote_error[0]) {
                uint32_t owner;
                const char *job = flush_last_error_job(srv->flusher);
                if (!*job || catalog_job_uid(srv->catalog, job, &owner) < 0 ||
                    owner != (uint32_t)c->uid)
                        snprintf(st->remote_error, sizeof(st->remote_error),
                                 "(the last error concerns another user's job: root sees it)");
        }
}

void server_errors_seen(struct server *srv, int64_t uid, uint64_t *count, const char **last) {
        if (uid < 0) {
                *count = log_error_count();
                *last = log_last_error() ? log_last_error() : "";
                return;
        }
        const struct uid_errors *e = uid_errors_find(srv, (uint32_t)uid);
        *count = e ? e->count : 0;
        *last = e ? e->last : "";
}

void server_status_gather(struct server *srv, int64_t uid, struct ckpt_rep_status *st) {
        snprintf(st->daemon_version, sizeof(st->daemon_version), "%s", CKPTD_VERSION);
        st->uptime_ms = loop_now_ms() - srv->start_ms;
        st->slot_count = pool_slot_count(srv->pool);
        st->slots_used = pool_slots_used(srv->pool);
        st->slot_waiters = pool_waiters(srv->pool);
        st->pool_bytes = (uint64_t)st->slot_count * pool_slot_size(srv->pool);
        st->pool_used_bytes = pool_bytes_used(srv->pool);
        st->bytes_in_flight = srv->bytes_in_flight;
        st->shards_in_flight = srv->shards_in_flight;
        st->clients = srv->nconns;
        st->saves_active = srv->saves_active;
        st->bytes_written = store_bytes_written(srv->store);
        st->bytes_read = store_bytes_read(srv->store);
        if (srv->memtier) {
                st->memory_bytes = memtier_bytes(srv->memtier);
                st->memory_steps = memtier_steps(srv->memtier);
        }
        st->errors = log_error_count();
        st->jobs = catalog_job_count(srv->catalog, uid);
        const char *last = log_last_error();
        snprintf(st->last_error, sizeof(st->last_error), "%s", last ? last : "");
        snprintf(st->state_dir, sizeof(st->state_dir), "%s", srv->opts.state_dir ? srv->opts.state_dir : "");
        st->node_index = srv->opts.node_index;
        st->node_count = srv->opts.node_count ? srv->opts.node_count : 1;
        if (srv->flusher) {
                st->remote_enabled = 1;
                snprintf(st->remote_target, sizeof(st->remote_target), "%s",
                         srv->opts.remote_target ? srv->opts.remote_target : "");
                flush_status(srv->flusher, st);
        }
        if (srv->audit) {
                struct audit_stats as;
                audit_get_stats(srv->audit, &as);
                st->audit_passes = as.passes;
                st->audit_objects_checked = as.objects_checked;
                st->audit_objects_bad = as.objects_bad;
                st->audit_objects_repaired = as.objects_repaired;
        }
        if (srv->peers) {
                st->replication_enabled = 1;
                peers_status(srv->peers, st->peers, sizeof(st->peers), &st->peers_up,
                             &st->peers_total, &st->repl_steps_pending);
        }
        /* findings name jobs: a uid other than root sees its own jobs' */
        scrub_status(srv->scrub, uid, st);
        /* (void): a catalog error is logged there; the counts read 0 */
        (void)catalog_copy_fault_counts(srv->catalog, &st->copies_bad, &st->copies_repaired,
                                        &st->copies_unrepairable);
}

static void handle_status(struct conn *c) {
        struct ckpt_reply rep = { 0 };

        server_status_gather(c->srv, conn_visible_uid(c), &rep.status);
        status_restrict(c, &rep.status);
        conn_reply(c, &rep, -1);
}

/* Pages of one rendering: offset 0 renders, a later offset continues the
 * document the connection holds (docs/protocol.md, METRICS). */
static void handle_metrics(struct conn *c, const struct ckpt_req_metrics *req) {
        if (req->offset == 0 || !c->metrics_doc) {
                free(c->metrics_doc);
                c->metrics_doc = NULL;
                int r = exposition_render(c->srv, conn_visible_uid(c), &c->metrics_doc,
                                          &c->metrics_len);
                if (r < 0) {
                        conn_error(c, r, "cannot render the metrics: %s", strerror(-r));
                        return;
                }
        }
        if (req->offset > c->metrics_len) {
                conn_error(c, -EINVAL, "offset %" PRIu64 " is past the end of the metrics "
                           "document (%zu bytes); start again at offset 0", req->offset,
                           c->metrics_len);
                return;
        }
        struct ckpt_reply *rep = calloc(1, sizeof(*rep));
        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        struct ckpt_rep_metrics *m = &rep->metrics;
        m->total = c->metrics_len;
        m->offset = req->offset;
        m->length = (uint32_t)MIN((uint64_t)CKPT_METRICS_CHUNK, c->metrics_len - req->offset);
        memcpy(m->text, c->metrics_doc + req->offset, m->length);
        conn_reply(c, rep, -1);
        free(rep);
}

static void handle_job_list(struct conn *c, const struct ckpt_req_list *req) {
        struct ckpt_reply *rep = calloc(1, sizeof(*rep));
        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        int r = catalog_job_list(c->srv->catalog, req->start, conn_visible_uid(c), &rep->job_list);
        if (r < 0)
                conn_error(c, r, "cannot list jobs: catalog error");
        else
                conn_reply(c, rep, -1);
        free(rep);
}

static void handle_ckpt_list(struct conn *c, const struct ckpt_req_list *req) {
        int r = conn_check_job(c, req->job.str, false);
        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", req->job.str);
                return;
        }
        struct ckpt_reply *rep = calloc(1, sizeof(*rep));
        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        r = catalog_ckpt_list(c->srv->catalog, req->job.str, req->start, &rep->ckpt_list);
        if (r == -ENOENT)
                conn_error(c, r, "no job named '%s'", req->job.str);
        else if (r < 0)
                conn_error(c, r, "cannot list checkpoints of '%s': catalog error", req->job.str);
        if (r < 0) {
                free(rep);
                return;
        }
        for (uint32_t i = 0; c->srv->memtier && i < rep->ckpt_list.count; i++)
                rep->ckpt_list.entries[i].memory =
                        memtier_step_resident(c->srv->memtier, req->job.str,
                                              rep->ckpt_list.entries[i].step);
        conn_reply(c, rep, -1);
        free(rep);
}

/* Pins keep a step through local and object-store retention alike. */
static void handle_pin(struct conn *c, const struct ckpt_req_pin *req) {
        int r = conn_check_job(c, req->job.str, true);
        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", req->job.str);
                return;
        }
        if (r < 0) {
                conn_error(c, r, "no job named '%s'", req->job.str);
                return;
        }
        r = catalog_pin(c->srv->catalog, req->job.str, req->step, req->pinned);
        if (r == -ENOENT) {
                conn_error(c, r, "job '%s' has no step %" PRIu64 " on this node", req->job.str,
                           req->step);
                return;
        }
        if (r < 0) {
                conn_error(c, r, "cannot record the pin: catalog error");
                return;
        }
        log_info("job %s step %" PRIu64 ": %s by uid %u", req->job.str, req->step,
                 req->pinned ? "pinned" : "unpinned", c->uid);
        conn_reply_empty(c);
        if (!req->pinned)
                step_retention_run(c->srv, req->job.str);
}

static void conn_dispatch(struct conn *c, const struct ckpt_request *req) {
        uint16_t t = req->hdr.type;

        if (!c->hello && t != CKPT_MSG_HELLO && t != CKPT_MSG_STATUS &&
            t != CKPT_MSG_JOB_LIST && t != CKPT_MSG_CKPT_LIST) {
                conn_error(c, -EPROTO, "send HELLO before %s", ckpt_msg_type_name(t));
                return;
        }
        /* a read-ahead only pays off for the very next READ */
        if (c->nprefetch && t != CKPT_MSG_READ && t != CKPT_MSG_READ_DONE)
                restore_drop_prefetches_of(c);
        switch (t) {
        case CKPT_MSG_HELLO:
                handle_hello(c, &req->hello);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                save_handle_begin(c, &req->save_begin);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                save_handle_shard_begin(c, &req->shard_begin);
                break;
        case CKPT_MSG_CHUNK_GET:
                save_handle_chunk_get(c, &req->chunk_get);
                break;
        case CKPT_MSG_CHUNK_PUT:
                save_handle_chunk_put(c, &req->chunk_put);
                break;
        case CKPT_MSG_SAVE_FINISH:
                save_handle_finish(c, &req->save);
                break;
        case CKPT_MSG_SAVE_ABORT:
                save_handle_abort(c, &req->save);
                break;
        case CKPT_MSG_WAIT:
                step_handle_wait(c, &req->wait);
                break;
        case CKPT_MSG_COMMIT:
                step_handle_commit(c, &req->job_step);
                break;
        case CKPT_MSG_COMMIT_ASYNC:
                step_handle_commit_async(c, &req->job_step);
                break;
        case CKPT_MSG_LATEST:
                restore_handle_latest(c, &req->job_step);
                break;
        case CKPT_MSG_LATEST_RANK:
                restore_handle_latest_rank(c, &req->latest_rank);
                break;
        case CKPT_MSG_SHARD_LIST:
                restore_handle_shard_list(c, &req->shard_list);
                break;
        case CKPT_MSG_READ:
                restore_handle_read(c, &req->read);
                break;
        case CKPT_MSG_READ_DONE:
                restore_handle_read_done(c, &req->read_done);
                break;
        case CKPT_MSG_MAP:
                restore_handle_map(c, &req->read);
                break;
        case CKPT_MSG_STATUS:
                handle_status(c);
                break;
        case CKPT_MSG_METRICS:
                handle_metrics(c, &req->metrics);
                break;
        case CKPT_MSG_JOB_LIST:
                handle_job_list(c, &req->list);
                break;
        case CKPT_MSG_CKPT_LIST:
                handle_ckpt_list(c, &req->list);
                break;
        case CKPT_MSG_FETCH:
                restore_handle_fetch(c, &req->fetch);
                break;
        case CKPT_MSG_PIN:
                handle_pin(c, &req->pin);
                break;
        case CKPT_MSG_VERIFY:
                verify_handle(c, &req->verify);
                break;
        case CKPT_MSG_DELETE:
                delete_handle(c, &req->del);
                break;
        case CKPT_MSG_RETENTION:
                retention_request_handle(c, &req->retention);
                break;
        case CKPT_MSG_CLUSTER:
                cluster_view_handle(c, &req->cluster);
                break;
        default:
                conn_error(c, -EBADMSG, "unknown request type %u", t);
                break;
        }
}

static const char *decode_error_text(int r) {
        switch (r) {
        case -EPROTONOSUPPORT:
                return "wrong protocol version";
        case -EINVAL:
                return "invalid value";
        case -EMSGSIZE:
                return "message too large";
        default:
                return "malformed message";
        }
}

/* Read and serve packets until the socket is empty or a request goes
 * asynchronous. */
static void conn_read(struct conn *c) {
        static uint8_t buf[CKPT_MSG_MAX + 1];
        static struct ckpt_request req;

        while (!c->busy && !c->closing) {
                union {
                        char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int) * 16)];
                        struct cmsghdr align;
                } ctrl;
                struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
                struct msghdr msg = {
                        .msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctrl.buf,
                        .msg_controllen = sizeof(ctrl.buf),
                };
                ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                return;
                        conn_close(c);
                        return;
                }
                /* Clients have no business sending descriptors: drop them.
                 * SO_PASSCRED (set at accept) makes every packet, an empty
                 * one too, carry SCM_CREDENTIALS, while the end of the
                 * stream carries nothing: on SOCK_SEQPACKET recvmsg returns
                 * 0 for both, and only the credentials tell a 0-byte packet
                 * (malformed, answered below) from a hang-up. */
                bool packet = n > 0;
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS)
                                packet = true;
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                                int nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                                for (int i = 0; i < nfds; i++) {
                                        int fd;
                                        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                                        close(fd);
                                }
                        }
                }
                if (!packet) {
                        conn_close(c);
                        return;
                }

                c->busy = true;
                c->busy_type = 0;
                c->busy_seq = 0;
                /* a packet without a header this daemon reads is answered in
                 * the oldest version: every client reads that error reply */
                c->busy_version = CKPT_PROTO_VERSION_MIN;
                memset(&req.hdr, 0, sizeof(req.hdr));
                int r;
                if ((size_t)n > CKPT_MSG_MAX || (msg.msg_flags & MSG_TRUNC)) {
                        ckpt_hdr_decode(&req.hdr, buf, CKPT_HDR_SIZE);
                        c->busy_seq = req.hdr.seq;
                        conn_error(c, -EMSGSIZE, "message of %zd bytes exceeds the %u byte limit",
                                   n, CKPT_MSG_MAX);
                        continue;
                }
                if (n == 0) {
                        conn_error(c, -EBADMSG, "malformed message: empty packet (0 bytes) "
                                   "rejected; every message starts with the %u-byte header",
                                   CKPT_HDR_SIZE);
                        continue;
                }
                r = ckpt_request_decode(&req, buf, (size_t)n);
                c->busy_seq = req.hdr.seq;
                if (r != -EPROTONOSUPPORT && req.hdr.version)
                        c->busy_version = req.hdr.version;
                c->busy_type = req.hdr.type < CKPT_MSG_REQUEST_MAX_ ? req.hdr.type : 0;
                if (r == -EPROTONOSUPPORT) {
                        conn_error(c, r, "protocol version %u not supported; this daemon speaks "
                                   "versions %u..%u", req.hdr.version, CKPT_PROTO_VERSION_MIN,
                                   CKPT_PROTO_VERSION);
                        continue;
                }
                if (r < 0) {
                        conn_error(c, r, "%s %s request (%zd bytes) rejected",
                                   decode_error_text(r), ckpt_msg_type_name(req.hdr.type), n);
                        continue;
                }
                conn_dispatch(c, &req);
        }
        /* The request went asynchronous: stop reading (EPOLLIN is level-
         * triggered, and a client that hung up stays readable at EOF, which
         * would spin the loop), but keep watching for the hangup, which
         * ends the request early (save_conn_closed, restore_conn_closed). */
        if (c->busy && !c->closing)
                conn_update_events(c);
}

static void conn_on_event(struct loop_watch *w, uint32_t events) {
        struct conn *c = container_of(w, struct conn, watch);

        if (events & EPOLLOUT)
                conn_flush(c);
        if (c->closing)
                return;
        if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                conn_read(c);
        if (!c->closing && (events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN))
                conn_close(c);
}

static void conn_close(struct conn *c) {
        struct server *srv = c->srv;

        if (c->closing)
                return;
        c->closing = true;
        log_debug("server: client %u (pid %d) disconnected", c->id, (int)c->pid);
        loop_watch_del(srv->loop, &c->watch);
        pool_wait_cancel(srv->pool, &c->waiter);
        loop_timer_cancel(&c->timer);
        save_conn_closed(c);
        restore_conn_closed(c);
        verify_conn_closed(c);
        cluster_view_conn_closed(c);

        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &c->outq) {
                struct outmsg *m = list_entry(pos, struct outmsg, link);
                list_unlink(&m->link);
                safe_close(m->fd);
                free(m);
        }
        /* Callers up the stack may still hold c: free it before the loop
         * sleeps, not now. */
        list_unlink(&c->link);
        list_add_tail(&srv->zombies, &c->link);
        srv->nconns--;
        c->fd = safe_close(c->fd);
        server_check_drained(srv);
}

/* How many connections uid holds now: a linear walk, as accepts are rare
 * next to requests and conns is bounded by client_connections_max. */
static uint32_t server_conns_of(const struct server *srv, uid_t uid) {
        uint32_t n = 0;
        struct list *pos;
        list_for_each(pos, &srv->conns) {
                const struct conn *c = list_entry(pos, struct conn, link);
                n += c->uid == uid;
        }
        return n;
}

/* Takes ownership of fd.  Over a cap the connection is closed at once: the
 * protocol has no message the daemon sends before a request (replies
 * carry the request's seq), so the client sees its first request fail
 * with a reset connection (docs/protocol.md "Connection limits"). */
static void server_on_accept(struct acceptor *a, int fd, const struct sockaddr_storage *sa,
                             socklen_t salen) {
        struct server *srv = container_of(a, struct server, acceptor);
        (void)sa;
        (void)salen;

        struct ucred cred;
        socklen_t len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
                log_warn("server: SO_PEERCRED: %m");
                close(fd);
                return;
        }
        if (srv->opts.conn_max && srv->nconns >= srv->opts.conn_max) {
                acceptor_refuse(a, "uid %u pid %d: %u client connections open, the limit "
                                   "([daemon] client_connections_max)",
                                (unsigned)cred.uid, (int)cred.pid, srv->nconns);
                close(fd);
                return;
        }
        if (srv->opts.conn_per_uid && cred.uid != 0) {
                uint32_t mine = server_conns_of(srv, cred.uid);
                if (mine >= srv->opts.conn_per_uid) {
                        acceptor_refuse(a, "uid %u pid %d: it holds %u client connections, the "
                                           "limit ([daemon] client_connections_per_uid)",
                                        (unsigned)cred.uid, (int)cred.pid, mine);
                        close(fd);
                        return;
                }
        }
        struct conn *c = calloc(1, sizeof(*c));
        uint32_t *gens = calloc(pool_slot_count(srv->pool), sizeof(*gens));
        if (!c || !gens) {
                free(c);
                free(gens);
                close(fd);
                return;
        }
        c->srv = srv;
        c->fd = fd;
        c->uid = cred.uid;
        c->gid = cred.gid;
        c->pid = cred.pid;
        c->id = ++srv->next_id;
        c->slot_gen_sent = gens;
        list_init(&c->outq);
        list_init(&c->saves);
        list_init(&c->step_link);
        list_init(&c->waiter.link);
        int sndbuf = 4 * CKPT_MSG_MAX, one = 1;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        /* how conn_read tells an empty packet from the hang-up */
        setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
        if (loop_watch_add(srv->loop, &c->watch, fd, EPOLLIN, conn_on_event) < 0) {
                close(fd);
                free(gens);
                free(c);
                return;
        }
        list_add_tail(&srv->conns, &c->link);
        srv->nconns++;
        log_debug("server: client %u connected (pid %d uid %u)", c->id, (int)c->pid,
                  (unsigned)c->uid);
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void server_reap(struct loop_hook *h) {
        struct server *srv = container_of(h, struct server, reap_hook);
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &srv->zombies) {
                struct conn *c = list_entry(pos, struct conn, link);
                list_unlink(&c->link);
                free(c->slot_gen_sent);
                free(c->metrics_doc);
                free(c);
        }
}

int server_new(struct server **out, struct loop *loop, struct pool *pool, struct store *store,
               struct catalog *catalog, struct worker_pool *workers,
               const struct server_options *opts) {
        struct server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                return -ENOMEM;
        srv->loop = loop;
        srv->pool = pool;
        srv->store = store;
        srv->catalog = catalog;
        srv->workers = workers;
        srv->opts = *opts;
        srv->listen_fd = -1;
        srv->start_ms = loop_now_ms();
        list_init(&srv->conns);
        list_init(&srv->drain_timer.link);
        list_init(&srv->zombies);
        list_init(&srv->steps);
        list_init(&srv->heals);
        list_init(&srv->uid_errors);
        list_init(&srv->cluster_views);
        list_init(&srv->cluster_relays);
        fd_budget_init(&srv->files, opts->files_per_uid);
        if (opts->memory_tier && memtier_new(&srv->memtier, pool) < 0) {
                free(srv);
                return -ENOMEM;
        }
        srv->reap_hook.run = server_reap;
        loop_hook_add(loop, &srv->reap_hook);
        *out = srv;
        return 0;
}

static int server_watch_listen(struct server *srv) {
        int r = acceptor_start(&srv->acceptor, srv->loop, srv->listen_fd, "server",
                               server_on_accept);
        if (r < 0)
                log_error("server: cannot watch the listening socket: %s", strerror(-r));
        return r;
}

int server_listen_fd(struct server *srv, int fd) {
        int type = 0;
        socklen_t len = sizeof(type);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET) {
                log_error("server: inherited fd %d is not a SOCK_SEQPACKET socket; use "
                          "ListenSequentialPacket= in ckptd.socket",
                          fd);
                return -EINVAL;
        }
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
                fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        srv->listen_fd = fd;
        srv->listen_fd_owned = false;
        return server_watch_listen(srv);
}

int server_listen_path(struct server *srv, const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int r;

        if (strlen(path) >= sizeof(sa.sun_path)) {
                log_error("server: socket path too long: %s", path);
                return -ENAMETOOLONG;
        }
        strcpy(sa.sun_path, path);

        /* The socket's directory (/run/ckptd, $XDG_RUNTIME_DIR/...) may not
         * exist yet when we are not started by systemd. */
        _cleanup_free_ char *dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = 0;
                r = fs_mkdir_p(dir, 0755);
                if (r < 0) {
                        log_error("server: cannot create %s: %s", dir, strerror(-r));
                        return r;
                }
        }

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* A socket file left by a crashed daemon is stale unless someone
         * answers on it: never steal a live daemon's socket. */
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
                log_error("server: another ckptd is already listening on %s", path);
                return -EADDRINUSE;
        }
        unlink(path);
        mode_t old = umask(0777 & ~srv->opts.socket_mode);
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        if (r < 0) {
                r = -errno;
                log_error("server: cannot bind %s: %m", path);
                return r;
        }
        if (chmod(path, srv->opts.socket_mode) < 0)
                log_warn("server: chmod %s: %m", path);
        if (srv->opts.socket_group && *srv->opts.socket_group) {
                struct group *g = getgrnam(srv->opts.socket_group);
                if (!g || chown(path, (uid_t)-1, g->gr_gid) < 0)
                        log_warn("server: cannot give %s to group %s", path, srv->opts.socket_group);
        }
        if (listen(fd, 128) < 0)
                return -errno;
        srv->listen_fd = TAKE_FD(fd);
        srv->listen_fd_owned = true;
        srv->socket_path = strdup(path);
        return server_watch_listen(srv);
}

void server_relieve_memory(struct server *srv) {
        save_relieve_memory(srv);
        restore_drop_prefetches(srv);
}

bool server_drained(struct server *srv) {
        /* reads too: their I/O must not outlive the ring and the pool */
        if (srv->saves_active > 0 || srv->read_ops > 0)
                return false;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &srv->steps) {
                struct step_state *st = list_entry(pos, struct step_state, link);
                if (st->committing)
                        return false;
        }
        if (!srv->drain_grace_over)
                list_for_each_safe(pos, tmp, &srv->conns) {
                        struct conn *c = list_entry(pos, struct conn, link);
                        if (c->owed_shutdown)
                                return false;
                }
        return true;
}

void server_check_drained(struct server *srv) {
        if (srv->draining && srv->on_drained && server_drained(srv))
                srv->on_drained(srv);
}

static void server_drain_grace_over(struct loop_timer *t) {
        struct server *srv = container_of(t, struct server, drain_timer);
        srv->drain_grace_over = true;
        server_check_drained(srv);
}

/* The last message a client gets from a daemon that drained (protocol.md
 * "Farewell"): an ERROR with seq 0 (no request of a client's has it) and
 * -ESHUTDOWN, so that a client waiting for a reply, or sending its next
 * request into a closed connection, reads why (libckpt looks for it) instead
 * of a broken pipe.  Best effort: a client that cannot take it now gets EOF. */
static int farewell_send(int fd, uint16_t version, const char *why) {
        struct ckpt_reply rep = {
                .hdr.type = CKPT_MSG_ERROR,
                .hdr.seq = 0,
                .hdr.version = version,
        };
        rep.error.error = -ESHUTDOWN;
        snprintf(rep.error.message, sizeof(rep.error.message), "ckptd is stopping: %s", why);
        uint8_t buf[CKPT_HDR_SIZE + sizeof(rep.error) + 16];
        int n = ckpt_reply_encode(&rep, buf, sizeof(buf));
        if (n < 0)
                return n;
        return send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* Behind replies still queued it is not sent: they would be lost anyway. */
static void conn_farewell(struct conn *c) {
        if (c->closing || !list_empty(&c->outq))
                return;
        int r = farewell_send(c->fd, c->busy_version ? c->busy_version : CKPT_PROTO_VERSION_MIN,
                              c->farewell[0] ? c->farewell
                                             : "every acknowledged save is on disk; connect "
                                               "again once it is back");
        if (r < 0)
                log_debug("server: client %u: no farewell: %s", c->id, strerror(-r));
}

/* Clients that connected but were not accepted yet would see a reset when
 * the socket closes: accept them to say why.  Bounded (a flood of connects
 * does not hold the drain); the ones past that see the reset. */
static void listen_backlog_farewell(int listen_fd) {
        for (int i = 0; i < SERVER_BACKLOG_FAREWELLS; i++) {
                int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        return;
                /* it has sent at most a HELLO: the oldest version reads this */
                (void)farewell_send(fd, CKPT_PROTO_VERSION_MIN, "it accepts no new clients");
                close(fd);
        }
}

void server_drain(struct server *srv) {
        if (srv->draining)
                return;
        srv->draining = true;
        if (srv->listen_fd >= 0) {
                acceptor_stop(&srv->acceptor);
                if (srv->listen_fd_owned) {
                        /* unlinked first: a client connecting now finds no socket */
                        if (srv->socket_path)
                                unlink(srv->socket_path);
                        listen_backlog_farewell(srv->listen_fd);
                        close(srv->listen_fd);
                }
                srv->listen_fd = -1;
        }
        /* Saves the trainer has not finished were never acknowledged: drop
         * them.  Finished ones keep going to disk.  A trainer busy copying
         * into a window learns it from its next request, which the drain
         * waits for a little (owed_shutdown). */
        loop_timer_start(srv->loop, &srv->drain_timer, SERVER_DRAIN_GRACE_MS,
                         server_drain_grace_over);
        save_abort_all(srv, -ESHUTDOWN);
        restore_drop_prefetches(srv);
        server_check_drained(srv);
}

struct server *server_free(struct server *srv) {
        if (!srv)
                return NULL;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &srv->conns) {
                struct conn *c = list_entry(pos, struct conn, link);
                if (srv->draining)
                        conn_farewell(c);
                conn_close(c);
        }
        server_reap(&srv->reap_hook);
        list_unlink(&srv->reap_hook.link);
        loop_timer_cancel(&srv->drain_timer);
        step_state_free_all(srv);
        heal_free_all(srv);
        cluster_view_free_all(srv);
        /* after the connections: their READs pin what it keeps */
        srv->memtier = memtier_free(srv->memtier);
        list_for_each_safe(pos, tmp, &srv->uid_errors) {
                struct uid_errors *e = list_entry(pos, struct uid_errors, link);
                list_unlink(&e->link);
                free(e);
        }
        if (srv->listen_fd >= 0) {
                acceptor_stop(&srv->acceptor);
                if (srv->listen_fd_owned) {
                        close(srv->listen_fd);
                        if (srv->socket_path)
                                unlink(srv->socket_path);
                }
        }
        /* what is still counted belonged to saves and reads freed above */
        fd_budget_clear(&srv->files);
        free(srv->socket_path);
        free(srv);
        return NULL;
}
