/* SPDX-License-Identifier: MIT */
/*
 * peer-proto — the wire protocol between ckptd daemons on different nodes
 * (neighbour replication and restore from a neighbour).
 *
 * Peers talk over TCP, so unlike the client protocol (ckpt-proto.h, one
 * message per SOCK_SEQPACKET packet) messages are framed on a byte stream:
 * a reader first reads the 24-byte header, learns from it how many body
 * bytes follow, and reads exactly those.  Every message starts with
 * (integers little-endian):
 *
 *   u32 magic    PEER_PROTO_MAGIC ("CKPE" on the wire)
 *   u16 version  PEER_PROTO_VERSION
 *   u16 type     enum peer_msg_type
 *   u32 length   body bytes after the header (bounds: PEER_MSG_MAX, except
 *                RANK_BEGIN and DATA, below)
 *   u32 stream   0 = connection level; else the transfer it belongs to
 *   u64 seq      chosen by the sender (e.g. a per-connection counter)
 *
 * Two messages are bigger than PEER_MSG_MAX, and both are built so that the
 * big part is never copied through a message struct:
 *  - RANK_BEGIN carries the rank's MANIFEST text inline (<= PEER_MANIFEST_MAX);
 *    the decoder points at it inside the caller's buffer.
 *  - DATA is a 24-byte data header followed by up to PEER_DATA_MAX payload
 *    bytes.  The codec only deals with header + data header: the sender
 *    writes the payload itself after them (from a slot or with sendfile), the
 *    receiver reads data.length payload bytes straight to where they go.
 *
 * docs/peer-protocol.md specifies every body byte by byte and the
 * authentication handshake (daemon/peer/auth.h computes the MACs).
 *
 * Like ckpt-proto this library does no I/O.  Decoders validate everything
 * (lengths, stream ids, enums, counts, names, trailing bytes) and return
 * -EBADMSG for a malformed message, -EPROTONOSUPPORT for a wrong version,
 * -EINVAL for a well-formed message carrying an invalid value (a bad name,
 * rank >= world_size).  They never read past `len`.  The encoder runs the
 * same checks, so neither side can emit what the other would reject.
 *
 * Thread-safety: all functions are pure apart from writing their outputs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt-proto.h"

#define PEER_PROTO_MAGIC 0x45504b43u /* "CKPE" on the wire */
#define PEER_PROTO_VERSION 3
#define PEER_HDR_SIZE 24
/* Body bytes of every message but RANK_BEGIN and DATA. */
#define PEER_MSG_MAX 65536
/* DATA: data header size, and the most payload bytes one DATA carries. */
#define PEER_DATA_HDR_SIZE 24
#define PEER_DATA_MAX (4u << 20)
/* RANK_BEGIN: the longest manifest text, and the longest body: the fields
 * before the manifest (with a job name of CKPT_NAME_MAX bytes) plus it. */
#define PEER_MANIFEST_MAX (16u << 20)
#define PEER_RANK_BEGIN_FIXED_MAX (2 + CKPT_NAME_MAX + 8 + 4 + 4 + 4 + 1 + 4)
#define PEER_RANK_BEGIN_MAX (PEER_RANK_BEGIN_FIXED_MAX + PEER_MANIFEST_MAX)
/* LIST_REP entries per message.  A full page of entries with names near
 * CKPT_NAME_MAX bytes would not fit PEER_MSG_MAX: a sender fills a page
 * while peer_list_rep_size() stays <= PEER_MSG_MAX (see there). */
#define PEER_LIST_PAGE 256
/* Rank transfers (RANK_BEGIN .. its RANK_ACK, or GET_RANK .. its RANK_END)
 * open at once on one connection in one direction.  Their DATA frames may
 * interleave; a receiver closes a connection that opens more. */
#define PEER_STREAMS_MAX 8
#define PEER_CLUSTER_ID_MAX 64
#define PEER_ERRMSG_MAX 512
#define PEER_NONCE_SIZE 32
#define PEER_MAC_SIZE 32
/* After the handshake every frame (header, body, and a DATA's payload) is
 * followed by a PEER_TAG_SIZE-byte GMAC tag under a per-direction key of
 * PEER_FRAME_KEY_SIZE bytes (daemon/peer/framemac.h).  The tag is not
 * counted in the header's length: the codec does not see it. */
#define PEER_TAG_SIZE 16
#define PEER_FRAME_KEY_SIZE 16
/* Node indexes are below this; the bound of [cluster] node_count. */
#define PEER_NODES_MAX 65536u
/* DATA.shard indexes the rank's manifest: below its shard bound
 * (MANIFEST_SHARDS_MAX in daemon/local/manifest.h). */
