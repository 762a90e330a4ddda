/* SPDX-License-Identifier: MIT */
/*
 * Unit test of the daemon-to-daemon protocol codec (proto/peer-proto.h).
 *
 * A peer is another machine on the network, so the decoder is the first
 * line of defence: besides round trips of every type at the edges of every
 * bound, this pins the byte layout against hand-written bytes
 * (docs/peer-protocol.md) and checks the exact error of each kind of bad
 * input.  Bad messages are built with a small independent raw encoder,
 * because the library's encoder refuses to produce them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer-proto.h"

#include "check.h"

#define CHECK_RC(got, want, ...)                                                           \
        do {                                                                               \
                int got_ = (got), want_ = (want);                                          \
                if (got_ != want_) {                                                       \
                        fprintf(stderr, "%s:%d: FAIL: got %d (%s), want %d (%s): ", __FILE__, \
                                __LINE__, got_, strerror(got_ < 0 ? -got_ : 0), want_,     \
                                strerror(want_ < 0 ? -want_ : 0));                         \
                        fprintf(stderr, __VA_ARGS__);                                      \
                        fputc('\n', stderr);                                               \
                        failures++;                                                        \
                }                                                                          \
        } while (0)

#define BUF_SIZE (PEER_HDR_SIZE + PEER_RANK_BEGIN_MAX + 4096)
/* Static: a RANK_BEGIN can be 16 MiB, a LIST_REP struct is ~70 KiB. */
static uint8_t buf[BUF_SIZE], buf2[BUF_SIZE];
static char manifest_big[PEER_MANIFEST_MAX];
static struct peer_msg in, out, again;

static const char small_manifest[] = "ckptd-manifest 1\njob j\nstep 5\nrank 0\nworld_size 1\n";

static void set_name(struct ckpt_name *n, const char *s) {
        int r = ckpt_name_set(n, s);
        if (r < 0) {
                fprintf(stderr, "test bug: ckpt_name_set(\"%s\") = %d\n", s, r);
                exit(1);
        }
}

/* A valid name of exactly len bytes, varied by i. */
static void long_name(struct ckpt_name *n, size_t len, unsigned i) {
        char s[CKPT_NAME_MAX + 1];
        for (size_t k = 0; k < len; k++)
                s[k] = "abcdefghijklmnopqrstuvwxyz0123456789"[(k + i) % 36];
        s[len] = '\0';
        set_name(n, s);
}

static void fill(char *dst, size_t len, char base) {
        for (size_t i = 0; i < len; i++)
                dst[i] = (char)(base + (char)(i % 26));
        dst[len] = '\0';
}

/* ---- independent raw encoder ------------------------------------------- */

#define RAW_CAP (PEER_MSG_MAX + 8192)
#include "raw-encoder.h"

static void raw_start(uint16_t version, uint16_t type, uint32_t stream, uint64_t seq) {
        raw.n = 0;
        raw_u32(PEER_PROTO_MAGIC);
        raw_u16(version);
        raw_u16(type);
        raw_u32(0);
        raw_u32(stream);
        raw_u64(seq);
}
static void set_len_field(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[8 + i] = (uint8_t)(v >> (8 * i));
}
/* Patch the length field to the body bytes written so far. */
static size_t raw_end(void) {
        set_len_field(raw.b, (uint32_t)(raw.n - PEER_HDR_SIZE));
        return raw.n;
}
static int raw_decode(void) {
        return peer_msg_decode(&out, raw.b, raw.n);
}

/* ---- sample messages, every field at an edge or distinctive ------------ */

static uint32_t stream_for(uint16_t type) {
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
                return 0;
        default:
                return 0xfffffffeu - type;
        }
}

