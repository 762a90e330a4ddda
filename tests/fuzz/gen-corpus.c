/* SPDX-License-Identifier: MIT */
/*
 * Seed corpus generator for the fuzz targets.
 *
 * Usage: gen-corpus DIR   writes DIR/request/, DIR/reply/, DIR/manifest/,
 *                         DIR/objects/, DIR/peer/, DIR/peer-link/, and for
 *                         the text decoders DIR/xml/, DIR/sigv4-endpoint/,
 *                         DIR/credentials/, DIR/config/, DIR/psk/
 *
 * A fuzzer starting from valid messages of every type reaches the deep
 * branches of each body parser at once instead of rediscovering the magic,
 * the header and each layout by chance.  The files are committed under
 * tests/fuzz/corpus/; rerun this after a protocol or manifest format change.
 * A few invalid messages (one per kind of rejection) are included too.
 * Output is deterministic, so a rerun without a format change is a no-op.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt-proto.h"
#include "crc32c.h"
#include "peer-proto.h"
#include "local/manifest.h"
#include "remote/objects.h"
#include "peer/auth.h"
#include "util/cleanup.h"

static const char *outdir;
static uint8_t buf[CKPT_MSG_MAX];
static struct ckpt_reply rep;
static struct peer_msg pm;
static uint8_t peer_buf[PEER_HDR_SIZE + PEER_MSG_MAX];

static void die(const char *what, int r) {
        fprintf(stderr, "gen-corpus: %s: %s\n", what, strerror(r < 0 ? -r : r));
        exit(1);
}

static void write_file(const char *sub, const char *name, const void *data, size_t len) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s/%s", outdir, sub, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
                die(path, errno);
}

static void name(struct ckpt_name *n, const char *s) {
        int r = ckpt_name_set(n, s);
        if (r < 0)
                die(s, r);
}

static int encode_req(const struct ckpt_request *m) {
        int n = ckpt_request_encode(m, buf, sizeof(buf));
        if (n < 0)
                die(ckpt_msg_type_name(m->hdr.type), n);
        return n;
}

static int encode_rep(const struct ckpt_reply *m) {
        int n = ckpt_reply_encode(m, buf, sizeof(buf));
        if (n < 0)
                die(ckpt_msg_type_name(m->hdr.type), n);
        return n;
}

/* File name from a type name: "SAVE_BEGIN" -> "save-begin.bin". */
static void file_for_name(char *out, size_t cap, const char *t) {
        size_t i = 0;
        for (; t[i] && i + 5 < cap; i++)
                out[i] = t[i] == '_' ? '-' : (char)(t[i] | 0x20);
        snprintf(out + i, cap - i, ".bin");
}

static void file_for(char *out, size_t cap, uint16_t type) {
        file_for_name(out, cap, ckpt_msg_type_name(type));
}