#define PEER_SHARDS_MAX 65536u

enum peer_msg_type {
        /* connection level: header stream must be 0 */
        PEER_MSG_HELLO = 1,       /* client -> server */
        PEER_MSG_HELLO_REPLY = 2, /* server -> client */
        PEER_MSG_AUTH = 3,        /* client -> server */
        PEER_MSG_AUTH_OK = 4,     /* server -> client */
        /* any stream, 0 included */
        PEER_MSG_ERROR = 5,
        /* stream level: header stream must not be 0 */
        PEER_MSG_RANK_BEGIN = 6,
        PEER_MSG_DATA = 7,
        PEER_MSG_RANK_END = 8,
        PEER_MSG_RANK_ACK = 9,
        PEER_MSG_LIST_REQ = 10,
        PEER_MSG_LIST_REP = 11,
        PEER_MSG_GET_RANK = 12,
        /* connection level */
        PEER_MSG_PING = 13,
        PEER_MSG_PONG = 14,
        /* the cluster-wide commit (docs/peer-protocol.md "Commit"): a node
         * reports to the coordinator (node 0), which answers and decides */
        PEER_MSG_STEP_REPORT = 15, /* node -> coordinator */
        PEER_MSG_STEP_STATE = 16,  /* coordinator -> node */
        /* the cluster view (ckptctl cluster): any node asks any node */
        PEER_MSG_NODE_STATUS_REQ = 17,
        PEER_MSG_NODE_STATUS = 18,
        PEER_MSG_TYPE_MAX_,
};

/* Why a rank is sent (RANK_BEGIN). */
enum peer_purpose {
        PEER_PURPOSE_REPLICATE = 1, /* keep it as a replica of src_node's rank */
        PEER_PURPOSE_RESTORE = 2,   /* the answer to a GET_RANK */
        PEER_PURPOSE_MAX_,
};

struct peer_hdr {
        uint16_t version;
        uint16_t type;
        uint32_t length; /* body bytes after the header */
        uint32_t stream;
        uint64_t seq;
};

/* HELLO (client) and HELLO_REPLY (server, with the server's MAC over both
 * nonces: daemon/peer/auth.h). */
struct peer_hello {
        uint32_t node_index, node_count; /* node_index < node_count */
        uint8_t nonce[PEER_NONCE_SIZE];
        char cluster_id[PEER_CLUSTER_ID_MAX + 1]; /* text; may be empty */
};

struct peer_hello_reply {
        uint32_t node_index, node_count;
        uint8_t nonce[PEER_NONCE_SIZE];
        uint8_t mac[PEER_MAC_SIZE];
};

struct peer_auth {
        uint8_t mac[PEER_MAC_SIZE]; /* the client's MAC */
};

/* error: -4095 .. -1.  stream: the stream the error is about, equal to the
 * header's stream (0: the connection; the sender closes it after). */
struct peer_error {
        int32_t error;
        uint32_t stream;
        char message[PEER_ERRMSG_MAX + 1];
};

/* The start of one rank's transfer.  The manifest is the rank's MANIFEST
 * file (docs/on-disk.md), manifest_len bytes (1 .. PEER_MANIFEST_MAX, no NUL
 * byte, not NUL-terminated).  The decoder points `manifest` into the buffer
 * it decoded from (valid as long as that buffer); the encoder copies
 * manifest_len bytes from it. */
struct peer_rank_begin {
        struct ckpt_name job;
        uint64_t step;
        uint32_t rank, world_size;
        uint32_t src_node; /* whose rank this is (the node that saved it) */
        uint8_t purpose;   /* enum peer_purpose */
        uint32_t manifest_len;
        const char *manifest;
};

/* DATA: `length` (1 .. PEER_DATA_MAX) payload bytes of shard number `shard`
 * (index in manifest order) at `offset` follow this message on the stream. */
struct peer_data {
        uint32_t shard;
        uint64_t offset;
        uint32_t length;
};

/* The receiver's verdict on a rank: 0 = verified (CRCs), fsynced and renamed
 * into place; else -errno (-4095 .. -1) with a message for the log. */
struct peer_rank_ack {
        int32_t status;
        char message[PEER_ERRMSG_MAX + 1];
};

/* "Which replicas of node src_node's ranks do you hold?"  job.len 0: all
 * jobs, else a valid name. */
struct peer_list_req {
        struct ckpt_name job;
        uint32_t src_node;
};

struct peer_list_entry {
        struct ckpt_name job;
        uint64_t step;
        uint32_t rank, world_size;
        uint8_t committed; /* 0 or 1: the step is committed */
};

/* One page; more = 1: another LIST_REP follows on the stream.  ~70 KiB:
 * keep it off small stacks. */
