/* SPDX-License-Identifier: MIT */
/*
 * config — one table (keys[] below) drives everything: the embedded
 * defaults, the INI file, the --section-key flags, range checks, SIGHUP
 * reload and --help.  Adding a setting is one line in the table plus the
 * field in struct config; nothing else has to learn about it, so the file,
 * the flags and the help text cannot drift apart.
 *
 * Defaults are written in the same syntax as the file ("1G", "30s") and go
 * through the same parser, so the help text shows exactly what is applied.
 *
 * Loading is all-or-nothing: a file or an argv is applied to a copy, and
 * the copy replaces the caller's struct only when every line parsed.  A
 * half-applied config (a new pool size with the old slot size) is never
 * observable.
 *
 * Not thread-safe: main() owns the struct; SIGHUP handling builds a fresh
 * one and copies the reloadable keys over with config_reload().
 *
 * The [remote] checks (endpoint, bucket) call the same validators the S3
 * client uses (remote/sigv4.h), so that a config that passes here is one
 * the client accepts at start; config only adds the reasons a user needs.
 * Likewise the [cluster] placement is judged by cluster/topology's own
 * topology_check(), so the daemon never starts with a placement its
 * replication code would refuse.
 *
 * [cluster] peers is the one key whose value is a list, and it and listen
 * are the ones parsed into a struct (struct node_address, in
 * cluster/node_address.h) rather than kept as text:
 * the peer code connects to and binds those addresses, and a host or port
 * that cannot work is a start-up error, not a connect failure minutes into
 * a job.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config.h"
#include "peer-proto.h"
#include "remote/s3.h"
#include "remote/sigv4.h"
#include "retention/retention.h"
#include "util/cleanup.h"
#include "util/errbuf.h"
#include "util/log.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

#define MS_PER_S UINT64_C(1000)
#define MS_PER_MIN (60 * MS_PER_S)
#define MS_PER_H (60 * MS_PER_MIN)

/* io_uring_register_buffers() takes at most this many iovecs (UIO_MAXIOV
 * in the kernel's io_uring rsrc code), and the pool registers one per slot. */
#define SLOT_COUNT_MAX 1024

/* S3 limits a multipart upload's parts to 5 MiB..5 GiB (the last part may
 * be smaller), and at most 10000 of them. */
#define PART_SIZE_MIN (5 * MiB)
#define PART_SIZE_MAX (5 * GiB)

/* Far above any job's node count; the bound catches a mistyped count
 * (a digit too many) before the coordinator waits for manifests of nodes
 * that do not exist. */
#define NODE_COUNT_MAX 65536

#define PREFIX_MAX 512

/* A replica per node beyond 16 costs 16x the network and disk of one save
 * for no failure model a job has. */
#define REPLICATION_FACTOR_MAX 16

/* Below 100 ms a connect across a busy fabric fails for no reason; above
 * ten minutes a dead peer holds a save for longer than anyone waits. */
#define PEER_CONNECT_TIMEOUT_MIN 100
#define PEER_CONNECT_TIMEOUT_MAX (10 * MS_PER_MIN)

/* RFC 1035: a DNS name is at most 253 characters, a label 63. */
#define HOST_NAME_MAX_LEN 253
#define HOST_LABEL_MAX 63

enum key_type {
        TYPE_PATH,     /* char *, absolute; not empty unless key.empty_ok */
        TYPE_STRING,   /* char *, empty means NULL (the built-in choice) */
        TYPE_SIZE,     /* uint64_t bytes, K/M/G/T suffixes */
        TYPE_DURATION, /* uint64_t milliseconds, ms/s/m/h suffixes */
        TYPE_U32,      /* uint32_t, decimal */
        TYPE_BOOL,     /* bool */
        TYPE_MODE,     /* uint32_t, octal permission bits */
        TYPE_LOGLEVEL, /* int, LOG_ERR..LOG_DEBUG */
        TYPE_CHOICE,   /* int, index into key.choices */
        TYPE_PEERS,    /* struct node_address * list + uint32_t count (count_offset) */
        TYPE_ADDRESS,  /* struct node_address, host NULL when empty */
};

struct key;

/* A string key's own rule beyond its type: 0, or -EINVAL with the reason
 * (naming the key) in why.  Called for non-empty values only. */
typedef int (*string_check_fn)(const struct key *k, const char *s, char *why, size_t n);

struct key {
        const char *section;
        const char *name;
        enum key_type type;
        size_t offset;   /* into struct config */
        size_t count_offset; /* TYPE_PEERS: the uint32_t entry count */
        bool reloadable; /* SIGHUP may change it; never for TYPE_PEERS/TYPE_ADDRESS */
        bool empty_ok;   /* TYPE_PATH: empty means NULL (the built-in choice) */
        /* Never printed or logged, refused as a flag, only read from a file
         * that group and others cannot access, wiped when freed. */
        bool secret;
        /* An old name of the key before it (same field): parsed, but not
         * defaulted, checked or reported on reload a second time. */
        bool alias;
        uint64_t min, max;
        uint64_t multiple; /* 0: any value in range */
        const char *def;   /* in file syntax; NULL for computed paths */
        /* Environment variable whose value, when it is valid for this key,
         * replaces def (Slurm tells a job step its node's place). */
        const char *env;
        const char *const *choices; /* TYPE_CHOICE: names, NULL-terminated */
        /* TYPE_SIZE: a word that means 0 ("unlimited"), which is then
         * allowed below min too */
        const char *zero_word;
        string_check_fn check;
        const char *metavar; /* for --help; NULL: the type's */
        const char *help;
};

static int check_endpoint(const struct key *k, const char *s, char *why, size_t n);
static int check_region(const struct key *k, const char *s, char *why, size_t n);
static int check_bucket(const struct key *k, const char *s, char *why, size_t n);
static int check_prefix(const struct key *k, const char *s, char *why, size_t n);
static int check_keep_every(const struct key *k, const char *s, char *why, size_t n);

/* In the order of enum s3_addressing: the value is stored as its index. */
static const char *const addressing_names[] = { "auto", "path", "virtual", NULL };
_Static_assert(S3_ADDRESSING_AUTO == 0 && S3_ADDRESSING_PATH == 1 &&
                       S3_ADDRESSING_VIRTUAL == 2,
               "addressing_names[] must follow enum s3_addressing");

/* In the order of enum log_target (util/log.h), likewise. */
static const char *const log_target_names[] = { "auto", "journal", "stderr", NULL };
_Static_assert(LOG_TARGET_AUTO == 0 && LOG_TARGET_JOURNAL == 1 && LOG_TARGET_STDERR == 2,
               "log_target_names[] must follow enum log_target");

/* In the order of enum placement, likewise. */
static const char *const placement_names[] = { "clique", "ring", NULL };
_Static_assert(PLACEMENT_CLIQUE == 0 && PLACEMENT_RING == 1,
               "placement_names[] must follow enum placement");

/* offsetof() that refuses to compile when the field's C type is not the one
 * the key's type stores through — the table writes via untyped pointers. */
#define FIELD(f, T)                                                                \
        (offsetof(struct config, f) +                                              \
         sizeof(char[__builtin_types_compatible_p(__typeof__(((struct config *)0)->f), \
                                                  T) ? 1 : -1]) - 1)

