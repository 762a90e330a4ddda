/* SPDX-License-Identifier: MIT */
/*
 * ckpt-proto — the wire protocol between libckpt, ckptctl and ckptd.
 *
 * Messages travel over a Unix SOCK_SEQPACKET socket, one message per packet,
 * so message boundaries come from the kernel and a decoder never has to
 * resynchronise.  File descriptors (shared-memory slots, shard files for
 * read-only mapping) ride along as SCM_RIGHTS ancillary data; the decoder
 * only sees the flag that says one is attached.
 *
 * Every message starts with a 16-byte header (all integers little-endian):
 *
 *   u32 magic    CKPT_PROTO_MAGIC
 *   u16 version  CKPT_PROTO_VERSION_MIN .. CKPT_PROTO_VERSION
 *   u16 type     enum ckpt_msg_type
 *   u32 length   whole message including header, <= CKPT_MSG_MAX
 *   u32 seq      chosen by the requester, echoed in the reply
 *
 * followed by the body of that type.  Strings are u16 length + bytes (no NUL).
 * docs/protocol.md specifies every body byte by byte.
 *
 * This library does no I/O: it encodes into and decodes from caller buffers.
 * Decoders validate everything (lengths, enums, counts, names, trailing bytes)
 * and return -EBADMSG for a malformed message, -EPROTONOSUPPORT for a wrong
 * version, -EINVAL for a well-formed message carrying an invalid value
 * (a bad name, rank >= world_size).  They never read past `len`.
 *
 * Thread-safety: all functions are pure apart from writing their outputs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_PROTO_MAGIC 0x54504b43u /* "CKPT" on the wire */
/* The versions spoken: a message's header carries one of them, a daemon
 * answers a request in its version, and HELLO settles the newest both sides
 * speak (docs/protocol.md, "Versioning").  Version 3 differs from 2 only in
 * the SAVE_BEGIN reply, which gained `replaced`; version 4 from 3 only in
 * the request COMMIT_ASYNC, which earlier versions do not have; version 5
 * from 4 in the request VERIFY and in the STATUS reply, which gained the
 * counts of corrupt copies (copies_bad, copies_repaired,
 * copies_unrepairable), the scrub_* fields and the audit_* fields;
 * version 6 from 5 in the VERIFY reply, whose entries are one per shard of
 * each copy (with the shard's name) and which counts the copies;
 * version 7 from 6 in the requests METRICS, DELETE, RETENTION and CLUSTER,
 * which earlier versions do not have, and in the replies MAP (offset,
 * memory), STATUS (memory_bytes, memory_steps) and CKPT_LIST (each entry's
 * reason and memory), which gained those fields at their end. */
#define CKPT_PROTO_VERSION 7     /* the newest */
#define CKPT_PROTO_VERSION_MIN 2 /* the oldest */
#define CKPT_PROTO_VERSION_REPLACED 3 /* the first with SAVE_BEGIN's `replaced` */
#define CKPT_PROTO_VERSION_COMMIT_ASYNC 4 /* the first with COMMIT_ASYNC */
#define CKPT_PROTO_VERSION_SCRUB 5 /* the first with STATUS's scrub_* and audit_* fields */
#define CKPT_PROTO_VERSION_COPY_FAULTS 5 /* the first with VERIFY and STATUS's copy counts */
#define CKPT_PROTO_VERSION_VERIFY_SHARDS 6 /* the first with VERIFY's per-shard entries */
#define CKPT_PROTO_VERSION_METRICS 7 /* the first with METRICS */
#define CKPT_PROTO_VERSION_DELETE 7 /* the first with DELETE and RETENTION */
#define CKPT_PROTO_VERSION_FAIL_REASON 7 /* the first with CKPT_LIST's reason */
#define CKPT_PROTO_VERSION_MEMORY 7 /* the first with the memory tier's fields */
#define CKPT_PROTO_VERSION_CLUSTER 7 /* the first with CLUSTER */
#define CKPT_HDR_SIZE 16
/* Fits the default net.core.wmem_max so no process needs SO_SNDBUFFORCE. */
#define CKPT_MSG_MAX 65536
/* Longest job or shard name; also the file-name limit of every filesystem. */
#define CKPT_NAME_MAX 255
#define CKPT_ERRMSG_MAX 512
#define CKPT_VERSION_STR_MAX 64
/* Entries per page of a list reply; sized so a full page stays < CKPT_MSG_MAX. */
#define CKPT_LIST_PAGE 128
/* A failed step's reason in a list entry (a page of them stays < CKPT_MSG_MAX). */
#define CKPT_FAIL_REASON_MAX 199
#define CKPT_JOB_PAGE 64
#define CKPT_WORLD_MAX (1u << 20)
/* Steps are stored as sqlite INTEGER (signed 64-bit). */
#define CKPT_STEP_MAX INT64_MAX
/* Largest shard the protocol accepts: 1 PiB. */
#define CKPT_SHARD_SIZE_MAX (1ull << 50)