/* variant 0: maxima; 1: minima (or the other enum / bool value). */
static void make_msg(struct peer_msg *m, uint16_t type, int variant) {
        memset(m, 0, sizeof(*m));
        m->hdr.type = type;
        m->hdr.stream = stream_for(type);
        m->hdr.seq = variant ? 0 : UINT64_MAX - type;
        switch (type) {
        case PEER_MSG_HELLO:
                m->hello.node_count = variant ? 1 : PEER_NODES_MAX;
                m->hello.node_index = m->hello.node_count - 1;
                memset(m->hello.nonce, variant ? 0x00 : 0xff, PEER_NONCE_SIZE);
                m->hello.nonce[0] = 0x5a;
                fill(m->hello.cluster_id, variant ? 0 : PEER_CLUSTER_ID_MAX, 'A');
                break;
        case PEER_MSG_HELLO_REPLY:
                m->hello_reply.node_count = variant ? 1 : PEER_NODES_MAX;
                m->hello_reply.node_index = variant ? 0 : 12345;
                for (int i = 0; i < PEER_NONCE_SIZE; i++) {
                        m->hello_reply.nonce[i] = (uint8_t)(i * 7 + variant);
                        m->hello_reply.mac[i] = (uint8_t)(0xff - i);
                }
                break;
        case PEER_MSG_AUTH:
                memset(m->auth.mac, variant ? 0 : 0xa5, PEER_MAC_SIZE);
                break;
        case PEER_MSG_ERROR:
                m->error.error = variant ? -1 : -4095;
                /* ERROR may be sent on the connection (0) or a stream. */
                m->hdr.stream = variant ? 0 : UINT32_MAX;
                m->error.stream = m->hdr.stream;
                fill(m->error.message, variant ? 0 : PEER_ERRMSG_MAX, 'a');
                break;
        case PEER_MSG_RANK_BEGIN: {
                struct peer_rank_begin *b = &m->rank_begin;
                if (variant) {
                        set_name(&b->job, "j");
                        b->world_size = 1;
                        b->purpose = PEER_PURPOSE_REPLICATE;
                        b->manifest_len = 1;
                        b->manifest = "x";
                } else {
                        long_name(&b->job, CKPT_NAME_MAX, 5);
                        b->step = (uint64_t)CKPT_STEP_MAX;
                        b->world_size = CKPT_WORLD_MAX;
                        b->rank = CKPT_WORLD_MAX - 1;
                        b->src_node = PEER_NODES_MAX - 1;
                        b->purpose = PEER_PURPOSE_RESTORE;
                        b->manifest_len = PEER_MANIFEST_MAX;
                        b->manifest = manifest_big;
                }
                break;
        }
        case PEER_MSG_DATA:
                if (variant) {
                        m->data.length = 1;
                } else {
                        m->data.shard = PEER_SHARDS_MAX - 1;
                        m->data.offset = CKPT_SHARD_SIZE_MAX - PEER_DATA_MAX;
                        m->data.length = PEER_DATA_MAX;
                }
                break;
        case PEER_MSG_RANK_ACK:
                m->rank_ack.status = variant ? 0 : -4095;
                fill(m->rank_ack.message, variant ? 0 : PEER_ERRMSG_MAX, 'k');
                break;
        case PEER_MSG_LIST_REQ:
                if (!variant)
                        long_name(&m->list_req.job, CKPT_NAME_MAX, 1);
                m->list_req.src_node = variant ? 0 : PEER_NODES_MAX - 1;
                break;
        case PEER_MSG_LIST_REP: {
                struct peer_list_rep *l = &m->list_rep;
                /* A full page of names as long as still fits PEER_MSG_MAX. */
                l->count = variant ? 0 : PEER_LIST_PAGE;
                l->more = variant ? 0 : 1;
                for (uint32_t i = 0; i < l->count; i++) {
                        struct peer_list_entry *e = &l->entries[i];
                        long_name(&e->job, 1 + (i * 37) % 200, i);
                        e->step = (uint64_t)CKPT_STEP_MAX - i;
                        e->world_size = i % 2 ? CKPT_WORLD_MAX : 1;
                        e->rank = e->world_size - 1;
                        e->committed = (uint8_t)(i % 2);
                }
                break;
        }
        case PEER_MSG_GET_RANK:
                if (variant) {
                        set_name(&m->get_rank.job, "Z");
                } else {
                        long_name(&m->get_rank.job, CKPT_NAME_MAX, 2);
                        m->get_rank.step = (uint64_t)CKPT_STEP_MAX;
                        m->get_rank.rank = CKPT_WORLD_MAX - 1;
                }
                break;
        case PEER_MSG_PING:
        case PEER_MSG_PONG:
                m->ping.value = variant ? 0 : UINT64_MAX;
                break;
        case PEER_MSG_STEP_REPORT: {
                struct peer_step_report *p = &m->step_report;
                if (variant) {
                        set_name(&p->job, "j");
                        p->world_size = 1; /* no ranks, no flags, uid 0 */
                } else {
                        long_name(&p->job, CKPT_NAME_MAX, 3);
                        p->uid = UINT32_MAX;
                        p->step = (uint64_t)CKPT_STEP_MAX;
                        p->world_size = CKPT_WORLD_MAX;
                        p->flags = PEER_REPORT_BEGIN | PEER_REPORT_COMMIT | PEER_REPORT_COMMITTED;
                        p->committed_at = INT64_MAX;
                        p->nranks = PEER_REPORT_RANKS_MAX;
                        for (uint32_t i = 0; i < p->nranks; i++)
                                p->ranks[i] = CKPT_WORLD_MAX - 1 - i * 7;
                }
                break;
        }
        case PEER_MSG_NODE_STATUS_REQ:
                m->node_status_req.nonce = variant ? 1 : UINT64_MAX;
                m->node_status_req.uid = variant ? 0 : PEER_UID_ANY;
                m->node_status_req.about = variant ? 3 : PEER_NODE_SELF;
                break;
        case PEER_MSG_NODE_STATUS: {
                struct peer_node_status *p = &m->node_status;
                p->nonce = variant ? 1 : UINT64_MAX;
                /* the variant: a relayed answer about node 5, found down */
                p->about = variant ? 5 : PEER_NODE_SELF;
                p->reach = variant ? CKPT_NODE_DOWN : CKPT_NODE_REACHABLE;
                if (!variant) { /* the longest: full lists of the longest names */
                        p->njobs = CKPT_CLUSTER_JOBS;
                        p->jobs_omitted = UINT32_MAX;
                        for (uint32_t i = 0; i < p->njobs; i++) {
                                long_name(&p->jobs[i].job, CKPT_NAME_MAX, i);
                                p->uids[i] = UINT32_MAX - 2 * i;
                                p->jobs[i].newest_step = (uint64_t)CKPT_STEP_MAX - i;
                                p->jobs[i].steps_owed = UINT32_MAX - i;
                        }
                        p->nlinks = CKPT_CLUSTER_LINKS;
                        for (uint32_t i = 0; i < p->nlinks; i++)
                                p->links[i] = i * 3;
                        p->errors = UINT32_MAX;
                        fill(p->last_error, CKPT_CLUSTER_ERROR_MAX, 'e');
                }
                break;
        }
        case PEER_MSG_STEP_STATE: {
                struct peer_step_state *p = &m->step_state;
                if (variant) {
                        set_name(&p->job, "Q");
                        p->state = PEER_STEP_PENDING; /* world_size 0: not known yet */
                } else {
                        long_name(&p->job, CKPT_NAME_MAX, 4);
                        p->step = (uint64_t)CKPT_STEP_MAX;
                        p->world_size = CKPT_WORLD_MAX;
                        p->state = PEER_STEP_REFUSED;
                        p->committed_at = INT64_MAX;
                        p->error = -4095;
                        fill(p->message, PEER_ERRMSG_MAX, 's');
                }
                break;
        }
        default: /* AUTH_OK, RANK_END */
                break;
        }
}

/* ---- round trips ------------------------------------------------------- */

static void roundtrip(uint16_t type, int variant) {
        char name[64];
        snprintf(name, sizeof(name), "%s/%d", peer_msg_type_name(type), variant);

        make_msg(&in, type, variant);
        int n = peer_msg_encode(&in, buf, sizeof(buf));
        CHECK(n >= PEER_HDR_SIZE, "%s: encode returned %d", name, n);
        if (n < PEER_HDR_SIZE)
                return;
        CHECK_RC(peer_msg_decode(&out, buf, (size_t)n), 0, "%s: decode", name);

        uint32_t want_len = type == PEER_MSG_DATA ? PEER_DATA_HDR_SIZE + in.data.length
                                                  : (uint32_t)n - PEER_HDR_SIZE;
        CHECK(out.hdr.version == PEER_PROTO_VERSION && out.hdr.type == type &&
                      out.hdr.length == want_len && out.hdr.stream == in.hdr.stream &&
                      out.hdr.seq == in.hdr.seq,
              "%s: header v%u t%u l%u s%u q%llu", name, out.hdr.version, out.hdr.type,
              out.hdr.length, out.hdr.stream, (unsigned long long)out.hdr.seq);
        if (type == PEER_MSG_DATA)
                CHECK(n == PEER_HDR_SIZE + PEER_DATA_HDR_SIZE, "DATA: encoded %d bytes", n);
        if (type == PEER_MSG_RANK_BEGIN) {
                /* Decoded in place: a pointer into buf, no copy. */
                CHECK(out.rank_begin.manifest == (const char *)buf + n - in.rank_begin.manifest_len,
                      "%s: manifest not pointing into the buffer", name);
                CHECK(out.rank_begin.manifest_len == in.rank_begin.manifest_len &&
                              memcmp(out.rank_begin.manifest, in.rank_begin.manifest,
                                     in.rank_begin.manifest_len) == 0,
                      "%s: manifest differs", name);
                out.rank_begin.manifest = in.rank_begin.manifest;
        }
        /* in was zeroed before filling, the decoder zeroes out: every field
         * and every unused byte must match. */
        in.hdr.version = PEER_PROTO_VERSION;
        in.hdr.length = want_len;
        CHECK(memcmp(&in, &out, sizeof(in)) == 0, "%s: decoded fields differ", name);

        /* One encoding per message: re-encoding gives the same bytes. */
        int n2 = peer_msg_encode(&out, buf2, sizeof(buf2));
        CHECK(n2 == n && memcmp(buf, buf2, (size_t)n) == 0, "%s: re-encode differs", name);
        CHECK_RC(peer_msg_decode(&again, buf2, (size_t)n2), 0, "%s: decode again", name);

        struct peer_hdr h;
        CHECK_RC(peer_hdr_decode(&h, buf, PEER_HDR_SIZE), 0, "%s: hdr", name);
        CHECK(h.version == out.hdr.version && h.type == out.hdr.type && h.length == out.hdr.length &&
                      h.stream == out.hdr.stream && h.seq == out.hdr.seq,
              "%s: hdr fields", name);

        /* A buffer one byte short of the message is -EMSGSIZE. */
        CHECK_RC(peer_msg_encode(&in, buf2, (size_t)n - 1), -EMSGSIZE, "%s: cap n-1", name);
        CHECK_RC(peer_msg_encode(&in, buf2, 0), -EMSGSIZE, "%s: cap 0", name);
}

