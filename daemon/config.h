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
 * Defaults depend on who runs the daemon: as root, state in /var/lib/ckptd
 * and socket /run/ckptd/ckptd.sock; as anyone else, state in
 * $XDG_STATE_HOME/ckptd (~/.local/state/ckptd) and the socket in
 * $XDG_RUNTIME_DIR/ckptd.sock, falling back to the state dir.  systemd's
 * $STATE_DIRECTORY and $RUNTIME_DIRECTORY win when set.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct config {
        /* [daemon] */
        char *state_dir;
        char *socket_path;
        uint32_t socket_mode;  /* octal, default 0660 */
        char *socket_group;    /* NULL: the daemon's group */
        int log_level;         /* LOG_ERR..LOG_DEBUG; "info" */
        uint32_t workers;      /* checksum threads, default 2 */
        /* [pool] */
        uint64_t pool_size;    /* default 1G */
        uint64_t slot_size;    /* default 64M, multiple of 1M */
        uint64_t pool_wait_ms; /* how long a request waits for a free slot: 30s */
        /* [local] */
        uint64_t io_size;      /* bytes per write/read request: 1M, multiple of 4K */
        uint32_t queue_depth;  /* requests in flight: 16 */
        uint32_t keep;         /* committed checkpoints kept per job: 3, >= 1 */
        bool direct_io;        /* O_DIRECT: yes */
        bool register_buffers; /* fixed buffers: yes (falls back if refused) */
};

/* Fill embedded defaults (allocates the path strings).  0 or -ENOMEM. */
int config_init(struct config *c);
void config_clear(struct config *c); /* frees strings */

/* Apply a config file.  A missing file is -ENOENT (the caller decides
 * whether that matters); errors print "path:line: what is wrong" to err. */
int config_load_file(struct config *c, const char *path, FILE *err);

/* Apply "--section-key=value" / "--section-key value" flags from argv.
 * Also accepts --config=PATH (ignored here: main reads it first), --help,
 * --version (returned as 1 and 2 so main can act).  -EINVAL on an unknown
 * flag or bad value, described on err. */
int config_parse_args(struct config *c, int argc, char **argv, FILE *err);

/* Find --config=PATH / --config PATH in argv without applying anything else,
 * or NULL. */
const char *config_path_from_args(int argc, char **argv);

/* Cross-field checks after everything is applied (slot_size <= pool_size,
 * pool_size a multiple of slot_size, ...).  -EINVAL, described on err. */
int config_validate(const struct config *c, FILE *err);

/* Copy the keys SIGHUP may change from src into dst; log each change. */
void config_reload(struct config *dst, const struct config *src);

/* Print every key with its default and help text (for --help and the man
 * page's sake). */
void config_print_help(FILE *out);

/* Parse helpers, exported for tests. */
int config_parse_size(const char *s, uint64_t *out);
int config_parse_duration_ms(const char *s, uint64_t *out);
int config_parse_bool(const char *s, bool *out);
