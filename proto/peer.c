/* SPDX-License-Identifier: MIT */
/*
 * Encoding and decoding of the daemon-to-daemon protocol (peer-proto.h;
 * docs/peer-protocol.md has the layouts byte by byte).
 *
 * Built like proto/proto.c, for the same reasons: field by field through a
 * bounds-checking cursor (no packed structs, no host byte order), and one
 * check function per message run by both the decoder (on what it parsed)
 * and the encoder (on what it was handed), so neither side can emit what
 * the other rejects and every valid message has exactly one encoding
 * (decode -> encode gives back the same bytes; the fuzzer relies on it).
 * The cursors and the shared value checks are codec.c's, the same code as
 * the client protocol's, so a fix to either reaches both.
 *
 * What is different from the client protocol comes from TCP: the header
 * carries the body length (a stream reader needs it before the body), and
 * peer_hdr_decode() alone must bound it per type, because a reader
 * allocates or reads that much on its word.  DATA's payload is not part of
 * what the codec sees at all, so shard bytes go from disk to socket and
 * socket to disk without passing through a message buffer.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "codec.h"
#include "peer-proto.h"

/* ---- value checks (shared by encoder and decoder) ---------------------- */

static void check_node(struct check *c, uint32_t node) {
        check_inval(c, node >= PEER_NODES_MAX);
}

static void check_nodes(struct check *c, uint32_t index, uint32_t count) {
        check_inval(c, count < 1 || count > PEER_NODES_MAX || index >= count);
}

/* -4095 .. -1, or 0 too where success is a possible answer. */
static void check_errno(struct check *c, int32_t e, bool zero_ok) {
        check_bad(c, e < -ERRNO_MAX || e > 0 || (e == 0 && !zero_ok));
}

static bool is_type(uint16_t type) {
        return type >= PEER_MSG_HELLO && type < PEER_MSG_TYPE_MAX_;
}

/* Which header stream ids a type may carry: 0 (connection level), non-zero
 * (a transfer), or either (ERROR). */
static bool stream_ok(uint16_t type, uint32_t stream) {
        switch (type) {
        case PEER_MSG_HELLO:
        case PEER_MSG_HELLO_REPLY:
        case PEER_MSG_AUTH:
        case PEER_MSG_AUTH_OK:
        case PEER_MSG_PING:
        case PEER_MSG_PONG:
        case PEER_MSG_STEP_REPORT:
        case PEER_MSG_STEP_STATE:
        case PEER_MSG_NODE_STATUS_REQ:
        case PEER_MSG_NODE_STATUS:
                return stream == 0;
        case PEER_MSG_ERROR:
                return true;
        default:
                return stream != 0;
        }
}

/* The most body bytes the header may announce for a type, and the least
 * (only DATA has a floor that the header alone can check). */
static uint64_t body_max(uint16_t type) {
        switch (type) {
        case PEER_MSG_RANK_BEGIN:
                return PEER_RANK_BEGIN_MAX;
        case PEER_MSG_DATA:
                return (uint64_t)PEER_DATA_HDR_SIZE + PEER_DATA_MAX;
        default:
                return PEER_MSG_MAX;
        }
}

static uint32_t body_min(uint16_t type) {
        return type == PEER_MSG_DATA ? PEER_DATA_HDR_SIZE : 0;
}