static void test_roundtrips(void) {
        memset(manifest_big, 'm', sizeof(manifest_big));
        for (uint16_t t = PEER_MSG_HELLO; t < PEER_MSG_TYPE_MAX_; t++) {
                roundtrip(t, 0);
                roundtrip(t, 1);
        }

        /* A realistic RANK_BEGIN: the manifest text is the message's tail. */
        make_msg(&in, PEER_MSG_RANK_BEGIN, 1);
        in.rank_begin.manifest = small_manifest;
        in.rank_begin.manifest_len = sizeof(small_manifest) - 1;
        int n = peer_msg_encode(&in, buf, sizeof(buf));
        CHECK(n > 0 && memcmp(buf + n - in.rank_begin.manifest_len, small_manifest,
                              in.rank_begin.manifest_len) == 0,
              "manifest at the end of RANK_BEGIN");

        /* LIST_REQ with an empty job means all jobs. */
        make_msg(&in, PEER_MSG_LIST_REQ, 1);
        n = peer_msg_encode(&in, buf, sizeof(buf));
        CHECK(n == PEER_HDR_SIZE + 6 && peer_msg_decode(&out, buf, (size_t)n) == 0 &&
                      out.list_req.job.len == 0,
              "LIST_REQ all jobs: %d", n);
}

/* ---- LIST_REP page size ------------------------------------------------ */

static void test_list_size(void) {
        struct peer_list_rep *l = &in.list_rep;

        make_msg(&in, PEER_MSG_LIST_REP, 0);
        CHECK(peer_list_rep_size(l, l->count) == (size_t)peer_msg_encode(&in, buf, sizeof(buf)) - PEER_HDR_SIZE,
              "peer_list_rep_size of the sample page");
        CHECK(peer_list_rep_size(l, 0) == 5, "empty page: %zu", peer_list_rep_size(l, 0));
        CHECK(peer_list_rep_size(l, PEER_LIST_PAGE + 5) == peer_list_rep_size(l, PEER_LIST_PAGE),
              "count clamped to the page");

        /* A full page of CKPT_NAME_MAX names does not fit PEER_MSG_MAX: the
         * encoder says so, and the size helper tells how many do. */
        for (uint32_t i = 0; i < PEER_LIST_PAGE; i++)
                long_name(&l->entries[i].job, CKPT_NAME_MAX, i);
        CHECK(peer_list_rep_size(l, PEER_LIST_PAGE) > PEER_MSG_MAX, "full page of long names");
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EMSGSIZE, "page over PEER_MSG_MAX");
        uint32_t fit = 0;
        while (fit < PEER_LIST_PAGE && peer_list_rep_size(l, fit + 1) <= PEER_MSG_MAX)
                fit++;
        l->count = fit;
        int n = peer_msg_encode(&in, buf, sizeof(buf));
        CHECK(n > 0 && (size_t)n - PEER_HDR_SIZE == peer_list_rep_size(l, fit) &&
                      peer_msg_decode(&out, buf, (size_t)n) == 0,
              "page of %u long names: %d", fit, n);
        l->count = fit + 1;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EMSGSIZE, "one more long name");
}

/* ---- exact bytes (docs/peer-protocol.md) ------------------------------- */

static void check_bytes(const char *what, const uint8_t *got, int n, const uint8_t *want, size_t wn) {
        CHECK(n == (int)wn && memcmp(got, want, wn) == 0, "%s: %d bytes, want %zu", what, n, wn);
        if (n == (int)wn && memcmp(got, want, wn) != 0)
                for (size_t i = 0; i < wn; i++)
                        if (got[i] != want[i])
                                fprintf(stderr, "  byte %zu: %02x, want %02x\n", i, got[i], want[i]);
}