struct peer_list_rep {
        uint32_t count; /* <= PEER_LIST_PAGE */
        struct peer_list_entry entries[PEER_LIST_PAGE];
        uint8_t more; /* 0 or 1 */
};

/* "Send me that rank": answered on the same stream by RANK_BEGIN (purpose
 * RESTORE), DATA..., RANK_END, or by ERROR. */
struct peer_get_rank {
        struct ckpt_name job;
        uint64_t step;
        uint32_t rank;
};

struct peer_ping {
        uint64_t value; /* PONG echoes PING's value */
};

/* The most ranks one STEP_REPORT names (4 bytes each, so a report stays
 * under PEER_MSG_MAX); a node holding more sends several: reports add up. */
#define PEER_REPORT_RANKS_MAX 8192u

/* STEP_REPORT flags */
enum {
        PEER_REPORT_BEGIN = 1u << 0,     /* a save of the step began here: answer
                                          * whether its world_size is the cluster's */
        PEER_REPORT_COMMIT = 1u << 1,    /* a trainer here asked for the commit */
        PEER_REPORT_COMMITTED = 1u << 2, /* this node recorded the decision
                                          * (committed_at says when it was made) */
        PEER_REPORT_FLAGS_ALL_ = (1u << 3) - 1,
};

/* "These ranks of (job, step) are on my local disk" (fsynced, renamed into
 * place), plus what the flags say.  uid: the job's owner on the sending
 * node; the coordinator refuses a report whose uid differs from the
 * first one it saw for the job. */
struct peer_step_report {
        struct ckpt_name job;
        uint32_t uid;
        uint64_t step;
        uint32_t world_size;
        uint8_t flags;          /* PEER_REPORT_* */
        int64_t committed_at;   /* unix seconds; 0 unless COMMITTED */
        uint32_t nranks;        /* <= PEER_REPORT_RANKS_MAX, each < world_size */
        uint32_t ranks[PEER_REPORT_RANKS_MAX];
};

/* STEP_STATE: the coordinator's word on a step. */
enum peer_step_phase {
        PEER_STEP_PENDING = 0,    /* not decided; message says what is missing */
        PEER_STEP_DECIDED = 1,    /* committed: record it (COMMITTED record) and report */
        PEER_STEP_EVERYWHERE = 2, /* every node holding ranks of it has recorded it */
        PEER_STEP_REFUSED = 3,    /* error and message say why (world_size, owner) */
        PEER_STEP_STATE_MAX_,
};

struct peer_step_state {
        struct ckpt_name job;
        uint64_t step;
        uint32_t world_size;    /* the cluster's (0: not known yet) */
        uint8_t state;          /* enum peer_step_phase */
        int64_t committed_at;   /* DECIDED, EVERYWHERE: when it was decided */
        int32_t error;          /* REFUSED: -errno; else 0 */
        char message[PEER_ERRMSG_MAX + 1];
};

/* NODE_STATUS_REQ: what a node asks of another for its cluster view;
 * the answer carries the same nonce.  uid: whose jobs and errors the
 * answer may name, the uid of the client that asked on the asking node
 * (PEER_UID_ANY: root's view, every job and the daemon's own errors), so
 * that STATUS's privacy rule holds on every node and the bounded job list
 * is the asker's own jobs, not the first CKPT_CLUSTER_JOBS of anyone's. */
#define PEER_UID_ANY UINT32_MAX
/* about: the node whose status is asked; PEER_NODE_SELF the receiver.
 * Another node's is a relay request to the coordinator (node 0, linked to
 * every node), from a node with no link to that one: the coordinator asks
 * it and answers with its NODE_STATUS (about, reach) in turn. */
#define PEER_NODE_SELF UINT32_MAX
struct peer_node_status_req {
        uint64_t nonce;
        uint32_t uid;
        uint32_t about;
};

/* NODE_STATUS: the answering node's jobs (the first CKPT_CLUSTER_JOBS,
 * jobs_omitted the rest), its replication links that are down (node
 * indexes; the receiver checks them against its cluster size) and its
 * errors, as in the CLUSTER reply (ckpt-proto.h). */
struct peer_node_status {
        uint64_t nonce;
        /* whose status this is (PEER_NODE_SELF: the sender's) and, in a
         * relayed answer, what the relaying node found (enum
         * ckpt_node_reach; anything but reachable carries only last_error) */
        uint32_t about;
        uint8_t reach;
        uint32_t njobs, jobs_omitted;
        struct ckpt_cluster_job jobs[CKPT_CLUSTER_JOBS];
        /* each job's owner, so that the asking daemon applies STATUS's
         * privacy rule (a non-root uid sees only its own jobs) */
        uint32_t uids[CKPT_CLUSTER_JOBS];
        uint32_t nlinks;
        uint32_t links[CKPT_CLUSTER_LINKS];
        uint32_t errors;
        char last_error[CKPT_CLUSTER_ERROR_MAX + 1];
};