static int check_msg(const struct peer_msg *m) {
        struct check c = { 0 };

        check_bad(&c, !is_type(m->hdr.type) || !stream_ok(m->hdr.type, m->hdr.stream));
        switch (m->hdr.type) {
        case PEER_MSG_HELLO:
                check_nodes(&c, m->hello.node_index, m->hello.node_count);
                check_cstr(&c, m->hello.cluster_id, PEER_CLUSTER_ID_MAX);
                break;
        case PEER_MSG_HELLO_REPLY:
                check_nodes(&c, m->hello_reply.node_index, m->hello_reply.node_count);
                break;
        case PEER_MSG_ERROR:
                check_errno(&c, m->error.error, false);
                check_inval(&c, m->error.stream != m->hdr.stream);
                check_cstr(&c, m->error.message, PEER_ERRMSG_MAX);
                break;
        case PEER_MSG_RANK_BEGIN: {
                const struct peer_rank_begin *b = &m->rank_begin;
                check_name(&c, &b->job);
                check_step(&c, b->step);
                check_world(&c, b->world_size);
                check_inval(&c, b->rank >= b->world_size);
                check_node(&c, b->src_node);
                check_bad(&c, b->purpose < PEER_PURPOSE_REPLICATE || b->purpose >= PEER_PURPOSE_MAX_);
                /* Over the bound: the header could not have announced it. */
                check_bad(&c, b->manifest_len > PEER_MANIFEST_MAX);
                /* Every rank has a manifest, even one without shards. */
                check_inval(&c, b->manifest_len == 0);
                if (b->manifest_len > 0 && b->manifest_len <= PEER_MANIFEST_MAX)
                        check_bad(&c, !b->manifest || memchr(b->manifest, '\0', b->manifest_len));
                break;
        }
        case PEER_MSG_DATA:
                check_inval(&c, m->data.shard >= PEER_SHARDS_MAX);
                check_bad(&c, m->data.length > PEER_DATA_MAX);
                check_inval(&c, m->data.length == 0);
                check_range(&c, m->data.offset, m->data.length);
                break;
        case PEER_MSG_RANK_ACK:
                check_errno(&c, m->rank_ack.status, true);
                check_cstr(&c, m->rank_ack.message, PEER_ERRMSG_MAX);
                break;
        case PEER_MSG_LIST_REQ:
                if (m->list_req.job.len != 0) /* "" = every job */
                        check_name(&c, &m->list_req.job);
                check_node(&c, m->list_req.src_node);
                break;
        case PEER_MSG_LIST_REP: {
                const struct peer_list_rep *l = &m->list_rep;
                check_bad(&c, l->count > PEER_LIST_PAGE);
                for (uint32_t i = 0; i < l->count && i < PEER_LIST_PAGE; i++) {
                        const struct peer_list_entry *e = &l->entries[i];
                        check_name(&c, &e->job);
                        check_step(&c, e->step);
                        check_world(&c, e->world_size);
                        check_inval(&c, e->rank >= e->world_size);
                        check_bool(&c, e->committed);
                }
                check_bool(&c, l->more);
                break;
        }
        case PEER_MSG_GET_RANK:
                check_name(&c, &m->get_rank.job);
                check_step(&c, m->get_rank.step);
                check_rank(&c, m->get_rank.rank);
                break;
        case PEER_MSG_STEP_REPORT: {
                const struct peer_step_report *p = &m->step_report;
                check_name(&c, &p->job);
                check_step(&c, p->step);
                check_world(&c, p->world_size);
                check_bad(&c, p->flags & ~PEER_REPORT_FLAGS_ALL_);
                check_bad(&c, p->nranks > PEER_REPORT_RANKS_MAX);
                check_inval(&c, p->committed_at < 0);
                check_inval(&c, !(p->flags & PEER_REPORT_COMMITTED) && p->committed_at != 0);
                for (uint32_t i = 0; i < p->nranks && i < PEER_REPORT_RANKS_MAX; i++)
                        check_inval(&c, p->ranks[i] >= p->world_size);
                break;
        }
        case PEER_MSG_STEP_STATE: {
                const struct peer_step_state *p = &m->step_state;
                check_name(&c, &p->job);
                check_step(&c, p->step);
                check_bad(&c, p->state >= PEER_STEP_STATE_MAX_);
                if (p->world_size != 0)
                        check_world(&c, p->world_size);
                check_inval(&c, p->committed_at < 0);
                check_errno(&c, p->error, p->state != PEER_STEP_REFUSED);
                check_inval(&c, p->state != PEER_STEP_REFUSED && p->error != 0);
                check_cstr(&c, p->message, PEER_ERRMSG_MAX);
                break;
        }
        case PEER_MSG_NODE_STATUS: {
                const struct peer_node_status *p = &m->node_status;
                check_bad(&c, p->njobs > CKPT_CLUSTER_JOBS || p->nlinks > CKPT_CLUSTER_LINKS);
                check_bad(&c, p->reach >= CKPT_NODE_REACH_MAX_);
                /* only a relayed answer reports another node, or an unreachable one */
                check_inval(&c, p->reach != CKPT_NODE_REACHABLE && p->about == PEER_NODE_SELF);
                for (uint32_t i = 0; i < p->njobs && i < CKPT_CLUSTER_JOBS; i++) {
                        check_name(&c, &p->jobs[i].job);
                        check_step(&c, p->jobs[i].newest_step);
                }
                check_cstr(&c, p->last_error, CKPT_CLUSTER_ERROR_MAX);
                break;
        }
        default: /* AUTH, PING, PONG: any bytes; AUTH_OK, RANK_END: empty */
                break;
        }
        return c.err;
}