static void set_le32(uint8_t *p, uint32_t v) {
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

/* The branches the one-per-type loop below cannot reach: the remote tier,
 * FETCH's other selections and its sentinel step, and invalid selections
 * (malformed `which`, an index where ALL wants 0, a rank out of range). */
static void more_requests(void) {
        struct ckpt_request m;
        int n;

        memset(&m, 0, sizeof(m));
        m.hdr.type = CKPT_MSG_WAIT;
        m.hdr.seq = 100;
        name(&m.wait.job, "llama-70b");
        m.wait.step = 1000;
        m.wait.tier = CKPT_TIER_REMOTE;
        m.wait.timeout_ms = 0;
        n = encode_req(&m);
        write_file("request", "wait-remote.bin", buf, (size_t)n);

        memset(&m, 0, sizeof(m));
        m.hdr.type = CKPT_MSG_FETCH;
        m.hdr.seq = 101;
        name(&m.fetch.job, "gpt-neox_20b");
        m.fetch.step = CKPT_STEP_LATEST;
        m.fetch.which = CKPT_FETCH_ALL;
        n = encode_req(&m);
        write_file("request", "fetch-latest-all.bin", buf, (size_t)n);

        /* Layout: header 16, job 2 + 12, step 8, which (offset 38), index
         * (offset 39), timeout_ms. */
        uint8_t bad[CKPT_MSG_MAX];
        memcpy(bad, buf, (size_t)n);
        set_le32(bad + 39, 1); /* ALL with an index */
        write_file("request", "invalid-fetch-all-index.bin", bad, (size_t)n);
        memcpy(bad, buf, (size_t)n);
        bad[38] = CKPT_FETCH_MAX_;
        write_file("request", "invalid-fetch-which.bin", bad, (size_t)n);

        m.hdr.seq = 102;
        m.fetch.step = 0;
        m.fetch.which = CKPT_FETCH_RANK;
        m.fetch.index = CKPT_WORLD_MAX - 1;
        m.fetch.timeout_ms = UINT32_MAX;
        n = encode_req(&m);
        write_file("request", "fetch-rank.bin", buf, (size_t)n);
        memcpy(bad, buf, (size_t)n);
        set_le32(bad + 39, CKPT_WORLD_MAX); /* rank out of range */
        write_file("request", "invalid-fetch-rank.bin", bad, (size_t)n);

        /* LATEST_RANK with a step bound; layout: header 16, job 2 + 9, rank
         * (offset 27), below (offset 31). */
        memset(&m, 0, sizeof(m));
        m.hdr.type = CKPT_MSG_LATEST_RANK;
        m.hdr.seq = 103;
        name(&m.latest_rank.job, "llama-70b");
        m.latest_rank.rank = 1;
        m.latest_rank.below = 1000;
        n = encode_req(&m);
        write_file("request", "latest-rank-below.bin", buf, (size_t)n);
        memcpy(bad, buf, (size_t)n);
        set_le32(bad + 27, CKPT_WORLD_MAX); /* rank out of range */
        write_file("request", "invalid-latest-rank-rank.bin", bad, (size_t)n);
        memcpy(bad, buf, (size_t)n);
        bad[38] = 0x80; /* below 2^63 + 1000: past CKPT_STEP_MAX, not the sentinel */
        write_file("request", "invalid-latest-rank-below.bin", bad, (size_t)n);
}

static void requests(void) {
        struct ckpt_request m;
        char fn[64];

        for (uint16_t t = CKPT_MSG_HELLO; t < CKPT_MSG_REQUEST_MAX_; t++) {
                memset(&m, 0, sizeof(m));
                m.hdr.type = t;
                m.hdr.seq = t;
                switch (t) {
                case CKPT_MSG_HELLO:
                        /* as libckpt sends it: in the oldest version's
                         * header, offering every version it speaks */
                        m.hdr.version = CKPT_PROTO_VERSION_MIN;
                        m.hello.proto_min = CKPT_PROTO_VERSION_MIN;
                        m.hello.proto_max = CKPT_PROTO_VERSION;
                        break;
                case CKPT_MSG_SAVE_BEGIN:
                        name(&m.save_begin.job, "llama-70b");
                        m.save_begin.step = 1000;
                        m.save_begin.rank = 3;
                        m.save_begin.world_size = 8;
                        break;
                case CKPT_MSG_SHARD_BEGIN:
                        m.shard_begin.save_id = 1;
                        name(&m.shard_begin.shard, "model.pt");
                        m.shard_begin.size = 1ull << 30;
                        break;
                case CKPT_MSG_CHUNK_GET:
                        m.chunk_get.shard_id = 2;
                        m.chunk_get.offset = 64ull << 20;
                        break;
                case CKPT_MSG_CHUNK_PUT:
                        m.chunk_put.shard_id = 2;
                        m.chunk_put.slot_id = 5;
                        m.chunk_put.offset = 64ull << 20;
                        m.chunk_put.length = 64ull << 20;
                        m.chunk_put.crc32c = 0xe3069283;
                        break;
                case CKPT_MSG_SAVE_FINISH:
                case CKPT_MSG_SAVE_ABORT:
                        m.save.save_id = 1;
                        break;
                case CKPT_MSG_WAIT:
                        name(&m.wait.job, "llama-70b");
                        m.wait.step = 1000;
                        m.wait.tier = CKPT_TIER_LOCAL;
                        m.wait.timeout_ms = 30000;
                        break;
                case CKPT_MSG_COMMIT:
                case CKPT_MSG_LATEST:
                        name(&m.job_step.job, "llama-70b");
                        m.job_step.step = t == CKPT_MSG_COMMIT ? 1000 : 0;
                        m.job_step.timeout_ms = 60000;
                        break;
                case CKPT_MSG_SHARD_LIST:
                        name(&m.shard_list.job, "llama-70b");
                        m.shard_list.step = 1000;
                        m.shard_list.rank = 3;
                        m.shard_list.start = 128;
                        break;
                case CKPT_MSG_READ:
                case CKPT_MSG_MAP:
                        name(&m.read.job, "llama-70b");
                        m.read.step = 1000;
                        m.read.rank = 3;
                        name(&m.read.shard, "optim.state@0");
                        m.read.offset = t == CKPT_MSG_READ ? 4096 : 0;
                        m.read.length = t == CKPT_MSG_READ ? 1 << 20 : 0;
                        break;
                case CKPT_MSG_READ_DONE:
                        m.read_done.slot_id = 5;
                        break;
                case CKPT_MSG_JOB_LIST:
                        m.list.start = 0;
                        break;
                case CKPT_MSG_CKPT_LIST:
                        name(&m.list.job, "llama-70b");
                        m.list.start = 10;
                        break;
                case CKPT_MSG_FETCH:
                        name(&m.fetch.job, "llama-70b");
                        m.fetch.step = 1000;
                        m.fetch.which = CKPT_FETCH_NODE;
                        m.fetch.index = 1;
                        m.fetch.timeout_ms = 600000;
                        break;
                case CKPT_MSG_PIN:
                        name(&m.pin.job, "llama-70b");
                        m.pin.step = 1000;
                        m.pin.pinned = 1;
                        break;
                case CKPT_MSG_LATEST_RANK:
                        name(&m.latest_rank.job, "llama-70b");
                        m.latest_rank.rank = 3;
                        m.latest_rank.below = CKPT_STEP_LATEST;
                        break;
                case CKPT_MSG_COMMIT_ASYNC:
                        name(&m.job_step.job, "llama-70b");
                        m.job_step.step = 1000;
                        break;
                case CKPT_MSG_VERIFY:
                        name(&m.verify.job, "llama-70b");
                        m.verify.step = CKPT_STEP_LATEST;
                        m.verify.rank = 3;
                        m.verify.repair = 1;
                        break;
                case CKPT_MSG_DELETE:
                        name(&m.del.job, "llama-70b");
                        m.del.step = 1000;
                        m.del.force = 1;
                        break;
                case CKPT_MSG_RETENTION:
                        name(&m.retention.job, "llama-70b");
                        m.retention.dry_run = 1;
                        break;
                default:
                        break;
                }
                int n = encode_req(&m);
                file_for(fn, sizeof(fn), t);
                write_file("request", fn, buf, (size_t)n);
                if (t == CKPT_MSG_DELETE) {
                        uint8_t bad[CKPT_MSG_MAX];
                        memcpy(bad, buf, (size_t)n);
                        bad[4] = CKPT_PROTO_VERSION_DELETE - 1; /* before it existed */
                        write_file("request", "invalid-delete-version.bin", bad, (size_t)n);
                        memcpy(bad, buf, (size_t)n);
                        bad[n - 2] = 1; /* whole_job with step 1000 */
                        write_file("request", "invalid-delete-whole-job-step.bin", bad, (size_t)n);
                }
                if (t == CKPT_MSG_COMMIT_ASYNC) {
                        uint8_t bad[CKPT_MSG_MAX];
                        memcpy(bad, buf, (size_t)n);
                        bad[4] = CKPT_PROTO_VERSION_COMMIT_ASYNC - 1; /* before it existed */
                        write_file("request", "invalid-commit-async-version.bin", bad, (size_t)n);
                        memcpy(bad, buf, (size_t)n);
                        set_le32(bad + n - 4, 1000); /* timeout_ms: reserved, 0 */
                        write_file("request", "invalid-commit-async-timeout.bin", bad, (size_t)n);
                }

                /* One invalid variant per kind, from a message with a body. */
                if (t != CKPT_MSG_SAVE_BEGIN)
                        continue;
                uint8_t bad[CKPT_MSG_MAX];
                memcpy(bad, buf, (size_t)n);
                bad[0] ^= 1;
                write_file("request", "invalid-magic.bin", bad, (size_t)n);
                memcpy(bad, buf, (size_t)n);
                bad[4] = CKPT_PROTO_VERSION + 1; /* never the one spoken */
                write_file("request", "invalid-version.bin", bad, (size_t)n);
                memcpy(bad, buf, (size_t)n);
                set_le32(bad + 8, (uint32_t)n - 1);
                write_file("request", "invalid-truncated.bin", bad, (size_t)n - 1);
                memcpy(bad, buf, (size_t)n);
                bad[n] = 0;
                set_le32(bad + 8, (uint32_t)n + 1);
                write_file("request", "invalid-trailing.bin", bad, (size_t)n + 1);
                memcpy(bad, buf, (size_t)n);
                memcpy(bad + 18, "../", 3); /* the job name's first bytes */
                write_file("request", "invalid-name.bin", bad, (size_t)n);
                memcpy(bad, buf, (size_t)n);
                set_le32(bad + (size_t)n - 8, 8); /* rank = world_size */
                write_file("request", "invalid-rank.bin", bad, (size_t)n);
                memcpy(bad, buf, (size_t)n);
                bad[6] = 0x7f; /* unknown type */
                write_file("request", "invalid-type.bin", bad, (size_t)n);
        }
        more_requests();
}

/* A daemon without an object store (the remote fields zero, one node), and
 * the tier the remote-tier WAIT reaches. */
static void more_replies(void) {
        int n;

        memset(&rep, 0, sizeof(rep));
        rep.hdr.type = CKPT_MSG_STATUS | CKPT_MSG_REPLY;
        rep.hdr.seq = 100;
        snprintf(rep.status.daemon_version, sizeof(rep.status.daemon_version), "0.2.0");
        rep.status.node_count = 1;
        n = encode_rep(&rep);
        write_file("reply", "status-reply-no-remote.bin", buf, (size_t)n);

        memset(&rep, 0, sizeof(rep));
        rep.hdr.type = CKPT_MSG_WAIT | CKPT_MSG_REPLY;
        rep.hdr.seq = 101;
        rep.wait.tier = CKPT_TIER_REMOTE;
        n = encode_rep(&rep);
        write_file("reply", "wait-reply-remote.bin", buf, (size_t)n);

        /* version 2, the oldest spoken: its SAVE_BEGIN reply has no
         * `replaced`; and a version-3 one whose flag is neither 0 nor 1 */
        memset(&rep, 0, sizeof(rep));
        rep.hdr.type = CKPT_MSG_SAVE_BEGIN | CKPT_MSG_REPLY;
        rep.hdr.version = CKPT_PROTO_VERSION_MIN;
        rep.hdr.seq = 102;
        rep.id.id = 9;
        n = encode_rep(&rep);
        write_file("reply", "save-begin-reply-v2.bin", buf, (size_t)n);
        rep.hdr.version = CKPT_PROTO_VERSION_REPLACED;
        rep.id.replaced = 1;
        n = encode_rep(&rep);
        buf[n - 1] = 2;
        write_file("reply", "invalid-replaced.bin", buf, (size_t)n);

        /* VERIFY, version 6: a copy whose MANIFEST is bad (shard ""), a
         * bad shard and a good one; version 5: one entry per copy, no
         * shard; and a version-6 one whose shard is no valid name */
        static const struct ckpt_verify_entry verify[] = {
                { .step = 30, .rank = 0, .area = CKPT_COPY_LOCAL, .state = CKPT_COPY_BAD,
                  .detail = "MANIFEST does not parse" },
                { .step = 31, .rank = 1, .area = 1, .state = CKPT_COPY_REPAIRED, .shards = 2,
                  .bytes = 4096, .detail = "block 0 failed its CRC32C", .shard = "opt.state" },
                { .step = 31, .rank = 1, .area = 1, .state = CKPT_COPY_REPAIRED, .shards = 2,
                  .shard = "model.weights" },
        };
        memset(&rep, 0, sizeof(rep));
        rep.hdr.type = CKPT_MSG_VERIFY | CKPT_MSG_REPLY;
        rep.hdr.seq = 103;
        rep.verify.total = rep.verify.count = 3;
        rep.verify.copies = 2;
        memcpy(rep.verify.entries, verify, sizeof(verify));
        n = encode_rep(&rep);
        write_file("reply", "verify-reply-shards.bin", buf, (size_t)n);
        rep.verify.entries[1].shard[0] = '\0';
        rep.verify.entries[2].shard[0] = '\0';
        rep.hdr.version = CKPT_PROTO_VERSION_COPY_FAULTS;
        n = encode_rep(&rep);
        write_file("reply", "verify-reply-v5.bin", buf, (size_t)n);
        rep.hdr.version = CKPT_PROTO_VERSION_VERIFY_SHARDS;
        snprintf(rep.verify.entries[2].shard, sizeof(rep.verify.entries[2].shard), "weights");
        n = encode_rep(&rep);
        buf[n - 5] = '/'; /* a "/" in the shard name */
        write_file("reply", "invalid-verify-shard.bin", buf, (size_t)n);
}

static void replies(void) {
        static const uint16_t types[] = {
                CKPT_MSG_ERROR, CKPT_MSG_HELLO, CKPT_MSG_SAVE_BEGIN, CKPT_MSG_SHARD_BEGIN,
                CKPT_MSG_CHUNK_GET, CKPT_MSG_CHUNK_PUT, CKPT_MSG_SAVE_FINISH, CKPT_MSG_SAVE_ABORT,
                CKPT_MSG_WAIT, CKPT_MSG_COMMIT, CKPT_MSG_LATEST, CKPT_MSG_SHARD_LIST,
                CKPT_MSG_READ, CKPT_MSG_READ_DONE, CKPT_MSG_MAP, CKPT_MSG_STATUS,
                CKPT_MSG_JOB_LIST, CKPT_MSG_CKPT_LIST, CKPT_MSG_FETCH, CKPT_MSG_PIN,
                CKPT_MSG_LATEST_RANK, CKPT_MSG_COMMIT_ASYNC, CKPT_MSG_DELETE, CKPT_MSG_RETENTION,
                CKPT_MSG_CLUSTER,
        };
        char fn[64];

        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                uint16_t t = types[i] == CKPT_MSG_ERROR ? CKPT_MSG_ERROR : types[i] | CKPT_MSG_REPLY;
                memset(&rep, 0, sizeof(rep));
                rep.hdr.type = t;
                rep.hdr.seq = (uint32_t)i;
                switch (types[i]) {
                case CKPT_MSG_ERROR:
                        rep.error.error = -ENOENT;
                        snprintf(rep.error.message, sizeof(rep.error.message),
                                 "no committed checkpoint of job llama-70b");
                        break;
                case CKPT_MSG_HELLO:
                        rep.hello.proto = CKPT_PROTO_VERSION;
                        rep.hello.slot_count = 16;
                        rep.hello.slot_size = 256ull << 20;
                        rep.hello.block_size = MANIFEST_BLOCK_SIZE;
                        snprintf(rep.hello.daemon_version, sizeof(rep.hello.daemon_version), "0.1.0");
                        break;
                case CKPT_MSG_SAVE_BEGIN:
                        rep.id.id = 7;
                        rep.id.replaced = 1;
                        break;
                case CKPT_MSG_SHARD_BEGIN:
                        rep.id.id = 7;
                        break;
                case CKPT_MSG_CHUNK_GET:
                case CKPT_MSG_READ:
                        rep.slot.slot_id = 5;
                        rep.slot.slot_gen = 1;
                        rep.slot.has_fd = 1;
                        rep.slot.slot_offset = 0;
                        rep.slot.offset = 64ull << 20;
                        rep.slot.length = 64ull << 20;
                        break;
                case CKPT_MSG_WAIT:
                        rep.wait.tier = CKPT_TIER_LOCAL;
                        break;
                case CKPT_MSG_LATEST:
                        rep.latest.step = 1000;
                        rep.latest.world_size = 8;
                        break;
                case CKPT_MSG_DELETE:
                        rep.del.steps = 1;
                        rep.del.bytes = 8ull << 30;
                        break;
                case CKPT_MSG_CLUSTER:
                        rep.cluster.total = 3;
                        rep.cluster.index = 1;
                        snprintf(rep.cluster.node, sizeof(rep.cluster.node), "node-b");
                        rep.cluster.njobs = 1;
                        name(&rep.cluster.jobs[0].job, "llama-70b");
                        rep.cluster.jobs[0].newest_step = 2000;
                        rep.cluster.jobs[0].steps_owed = 1;
                        rep.cluster.nlinks = 1;
                        rep.cluster.links[0] = 2;
                        rep.cluster.errors = 1;
                        snprintf(rep.cluster.last_error, sizeof(rep.cluster.last_error),
                                 "node 2: connection refused");
                        break;
                case CKPT_MSG_RETENTION:
                        rep.retention.total = rep.retention.count = 2;
                        rep.retention.removed = 1;
                        name(&rep.retention.entries[0].job, "llama-70b");
                        rep.retention.entries[0].step = 2000;
                        rep.retention.entries[0].committed_at = 1764633600;
                        snprintf(rep.retention.entries[0].reason, CKPT_RETENTION_REASON_MAX + 1,
                                 "kept: newest 2");
                        name(&rep.retention.entries[1].job, "llama-70b");
                        rep.retention.entries[1].tier = CKPT_RETENTION_REPLICA;
                        rep.retention.entries[1].area = 3;
                        rep.retention.entries[1].step = 1000;
                        rep.retention.entries[1].action = CKPT_RETENTION_REMOVED;
                        snprintf(rep.retention.entries[1].reason, CKPT_RETENTION_REASON_MAX + 1,
                                 "goes: older than the newest 2");
                        break;
                case CKPT_MSG_SHARD_LIST:
                        rep.shard_list.total = 200;
                        rep.shard_list.count = CKPT_LIST_PAGE;
                        for (uint32_t k = 0; k < CKPT_LIST_PAGE; k++) {
                                char s[16];
                                snprintf(s, sizeof(s), "s%u", k);
                                name(&rep.shard_list.entries[k].name, s);
                                rep.shard_list.entries[k].size = 1000ull * k;
                                rep.shard_list.entries[k].crc32c = 0x1000u * k;
                        }
                        break;
                case CKPT_MSG_MAP:
                        rep.map.size = 1ull << 30;
                        rep.map.crc32c = 0xdeadbeef;
                        rep.map.has_fd = 1;
                        rep.map.offset = 64ull << 20; /* the memory tier's slot */
                        rep.map.memory = 1;
                        break;
                case CKPT_MSG_STATUS:
                        snprintf(rep.status.daemon_version, sizeof(rep.status.daemon_version), "0.1.0");
                        rep.status.uptime_ms = 3600000;
                        rep.status.pool_bytes = 4ull << 30;
                        rep.status.pool_used_bytes = 1ull << 30;
                        rep.status.slot_count = 16;
                        rep.status.slots_used = 4;
                        rep.status.slot_waiters = 1;
                        rep.status.bytes_in_flight = 1ull << 30;
                        rep.status.shards_in_flight = 3;
                        rep.status.clients = 8;
                        rep.status.saves_active = 2;
                        rep.status.bytes_written = 1ull << 40;
                        rep.status.bytes_read = 1ull << 38;
                        rep.status.errors = 1;
                        rep.status.jobs = 2;
                        snprintf(rep.status.state_dir, sizeof(rep.status.state_dir), "/var/lib/ckptd");
                        snprintf(rep.status.last_error, sizeof(rep.status.last_error),
                                 "write jobs/x/5/rank-0/a: No space left on device");
                        rep.status.remote_enabled = 1;
                        rep.status.node_index = 2;
                        rep.status.node_count = 4;
                        snprintf(rep.status.remote_target, sizeof(rep.status.remote_target),
                                 "http://127.0.0.1:7480 ckpt/cluster-a");
                        rep.status.remote_steps_pending = 2;
                        rep.status.remote_steps_failed = 1;
                        rep.status.remote_uploads_active = 8;
                        rep.status.remote_requests_active = 9;
                        rep.status.remote_bytes_uploaded = 3ull << 40;
                        rep.status.remote_bytes_downloaded = 5ull << 30;
                        rep.status.remote_requests = 123456;
                        rep.status.remote_retries = 17;
                        rep.status.remote_failures = 3;
                        snprintf(rep.status.remote_error, sizeof(rep.status.remote_error),
                                 "job x step 5: PutObject jobs/x/steps/00000000000000000005/"
                                 "ranks/0/a (bucket ckpt): 403 SignatureDoesNotMatch");
                        rep.status.memory_bytes = 2ull << 30;
                        rep.status.memory_steps = 2;
                        break;
                case CKPT_MSG_JOB_LIST:
                        rep.job_list.total = 2;
                        rep.job_list.count = 2;
                        for (uint32_t k = 0; k < 2; k++) {
                                struct ckpt_job_entry *e = &rep.job_list.entries[k];
                                name(&e->name, k ? "bert" : "llama-70b");
                                e->uid = 1000 + k;
                                e->latest_committed = k ? -1 : 1000;
                                e->checkpoints = 3 - k;
                                e->committed = k ? 0 : 2;
                                e->bytes_local = (uint64_t)(k + 1) << 30;
                                e->errors = k;
                        }
                        break;
                case CKPT_MSG_CKPT_LIST:
                        rep.ckpt_list.total = 4;
                        rep.ckpt_list.count = 4;
                        for (uint32_t k = 0; k < 4; k++) {
                                struct ckpt_ckpt_entry *e = &rep.ckpt_list.entries[k];
                                e->step = 1000 - 100 * k;
                                e->world_size = 8;
                                e->ranks_local = 8 - k;
                                e->state = (uint8_t)(CKPT_STATE_SAVING + k);
                                e->bytes = 8ull << 30;
                                e->shards = 16;
                                e->committed_at = e->state == CKPT_STATE_COMMITTED ? 1700000000 : 0;
                                e->remote_state = (uint8_t)(CKPT_REMOTE_FLUSHING + k);
                                if (e->state == CKPT_STATE_FAILED)
                                        snprintf(e->reason, sizeof(e->reason),
                                                 "rank 3: trainer (pid 4242) disconnected "
                                                 "before finishing its save of rank 3");
                                e->memory = k == 3; /* the newest committed */
                        }
                        break;
                case CKPT_MSG_FETCH:
                        rep.fetch.step = 1000;
                        rep.fetch.world_size = 8;
                        rep.fetch.ranks = 2;
                        rep.fetch.shards = 6;
                        rep.fetch.bytes = 3ull << 30;
                        break;
                case CKPT_MSG_LATEST_RANK: /* fell back from 1000 to 900 */
                        rep.latest_rank.step = 900;
                        rep.latest_rank.world_size = 8;
                        rep.latest_rank.newest = 1000;
                        rep.latest_rank.skipped = 1;
                        break;
                default:
                        break;
                }
                int n = encode_rep(&rep);
                file_for(fn, sizeof(fn), t);
                write_file("reply", fn, buf, (size_t)n);

                uint8_t bad[CKPT_MSG_MAX];
                memcpy(bad, buf, (size_t)n);
                if (types[i] == CKPT_MSG_ERROR) {
                        set_le32(bad + 16, 5); /* positive errno */
                        write_file("reply", "invalid-errno.bin", bad, (size_t)n);
                } else if (types[i] == CKPT_MSG_CHUNK_GET) {
                        bad[24] = 2; /* has_fd */
                        write_file("reply", "invalid-has-fd.bin", bad, (size_t)n);
                } else if (types[i] == CKPT_MSG_LATEST_RANK) {
                        set_le32(bad + 36, 0); /* fell back, yet skipped nothing */
                        write_file("reply", "invalid-latest-rank-skipped.bin", bad, (size_t)n);
                } else if (types[i] == CKPT_MSG_CKPT_LIST) {
                        set_le32(bad + 20, CKPT_LIST_PAGE + 1); /* count */
                        write_file("reply", "invalid-count.bin", bad, (size_t)n);
                        memcpy(bad, buf, (size_t)n);
                        bad[16 + 8 + 16] = 9; /* first entry's state */
                        write_file("reply", "invalid-state.bin", bad, (size_t)n);
                        memcpy(bad, buf, (size_t)n);
                        bad[16 + 8 + 37] = CKPT_REMOTE_MAX_; /* its remote_state */
                        write_file("reply", "invalid-remote-state.bin", bad, (size_t)n);
                } else if (types[i] == CKPT_MSG_STATUS) {
                        /* From the end: remote_error, five u64, four u32,
                         * remote_target, node_count, node_index, remote_enabled. */
                        size_t node_index = (size_t)n - (2 + strlen(rep.status.remote_error)) - 40 -
                                            16 - (2 + strlen(rep.status.remote_target)) - 4 - 4;
                        set_le32(bad + node_index, 4); /* = node_count */
                        write_file("reply", "invalid-node-index.bin", bad, (size_t)n);
                        memcpy(bad, buf, (size_t)n);
                        bad[node_index - 1] = 2;
                        write_file("reply", "invalid-remote-enabled.bin", bad, (size_t)n);
                } else if (types[i] == CKPT_MSG_FETCH) {
                        set_le32(bad + 16 + 12, 9); /* ranks > world_size */
                        write_file("reply", "invalid-fetch-ranks.bin", bad, (size_t)n);
                }
        }
        more_replies();
}