enum ckpt_msg_type {
        CKPT_MSG_HELLO = 1,
        CKPT_MSG_SAVE_BEGIN = 2,
        CKPT_MSG_SHARD_BEGIN = 3,
        CKPT_MSG_CHUNK_GET = 4,
        CKPT_MSG_CHUNK_PUT = 5,
        CKPT_MSG_SAVE_FINISH = 6,
        CKPT_MSG_SAVE_ABORT = 7,
        CKPT_MSG_WAIT = 8,
        CKPT_MSG_COMMIT = 9,
        CKPT_MSG_LATEST = 10,
        CKPT_MSG_SHARD_LIST = 11,
        CKPT_MSG_READ = 12,
        CKPT_MSG_READ_DONE = 13,
        CKPT_MSG_MAP = 14,
        CKPT_MSG_STATUS = 15,
        CKPT_MSG_JOB_LIST = 16,
        CKPT_MSG_CKPT_LIST = 17,
        CKPT_MSG_FETCH = 18,
        CKPT_MSG_PIN = 19,
        CKPT_MSG_LATEST_RANK = 20,
        CKPT_MSG_COMMIT_ASYNC = 21, /* from version 4 on */
        CKPT_MSG_VERIFY = 22,       /* from version 5 on */
        CKPT_MSG_DELETE = 23,       /* from version 7 on */
        CKPT_MSG_RETENTION = 24,    /* from version 7 on */
        CKPT_MSG_METRICS = 25,      /* from version 7 on */
        CKPT_MSG_CLUSTER = 26,      /* from version 7 on */
        CKPT_MSG_REQUEST_MAX_,

        /* A reply has the request's type with this bit set ... */
        CKPT_MSG_REPLY = 0x8000,
        /* ... or is an error reply, whatever the request was. */
        CKPT_MSG_ERROR = 0xffff,
};

/* Durability tiers, in order.  A step "reaches" a tier when every shard of
 * every rank this node holds for it is there. */
enum ckpt_tier {
        CKPT_TIER_STAGED = 1,    /* in daemon-owned shared memory */
        CKPT_TIER_LOCAL = 2,     /* fsynced on this node's disk, manifest renamed in */
        CKPT_TIER_COMMITTED = 3, /* local, and the job committed the step */
        CKPT_TIER_REMOTE = 4,    /* the step's global COMMIT object is in the
                                  * object store (every node flushed) */
        CKPT_TIER_REPLICATED = 5, /* committed, and every replication target
                                   * acknowledged every rank this node holds */
        CKPT_TIER_MAX_,
};

/* Checkpoint states as reported by CKPT_LIST. */
enum ckpt_state {
        CKPT_STATE_SAVING = 1,    /* some rank still staging or writing */
        CKPT_STATE_LOCAL = 2,     /* every rank here is on disk, not committed */
        CKPT_STATE_COMMITTED = 3,
        CKPT_STATE_FAILED = 4,    /* a rank's save failed or was aborted */
        CKPT_STATE_MAX_,
};

/* Where a committed step stands in the object store (CKPT_LIST). */
enum ckpt_remote_state {
        CKPT_REMOTE_NONE = 0,      /* not flushed (or no store configured) */
        CKPT_REMOTE_FLUSHING = 1,  /* shard objects being uploaded */
        CKPT_REMOTE_MANIFEST = 2,  /* this node's manifest is up; waiting for COMMIT */
        CKPT_REMOTE_DONE = 3,      /* the global COMMIT object exists */
        CKPT_REMOTE_FAILED = 4,    /* stopped on a permanent error (see status) */
        CKPT_REMOTE_MAX_,
};

struct ckpt_hdr {
        uint16_t version;
        uint16_t type;
        uint32_t length;
        uint32_t seq;
};

/* A name as carried in a message: always NUL-terminated after decoding. */
struct ckpt_name {
        uint16_t len;
        char str[CKPT_NAME_MAX + 1];
};

