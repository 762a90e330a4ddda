/* SPDX-License-Identifier: MIT */
/*
 * Encoding and decoding of ckpt-proto messages (ckpt-proto.h; the layouts
 * are specified byte by byte in docs/protocol.md).
 *
 * Why field by field instead of casting packed structs: the wire format must
 * not depend on a compiler's struct layout or the host's byte order, and a
 * decoder facing a hostile client must never read past the packet.  A small
 * cursor (struct wbuf / struct rbuf) does the bounds checking in one place,
 * so the per-message code reads like the layout tables in the spec.
 *
 * Parsing and checking are separate steps.  The reader only knows syntax
 * (lengths, strings, counts that size arrays); one check function per message
 * then judges the values.  The decoder runs it on what it parsed, the encoder
 * on what it was handed, so neither side can emit what the other would
 * reject.  Because every valid message has exactly one encoding, and the
 * decoder zeroes *msg first, decode -> encode gives back the same bytes and
 * two decoded messages can be compared with memcmp (the fuzzers rely on it).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "ckpt-proto.h"
#include "codec.h"

/* ---- list counts ------------------------------------------------------- */

/* A list count sizes an array, so the reader must check it before parsing
 * entries; check_count() repeats the check for the encoder. */
static bool r_count(struct rbuf *r, uint32_t total, uint32_t count, uint32_t page) {
        if (count > page || count > total) {
                r_fail(r, -EBADMSG);
                return false;
        }
        return r->err != -EBADMSG;
}

static void check_count(struct check *c, uint32_t total, uint32_t count, uint32_t page) {
        check_bad(c, count > page || count > total);
}

static const char *const request_names[CKPT_MSG_REQUEST_MAX_];

/* The numbering has gaps (numbers assigned to messages of other
 * branches): a number without a name is no type. */
static bool is_request_type(uint16_t type) {
        return type >= CKPT_MSG_HELLO && type < CKPT_MSG_REQUEST_MAX_ && request_names[type];
}

static bool is_reply_type(uint16_t type) {
        return type == CKPT_MSG_ERROR ||
               ((type & CKPT_MSG_REPLY) && is_request_type(type & ~CKPT_MSG_REPLY));
}

/* ---- requests ---------------------------------------------------------- */

/* The version a message is encoded in (0 asks for the newest). */
static uint16_t msg_version(const struct ckpt_hdr *hdr) {
        return hdr->version ? hdr->version : CKPT_PROTO_VERSION;
}

static int check_request(const struct ckpt_request *m) {
        struct check c = { 0 };

        switch (m->hdr.type) {
        case CKPT_MSG_HELLO:
                check_inval(&c, m->hello.proto_min < 1 || m->hello.proto_min > m->hello.proto_max);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                check_name(&c, &m->save_begin.job);
                check_step(&c, m->save_begin.step);
                check_world(&c, m->save_begin.world_size);
                check_inval(&c, m->save_begin.rank >= m->save_begin.world_size);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                check_name(&c, &m->shard_begin.shard);
                check_inval(&c, m->shard_begin.size > CKPT_SHARD_SIZE_MAX);
                break;
        case CKPT_MSG_CHUNK_GET:
                check_inval(&c, m->chunk_get.offset > CKPT_SHARD_SIZE_MAX);
                break;
        case CKPT_MSG_CHUNK_PUT:
                check_inval(&c, m->chunk_put.length == 0);
                check_range(&c, m->chunk_put.offset, m->chunk_put.length);
                break;
        case CKPT_MSG_SAVE_FINISH:
        case CKPT_MSG_SAVE_ABORT:
        case CKPT_MSG_READ_DONE:
        case CKPT_MSG_STATUS:
                break;
        case CKPT_MSG_WAIT:
                check_name(&c, &m->wait.job);
                check_step(&c, m->wait.step);
                check_bad(&c, m->wait.tier < CKPT_TIER_STAGED || m->wait.tier >= CKPT_TIER_MAX_);
                break;
        case CKPT_MSG_COMMIT:
        case CKPT_MSG_LATEST:
                check_name(&c, &m->job_step.job);
                check_step(&c, m->job_step.step);
                break;
        case CKPT_MSG_COMMIT_ASYNC:
                /* a type versions 2 and 3 do not have: malformed there,
                 * as any unknown type */
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_COMMIT_ASYNC);
                check_name(&c, &m->job_step.job);
                check_step(&c, m->job_step.step);
                /* reserved: the reply never waits */
                check_inval(&c, m->job_step.timeout_ms != 0);
                break;
        case CKPT_MSG_SHARD_LIST:
                check_name(&c, &m->shard_list.job);
                check_step(&c, m->shard_list.step);
                check_rank(&c, m->shard_list.rank);
                break;
        case CKPT_MSG_READ:
        case CKPT_MSG_MAP:
                check_name(&c, &m->read.job);
                check_step(&c, m->read.step);
                check_rank(&c, m->read.rank);
                check_name(&c, &m->read.shard);
                if (m->hdr.type == CKPT_MSG_READ) {
                        check_inval(&c, m->read.length == 0);
                        check_range(&c, m->read.offset, m->read.length);
                }
                break;
        case CKPT_MSG_JOB_LIST:
                /* Reserved: must be empty so it can become a filter later. */
                check_inval(&c, m->list.job.len != 0);
                break;
        case CKPT_MSG_CKPT_LIST:
                check_name(&c, &m->list.job);
                break;
        case CKPT_MSG_FETCH:
                check_name(&c, &m->fetch.job);
                if (m->fetch.step != CKPT_STEP_LATEST)
                        check_step(&c, m->fetch.step);
                check_bad(&c, m->fetch.which < CKPT_FETCH_NODE || m->fetch.which >= CKPT_FETCH_MAX_);
                if (m->fetch.which == CKPT_FETCH_RANK)
                        check_rank(&c, m->fetch.index);
                check_inval(&c, (m->fetch.which == CKPT_FETCH_ALL ||
                                 m->fetch.which == CKPT_FETCH_PEERS) &&
                                        m->fetch.index != 0);
                break;
        case CKPT_MSG_PIN:
                check_name(&c, &m->pin.job);
                check_step(&c, m->pin.step);
                check_bool(&c, m->pin.pinned);
                break;
        case CKPT_MSG_LATEST_RANK:
                check_name(&c, &m->latest_rank.job);
                check_rank(&c, m->latest_rank.rank);
                if (m->latest_rank.below != CKPT_STEP_LATEST)
                        check_step(&c, m->latest_rank.below);
                break;
        case CKPT_MSG_VERIFY:
                /* a type versions 2 to 4 do not have: malformed there */
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_COPY_FAULTS);
                check_name(&c, &m->verify.job);
                if (m->verify.step != CKPT_STEP_LATEST)
                        check_step(&c, m->verify.step);
                if (m->verify.rank != CKPT_VERIFY_ALL_RANKS)
                        check_rank(&c, m->verify.rank);
                check_bool(&c, m->verify.repair);
                break;
        case CKPT_MSG_METRICS:
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_METRICS);
                break;
        case CKPT_MSG_CLUSTER:
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_CLUSTER);
                break;
        case CKPT_MSG_DELETE:
                /* types versions 2 to 6 do not have: malformed there */
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_DELETE);
                check_name(&c, &m->del.job);
                check_bool(&c, m->del.whole_job);
                check_bool(&c, m->del.force);
                check_step(&c, m->del.step);
                check_inval(&c, m->del.whole_job && m->del.step != 0);
                break;
        case CKPT_MSG_RETENTION:
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_DELETE);
                if (m->retention.job.len)
                        check_name(&c, &m->retention.job);
                check_bool(&c, m->retention.dry_run);
                check_bool(&c, m->retention.preview);
                if (m->retention.preview)
                        check_inval(&c, !m->retention.dry_run || m->retention.keep_latest < 1 ||
                                                (m->retention.every_steps &&
                                                 m->retention.every_seconds));
                else
                        check_inval(&c, m->retention.keep_latest || m->retention.every_steps ||
                                                m->retention.every_seconds);
                break;
        default:
                check_bad(&c, true);
        }
        return c.err;
}