static void put_body(struct wbuf *w, const struct peer_msg *m) {
        switch (m->hdr.type) {
        case PEER_MSG_HELLO:
                w_u32(w, m->hello.node_index);
                w_u32(w, m->hello.node_count);
                w_bytes(w, m->hello.nonce, PEER_NONCE_SIZE);
                w_cstr(w, m->hello.cluster_id, PEER_CLUSTER_ID_MAX);
                break;
        case PEER_MSG_HELLO_REPLY:
                w_u32(w, m->hello_reply.node_index);
                w_u32(w, m->hello_reply.node_count);
                w_bytes(w, m->hello_reply.nonce, PEER_NONCE_SIZE);
                w_bytes(w, m->hello_reply.mac, PEER_MAC_SIZE);
                break;
        case PEER_MSG_AUTH:
                w_bytes(w, m->auth.mac, PEER_MAC_SIZE);
                break;
        case PEER_MSG_ERROR:
                w_i32(w, m->error.error);
                w_u32(w, m->error.stream);
                w_cstr(w, m->error.message, PEER_ERRMSG_MAX);
                break;
        case PEER_MSG_RANK_BEGIN: {
                const struct peer_rank_begin *b = &m->rank_begin;
                w_name(w, &b->job);
                w_u64(w, b->step);
                w_u32(w, b->rank);
                w_u32(w, b->world_size);
                w_u32(w, b->src_node);
                w_u8(w, b->purpose);
                w_u32(w, b->manifest_len);
                w_bytes(w, b->manifest, b->manifest_len);
                break;
        }
        case PEER_MSG_DATA:
                w_u32(w, m->data.shard);
                w_u64(w, m->data.offset);
                w_u32(w, m->data.length);
                w_u64(w, 0); /* reserved */
                break;
        case PEER_MSG_RANK_ACK:
                w_i32(w, m->rank_ack.status);
                w_cstr(w, m->rank_ack.message, PEER_ERRMSG_MAX);
                break;
        case PEER_MSG_LIST_REQ:
                w_name(w, &m->list_req.job);
                w_u32(w, m->list_req.src_node);
                break;
        case PEER_MSG_LIST_REP:
                w_u32(w, m->list_rep.count);
                for (uint32_t i = 0; i < m->list_rep.count; i++) {
                        const struct peer_list_entry *e = &m->list_rep.entries[i];
                        w_name(w, &e->job);
                        w_u64(w, e->step);
                        w_u32(w, e->rank);
                        w_u32(w, e->world_size);
                        w_u8(w, e->committed);
                }
                w_u8(w, m->list_rep.more);
                break;
        case PEER_MSG_GET_RANK:
                w_name(w, &m->get_rank.job);
                w_u64(w, m->get_rank.step);
                w_u32(w, m->get_rank.rank);
                break;
        case PEER_MSG_PING:
        case PEER_MSG_PONG:
                w_u64(w, m->ping.value);
                break;
        case PEER_MSG_STEP_REPORT: {
                const struct peer_step_report *p = &m->step_report;
                w_name(w, &p->job);
                w_u32(w, p->uid);
                w_u64(w, p->step);
                w_u32(w, p->world_size);
                w_u8(w, p->flags);
                w_u64(w, (uint64_t)p->committed_at);
                w_u32(w, p->nranks);
                for (uint32_t i = 0; i < p->nranks; i++)
                        w_u32(w, p->ranks[i]);
                break;
        }
        case PEER_MSG_STEP_STATE: {
                const struct peer_step_state *p = &m->step_state;
                w_name(w, &p->job);
                w_u64(w, p->step);
                w_u32(w, p->world_size);
                w_u8(w, p->state);
                w_u64(w, (uint64_t)p->committed_at);
                w_i32(w, p->error);
                w_cstr(w, p->message, PEER_ERRMSG_MAX);
                break;
        }
        case PEER_MSG_NODE_STATUS_REQ:
                w_u64(w, m->node_status_req.nonce);
                w_u32(w, m->node_status_req.uid);
                w_u32(w, m->node_status_req.about);
                break;
        case PEER_MSG_NODE_STATUS: {
                const struct peer_node_status *p = &m->node_status;
                w_u64(w, p->nonce);
                w_u32(w, p->about);
                w_u8(w, p->reach);
                w_u32(w, p->njobs);
                w_u32(w, p->jobs_omitted);
                for (uint32_t i = 0; i < p->njobs; i++) {
                        w_name(w, &p->jobs[i].job);
                        w_u32(w, p->uids[i]);
                        w_u64(w, p->jobs[i].newest_step);
                        w_u32(w, p->jobs[i].steps_owed);
                }
                w_u32(w, p->nlinks);
                for (uint32_t i = 0; i < p->nlinks; i++)
                        w_u32(w, p->links[i]);
                w_u32(w, p->errors);
                w_cstr(w, p->last_error, CKPT_CLUSTER_ERROR_MAX);
                break;
        }
        default: /* AUTH_OK, RANK_END: empty */
                break;
        }
}