/* ---- requests ---------------------------------------------------------- */

struct ckpt_req_hello {
        uint16_t proto_min, proto_max; /* versions the client speaks */
};

struct ckpt_req_save_begin {
        struct ckpt_name job;
        uint64_t step;
        uint32_t rank, world_size;
};

struct ckpt_req_shard_begin {
        uint32_t save_id;
        struct ckpt_name shard;
        uint64_t size;
};

/* Ask for the window of a shard starting at `offset` (the next unfilled byte). */
struct ckpt_req_chunk_get {
        uint32_t shard_id;
        uint64_t offset;
};

/* The window [offset, offset+length) of the shard is filled; crc32c is the
 * CRC32C (seed 0) of exactly those bytes. */
struct ckpt_req_chunk_put {
        uint32_t shard_id;
        uint32_t slot_id;
        uint64_t offset, length;
        uint32_t crc32c;
};

struct ckpt_req_save_id {
        uint32_t save_id; /* SAVE_FINISH, SAVE_ABORT */
};

struct ckpt_req_wait {
        struct ckpt_name job;
        uint64_t step;
        uint8_t tier;        /* enum ckpt_tier */
        uint32_t timeout_ms; /* 0 = just check */
};

/* COMMIT (timeout_ms bounds the wait for local), LATEST (step ignored),
 * COMMIT_ASYNC (timeout_ms must be 0: the reply does not wait for the
 * commit, which the daemon makes once every rank is saved). */
struct ckpt_req_job_step {
        struct ckpt_name job;
        uint64_t step;
        uint32_t timeout_ms;
};

struct ckpt_req_shard_list {
        struct ckpt_name job;
        uint64_t step;
        uint32_t rank;
        uint32_t start; /* index of the first entry wanted */
};

/* READ: bytes [offset, offset+length) of a shard into a slot; length is at
 * most the slot size.  MAP: offset/length ignored, the shard file is passed. */
struct ckpt_req_read {
        struct ckpt_name job;
        uint64_t step;
        uint32_t rank;
        struct ckpt_name shard;
        uint64_t offset, length;
};

struct ckpt_req_read_done {
        uint32_t slot_id;
};

/* JOB_LIST (job reserved: must be empty, len 0; start = first job index),
 * CKPT_LIST (start = first entry index of that job's checkpoints, newest
 * first). */
struct ckpt_req_list {
        struct ckpt_name job;
        uint32_t start;
};

/* FETCH: copy a committed step from the object store into the local tier
 * (`ckptctl restore`).  step CKPT_STEP_LATEST: the newest step with a
 * COMMIT object.  which: the ranks of node `index` of the writing cluster,
 * rank `index`, or every rank. */
#define CKPT_STEP_LATEST UINT64_MAX
enum ckpt_fetch_which {
        CKPT_FETCH_NODE = 1,
        CKPT_FETCH_RANK = 2,
        CKPT_FETCH_ALL = 3,
        CKPT_FETCH_PEERS = 4, /* this node's ranks, from the neighbours (index 0) */
        CKPT_FETCH_MAX_,
};

struct ckpt_req_fetch {
        struct ckpt_name job;
        uint64_t step;
        uint8_t which;   /* enum ckpt_fetch_which */
        uint32_t index;  /* node or rank; 0 for ALL */
        uint32_t timeout_ms;
};

/* PIN: keep (job, step) whatever retention says (pinned 1), or stop (0). */
struct ckpt_req_pin {
        struct ckpt_name job;
        uint64_t step;
        uint8_t pinned;
};

/* LATEST_RANK: the newest committed step of which `rank` can be restored
 * through this daemon, among the steps < below (CKPT_STEP_LATEST: no
 * bound).  A trainer asks it for each of its ranks and takes the minimum
 * over the job, so every rank restores the same step. */
struct ckpt_req_latest_rank {
        struct ckpt_name job;
        uint32_t rank;  /* < CKPT_WORLD_MAX */
        uint64_t below; /* <= CKPT_STEP_MAX, or CKPT_STEP_LATEST */
};

/* VERIFY: read and check in full every copy this node holds (local tier,
 * replica areas) of job's ranks — of one step (else CKPT_STEP_LATEST:
 * every step) and one rank (else CKPT_VERIFY_ALL_RANKS) — and, with
 * repair 1, replace each bad copy with a good one (docs/protocol.md). */