static void put_request_body(struct wbuf *w, const struct ckpt_request *m) {
        switch (m->hdr.type) {
        case CKPT_MSG_HELLO:
                w_u16(w, m->hello.proto_min);
                w_u16(w, m->hello.proto_max);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                w_name(w, &m->save_begin.job);
                w_u64(w, m->save_begin.step);
                w_u32(w, m->save_begin.rank);
                w_u32(w, m->save_begin.world_size);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                w_u32(w, m->shard_begin.save_id);
                w_name(w, &m->shard_begin.shard);
                w_u64(w, m->shard_begin.size);
                break;
        case CKPT_MSG_CHUNK_GET:
                w_u32(w, m->chunk_get.shard_id);
                w_u64(w, m->chunk_get.offset);
                break;
        case CKPT_MSG_CHUNK_PUT:
                w_u32(w, m->chunk_put.shard_id);
                w_u32(w, m->chunk_put.slot_id);
                w_u64(w, m->chunk_put.offset);
                w_u64(w, m->chunk_put.length);
                w_u32(w, m->chunk_put.crc32c);
                break;
        case CKPT_MSG_SAVE_FINISH:
        case CKPT_MSG_SAVE_ABORT:
                w_u32(w, m->save.save_id);
                break;
        case CKPT_MSG_WAIT:
                w_name(w, &m->wait.job);
                w_u64(w, m->wait.step);
                w_u8(w, m->wait.tier);
                w_u32(w, m->wait.timeout_ms);
                break;
        case CKPT_MSG_COMMIT:
        case CKPT_MSG_LATEST:
        case CKPT_MSG_COMMIT_ASYNC:
                w_name(w, &m->job_step.job);
                w_u64(w, m->job_step.step);
                w_u32(w, m->job_step.timeout_ms);
                break;
        case CKPT_MSG_SHARD_LIST:
                w_name(w, &m->shard_list.job);
                w_u64(w, m->shard_list.step);
                w_u32(w, m->shard_list.rank);
                w_u32(w, m->shard_list.start);
                break;
        case CKPT_MSG_READ:
        case CKPT_MSG_MAP:
                w_name(w, &m->read.job);
                w_u64(w, m->read.step);
                w_u32(w, m->read.rank);
                w_name(w, &m->read.shard);
                w_u64(w, m->read.offset);
                w_u64(w, m->read.length);
                break;
        case CKPT_MSG_READ_DONE:
                w_u32(w, m->read_done.slot_id);
                break;
        case CKPT_MSG_JOB_LIST:
        case CKPT_MSG_CKPT_LIST:
                w_name(w, &m->list.job);
                w_u32(w, m->list.start);
                break;
        case CKPT_MSG_FETCH:
                w_name(w, &m->fetch.job);
                w_u64(w, m->fetch.step);
                w_u8(w, m->fetch.which);
                w_u32(w, m->fetch.index);
                w_u32(w, m->fetch.timeout_ms);
                break;
        case CKPT_MSG_PIN:
                w_name(w, &m->pin.job);
                w_u64(w, m->pin.step);
                w_u8(w, m->pin.pinned);
                break;
        case CKPT_MSG_LATEST_RANK:
                w_name(w, &m->latest_rank.job);
                w_u32(w, m->latest_rank.rank);
                w_u64(w, m->latest_rank.below);
                break;
        case CKPT_MSG_VERIFY:
                w_name(w, &m->verify.job);
                w_u64(w, m->verify.step);
                w_u32(w, m->verify.rank);
                w_u8(w, m->verify.repair);
                break;
        case CKPT_MSG_METRICS:
                w_u64(w, m->metrics.offset);
                break;
        case CKPT_MSG_CLUSTER:
                w_u32(w, m->cluster.index);
                break;
        case CKPT_MSG_DELETE:
                w_name(w, &m->del.job);
                w_u64(w, m->del.step);
                w_u8(w, m->del.whole_job);
                w_u8(w, m->del.force);
                break;
        case CKPT_MSG_RETENTION:
                w_name(w, &m->retention.job);
                w_u8(w, m->retention.dry_run);
                w_u8(w, m->retention.preview);
                w_u32(w, m->retention.keep_latest);
                w_u64(w, m->retention.every_steps);
                w_u64(w, m->retention.every_seconds);
                break;
        default: /* STATUS: empty */
                break;
        }
}

static void get_request_body(struct rbuf *r, struct ckpt_request *m) {
        switch (m->hdr.type) {
        case CKPT_MSG_HELLO:
                m->hello.proto_min = r_u16(r);
                m->hello.proto_max = r_u16(r);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                r_name(r, &m->save_begin.job);
                m->save_begin.step = r_u64(r);
                m->save_begin.rank = r_u32(r);
                m->save_begin.world_size = r_u32(r);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                m->shard_begin.save_id = r_u32(r);
                r_name(r, &m->shard_begin.shard);
                m->shard_begin.size = r_u64(r);
                break;
        case CKPT_MSG_CHUNK_GET:
                m->chunk_get.shard_id = r_u32(r);
                m->chunk_get.offset = r_u64(r);
                break;
        case CKPT_MSG_CHUNK_PUT:
                m->chunk_put.shard_id = r_u32(r);
                m->chunk_put.slot_id = r_u32(r);
                m->chunk_put.offset = r_u64(r);
                m->chunk_put.length = r_u64(r);
                m->chunk_put.crc32c = r_u32(r);
                break;
        case CKPT_MSG_SAVE_FINISH:
        case CKPT_MSG_SAVE_ABORT:
                m->save.save_id = r_u32(r);
                break;
        case CKPT_MSG_WAIT:
                r_name(r, &m->wait.job);
                m->wait.step = r_u64(r);
                m->wait.tier = r_u8(r);
                m->wait.timeout_ms = r_u32(r);
                break;
        case CKPT_MSG_COMMIT:
        case CKPT_MSG_LATEST:
        case CKPT_MSG_COMMIT_ASYNC:
                r_name(r, &m->job_step.job);
                m->job_step.step = r_u64(r);
                m->job_step.timeout_ms = r_u32(r);
                break;
        case CKPT_MSG_SHARD_LIST:
                r_name(r, &m->shard_list.job);
                m->shard_list.step = r_u64(r);
                m->shard_list.rank = r_u32(r);
                m->shard_list.start = r_u32(r);
                break;
        case CKPT_MSG_READ:
        case CKPT_MSG_MAP:
                r_name(r, &m->read.job);
                m->read.step = r_u64(r);
                m->read.rank = r_u32(r);
                r_name(r, &m->read.shard);
                m->read.offset = r_u64(r);
                m->read.length = r_u64(r);
                break;
        case CKPT_MSG_READ_DONE:
                m->read_done.slot_id = r_u32(r);
                break;
        case CKPT_MSG_JOB_LIST:
        case CKPT_MSG_CKPT_LIST:
                r_name(r, &m->list.job);
                m->list.start = r_u32(r);
                break;
        case CKPT_MSG_FETCH:
                r_name(r, &m->fetch.job);
                m->fetch.step = r_u64(r);
                m->fetch.which = r_u8(r);
                m->fetch.index = r_u32(r);
                m->fetch.timeout_ms = r_u32(r);
                break;
        case CKPT_MSG_PIN:
                r_name(r, &m->pin.job);
                m->pin.step = r_u64(r);
                m->pin.pinned = r_u8(r);
                break;
        case CKPT_MSG_LATEST_RANK:
                r_name(r, &m->latest_rank.job);
                m->latest_rank.rank = r_u32(r);
                m->latest_rank.below = r_u64(r);
                break;
        case CKPT_MSG_VERIFY:
                r_name(r, &m->verify.job);
                m->verify.step = r_u64(r);
                m->verify.rank = r_u32(r);
                m->verify.repair = r_u8(r);
                break;
        case CKPT_MSG_METRICS:
                m->metrics.offset = r_u64(r);
                break;
        case CKPT_MSG_CLUSTER:
                m->cluster.index = r_u32(r);
                break;
        case CKPT_MSG_DELETE:
                r_name(r, &m->del.job);
                m->del.step = r_u64(r);
                m->del.whole_job = r_u8(r);
                m->del.force = r_u8(r);
                break;
        case CKPT_MSG_RETENTION:
                r_name(r, &m->retention.job);
                m->retention.dry_run = r_u8(r);
                m->retention.preview = r_u8(r);
                m->retention.keep_latest = r_u32(r);
                m->retention.every_steps = r_u64(r);
                m->retention.every_seconds = r_u64(r);
                break;
        default: /* STATUS: empty */
                break;
        }
}