static void get_body(struct rbuf *r, struct peer_msg *m) {
        switch (m->hdr.type) {
        case PEER_MSG_HELLO:
                m->hello.node_index = r_u32(r);
                m->hello.node_count = r_u32(r);
                r_bytes(r, m->hello.nonce, PEER_NONCE_SIZE);
                r_cstr(r, m->hello.cluster_id, PEER_CLUSTER_ID_MAX);
                break;
        case PEER_MSG_HELLO_REPLY:
                m->hello_reply.node_index = r_u32(r);
                m->hello_reply.node_count = r_u32(r);
                r_bytes(r, m->hello_reply.nonce, PEER_NONCE_SIZE);
                r_bytes(r, m->hello_reply.mac, PEER_MAC_SIZE);
                break;
        case PEER_MSG_AUTH:
                r_bytes(r, m->auth.mac, PEER_MAC_SIZE);
                break;
        case PEER_MSG_ERROR:
                m->error.error = r_i32(r);
                m->error.stream = r_u32(r);
                r_cstr(r, m->error.message, PEER_ERRMSG_MAX);
                break;
        case PEER_MSG_RANK_BEGIN: {
                struct peer_rank_begin *b = &m->rank_begin;
                r_name(r, &b->job);
                b->step = r_u64(r);
                b->rank = r_u32(r);
                b->world_size = r_u32(r);
                b->src_node = r_u32(r);
                b->purpose = r_u8(r);
                b->manifest_len = r_u32(r);
                /* No copy: the caller's buffer holds it already.  A length
                 * over the bound could not have passed the header check. */
                b->manifest = (const char *)r_take(r, b->manifest_len);
                break;
        }
        case PEER_MSG_DATA:
                m->data.shard = r_u32(r);
                m->data.offset = r_u64(r);
                m->data.length = r_u32(r);
                if (r_u64(r) != 0) /* reserved */
                        r_fail(r, -EBADMSG);
                /* The header counted the payload too; both must agree. */
                if (m->data.length != m->hdr.length - PEER_DATA_HDR_SIZE)
                        r_fail(r, -EBADMSG);
                break;
        case PEER_MSG_RANK_ACK:
                m->rank_ack.status = r_i32(r);
                r_cstr(r, m->rank_ack.message, PEER_ERRMSG_MAX);
                break;
        case PEER_MSG_LIST_REQ:
                r_name(r, &m->list_req.job);
                m->list_req.src_node = r_u32(r);
                break;
        case PEER_MSG_LIST_REP: {
                struct peer_list_rep *l = &m->list_rep;
                l->count = r_u32(r);
                /* The count sizes the array: check it before the entries. */
                if (l->count > PEER_LIST_PAGE) {
                        r_fail(r, -EBADMSG);
                        break;
                }
                for (uint32_t i = 0; i < l->count && r->err != -EBADMSG; i++) {
                        struct peer_list_entry *e = &l->entries[i];
                        r_name(r, &e->job);
                        e->step = r_u64(r);
                        e->rank = r_u32(r);
                        e->world_size = r_u32(r);
                        e->committed = r_u8(r);
                }
                l->more = r_u8(r);
                break;
        }
        case PEER_MSG_GET_RANK:
                r_name(r, &m->get_rank.job);
                m->get_rank.step = r_u64(r);
                m->get_rank.rank = r_u32(r);
                break;
        case PEER_MSG_PING:
        case PEER_MSG_PONG:
                m->ping.value = r_u64(r);
                break;
        case PEER_MSG_STEP_REPORT: {
                struct peer_step_report *p = &m->step_report;
                r_name(r, &p->job);
                p->uid = r_u32(r);
                p->step = r_u64(r);
                p->world_size = r_u32(r);
                p->flags = r_u8(r);
                p->committed_at = (int64_t)r_u64(r);
                p->nranks = r_u32(r);
                /* The count sizes the array: check it before the ranks. */
                if (p->nranks > PEER_REPORT_RANKS_MAX) {
                        r_fail(r, -EBADMSG);
                        break;
                }
                for (uint32_t i = 0; i < p->nranks && r->err != -EBADMSG; i++)
                        p->ranks[i] = r_u32(r);
                break;
        }
        case PEER_MSG_STEP_STATE: {
                struct peer_step_state *p = &m->step_state;
                r_name(r, &p->job);
                p->step = r_u64(r);
                p->world_size = r_u32(r);
                p->state = r_u8(r);
                p->committed_at = (int64_t)r_u64(r);
                p->error = r_i32(r);
                r_cstr(r, p->message, PEER_ERRMSG_MAX);
                break;
        }
        case PEER_MSG_NODE_STATUS_REQ:
                m->node_status_req.nonce = r_u64(r);
                m->node_status_req.uid = r_u32(r);
                m->node_status_req.about = r_u32(r);
                break;
        case PEER_MSG_NODE_STATUS: {
                struct peer_node_status *p = &m->node_status;
                p->nonce = r_u64(r);
                p->about = r_u32(r);
                p->reach = r_u8(r);
                p->njobs = r_u32(r);
                p->jobs_omitted = r_u32(r);
                /* The counts size the arrays: check them before the entries. */
                if (p->njobs > CKPT_CLUSTER_JOBS) {
                        r_fail(r, -EBADMSG);
                        break;
                }
                for (uint32_t i = 0; i < p->njobs && r->err != -EBADMSG; i++) {
                        r_name(r, &p->jobs[i].job);
                        p->uids[i] = r_u32(r);
                        p->jobs[i].newest_step = r_u64(r);
                        p->jobs[i].steps_owed = r_u32(r);
                }
                p->nlinks = r_u32(r);
                if (p->nlinks > CKPT_CLUSTER_LINKS) {
                        r_fail(r, -EBADMSG);
                        break;
                }
                for (uint32_t i = 0; i < p->nlinks && r->err != -EBADMSG; i++)
                        p->links[i] = r_u32(r);
                p->errors = r_u32(r);
                r_cstr(r, p->last_error, CKPT_CLUSTER_ERROR_MAX);
                break;
        }
        default: /* AUTH_OK, RANK_END: empty */
                break;
        }
}