static const struct key keys[] = {
        { .section = "daemon", .name = "state_dir", .type = TYPE_PATH,
          .offset = FIELD(state_dir, char *),
          .help = "directory for checkpoints and the catalog" },
        { .section = "daemon", .name = "socket", .type = TYPE_PATH,
          .offset = FIELD(socket_path, char *),
          .help = "path of the client socket (AF_UNIX, SOCK_SEQPACKET)" },
        { .section = "daemon", .name = "socket_mode", .type = TYPE_MODE,
          .offset = FIELD(socket_mode, uint32_t), .max = 0777, .def = "0660",
          .help = "permission bits of the socket" },
        { .section = "daemon", .name = "socket_group", .type = TYPE_STRING,
          .offset = FIELD(socket_group, char *), .def = "",
          .help = "group that owns the socket (empty: the daemon's group)" },
        { .section = "daemon", .name = "log_level", .type = TYPE_LOGLEVEL,
          .offset = FIELD(log_level, int), .reloadable = true,
          .min = LOG_ERR, .max = LOG_DEBUG, .def = "info",
          .help = "error, warning, notice, info or debug" },
        { .section = "daemon", .name = "log_target", .type = TYPE_CHOICE,
          .offset = FIELD(log_target, int), .choices = log_target_names,
          .max = ARRAY_SIZE(log_target_names) - 2, .def = "auto", .metavar = "TARGET",
          .help = "auto (the journal's native protocol when stderr is the journal's stream, "
                  "JOURNAL_STREAM), journal, or stderr" },
        { .section = "daemon", .name = "workers", .type = TYPE_U32,
          .offset = FIELD(workers, uint32_t), .min = 1, .max = 64, .def = "2",
          .help = "checksum worker threads" },
        { .section = "daemon", .name = "client_connections_max", .type = TYPE_U32,
          .offset = FIELD(client_connections_max, uint32_t), .min = 1, .max = 1 << 20,
          .def = "1024",
          .help = "client connections open at once; more are closed at once (LimitNOFILE "
                  "must leave room, ckptd(8))" },
        { .section = "daemon", .name = "client_connections_per_uid", .type = TYPE_U32,
          .offset = FIELD(client_connections_per_uid, uint32_t), .min = 1, .max = 1 << 20,
          .def = "256",
          .help = "client connections one uid may hold (root is held only to "
                  "client_connections_max), so that one user cannot take them all" },
        { .section = "daemon", .name = "open_files_per_uid", .type = TYPE_U32,
          .offset = FIELD(open_files_per_uid, uint32_t), .min = 4, .max = 1 << 20,
          .def = "16384",
          .help = "files the daemon may hold open for one uid's unfinished saves and reads "
                  "(3 per save, 1 per shard; root is exempt), so that one user cannot take "
                  "every descriptor" },

        { .section = "pool", .name = "size", .type = TYPE_SIZE,
          .offset = FIELD(pool_size, uint64_t), .min = MiB, .max = TiB, .def = "1G",
          .help = "shared-memory staging pool, a multiple of slot_size" },
        { .section = "pool", .name = "slot_size", .type = TYPE_SIZE,
          .offset = FIELD(slot_size, uint64_t), .min = MiB, .max = GiB,
          .multiple = MiB, .def = "64M",
          .help = "size of one pool slot" },
        { .section = "pool", .name = "wait_timeout", .type = TYPE_DURATION,
          .offset = FIELD(pool_wait_ms, uint64_t), .reloadable = true,
          .max = 24 * MS_PER_H, .def = "30s",
          .help = "how long a save waits for a free slot before failing" },
        { .section = "pool", .name = "window_lease", .type = TYPE_DURATION,
          .offset = FIELD(window_lease_ms, uint64_t), .reloadable = true,
          .max = 24 * MS_PER_H, .def = "20s",
          .help = "a window lent to a client and not committed within this is revoked and "
                  "its save failed (0: never)" },
        { .section = "pool", .name = "fair_share", .type = TYPE_BOOL,
          .offset = FIELD(fair_share, bool), .reloadable = true, .def = "yes",
          .help = "while several uids use the pool, each may hold slots / uids of it" },
        { .section = "pool", .name = "max_slots_per_uid", .type = TYPE_U32,
          .offset = FIELD(max_slots_per_uid, uint32_t), .reloadable = true,
          .max = SLOT_COUNT_MAX, .def = "0",
          .help = "most slots one uid may hold at once (0: no fixed cap)" },
        { .section = "pool", .name = "max_slots_per_connection", .type = TYPE_U32,
          .offset = FIELD(max_slots_per_connection, uint32_t), .reloadable = true,
          .max = SLOT_COUNT_MAX, .def = "0",
          .help = "most slots' worth of open windows one connection may hold (0: no cap "
                  "beyond its uid's)" },
        { .section = "pool", .name = "memory_tier", .type = TYPE_BOOL,
          .offset = FIELD(memory_tier, bool), .def = "yes",
          .help = "keep the newest committed step of each job in the pool after it is on "
                  "disk, so a restore on this node reads memory (given back whenever a save "
                  "needs the room)" },

        { .section = "local", .name = "io_size", .type = TYPE_SIZE,
          .offset = FIELD(io_size, uint64_t), .min = 4 * KiB, .max = 64 * MiB,
          .multiple = 4 * KiB, .def = "1M",
          .help = "bytes per read or write request to the local disk" },
        { .section = "local", .name = "queue_depth", .type = TYPE_U32,
          .offset = FIELD(queue_depth, uint32_t), .min = 1, .max = 1024, .def = "16",
          .help = "local disk requests in flight" },
        { .section = "local", .name = "keep_latest", .type = TYPE_U32,
          .offset = FIELD(keep, uint32_t), .reloadable = true,
          .min = 1, .max = 1000000, .def = "3",
          .help = "the newest committed checkpoints kept per job on local disk" },
        { .section = "local", .name = "keep", .type = TYPE_U32,
          .offset = FIELD(keep, uint32_t), .reloadable = true,
          .min = 1, .max = 1000000, .def = "3",
          .alias = true,
          .help = "the old name of keep_latest (the later of the two in a file wins)" },
        { .section = "local", .name = "keep_every", .type = TYPE_STRING,
          .offset = FIELD(keep_every, char *), .reloadable = true, .def = "off",
          .check = check_keep_every, .metavar = "N|DURATION",
          .help = "besides the newest, keep the first committed step of every N steps "
                  "(1000) or of every span of commit time (6h); off: none" },
        { .section = "local", .name = "direct_io", .type = TYPE_BOOL,
          .offset = FIELD(direct_io, bool), .max = 1, .def = "yes",
          .help = "write with O_DIRECT, bypassing the page cache" },
        { .section = "local", .name = "register_buffers", .type = TYPE_BOOL,
          .offset = FIELD(register_buffers, bool), .max = 1, .def = "yes",
          .help = "register the pool with io_uring as fixed buffers" },

        { .section = "remote", .name = "endpoint", .type = TYPE_STRING,
          .offset = FIELD(remote_endpoint, char *), .def = "", .check = check_endpoint,
          .metavar = "URL",
          .help = "object store, https://host[:port] or http://host[:port] (empty: no "
                  "object-store tier)" },
        { .section = "remote", .name = "region", .type = TYPE_STRING,
          .offset = FIELD(remote_region, char *), .def = "", .check = check_region,
          .help = "signing region (empty: $AWS_REGION, $AWS_DEFAULT_REGION, the "
                  "credentials file, else us-east-1)" },
        { .section = "remote", .name = "bucket", .type = TYPE_STRING,
          .offset = FIELD(remote_bucket, char *), .def = "", .check = check_bucket,
          .help = "bucket that holds the checkpoints (required with endpoint)" },
        { .section = "remote", .name = "prefix", .type = TYPE_STRING,
          .offset = FIELD(remote_prefix, char *), .def = "", .check = check_prefix,
          .metavar = "PREFIX",
          .help = "key prefix in the bucket, such as ckpt/cluster-a (empty: keys start "
                  "at jobs/)" },
        { .section = "remote", .name = "addressing", .type = TYPE_CHOICE,
          .offset = FIELD(remote_addressing, int), .choices = addressing_names,
          .max = ARRAY_SIZE(addressing_names) - 2, .def = "auto",
          .metavar = "STYLE",
          .help = "auto, path or virtual: the bucket in the URL path or in the host name "
                  "(auto: path style for an IP or localhost endpoint)" },
        { .section = "remote", .name = "credentials_file", .type = TYPE_PATH,
          .offset = FIELD(remote_credentials_file, char *), .empty_ok = true, .def = "",
          .help = "AWS-style credentials file, mode 0600 (empty: "
                  "$AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials)" },
        { .section = "remote", .name = "profile", .type = TYPE_STRING,
          .offset = FIELD(remote_profile, char *), .def = "",
          .help = "section of the credentials file (empty: $AWS_PROFILE, else default)" },
        { .section = "remote", .name = "access_key_id", .type = TYPE_STRING,
          .offset = FIELD(remote_access_key_id, char *), .def = "", .metavar = "KEY",
          .help = "access key, set together with secret_access_key (empty: the "
                  "environment or the credentials file)" },
        { .section = "remote", .name = "secret_access_key", .type = TYPE_STRING,
          .offset = FIELD(remote_secret_access_key, char *), .secret = true, .def = "",
          .help = "secret key; only in a config file of mode 0600 or stricter, never as "
                  "an option" },
        { .section = "remote", .name = "ca_file", .type = TYPE_PATH,
          .offset = FIELD(remote_ca_file, char *), .empty_ok = true, .def = "",
          .help = "CA certificates (PEM) that verify the store's TLS certificate (empty: "
                  "the system's)" },
        { .section = "remote", .name = "part_size", .type = TYPE_SIZE,
          .offset = FIELD(remote_part_size, uint64_t), .min = PART_SIZE_MIN,
          .max = PART_SIZE_MAX, .def = "64M",
          .help = "multipart upload part size; larger shards are uploaded in parts" },
        { .section = "remote", .name = "concurrency", .type = TYPE_U32,
          .offset = FIELD(remote_concurrency, uint32_t), .min = 1, .max = 256, .def = "8",
          .help = "object-store requests in flight" },
        { .section = "remote", .name = "bandwidth", .type = TYPE_SIZE,
          .offset = FIELD(remote_bandwidth, uint64_t), .reloadable = true, .def = "0",
          .help = "upload cap in bytes per second (0: none)" },
        { .section = "remote", .name = "keep_latest", .type = TYPE_U32,
          .offset = FIELD(remote_keep, uint32_t), .reloadable = true,
          .min = 1, .max = 1000000, .def = "3",
          .help = "the newest committed checkpoints kept per job in the object store, "
                  "besides pinned ones" },
        { .section = "remote", .name = "keep", .type = TYPE_U32,
          .offset = FIELD(remote_keep, uint32_t), .reloadable = true,
          .min = 1, .max = 1000000, .def = "3",
          .alias = true,
          .help = "the old name of keep_latest (the later of the two in a file wins)" },
        { .section = "remote", .name = "keep_every", .type = TYPE_STRING,
          .offset = FIELD(remote_keep_every, char *), .reloadable = true, .def = "off",
          .check = check_keep_every, .metavar = "N",
          .help = "besides the newest, keep the first committed step of every N steps in "
                  "the store (a step count only: the store gives no commit times); off: "
                  "none" },
        { .section = "remote", .name = "retry_attempts", .type = TYPE_U32,
          .offset = FIELD(remote_retry_attempts, uint32_t), .min = 1, .max = 100,
          .def = "5",
          .help = "attempts per object-store request, the first included (1: no retries)" },
        { .section = "remote", .name = "audit_interval", .type = TYPE_DURATION,
          .offset = FIELD(remote_audit_interval_ms, uint64_t), .reloadable = true,
          .def = "6h",
          .help = "how often this node's objects in the store are checked (size, ETag, "
                  "sampled blocks against their CRC32C); 0: never" },
        { .section = "remote", .name = "audit_sample", .type = TYPE_U32,
          .offset = FIELD(remote_audit_sample, uint32_t), .reloadable = true, .max = 64,
          .def = "4",
          .help = "blocks per object read back by the audit, the first and the last "
                  "among them (0: HEAD only)" },

        { .section = "cluster", .name = "node_index", .type = TYPE_U32,
          .offset = FIELD(cluster_node_index, uint32_t), .max = NODE_COUNT_MAX - 1,
          .def = "0", .env = "SLURM_NODEID",
          .help = "this node's index in the job, below node_count (default: "
                  "$SLURM_NODEID, else 0)" },
        { .section = "cluster", .name = "node_count", .type = TYPE_U32,
          .offset = FIELD(cluster_node_count, uint32_t), .min = 1, .max = NODE_COUNT_MAX,
          .def = "1", .env = "SLURM_NNODES",
          .help = "nodes in the job (default: $SLURM_NNODES, else 1)" },
        { .section = "cluster", .name = "peers", .type = TYPE_PEERS,
          .offset = FIELD(cluster_peers, struct node_address *),
          .count_offset = FIELD(cluster_npeers, uint32_t), .empty_ok = true, .def = "",
          .metavar = "HOST:PORT,...",
          .help = "peer address of every node, node i's at position i, node_count of them "
                  "(IPv6 in brackets; required when node_count > 1; empty: no peers)" },
        { .section = "cluster", .name = "listen", .type = TYPE_ADDRESS,
          .offset = FIELD(cluster_listen, struct node_address), .empty_ok = true, .def = "",
          .metavar = "HOST:PORT",
          .help = "address the peer server binds (empty: 0.0.0.0 and the port of this "
                  "node's peers entry)" },
        { .section = "cluster", .name = "replica_keep_latest", .type = TYPE_U32,
          .offset = FIELD(replica_keep_latest, uint32_t), .reloadable = true,
          .max = 1000000, .def = "0",
          .help = "the newest committed steps kept per job in each replica area this node "
                  "holds (0: [local] keep_latest)" },
        { .section = "cluster", .name = "replica_keep_every", .type = TYPE_STRING,
          .offset = FIELD(replica_keep_every, char *), .reloadable = true, .def = "",
          .check = check_keep_every, .metavar = "N|DURATION|off",
          .help = "keep_every of the replica areas (empty: [local] keep_every)" },
        { .section = "cluster", .name = "replication_jump", .type = TYPE_U32,
          .offset = FIELD(cluster_replication_jump, uint32_t), .min = 1,
          .max = NODE_COUNT_MAX - 1, .def = "1",
          .help = "distance between the nodes that hold each other's replicas" },
        { .section = "cluster", .name = "replication_factor", .type = TYPE_U32,
          .offset = FIELD(cluster_replication_factor, uint32_t), .min = 1,
          .max = REPLICATION_FACTOR_MAX, .def = "1",
          .help = "copies of each checkpoint on distinct nodes, this node's own included "
                  "(1: no replication)" },
        { .section = "cluster", .name = "placement", .type = TYPE_CHOICE,
          .offset = FIELD(cluster_placement, int), .choices = placement_names,
          .max = ARRAY_SIZE(placement_names) - 2, .def = "clique", .metavar = "RULE",
          .help = "clique or ring: how replicas are placed (docs/replication.md)" },
        { .section = "cluster", .name = "psk_file", .type = TYPE_PATH,
          .offset = FIELD(cluster_psk_file, char *), .empty_ok = true, .def = "",
          .help = "pre-shared key that authenticates peers: at least 32 bytes, mode 0600 "
                  "(required when node_count > 1)" },
        { .section = "cluster", .name = "peer_connect_timeout", .type = TYPE_DURATION,
          .offset = FIELD(cluster_peer_connect_timeout_ms, uint64_t),
          .min = PEER_CONNECT_TIMEOUT_MIN, .max = PEER_CONNECT_TIMEOUT_MAX, .def = "5s",
          .help = "how long a connection to a peer may take to be set up" },
        { .section = "cluster", .name = "peer_handshake_timeout", .type = TYPE_DURATION,
          .offset = FIELD(cluster_peer_handshake_timeout_ms, uint64_t),
          .min = PEER_CONNECT_TIMEOUT_MIN, .max = PEER_CONNECT_TIMEOUT_MAX, .def = "5s",
          .help = "how long a peer connection may take to authenticate before it is closed" },
        { .section = "cluster", .name = "peer_keepalive", .type = TYPE_DURATION,
          .offset = FIELD(cluster_peer_keepalive_ms, uint64_t), .max = 2 * MS_PER_H,
          .def = "15s",
          .help = "TCP keepalive idle time on peer links (probes every third of it, 3 "
                  "unanswered close the link); 0: off" },
        { .section = "cluster", .name = "peer_frame_mac", .type = TYPE_BOOL,
          .offset = FIELD(cluster_peer_frame_mac, bool), .max = 1, .def = "yes",
          .help = "authenticate every peer frame after the handshake (GMAC); no: only on a "
                  "trusted network, and the same on every node (docs/peer-protocol.md)" },
        { .section = "cluster", .name = "peer_unauthenticated_max", .type = TYPE_U32,
          .offset = FIELD(cluster_peer_unauthenticated_max, uint32_t), .min = 1,
          .max = 65536, .def = "64",
          .help = "accepted peer connections not authenticated yet; more are closed at "
                  "once (replication sources' addresses are held only to the per-address cap)" },
        { .section = "cluster", .name = "peer_unauthenticated_per_address", .type = TYPE_U32,
          .offset = FIELD(cluster_peer_unauthenticated_per_address, uint32_t), .min = 1,
          .max = 65536, .def = "4",
          .help = "of them from one source address" },

        { .section = "scrub", .name = "enabled", .type = TYPE_BOOL,
          .offset = FIELD(scrub_enabled, bool), .reloadable = true, .max = 1, .def = "yes",
          .help = "re-read and verify every committed copy on this node in the background" },
        { .section = "scrub", .name = "rate", .type = TYPE_SIZE,
          .offset = FIELD(scrub_rate, uint64_t), .reloadable = true, .min = MiB, .max = TiB,
          .zero_word = "unlimited", .def = "50M",
          .help = "bytes per second the scrub reads, at least 1M (0 or unlimited: as fast as "
                  "the disk gives at idle priority)" },
        { .section = "scrub", .name = "interval", .type = TYPE_DURATION,
          .offset = FIELD(scrub_interval_ms, uint64_t), .reloadable = true, .min = MS_PER_S,
          .max = 8760 * MS_PER_H, .def = "24h",
          .help = "from the start of one scrub pass to the start of the next (a pass that "
                  "takes longer is followed at once)" },
        { .section = "scrub", .name = "idle_priority", .type = TYPE_BOOL,
          .offset = FIELD(scrub_idle_priority, bool), .reloadable = true, .max = 1,
          .def = "yes",
          .help = "read at I/O class idle, in the disk's spare time only (no: the default "
                  "class, so that the rate is met on a disk that is never idle)" },

        { .section = "metrics", .name = "listen", .type = TYPE_ADDRESS,
          .offset = FIELD(metrics_listen, struct node_address), .empty_ok = true, .def = "",
          .metavar = "HOST:PORT",
          .help = "where GET /metrics is served over HTTP, e.g. 127.0.0.1:9464 (loopback: "
                  "only this node's scraper or node_exporter; empty: no HTTP endpoint, "
                  "`ckptctl metrics` still works)" },
};