static bool version_spoken(uint16_t version) {
        return version >= CKPT_PROTO_VERSION_MIN && version <= CKPT_PROTO_VERSION;
}

/* ---- replies ----------------------------------------------------------- */

static int check_reply(const struct ckpt_reply *m) {
        struct check c = { 0 };

        if (m->hdr.type == CKPT_MSG_ERROR) {
                check_bad(&c, m->error.error >= 0 || m->error.error < -ERRNO_MAX);
                check_cstr(&c, m->error.message, CKPT_ERRMSG_MAX);
                return c.err;
        }
        if (!is_reply_type(m->hdr.type))
                return -EBADMSG;

        switch (m->hdr.type & ~CKPT_MSG_REPLY) {
        case CKPT_MSG_HELLO:
                check_inval(&c, m->hello.proto < 1);
                check_cstr(&c, m->hello.daemon_version, CKPT_VERSION_STR_MAX);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                check_bool(&c, m->id.replaced);
                /* version 2 has no room for it: refused, not dropped */
                check_inval(&c, m->id.replaced &&
                                msg_version(&m->hdr) < CKPT_PROTO_VERSION_REPLACED);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                check_inval(&c, m->id.replaced != 0);
                break;
        case CKPT_MSG_COMMIT_ASYNC:
                /* no such request before version 4, so no reply to it */
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_COMMIT_ASYNC);
                break;
        case CKPT_MSG_CHUNK_GET:
        case CKPT_MSG_READ:
                check_bool(&c, m->slot.has_fd);
                check_range(&c, m->slot.offset, m->slot.length);
                check_inval(&c, m->slot.slot_offset > UINT64_MAX - m->slot.length);
                break;
        case CKPT_MSG_WAIT:
                /* 0: the step has not reached even the first tier. */
                check_bad(&c, m->wait.tier >= CKPT_TIER_MAX_);
                break;
        case CKPT_MSG_LATEST:
                check_step(&c, m->latest.step);
                check_world(&c, m->latest.world_size);
                break;
        case CKPT_MSG_LATEST_RANK: {
                const struct ckpt_rep_latest_rank *l = &m->latest_rank;
                check_step(&c, l->step);
                check_world(&c, l->world_size);
                check_step(&c, l->newest);
                /* it only ever falls back to older steps, and says so */
                check_inval(&c, l->newest < l->step);
                check_inval(&c, (l->skipped == 0) != (l->newest == l->step));
                break;
        }
        case CKPT_MSG_SHARD_LIST: {
                const struct ckpt_rep_shard_list *l = &m->shard_list;
                check_count(&c, l->total, l->count, CKPT_LIST_PAGE);
                for (uint32_t i = 0; i < l->count && i < CKPT_LIST_PAGE; i++) {
                        check_name(&c, &l->entries[i].name);
                        check_inval(&c, l->entries[i].size > CKPT_SHARD_SIZE_MAX);
                }
                break;
        }
        case CKPT_MSG_MAP:
                check_bool(&c, m->map.has_fd);
                check_bool(&c, m->map.memory);
                check_inval(&c, m->map.offset % 4096 != 0);
                check_inval(&c, m->map.size > CKPT_SHARD_SIZE_MAX);
                break;
        case CKPT_MSG_STATUS:
                check_cstr(&c, m->status.daemon_version, CKPT_VERSION_STR_MAX);
                check_cstr(&c, m->status.state_dir, CKPT_ERRMSG_MAX);
                check_cstr(&c, m->status.last_error, CKPT_ERRMSG_MAX);
                check_bool(&c, m->status.remote_enabled);
                check_cstr(&c, m->status.remote_target, CKPT_ERRMSG_MAX);
                check_cstr(&c, m->status.remote_error, CKPT_ERRMSG_MAX);
                check_bool(&c, m->status.replication_enabled);
                check_cstr(&c, m->status.peers, CKPT_ERRMSG_MAX);
                check_inval(&c, m->status.peers_up > m->status.peers_total);
                /* node_count 0: not known (a daemon that predates clusters) */
                check_inval(&c, m->status.node_count && m->status.node_index >= m->status.node_count);
                check_cstr(&c, m->status.scrub_last_findings, CKPT_ERRMSG_MAX);
                check_inval(&c, m->status.scrub_state >= CKPT_SCRUB_MAX_);
                check_inval(&c, m->status.scrub_copies_bad > m->status.scrub_copies_verified);
                check_inval(&c, m->status.audit_objects_repaired > m->status.audit_objects_bad);
                break;
        case CKPT_MSG_FETCH:
                check_step(&c, m->fetch.step);
                check_world(&c, m->fetch.world_size);
                check_inval(&c, m->fetch.ranks > m->fetch.world_size);
                break;
        case CKPT_MSG_JOB_LIST: {
                const struct ckpt_rep_job_list *l = &m->job_list;
                check_count(&c, l->total, l->count, CKPT_JOB_PAGE);
                for (uint32_t i = 0; i < l->count && i < CKPT_JOB_PAGE; i++) {
                        check_name(&c, &l->entries[i].name);
                        check_inval(&c, l->entries[i].latest_committed < -1);
                }
                break;
        }
        case CKPT_MSG_METRICS: {
                const struct ckpt_rep_metrics *mt = &m->metrics;
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_METRICS);
                check_bad(&c, mt->length > CKPT_METRICS_CHUNK);
                check_inval(&c, mt->offset > mt->total || mt->length > mt->total - mt->offset);
                break;
        }
        case CKPT_MSG_DELETE:
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_DELETE);
                break;
        case CKPT_MSG_CLUSTER: {
                const struct ckpt_rep_cluster *cl = &m->cluster;
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_CLUSTER);
                check_inval(&c, cl->index >= cl->total);
                check_cstr(&c, cl->node, CKPT_NAME_MAX);
                check_bad(&c, cl->reach >= CKPT_NODE_REACH_MAX_);
                check_bad(&c, cl->njobs > CKPT_CLUSTER_JOBS || cl->nlinks > CKPT_CLUSTER_LINKS);
                for (uint32_t i = 0; i < cl->njobs && i < CKPT_CLUSTER_JOBS; i++) {
                        check_name(&c, &cl->jobs[i].job);
                        check_step(&c, cl->jobs[i].newest_step);
                }
                for (uint32_t i = 0; i < cl->nlinks && i < CKPT_CLUSTER_LINKS; i++)
                        check_inval(&c, cl->links[i] >= cl->total);
                check_cstr(&c, cl->last_error, CKPT_CLUSTER_ERROR_MAX);
                break;
        }
        case CKPT_MSG_RETENTION: {
                const struct ckpt_rep_retention *l = &m->retention;
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_DELETE);
                check_count(&c, l->total, l->count, CKPT_RETENTION_PAGE);
                check_inval(&c, l->removed > l->total);
                for (uint32_t i = 0; i < l->count && i < CKPT_RETENTION_PAGE; i++) {
                        const struct ckpt_retention_entry *e = &l->entries[i];
                        check_name(&c, &e->job);
                        check_bad(&c, e->tier >= CKPT_RETENTION_TIER_MAX_);
                        check_inval(&c, e->tier != CKPT_RETENTION_REPLICA && e->area != 0);
                        check_step(&c, e->step);
                        check_inval(&c, e->committed_at < 0);
                        check_bad(&c, e->action >= CKPT_RETENTION_ACTION_MAX_);
                        check_cstr(&c, e->reason, CKPT_RETENTION_REASON_MAX);
                }
                break;
        }
        case CKPT_MSG_VERIFY: {
                const struct ckpt_rep_verify *l = &m->verify;
                check_bad(&c, msg_version(&m->hdr) < CKPT_PROTO_VERSION_COPY_FAULTS);
                check_count(&c, l->total, l->count, CKPT_VERIFY_PAGE);
                for (uint32_t i = 0; i < l->count && i < CKPT_VERIFY_PAGE; i++) {
                        const struct ckpt_verify_entry *e = &l->entries[i];
                        check_step(&c, e->step);
                        check_rank(&c, e->rank);
                        check_bad(&c, e->state >= CKPT_COPY_STATE_MAX_);
                        check_cstr(&c, e->detail, CKPT_VERIFY_DETAIL_MAX);
                        /* before version 6 the wire has no shard: it stays "" */
                        if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_VERIFY_SHARDS)
                                check_inval(&c, e->shard[0] != '\0');
                        else if (check_cstr(&c, e->shard, CKPT_NAME_MAX), e->shard[0])
                                check_inval(&c, ckpt_name_validate(e->shard,
                                                                   strnlen(e->shard,
                                                                           sizeof(e->shard))) < 0);
                }
                break;
        }
        case CKPT_MSG_CKPT_LIST: {
                const struct ckpt_rep_ckpt_list *l = &m->ckpt_list;
                check_count(&c, l->total, l->count, CKPT_LIST_PAGE);
                for (uint32_t i = 0; i < l->count && i < CKPT_LIST_PAGE; i++) {
                        const struct ckpt_ckpt_entry *e = &l->entries[i];
                        check_bad(&c, e->state < CKPT_STATE_SAVING || e->state >= CKPT_STATE_MAX_);
                        check_step(&c, e->step);
                        check_world(&c, e->world_size);
                        check_inval(&c, e->ranks_local > e->world_size);
                        check_inval(&c, e->committed_at < 0);
                        check_bad(&c, e->remote_state >= CKPT_REMOTE_MAX_);
                        check_bool(&c, e->pinned);
                        if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_FAIL_REASON)
                                check_inval(&c, e->reason[0] != '\0');
                        else
                                check_cstr(&c, e->reason, CKPT_FAIL_REASON_MAX);
                        check_bool(&c, e->memory);
                }
                break;
        }
        default: /* SAVE_BEGIN, SHARD_BEGIN: any id; the rest: empty */
                break;
        }
        return c.err;
}