static void test_golden(void) {
        memset(&in, 0, sizeof(in));
        in.hdr.type = PEER_MSG_HELLO;
        in.hdr.seq = 0x0102030405060708ull;
        in.hello.node_index = 2;
        in.hello.node_count = 0x0304;
        for (int i = 0; i < PEER_NONCE_SIZE; i++)
                in.hello.nonce[i] = (uint8_t)(0xa0 + i);
        snprintf(in.hello.cluster_id, sizeof(in.hello.cluster_id), "c1");
        static const uint8_t hello[] = {
                /* header */
                'C', 'K', 'P', 'E', 0x03, 0x00, 0x01, 0x00, 44, 0, 0, 0, 0, 0, 0, 0,
                0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                /* node_index, node_count */
                0x02, 0, 0, 0, 0x04, 0x03, 0, 0,
                /* nonce */
                0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac,
                0xad, 0xae, 0xaf, 0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9,
                0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf,
                /* cluster_id */
                0x02, 0x00, 'c', '1',
        };
        check_bytes("HELLO", buf, peer_msg_encode(&in, buf, sizeof(buf)), hello, sizeof(hello));
        CHECK_RC(peer_msg_decode(&out, hello, sizeof(hello)), 0, "golden HELLO decodes");

        memset(&in, 0, sizeof(in));
        in.hdr.type = PEER_MSG_DATA;
        in.hdr.stream = 0x11223344;
        in.hdr.seq = 9;
        in.data.shard = 0x0506;
        in.data.offset = 0x0000010000200000ull;
        in.data.length = 0x00400000; /* 4 MiB */
        static const uint8_t data[] = {
                /* header: body = 24 + 4 MiB */
                'C', 'K', 'P', 'E', 0x03, 0x00, 0x07, 0x00, 0x18, 0x00, 0x40, 0x00,
                0x44, 0x33, 0x22, 0x11, 9, 0, 0, 0, 0, 0, 0, 0,
                /* shard, offset, length, reserved */
                0x06, 0x05, 0, 0, 0x00, 0x00, 0x20, 0x00, 0x00, 0x01, 0x00, 0x00,
                0x00, 0x00, 0x40, 0x00, 0, 0, 0, 0, 0, 0, 0, 0,
        };
        check_bytes("DATA", buf, peer_msg_encode(&in, buf, sizeof(buf)), data, sizeof(data));
        CHECK_RC(peer_msg_decode(&out, data, sizeof(data)), 0, "golden DATA decodes");
        CHECK(out.data.shard == 0x0506 && out.data.offset == 0x0000010000200000ull &&
                      out.data.length == PEER_DATA_MAX && out.hdr.length == PEER_DATA_HDR_SIZE + PEER_DATA_MAX,
              "golden DATA fields");

        /* And a raw RANK_BEGIN, field by field, to pin the order. */
        raw_start(PEER_PROTO_VERSION, PEER_MSG_RANK_BEGIN, 7, 1);
        raw_str("job", 3);
        raw_u64(42);
        raw_u32(3);
        raw_u32(8);
        raw_u32(5);
        raw_u8(PEER_PURPOSE_REPLICATE);
        raw_u32(4);
        raw_bytes("abcd", 4);
        raw_end();
        CHECK_RC(raw_decode(), 0, "raw RANK_BEGIN");
        CHECK(strcmp(out.rank_begin.job.str, "job") == 0 && out.rank_begin.step == 42 &&
                      out.rank_begin.rank == 3 && out.rank_begin.world_size == 8 &&
                      out.rank_begin.src_node == 5 && out.rank_begin.purpose == PEER_PURPOSE_REPLICATE &&
                      out.rank_begin.manifest_len == 4 &&
                      out.rank_begin.manifest == (const char *)raw.b + raw.n - 4,
              "raw RANK_BEGIN fields");
}

/* ---- rejections -------------------------------------------------------- */

/* Every strict prefix of a message is malformed, whether or not the length
 * field was adjusted to match; so is any trailing byte. */
static void truncations(uint16_t type, int variant) {
        const char *name = peer_msg_type_name(type);
        make_msg(&in, type, variant);
        if (type == PEER_MSG_RANK_BEGIN && variant == 0) {
                in.rank_begin.manifest = small_manifest;
                in.rank_begin.manifest_len = sizeof(small_manifest) - 1;
        }
        /* Every prefix costs a decode: keep the long ones short. */
        if (type == PEER_MSG_LIST_REP && in.list_rep.count > 5)
                in.list_rep.count = 5;
        if (type == PEER_MSG_STEP_REPORT && in.step_report.nranks > 5)
                in.step_report.nranks = 5;
        int n = peer_msg_encode(&in, buf, sizeof(buf));
        CHECK(n > 0, "encode %s", name);
        if (n <= 0)
                return;
        for (int l = 0; l < n; l++) {
                CHECK_RC(peer_msg_decode(&out, buf, (size_t)l), -EBADMSG, "%s cut to %d", name, l);
                memcpy(buf2, buf, (size_t)l);
                if (l >= PEER_HDR_SIZE && type != PEER_MSG_DATA)
                        set_len_field(buf2, (uint32_t)(l - PEER_HDR_SIZE));
                CHECK_RC(peer_msg_decode(&out, buf2, (size_t)l), -EBADMSG,
                         "%s cut to %d, length fixed", name, l);
        }
        for (int extra = 1; extra <= 3; extra++) {
                memcpy(buf2, buf, (size_t)n);
                memset(buf2 + n, 0, (size_t)extra);
                CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n + extra), -EBADMSG, "%s + %d bytes",
                         name, extra);
                if (type != PEER_MSG_DATA) {
                        uint32_t body = (uint32_t)(n + extra - PEER_HDR_SIZE);
                        set_len_field(buf2, body);
                        /* Within the type's bound the header is fine ... */
                        struct peer_hdr h;
                        CHECK_RC(peer_hdr_decode(&h, buf2, PEER_HDR_SIZE), 0, "%s + %d hdr", name, extra);
                        /* ... the body is not. */
                        CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n + extra), -EBADMSG,
                                 "%s + %d bytes, length fixed", name, extra);
                }
        }
}

static void test_truncation(void) {
        for (uint16_t t = PEER_MSG_HELLO; t < PEER_MSG_TYPE_MAX_; t++) {
                truncations(t, 0);
                if (t == PEER_MSG_LIST_REP)
                        truncations(t, 1);
        }
        /* DATA with its payload appended is not what the decoder takes. */
        make_msg(&in, PEER_MSG_DATA, 1);
        int n = peer_msg_encode(&in, buf, sizeof(buf));
        buf[n] = 0x77;
        CHECK_RC(peer_msg_decode(&out, buf, (size_t)n + 1), -EBADMSG, "DATA with its payload");
}