/* Sections accepted in the file, in the order help lists them. */
static const char *const sections[] = { "daemon", "pool", "local", "remote", "cluster",
                                        "scrub", "metrics" };

static void *field_ptr(struct config *c, const struct key *k) {
        return (char *)c + k->offset;
}

static const void *field_cptr(const struct config *c, const struct key *k) {
        return (const char *)c + k->offset;
}

static bool key_is_string(const struct key *k) {
        return k->type == TYPE_PATH || k->type == TYPE_STRING;
}

/* Numeric value of a non-string key, widened for comparison and printing. */
static uint64_t key_get_u64(const struct config *c, const struct key *k) {
        const void *p = field_cptr(c, k);

        switch (k->type) {
        case TYPE_SIZE:
        case TYPE_DURATION:
                return *(const uint64_t *)p;
        case TYPE_U32:
        case TYPE_MODE:
                return *(const uint32_t *)p;
        case TYPE_BOOL:
                return *(const bool *)p;
        case TYPE_LOGLEVEL:
        case TYPE_CHOICE:
                return (uint64_t)*(const int *)p;
        case TYPE_PATH:
        case TYPE_STRING:
        case TYPE_PEERS:
        case TYPE_ADDRESS:
                break;
        }
        return 0;
}

static void key_set_u64(struct config *c, const struct key *k, uint64_t v) {
        void *p = field_ptr(c, k);

        switch (k->type) {
        case TYPE_SIZE:
        case TYPE_DURATION:
                *(uint64_t *)p = v;
                break;
        case TYPE_U32:
        case TYPE_MODE:
                *(uint32_t *)p = (uint32_t)v;
                break;
        case TYPE_BOOL:
                *(bool *)p = v != 0;
                break;
        case TYPE_LOGLEVEL:
        case TYPE_CHOICE:
                *(int *)p = (int)v;
                break;
        case TYPE_PATH:
        case TYPE_STRING:
        case TYPE_PEERS:
        case TYPE_ADDRESS:
                break;
        }
}

/* Takes ownership of s (may be NULL).  A secret is wiped before its
 * memory goes back to the allocator, where a later dump or a bug reading
 * freed memory could find it. */
static void key_set_str(struct config *c, const struct key *k, char *s) {
        char **p = field_ptr(c, k);

        if (k->secret && *p)
                explicit_bzero(*p, strlen(*p));
        free(*p);
        *p = s;
}

static const char *key_get_str(const struct config *c, const struct key *k) {
        return *(char *const *)field_cptr(c, k);
}

/* ---- address keys ([cluster] peers, listen) ------------------------------ */

static bool key_is_address(const struct key *k) {
        return k->type == TYPE_PEERS || k->type == TYPE_ADDRESS;
}

static struct node_address **peers_field(struct config *c, const struct key *k) {
        return field_ptr(c, k);
}

static uint32_t *npeers_field(struct config *c, const struct key *k) {
        return (uint32_t *)((char *)c + k->count_offset);
}

static const struct node_address *peers_get(const struct config *c, const struct key *k,
                                             uint32_t *n) {
        *n = *(const uint32_t *)((const char *)c + k->count_offset);
        return *(struct node_address *const *)field_cptr(c, k);
}

static void peers_free(struct node_address *v, uint32_t n) {
        if (!v)
                return;
        for (uint32_t i = 0; i < n; i++)
                free(v[i].host);
        free(v);
}

/* Takes ownership of v (n entries; NULL when n is 0). */
static void peers_set(struct config *c, const struct key *k, struct node_address *v, uint32_t n) {
        struct node_address **p = peers_field(c, k);
        uint32_t *count = npeers_field(c, k);

        peers_free(*p, *count);
        *p = v;
        *count = n;
}

/* Deep copy of n entries into *out (NULL when n is 0).  0 or -ENOMEM. */
static int peers_dup(struct node_address **out, const struct node_address *v, uint32_t n) {
        struct node_address *copy;

        *out = NULL;
        if (!n || !v)
                return 0;
        copy = calloc(n, sizeof(*copy));
        if (!copy)
                return -ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
                copy[i].port = v[i].port;
                if (v[i].host && !(copy[i].host = strdup(v[i].host))) {
                        peers_free(copy, n);
                        return -ENOMEM;
                }
        }
        *out = copy;
        return 0;
}

/* Takes ownership of a->host. */
static void address_set(struct config *c, const struct key *k, struct node_address *a) {
        struct node_address *p = field_ptr(c, k);

        free(p->host);
        *p = *a;
        *a = (struct node_address){ 0 };
}

static const struct node_address *address_get(const struct config *c, const struct key *k) {
        return field_cptr(c, k);
}

static bool peer_equal(const struct node_address *a, const struct node_address *b) {
        if (a->port != b->port || (a->host == NULL) != (b->host == NULL))
                return false;
        return !a->host || strcmp(a->host, b->host) == 0;
}

/* ---- parse helpers ---------------------------------------------------- */

/* Leading decimal digits of s; -EINVAL if there are none (so no sign, no
 * blank, no "0x"), -ERANGE if they overflow. *end points past them. */
static int parse_digits(const char *s, uint64_t *out, const char **end) {
        unsigned long long v;
        char *e;

        if (!s || !isdigit((unsigned char)s[0]))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &e, 10);
        if (errno == ERANGE)
                return -ERANGE;
        *out = v;
        *end = e;
        return 0;
}

struct unit {
        const char *suffix;
        uint64_t factor;
};

static int parse_with_units(const char *s, const struct unit *units, size_t n_units,
                            bool ignore_case, uint64_t *out) {
        const char *end;
        uint64_t v;
        int r;

        r = parse_digits(s, &v, &end);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n_units; i++) {
                bool match = ignore_case ? strcasecmp(end, units[i].suffix) == 0
                                         : strcmp(end, units[i].suffix) == 0;
                if (!match)
                        continue;
                if (v > UINT64_MAX / units[i].factor)
                        return -ERANGE;
                *out = v * units[i].factor;
                return 0;
        }
        return -EINVAL;
}

/* "4096", "64K", "64KiB", "1G", "2T" (powers of 1024, any case).  0, -EINVAL
 * for anything else (fractions, signs, blanks, unknown suffix), -ERANGE when
 * it does not fit in 64 bits. */
int config_parse_size(const char *s, uint64_t *out) {
        static const struct unit units[] = {
                { "", 1 },       { "K", KiB },   { "M", MiB },   { "G", GiB },
                { "T", TiB },    { "KiB", KiB }, { "MiB", MiB }, { "GiB", GiB },
                { "TiB", TiB },
        };
        return parse_with_units(s, units, ARRAY_SIZE(units), true, out);
}

/* "250" (milliseconds), "250ms", "30s", "5m" or "5min", "2h" — case
 * matters, "M" is not minutes.  0, -EINVAL, -ERANGE as config_parse_size. */
int config_parse_duration_ms(const char *s, uint64_t *out) {
        static const struct unit units[] = {
                { "", 1 },            { "ms", 1 },          { "s", MS_PER_S },
                { "m", MS_PER_MIN },  { "min", MS_PER_MIN }, { "h", MS_PER_H },
        };
        return parse_with_units(s, units, ARRAY_SIZE(units), false, out);
}

/* yes/no, true/false, on/off, 1/0, any case.  0 or -EINVAL. */
int config_parse_bool(const char *s, bool *out) {
        static const char *const yes[] = { "yes", "true", "on", "1" };
        static const char *const no[] = { "no", "false", "off", "0" };

        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
                if (strcasecmp(s, yes[i]) == 0) {
                        *out = true;
                        return 0;
                }
                if (strcasecmp(s, no[i]) == 0) {
                        *out = false;
                        return 0;
                }
        }
        return -EINVAL;
}

static int parse_mode(const char *s, uint64_t *out) {
        uint64_t v = 0;

        if (!*s || strlen(s) > 4)
                return -EINVAL;
        for (; *s; s++) {
                if (*s < '0' || *s > '7')
                        return -EINVAL;
                v = v * 8 + (uint64_t)(*s - '0');
        }
        *out = v;
        return 0;
}

/* ---- formatting --------------------------------------------------------- */

static void format_size(uint64_t v, char *buf, size_t n) {
        static const struct unit units[] = {
                { "T", TiB }, { "G", GiB }, { "M", MiB }, { "K", KiB },
        };
        for (size_t i = 0; i < ARRAY_SIZE(units); i++)
                if (v > 0 && v % units[i].factor == 0) {
                        snprintf(buf, n, "%llu%s", (unsigned long long)(v / units[i].factor),
                                 units[i].suffix);
                        return;
                }
        snprintf(buf, n, "%llu", (unsigned long long)v);
}

static void format_duration(uint64_t ms, char *buf, size_t n) {
        static const struct unit units[] = {
                { "h", MS_PER_H }, { "m", MS_PER_MIN }, { "s", MS_PER_S },
        };
        for (size_t i = 0; i < ARRAY_SIZE(units); i++)
                if (ms > 0 && ms % units[i].factor == 0) {
                        snprintf(buf, n, "%llu%s", (unsigned long long)(ms / units[i].factor),
                                 units[i].suffix);
                        return;
                }
        snprintf(buf, n, "%llums", (unsigned long long)ms);
}

static const char *level_name(int level) {
        switch (level) {
        case LOG_ERR:
                return "error";
        case LOG_WARNING:
                return "warning";
        case LOG_NOTICE:
                return "notice";
        case LOG_INFO:
                return "info";
        case LOG_DEBUG:
                return "debug";
        }
        return "?";
}