#define CKPT_VERIFY_ALL_RANKS UINT32_MAX
struct ckpt_req_verify {
        struct ckpt_name job;
        uint64_t step;  /* <= CKPT_STEP_MAX, or CKPT_STEP_LATEST */
        uint32_t rank;  /* < CKPT_WORLD_MAX, or CKPT_VERIFY_ALL_RANKS */
        uint8_t repair;
};

/* METRICS: the bytes of the metrics document (docs/ckptd.8, METRICS)
 * from `offset` on.  offset 0 renders a new document and keeps it with the
 * connection; a later offset reads that same document, so the pages of
 * one document are consistent (offset past its end: -EINVAL). */
struct ckpt_req_metrics {
        uint64_t offset;
};

/* DELETE: remove a step (whole_job 0) or every step of the job
 * (whole_job 1, step 0) from the tiers this node manages.  Refused for the
 * job's newest committed step and pinned steps unless force 1.  Answered
 * once the steps are no longer listed or restorable; their bytes go in
 * the background (docs/protocol.md). */
/* CLUSTER: node `index` (0 .. the reply's total - 1) of the cluster view,
 * one node per reply so that a reply stays below CKPT_MSG_MAX
 * (docs/protocol.md, CLUSTER). */
struct ckpt_req_cluster {
        uint32_t index;
};

struct ckpt_req_delete {
        struct ckpt_name job;
        uint64_t step;     /* <= CKPT_STEP_MAX; 0 with whole_job */
        uint8_t whole_job;
        uint8_t force;
};

/* RETENTION: what retention keeps and removes of a job (job.len 0: of
 * every job the caller may see) per tier, and why; dry_run 0 applies it
 * now.  preview 1 (dry runs only): decide under keep_latest (>= 1) and
 * at most one of every_steps / every_seconds instead of the configured
 * policies — what a configuration change would remove (the store's tier
 * is left out of a preview with every_seconds: it has no commit times). */
struct ckpt_req_retention {
        struct ckpt_name job; /* len 0: every job */
        uint8_t dry_run;
        uint8_t preview;
        uint32_t keep_latest;
        uint64_t every_steps, every_seconds;
};

struct ckpt_request {
        struct ckpt_hdr hdr;
        union {
                struct ckpt_req_hello hello;
                struct ckpt_req_save_begin save_begin;
                struct ckpt_req_shard_begin shard_begin;
                struct ckpt_req_chunk_get chunk_get;
                struct ckpt_req_chunk_put chunk_put;
                struct ckpt_req_save_id save; /* FINISH, ABORT */
                struct ckpt_req_wait wait;
                struct ckpt_req_job_step job_step; /* COMMIT, LATEST, COMMIT_ASYNC */
                struct ckpt_req_shard_list shard_list;
                struct ckpt_req_read read; /* READ, MAP */
                struct ckpt_req_read_done read_done;
                struct ckpt_req_list list; /* JOB_LIST, CKPT_LIST */
                struct ckpt_req_fetch fetch;
                struct ckpt_req_pin pin;
                struct ckpt_req_latest_rank latest_rank;
                struct ckpt_req_verify verify;
                struct ckpt_req_metrics metrics;
                struct ckpt_req_cluster cluster;
                struct ckpt_req_delete del;
                struct ckpt_req_retention retention;
                /* STATUS has an empty body. */
        };
};

/* ---- replies ----------------------------------------------------------- */

struct ckpt_rep_error {
        int32_t error; /* negative errno */
        char message[CKPT_ERRMSG_MAX + 1];
};

struct ckpt_rep_hello {
        uint16_t proto;
        uint32_t slot_count;
        uint64_t slot_size;
        uint32_t block_size; /* CRC block size of manifests */
        char daemon_version[CKPT_VERSION_STR_MAX + 1];
};

struct ckpt_rep_id {
        uint32_t id; /* SAVE_BEGIN: save id, SHARD_BEGIN: shard id */
        /* SAVE_BEGIN from version 3 on: 1 when an earlier copy of this rank
         * of the (uncommitted) step exists and this save replaces it; 0
         * otherwise, and always 0 in SHARD_BEGIN and version-2 replies */
        uint8_t replaced;
};

/* CHUNK_GET and READ: the bytes live at `slot_offset` in slot `slot_id`.
 * `has_fd` says the slot's memfd is attached (first use of this slot
 * generation on this connection); `slot_gen` changes when the daemon replaced
 * the slot's memory, and the client must drop any older mapping. */