static void put_reply_body(struct wbuf *w, const struct ckpt_reply *m) {
        if (m->hdr.type == CKPT_MSG_ERROR) {
                w_i32(w, m->error.error);
                w_cstr(w, m->error.message, CKPT_ERRMSG_MAX);
                return;
        }

        switch (m->hdr.type & ~CKPT_MSG_REPLY) {
        case CKPT_MSG_HELLO:
                w_u16(w, m->hello.proto);
                w_u32(w, m->hello.slot_count);
                w_u64(w, m->hello.slot_size);
                w_u32(w, m->hello.block_size);
                w_cstr(w, m->hello.daemon_version, CKPT_VERSION_STR_MAX);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                w_u32(w, m->id.id);
                if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_REPLACED)
                        w_u8(w, m->id.replaced);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                w_u32(w, m->id.id);
                break;
        case CKPT_MSG_CHUNK_GET:
        case CKPT_MSG_READ:
                w_u32(w, m->slot.slot_id);
                w_u32(w, m->slot.slot_gen);
                w_u8(w, m->slot.has_fd);
                w_u64(w, m->slot.slot_offset);
                w_u64(w, m->slot.offset);
                w_u64(w, m->slot.length);
                break;
        case CKPT_MSG_WAIT:
                w_u8(w, m->wait.tier);
                break;
        case CKPT_MSG_LATEST:
                w_u64(w, m->latest.step);
                w_u32(w, m->latest.world_size);
                break;
        case CKPT_MSG_LATEST_RANK:
                w_u64(w, m->latest_rank.step);
                w_u32(w, m->latest_rank.world_size);
                w_u64(w, m->latest_rank.newest);
                w_u32(w, m->latest_rank.skipped);
                break;
        case CKPT_MSG_SHARD_LIST:
                w_u32(w, m->shard_list.total);
                w_u32(w, m->shard_list.count);
                for (uint32_t i = 0; i < m->shard_list.count; i++) {
                        const struct ckpt_shard_entry *e = &m->shard_list.entries[i];
                        w_name(w, &e->name);
                        w_u64(w, e->size);
                        w_u32(w, e->crc32c);
                }
                break;
        case CKPT_MSG_MAP:
                w_u64(w, m->map.size);
                w_u32(w, m->map.crc32c);
                w_u8(w, m->map.has_fd);
                if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_MEMORY)
                        break;
                w_u64(w, m->map.offset);
                w_u8(w, m->map.memory);
                break;
        case CKPT_MSG_STATUS: {
                const struct ckpt_rep_status *s = &m->status;
                w_cstr(w, s->daemon_version, CKPT_VERSION_STR_MAX);
                w_u64(w, s->uptime_ms);
                w_u64(w, s->pool_bytes);
                w_u64(w, s->pool_used_bytes);
                w_u32(w, s->slot_count);
                w_u32(w, s->slots_used);
                w_u32(w, s->slot_waiters);
                w_u64(w, s->bytes_in_flight);
                w_u32(w, s->shards_in_flight);
                w_u32(w, s->clients);
                w_u32(w, s->saves_active);
                w_u64(w, s->bytes_written);
                w_u64(w, s->bytes_read);
                w_u64(w, s->errors);
                w_u32(w, s->jobs);
                w_cstr(w, s->state_dir, CKPT_ERRMSG_MAX);
                w_cstr(w, s->last_error, CKPT_ERRMSG_MAX);
                w_u8(w, s->remote_enabled);
                w_u32(w, s->node_index);
                w_u32(w, s->node_count);
                w_cstr(w, s->remote_target, CKPT_ERRMSG_MAX);
                w_u32(w, s->remote_steps_pending);
                w_u32(w, s->remote_steps_failed);
                w_u32(w, s->remote_uploads_active);
                w_u32(w, s->remote_requests_active);
                w_u64(w, s->remote_bytes_uploaded);
                w_u64(w, s->remote_bytes_downloaded);
                w_u64(w, s->remote_requests);
                w_u64(w, s->remote_retries);
                w_u64(w, s->remote_failures);
                w_cstr(w, s->remote_error, CKPT_ERRMSG_MAX);
                w_u8(w, s->replication_enabled);
                w_u32(w, s->peers_up);
                w_u32(w, s->peers_total);
                w_u32(w, s->repl_steps_pending);
                w_cstr(w, s->peers, CKPT_ERRMSG_MAX);
                if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_SCRUB)
                        break;
                w_u8(w, s->scrub_state);
                w_u64(w, s->scrub_pass);
                w_u64(w, s->scrub_bytes_verified);
                w_u64(w, s->scrub_bytes_total);
                w_u64(w, s->scrub_copies_verified);
                w_u64(w, s->scrub_copies_bad);
                w_u64(w, s->scrub_rate);
                w_u64(w, s->scrub_rate_measured);
                w_u64(w, (uint64_t)s->scrub_pass_started_at);
                w_u64(w, (uint64_t)s->scrub_pass_finished_at);
                w_u64(w, (uint64_t)s->scrub_next_pass_at);
                w_u64(w, s->scrub_findings);
                w_cstr(w, s->scrub_last_findings, CKPT_ERRMSG_MAX);
                w_u32(w, s->copies_bad);
                w_u32(w, s->copies_repaired);
                w_u32(w, s->copies_unrepairable);
                w_u64(w, s->audit_passes);
                w_u64(w, s->audit_objects_checked);
                w_u64(w, s->audit_objects_bad);
                w_u64(w, s->audit_objects_repaired);
                if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_MEMORY)
                        break;
                w_u64(w, s->memory_bytes);
                w_u32(w, s->memory_steps);
                break;
        }
        case CKPT_MSG_FETCH:
                w_u64(w, m->fetch.step);
                w_u32(w, m->fetch.world_size);
                w_u32(w, m->fetch.ranks);
                w_u32(w, m->fetch.shards);
                w_u64(w, m->fetch.bytes);
                break;
        case CKPT_MSG_JOB_LIST:
                w_u32(w, m->job_list.total);
                w_u32(w, m->job_list.count);
                for (uint32_t i = 0; i < m->job_list.count; i++) {
                        const struct ckpt_job_entry *e = &m->job_list.entries[i];
                        w_name(w, &e->name);
                        w_u32(w, e->uid);
                        w_i64(w, e->latest_committed);
                        w_u32(w, e->checkpoints);
                        w_u32(w, e->committed);
                        w_u64(w, e->bytes_local);
                        w_u32(w, e->errors);
                }
                break;
        case CKPT_MSG_CKPT_LIST:
                w_u32(w, m->ckpt_list.total);
                w_u32(w, m->ckpt_list.count);
                for (uint32_t i = 0; i < m->ckpt_list.count; i++) {
                        const struct ckpt_ckpt_entry *e = &m->ckpt_list.entries[i];
                        w_u64(w, e->step);
                        w_u32(w, e->world_size);
                        w_u32(w, e->ranks_local);
                        w_u8(w, e->state);
                        w_u64(w, e->bytes);
                        w_u32(w, e->shards);
                        w_i64(w, e->committed_at);
                        w_u8(w, e->remote_state);
                        w_u8(w, e->pinned);
                        w_u8(w, e->replicas);
                        if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_FAIL_REASON)
                                w_cstr(w, e->reason, CKPT_FAIL_REASON_MAX);
                        if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_MEMORY)
                                w_u8(w, e->memory);
                }
                break;
        case CKPT_MSG_DELETE:
                w_u32(w, m->del.steps);
                w_u64(w, m->del.bytes);
                break;
        case CKPT_MSG_RETENTION:
                w_u32(w, m->retention.total);
                w_u32(w, m->retention.count);
                w_u32(w, m->retention.removed);
                for (uint32_t i = 0; i < m->retention.count; i++) {
                        const struct ckpt_retention_entry *e = &m->retention.entries[i];
                        w_name(w, &e->job);
                        w_u8(w, e->tier);
                        w_u32(w, e->area);
                        w_u64(w, e->step);
                        w_i64(w, e->committed_at);
                        w_u8(w, e->action);
                        w_cstr(w, e->reason, CKPT_RETENTION_REASON_MAX);
                }
                break;
        case CKPT_MSG_VERIFY:
                w_u32(w, m->verify.total);
                w_u32(w, m->verify.count);
                if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_VERIFY_SHARDS)
                        w_u32(w, m->verify.copies);
                for (uint32_t i = 0; i < m->verify.count; i++) {
                        const struct ckpt_verify_entry *e = &m->verify.entries[i];
                        w_u64(w, e->step);
                        w_u32(w, e->rank);
                        w_u32(w, e->area);
                        w_u8(w, e->state);
                        w_u32(w, e->shards);
                        w_u64(w, e->bytes);
                        w_cstr(w, e->detail, CKPT_VERIFY_DETAIL_MAX);
                        if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_VERIFY_SHARDS)
                                w_cstr(w, e->shard, CKPT_NAME_MAX);
                }
                break;
        case CKPT_MSG_METRICS:
                w_u64(w, m->metrics.total);
                w_u64(w, m->metrics.offset);
                w_u32(w, m->metrics.length);
                w_bytes(w, m->metrics.text, m->metrics.length);
                break;
        case CKPT_MSG_CLUSTER: {
                const struct ckpt_rep_cluster *cl = &m->cluster;
                w_u32(w, cl->total);
                w_u32(w, cl->index);
                w_cstr(w, cl->node, CKPT_NAME_MAX);
                w_u8(w, cl->reach);
                w_u32(w, cl->njobs);
                w_u32(w, cl->jobs_omitted);
                for (uint32_t i = 0; i < cl->njobs; i++) {
                        w_name(w, &cl->jobs[i].job);
                        w_u64(w, cl->jobs[i].newest_step);
                        w_u32(w, cl->jobs[i].steps_owed);
                }
                w_u32(w, cl->nlinks);
                for (uint32_t i = 0; i < cl->nlinks; i++)
                        w_u32(w, cl->links[i]);
                w_u32(w, cl->errors);
                w_cstr(w, cl->last_error, CKPT_CLUSTER_ERROR_MAX);
                break;
        }
        default: /* CHUNK_PUT, SAVE_FINISH, SAVE_ABORT, COMMIT, READ_DONE */
                break;
        }
}