/* Deterministic shard bytes and their CRCs, block by block. */
static void shard_crcs(uint64_t size, uint32_t block_size, uint32_t seed, uint32_t *crc,
                       uint32_t *blocks) {
        uint8_t block[4096 * 4];
        uint32_t whole = 0;
        uint64_t nb = size ? (size - 1) / block_size + 1 : 0;

        if (block_size > sizeof(block))
                die("block size", EINVAL);
        for (uint64_t b = 0; b < nb; b++) {
                size_t len = b + 1 < nb ? block_size : (size_t)(size - b * block_size);
                for (size_t k = 0; k < len; k++)
                        block[k] = (uint8_t)((b * block_size + k) * 2654435761u >> 13 ^ seed);
                blocks[b] = crc32c(0, block, len);
                whole = crc32c(whole, block, len);
        }
        *crc = whole;
}

static void manifests(void) {
        struct manifest *m;
        char *text;
        size_t len;
        int r;

        r = manifest_new(&m, "llama-70b", 1000, 3, 8, 1000);
        if (r < 0)
                die("manifest_new", r);
        r = manifest_format(m, &text, &len);
        if (r < 0)
                die("manifest_format", r);
        write_file("manifest", "manifest-empty.txt", text, len);
        free(text);
        manifest_free(m);

        /* Small block size so a few KiB give several blocks and two
         * "blocks" lines, without a big file. */
        static const struct {
                const char *name;
                uint64_t size;
        } shards[] = {
                { "model.pt", 5000 },
                { "empty", 0 },
                { "optim=state@0", 20 * 4096 + 17 },
                { "rng", 4096 },
        };
        r = manifest_new(&m, "gpt-neox_20b", 123456789, 0, 1, 0);
        if (r < 0)
                die("manifest_new", r);
        m->block_size = 4096;
        for (size_t i = 0; i < sizeof(shards) / sizeof(shards[0]); i++) {
                uint32_t blocks[32], crc;
                shard_crcs(shards[i].size, m->block_size, (uint32_t)i, &crc, blocks);
                r = manifest_add_shard(m, shards[i].name, shards[i].size, crc, blocks);
                if (r < 0)
                        die("manifest_add_shard", r);
        }
        r = manifest_format(m, &text, &len);
        if (r < 0)
                die("manifest_format", r);
        write_file("manifest", "manifest-shards.txt", text, len);
        /* And one with a wrong end-line CRC. */
        text[len - 2] = text[len - 2] == '0' ? '1' : '0';
        write_file("manifest", "invalid-manifest-crc.txt", text, len);
        free(text);
        manifest_free(m);

        struct commit_record rec = { .step = 1000, .world_size = 8, .committed_at = 1700000000 };
        uint32_t ranks[] = { 0, 3, 7 };
        snprintf(rec.job, sizeof(rec.job), "llama-70b");
        rec.nranks = 3;
        rec.ranks = ranks;
        r = commit_record_format(&rec, &text, &len);
        if (r < 0)
                die("commit_record_format", r);
        write_file("manifest", "commit-ranks.txt", text, len);
        free(text);
        rec.nranks = 0;
        rec.ranks = NULL;
        rec.committed_at = 0;
        r = commit_record_format(&rec, &text, &len);
        if (r < 0)
                die("commit_record_format", r);
        write_file("manifest", "commit-none.txt", text, len);
        free(text);
}