struct ckpt_rep_slot {
        uint32_t slot_id, slot_gen;
        uint8_t has_fd;
        uint64_t slot_offset;
        uint64_t offset, length; /* shard range the window covers */
};

struct ckpt_rep_latest {
        uint64_t step;
        uint32_t world_size;
};

/* LATEST_RANK: `step` is the step to restore the rank from (it is on this
 * node, in a replica area here, or was just copied here from a neighbour or
 * the object store); `newest` the newest committed step below the bound
 * that the daemon knows of; `skipped` how many newer committed steps it
 * passed over because the rank could not be restored from them.
 * newest == step exactly when skipped == 0. */
struct ckpt_rep_latest_rank {
        uint64_t step;
        uint32_t world_size;
        uint64_t newest;
        uint32_t skipped;
};

struct ckpt_rep_wait {
        uint8_t tier; /* highest tier reached; 0 = not even staged yet */
};

struct ckpt_shard_entry {
        struct ckpt_name name;
        uint64_t size;
        uint32_t crc32c;
};

struct ckpt_rep_shard_list {
        uint32_t total, count; /* count <= CKPT_LIST_PAGE */
        struct ckpt_shard_entry entries[CKPT_LIST_PAGE];
};

struct ckpt_rep_map {
        uint64_t size;
        uint32_t crc32c;
        uint8_t has_fd; /* always 1 on success */
        /* version 7 on: where the shard starts in the descriptor (a multiple
         * of the page size), and whether the descriptor is the memory
         * tier's slot (read-only; checked by the daemon when it was saved)
         * rather than the shard's file (offset 0; the client checks the
         * CRC32C).  Older versions: 0, 0. */
        uint64_t offset;
        uint8_t memory;
};

struct ckpt_rep_status {
        char daemon_version[CKPT_VERSION_STR_MAX + 1];
        uint64_t uptime_ms;
        uint64_t pool_bytes, pool_used_bytes;
        uint32_t slot_count, slots_used, slot_waiters;
        uint64_t bytes_in_flight;  /* staged, not yet on local disk */
        uint32_t shards_in_flight;
        uint32_t clients, saves_active;
        uint64_t bytes_written, bytes_read; /* since start */
        uint64_t errors;                    /* since start */
        uint32_t jobs;
        char state_dir[CKPT_ERRMSG_MAX + 1];
        char last_error[CKPT_ERRMSG_MAX + 1];
        /* the object-store tier; remote_enabled 0: none configured, the
         * other remote fields are zero */
        uint8_t remote_enabled;
        uint32_t node_index, node_count;
        char remote_target[CKPT_ERRMSG_MAX + 1]; /* "endpoint bucket/prefix" */
        uint32_t remote_steps_pending;  /* committed here, COMMIT not yet seen */
        uint32_t remote_steps_failed;   /* stopped on a permanent error */
        uint32_t remote_uploads_active; /* shard objects being uploaded */
        uint32_t remote_requests_active;
        uint64_t remote_bytes_uploaded, remote_bytes_downloaded;
        uint64_t remote_requests, remote_retries, remote_failures;
        char remote_error[CKPT_ERRMSG_MAX + 1]; /* the last permanent error, "" if none */
        /* the neighbour tier; replication_enabled 0: off, the rest zero */
        uint8_t replication_enabled;
        uint32_t peers_up, peers_total;   /* replication targets connected / configured */
        uint32_t repl_steps_pending;      /* (step, target) pairs not yet acknowledged */
        char peers[CKPT_ERRMSG_MAX + 1];  /* one line per target, "; "-separated */
        /* the background scrub (version 5 on): scrub_state CKPT_SCRUB_OFF
         * and the rest zero when it is disabled, and in older versions */
        uint8_t scrub_state;                 /* enum ckpt_scrub_state */
        uint64_t scrub_pass;                 /* 1, 2, ...; 0: none yet */
        uint64_t scrub_bytes_verified, scrub_bytes_total; /* of this pass */
        uint64_t scrub_copies_verified, scrub_copies_bad; /* ranks, of this pass */
        uint64_t scrub_rate;                 /* configured bytes/s; 0: no limit */
        uint64_t scrub_rate_measured;        /* verified per second of running, since start */
        int64_t scrub_pass_started_at;       /* unix seconds; 0: none */
        int64_t scrub_pass_finished_at;      /* of the last finished pass; 0: none */
        int64_t scrub_next_pass_at;          /* 0: a pass is under way (or off) */
        uint64_t scrub_findings;             /* bad copies found since the daemon started */
        char scrub_last_findings[CKPT_ERRMSG_MAX + 1]; /* newest first, "; "-separated */
        /* copies of ranks on this node found corrupt (version 5 on; zero
         * in earlier versions): still bad (a repair running), repaired
         * from a good copy, and with no good copy found */
        uint32_t copies_bad, copies_repaired, copies_unrepairable;
        /* the audit of this node's objects in the store (version 5 on; zero
         * without a store and in earlier versions), since the daemon
         * started: passes finished, objects that passed every check,
         * objects found bad, and of those the ones queued for a new upload */
        uint64_t audit_passes, audit_objects_checked, audit_objects_bad, audit_objects_repaired;
        /* the memory tier (version 7 on; zero when it is off and in earlier
         * versions): pool bytes it holds, committed steps it serves */
        uint64_t memory_bytes;
        uint32_t memory_steps;
};