static void get_reply_body(struct rbuf *r, struct ckpt_reply *m) {
        if (m->hdr.type == CKPT_MSG_ERROR) {
                m->error.error = r_i32(r);
                r_cstr(r, m->error.message, CKPT_ERRMSG_MAX);
                return;
        }

        switch (m->hdr.type & ~CKPT_MSG_REPLY) {
        case CKPT_MSG_HELLO:
                m->hello.proto = r_u16(r);
                m->hello.slot_count = r_u32(r);
                m->hello.slot_size = r_u64(r);
                m->hello.block_size = r_u32(r);
                r_cstr(r, m->hello.daemon_version, CKPT_VERSION_STR_MAX);
                break;
        case CKPT_MSG_SAVE_BEGIN:
                m->id.id = r_u32(r);
                if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_REPLACED)
                        m->id.replaced = r_u8(r);
                break;
        case CKPT_MSG_SHARD_BEGIN:
                m->id.id = r_u32(r);
                break;
        case CKPT_MSG_CHUNK_GET:
        case CKPT_MSG_READ:
                m->slot.slot_id = r_u32(r);
                m->slot.slot_gen = r_u32(r);
                m->slot.has_fd = r_u8(r);
                m->slot.slot_offset = r_u64(r);
                m->slot.offset = r_u64(r);
                m->slot.length = r_u64(r);
                break;
        case CKPT_MSG_WAIT:
                m->wait.tier = r_u8(r);
                break;
        case CKPT_MSG_LATEST:
                m->latest.step = r_u64(r);
                m->latest.world_size = r_u32(r);
                break;
        case CKPT_MSG_LATEST_RANK:
                m->latest_rank.step = r_u64(r);
                m->latest_rank.world_size = r_u32(r);
                m->latest_rank.newest = r_u64(r);
                m->latest_rank.skipped = r_u32(r);
                break;
        case CKPT_MSG_SHARD_LIST: {
                struct ckpt_rep_shard_list *l = &m->shard_list;
                l->total = r_u32(r);
                l->count = r_u32(r);
                if (!r_count(r, l->total, l->count, CKPT_LIST_PAGE))
                        break;
                for (uint32_t i = 0; i < l->count; i++) {
                        r_name(r, &l->entries[i].name);
                        l->entries[i].size = r_u64(r);
                        l->entries[i].crc32c = r_u32(r);
                }
                break;
        }
        case CKPT_MSG_MAP:
                m->map.size = r_u64(r);
                m->map.crc32c = r_u32(r);
                m->map.has_fd = r_u8(r);
                if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_MEMORY)
                        break;
                m->map.offset = r_u64(r);
                m->map.memory = r_u8(r);
                break;
        case CKPT_MSG_STATUS: {
                struct ckpt_rep_status *s = &m->status;
                r_cstr(r, s->daemon_version, CKPT_VERSION_STR_MAX);
                s->uptime_ms = r_u64(r);
                s->pool_bytes = r_u64(r);
                s->pool_used_bytes = r_u64(r);
                s->slot_count = r_u32(r);
                s->slots_used = r_u32(r);
                s->slot_waiters = r_u32(r);
                s->bytes_in_flight = r_u64(r);
                s->shards_in_flight = r_u32(r);
                s->clients = r_u32(r);
                s->saves_active = r_u32(r);
                s->bytes_written = r_u64(r);
                s->bytes_read = r_u64(r);
                s->errors = r_u64(r);
                s->jobs = r_u32(r);
                r_cstr(r, s->state_dir, CKPT_ERRMSG_MAX);
                r_cstr(r, s->last_error, CKPT_ERRMSG_MAX);
                s->remote_enabled = r_u8(r);
                s->node_index = r_u32(r);
                s->node_count = r_u32(r);
                r_cstr(r, s->remote_target, CKPT_ERRMSG_MAX);
                s->remote_steps_pending = r_u32(r);
                s->remote_steps_failed = r_u32(r);
                s->remote_uploads_active = r_u32(r);
                s->remote_requests_active = r_u32(r);
                s->remote_bytes_uploaded = r_u64(r);
                s->remote_bytes_downloaded = r_u64(r);
                s->remote_requests = r_u64(r);
                s->remote_retries = r_u64(r);
                s->remote_failures = r_u64(r);
                r_cstr(r, s->remote_error, CKPT_ERRMSG_MAX);
                s->replication_enabled = r_u8(r);
                s->peers_up = r_u32(r);
                s->peers_total = r_u32(r);
                s->repl_steps_pending = r_u32(r);
                r_cstr(r, s->peers, CKPT_ERRMSG_MAX);
                if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_SCRUB)
                        break;
                s->scrub_state = r_u8(r);
                s->scrub_pass = r_u64(r);
                s->scrub_bytes_verified = r_u64(r);
                s->scrub_bytes_total = r_u64(r);
                s->scrub_copies_verified = r_u64(r);
                s->scrub_copies_bad = r_u64(r);
                s->scrub_rate = r_u64(r);
                s->scrub_rate_measured = r_u64(r);
                s->scrub_pass_started_at = (int64_t)r_u64(r);
                s->scrub_pass_finished_at = (int64_t)r_u64(r);
                s->scrub_next_pass_at = (int64_t)r_u64(r);
                s->scrub_findings = r_u64(r);
                r_cstr(r, s->scrub_last_findings, CKPT_ERRMSG_MAX);
                s->copies_bad = r_u32(r);
                s->copies_repaired = r_u32(r);
                s->copies_unrepairable = r_u32(r);
                s->audit_passes = r_u64(r);
                s->audit_objects_checked = r_u64(r);
                s->audit_objects_bad = r_u64(r);
                s->audit_objects_repaired = r_u64(r);
                if (msg_version(&m->hdr) < CKPT_PROTO_VERSION_MEMORY)
                        break;
                s->memory_bytes = r_u64(r);
                s->memory_steps = r_u32(r);
                break;
        }
        case CKPT_MSG_FETCH:
                m->fetch.step = r_u64(r);
                m->fetch.world_size = r_u32(r);
                m->fetch.ranks = r_u32(r);
                m->fetch.shards = r_u32(r);
                m->fetch.bytes = r_u64(r);
                break;
        case CKPT_MSG_JOB_LIST: {
                struct ckpt_rep_job_list *l = &m->job_list;
                l->total = r_u32(r);
                l->count = r_u32(r);
                if (!r_count(r, l->total, l->count, CKPT_JOB_PAGE))
                        break;
                for (uint32_t i = 0; i < l->count; i++) {
                        struct ckpt_job_entry *e = &l->entries[i];
                        r_name(r, &e->name);
                        e->uid = r_u32(r);
                        e->latest_committed = r_i64(r);
                        e->checkpoints = r_u32(r);
                        e->committed = r_u32(r);
                        e->bytes_local = r_u64(r);
                        e->errors = r_u32(r);
                }
                break;
        }
        case CKPT_MSG_CKPT_LIST: {
                struct ckpt_rep_ckpt_list *l = &m->ckpt_list;
                l->total = r_u32(r);
                l->count = r_u32(r);
                if (!r_count(r, l->total, l->count, CKPT_LIST_PAGE))
                        break;
                for (uint32_t i = 0; i < l->count; i++) {
                        struct ckpt_ckpt_entry *e = &l->entries[i];
                        e->step = r_u64(r);
                        e->world_size = r_u32(r);
                        e->ranks_local = r_u32(r);
                        e->state = r_u8(r);
                        e->bytes = r_u64(r);
                        e->shards = r_u32(r);
                        e->committed_at = r_i64(r);
                        e->remote_state = r_u8(r);
                        e->pinned = r_u8(r);
                        e->replicas = r_u8(r);
                        if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_FAIL_REASON)
                                r_cstr(r, e->reason, CKPT_FAIL_REASON_MAX);
                        if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_MEMORY)
                                e->memory = r_u8(r);
                }
                break;
        }
        case CKPT_MSG_DELETE:
                m->del.steps = r_u32(r);
                m->del.bytes = r_u64(r);
                break;
        case CKPT_MSG_RETENTION: {
                struct ckpt_rep_retention *l = &m->retention;
                l->total = r_u32(r);
                l->count = r_u32(r);
                l->removed = r_u32(r);
                if (!r_count(r, l->total, l->count, CKPT_RETENTION_PAGE))
                        break;
                for (uint32_t i = 0; i < l->count; i++) {
                        struct ckpt_retention_entry *e = &l->entries[i];
                        r_name(r, &e->job);
                        e->tier = r_u8(r);
                        e->area = r_u32(r);
                        e->step = r_u64(r);
                        e->committed_at = r_i64(r);
                        e->action = r_u8(r);
                        r_cstr(r, e->reason, CKPT_RETENTION_REASON_MAX);
                }
                break;
        }
        case CKPT_MSG_VERIFY: {
                struct ckpt_rep_verify *l = &m->verify;
                l->total = r_u32(r);
                l->count = r_u32(r);
                if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_VERIFY_SHARDS)
                        l->copies = r_u32(r);
                if (!r_count(r, l->total, l->count, CKPT_VERIFY_PAGE))
                        break;
                for (uint32_t i = 0; i < l->count; i++) {
                        struct ckpt_verify_entry *e = &l->entries[i];
                        e->step = r_u64(r);
                        e->rank = r_u32(r);
                        e->area = r_u32(r);
                        e->state = r_u8(r);
                        e->shards = r_u32(r);
                        e->bytes = r_u64(r);
                        r_cstr(r, e->detail, CKPT_VERIFY_DETAIL_MAX);
                        if (msg_version(&m->hdr) >= CKPT_PROTO_VERSION_VERIFY_SHARDS)
                                r_cstr(r, e->shard, CKPT_NAME_MAX);
                }
                break;
        }
        case CKPT_MSG_METRICS: {
                struct ckpt_rep_metrics *mt = &m->metrics;
                mt->total = r_u64(r);
                mt->offset = r_u64(r);
                mt->length = r_u32(r);
                /* the length sizes the copy: judged before it */
                if (mt->length > CKPT_METRICS_CHUNK) {
                        r_fail(r, -EBADMSG);
                        break;
                }
                r_bytes(r, mt->text, mt->length);
                break;
        }
        case CKPT_MSG_CLUSTER: {
                struct ckpt_rep_cluster *cl = &m->cluster;
                cl->total = r_u32(r);
                cl->index = r_u32(r);
                r_cstr(r, cl->node, CKPT_NAME_MAX);
                cl->reach = r_u8(r);
                cl->njobs = r_u32(r);
                cl->jobs_omitted = r_u32(r);
                /* the counts size the arrays: judged before them */
                if (!r_count(r, CKPT_CLUSTER_JOBS, cl->njobs, CKPT_CLUSTER_JOBS))
                        break;
                for (uint32_t i = 0; i < cl->njobs; i++) {
                        r_name(r, &cl->jobs[i].job);
                        cl->jobs[i].newest_step = r_u64(r);
                        cl->jobs[i].steps_owed = r_u32(r);
                }
                cl->nlinks = r_u32(r);
                if (!r_count(r, CKPT_CLUSTER_LINKS, cl->nlinks, CKPT_CLUSTER_LINKS))
                        break;
                for (uint32_t i = 0; i < cl->nlinks; i++)
                        cl->links[i] = r_u32(r);
                cl->errors = r_u32(r);
                r_cstr(r, cl->last_error, CKPT_CLUSTER_ERROR_MAX);
                break;
        }
        default: /* empty bodies */
                break;
        }
}