/* Object-store documents: node manifests (one covering a one-node world, so
 * the fuzzer reaches commit_object_build too), commit objects with compact
 * rank lists, a listed step prefix, and a few signed but invalid ones. */
static void objects(void) {
        struct node_manifest *nm[3];
        char *text[3], *t;
        size_t len[3], tl;
        int r;

        static const struct {
                uint32_t node, node_count, world_size;
                uint32_t ranks[4];
                uint32_t nranks;
                const char *file;
        } nodes[] = {
                { 0, 2, 4, { 0, 2, 3 }, 3, "node-manifest.txt" },
                { 1, 2, 4, { 1 }, 1, "node-manifest-1.txt" },
                { 0, 1, 2, { 0, 1 }, 2, "node-manifest-whole.txt" },
        };
        for (size_t i = 0; i < 3; i++) {
                r = node_manifest_new(&nm[i], "llama-70b", 1000, nodes[i].node,
                                      nodes[i].node_count, nodes[i].world_size);
                if (r < 0)
                        die("node_manifest_new", r);
                for (uint32_t k = 0; k < nodes[i].nranks; k++) {
                        struct manifest *m;
                        uint32_t rank = nodes[i].ranks[k], blocks[32], crc;
                        r = manifest_new(&m, "llama-70b", 1000, rank, nodes[i].world_size, 1000);
                        if (r < 0)
                                die("manifest_new", r);
                        m->block_size = 4096;
                        /* Rank 0: a multi-block shard (two "blocks" lines) and
                         * an empty one; the others one small shard or none. */
                        if (rank == 0) {
                                shard_crcs(20 * 4096 + 17, 4096, 1, &crc, blocks);
                                r = manifest_add_shard(m, "optim=state@0", 20 * 4096 + 17, crc,
                                                       blocks);
                                if (r >= 0)
                                        r = manifest_add_shard(m, "empty", 0, 0, NULL);
                        } else if (rank != 3) {
                                shard_crcs(5000, 4096, rank, &crc, blocks);
                                r = manifest_add_shard(m, "model.pt", 5000, crc, blocks);
                        }
                        if (r < 0)
                                die("manifest_add_shard", r);
                        r = node_manifest_add_rank(nm[i], m);
                        if (r < 0)
                                die("node_manifest_add_rank", r);
                }
                r = node_manifest_format(nm[i], &text[i], &len[i]);
                if (r < 0)
                        die("node_manifest_format", r);
                write_file("objects", nodes[i].file, text[i], len[i]);
        }
        text[1][len[1] - 2] = text[1][len[1] - 2] == '0' ? '1' : '0';
        write_file("objects", "invalid-node-manifest-crc.txt", text[1], len[1]);
        text[1][len[1] - 2] = text[1][len[1] - 2] == '0' ? '1' : '0';

        struct commit_object co;
        char err[256];
        r = commit_object_build(&co, (const struct node_manifest *const *)nm,
                                (const char *const *)text, len, 2, 1700000000, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "gen-corpus: commit_object_build: %s\n", err);
                exit(1);
        }
        r = commit_object_format(&co, &t, &tl);
        if (r < 0)
                die("commit_object_format", r);
        write_file("objects", "commit.txt", t, tl);
        free(t);
        commit_object_clear(&co);

        /* Longer runs and an empty node, written by hand. */
        static const char *const bodies[][2] = {
                { "commit-runs.txt", "ckptd-global-commit 1\njob j\nstep 5\nworld_size 12\n"
                                     "node_count 3\ncommitted_at 0\n"
                                     "node 0 100 0000abcd 7 0-3,5,9-10\n"
                                     "node 1 7 ffffffff 5 4,6-8,11\n"
                                     "node 2 0 00000000 0\n" },
                { "invalid-commit-overlap.txt", "ckptd-global-commit 1\njob j\nstep 5\n"
                                                "world_size 4\nnode_count 2\ncommitted_at 0\n"
                                                "node 0 1 00000000 3 0-2\n"
                                                "node 1 1 00000000 2 2-3\n" },
                { "invalid-commit-not-maximal.txt", "ckptd-global-commit 1\njob j\nstep 5\n"
                                                    "world_size 4\nnode_count 1\ncommitted_at 0\n"
                                                    "node 0 1 00000000 4 0-1,2-3\n" },
        };
        for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
                size_t bl = strlen(bodies[i][1]);
                char *signed_text = malloc(bl + 17);
                if (!signed_text)
                        die("malloc", ENOMEM);
                memcpy(signed_text, bodies[i][1], bl);
                snprintf(signed_text + bl, 17, "crc32c %08x\n",
                         (unsigned)crc32c(0, bodies[i][1], bl));
                write_file("objects", bodies[i][0], signed_text, bl + 16);
                free(signed_text);
        }
        /* What a listing of steps/ returns, after the steps dir. */
        write_file("objects", "step-dir.txt", "00000000000000001000/", 21);

        for (size_t i = 0; i < 3; i++) {
                free(text[i]);
                node_manifest_free(nm[i]);
        }
}

