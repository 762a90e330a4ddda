/* SPDX-License-Identifier: MIT */
/*
 * config — ckptd's settings: embedded defaults, an INI-style file, and
 * command-line flags, applied in that order (docs/ckptd.conf.5).
 *
 * One table describes every key: section, key, type, default, whether
 * SIGHUP can change it, and help text.  The file form is
 *
 *     [pool]
 *     size = 1G
 *
 * and the same key as a flag is --pool-size=1G (section "-" key, '_' -> '-').
 * Sizes take K/M/G/T suffixes (powers of 1024), durations ms/s/m/h (a bare
 * number is milliseconds), booleans yes/no/true/false/1/0, modes are octal.
 *
 * Validation is strict: an unknown section or key, a malformed value, a
 * value out of range, a duplicate key — each is an error naming the file and
 * line (or the flag), and nothing is applied.
 *
 * The object-store secret ([remote] secret_access_key) is the one value
 * that is handled differently: it is refused as a flag (any user can read
 * a command line), accepted only from a file that group and others cannot
 * access, never printed by --help nor logged by a reload, and wiped from
 * memory when freed.
 *
 * [cluster] peers is the one list: "host:port,host:port,...", node i's
 * address at position i; listen is one such address.  A host is an IPv4
 * literal, an IPv6 literal in brackets ([fd00::1]:7000) or a DNS name; the
 * parsed form (struct node_address) keeps it without the brackets, ready
 * for getaddrinfo().
 *
 * Defaults depend on who runs the daemon: as root, state in /var/lib/ckptd
 * and socket /run/ckptd/ckptd.sock; as anyone else, state in
 * $XDG_STATE_HOME/ckptd (~/.local/state/ckptd) and the socket in
 * $XDG_RUNTIME_DIR/ckptd.sock, falling back to the state dir.  systemd's
 * $STATE_DIRECTORY and $RUNTIME_DIRECTORY win when set.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cluster/node_address.h"
#include "cluster/topology.h"

struct config {
        /* [daemon] */
        char *state_dir;
        char *socket_path;
        uint32_t socket_mode;  /* octal, default 0660 */
        char *socket_group;    /* NULL: the daemon's group */
        int log_level;         /* LOG_ERR..LOG_DEBUG; "info" */
        int log_target;        /* enum log_target (util/log.h); "auto" */
        uint32_t workers;      /* checksum threads, default 2 */
        uint32_t client_connections_max;     /* client connections at once: 1024 */
        uint32_t client_connections_per_uid; /* of them one uid (not root) holds: 256 */
        uint32_t open_files_per_uid;   /* held for one uid's saves and reads: 16384 */
        /* [pool] */
        uint64_t pool_size;    /* default 1G */
        uint64_t slot_size;    /* default 64M, multiple of 1M */
        uint64_t pool_wait_ms; /* how long a request waits for a free slot: 30s */
        uint64_t window_lease_ms; /* an uncommitted window is revoked after: 20s, 0 never */
        bool fair_share;          /* several uids active: each holds slots / uids; yes */
        uint32_t max_slots_per_uid;        /* 0: no fixed cap */
        uint32_t max_slots_per_connection; /* in open windows; 0: the uid's share */
        bool memory_tier;         /* keep the newest committed step resident: yes */
        /* [local] */
        uint64_t io_size;      /* bytes per write/read request: 1M, multiple of 4K */
        uint32_t queue_depth;  /* requests in flight: 16 */
        uint32_t keep;         /* keep_latest (old name keep): newest committed kept per job: 3 */
        char *keep_every;      /* keep_every: NULL/"off", "1000" or "6h" (retention_every_parse) */
        bool direct_io;        /* O_DIRECT: yes */
        bool register_buffers; /* fixed buffers: yes (falls back if refused) */
        /* [remote] — the object-store tier, off while remote_endpoint is
         * NULL (config_remote_enabled()).  An empty string in the file or a
         * flag is stored as NULL, meaning "the built-in choice". */
        char *remote_endpoint;         /* "https://host[:port]", "http://127.0.0.1:7480" */
        char *remote_region;           /* NULL: $AWS_REGION, ..., else us-east-1 */
        char *remote_bucket;           /* required when the endpoint is set */
        char *remote_prefix;           /* NULL: object keys start at "jobs/" */
        int remote_addressing;         /* enum s3_addressing: 0 auto, 1 path, 2 virtual */
        char *remote_credentials_file; /* NULL: $AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials */
        char *remote_profile;          /* NULL: $AWS_PROFILE, else "default" */
        char *remote_access_key_id;    /* set together with the secret, or neither */
        char *remote_secret_access_key; /* from the file only; never printed or logged */
        char *remote_ca_file;          /* NULL: the system's CA store */
        uint64_t remote_part_size;     /* multipart part size: 64M, 5M..5G */
        uint32_t remote_concurrency;   /* requests in flight: 8 */
        uint64_t remote_bandwidth;     /* upload cap, bytes/s; 0 = none; reloadable */
        uint32_t remote_keep;          /* keep_latest: committed steps kept per job: 3; reloadable */
        char *remote_keep_every;       /* keep_every, a step count or off; reloadable */
        uint32_t remote_retry_attempts; /* attempts per request, first included: 5 */
        uint64_t remote_audit_interval_ms; /* a pass of the store's copies: 6h; 0 off; reloadable */
        uint32_t remote_audit_sample;  /* blocks read back per object: 4; reloadable */
        /* [cluster] */
        uint32_t replica_keep_latest;  /* replica areas' keep_latest; 0: [local]'s */
        char *replica_keep_every;      /* replica areas' keep_every; NULL: [local]'s */
        uint32_t cluster_node_index;   /* default $SLURM_NODEID, else 0 */
        uint32_t cluster_node_count;   /* default $SLURM_NNODES, else 1; 1..65536 */
        /* Node i's peer address is cluster_peers[i]; NULL and 0 when unset,
         * else exactly node_count entries, no two the same host and port. */
        struct node_address *cluster_peers;
        uint32_t cluster_npeers;
        /* Where the peer server binds; host NULL (the default): 0.0.0.0 and
         * the port of this node's own peers entry. */
        struct node_address cluster_listen;
        uint32_t cluster_replication_jump;   /* J: 1; clique members J apart */
        uint32_t cluster_replication_factor; /* F: 1 (no replication), 1..16 */
        int cluster_placement;               /* enum placement: 0 clique, 1 ring */
        char *cluster_psk_file;              /* NULL: none; required when F > 1 */
        uint64_t cluster_peer_connect_timeout_ms; /* 5s */
        uint64_t cluster_peer_handshake_timeout_ms; /* accept to authenticated: 5s */
        uint64_t cluster_peer_keepalive_ms;         /* TCP keepalive idle: 15s, 0 off */
        bool cluster_peer_frame_mac;                /* MAC peer frames: yes */
        uint32_t cluster_peer_unauthenticated_max;  /* accepted, not authenticated: 64 */
        uint32_t cluster_peer_unauthenticated_per_address; /* of them from one address: 4 */
        /* [scrub] — the background scrub (scrub/scrub.h); all reloadable */
        bool scrub_enabled;          /* yes */
        uint64_t scrub_rate;         /* bytes/s: 50M; 0 ("unlimited"): no limit */
        uint64_t scrub_interval_ms;  /* pass start to pass start: 24h, 1s..8760h */
        bool scrub_idle_priority;    /* read at I/O class idle: yes */
        /* [metrics] listen: host NULL (the default): no HTTP endpoint */
        struct node_address metrics_listen;
};