size_t peer_list_rep_size(const struct peer_list_rep *l, uint32_t count) {
        size_t n = 4 + 1; /* count, more */
        if (count > PEER_LIST_PAGE)
                count = PEER_LIST_PAGE;
        for (uint32_t i = 0; i < count; i++)
                n += 2 + (size_t)l->entries[i].job.len + 8 + 4 + 4 + 1;
        return n;
}

/* ---- framing ----------------------------------------------------------- */

/*
 * A stream reader trusts h->length to decide how much to read, so every
 * bound that can be judged from the header alone is judged here: the type,
 * its stream rule and its length range.  The version is checked right after
 * the magic, before anything a later version might change.
 */
int peer_hdr_decode(struct peer_hdr *h, const void *buf, size_t len) {
        const uint8_t *p = buf;

        memset(h, 0, sizeof(*h)); /* nothing left unset, not even padding */
        if (len < PEER_HDR_SIZE)
                return -EBADMSG;
        if (get_le32(p) != PEER_PROTO_MAGIC)
                return -EBADMSG;
        h->version = get_le16(p + 4);
        h->type = get_le16(p + 6);
        h->length = get_le32(p + 8);
        h->stream = get_le32(p + 12);
        h->seq = get_le64(p + 16);
        if (h->version != PEER_PROTO_VERSION)
                return -EPROTONOSUPPORT;
        if (!is_type(h->type) || !stream_ok(h->type, h->stream))
                return -EBADMSG;
        if (h->length < body_min(h->type) || h->length > body_max(h->type))
                return -EBADMSG;
        return 0;
}