/* ---- peer protocol ---- */

static int encode_peer(const struct peer_msg *m) {
        int n = peer_msg_encode(m, peer_buf, sizeof(peer_buf));
        if (n < 0)
                die(peer_msg_type_name(m->hdr.type), n);
        return n;
}

/* Variants of the message in peer_buf[0..n): byte `off` set to v, or (le32)
 * a little-endian u32 at `off`. */
static void peer_bad(const char *file, int n, size_t off, uint32_t v, bool le32) {
        uint8_t bad[sizeof(peer_buf)];
        memcpy(bad, peer_buf, (size_t)n);
        if (le32)
                set_le32(bad + off, v);
        else
                bad[off] = (uint8_t)v;
        write_file("peer", file, bad, (size_t)n);
}

/* One valid message of every type, as a daemon would send them (RANK_BEGIN
 * with a real manifest), and one invalid variant per kind of rejection. */
static void peers(void) {
        char fn[64];
        char *manifest_text = NULL;
        size_t manifest_len = 0;
        struct manifest *man;
        int r, n;

        r = manifest_new(&man, "llama-70b", 1000, 3, 8, 1000);
        if (r >= 0) {
                uint32_t blocks[8], crc;
                man->block_size = 4096;
                shard_crcs(5000, 4096, 7, &crc, blocks);
                r = manifest_add_shard(man, "model.pt", 5000, crc, blocks);
        }
        if (r >= 0)
                r = manifest_format(man, &manifest_text, &manifest_len);
        if (r < 0)
                die("peer manifest", r);
        manifest_free(man);

        for (uint16_t t = PEER_MSG_HELLO; t < PEER_MSG_TYPE_MAX_; t++) {
                memset(&pm, 0, sizeof(pm));
                pm.hdr.type = t;
                pm.hdr.seq = t;
                pm.hdr.stream = 0;
                switch (t) {
                case PEER_MSG_HELLO:
                        pm.hello.node_index = 1;
                        pm.hello.node_count = 8;
                        for (int i = 0; i < PEER_NONCE_SIZE; i++)
                                pm.hello.nonce[i] = (uint8_t)(i * 13 + 1);
                        snprintf(pm.hello.cluster_id, sizeof(pm.hello.cluster_id), "rack-a");
                        break;
                case PEER_MSG_HELLO_REPLY:
                        pm.hello_reply.node_index = 3;
                        pm.hello_reply.node_count = 8;
                        for (int i = 0; i < PEER_NONCE_SIZE; i++) {
                                pm.hello_reply.nonce[i] = (uint8_t)(i * 29 + 5);
                                pm.hello_reply.mac[i] = (uint8_t)(i * 31 + 7);
                        }
                        break;
                case PEER_MSG_AUTH:
                        for (int i = 0; i < PEER_MAC_SIZE; i++)
                                pm.auth.mac[i] = (uint8_t)(0xf0 - i);
                        break;
                case PEER_MSG_ERROR:
                        pm.hdr.stream = pm.error.stream = 2;
                        pm.error.error = -ENOSPC;
                        snprintf(pm.error.message, sizeof(pm.error.message),
                                 "no space left for job llama-70b step 1000 rank 3");
                        break;
                case PEER_MSG_RANK_BEGIN:
                        pm.hdr.stream = 1;
                        name(&pm.rank_begin.job, "llama-70b");
                        pm.rank_begin.step = 1000;
                        pm.rank_begin.rank = 3;
                        pm.rank_begin.world_size = 8;
                        pm.rank_begin.src_node = 1;
                        pm.rank_begin.purpose = PEER_PURPOSE_REPLICATE;
                        pm.rank_begin.manifest = manifest_text;
                        pm.rank_begin.manifest_len = (uint32_t)manifest_len;
                        break;
                case PEER_MSG_DATA:
                        pm.hdr.stream = 1;
                        pm.data.shard = 0;
                        pm.data.offset = 4096;
                        pm.data.length = 904;
                        break;
                case PEER_MSG_RANK_END:
                        pm.hdr.stream = 1;
                        break;
                case PEER_MSG_RANK_ACK:
                        pm.hdr.stream = 1;
                        snprintf(pm.rank_ack.message, sizeof(pm.rank_ack.message), "ok");
                        break;
                case PEER_MSG_LIST_REQ:
                        pm.hdr.stream = 3;
                        pm.list_req.src_node = 1; /* every job */
                        break;
                case PEER_MSG_LIST_REP:
                        pm.hdr.stream = 3;
                        pm.list_rep.count = 3;
                        pm.list_rep.more = 1;
                        for (uint32_t k = 0; k < 3; k++) {
                                struct peer_list_entry *e = &pm.list_rep.entries[k];
                                name(&e->job, k == 2 ? "bert" : "llama-70b");
                                e->step = 1000 - 100 * k;
                                e->rank = 3;
                                e->world_size = 8;
                                e->committed = k != 0;
                        }
                        break;
                case PEER_MSG_GET_RANK:
                        pm.hdr.stream = 4;
                        name(&pm.get_rank.job, "llama-70b");
                        pm.get_rank.step = 900;
                        pm.get_rank.rank = 3;
                        break;
                case PEER_MSG_PING:
                case PEER_MSG_PONG:
                        pm.ping.value = 0x0123456789abcdefull;
                        break;
                case PEER_MSG_STEP_REPORT:
                        name(&pm.step_report.job, "llama-70b");
                        pm.step_report.uid = 1000;
                        pm.step_report.step = 900;
                        pm.step_report.world_size = 16;
                        pm.step_report.flags = PEER_REPORT_COMMIT | PEER_REPORT_COMMITTED;
                        pm.step_report.committed_at = 1764633600;
                        pm.step_report.nranks = 2;
                        pm.step_report.ranks[0] = 6;
                        pm.step_report.ranks[1] = 7;
                        break;
                case PEER_MSG_STEP_STATE:
                        name(&pm.step_state.job, "llama-70b");
                        pm.step_state.step = 900;
                        pm.step_state.world_size = 16;
                        pm.step_state.state = PEER_STEP_PENDING;
                        snprintf(pm.step_state.message, sizeof(pm.step_state.message),
                                 "ranks 4-5 of 16 are not saved (nodes with none saved: 2)");
                        break;
                case PEER_MSG_NODE_STATUS_REQ:
                        pm.node_status_req.nonce = 42;
                        pm.node_status_req.uid = 1000;
                        pm.node_status_req.about = PEER_NODE_SELF;
                        break;
                case PEER_MSG_NODE_STATUS:
                        pm.node_status.nonce = 42;
                        pm.node_status.about = PEER_NODE_SELF;
                        pm.node_status.njobs = 1;
                        name(&pm.node_status.jobs[0].job, "llama-70b");
                        pm.node_status.uids[0] = 1000;
                        pm.node_status.jobs[0].newest_step = 900;
                        pm.node_status.jobs[0].steps_owed = 1;
                        pm.node_status.nlinks = 1;
                        pm.node_status.links[0] = 2;
                        pm.node_status.errors = 1;
                        snprintf(pm.node_status.last_error, sizeof(pm.node_status.last_error),
                                 "node 2: connection refused");
                        break;
                default: /* AUTH_OK */
                        break;
                }
                n = encode_peer(&pm);
                file_for_name(fn, sizeof(fn), peer_msg_type_name(t));
                write_file("peer", fn, peer_buf, (size_t)n);

                /* Header: 0 magic, 4 version, 6 type, 8 length, 12 stream,
                 * 16 seq; body from 24. */
                switch (t) {
                case PEER_MSG_HELLO:
                        peer_bad("invalid-magic.bin", n, 3, 'T', false);
                        peer_bad("invalid-version.bin", n, 4, PEER_PROTO_VERSION + 1, false);
                        peer_bad("invalid-type.bin", n, 6, PEER_MSG_TYPE_MAX_, false);
                        peer_bad("invalid-stream.bin", n, 12, 1, true);
                        peer_bad("invalid-node-index.bin", n, 24, 8, true);
                        write_file("peer", "invalid-truncated.bin", peer_buf, (size_t)n - 1);
                        peer_buf[n] = 0;
                        peer_bad("invalid-trailing.bin", n + 1, 8, (uint32_t)n + 1 - PEER_HDR_SIZE, true);
                        break;
                case PEER_MSG_NODE_STATUS:
                        /* nonce at 24, njobs at 32: one past the bound */
                        peer_bad("invalid-node-status-jobs.bin", n, 32, CKPT_CLUSTER_JOBS + 1, true);
                        break;
                case PEER_MSG_RANK_BEGIN:
                        /* job "llama-70b" at 24 (u16 length) + 26 */
                        peer_bad("invalid-name.bin", n, 26, '/', false);
                        /* purpose after step, rank, world_size, src_node */
                        peer_bad("invalid-purpose.bin", n, 26 + 9 + 20, 3, false);
                        peer_bad("invalid-manifest-nul.bin", n, (size_t)n - 3, 0, false);
                        peer_bad("invalid-manifest-len.bin", n, 26 + 9 + 21, (uint32_t)manifest_len + 1, true);
                        peer_bad("invalid-body-length.bin", n, 8, PEER_RANK_BEGIN_MAX + 1, true);
                        break;
                case PEER_MSG_DATA:
                        peer_bad("invalid-data-length.bin", n, 24 + 12, 905, true);
                        peer_bad("invalid-data-reserved.bin", n, 24 + 16, 1, false);
                        peer_bad("invalid-data-over.bin", n, 8, PEER_DATA_HDR_SIZE + PEER_DATA_MAX + 1, true);
                        peer_bad("invalid-data-stream.bin", n, 12, 0, true);
                        break;
                case PEER_MSG_LIST_REP:
                        peer_bad("invalid-count.bin", n, 24, PEER_LIST_PAGE + 1, true);
                        peer_bad("invalid-more.bin", n, (size_t)n - 1, 2, false);
                        break;
                case PEER_MSG_ERROR:
                        peer_bad("invalid-errno.bin", n, 24, 5, true);
                        peer_bad("invalid-error-stream.bin", n, 28, 3, true);
                        break;
                default:
                        break;
                }
        }
        free(manifest_text);
}