struct peer_msg {
        struct peer_hdr hdr;
        union {
                struct peer_hello hello;
                struct peer_hello_reply hello_reply;
                struct peer_auth auth;
                struct peer_error error;
                struct peer_rank_begin rank_begin;
                struct peer_data data;
                struct peer_rank_ack rank_ack;
                struct peer_list_req list_req;
                struct peer_list_rep list_rep;
                struct peer_get_rank get_rank;
                struct peer_ping ping; /* PING, PONG */
                struct peer_step_report step_report;
                struct peer_step_state step_state;
                struct peer_node_status_req node_status_req;
                struct peer_node_status node_status;
                /* AUTH_OK, RANK_END: empty body */
        };
};

/*
 * Encode m into buf (capacity cap).  m->hdr.type, stream and seq are taken
 * from m; version and length are filled in.  Returns the bytes written, or
 * -EINVAL if a field is invalid (the same checks as the decoder, including
 * the stream rule of the type) or -EMSGSIZE if cap is too small or the body
 * would exceed its bound (a LIST_REP page of long names: PEER_MSG_MAX).
 *
 * DATA: writes only the header and the data header (PEER_HDR_SIZE +
 * PEER_DATA_HDR_SIZE bytes); the header's length counts the payload too, so
 * the caller must write exactly m->data.length payload bytes next.
 * RANK_BEGIN: copies the manifest, so cap must hold PEER_HDR_SIZE +
 * peer_rank_begin fields + manifest_len (at most PEER_HDR_SIZE +
 * PEER_RANK_BEGIN_MAX).
 */
int peer_msg_encode(const struct peer_msg *m, void *buf, size_t cap);

/*
 * Encode an ERROR (m->hdr.type must be PEER_MSG_ERROR, else -EINVAL) with
 * `version` in its header instead of PEER_PROTO_VERSION.  The magic, the
 * header and the ERROR body are the same in every version, so this is how
 * a daemon tells one of another version, in words that one can decode, why
 * it is refused.  Otherwise as peer_msg_encode().
 */
int peer_error_encode_as(const struct peer_msg *m, uint16_t version, void *buf, size_t cap);

/*
 * Decode the header from the first PEER_HDR_SIZE bytes of buf (len >=
 * PEER_HDR_SIZE; further bytes are ignored), so a stream reader learns how
 * many body bytes to read next (h->length).  Returns 0, -EPROTONOSUPPORT
 * (version != PEER_PROTO_VERSION; *h is filled in, but the length of a
 * foreign version cannot be trusted: answer ERROR and close), or -EBADMSG:
 * short, bad magic, unknown type, stream id against the type's rule, or
 * length outside the type's bound (PEER_MSG_MAX; RANK_BEGIN:
 * PEER_RANK_BEGIN_MAX; DATA: PEER_DATA_HDR_SIZE .. + PEER_DATA_MAX).
 */
int peer_hdr_decode(struct peer_hdr *h, const void *buf, size_t len);

/*
 * Decode one whole message of len bytes: header + body, len ==
 * PEER_HDR_SIZE + h.length.  For DATA the message is header + data header
 * only (len == PEER_HDR_SIZE + PEER_DATA_HDR_SIZE) and data.length must be
 * the header's length minus PEER_DATA_HDR_SIZE; the payload is not part of
 * it.  Returns 0, or the errors of peer_hdr_decode(), or -EBADMSG
 * (malformed: truncated, trailing bytes, bad enum or bool, count over the
 * page, text over its bound or with a NUL, errno out of range) or -EINVAL
 * (well-formed but a value is invalid: name, step, rank, world_size, node,
 * range; -EBADMSG wins when both apply).  *m is zeroed first, so after
 * success every byte the message does not set is zero and two decoded
 * messages compare equal with memcmp (RANK_BEGIN: apart from the manifest
 * pointer).  On error *m is left partially filled; do not use it beyond
 * m->hdr.
 */
int peer_msg_decode(struct peer_msg *m, const void *buf, size_t len);

/* Bytes the body of a LIST_REP with the first `count` entries of l takes
 * (count clamped to PEER_LIST_PAGE).  A sender adds entries to a page while
 * this stays <= PEER_MSG_MAX. */
size_t peer_list_rep_size(const struct peer_list_rep *l, uint32_t count);

/* "HELLO", "DATA", ...; "UNKNOWN" for anything else.  Never NULL. */
const char *peer_msg_type_name(uint16_t type);