/* A numeric value of key k's type, in file syntax. */
static void format_number(const struct key *k, uint64_t v, char *buf, size_t n) {
        switch (k->type) {
        case TYPE_SIZE:
                if (v == 0 && k->zero_word)
                        snprintf(buf, n, "%s", k->zero_word);
                else
                        format_size(v, buf, n);
                break;
        case TYPE_DURATION:
                format_duration(v, buf, n);
                break;
        case TYPE_MODE:
                snprintf(buf, n, "%04llo", (unsigned long long)v);
                break;
        case TYPE_BOOL:
                snprintf(buf, n, "%s", v ? "yes" : "no");
                break;
        case TYPE_LOGLEVEL:
                snprintf(buf, n, "%s", level_name((int)v));
                break;
        case TYPE_CHOICE:
                if (v <= k->max)
                        snprintf(buf, n, "%s", k->choices[v]);
                else
                        snprintf(buf, n, "%llu", (unsigned long long)v);
                break;
        case TYPE_U32:
        case TYPE_PATH:
        case TYPE_STRING:
        case TYPE_PEERS:
        case TYPE_ADDRESS:
                snprintf(buf, n, "%llu", (unsigned long long)v);
                break;
        }
}

/* The addresses of a list key, "a:1,[::1]:2", truncated to fit buf. */
static void format_peers(const struct config *c, const struct key *k, char *buf, size_t n) {
        const struct node_address *v;
        uint32_t count;
        size_t used = 0;

        buf[0] = '\0';
        v = peers_get(c, k, &count);
        for (uint32_t i = 0; i < count && used + 1 < n; i++) {
                char text[300];
                int w = snprintf(buf + used, n - used, "%s%s", i ? "," : "",
                                 node_address_format(&v[i], text, sizeof(text)));
                if (w < 0)
                        break;
                used += (size_t)w;
        }
}

/* Key k's value in file syntax; a secret shows only whether it is set. */
static void format_value(const struct config *c, const struct key *k, char *buf, size_t n) {
        if (k->type == TYPE_PEERS)
                format_peers(c, k, buf, n);
        else if (k->type == TYPE_ADDRESS)
                node_address_format(address_get(c, k), buf, n);
        else if (k->secret)
                snprintf(buf, n, "%s", key_get_str(c, k) ? "(set, not shown)" : "(unset)");
        else if (key_is_string(k)) {
                const char *s = key_get_str(c, k);
                snprintf(buf, n, "%s", s ? s : "");
        } else
                format_number(k, key_get_u64(c, k), buf, n);
}

/* "--pool-slot-size", or "--slot-size"-style without the section. */
static void flag_name(const struct key *k, bool with_section, char *buf, size_t n) {
        size_t pos;

        if (with_section)
                snprintf(buf, n, "--%s-%s", k->section, k->name);
        else
                snprintf(buf, n, "--%s", k->name);
        for (pos = 0; buf[pos]; pos++)
                if (buf[pos] == '_')
                        buf[pos] = '-';
}

/* ---- value parsing with the reason on failure -------------------------- */

union value {
        char *str;
        uint64_t u64;
        struct {
                struct node_address *list;
                uint32_t n;
        } peers;
        struct node_address address;
};

static const char *type_hint(enum key_type t) {
        switch (t) {
        case TYPE_SIZE:
                return "a whole number of bytes with an optional K, M, G or T suffix";
        case TYPE_DURATION:
                return "a whole number with an optional ms, s, m or h suffix; bare is ms";
        case TYPE_U32:
                return "a whole decimal number";
        case TYPE_BOOL:
                return "yes/no, true/false, on/off or 1/0";
        case TYPE_MODE:
                return "octal permission bits such as 0660";
        case TYPE_LOGLEVEL:
                return "error, warning, notice, info or debug";
        case TYPE_PATH:
                return "an absolute path";
        case TYPE_STRING:
                return "a string";
        case TYPE_PEERS:
                return "host:port for each node, separated by commas";
        case TYPE_ADDRESS:
                return "host:port";
        case TYPE_CHOICE:
                break; /* key_hint() lists the key's own choices */
        }
        return "";
}

/* type_hint(), or for a choice "auto, path or virtual" in buf. */
static const char *key_hint(const struct key *k, char *buf, size_t n) {
        size_t used = 0;

        if (k->zero_word) {
                snprintf(buf, n, "%s, or %s", type_hint(k->type), k->zero_word);
                return buf;
        }
        if (k->type != TYPE_CHOICE)
                return type_hint(k->type);
        buf[0] = '\0';
        for (size_t i = 0; k->choices[i] && used < n; i++) {
                const char *sep = i == 0 ? "" : k->choices[i + 1] ? ", " : " or ";
                int w = snprintf(buf + used, n - used, "%s%s", sep, k->choices[i]);
                if (w < 0)
                        break;
                used += (size_t)w;
        }
        return buf;
}

static const char *type_word(enum key_type t) {
        switch (t) {
        case TYPE_SIZE:
                return "size";
        case TYPE_DURATION:
                return "duration";
        case TYPE_U32:
                return "number";
        case TYPE_BOOL:
                return "boolean";
        case TYPE_MODE:
                return "mode";
        case TYPE_LOGLEVEL:
                return "log level";
        case TYPE_PATH:
                return "path";
        case TYPE_STRING:
                return "string";
        case TYPE_CHOICE:
                return "value";
        case TYPE_PEERS:
                return "address list";
        case TYPE_ADDRESS:
                return "address";
        }
        return "";
}

/* Range and alignment of a numeric value; the reason goes to why. */
static int check_number(const struct key *k, uint64_t v, char *why, size_t n) {
        char val[32], lo[32], hi[32];

        format_number(k, v, val, sizeof(val));
        if ((v < k->min && !(v == 0 && k->zero_word)) || (k->max && v > k->max)) {
                format_number(k, k->min, lo, sizeof(lo));
                format_number(k, k->max, hi, sizeof(hi));
                snprintf(why, n, "[%s] %s = %s is out of range (%s%s%s..%s)", k->section,
                         k->name, val, k->zero_word ? k->zero_word : "",
                         k->zero_word ? ", or " : "", lo, hi);
                return -ERANGE;
        }
        if (k->multiple && v % k->multiple != 0) {
                format_number(k, k->multiple, lo, sizeof(lo));
                snprintf(why, n, "[%s] %s = %s is not a multiple of %s", k->section, k->name,
                         val, lo);
                return -EINVAL;
        }
        return 0;
}

/* ---- retention value rules ------------------------------------------ */

/* keep_every: a step count, a duration, or off (retention/ parses it, so
 * that the daemon and this check read it alike).  [remote] takes a step
 * count only: the store's retention sees no commit times. */
static int check_keep_every(const struct key *k, const char *s, char *why, size_t n) {
        uint64_t steps, seconds;
        char what[160];

        if (retention_every_parse(s, &steps, &seconds, what, sizeof(what)) < 0) {
                snprintf(why, n, "[%s] %s: %s", k->section, k->name, what);
                return -EINVAL;
        }
        if (seconds && !strcmp(k->section, "remote")) {
                snprintf(why, n, "[remote] keep_every = %s: the store's retention knows no commit "
                                 "times; give a step count (1000)", s);
                return -EINVAL;
        }
        return 0;
}

/* ---- [remote] value rules -------------------------------------------- */

/* scheme://host[:port] and nothing more: the bucket and prefix are set
 * apart, and a user:password@ would put a secret where URLs get logged
 * (so a value with '@' is never repeated in the message).  The scheme is
 * required here although the S3 client would take a bare host as https:
 * a config file should say which one it means. */
static int check_endpoint(const struct key *k, const char *s, char *why, size_t n) {
        struct sigv4_endpoint ep;
        char err[256];

        if (strncasecmp(s, "https://", 8) != 0 && strncasecmp(s, "http://", 7) != 0) {
                if (strchr(s, '@'))
                        return errbuf_fail(-EINVAL, why, n,
                                           "[%s] %s must start with https:// (or http:// for a "
                                           "store on a trusted network)", k->section, k->name);
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' must start with https:// (or http:// for a "
                                   "store on a trusted network)", k->section, k->name, s);
        }
        if (sigv4_endpoint_parse(&ep, s, err, sizeof(err)) < 0)
                return errbuf_fail(-EINVAL, why, n, "[%s] %s", k->section, err);
        return 0;
}

/* The region is part of every request's signing scope
 * (date/region/s3/aws4_request): a '/' or a blank in it would make every
 * request fail with a signature mismatch instead of a clear error now. */
static int check_region(const struct key *k, const char *s, char *why, size_t n) {
        static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789-_.";
        size_t len = strlen(s);

        if (len > 64 || strspn(s, allowed) != len)
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' must be at most 64 letters, digits, '-', '_' "
                                   "or '.' (such as us-east-1, or default for radosgw)",
                                   k->section, k->name, s);
        return 0;
}

static bool shaped_like_ipv4(const char *s) {
        int dots = 0;

        for (; *s; s++) {
                if (*s == '.')
                        dots++;
                else if (*s < '0' || *s > '9')
                        return false;
        }
        return dots == 3;
}

/* S3's bucket naming rules, one reason at a time; sigv4_bucket_validate()
 * is the S3 client's own test and has the last word. */
static int check_bucket(const struct key *k, const char *s, char *why, size_t n) {
        size_t len = strlen(s);

        if (len < 3 || len > SIGV4_BUCKET_MAX)
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' is %zu characters long; S3 allows 3 to %d",
                                   k->section, k->name, s, len, SIGV4_BUCKET_MAX);
        if (strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") != len)
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' may contain only lowercase letters, digits, "
                                   "'.' and '-'", k->section, k->name, s);
        if (!isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[len - 1]))
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' must begin and end with a letter or digit",
                                   k->section, k->name, s);
        if (strstr(s, ".."))
                return errbuf_fail(-EINVAL, why, n, "[%s] %s '%s' must not contain '..'",
                                   k->section, k->name, s);
        if (shaped_like_ipv4(s))
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' must not be formatted as an IP address",
                                   k->section, k->name, s);
        if (sigv4_bucket_validate(s) < 0)
                return errbuf_fail(-EINVAL, why, n, "[%s] %s '%s' is not a valid S3 bucket name",
                                   k->section, k->name, s);
        return 0;
}

/* Object keys are PREFIX/jobs/...: the prefix must join with one '/', and
 * HTTP clients and proxies remove "." and ".." segments from a URL, so the
 * key requested would not be the key signed.  The character set is the
 * part of S3's "safe" set that needs no thought in a shell or a URL. */
static int check_prefix(const struct key *k, const char *s, char *why, size_t n) {
        static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._=:@+-/";
        size_t len = strlen(s);

        if (len > PREFIX_MAX)
                return errbuf_fail(-EINVAL, why, n, "[%s] %s is %zu bytes long; at most %d",
                                   k->section, k->name, len, PREFIX_MAX);
        if (strspn(s, allowed) != len)
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' may contain only letters, digits and "
                                   ". _ = : @ + - /", k->section, k->name, s);
        if (s[0] == '/' || s[len - 1] == '/')
                return errbuf_fail(-EINVAL, why, n,
                                   "[%s] %s '%s' must not begin or end with '/'", k->section,
                                   k->name, s);
        if (strstr(s, "//"))
                return errbuf_fail(-EINVAL, why, n, "[%s] %s '%s' must not contain '//'",
                                   k->section, k->name, s);
        for (const char *seg = s; seg;) {
                const char *slash = strchr(seg, '/');
                size_t seglen = slash ? (size_t)(slash - seg) : strlen(seg);

                if ((seglen == 1 && seg[0] == '.') ||
                    (seglen == 2 && seg[0] == '.' && seg[1] == '.'))
                        return errbuf_fail(-EINVAL, why, n,
                                           "[%s] %s '%s' must not have a '.' or '..' segment",
                                           k->section, k->name, s);
                seg = slash ? slash + 1 : NULL;
        }
        return 0;
}

/* ---- [cluster] address rules ------------------------------------------- */

/* Whether host (no brackets) is an IPv4 or IPv6 literal, a DNS name, or
 * neither: 0, or -EINVAL with the reason in why.  A bracketed host must be
 * IPv6; a name made of digits and dots only must be an IPv4 address in
 * dotted-quad form, since getaddrinfo() would read "10.1" as 10.0.0.1. */