static void put_hdr(struct wbuf *w, const struct peer_hdr *h) {
        w_u32(w, PEER_PROTO_MAGIC);
        w_u16(w, PEER_PROTO_VERSION);
        w_u16(w, h->type);
        w_u32(w, 0); /* length, patched in by peer_msg_encode() */
        w_u32(w, h->stream);
        w_u64(w, h->seq);
}

int peer_msg_encode(const struct peer_msg *m, void *buf, size_t cap) {
        struct wbuf w = { .p = buf, .cap = cap };
        uint64_t body;

        if (check_msg(m) < 0)
                return -EINVAL;
        put_hdr(&w, &m->hdr);
        put_body(&w, m);
        if (w.overflow)
                return -EMSGSIZE;
        body = w.len - PEER_HDR_SIZE;
        if (m->hdr.type == PEER_MSG_DATA)
                body += m->data.length; /* the payload the caller sends next */
        /* Only a LIST_REP page of long names can get here; RANK_BEGIN and
         * DATA were bounded field by field. */
        if (body > body_max(m->hdr.type))
                return -EMSGSIZE;
        for (size_t i = 0; i < 4; i++)
                w.p[8 + i] = (uint8_t)(body >> (8 * i));
        return (int)w.len;
}

int peer_error_encode_as(const struct peer_msg *m, uint16_t version, void *buf, size_t cap) {
        if (m->hdr.type != PEER_MSG_ERROR)
                return -EINVAL;
        int n = peer_msg_encode(m, buf, cap);
        if (n < 0)
                return n;
        /* the header and the ERROR body are the same in every version */
        ((uint8_t *)buf)[4] = (uint8_t)version;
        ((uint8_t *)buf)[5] = (uint8_t)(version >> 8);
        return n;
}

int peer_msg_decode(struct peer_msg *m, const void *buf, size_t len) {
        size_t want;
        int r;

        memset(m, 0, sizeof(*m));
        r = peer_hdr_decode(&m->hdr, buf, len);
        if (r < 0)
                return r;
        /* DATA: the data header only; the payload is read separately. */
        want = PEER_HDR_SIZE +
               (m->hdr.type == PEER_MSG_DATA ? PEER_DATA_HDR_SIZE : (size_t)m->hdr.length);
        if (len != want)
                return -EBADMSG;

        struct rbuf rb = { .p = buf, .len = len, .pos = PEER_HDR_SIZE };
        get_body(&rb, m);
        return r_verdict(&rb, check_msg(m));
}

/* ---- names ------------------------------------------------------------- */

static const char *const type_names[PEER_MSG_TYPE_MAX_] = {
        [PEER_MSG_HELLO] = "HELLO",
        [PEER_MSG_HELLO_REPLY] = "HELLO_REPLY",
        [PEER_MSG_AUTH] = "AUTH",
        [PEER_MSG_AUTH_OK] = "AUTH_OK",
        [PEER_MSG_ERROR] = "ERROR",
        [PEER_MSG_RANK_BEGIN] = "RANK_BEGIN",
        [PEER_MSG_DATA] = "DATA",
        [PEER_MSG_RANK_END] = "RANK_END",
        [PEER_MSG_RANK_ACK] = "RANK_ACK",
        [PEER_MSG_LIST_REQ] = "LIST_REQ",
        [PEER_MSG_LIST_REP] = "LIST_REP",
        [PEER_MSG_GET_RANK] = "GET_RANK",
        [PEER_MSG_STEP_REPORT] = "STEP_REPORT",
        [PEER_MSG_NODE_STATUS_REQ] = "NODE_STATUS_REQ",
        [PEER_MSG_NODE_STATUS] = "NODE_STATUS",
        [PEER_MSG_STEP_STATE] = "STEP_STATE",
        [PEER_MSG_PING] = "PING",
        [PEER_MSG_PONG] = "PONG",
};

/* Never NULL, so it can go straight into a log format. */
const char *peer_msg_type_name(uint16_t type) {
        return is_type(type) ? type_names[type] : "UNKNOWN";
}