static void test_header(void) {
        struct peer_hdr h;
        make_msg(&in, PEER_MSG_GET_RANK, 1);
        int n = peer_msg_encode(&in, buf, sizeof(buf));

        /* Bad magic, each byte; the client protocol's magic too. */
        for (int i = 0; i < 4; i++) {
                memcpy(buf2, buf, (size_t)n);
                buf2[i] ^= 0x20;
                CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n), -EBADMSG, "magic byte %d", i);
                CHECK_RC(peer_hdr_decode(&h, buf2, (size_t)n), -EBADMSG, "hdr magic byte %d", i);
        }
        memcpy(buf2, buf, (size_t)n);
        buf2[3] = 'T';
        CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n), -EBADMSG, "magic CKPT");

        /* Wrong version: its own error, header still filled in. */
        const uint16_t versions[] = { 0, PEER_PROTO_VERSION + 1, 0xffff };
        for (size_t i = 0; i < 3; i++) {
                memcpy(buf2, buf, (size_t)n);
                buf2[4] = (uint8_t)versions[i];
                buf2[5] = (uint8_t)(versions[i] >> 8);
                memset(&out, 0x55, sizeof(out));
                CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n), -EPROTONOSUPPORT, "version %u",
                         versions[i]);
                CHECK(out.hdr.version == versions[i] && out.hdr.type == PEER_MSG_GET_RANK &&
                              out.hdr.stream == in.hdr.stream && out.hdr.seq == in.hdr.seq,
                      "version %u: hdr not filled", versions[i]);
                CHECK_RC(peer_hdr_decode(&h, buf2, PEER_HDR_SIZE), -EPROTONOSUPPORT, "hdr version");
        }
        /* A future version may have new types and bigger bodies. */
        raw_start(PEER_PROTO_VERSION + 1, 0x7777, 0, 1);
        set_len_field(raw.b, 0xffffffffu);
        CHECK_RC(raw_decode(), -EPROTONOSUPPORT, "next version, odd type and length");

        /* Unknown types. */
        const uint16_t bad_types[] = { 0, PEER_MSG_TYPE_MAX_, 0x7fff, 0x8001, 0xffff };
        for (size_t i = 0; i < sizeof(bad_types) / sizeof(bad_types[0]); i++) {
                raw_start(PEER_PROTO_VERSION, bad_types[i], 1, 1);
                raw_end();
                CHECK_RC(raw_decode(), -EBADMSG, "type %#x", bad_types[i]);
                CHECK_RC(peer_hdr_decode(&h, raw.b, raw.n), -EBADMSG, "hdr type %#x", bad_types[i]);
                CHECK(strcmp(peer_msg_type_name(bad_types[i]), "UNKNOWN") == 0, "name of %#x",
                      bad_types[i]);
        }

        /* Length field against the bytes given. */
        const int deltas[] = { -1, 1, -(n - PEER_HDR_SIZE), 1000 };
        for (size_t i = 0; i < 4; i++) {
                memcpy(buf2, buf, (size_t)n);
                set_len_field(buf2, (uint32_t)(n - PEER_HDR_SIZE + deltas[i]));
                CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n), -EBADMSG, "length field %+d", deltas[i]);
        }
        /* The header alone: its length is bounded, not compared. */
        CHECK_RC(peer_hdr_decode(&h, buf, PEER_HDR_SIZE), 0, "hdr of 24 bytes");
        CHECK(h.length == (uint32_t)n - PEER_HDR_SIZE, "hdr length");
        CHECK_RC(peer_hdr_decode(&h, buf, PEER_HDR_SIZE - 1), -EBADMSG, "hdr of 23 bytes");
        CHECK_RC(peer_hdr_decode(&h, buf, 0), -EBADMSG, "hdr of 0 bytes");

        /* Per-type bounds of the body length. */
        static const struct {
                uint16_t type;
                uint64_t len;
                int want;
        } bounds[] = {
                { PEER_MSG_GET_RANK, PEER_MSG_MAX, 0 },
                { PEER_MSG_GET_RANK, PEER_MSG_MAX + 1, -EBADMSG },
                { PEER_MSG_LIST_REP, PEER_MSG_MAX + 1, -EBADMSG },
                { PEER_MSG_ERROR, 0xffffffffu, -EBADMSG },
                { PEER_MSG_RANK_BEGIN, PEER_MSG_MAX + 1, 0 },
                { PEER_MSG_RANK_BEGIN, PEER_RANK_BEGIN_MAX, 0 },
                { PEER_MSG_RANK_BEGIN, PEER_RANK_BEGIN_MAX + 1, -EBADMSG }, /* manifest over bound */
                { PEER_MSG_RANK_BEGIN, 0xffffffffu, -EBADMSG },
                { PEER_MSG_DATA, PEER_DATA_HDR_SIZE, 0 },
                { PEER_MSG_DATA, PEER_DATA_HDR_SIZE - 1, -EBADMSG },
                { PEER_MSG_DATA, 0, -EBADMSG },
                { PEER_MSG_DATA, PEER_DATA_HDR_SIZE + PEER_DATA_MAX, 0 },
                { PEER_MSG_DATA, PEER_DATA_HDR_SIZE + PEER_DATA_MAX + 1, -EBADMSG }, /* payload over */
                { PEER_MSG_DATA, 0xffffffffu, -EBADMSG },
        };
        for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++) {
                raw_start(PEER_PROTO_VERSION, bounds[i].type, 3, 1);
                set_len_field(raw.b, (uint32_t)bounds[i].len);
                CHECK_RC(peer_hdr_decode(&h, raw.b, raw.n), bounds[i].want, "%s body %llu",
                         peer_msg_type_name(bounds[i].type), (unsigned long long)bounds[i].len);
                if (bounds[i].want)
                        CHECK_RC(raw_decode(), bounds[i].want, "%s body %llu, decode",
                                 peer_msg_type_name(bounds[i].type),
                                 (unsigned long long)bounds[i].len);
        }

        /* Stream rule: connection-level types on stream 0 only, transfers
         * never on stream 0, ERROR on any. */
        for (uint16_t t = PEER_MSG_HELLO; t < PEER_MSG_TYPE_MAX_; t++) {
                make_msg(&in, t, 1);
                if (t == PEER_MSG_ERROR)
                        continue;
                bool conn = in.hdr.stream == 0;
                n = peer_msg_encode(&in, buf, sizeof(buf));
                memcpy(buf2, buf, (size_t)n);
                uint32_t s = conn ? 1 : 0;
                memcpy(buf2 + 12, &(uint8_t[4]){ (uint8_t)s, 0, 0, 0 }, 4);
                CHECK_RC(peer_hdr_decode(&h, buf2, (size_t)n), -EBADMSG, "%s on stream %u",
                         peer_msg_type_name(t), s);
                CHECK_RC(peer_msg_decode(&out, buf2, (size_t)n), -EBADMSG, "%s on stream %u, decode",
                         peer_msg_type_name(t), s);
                in.hdr.stream = s;
                CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode %s on stream %u",
                         peer_msg_type_name(t), s);
        }

        /* Empty bodies must be empty. */
        raw_start(PEER_PROTO_VERSION, PEER_MSG_AUTH_OK, 0, 1);
        raw_end();
        CHECK_RC(raw_decode(), 0, "AUTH_OK, empty");
        raw_u8(0);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "AUTH_OK with a body byte");
        raw_start(PEER_PROTO_VERSION, PEER_MSG_RANK_END, 9, 1);
        raw_u32(0);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "RANK_END with a body");
}

/* RANK_BEGIN by hand. */
static void raw_rank_begin(const void *job, size_t job_len, uint64_t step, uint32_t rank,
                           uint32_t world, uint32_t src, uint8_t purpose, const char *man,
                           uint32_t man_len) {
        raw_start(PEER_PROTO_VERSION, PEER_MSG_RANK_BEGIN, 5, 1);
        raw_str(job, job_len);
        raw_u64(step);
        raw_u32(rank);
        raw_u32(world);
        raw_u32(src);
        raw_u8(purpose);
        raw_u32(man_len);
        raw_bytes(man, man_len);
        raw_end();
}

static void raw_data(uint32_t shard, uint64_t offset, uint32_t length, uint64_t reserved,
                     uint32_t hdr_payload) {
        raw_start(PEER_PROTO_VERSION, PEER_MSG_DATA, 5, 1);
        raw_u32(shard);
        raw_u64(offset);
        raw_u32(length);
        raw_u64(reserved);
        set_len_field(raw.b, PEER_DATA_HDR_SIZE + hdr_payload);
}