static int check_host(const char *host, bool bracketed, char *why, size_t n) {
        unsigned char addr[sizeof(struct in6_addr)];
        size_t len = strlen(host);

        if (bracketed || strchr(host, ':')) {
                if (inet_pton(AF_INET6, host, addr) != 1)
                        return errbuf_fail(-EINVAL, why, n, "'%s' is not an IPv6 address", host);
                return 0;
        }
        if (len == 0)
                return errbuf_fail(-EINVAL, why, n, "the host is missing");
        if (strspn(host, "0123456789.") == len) {
                if (inet_pton(AF_INET, host, addr) != 1)
                        return errbuf_fail(-EINVAL, why, n,
                                           "'%s' is not an IPv4 address (four numbers 0..255, "
                                           "such as 10.0.0.1)", host);
                return 0;
        }
        if (len > HOST_NAME_MAX_LEN)
                return errbuf_fail(-EINVAL, why, n,
                                   "the host name is %zu characters long; DNS allows at most %d",
                                   len, HOST_NAME_MAX_LEN);
        for (const char *label = host; label;) {
                const char *dot = strchr(label, '.');
                size_t llen = dot ? (size_t)(dot - label) : strlen(label);

                if (llen == 0 || llen > HOST_LABEL_MAX ||
                    strspn(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-") < llen ||
                    label[0] == '-' || label[llen - 1] == '-')
                        return errbuf_fail(-EINVAL, why, n,
                                           "'%s' is not a host name (letters, digits and '-' in "
                                           "dot-separated labels of 1 to %d characters, none "
                                           "beginning or ending with '-')", host, HOST_LABEL_MAX);
                label = dot ? dot + 1 : NULL;
        }
        return 0;
}

/* A port: 1..65535 in decimal, nothing else. */
static int parse_port(const char *s, uint16_t *out, char *why, size_t n) {
        size_t len = strlen(s);
        unsigned long v;

        if (len == 0)
                return errbuf_fail(-EINVAL, why, n, "the port after ':' is missing");
        if (strspn(s, "0123456789") != len || len > 5)
                return errbuf_fail(-EINVAL, why, n, "port '%s' is not a number 1..65535", s);
        v = strtoul(s, NULL, 10);
        if (v < 1 || v > UINT16_MAX)
                return errbuf_fail(-EINVAL, why, n, "port %lu is out of range (1..65535)", v);
        *out = (uint16_t)v;
        return 0;
}

/* "host:port" or "[v6]:port" (s: len bytes, not terminated) into *out with
 * the host strdup()ed and unbracketed.  0, -EINVAL with the reason in why,
 * or -ENOMEM. */
static int address_parse(const char *s, size_t len, struct node_address *out, char *why,
                         size_t n) {
        _cleanup_free_ char *text = strndup(s, len), *host = NULL;
        bool bracketed = false;
        const char *port_text;
        uint16_t port = 0;
        int r;

        if (!text)
                return -ENOMEM;
        if (text[0] == '[') {
                char *close = strchr(text, ']');
                if (!close)
                        return errbuf_fail(-EINVAL, why, n, "'[' without a closing ']'");
                if (close[1] != ':')
                        return errbuf_fail(-EINVAL, why, n, "expected ':' and a port after ']'");
                *close = '\0';
                host = strdup(text + 1);
                port_text = close + 2;
                bracketed = true;
        } else {
                char *colon = strrchr(text, ':');
                if (!colon && strspn(text, "0123456789") == len)
                        return errbuf_fail(-EINVAL, why, n,
                                           "no host (expected host:port, such as 0.0.0.0:%s)",
                                           text);
                if (!colon)
                        return errbuf_fail(-EINVAL, why, n,
                                           "no port (expected host:port, such as %s:7000)", text);
                *colon = '\0';
                if (strchr(text, ':'))
                        return errbuf_fail(-EINVAL, why, n,
                                           "an IPv6 address must be in brackets, such as "
                                           "[fd00::1]:7000");
                host = strdup(text);
                port_text = colon + 1;
        }
        if (!host)
                return -ENOMEM;
        r = check_host(host, bracketed, why, n);
        if (r < 0)
                return r;
        r = parse_port(port_text, &port, why, n);
        if (r < 0)
                return r;
        out->host = TAKE_PTR(host);
        out->port = port;
        return 0;
}

/* A peer set by code: the rules of address_parse() on the parsed form. */
static int address_check(const struct node_address *p, char *why, size_t n) {
        if (!p->host)
                return errbuf_fail(-EINVAL, why, n, "the host is missing");
        if (check_host(p->host, false, why, n) < 0)
                return -EINVAL;
        if (p->port == 0)
                return errbuf_fail(-EINVAL, why, n, "port 0 is out of range (1..65535)");
        return 0;
}

/* A peer's address reduced to what identifies it: two entries that differ
 * only in spelling ("[::1]" and "[0::1]", "Node1" and "node1") are the same
 * daemon. */
struct peer_id {
        uint32_t index;
        uint16_t port;
        int family; /* AF_INET, AF_INET6, or 0 for a name */
        unsigned char addr[sizeof(struct in6_addr)];
        const char *name;
};

static int peer_id_compare(const void *a_, const void *b_) {
        const struct peer_id *a = a_, *b = b_;
        int c;

        if (a->port != b->port)
                return a->port < b->port ? -1 : 1;
        if (a->family != b->family)
                return a->family < b->family ? -1 : 1;
        c = a->family ? memcmp(a->addr, b->addr, sizeof(a->addr)) : strcasecmp(a->name, b->name);
        if (c)
                return c;
        return a->index < b->index ? -1 : a->index > b->index;
}

/* The first entry (in list order) that repeats an earlier one: 0, or
 * -EINVAL with *first and *second set; -ENOMEM.  Sorting keeps a list of
 * 65536 nodes from costing 2^31 comparisons.  Hosts must be set. */
static int peers_find_duplicate(const struct node_address *v, uint32_t n, uint32_t *first,
                                uint32_t *second) {
        _cleanup_free_ struct peer_id *ids = NULL;
        bool found = false;

        if (n < 2)
                return 0;
        ids = calloc(n, sizeof(*ids));
        if (!ids)
                return -ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
                ids[i].index = i;
                ids[i].port = v[i].port;
                ids[i].name = v[i].host;
                if (inet_pton(AF_INET, v[i].host, ids[i].addr) == 1)
                        ids[i].family = AF_INET;
                else if (inet_pton(AF_INET6, v[i].host, ids[i].addr) == 1)
                        ids[i].family = AF_INET6;
        }
        qsort(ids, n, sizeof(*ids), peer_id_compare);
        for (uint32_t i = 1; i < n; i++) {
                struct peer_id a = ids[i - 1], b = ids[i];
                /* equal but for the index: b repeats the group's first */
                a.index = b.index = 0;
                if (peer_id_compare(&a, &b) != 0)
                        continue;
                /* within a group the indices ascend, so the first repeat is
                 * ids[i] right after the group's first entry */
                if (i >= 2) {
                        struct peer_id c = ids[i - 2];
                        c.index = 0;
                        if (peer_id_compare(&c, &a) == 0)
                                continue;
                }
                if (!found || ids[i].index < *second) {
                        *first = ids[i - 1].index;
                        *second = ids[i].index;
                        found = true;
                }
        }
        return found ? -EINVAL : 0;
}

/* The duplicate rule of [cluster] peers with its message in why. */
static int check_peers_unique(const struct key *k, const struct node_address *v, uint32_t n,
                              char *why, size_t nwhy) {
        uint32_t first = 0, second = 0;
        char text[300];
        int r;

        r = peers_find_duplicate(v, n, &first, &second);
        if (r == -ENOMEM)
                return errbuf_fail(r, why, nwhy, "out of memory");
        if (r < 0)
                return errbuf_fail(-EINVAL, why, nwhy,
                                   "[%s] %s: nodes %u and %u have the same address '%s'; each "
                                   "node needs its own (another host or port)", k->section,
                                   k->name, first, second,
                                   node_address_format(&v[second], text, sizeof(text)));
        return 0;
}

/* "a:1, [::1]:2,b:3" into a list (NULL for an empty value).  0, or -EINVAL
 * / -ENOMEM with the reason in why. */
static int parse_peers(const struct key *k, const char *s, struct node_address **out,
                       uint32_t *out_n, char *why, size_t nwhy) {
        struct node_address *list = NULL;
        size_t count = 1;
        uint32_t n = 0;
        int r = 0;

        *out = NULL;
        *out_n = 0;
        if (!*s)
                return 0;
        for (const char *p = s; *p; p++)
                count += *p == ',';
        if (count > NODE_COUNT_MAX)
                return errbuf_fail(-EINVAL, why, nwhy,
                                   "[%s] %s lists %zu addresses; at most %d (one per node)",
                                   k->section, k->name, count, NODE_COUNT_MAX);
        list = calloc(count, sizeof(*list));
        if (!list)
                return errbuf_fail(-ENOMEM, why, nwhy, "out of memory");

        for (const char *entry = s; entry; n++) {
                const char *comma = strchr(entry, ',');
                size_t len = comma ? (size_t)(comma - entry) : strlen(entry);
                char reason[400];

                while (len && (*entry == ' ' || *entry == '\t')) {
                        entry++;
                        len--;
                }
                while (len && (entry[len - 1] == ' ' || entry[len - 1] == '\t'))
                        len--;
                if (!len) {
                        r = errbuf_fail(-EINVAL, why, nwhy,
                                        "[%s] %s: node %u's address is empty (expected "
                                        "host:port for each node, separated by commas)",
                                        k->section, k->name, n);
                        goto fail;
                }
                r = address_parse(entry, len, &list[n], reason, sizeof(reason));
                if (r == -ENOMEM) {
                        errbuf_fail(r, why, nwhy, "out of memory");
                        goto fail;
                }
                if (r < 0) {
                        errbuf_fail(r, why, nwhy, "[%s] %s: node %u's address '%.*s': %s",
                                    k->section, k->name, n, (int)len, entry, reason);
                        goto fail;
                }
                entry = comma ? comma + 1 : NULL;
        }
        r = check_peers_unique(k, list, n, why, nwhy);
        if (r < 0)
                goto fail;
        *out = list;
        *out_n = n;
        return 0;

fail:
        peers_free(list, (uint32_t)count);
        return r;
}

/* A peers list or listen address set by code (config_validate): the rules
 * of the parsers, with the same messages. */
static int check_address_key(const struct config *c, const struct key *k, char *why,
                             size_t nwhy) {
        char reason[400], text[300];
        const struct node_address *v;
        uint32_t n;

        if (k->type == TYPE_ADDRESS) {
                const struct node_address *a = address_get(c, k);
                if (!a->host)
                        return 0;
                if (address_check(a, reason, sizeof(reason)) < 0)
                        return errbuf_fail(-EINVAL, why, nwhy, "[%s] %s '%s': %s", k->section,
                                           k->name, node_address_format(a, text, sizeof(text)),
                                           reason);
                return 0;
        }

        v = peers_get(c, k, &n);
        if (n > NODE_COUNT_MAX)
                return errbuf_fail(-EINVAL, why, nwhy,
                                   "[%s] %s lists %u addresses; at most %d (one per node)",
                                   k->section, k->name, n, NODE_COUNT_MAX);
        if (n && !v)
                return errbuf_fail(-EINVAL, why, nwhy, "[%s] %s: %u addresses counted but no "
                                   "list", k->section, k->name, n);
        for (uint32_t i = 0; i < n; i++)
                if (address_check(&v[i], reason, sizeof(reason)) < 0)
                        return errbuf_fail(-EINVAL, why, nwhy, "[%s] %s: node %u's address "
                                           "'%s': %s", k->section, k->name, i,
                                           node_address_format(&v[i], text, sizeof(text)),
                                           reason);
        return check_peers_unique(k, v, n, why, nwhy);
}

/* The rules of a non-empty string value beyond "it is a string": an
 * absolute path for TYPE_PATH, and the key's own check.  0 or -EINVAL with
 * the reason in why. */
static int check_string(const struct key *k, const char *s, char *why, size_t n) {
        if (k->type == TYPE_PATH && s[0] != '/') {
                snprintf(why, n, "[%s] %s must be an absolute path, not '%s'", k->section,
                         k->name, s);
                return -EINVAL;
        }
        return k->check ? k->check(k, s, why, n) : 0;
}