/* ---- framing ----------------------------------------------------------- */

/*
 * Only the first CKPT_HDR_SIZE bytes are read, and the length field is
 * range-checked but not compared with len: a reader of a byte stream (peers)
 * decodes the header first to learn how much more to read.  The full
 * decoders below compare it with the packet size.  The version is checked
 * right after the magic and before anything else, so a future version may
 * add types without an old daemon calling its messages malformed.
 */
int ckpt_hdr_decode(struct ckpt_hdr *hdr, const void *buf, size_t len) {
        const uint8_t *p = buf;

        if (len < CKPT_HDR_SIZE)
                return -EBADMSG;
        if (get_le32(p) != CKPT_PROTO_MAGIC)
                return -EBADMSG;
        hdr->version = get_le16(p + 4);
        hdr->type = get_le16(p + 6);
        hdr->length = get_le32(p + 8);
        hdr->seq = get_le32(p + 12);
        if (!version_spoken(hdr->version))
                return -EPROTONOSUPPORT;
        if (hdr->length < CKPT_HDR_SIZE || hdr->length > CKPT_MSG_MAX)
                return -EBADMSG;
        if (!is_request_type(hdr->type) && !is_reply_type(hdr->type))
                return -EBADMSG;
        return 0;
}

static void put_hdr(struct wbuf *w, const struct ckpt_hdr *hdr) {
        w_u32(w, CKPT_PROTO_MAGIC);
        w_u16(w, msg_version(hdr));
        w_u16(w, hdr->type);
        w_u32(w, 0); /* length, patched in by finish() */
        w_u32(w, hdr->seq);
}