static void test_names(void) {
        static const struct {
                const char *s;
                size_t len;
        } bad_names[] = {
                { "", 0 }, { ".", 1 }, { "..", 2 }, { "../x", 4 }, { "a/b", 3 }, { "-x", 2 },
                { "a\0b", 3 }, { "a b", 3 }, { "caf\xc3\xa9", 5 },
        };
        static char long256[257];
        memset(long256, 'a', 256);

        for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
                const char *s = bad_names[i].s;
                size_t len = bad_names[i].len;
                raw_rank_begin(s, len, 1, 0, 1, 0, 1, "m", 1);
                CHECK_RC(raw_decode(), -EINVAL, "RANK_BEGIN name %zu", i);

                raw_start(PEER_PROTO_VERSION, PEER_MSG_GET_RANK, 5, 1);
                raw_str(s, len);
                raw_u64(1);
                raw_u32(0);
                raw_end();
                CHECK_RC(raw_decode(), -EINVAL, "GET_RANK name %zu", i);

                raw_start(PEER_PROTO_VERSION, PEER_MSG_LIST_REP, 5, 1);
                raw_u32(2);
                raw_str("ok", 2);
                raw_u64(1);
                raw_u32(0);
                raw_u32(1);
                raw_u8(1);
                raw_str(s, len);
                raw_u64(1);
                raw_u32(0);
                raw_u32(1);
                raw_u8(0);
                raw_u8(0);
                raw_end();
                CHECK_RC(raw_decode(), -EINVAL, "LIST_REP entry name %zu", i);

                /* LIST_REQ takes "" (all jobs), nothing else invalid. */
                raw_start(PEER_PROTO_VERSION, PEER_MSG_LIST_REQ, 5, 1);
                raw_str(s, len);
                raw_u32(0);
                raw_end();
                CHECK_RC(raw_decode(), len == 0 ? 0 : -EINVAL, "LIST_REQ name %zu", i);

                /* The encoder refuses the same names. */
                make_msg(&in, PEER_MSG_GET_RANK, 1);
                memcpy(in.get_rank.job.str, s, len);
                in.get_rank.job.str[len] = '\0';
                in.get_rank.job.len = (uint16_t)len;
                CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode name %zu", i);
        }
        raw_rank_begin(long256, 256, 1, 0, 1, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), -EINVAL, "RANK_BEGIN name of 256 bytes");
        raw_rank_begin(long256, 255, 1, 0, 1, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), 0, "RANK_BEGIN name of 255 bytes");
        /* Malformed beats invalid: a bad name in a truncated message. */
        raw_rank_begin("/", 1, 1, 0, 1, 0, 1, "m", 1);
        raw.n--;
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "bad name and truncated");
        raw_rank_begin("/", 1, 1, 0, 1, 0, 7, "m", 1);
        CHECK_RC(raw_decode(), -EBADMSG, "bad name and bad purpose");
}