/* ---- the peer link (fuzz-peer-link.c) ---- */

/* Input files of fuzz-peer-link: a mode byte, then frames without tags
 * (the harness adds them; see fuzz-peer-link.c). */
static uint8_t link_buf[PEER_HDR_SIZE + PEER_RANK_BEGIN_FIXED_MAX + 4096 + 2 * 8192];
static size_t link_len;

static void link_start(uint8_t mode) {
        link_buf[0] = mode;
        link_len = 1;
}

static void link_add(const struct peer_msg *m, const void *payload, size_t payload_len) {
        int n = peer_msg_encode(m, link_buf + link_len, sizeof(link_buf) - link_len);
        if (n < 0 || link_len + (size_t)n + payload_len > sizeof(link_buf))
                die(peer_msg_type_name(m->hdr.type), n < 0 ? n : -E2BIG);
        link_len += (size_t)n;
        memcpy(link_buf + link_len, payload, payload_len);
        link_len += payload_len;
}

/* A whole replicated rank from node 0: RANK_BEGIN with a real manifest
 * (one shard of 5000 bytes, one 1 MiB block), its DATA, RANK_END. */
static void link_rank(uint32_t stream) {
        static uint8_t shard[5000];
        struct manifest *man;
        char *text = NULL;
        size_t text_len = 0;
        uint32_t crc;
        int r;

        for (size_t i = 0; i < sizeof(shard); i++)
                shard[i] = (uint8_t)(i * 7 % 251);
        crc = crc32c(0, shard, sizeof(shard));
        r = manifest_new(&man, "fuzz-job", 1, 0, 1, 1000);
        if (r >= 0)
                r = manifest_add_shard(man, "weights", sizeof(shard), crc, &crc);
        if (r >= 0)
                r = manifest_format(man, &text, &text_len);
        if (r < 0)
                die("peer-link manifest", r);
        manifest_free(man);

        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_RANK_BEGIN;
        pm.hdr.stream = stream;
        name(&pm.rank_begin.job, "fuzz-job");
        pm.rank_begin.step = 1;
        pm.rank_begin.world_size = 1;
        pm.rank_begin.purpose = PEER_PURPOSE_REPLICATE;
        pm.rank_begin.manifest_len = (uint32_t)text_len;
        pm.rank_begin.manifest = text;
        link_add(&pm, NULL, 0);
        free(text);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_DATA;
        pm.hdr.stream = stream;
        pm.data.length = sizeof(shard);
        link_add(&pm, shard, sizeof(shard));
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_RANK_END;
        pm.hdr.stream = stream;
        link_add(&pm, NULL, 0);
}