static int finish(struct wbuf *w) {
        if (w->overflow || w->len > CKPT_MSG_MAX)
                return -EMSGSIZE;
        for (size_t i = 0; i < 4; i++)
                w->p[8 + i] = (uint8_t)(w->len >> (8 * i));
        return (int)w->len;
}

int ckpt_request_encode(const struct ckpt_request *msg, void *buf, size_t cap) {
        struct wbuf w = { .p = buf, .cap = cap };

        if (!is_request_type(msg->hdr.type) || !version_spoken(msg_version(&msg->hdr)) ||
            check_request(msg) < 0)
                return -EINVAL;
        put_hdr(&w, &msg->hdr);
        put_request_body(&w, msg);
        return finish(&w);
}

int ckpt_reply_encode(const struct ckpt_reply *msg, void *buf, size_t cap) {
        struct wbuf w = { .p = buf, .cap = cap };

        if (!is_reply_type(msg->hdr.type) || !version_spoken(msg_version(&msg->hdr)) ||
            check_reply(msg) < 0)
                return -EINVAL;
        put_hdr(&w, &msg->hdr);
        put_reply_body(&w, msg);
        return finish(&w);
}

int ckpt_request_decode(struct ckpt_request *msg, const void *buf, size_t len) {
        int r;

        memset(msg, 0, sizeof(*msg));
        r = ckpt_hdr_decode(&msg->hdr, buf, len);
        if (r < 0)
                return r;
        if (msg->hdr.length != len || !is_request_type(msg->hdr.type))
                return -EBADMSG;

        struct rbuf rb = { .p = buf, .len = len, .pos = CKPT_HDR_SIZE };
        get_request_body(&rb, msg);
        return r_verdict(&rb, check_request(msg));
}

int ckpt_reply_decode(struct ckpt_reply *msg, const void *buf, size_t len) {
        int r;

        memset(msg, 0, sizeof(*msg));
        r = ckpt_hdr_decode(&msg->hdr, buf, len);
        if (r < 0)
                return r;
        if (msg->hdr.length != len || !is_reply_type(msg->hdr.type))
                return -EBADMSG;

        struct rbuf rb = { .p = buf, .len = len, .pos = CKPT_HDR_SIZE };
        get_reply_body(&rb, msg);
        return r_verdict(&rb, check_reply(msg));
}

/* ---- names ------------------------------------------------------------- */