static void test_values(void) {
        /* RANK_BEGIN */
        raw_rank_begin("j", 1, 1, 0, 1, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), 0, "minimal RANK_BEGIN");
        raw_rank_begin("j", 1, 1, 4, 4, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), -EINVAL, "rank == world_size");
        raw_rank_begin("j", 1, 1, 0, 0, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), -EINVAL, "world_size 0");
        raw_rank_begin("j", 1, 1, 0, CKPT_WORLD_MAX + 1, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), -EINVAL, "world_size over max");
        raw_rank_begin("j", 1, (uint64_t)CKPT_STEP_MAX + 1, 0, 1, 0, 1, "m", 1);
        CHECK_RC(raw_decode(), -EINVAL, "step over max");
        raw_rank_begin("j", 1, 1, 0, 1, PEER_NODES_MAX, 1, "m", 1);
        CHECK_RC(raw_decode(), -EINVAL, "src_node over max");
        const uint8_t purposes[] = { 0, PEER_PURPOSE_MAX_, 0xff };
        for (size_t i = 0; i < 3; i++) {
                raw_rank_begin("j", 1, 1, 0, 1, 0, purposes[i], "m", 1);
                CHECK_RC(raw_decode(), -EBADMSG, "purpose %u", purposes[i]);
        }
        raw_rank_begin("j", 1, 1, 0, 1, 0, 2, "", 0);
        CHECK_RC(raw_decode(), -EINVAL, "empty manifest");
        raw_rank_begin("j", 1, 1, 0, 1, 0, 2, "ab\0d", 4);
        CHECK_RC(raw_decode(), -EBADMSG, "NUL in the manifest");
        /* manifest_len beyond the body, and short of it. */
        raw_rank_begin("j", 1, 1, 0, 1, 0, 2, "abcd", 4);
        raw.b[raw.n - 8] = 5;
        CHECK_RC(raw_decode(), -EBADMSG, "manifest_len past the end");
        raw.b[raw.n - 8] = 3;
        CHECK_RC(raw_decode(), -EBADMSG, "manifest_len short of the end");
        raw.b[raw.n - 8] = 0xff;
        raw.b[raw.n - 5] = 0xff;
        CHECK_RC(raw_decode(), -EBADMSG, "manifest_len 0xff0000ff");

        /* The encoder's view of the manifest bound. */
        make_msg(&in, PEER_MSG_RANK_BEGIN, 0);
        in.rank_begin.manifest_len = PEER_MANIFEST_MAX + 1;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode manifest over bound");
        in.rank_begin.manifest_len = 0;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode empty manifest");
        in.rank_begin.manifest_len = 5;
        in.rank_begin.manifest = NULL;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode NULL manifest");

        /* DATA */
        raw_data(0, 0, 1, 0, 1);
        CHECK_RC(raw_decode(), 0, "minimal DATA");
        raw_data(0, 0, 2, 0, 1);
        CHECK_RC(raw_decode(), -EBADMSG, "DATA length above the header's");
        raw_data(0, 0, 1, 0, 2);
        CHECK_RC(raw_decode(), -EBADMSG, "DATA length below the header's");
        raw_data(0, 0, 1, 1, 1);
        CHECK_RC(raw_decode(), -EBADMSG, "DATA reserved bit set");
        raw_data(0, 0, 1, 1ull << 63, 1);
        CHECK_RC(raw_decode(), -EBADMSG, "DATA reserved high bit set");
        raw_data(0, 0, 0, 0, 0);
        CHECK_RC(raw_decode(), -EINVAL, "DATA of 0 bytes");
        raw_data(0, 0, PEER_DATA_MAX + 1, 0, PEER_DATA_MAX + 1);
        CHECK_RC(raw_decode(), -EBADMSG, "DATA payload over PEER_DATA_MAX");
        raw_data(0, 0, PEER_DATA_MAX + 1, 0, PEER_DATA_MAX);
        CHECK_RC(raw_decode(), -EBADMSG, "DATA length over max, header at max");
        raw_data(PEER_SHARDS_MAX, 0, 1, 0, 1);
        CHECK_RC(raw_decode(), -EINVAL, "DATA shard over max");
        raw_data(0, CKPT_SHARD_SIZE_MAX, 1, 0, 1);
        CHECK_RC(raw_decode(), -EINVAL, "DATA past the largest shard");
        raw_data(0, CKPT_SHARD_SIZE_MAX - 1, 1, 0, 1);
        CHECK_RC(raw_decode(), 0, "DATA ending at the largest shard");
        raw_data(0, UINT64_MAX, 16, 0, 16);
        CHECK_RC(raw_decode(), -EINVAL, "DATA offset wrapping");
        make_msg(&in, PEER_MSG_DATA, 0);
        in.data.length = PEER_DATA_MAX + 1;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode DATA over max");
        in.data.length = 0;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode DATA of 0 bytes");

        /* HELLO / HELLO_REPLY nodes and text. */
        static const struct {
                uint32_t index, count;
                int want;
        } nodes[] = {
                { 0, 1, 0 }, { 1, 1, -EINVAL }, { 0, 0, -EINVAL },
                { PEER_NODES_MAX - 1, PEER_NODES_MAX, 0 }, { 0, PEER_NODES_MAX + 1, -EINVAL },
                { UINT32_MAX, UINT32_MAX, -EINVAL },
        };
        uint8_t nonce[PEER_NONCE_SIZE] = { 1 };
        for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
                raw_start(PEER_PROTO_VERSION, PEER_MSG_HELLO, 0, 1);
                raw_u32(nodes[i].index);
                raw_u32(nodes[i].count);
                raw_bytes(nonce, sizeof(nonce));
                raw_str("", 0);
                raw_end();
                CHECK_RC(raw_decode(), nodes[i].want, "HELLO node %u of %u", nodes[i].index,
                         nodes[i].count);
                raw_start(PEER_PROTO_VERSION, PEER_MSG_HELLO_REPLY, 0, 1);
                raw_u32(nodes[i].index);
                raw_u32(nodes[i].count);
                raw_bytes(nonce, sizeof(nonce));
                raw_bytes(nonce, sizeof(nonce));
                raw_end();
                CHECK_RC(raw_decode(), nodes[i].want, "HELLO_REPLY node %u of %u", nodes[i].index,
                         nodes[i].count);
        }
        char id[PEER_CLUSTER_ID_MAX + 2];
        memset(id, 'c', sizeof(id));
        raw_start(PEER_PROTO_VERSION, PEER_MSG_HELLO, 0, 1);
        raw_u32(0);
        raw_u32(1);
        raw_bytes(nonce, sizeof(nonce));
        raw_str(id, PEER_CLUSTER_ID_MAX + 1);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "cluster_id over max");
        raw_start(PEER_PROTO_VERSION, PEER_MSG_HELLO, 0, 1);
        raw_u32(0);
        raw_u32(1);
        raw_bytes(nonce, sizeof(nonce));
        raw_str("a\0b", 3);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "NUL in cluster_id");
        make_msg(&in, PEER_MSG_HELLO, 0);
        memset(in.hello.cluster_id, 'c', sizeof(in.hello.cluster_id)); /* unterminated */
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode unterminated cluster_id");

        /* ERROR and RANK_ACK codes. */
        static const struct {
                int32_t code;
                int want_error, want_ack;
        } codes[] = {
                { -1, 0, 0 }, { -4095, 0, 0 }, { 0, -EBADMSG, 0 }, { 1, -EBADMSG, -EBADMSG },
                { -4096, -EBADMSG, -EBADMSG }, { INT32_MIN, -EBADMSG, -EBADMSG },
        };
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
                raw_start(PEER_PROTO_VERSION, PEER_MSG_ERROR, 4, 1);
                raw_u32((uint32_t)codes[i].code);
                raw_u32(4);
                raw_str("why", 3);
                raw_end();
                CHECK_RC(raw_decode(), codes[i].want_error, "ERROR %d", codes[i].code);
                raw_start(PEER_PROTO_VERSION, PEER_MSG_RANK_ACK, 4, 1);
                raw_u32((uint32_t)codes[i].code);
                raw_str("why", 3);
                raw_end();
                CHECK_RC(raw_decode(), codes[i].want_ack, "RANK_ACK %d", codes[i].code);
        }
        raw_start(PEER_PROTO_VERSION, PEER_MSG_ERROR, 4, 1);
        raw_u32((uint32_t)-EIO);
        raw_u32(5); /* about another stream than it is sent on */
        raw_str("", 0);
        raw_end();
        CHECK_RC(raw_decode(), -EINVAL, "ERROR stream field != header stream");
        char msg[PEER_ERRMSG_MAX + 1];
        memset(msg, 'e', sizeof(msg));
        raw_start(PEER_PROTO_VERSION, PEER_MSG_RANK_ACK, 4, 1);
        raw_u32(0);
        raw_str(msg, PEER_ERRMSG_MAX + 1);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "RANK_ACK message over max");

        /* LIST_REQ / LIST_REP / GET_RANK */
        raw_start(PEER_PROTO_VERSION, PEER_MSG_LIST_REQ, 4, 1);
        raw_str("", 0);
        raw_u32(PEER_NODES_MAX);
        raw_end();
        CHECK_RC(raw_decode(), -EINVAL, "LIST_REQ src_node over max");
        const uint32_t counts[] = { PEER_LIST_PAGE + 1, 0x10000, UINT32_MAX };
        for (size_t i = 0; i < 3; i++) {
                raw_start(PEER_PROTO_VERSION, PEER_MSG_LIST_REP, 4, 1);
                raw_u32(counts[i]);
                raw_u8(0);
                raw_end();
                CHECK_RC(raw_decode(), -EBADMSG, "LIST_REP count %u", counts[i]);
        }
        make_msg(&in, PEER_MSG_LIST_REP, 1);
        in.list_rep.count = PEER_LIST_PAGE + 1;
        CHECK_RC(peer_msg_encode(&in, buf, sizeof(buf)), -EINVAL, "encode count over the page");
        static const struct {
                uint32_t rank, world;
                uint8_t committed, more;
                int want;
        } entries[] = {
                { 0, 1, 0, 0, 0 }, { 1, 1, 0, 0, -EINVAL }, { 0, 0, 0, 0, -EINVAL },
                { 0, 1, 2, 0, -EBADMSG }, { 0, 1, 0, 2, -EBADMSG }, { 5, 1, 2, 0, -EBADMSG },
        };
        for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
                raw_start(PEER_PROTO_VERSION, PEER_MSG_LIST_REP, 4, 1);
                raw_u32(1);
                raw_str("job", 3);
                raw_u64(1);
                raw_u32(entries[i].rank);
                raw_u32(entries[i].world);
                raw_u8(entries[i].committed);
                raw_u8(entries[i].more);
                raw_end();
                CHECK_RC(raw_decode(), entries[i].want, "LIST_REP entry case %zu", i);
        }
        raw_start(PEER_PROTO_VERSION, PEER_MSG_GET_RANK, 4, 1);
        raw_str("job", 3);
        raw_u64(1);
        raw_u32(CKPT_WORLD_MAX);
        raw_end();
        CHECK_RC(raw_decode(), -EINVAL, "GET_RANK rank over max");
        raw_start(PEER_PROTO_VERSION, PEER_MSG_GET_RANK, 4, 1);
        raw_str("job", 3);
        raw_u64((uint64_t)CKPT_STEP_MAX + 1);
        raw_u32(0);
        raw_end();
        CHECK_RC(raw_decode(), -EINVAL, "GET_RANK step over max");

        /* STEP_REPORT: ranks below world_size, known flags, committed_at
         * only with COMMITTED, a rank count within its bound (checked
         * before the ranks are read) */
        static const struct {
                uint32_t world, nranks, rank;
                uint8_t flags;
                int64_t at;
                int want;
                const char *what;
        } reports[] = {
                { 4, 1, 3, PEER_REPORT_COMMIT, 0, 0, "rank 3 of 4" },
                { 4, 1, 4, 0, 0, -EINVAL, "rank == world_size" },
                { 0, 0, 0, 0, 0, -EINVAL, "world_size 0" },
                { 4, 0, 0, 1u << 3, 0, -EBADMSG, "unknown flag" },
                { 4, 0, 0, 0, 5, -EINVAL, "committed_at without COMMITTED" },
                { 4, 0, 0, PEER_REPORT_COMMITTED, -1, -EINVAL, "committed_at < 0" },
                { 4, PEER_REPORT_RANKS_MAX + 1, 0, 0, 0, -EBADMSG, "too many ranks" },
        };
        for (size_t i = 0; i < sizeof(reports) / sizeof(reports[0]); i++) {
                raw_start(PEER_PROTO_VERSION, PEER_MSG_STEP_REPORT, 0, 1);
                raw_str("job", 3);
                raw_u32(1000);
                raw_u64(7);
                raw_u32(reports[i].world);
                raw_u8(reports[i].flags);
                raw_u64((uint64_t)reports[i].at);
                raw_u32(reports[i].nranks);
                if (reports[i].nranks == 1)
                        raw_u32(reports[i].rank);
                raw_end();
                CHECK_RC(raw_decode(), reports[i].want, "STEP_REPORT: %s", reports[i].what);
        }
        /* STEP_STATE: a known state; an error exactly when REFUSED */
        static const struct {
                uint8_t state;
                int32_t error;
                int want;
                const char *what;
        } states[] = {
                { PEER_STEP_EVERYWHERE, 0, 0, "EVERYWHERE" },
                { PEER_STEP_REFUSED, -22, 0, "REFUSED -EINVAL" },
                { PEER_STEP_REFUSED, 0, -EBADMSG, "REFUSED without an error" },
                { PEER_STEP_PENDING, -22, -EINVAL, "PENDING with an error" },
                { PEER_STEP_STATE_MAX_, 0, -EBADMSG, "unknown state" },
        };
        for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
                raw_start(PEER_PROTO_VERSION, PEER_MSG_STEP_STATE, 0, 1);
                raw_str("job", 3);
                raw_u64(7);
                raw_u32(4);
                raw_u8(states[i].state);
                raw_u64(0);
                raw_u32((uint32_t)states[i].error);
                raw_str("why", 3);
                raw_end();
                CHECK_RC(raw_decode(), states[i].want, "STEP_STATE: %s", states[i].what);
        }

        /* Fixed-size bodies: one byte short or long. */
        raw_start(PEER_PROTO_VERSION, PEER_MSG_AUTH, 0, 1);
        raw_bytes(nonce, PEER_MAC_SIZE - 1);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "AUTH of 31 bytes");
        raw_start(PEER_PROTO_VERSION, PEER_MSG_PING, 0, 1);
        raw_u64(1);
        raw_u8(0);
        raw_end();
        CHECK_RC(raw_decode(), -EBADMSG, "PING of 9 bytes");
}