enum ckpt_scrub_state {
        CKPT_SCRUB_OFF = 0,     /* [scrub] enabled = no */
        CKPT_SCRUB_WAITING = 1, /* between passes */
        CKPT_SCRUB_RUNNING = 2,
        CKPT_SCRUB_PAUSED = 3,  /* in a pass, held while saves are open */
        CKPT_SCRUB_MAX_,
};

struct ckpt_job_entry {
        struct ckpt_name name;
        uint32_t uid;
        int64_t latest_committed; /* -1: none */
        uint32_t checkpoints, committed;
        uint64_t bytes_local;
        uint32_t errors;
};

struct ckpt_rep_job_list {
        uint32_t total, count; /* count <= CKPT_JOB_PAGE */
        struct ckpt_job_entry entries[CKPT_JOB_PAGE];
};

struct ckpt_ckpt_entry {
        uint64_t step;
        uint32_t world_size;
        uint32_t ranks_local; /* ranks of this step on this node's disk */
        uint8_t state;        /* enum ckpt_state */
        uint64_t bytes;
        uint32_t shards;
        int64_t committed_at; /* unix seconds, 0 if not committed */
        uint8_t remote_state; /* enum ckpt_remote_state */
        uint8_t pinned;       /* kept whatever retention says */
        uint8_t replicas;     /* replication targets that hold every rank of it */
        /* from version 7: why a rank's save of it failed ("rank 1: trainer
         * (pid 42) disconnected ..."), kept while the step is FAILED or, after
         * a restart, LOCAL without that rank; "" otherwise and before 7 */
        char reason[CKPT_FAIL_REASON_MAX + 1];
        uint8_t memory;       /* version 7 on: the memory tier holds it (this node's ranks) */
};

struct ckpt_rep_ckpt_list {
        uint32_t total, count; /* count <= CKPT_LIST_PAGE */
        struct ckpt_ckpt_entry entries[CKPT_LIST_PAGE];
};

/* FETCH: what landed in the local tier. */
struct ckpt_rep_fetch {
        uint64_t step;
        uint32_t world_size;
        uint32_t ranks;   /* ranks fetched */
        uint32_t shards;
        uint64_t bytes;
};

/* VERIFY reply: from version 6 one entry per shard of each copy (a copy
 * whose directory or MANIFEST is bad: one entry with shard ""), before
 * version 6 one entry per copy; the bad (and repaired) entries first, then
 * the good ones, each part by step (ascending), rank, the local tier before
 * replica areas, then the MANIFEST's shard order.  total > count: more
 * entries than one reply holds were verified (and repaired if asked); name
 * a step or a rank to see them.  A full page of the longest entries
 * (about 550 bytes each) stays below CKPT_MSG_MAX. */
#define CKPT_VERIFY_PAGE 64
#define CKPT_VERIFY_DETAIL_MAX 255
#define CKPT_COPY_LOCAL UINT32_MAX /* area: the local tier */
enum ckpt_copy_state {
        CKPT_COPY_GOOD = 0,     /* every check passed */
        CKPT_COPY_BAD = 1,      /* detail says what is wrong; still bad */
        CKPT_COPY_REPAIRED = 2, /* was bad (detail), replaced by a verified good copy */
        CKPT_COPY_STATE_MAX_,
};
struct ckpt_verify_entry {
        uint64_t step;
        uint32_t rank;
        uint32_t area;    /* CKPT_COPY_LOCAL, or the node whose replica area holds it */
        uint8_t state;    /* enum ckpt_copy_state */
        uint32_t shards;  /* in the copy's MANIFEST (0 if that does not parse) */
        uint64_t bytes;   /* the shard's size (before version 6, or shard "": the copy's) */
        char detail[CKPT_VERIFY_DETAIL_MAX + 1]; /* "" when good */
        char shard[CKPT_NAME_MAX + 1]; /* from version 6; "" before, or: the whole copy */
};
struct ckpt_rep_verify {
        uint32_t total, count;
        uint32_t copies;  /* copies checked (from version 6; before, total counts them) */
        struct ckpt_verify_entry entries[CKPT_VERIFY_PAGE];
};