static bool name_char_ok(char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               strchr("._+=:@-", ch) != NULL;
}

int ckpt_name_validate(const char *name, size_t len) {
        if (len == 0 || !name)
                return -EINVAL;
        if (len > CKPT_NAME_MAX)
                return -ENAMETOOLONG;
        if (name[0] == '.' || name[0] == '-')
                return -EINVAL;
        for (size_t i = 0; i < len; i++)
                /* strchr would match the terminating NUL, so test it first. */
                if (name[i] == '\0' || !name_char_ok(name[i]))
                        return -EINVAL;
        return 0;
}

int ckpt_name_set(struct ckpt_name *n, const char *str) {
        if (!str)
                return -EINVAL;
        size_t len = strnlen(str, CKPT_NAME_MAX + 1);
        int r = ckpt_name_validate(str, len);
        if (r < 0)
                return r;
        memset(n, 0, sizeof(*n));
        memcpy(n->str, str, len);
        n->len = (uint16_t)len;
        return 0;
}

/* ---- names of enums ---------------------------------------------------- */

static const char *const request_names[CKPT_MSG_REQUEST_MAX_] = {
        [CKPT_MSG_HELLO] = "HELLO",
        [CKPT_MSG_SAVE_BEGIN] = "SAVE_BEGIN",
        [CKPT_MSG_SHARD_BEGIN] = "SHARD_BEGIN",
        [CKPT_MSG_CHUNK_GET] = "CHUNK_GET",
        [CKPT_MSG_CHUNK_PUT] = "CHUNK_PUT",
        [CKPT_MSG_SAVE_FINISH] = "SAVE_FINISH",
        [CKPT_MSG_SAVE_ABORT] = "SAVE_ABORT",
        [CKPT_MSG_WAIT] = "WAIT",
        [CKPT_MSG_COMMIT] = "COMMIT",
        [CKPT_MSG_LATEST] = "LATEST",
        [CKPT_MSG_SHARD_LIST] = "SHARD_LIST",
        [CKPT_MSG_READ] = "READ",
        [CKPT_MSG_READ_DONE] = "READ_DONE",
        [CKPT_MSG_MAP] = "MAP",
        [CKPT_MSG_STATUS] = "STATUS",
        [CKPT_MSG_JOB_LIST] = "JOB_LIST",
        [CKPT_MSG_CKPT_LIST] = "CKPT_LIST",
        [CKPT_MSG_FETCH] = "FETCH",
        [CKPT_MSG_PIN] = "PIN",
        [CKPT_MSG_LATEST_RANK] = "LATEST_RANK",
        [CKPT_MSG_COMMIT_ASYNC] = "COMMIT_ASYNC",
        [CKPT_MSG_VERIFY] = "VERIFY",
        [CKPT_MSG_METRICS] = "METRICS",
        [CKPT_MSG_DELETE] = "DELETE",
        [CKPT_MSG_RETENTION] = "RETENTION",
        [CKPT_MSG_CLUSTER] = "CLUSTER",
};

static const char *const reply_names[CKPT_MSG_REQUEST_MAX_] = {
        [CKPT_MSG_HELLO] = "HELLO_REPLY",
        [CKPT_MSG_SAVE_BEGIN] = "SAVE_BEGIN_REPLY",
        [CKPT_MSG_SHARD_BEGIN] = "SHARD_BEGIN_REPLY",
        [CKPT_MSG_CHUNK_GET] = "CHUNK_GET_REPLY",
        [CKPT_MSG_CHUNK_PUT] = "CHUNK_PUT_REPLY",
        [CKPT_MSG_SAVE_FINISH] = "SAVE_FINISH_REPLY",
        [CKPT_MSG_SAVE_ABORT] = "SAVE_ABORT_REPLY",
        [CKPT_MSG_WAIT] = "WAIT_REPLY",
        [CKPT_MSG_COMMIT] = "COMMIT_REPLY",
        [CKPT_MSG_LATEST] = "LATEST_REPLY",
        [CKPT_MSG_SHARD_LIST] = "SHARD_LIST_REPLY",
        [CKPT_MSG_READ] = "READ_REPLY",
        [CKPT_MSG_READ_DONE] = "READ_DONE_REPLY",
        [CKPT_MSG_MAP] = "MAP_REPLY",
        [CKPT_MSG_STATUS] = "STATUS_REPLY",
        [CKPT_MSG_JOB_LIST] = "JOB_LIST_REPLY",
        [CKPT_MSG_CKPT_LIST] = "CKPT_LIST_REPLY",
        [CKPT_MSG_FETCH] = "FETCH_REPLY",
        [CKPT_MSG_PIN] = "PIN_REPLY",
        [CKPT_MSG_LATEST_RANK] = "LATEST_RANK_REPLY",
        [CKPT_MSG_COMMIT_ASYNC] = "COMMIT_ASYNC_REPLY",
        [CKPT_MSG_VERIFY] = "VERIFY_REPLY",
        [CKPT_MSG_METRICS] = "METRICS_REPLY",
        [CKPT_MSG_DELETE] = "DELETE_REPLY",
        [CKPT_MSG_RETENTION] = "RETENTION_REPLY",
        [CKPT_MSG_CLUSTER] = "CLUSTER_REPLY",
};

/* Never NULL, so it can go straight into a log format. */
const char *ckpt_msg_type_name(uint16_t type) {
        if (type == CKPT_MSG_ERROR)
                return "ERROR";
        if (is_request_type(type))
                return request_names[type];
        if (is_reply_type(type))
                return reply_names[type & ~CKPT_MSG_REPLY];
        return "UNKNOWN";
}

static const char *const tier_names[CKPT_TIER_MAX_] = {
        [0] = "none", /* WAIT reply: not even staged yet */
        [CKPT_TIER_STAGED] = "staged",
        [CKPT_TIER_LOCAL] = "local",
        [CKPT_TIER_COMMITTED] = "committed",
        [CKPT_TIER_REMOTE] = "remote",
        [CKPT_TIER_REPLICATED] = "replicated",
};

const char *ckpt_tier_name(uint8_t tier) {
        return tier < CKPT_TIER_MAX_ ? tier_names[tier] : "unknown";
}

static const char *const state_names[CKPT_STATE_MAX_] = {
        [CKPT_STATE_SAVING] = "saving",
        [CKPT_STATE_LOCAL] = "local",
        [CKPT_STATE_COMMITTED] = "committed",
        [CKPT_STATE_FAILED] = "failed",
};

const char *ckpt_state_name(uint8_t state) {
        return state >= CKPT_STATE_SAVING && state < CKPT_STATE_MAX_ ? state_names[state] : "unknown";
}

static const char *const remote_state_names[CKPT_REMOTE_MAX_] = {
        [CKPT_REMOTE_NONE] = "none",
        [CKPT_REMOTE_FLUSHING] = "flushing",
        [CKPT_REMOTE_MANIFEST] = "manifest",
        [CKPT_REMOTE_DONE] = "remote",
        [CKPT_REMOTE_FAILED] = "failed",
};

const char *ckpt_remote_state_name(uint8_t state) {
        return state < CKPT_REMOTE_MAX_ ? remote_state_names[state] : "unknown";
}

int ckpt_tier_parse(const char *str) {
        if (!str)
                return -EINVAL;
        for (int t = CKPT_TIER_STAGED; t < CKPT_TIER_MAX_; t++)
                if (strcmp(str, tier_names[t]) == 0)
                        return t;
        return -EINVAL;
}