/* Parse s as key k's value into *v (a string is strdup()ed: the caller owns
 * it).  0, or -EINVAL / -ERANGE / -ENOMEM with the reason in why. */
static int parse_value(const struct key *k, const char *s, union value *v, char *why,
                       size_t n) {
        char hint[128];
        bool b = false;
        int r;

        if (!*s && k->type != TYPE_STRING && !k->empty_ok) {
                snprintf(why, n, "missing value for [%s] %s (expected %s)", k->section,
                         k->name, key_hint(k, hint, sizeof(hint)));
                return -EINVAL;
        }

        switch (k->type) {
        case TYPE_PEERS:
                return parse_peers(k, s, &v->peers.list, &v->peers.n, why, n);
        case TYPE_ADDRESS: {
                char reason[400];
                v->address = (struct node_address){ 0 };
                if (!*s)
                        return 0;
                if (strchr(s, ','))
                        return errbuf_fail(-EINVAL, why, n, "[%s] %s '%s': one address only "
                                           "(host:port)", k->section, k->name, s);
                r = address_parse(s, strlen(s), &v->address, reason, sizeof(reason));
                if (r == -ENOMEM)
                        return errbuf_fail(r, why, n, "out of memory");
                if (r < 0)
                        return errbuf_fail(r, why, n, "[%s] %s '%s': %s", k->section, k->name,
                                           s, reason);
                return 0;
        }
        case TYPE_PATH:
        case TYPE_STRING:
                if (*s) {
                        r = check_string(k, s, why, n);
                        if (r < 0)
                                return r;
                }
                v->str = NULL;
                if (*s) {
                        v->str = strdup(s);
                        if (!v->str) {
                                snprintf(why, n, "out of memory");
                                return -ENOMEM;
                        }
                }
                return 0;
        case TYPE_SIZE:
                if (k->zero_word && !strcmp(s, k->zero_word)) {
                        v->u64 = 0;
                        r = 0;
                } else {
                        r = config_parse_size(s, &v->u64);
                }
                break;
        case TYPE_DURATION:
                r = config_parse_duration_ms(s, &v->u64);
                break;
        case TYPE_U32: {
                const char *end;
                r = parse_digits(s, &v->u64, &end);
                if (r == 0 && *end)
                        r = -EINVAL;
                break;
        }
        case TYPE_BOOL:
                r = config_parse_bool(s, &b);
                v->u64 = b;
                break;
        case TYPE_MODE:
                r = parse_mode(s, &v->u64);
                break;
        case TYPE_LOGLEVEL:
                r = log_level_parse(s);
                if (r >= 0) {
                        v->u64 = (uint64_t)r;
                        r = 0;
                }
                break;
        case TYPE_CHOICE:
                r = -EINVAL;
                for (size_t i = 0; k->choices[i]; i++)
                        if (strcasecmp(s, k->choices[i]) == 0) {
                                v->u64 = i;
                                r = 0;
                                break;
                        }
                break;
        default:
                r = -EINVAL;
        }

        if (r == -ERANGE) {
                snprintf(why, n, "%s '%s' for [%s] %s is too large", type_word(k->type), s,
                         k->section, k->name);
                return r;
        }
        if (r < 0) {
                snprintf(why, n, "invalid %s '%s' for [%s] %s (expected %s)", type_word(k->type),
                         s, k->section, k->name, key_hint(k, hint, sizeof(hint)));
                return -EINVAL;
        }
        return check_number(k, v->u64, why, n);
}

static void apply_value(struct config *c, const struct key *k, union value *v);

/* Parse and apply in one step. */
static int set_from_string(struct config *c, const struct key *k, const char *s, char *why,
                           size_t n) {
        union value v;
        int r;

        r = parse_value(k, s, &v, why, n);
        if (r < 0)
                return r;
        apply_value(c, k, &v);
        return 0;
}

/* ---- defaults ---------------------------------------------------------- */

/* "base/leaf" without doubling a trailing slash.  NULL on -ENOMEM. */
static char *path_join(const char *base, const char *leaf) {
        size_t len = strlen(base);
        char *s;

        while (len > 1 && base[len - 1] == '/')
                len--;
        if (asprintf(&s, "%.*s/%s", (int)len, base, leaf) < 0)
                return NULL;
        return s;
}

/* First entry of a colon-separated absolute directory list from the
 * environment (systemd passes one per StateDirectory= line), or NULL. */
static char *env_first_dir(const char *name) {
        const char *e = getenv(name);
        size_t len;

        if (!e || e[0] != '/')
                return NULL;
        len = strcspn(e, ":");
        return strndup(e, len);
}

/* An absolute directory from the environment; the XDG base-directory spec
 * says relative values are to be ignored. */
static const char *env_abs_dir(const char *name) {
        const char *e = getenv(name);
        return e && e[0] == '/' ? e : NULL;
}

static char *home_dir(void) {
        const char *h = env_abs_dir("HOME");
        struct passwd pw, *res = NULL;
        char buf[4096];

        if (h)
                return strdup(h);
        if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) == 0 && res &&
            res->pw_dir && res->pw_dir[0] == '/')
                return strdup(res->pw_dir);
        return NULL;
}

/* The socket that the default rule derives from a state dir (used when no
 * runtime directory is known). */
static char *state_socket(const char *state_dir) {
        return path_join(state_dir, "ckptd.sock");
}

static int default_paths(char **ret_state, char **ret_socket) {
        _cleanup_free_ char *state = NULL, *sock = NULL, *dir = NULL;
        const char *xdg;

        dir = env_first_dir("STATE_DIRECTORY");
        if (dir)
                state = TAKE_PTR(dir);
        else if (geteuid() == 0)
                state = strdup("/var/lib/ckptd");
        else if ((xdg = env_abs_dir("XDG_STATE_HOME")))
                state = path_join(xdg, "ckptd");
        else {
                _cleanup_free_ char *home = home_dir();
                /* No home at all: leave it empty, config_validate() asks
                 * for --state-dir. */
                state = home ? path_join(home, ".local/state/ckptd") : strdup("");
        }
        if (!state)
                return -ENOMEM;

        dir = env_first_dir("RUNTIME_DIRECTORY");
        if (dir)
                sock = path_join(dir, "ckptd.sock");
        else if (geteuid() == 0)
                sock = strdup("/run/ckptd/ckptd.sock");
        else if ((xdg = env_abs_dir("XDG_RUNTIME_DIR")))
                sock = path_join(xdg, "ckptd.sock");
        else
                sock = state[0] ? state_socket(state) : strdup("");
        if (!sock)
                return -ENOMEM;

        *ret_state = TAKE_PTR(state);
        *ret_socket = TAKE_PTR(sock);
        return 0;
}

static void apply_value(struct config *c, const struct key *k, union value *v) {
        if (k->type == TYPE_PEERS) {
                peers_set(c, k, v->peers.list, v->peers.n);
                v->peers.list = NULL;
                return;
        }
        if (k->type == TYPE_ADDRESS) {
                address_set(c, k, &v->address);
                return;
        }
        if (!key_is_string(k)) {
                key_set_u64(c, k, v->u64);
                return;
        }
        /* The fallback socket lives in the state dir; when the state dir
         * moves and the socket is still the one derived from it, move the
         * socket along, or "--state-dir X" alone would leave the socket in
         * a directory the daemon never creates. */
        if (k->offset == offsetof(struct config, state_dir) && v->str && c->state_dir &&
            c->socket_path) {
                _cleanup_free_ char *old = state_socket(c->state_dir);
                if (old && strcmp(old, c->socket_path) == 0) {
                        char *moved = state_socket(v->str);
                        if (moved) {
                                free(c->socket_path);
                                c->socket_path = moved;
                        }
                }
        }
        key_set_str(c, k, v->str);
        v->str = NULL;
}

int config_init(struct config *c) {
        _cleanup_free_ char *state = NULL, *sock = NULL;
        char why[256];
        int r;

        *c = (struct config){ 0 };
        r = default_paths(&state, &sock);
        if (r < 0)
                return r;
        c->state_dir = TAKE_PTR(state);
        c->socket_path = TAKE_PTR(sock);

        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                const char *e;

                if (!keys[i].def || keys[i].alias)
                        continue;
                /* An environment value that is not valid for the key (not a
                 * number, out of range) is ignored like an unset one: it is
                 * a default, and the file or a flag can still say better. */
                e = keys[i].env ? getenv(keys[i].env) : NULL;
                if (e && *e) {
                        r = set_from_string(c, &keys[i], e, why, sizeof(why));
                        if (r == 0)
                                continue;
                        if (r == -ENOMEM) {
                                config_clear(c);
                                return r;
                        }
                }
                r = set_from_string(c, &keys[i], keys[i].def, why, sizeof(why));
                if (r < 0) {
                        /* A default that fails its own key's checks is a bug
                         * in the table; -ENOMEM is the only runtime cause. */
                        config_clear(c);
                        return r == -ENOMEM ? r : -EINVAL;
                }
        }
        return 0;
}

/* Free what key k's field owns and leave it empty. */
static void key_free(struct config *c, const struct key *k) {
        struct node_address none = { 0 };

        if (k->type == TYPE_PEERS)
                peers_set(c, k, NULL, 0);
        else if (k->type == TYPE_ADDRESS)
                address_set(c, k, &none);
        else if (key_is_string(k))
                key_set_str(c, k, NULL);
}

void config_clear(struct config *c) {
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                key_free(c, &keys[i]);
}

/* dst's field for k, which holds nothing (dst was just cleared of it),
 * becomes a deep copy of src's.  0 or -ENOMEM. */
static int key_copy(struct config *dst, const struct config *src, const struct key *k) {
        if (k->type == TYPE_PEERS) {
                struct node_address *copy;
                uint32_t n;
                const struct node_address *v = peers_get(src, k, &n);

                if (peers_dup(&copy, v, n) < 0)
                        return -ENOMEM;
                peers_set(dst, k, copy, copy ? n : 0);
                return 0;
        }
        if (k->type == TYPE_ADDRESS) {
                struct node_address a = *address_get(src, k);
                if (a.host && !(a.host = strdup(a.host)))
                        return -ENOMEM;
                address_set(dst, k, &a);
                return 0;
        }
        if (key_is_string(k)) {
                const char *s = key_get_str(src, k);
                char *copy = NULL;
                if (s && !(copy = strdup(s)))
                        return -ENOMEM;
                key_set_str(dst, k, copy);
        }
        return 0;
}

/* Deep copy, for all-or-nothing application.  0 or -ENOMEM. */
static int config_dup(struct config *dst, const struct config *src) {
        *dst = *src;
        /* First let dst own nothing, so that a failure half-way can clear it. */
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                const struct key *k = &keys[i];
                if (k->type == TYPE_PEERS) {
                        *peers_field(dst, k) = NULL;
                        *npeers_field(dst, k) = 0;
                } else if (k->type == TYPE_ADDRESS)
                        *(struct node_address *)field_ptr(dst, k) = (struct node_address){ 0 };
                else if (key_is_string(k))
                        *(char **)field_ptr(dst, k) = NULL;
        }
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                if (key_copy(dst, src, &keys[i]) < 0) {
                        config_clear(dst);
                        return -ENOMEM;
                }
        return 0;
}

/* Replace *c with *tmp (consumed). */
static void config_commit(struct config *c, struct config *tmp) {
        config_clear(c);
        *c = *tmp;
        *tmp = (struct config){ 0 };
}

/* ---- file -------------------------------------------------------------- */

static char *strip(char *s) {
        char *end;

        while (isspace((unsigned char)*s))
                s++;
        end = s + strlen(s);
        while (end > s && isspace((unsigned char)end[-1]))
                *--end = '\0';
        return s;
}

static bool section_known(const char *name) {
        for (size_t i = 0; i < ARRAY_SIZE(sections); i++)
                if (strcmp(sections[i], name) == 0)
                        return true;
        return false;
}

/* "[daemon], [pool], ..." with last_sep before the last one, for messages
 * that list the sections. */
static void section_list(const char *last_sep, char *buf, size_t n) {
        size_t used = 0;

        buf[0] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(sections) && used < n; i++) {
                const char *sep = i == 0 ? "" : i + 1 == ARRAY_SIZE(sections) ? last_sep : ", ";
                int w = snprintf(buf + used, n - used, "%s[%s]", sep, sections[i]);
                if (w < 0)
                        break;
                used += (size_t)w;
        }
}