/* METRICS reply: length bytes of the document of `total` bytes, from
 * `offset` (the request's) on; the text is Prometheus' text format 0.0.4,
 * not NUL-terminated on the wire.  offset + length == total: the last
 * page. */
#define CKPT_METRICS_CHUNK 32768
struct ckpt_rep_metrics {
        uint64_t total, offset;
        uint32_t length; /* <= CKPT_METRICS_CHUNK */
        char text[CKPT_METRICS_CHUNK];
};

/* DELETE reply: how many steps were marked deleted, and the bytes of
 * this node's copies of them that are being removed. */
struct ckpt_rep_delete {
        uint32_t steps;
        uint64_t bytes;
};

/* RETENTION reply: one entry per (job, tier, area, step), by job, tier
 * (local, replica areas by source node, store) and newest step first;
 * total > count: more than one reply holds (name a job to see them). */
#define CKPT_RETENTION_PAGE 96
#define CKPT_RETENTION_REASON_MAX 127
enum ckpt_retention_tier {
        CKPT_RETENTION_LOCAL = 0,
        CKPT_RETENTION_REPLICA = 1, /* area: the node whose ranks the area holds */
        CKPT_RETENTION_STORE = 2,
        CKPT_RETENTION_TIER_MAX_,
};
enum ckpt_retention_action {
        CKPT_RETENTION_KEPT = 0,
        CKPT_RETENTION_GOES = 1,    /* dry run: a pass now would remove it */
        CKPT_RETENTION_REMOVED = 2, /* removed by this request */
        CKPT_RETENTION_BUSY = 3,    /* goes, but in use now: a later pass removes it */
        CKPT_RETENTION_QUEUED = 4,  /* goes; the store's pass removes it in the background */
        CKPT_RETENTION_ACTION_MAX_,
};
struct ckpt_retention_entry {
        struct ckpt_name job;
        uint8_t tier;          /* enum ckpt_retention_tier */
        uint32_t area;         /* CKPT_RETENTION_REPLICA: the source node; else 0 */
        uint64_t step;
        int64_t committed_at;  /* unix seconds; 0: not committed (or not known) */
        uint8_t action;        /* enum ckpt_retention_action */
        char reason[CKPT_RETENTION_REASON_MAX + 1]; /* "kept: newest 2", ... */
};
struct ckpt_rep_retention {
        uint32_t total, count;
        uint32_t removed;      /* steps removed by this request (dry run: 0) */
        struct ckpt_retention_entry entries[CKPT_RETENTION_PAGE];
};

/* CLUSTER reply: node `index` of `total` as the asked daemon saw it.
 * The lists are bounded; jobs_omitted counts the jobs past the first
 * CKPT_CLUSTER_JOBS, links name (by node index) the node's replication
 * links that are down. */
#define CKPT_CLUSTER_JOBS 32
#define CKPT_CLUSTER_LINKS 16
#define CKPT_CLUSTER_ERROR_MAX 200
enum ckpt_node_reach {
        CKPT_NODE_REACHABLE = 0,
        CKPT_NODE_UNREACHABLE = 1, /* no answer within the deadline */
        CKPT_NODE_DOWN = 2,        /* connection refused or link down */
        /* not asked: the asked node has no link to it (it neither replicates
         * to nor from it); node 0, linked to every node, knows */
        CKPT_NODE_UNKNOWN = 3,
        CKPT_NODE_REACH_MAX_,
};
struct ckpt_cluster_job {
        struct ckpt_name job;
        uint64_t newest_step;  /* <= CKPT_STEP_MAX: the newest committed step */
        uint32_t steps_owed;   /* to its replication targets */
};
struct ckpt_rep_cluster {
        uint32_t total, index;
        char node[CKPT_NAME_MAX + 1];
        uint8_t reach;         /* enum ckpt_node_reach; not reachable: no lists */
        uint32_t njobs, jobs_omitted;
        struct ckpt_cluster_job jobs[CKPT_CLUSTER_JOBS];
        uint32_t nlinks;
        uint32_t links[CKPT_CLUSTER_LINKS]; /* < total */
        uint32_t errors;
        char last_error[CKPT_CLUSTER_ERROR_MAX + 1];
};