static void peer_links(void) {
        memset(&pm, 0, sizeof(pm));
        /* before authentication: a HELLO of node 0, as it is */
        link_start(0);
        pm.hdr.type = PEER_MSG_HELLO;
        pm.hello.node_count = 2;
        for (int i = 0; i < PEER_NONCE_SIZE; i++)
                pm.hello.nonce[i] = (uint8_t)i;
        link_add(&pm, NULL, 0);
        write_file("peer-link", "preauth-hello.bin", link_buf, link_len);

        /* after the handshake, each with a valid tag, and with a bad one */
        for (uint8_t mode = 1; mode <= 2; mode++) {
                const char *suffix = mode == 1 ? "" : "-bad-tag";
                char fn[64];

                link_start(mode);
                memset(&pm, 0, sizeof(pm));
                pm.hdr.type = PEER_MSG_PING;
                pm.ping.value = 42;
                link_add(&pm, NULL, 0);
                snprintf(fn, sizeof(fn), "ping%s.bin", suffix);
                write_file("peer-link", fn, link_buf, link_len);

                link_start(mode);
                link_rank(1);
                snprintf(fn, sizeof(fn), "rank%s.bin", suffix);
                write_file("peer-link", fn, link_buf, link_len);
        }
        link_start(1);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_LIST_REQ;
        pm.hdr.stream = 3;
        link_add(&pm, NULL, 0);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_GET_RANK;
        pm.hdr.stream = 5;
        name(&pm.get_rank.job, "fuzz-job");
        pm.get_rank.step = 1;
        link_add(&pm, NULL, 0);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_ERROR;
        pm.error.error = -EIO;
        snprintf(pm.error.message, sizeof(pm.error.message), "going away");
        link_add(&pm, NULL, 0);
        write_file("peer-link", "list-get-error.bin", link_buf, link_len);

        /* the cluster view: a status request (answered on any link), an
         * answer nobody asked for (dropped), then a PING */
        link_start(1);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_NODE_STATUS_REQ;
        pm.node_status_req.nonce = 9;
        pm.node_status_req.uid = PEER_UID_ANY;
        pm.node_status_req.about = PEER_NODE_SELF;
        link_add(&pm, NULL, 0);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_NODE_STATUS;
        pm.node_status.nonce = 9;
        pm.node_status.about = PEER_NODE_SELF;
        pm.node_status.njobs = 1;
        name(&pm.node_status.jobs[0].job, "fuzz-job");
        pm.node_status.jobs[0].newest_step = 1;
        pm.node_status.nlinks = 1;
        pm.node_status.links[0] = 0;
        link_add(&pm, NULL, 0);
        memset(&pm, 0, sizeof(pm));
        pm.hdr.type = PEER_MSG_PING;
        pm.ping.value = 7;
        link_add(&pm, NULL, 0);
        write_file("peer-link", "node-status.bin", link_buf, link_len);
}

/* ---- text decoders: XML, endpoint URL, credentials, ckptd.conf, PSK ----
 *
 * The inputs of fuzz-xml, fuzz-sigv4-endpoint, fuzz-credentials,
 * fuzz-config and fuzz-psk are text an operator writes or a store sends;
 * their seeds are written out here as they would appear, one valid file of
 * every kind the decoder knows and one invalid file per kind of refusal. */

struct text_seed {
        const char *name;
        const char *text;
};

static void write_texts(const char *sub, const struct text_seed *seeds, size_t n) {
        for (size_t i = 0; i < n; i++)
                write_file(sub, seeds[i].name, seeds[i].text, strlen(seeds[i].text));
}

#define XML_PROLOG "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define S3_NS " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""

static void xml_documents(void) {
        static const struct text_seed seeds[] = {
                { "error.xml", XML_PROLOG "<Error><Code>NoSuchKey</Code><Message>The key &lt;k&gt; "
                  "&amp; its &quot;friends&quot; aren&apos;t here</Message><RequestId>tx00-1"
                  "</RequestId><HostId>h</HostId></Error>" },
                { "error-empty-message.xml", XML_PROLOG "<Error><Code>PreconditionFailed</Code>"
                  "<Message></Message><BucketName>b</BucketName></Error>" },
                { "initiate.xml", XML_PROLOG "<InitiateMultipartUploadResult" S3_NS ">\n"
                  "  <Bucket>b</Bucket>\n  <Key>jobs/a/steps/00000000000000000042/x</Key>\n"
                  "  <UploadId>2~abc-DEF_123</UploadId>\n</InitiateMultipartUploadResult>" },
                { "complete.xml", XML_PROLOG "<CompleteMultipartUploadResult" S3_NS ">"
                  "<Location>http://h/b/k</Location><Bucket>b</Bucket><Key>k</Key>"
                  "<ETag>&quot;3858f62230ac3c915f300c664312c11f-2&quot;</ETag>"
                  "</CompleteMultipartUploadResult>" },
                { "list-parts.xml", XML_PROLOG "<ListPartsResult xmlns='http://s3.amazonaws.com/"
                  "doc/2006-03-01/'>\n<Bucket>b</Bucket><Key>k</Key><UploadId>u</UploadId>\n"
                  "<PartNumberMarker>0</PartNumberMarker><NextPartNumberMarker>2"
                  "</NextPartNumberMarker><MaxParts>2</MaxParts><IsTruncated>true</IsTruncated>\n"
                  "<Part><PartNumber>1</PartNumber><LastModified>2024-01-01T00:00:00.000Z"
                  "</LastModified><ETag>\"a\"</ETag><Size>5242880</Size></Part>\n"
                  "<Part><PartNumber>2</PartNumber><ETag>\"b\"</ETag><Size>1</Size></Part>\n"
                  "</ListPartsResult>" },
                { "list-bucket.xml", "\xEF\xBB\xBF" XML_PROLOG "<ListBucketResult" S3_NS ">"
                  "<Name>b</Name><Prefix>jobs/</Prefix><KeyCount>3</KeyCount><MaxKeys>4</MaxKeys>"
                  "<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
                  "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
                  "</NextContinuationToken><!-- a comment -->"
                  "<Contents><Key>jobs/a b+c&amp;&#x263A;&#9731;</Key><LastModified>2024-01-01T00:00:"
                  "00.000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>0</Size>"
                  "<StorageClass>STANDARD</StorageClass></Contents>"
                  "<Contents><Key>jobs/k2</Key><Size>18446744073709551615</Size><ETag/></Contents>"
                  "<CommonPrefixes><Prefix>jobs/a/</Prefix></CommonPrefixes>"
                  "</ListBucketResult>" },
                { "list-bucket-empty.xml", XML_PROLOG "<ListBucketResult" S3_NS "><Name>b</Name>"
                  "<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>" },
                { "nested.xml", "<a><b><c><d><e><f><g><h>deep</h></g></f></e></d></c></b></a>" },
                { "invalid-doctype.xml", XML_PROLOG "<!DOCTYPE x [<!ENTITY e \"boom\">]><Error>"
                  "<Code>&e;</Code></Error>" },
                { "invalid-cdata.xml", "<Error><Code><![CDATA[x]]></Code></Error>" },
                { "invalid-mismatch.xml", "<Error><Code>X</Message></Error>" },
                { "invalid-two-roots.xml", "<Error><Code>X</Code></Error><Error/>" },
                { "invalid-mixed.xml", "<Error>text<Code>X</Code></Error>" },
                { "invalid-entity.xml", "<Error><Code>&nbsp;</Code></Error>" },
                { "invalid-char-ref.xml", "<Error><Code>&#0;&#xD800;</Code></Error>" },
                { "invalid-utf8.xml", "<Error><Code>\xC0\xAF</Code></Error>" },
                { "invalid-too-deep.xml", "<a><b><c><d><e><f><g><h><i/></h></g></f></e></d></c>"
                  "</b></a>" },
                { "invalid-unclosed.xml", XML_PROLOG "<ListBucketResult><Contents><Key>k</Key>" },
                { "invalid-attribute.xml", "<Error a=b><Code>X</Code></Error>" },
                { "invalid-pi-after-root.xml", "<Error><?pi x?><Code>X</Code></Error>" },
                /* accepted until the reader refused references outside the root */
                { "invalid-entity-outside-root.xml", "&amp;<Error><Code>X</Code></Error>&#32;" },
        };
        write_texts("xml", seeds, ARRAY_SIZE(seeds));
}