/* A file that sets a secret must be private to its owner: 0, or -EPERM
 * with the reason in why.  Checked on the open descriptor, so the file
 * judged is the file read. */
static int check_secret_file(FILE *f, const struct key *k, char *why, size_t n) {
        struct stat st;

        if (fstat(fileno(f), &st) < 0)
                return errbuf_fail(-errno, why, n, "cannot check the permissions of the file "
                                   "holding [%s] %s: %s", k->section, k->name, strerror(errno));
        if ((st.st_mode & 077) == 0)
                return 0;
        return errbuf_fail(-EPERM, why, n,
                           "[%s] %s is set in a file that group or others may access (mode "
                           "%04o): make it private (chmod 600, owned by the daemon's user), or "
                           "give the secret in the environment (AWS_SECRET_ACCESS_KEY) or a "
                           "credentials file ([%s] credentials_file)", k->section, k->name,
                           (unsigned)(st.st_mode & 07777), k->section);
}

static const struct key *find_key(const char *section, const char *name) {
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
                        return &keys[i];
        return NULL;
}

int config_load_file(struct config *c, const char *path, FILE *err) {
        _cleanup_fclose_ FILE *f = NULL;
        _cleanup_free_ char *line = NULL;
        struct config tmp;
        unsigned first_line[ARRAY_SIZE(keys)] = { 0 };
        char section[64] = "";
        bool skip_section = false; /* under an unknown [section], already reported */
        unsigned lineno = 0;
        size_t cap = 0;
        ssize_t len;
        int r, failed = 0;

        f = fopen(path, "re");
        if (!f) {
                r = -errno;
                if (r != -ENOENT)
                        fprintf(err, "%s: cannot open: %s\n", path, strerror(-r));
                return r;
        }

        r = config_dup(&tmp, c);
        if (r < 0) {
                fprintf(err, "%s: out of memory\n", path);
                return r;
        }

#define FAIL(...)                                                \
        do {                                                     \
                fprintf(err, "%s:%u: ", path, lineno);           \
                fprintf(err, __VA_ARGS__);                       \
                fputc('\n', err);                                \
                if (!failed)                                     \
                        failed = -EINVAL;                        \
        } while (0)

        while ((len = getline(&line, &cap, f)) >= 0) {
                const struct key *k;
                char *s, *eq, *name, *value;
                char why[1024]; /* a peers entry with a long name says it twice */

                lineno++;
                s = line;
                if (lineno == 1 && strncmp(s, "\xef\xbb\xbf", 3) == 0)
                        s += 3; /* UTF-8 byte-order mark from some editors */
                if (strlen(line) != (size_t)len) {
                        FAIL("NUL byte in line");
                        continue;
                }
                s = strip(s);
                if (!*s || *s == '#' || *s == ';')
                        continue;

                if (*s == '[') {
                        char *end = strchr(s, ']');
                        if (!end || end[1] != '\0') {
                                FAIL("malformed section header '%s' (expected [name])", s);
                                skip_section = true;
                                continue;
                        }
                        *end = '\0';
                        name = strip(s + 1);
                        if (!section_known(name)) {
                                char known[128];
                                section_list(", ", known, sizeof(known));
                                FAIL("unknown section [%s] (known: %s)", name, known);
                                skip_section = true;
                                continue;
                        }
                        snprintf(section, sizeof(section), "%s", name);
                        skip_section = false;
                        continue;
                }

                eq = strchr(s, '=');
                if (!eq) {
                        /* "secret_access_key: ..." must not end up in a log. */
                        if (strcasestr(s, "secret"))
                                FAIL("expected 'key = value' or '[section]' (the line is not "
                                     "shown: it may hold a secret)");
                        else
                                FAIL("expected 'key = value' or '[section]', got '%s'", s);
                        continue;
                }
                *eq = '\0';
                name = strip(s);
                value = strip(eq + 1);
                if (skip_section)
                        continue;
                if (!*name) {
                        FAIL("missing key name before '='");
                        continue;
                }
                if (!section[0]) {
                        char known[128];
                        section_list(" or ", known, sizeof(known));
                        FAIL("key '%s' outside of a section (put it under %s)", name, known);
                        continue;
                }
                k = find_key(section, name);
                if (!k) {
                        FAIL("unknown key '%s' in section [%s]", name, section);
                        continue;
                }
                if (first_line[k - keys]) {
                        FAIL("duplicate key '%s' in section [%s] (first set on line %u)", name,
                             section, first_line[k - keys]);
                        continue;
                }
                first_line[k - keys] = lineno;

                if (k->secret && *value) {
                        r = check_secret_file(f, k, why, sizeof(why));
                        if (r < 0) {
                                fprintf(err, "%s:%u: %s\n", path, lineno, why);
                                /* The refusal is the answer that matters. */
                                failed = r;
                                continue;
                        }
                }

                r = set_from_string(&tmp, k, value, why, sizeof(why));
                if (r == -ENOMEM) {
                        fprintf(err, "%s:%u: out of memory\n", path, lineno);
                        failed = r;
                        break;
                }
                if (r < 0)
                        FAIL("%s", why);
        }
#undef FAIL
        if (line)
                explicit_bzero(line, cap); /* it may have held the secret */

        if (!failed && ferror(f)) {
                r = errno > 0 ? -errno : -EIO;
                fprintf(err, "%s: read error: %s\n", path, strerror(-r));
                failed = r;
        }
        if (failed) {
                config_clear(&tmp);
                return failed;
        }
        config_commit(c, &tmp);
        return 0;
}

/* ---- flags ------------------------------------------------------------- */

/* The key for "--NAME" (name without the dashes, len bytes), or NULL.
 * [daemon] keys also answer to their bare name: --state-dir. */
static const struct key *find_flag(const char *name, size_t len) {
        char buf[96];

        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                const struct key *k = &keys[i];

                flag_name(k, true, buf, sizeof(buf));
                if (strlen(buf + 2) == len && strncmp(buf + 2, name, len) == 0)
                        return k;
                if (strcmp(k->section, "daemon") != 0)
                        continue;
                flag_name(k, false, buf, sizeof(buf));
                if (strlen(buf + 2) == len && strncmp(buf + 2, name, len) == 0)
                        return k;
        }
        return NULL;
}

static bool flag_is(const char *name, size_t len, const char *what) {
        return strlen(what) == len && strncmp(name, what, len) == 0;
}

/* The separate-argument value of argv[*i], advancing *i; NULL when argv
 * ends or the next word is another option (a forgotten value). */
static const char *next_value(int argc, char **argv, int *i) {
        if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0)
                return NULL;
        return argv[++*i];
}

const char *config_path_from_args(int argc, char **argv) {
        const char *path = NULL;

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *name, *eq;
                size_t len;

                if (strcmp(a, "--") == 0)
                        break;
                if (strncmp(a, "--", 2) != 0)
                        continue;
                name = a + 2;
                eq = strchr(name, '=');
                len = eq ? (size_t)(eq - name) : strlen(name);
                if (flag_is(name, len, "config")) {
                        const char *v = eq ? eq + 1 : next_value(argc, argv, &i);
                        if (v)
                                path = v;
                } else if (!eq && find_flag(name, len))
                        next_value(argc, argv, &i); /* skip its value, as the parser will */
        }
        return path;
}

int config_parse_args(struct config *c, int argc, char **argv, FILE *err) {
        struct config tmp;
        int r;

        r = config_dup(&tmp, c);
        if (r < 0) {
                fprintf(err, "out of memory\n");
                return r;
        }

        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *name, *eq, *value;
                const struct key *k;
                char why[1024]; /* a peers entry with a long name says it twice */
                size_t len;

                if (strcmp(a, "-h") == 0) {
                        config_clear(&tmp);
                        return 1;
                }
                if (strcmp(a, "--") == 0) {
                        /* The end of options; ckptd takes no operands. */
                        if (i + 1 == argc)
                                break;
                        a = argv[i + 1];
                }
                if (a != argv[i] || a[0] != '-') {
                        fprintf(err, "unexpected argument '%s' (ckptd takes only options; see "
                                     "--help)\n", a);
                        r = -EINVAL;
                        goto fail;
                }
                if (strncmp(a, "--", 2) != 0) {
                        fprintf(err, "unknown option '%s' (see --help)\n", a);
                        r = -EINVAL;
                        goto fail;
                }
                name = a + 2;
                eq = strchr(name, '=');
                len = eq ? (size_t)(eq - name) : strlen(name);

                if (!eq && flag_is(name, len, "help")) {
                        config_clear(&tmp);
                        return 1;
                }
                if (!eq && flag_is(name, len, "version")) {
                        config_clear(&tmp);
                        return 2;
                }

                k = flag_is(name, len, "config") ? NULL : find_flag(name, len);
                if (!k && !flag_is(name, len, "config")) {
                        fprintf(err, "unknown option '--%.*s' (see --help)\n", (int)len, name);
                        r = -EINVAL;
                        goto fail;
                }
                if (k && k->secret) {
                        /* Refused whatever the value: it is already in argv,
                         * and saying so is all that can be done now. */
                        fprintf(err, "--%.*s: refused on the command line, which other users "
                                     "can read (ps): set [%s] %s in the config file (mode "
                                     "0600), AWS_SECRET_ACCESS_KEY in the daemon's environment, "
                                     "or use a credentials file ([%s] credentials_file)\n",
                                (int)len, name, k->section, k->name, k->section);
                        r = -EINVAL;
                        goto fail;
                }
                value = eq ? eq + 1 : next_value(argc, argv, &i);
                if (!value) {
                        fprintf(err, "option '--%.*s' needs a value\n", (int)len, name);
                        r = -EINVAL;
                        goto fail;
                }
                if (!k) {
                        /* --config: main() read it with config_path_from_args(). */
                        if (!*value) {
                                fprintf(err, "option '--config' needs a value\n");
                                r = -EINVAL;
                                goto fail;
                        }
                        continue;
                }

                r = set_from_string(&tmp, k, value, why, sizeof(why));
                if (r < 0) {
                        fprintf(err, "--%.*s: %s\n", (int)len, name, why);
                        goto fail;
                }
        }
        config_commit(c, &tmp);
        return 0;

fail:
        config_clear(&tmp);
        return r == -ENOMEM ? r : -EINVAL;
}

/* ---- validation, reload, help ----------------------------------------- */

/* Every key's own rule on c, its messages to err; *cluster_ok becomes false
 * when a [cluster] number is out of range (the placement check needs them
 * valid). */
static int check_keys(const struct config *c, FILE *err, bool *cluster_ok) {
        char why[1024];
        int r = 0;

        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                const struct key *k = &keys[i];
                if (k->alias)
                        continue;
                if (key_is_address(k)) {
                        if (check_address_key(c, k, why, sizeof(why)) < 0) {
                                fprintf(err, "%s\n", why);
                                r = -EINVAL;
                        }
                        continue;
                }
                if (key_is_string(k)) {
                        const char *s = key_get_str(c, k);
                        /* state_dir and socket have their own messages below */
                        if (!s || !*s || (!k->check && !k->empty_ok))
                                continue;
                        if (check_string(k, s, why, sizeof(why)) < 0) {
                                fprintf(err, "%s\n", why);
                                r = -EINVAL;
                        }
                        continue;
                }
                if (check_number(k, key_get_u64(c, k), why, sizeof(why)) < 0) {
                        fprintf(err, "%s\n", why);
                        r = -EINVAL;
                        if (strcmp(k->section, "cluster") == 0)
                                *cluster_ok = false;
                }
        }
        return r;
}

int config_check_keys(const struct config *c, FILE *err) {
        bool cluster_ok = true;
        return check_keys(c, err, &cluster_ok);
}