struct ckpt_reply {
        struct ckpt_hdr hdr;
        union {
                struct ckpt_rep_error error;
                struct ckpt_rep_hello hello;
                struct ckpt_rep_id id;
                struct ckpt_rep_slot slot;
                struct ckpt_rep_latest latest;
                struct ckpt_rep_latest_rank latest_rank;
                struct ckpt_rep_wait wait;
                struct ckpt_rep_shard_list shard_list;
                struct ckpt_rep_map map;
                struct ckpt_rep_status status;
                struct ckpt_rep_job_list job_list;
                struct ckpt_rep_ckpt_list ckpt_list;
                struct ckpt_rep_fetch fetch;
                struct ckpt_rep_verify verify;
                struct ckpt_rep_metrics metrics;
                struct ckpt_rep_delete del;
                struct ckpt_rep_retention retention;
                struct ckpt_rep_cluster cluster;
                /* CHUNK_PUT, SAVE_FINISH, SAVE_ABORT, COMMIT, READ_DONE,
                 * PIN, COMMIT_ASYNC: empty body */
        };
};

/*
 * Encode a request / reply into buf (capacity cap).  msg->hdr.type,
 * msg->hdr.seq and msg->hdr.version (0: CKPT_PROTO_VERSION; otherwise
 * CKPT_PROTO_VERSION_MIN .. CKPT_PROTO_VERSION, which decides the layout)
 * are taken from msg; length is filled in.
 * Returns the encoded length, -EINVAL if a field is invalid (the encoder
 * validates like the decoder, so neither side can emit what the other would
 * reject), or -EMSGSIZE if cap is too small.
 * For replies, hdr.type is the request type | CKPT_MSG_REPLY, or
 * CKPT_MSG_ERROR.
 */
int ckpt_request_encode(const struct ckpt_request *msg, void *buf, size_t cap);
int ckpt_reply_encode(const struct ckpt_reply *msg, void *buf, size_t cap);

/*
 * Decode one message of len bytes.  Returns 0 and fills *msg, or
 * -EBADMSG (malformed: short, bad magic, length mismatch, unknown type,
 * bad enum, count too large, trailing bytes), -EPROTONOSUPPORT (header
 * version outside CKPT_PROTO_VERSION_MIN .. CKPT_PROTO_VERSION; msg->hdr is
 * still filled so the daemon can
 * answer with the right seq), -EINVAL (well-formed but a name or value is
 * invalid).  *msg is zeroed first, so after success every byte the message
 * does not set (padding, string tails, list entries past count) is zero and
 * two decoded messages compare equal with memcmp.  On error *msg is left
 * partially filled; do not use it beyond msg->hdr.
 */
int ckpt_request_decode(struct ckpt_request *msg, const void *buf, size_t len);
int ckpt_reply_decode(struct ckpt_reply *msg, const void *buf, size_t len);

/* Decode just the header: reads the first 16 bytes of buf (len >= 16), same
 * errors as above.  The length field is range-checked (16..CKPT_MSG_MAX) but
 * not compared with len, so a stream reader can learn how much to read next;
 * the full decoders do compare it. */
int ckpt_hdr_decode(struct ckpt_hdr *hdr, const void *buf, size_t len);

/*
 * Names of jobs and shards: 1..CKPT_NAME_MAX bytes of [A-Za-z0-9._+=:@-],
 * not starting with '.' or '-'.  So no path separators, no "." or "..", no
 * hidden files, nothing a shell or a filesystem treats specially.
 * Returns 0 or -EINVAL (empty, bad character) or -ENAMETOOLONG.
 */
int ckpt_name_validate(const char *name, size_t len);
/* Copy a C string into a ckpt_name after validating it. */
int ckpt_name_set(struct ckpt_name *n, const char *str);

const char *ckpt_msg_type_name(uint16_t type);
const char *ckpt_tier_name(uint8_t tier);
const char *ckpt_state_name(uint8_t state);
const char *ckpt_remote_state_name(uint8_t state); /* "none", "flushing", ... */
/* Parse "staged", "local", "committed", "remote"; returns the tier or -EINVAL. */
int ckpt_tier_parse(const char *str);