static void endpoints(void) {
        static const struct text_seed seeds[] = {
                { "aws.txt", "https://s3.eu-west-1.amazonaws.com" },
                { "radosgw.txt", "http://127.0.0.1:7480" },
                { "ipv6.txt", "http://[::1]:9000" },
                { "ipv4-mapped.txt", "https://[::FFFF:10.0.0.5]:8443/" },
                { "bare.txt", "minio_1.local:9000" },
                { "default-port.txt", "HTTPS://Store.Example.COM:443/" },
                { "http-443.txt", "http://store:443" },
                { "invalid-userinfo.txt", "https://AKIDEXAMPLE:wJalrXUtnFEMI@s3.example.com" },
                { "invalid-path.txt", "https://s3.example.com/bucket" },
                { "invalid-query.txt", "https://s3.example.com?x=1" },
                { "invalid-scheme.txt", "ftp://s3.example.com" },
                { "invalid-port.txt", "http://host:65536" },
                { "invalid-ipv6.txt", "http://[::1:9000" },
                { "invalid-label.txt", "https://a..b" },
        };
        write_texts("sigv4-endpoint", seeds, ARRAY_SIZE(seeds));
}

static void credentials_files(void) {
        static const struct text_seed seeds[] = {
                { "default.ini", "# written by aws configure\n[default]\n"
                  "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                  "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
                  "region = eu-west-1\n" },
                { "profiles.ini", "[ci]\naws_access_key_id=AKIDCI\naws_secret_access_key=ci-secret\n"
                  "\n; the one ckptd reads\n[ default ]\r\n"
                  "AWS_ACCESS_KEY_ID = AKIDEFAULT\r\n"
                  "aws_secret_access_key = with spaces inside\r\n"
                  "aws_session_token = FwoGZXIvYXdzEJr//////////wEaDEXAMPLETOKEN==\r\n"
                  "output = json\n" },
                { "empty-token.ini", "[default]\naws_access_key_id = K\naws_secret_access_key = S\n"
                  "aws_session_token =\nregion =\n" },
                { "invalid-before-section.ini", "aws_access_key_id = K\n[default]\n" },
                { "invalid-twice.ini", "[default]\naws_secret_access_key = one-secret\n"
                  "aws_secret_access_key = two-secret\naws_access_key_id = K\n" },
                { "invalid-no-secret.ini", "[default]\naws_access_key_id = K\n" },
                { "invalid-no-profile.ini", "[other]\naws_access_key_id = K\n"
                  "aws_secret_access_key = S\n" },
                { "invalid-control.ini", "[default]\naws_access_key_id = K\n"
                  "aws_secret_access_key = bad\x01secret\n" },
                { "invalid-key-id.ini", "[default]\naws_access_key_id = A/B\n"
                  "aws_secret_access_key = S\n" },
                { "invalid-token.ini", "[default]\naws_access_key_id = K\n"
                  "aws_secret_access_key = S\naws_session_token = has space\n" },
                { "invalid-region.ini", "[default]\naws_access_key_id = K\n"
                  "aws_secret_access_key = S\nregion = eu west\n" },
                { "invalid-header.ini", "[default\naws_access_key_id = K\n" },
                { "invalid-line.ini", "[default]\nthis line has no equals sign\n" },
        };
        write_texts("credentials", seeds, ARRAY_SIZE(seeds));
}

static void config_files(void) {
        static const struct text_seed seeds[] = {
                { "full.conf", "\xef\xbb\xbf# every section\n[daemon]\nstate_dir = /var/lib/ckptd\n"
                  "socket = /run/ckptd/ckptd.sock\nsocket_mode = 0660\nsocket_group = trainers\n"
                  "log_level = debug\nworkers = 4\n\n[pool]\nsize = 64G\nslot_size = 256M\n"
                  "wait_timeout = 2m\n\n[local]\nio_size = 4M\nqueue_depth = 32\nkeep = 2\n"
                  "direct_io = no\nregister_buffers = yes\n\n[remote]\n"
                  "endpoint = http://10.0.0.5:7480\nregion = default\nbucket = checkpoints\n"
                  "prefix = cluster-a\naddressing = path\n"
                  "credentials_file = /etc/ckptd/aws-credentials\nprofile = ckptd\n"
                  "access_key_id = AKIAIOSFODNN7EXAMPLE\n"
                  "secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
                  "ca_file = /etc/ssl/store.pem\npart_size = 128M\nconcurrency = 16\n"
                  "bandwidth = 500M\nkeep = 5\nretry_attempts = 3\n" },
                { "cluster.conf", "[cluster]\nnode_index = 1\nnode_count = 4\n"
                  "peers = 10.0.1.1:7070,10.0.1.2:7070,[fd00::3]:7070,node-4.example:7070\n"
                  "listen = [::]:7070\nreplication_factor = 2\nreplication_jump = 2\n"
                  "placement = ring\npsk_file = /etc/ckptd/peer.psk\n"
                  "peer_connect_timeout = 1500ms\n[pool]\nslot_size = 4M\n" },
                { "comments.conf", "; comment\n  # indented comment\n\n[ pool ]\n  size=1G  \n" },
                { "invalid-range.conf", "[pool]\nslot_size = 3G\n" },
                { "invalid-multiple.conf", "[local]\nio_size = 5000\n" },
                { "invalid-unknown-key.conf", "[daemon]\nsecret_access_key = wJalrXUtnFEMIEXAMPLE\n" },
                { "invalid-unknown-section.conf", "[nope]\nx = 1\n[pool]\nsize = 1G\n" },
                { "invalid-outside.conf", "size = 1G\n" },
                { "invalid-duplicate.conf", "[remote]\nsecret_access_key = first-secret-1\n"
                  "secret_access_key = second-secret-2\n" },
                { "invalid-no-equals.conf", "[remote]\nsecret_access_key: wJalrXUtnFEMIEXAMPLE\n" },
                { "invalid-header.conf", "[remote\n" },
                { "invalid-peers.conf", "[cluster]\npeers = a:1,a:1\n" },
                { "invalid-endpoint.conf", "[remote]\nendpoint = https://user:pw@host\n" },
                { "invalid-choice.conf", "[cluster]\nplacement = star\n" },
                { "invalid-duration.conf", "[pool]\nwait_timeout = 25h\n" },
        };
        write_texts("config", seeds, ARRAY_SIZE(seeds));
}

static void psk_files(void) {
        static const struct text_seed seeds[] = {
                { "base64.psk", "3q2+7wQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4v\n" },
                { "no-newline.psk", "0123456789abcdef0123456789abcdef" },
                { "invalid-short.psk", "0123456789abcdef0123456789abcde\n" },
                { "invalid-crlf.psk", "0123456789abcdef0123456789abcdef\r\n" },
                { "invalid-two-lines.psk", "0123456789abcdef0123456789abcdef\nsecond\n" },
                { "invalid-space.psk", "0123456789abcdef 0123456789abcdef\n" },
                { "invalid-empty.psk", "" },
        };
        write_texts("psk", seeds, ARRAY_SIZE(seeds));

        /* The longest key, and one byte more. */
        char key[PEER_PSK_MAX + 2];
        for (size_t i = 0; i < sizeof(key); i++)
                key[i] = (char)('!' + i % 94);
        key[PEER_PSK_MAX] = '\n';
        write_file("psk", "longest.psk", key, PEER_PSK_MAX + 1);
        key[PEER_PSK_MAX] = 'x';
        write_file("psk", "invalid-long.psk", key, PEER_PSK_MAX + 1);
}

int main(int argc, char **argv) {
        static const char *const subs[] = { "request", "reply", "manifest", "objects", "peer",
                                            "peer-link",
                                            /* text decoders */
                                            "xml", "sigv4-endpoint", "credentials", "config",
                                            "psk" };

        if (argc != 2) {
                fprintf(stderr, "usage: %s DIR\n", argv[0]);
                return 2;
        }
        outdir = argv[1];
        for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", outdir, subs[i]);
                if (mkdir(outdir, 0755) < 0 && errno != EEXIST)
                        die(outdir, errno);
                if (mkdir(path, 0755) < 0 && errno != EEXIST)
                        die(path, errno);
        }
        requests();
        replies();
        manifests();
        objects();
        peers();
        peer_links();
        /* text decoders */
        xml_documents();
        endpoints();
        credentials_files();
        config_files();
        psk_files();
        return 0;
}