/* Fill embedded defaults (allocates the path strings).  [cluster]
 * node_index and node_count default to $SLURM_NODEID and $SLURM_NNODES
 * when those hold a value in range, else 0 and 1.  0 or -ENOMEM. */
int config_init(struct config *c);
/* Frees strings and the peers list (wiping the secret first) and leaves
 * them NULL, so calling it twice is harmless. */
void config_clear(struct config *c);

/* Apply a config file.  A missing file is -ENOENT (the caller decides
 * whether that matters); errors print "path:line: what is wrong" to err
 * and return -EINVAL.  A file that sets [remote] secret_access_key while
 * its group or others have any permission on it (mode & 077) is refused
 * with -EPERM: the secret is already readable (or replaceable) by them.
 * Nothing is applied on any error. */
int config_load_file(struct config *c, const char *path, FILE *err);

/* Apply "--section-key=value" / "--section-key value" flags from argv.
 * Also accepts --config=PATH (ignored here: main reads it first), --help,
 * --version (returned as 1 and 2 so main can act).  -EINVAL on an unknown
 * flag or bad value, described on err; also for
 * --remote-secret-access-key, which is refused because any user can read
 * a command line (ps, /proc/PID/cmdline). */
int config_parse_args(struct config *c, int argc, char **argv, FILE *err);

/* Find --config=PATH / --config PATH in argv without applying anything else,
 * or NULL. */
const char *config_path_from_args(int argc, char **argv);

/* Cross-field checks after everything is applied (slot_size <= pool_size,
 * pool_size a multiple of slot_size, a bucket when an endpoint is set,
 * node_index < node_count, access key and secret together, as many peers
 * as node_count, peers and psk_file when replication_factor > 1, and
 * topology_check() of the [cluster] values, its message prefixed with
 * "[cluster] "), and the per-key checks again for a struct set by code
 * (peer hosts, ports, duplicates included).  -EINVAL, described on err
 * (never showing the secret).  The psk file itself is not opened here. */
int config_validate(const struct config *c, FILE *err);

/* Only the per-key rules of config_validate(): each value within the
 * range, multiple, form and choices ckptd.conf(5) documents for its key
 * (what a successful config_load_file() or config_parse_args() guarantees;
 * the fuzz target checks that it does).  0, or -EINVAL described on err. */
int config_check_keys(const struct config *c, FILE *err);

/* Whether a and b hold the same value for every key (strings by content,
 * peer lists entry by entry). */
bool config_equal(const struct config *a, const struct config *b);

/* Copy the keys SIGHUP may change from src into dst; log each change (a
 * secret's change is logged by name only). */
void config_reload(struct config *dst, const struct config *src);

/* Print every key with its default and help text (for --help and the man
 * page's sake).  Shows no value for the secret. */
void config_print_help(FILE *out);

/* Whether the object-store tier is configured (an endpoint is set). */
bool config_remote_enabled(const struct config *c);

/* The [cluster] placement values as a struct topology (index, count,
 * jump, factor, placement), for the topology_*() queries. */
void config_topology(const struct config *c, struct topology *out);


/* Parse helpers, exported for tests. */
int config_parse_size(const char *s, uint64_t *out);
int config_parse_duration_ms(const char *s, uint64_t *out);
int config_parse_bool(const char *s, bool *out);