int config_validate(const struct config *c, FILE *err) {
        struct sockaddr_un sa;
        struct topology topo;
        char a[32], b[32], why[1024];
        bool cluster_keys_ok = true; /* each [cluster] key valid on its own */
        int r;

        /* Per-key ranges again: the struct may have been set by code, not
         * parsed. */
        r = check_keys(c, err, &cluster_keys_ok);

        if (!c->state_dir || c->state_dir[0] != '/') {
                fprintf(err, "[daemon] state_dir must be an absolute path, not '%s' (set "
                             "--state-dir or $HOME)\n", c->state_dir ? c->state_dir : "");
                r = -EINVAL;
        }
        if (!c->socket_path || c->socket_path[0] != '/') {
                fprintf(err, "[daemon] socket must be an absolute path, not '%s' (set "
                             "--socket)\n", c->socket_path ? c->socket_path : "");
                r = -EINVAL;
        } else if (strlen(c->socket_path) >= sizeof(sa.sun_path)) {
                fprintf(err, "[daemon] socket path is %zu bytes long; AF_UNIX allows at most "
                             "%zu: choose a shorter --socket\n", strlen(c->socket_path),
                        sizeof(sa.sun_path) - 1);
                r = -EINVAL;
        }

        format_size(c->slot_size, a, sizeof(a));
        format_size(c->pool_size, b, sizeof(b));
        if (c->slot_size > c->pool_size) {
                fprintf(err, "[pool] slot_size = %s is larger than [pool] size = %s\n", a, b);
                r = -EINVAL;
        } else if (c->slot_size && c->pool_size % c->slot_size != 0) {
                fprintf(err, "[pool] size = %s is not a multiple of [pool] slot_size = %s\n",
                        b, a);
                r = -EINVAL;
        } else if (c->slot_size && c->pool_size / c->slot_size > SLOT_COUNT_MAX) {
                fprintf(err, "[pool] size / slot_size = %llu slots; at most %d fit in "
                             "io_uring's registered buffers: raise slot_size or lower size\n",
                        (unsigned long long)(c->pool_size / c->slot_size), SLOT_COUNT_MAX);
                r = -EINVAL;
        }

        uint64_t slots = c->slot_size ? c->pool_size / c->slot_size : 0;
        if (c->max_slots_per_uid > slots && slots > 0) {
                fprintf(err, "[pool] max_slots_per_uid = %u is more than the pool's %llu slots\n",
                        c->max_slots_per_uid, (unsigned long long)slots);
                r = -EINVAL;
        }
        if (c->max_slots_per_connection > slots && slots > 0) {
                fprintf(err, "[pool] max_slots_per_connection = %u is more than the pool's %llu "
                             "slots\n", c->max_slots_per_connection, (unsigned long long)slots);
                r = -EINVAL;
        }

        if (c->io_size > c->slot_size) {
                format_size(c->io_size, b, sizeof(b));
                fprintf(err, "[local] io_size = %s is larger than [pool] slot_size = %s\n", b,
                        a);
                r = -EINVAL;
        }

        if (config_remote_enabled(c) && !(c->remote_bucket && *c->remote_bucket)) {
                fprintf(err, "[remote] bucket is required when [remote] endpoint is set\n");
                r = -EINVAL;
        }
        /* Half a key pair would make the credentials lookup fall through
         * to another source silently; the secret is never named by value. */
        if ((c->remote_access_key_id && *c->remote_access_key_id) !=
            (c->remote_secret_access_key && *c->remote_secret_access_key)) {
                fprintf(err, "[remote] access_key_id and secret_access_key must be set together "
                             "(%s is missing), or neither, to take them from the environment or "
                             "a credentials file\n",
                        c->remote_access_key_id && *c->remote_access_key_id
                                ? "secret_access_key" : "access_key_id");
                r = -EINVAL;
        }
        if (c->cluster_node_index >= c->cluster_node_count) {
                fprintf(err, "[cluster] node_index = %u must be less than [cluster] node_count = "
                             "%u (their defaults come from $SLURM_NODEID and $SLURM_NNODES)\n",
                        c->cluster_node_index, c->cluster_node_count);
                r = -EINVAL;
                cluster_keys_ok = false;
        }
        if (c->cluster_npeers && c->cluster_npeers != c->cluster_node_count) {
                fprintf(err, "[cluster] peers lists %u addresses but [cluster] node_count = %u: "
                             "give one host:port per node, node i's at position i (counting "
                             "from 0)\n", c->cluster_npeers, c->cluster_node_count);
                r = -EINVAL;
        }
        /* A step of a job on several nodes is committed only when the nodes
         * agree (docs/commit.md): they must be able to reach each other. */
        if (c->cluster_node_count > 1 && c->cluster_replication_factor <= 1 &&
            !c->cluster_npeers) {
                fprintf(err, "[cluster] node_count = %u needs [cluster] peers, the host:port of "
                             "every node: the nodes agree on each commit over them (or set "
                             "node_count = 1: a single node)\n",
                        c->cluster_node_count);
                r = -EINVAL;
        }
        if (c->cluster_node_count > 1 && c->cluster_replication_factor <= 1 &&
            !(c->cluster_psk_file && *c->cluster_psk_file)) {
                fprintf(err, "[cluster] node_count = %u needs [cluster] psk_file, the "
                             "pre-shared key with which nodes authenticate each other (the "
                             "same file on every node, mode 0600)\n",
                        c->cluster_node_count);
                r = -EINVAL;
        }
        if (c->cluster_replication_factor > 1 && !c->cluster_npeers) {
                fprintf(err, "[cluster] replication_factor = %u needs [cluster] peers, the "
                             "host:port of every node, to send replicas to (or set "
                             "replication_factor = 1: no replication)\n",
                        c->cluster_replication_factor);
                r = -EINVAL;
        }
        /* a peer's DATA frame is received whole into one pool extent */
        if (c->cluster_replication_factor > 1 && c->slot_size < PEER_DATA_MAX) {
                fprintf(err, "[pool] slot_size = %s is smaller than a peer's data frame (%u MiB): "
                             "with [cluster] replication_factor = %u it must be at least %uM\n",
                        a, PEER_DATA_MAX >> 20, c->cluster_replication_factor,
                        PEER_DATA_MAX >> 20);
                r = -EINVAL;
        }
        if (c->cluster_replication_factor > 1 && !(c->cluster_psk_file && *c->cluster_psk_file)) {
                fprintf(err, "[cluster] replication_factor = %u needs [cluster] psk_file, the "
                             "pre-shared key with which nodes authenticate each other (the "
                             "same file on every node, mode 0600)\n",
                        c->cluster_replication_factor);
                r = -EINVAL;
        }
        /* The placement rule, once its inputs are each valid (else their
         * own messages above say what is wrong). */
        if (cluster_keys_ok) {
                config_topology(c, &topo);
                if (topology_check(&topo, why, sizeof(why)) < 0) {
                        fprintf(err, "[cluster] %s\n", why);
                        r = -EINVAL;
                }
        }
        return r;
}

void config_topology(const struct config *c, struct topology *out) {
        *out = (struct topology){
                .count = c->cluster_node_count,
                .index = c->cluster_node_index,
                .jump = c->cluster_replication_jump,
                .factor = c->cluster_replication_factor,
                .placement = (enum placement)c->cluster_placement,
        };
}

bool config_remote_enabled(const struct config *c) {
        return c->remote_endpoint && c->remote_endpoint[0];
}

/* Whether a and b hold the same value for key k. */
static bool key_equal(const struct config *a, const struct config *b, const struct key *k) {
        if (k->type == TYPE_PEERS) {
                uint32_t na, nb;
                const struct node_address *va = peers_get(a, k, &na), *vb = peers_get(b, k, &nb);

                if (na != nb)
                        return false;
                for (uint32_t i = 0; i < na; i++)
                        if (!peer_equal(&va[i], &vb[i]))
                                return false;
                return true;
        }
        if (k->type == TYPE_ADDRESS)
                return peer_equal(address_get(a, k), address_get(b, k));
        if (key_is_string(k)) {
                const char *sa = key_get_str(a, k), *sb = key_get_str(b, k);
                return (sa == NULL) == (sb == NULL) && (!sa || strcmp(sa, sb) == 0);
        }
        return key_get_u64(a, k) == key_get_u64(b, k);
}

bool config_equal(const struct config *a, const struct config *b) {
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
                if (!key_equal(a, b, &keys[i]))
                        return false;
        return true;
}

void config_reload(struct config *dst, const struct config *src) {
        for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                const struct key *k = &keys[i];
                char from[512], to[512];

                /* Address keys are never reloadable: the peer connections
                 * and the listening socket are made once, at start. */
                if (k->alias)
                        continue;
                if (!k->reloadable || key_is_address(k)) {
                        /* say so rather than silently keep the old value */
                        if (!key_equal(dst, src, k))
                                log_warn("config: [%s] %s changed but takes effect only after a "
                                         "restart", k->section, k->name);
                        continue;
                }
                if (key_is_string(k)) {
                        const char *a = key_get_str(dst, k), *b = key_get_str(src, k);
                        char *copy = NULL;

                        if ((!a && !b) || (a && b && strcmp(a, b) == 0))
                                continue;
                        if (b && !(copy = strdup(b))) {
                                log_error("config: cannot reload [%s] %s: out of memory",
                                          k->section, k->name);
                                continue;
                        }
                        format_value(dst, k, from, sizeof(from));
                        key_set_str(dst, k, copy);
                } else {
                        if (key_get_u64(dst, k) == key_get_u64(src, k))
                                continue;
                        format_value(dst, k, from, sizeof(from));
                        key_set_u64(dst, k, key_get_u64(src, k));
                }
                format_value(dst, k, to, sizeof(to));
                log_notice("config: [%s] %s changed from %s to %s", k->section, k->name, from,
                           to);
        }
}

static const char *metavar(const struct key *k) {
        if (k->metavar)
                return k->metavar;
        switch (k->type) {
        case TYPE_PATH:
                return "PATH";
        case TYPE_STRING:
                return "NAME";
        case TYPE_SIZE:
                return "SIZE";
        case TYPE_DURATION:
                return "DURATION";
        case TYPE_U32:
                return "N";
        case TYPE_BOOL:
                return "BOOL";
        case TYPE_MODE:
                return "MODE";
        case TYPE_LOGLEVEL:
                return "LEVEL";
        case TYPE_PEERS:
                return "HOST:PORT,...";
        case TYPE_ADDRESS:
                return "HOST:PORT";
        case TYPE_CHOICE:
                break;
        }
        return "VALUE";
}

void config_print_help(FILE *out) {
        struct config def;
        bool have_def = config_init(&def) == 0;

        /* main() prints the usage line; this is the option list. */
        fprintf(out,
                "  %-30s read settings from PATH (ckptd.conf(5))\n"
                "  %-30s show this help and exit\n"
                "  %-30s show the version and exit\n",
                "--config=PATH", "-h, --help", "--version");

        for (size_t s = 0; s < ARRAY_SIZE(sections); s++) {
                bool daemon = strcmp(sections[s], "daemon") == 0;

                fprintf(out, "\n[%s]%s\n", sections[s],
                        daemon ? " (also as --daemon-KEY, e.g. --daemon-state-dir)" : "");
                for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
                        const struct key *k = &keys[i];
                        char flag[96], value[512], option[128];

                        if (strcmp(k->section, sections[s]) != 0)
                                continue;
                        if (k->secret) {
                                /* No option to show, and no value either:
                                 * help output ends up in bug reports. */
                                fprintf(out, "  %-30s %s\n      %s%s\n", "(config file only)",
                                        k->name, k->help,
                                        k->reloadable ? " (SIGHUP reloads it)" : "");
                                continue;
                        }
                        flag_name(k, !daemon, flag, sizeof(flag));
                        snprintf(option, sizeof(option), "%s=%s", flag, metavar(k));
                        if (!have_def)
                                snprintf(value, sizeof(value), "?");
                        else if ((key_is_string(k) && !key_get_str(&def, k)) ||
                                 (k->type == TYPE_PEERS && !*peers_field(&def, k)) ||
                                 (k->type == TYPE_ADDRESS && !address_get(&def, k)->host))
                                snprintf(value, sizeof(value), "(unset)");
                        else
                                format_value(&def, k, value, sizeof(value));
                        fprintf(out, "  %-30s %s = %s\n      %s%s\n", option, k->name, value,
                                k->help, k->reloadable ? " (SIGHUP reloads it)" : "");
                }
        }
        if (have_def)
                config_clear(&def);
}