static void test_type_names(void) {
        static const char *const want[PEER_MSG_TYPE_MAX_] = {
                [PEER_MSG_HELLO] = "HELLO",       [PEER_MSG_HELLO_REPLY] = "HELLO_REPLY",
                [PEER_MSG_AUTH] = "AUTH",         [PEER_MSG_AUTH_OK] = "AUTH_OK",
                [PEER_MSG_ERROR] = "ERROR",       [PEER_MSG_RANK_BEGIN] = "RANK_BEGIN",
                [PEER_MSG_DATA] = "DATA",         [PEER_MSG_RANK_END] = "RANK_END",
                [PEER_MSG_RANK_ACK] = "RANK_ACK", [PEER_MSG_LIST_REQ] = "LIST_REQ",
                [PEER_MSG_LIST_REP] = "LIST_REP", [PEER_MSG_GET_RANK] = "GET_RANK",
                [PEER_MSG_PING] = "PING",         [PEER_MSG_PONG] = "PONG",
                [PEER_MSG_STEP_REPORT] = "STEP_REPORT", [PEER_MSG_STEP_STATE] = "STEP_STATE",
                [PEER_MSG_NODE_STATUS_REQ] = "NODE_STATUS_REQ",
                [PEER_MSG_NODE_STATUS] = "NODE_STATUS",
        };
        for (uint16_t t = PEER_MSG_HELLO; t < PEER_MSG_TYPE_MAX_; t++)
                CHECK(strcmp(peer_msg_type_name(t), want[t]) == 0, "name of %u: %s", t,
                      peer_msg_type_name(t));
        CHECK(strcmp(peer_msg_type_name(0), "UNKNOWN") == 0, "name of 0");
}

/* A relayed answer's reach is an enum ckpt_node_reach, and only a relayed
 * answer (about another node) may say the node is not reachable. */
static void test_node_status_reach(void) {
        make_msg(&in, PEER_MSG_NODE_STATUS, 1);
        CHECK(peer_msg_encode(&in, buf, sizeof(buf)) > 0, "relayed NODE_STATUS down encodes");
        in.node_status.reach = CKPT_NODE_REACH_MAX_;
        CHECK(peer_msg_encode(&in, buf, sizeof(buf)) < 0, "NODE_STATUS reach past the enum refused");
        in.node_status.reach = CKPT_NODE_UNREACHABLE;
        in.node_status.about = PEER_NODE_SELF;
        CHECK(peer_msg_encode(&in, buf, sizeof(buf)) < 0,
              "a node's own NODE_STATUS saying it is unreachable refused");
}

int main(void) {
        test_roundtrips();
        test_node_status_reach();
        test_list_size();
        test_golden();
        test_truncation();
        test_header();
        test_names();
        test_values();
        test_type_names();
        if (failures) {
                fprintf(stderr, "test-peer-proto: %u failure(s)\n", failures);
                return 1;
        }
        printf("test-peer-proto: ok\n");
        return 0;
}
