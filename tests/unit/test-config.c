/* SPDX-License-Identifier: MIT */
/*
 * Unit test for config (and the bits of util/log it leans on): defaults
 * under each environment rule, the file format, every error a user can get
 * with its exact "path:line:" prefix, flags in both spellings, precedence,
 * the cross-field checks, SIGHUP reload, and the value parsers' edges.
 * The [remote] and [cluster] sections add the object-store rules (endpoint,
 * bucket, prefix), the Slurm-derived defaults, and the handling of the
 * secret: refused as a flag, refused from a file others can read, never
 * in help or reload logs.  The [cluster] replication keys add the one list
 * value (peers: hosts, ports, duplicates, its length against node_count),
 * the listen address, and the placement rule that config_validate() asks
 * cluster/topology about.
 *
 * Error output is captured with open_memstream() and compared literally
 * where the wording is part of the contract (the location prefix, the key
 * named), by substring elsewhere.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "util/log.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

static int failures;
static char tmpdir[] = "/tmp/test-config.XXXXXX";

#define CHECK(cond, ...)                                                  \
        do {                                                              \
                if (!(cond)) {                                            \
                        fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, \
                                __LINE__, #cond);                         \
                        fprintf(stderr, __VA_ARGS__);                     \
                        fputc('\n', stderr);                              \
                        failures++;                                       \
                }                                                         \
        } while (0)

#define CHECK_STR(a, b)                                                   \
        do {                                                              \
                const char *a_ = (a), *b_ = (b);                          \
                CHECK(a_ && b_ && strcmp(a_, b_) == 0, "'%s' != '%s'",    \
                      a_ ? a_ : "(null)", b_ ? b_ : "(null)");            \
        } while (0)

/* Captured error stream. */
struct capture {
        FILE *f;
        char *buf;
        size_t len;
};

static void capture_open(struct capture *c) {
        c->buf = NULL;
        c->len = 0;
        c->f = open_memstream(&c->buf, &c->len);
        if (!c->f) {
                perror("open_memstream");
                exit(1);
        }
}

/* Flush and return the text so far (owned by c). */
static const char *capture_text(struct capture *c) {
        fflush(c->f);
        return c->buf ? c->buf : "";
}

static void capture_close(struct capture *c) {
        fclose(c->f);
        free(c->buf);
}

static void write_file(const char *path, const char *text) {
        FILE *f = fopen(path, "w");
        if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
                perror(path);
                exit(1);
        }
}

/* write_file() with exact permission bits, whatever the umask (a new
 * file: the old one may be read-only to its owner). */
static void write_file_mode(const char *path, const char *text, mode_t mode) {
        unlink(path);
        write_file(path, text);
        if (chmod(path, mode) < 0) {
                perror(path);
                exit(1);
        }
}

static char *tmp_path(const char *name) {
        char *p;
        if (asprintf(&p, "%s/%s", tmpdir, name) < 0)
                exit(1);
        return p;
}

/* A [cluster] peers value of n distinct entries, "node0.x:1,node1.x:2,...",
 * for configs with many nodes (node_count > 1 needs one per node). */
static char *peer_list(unsigned n) {
        size_t len = (size_t)n * 24 + 1, used = 0;
        char *list = malloc(len);

        if (!list)
                exit(1);
        list[0] = '\0';
        for (unsigned i = 0; i < n; i++)
                used += (size_t)snprintf(list + used, len - used, "%snode%u.x:%u",
                                         i ? "," : "", i, 1 + i % 4);
        return list;
}

/* Environment the defaults depend on, reset to a known state. */
static void env_reset(void) {
        setenv("HOME", "/home/tester", 1);
        unsetenv("XDG_STATE_HOME");
        unsetenv("XDG_RUNTIME_DIR");
        unsetenv("STATE_DIRECTORY");
        unsetenv("RUNTIME_DIRECTORY");
        /* Inside a Slurm job these set the [cluster] defaults. */
        unsetenv("SLURM_NODEID");
        unsetenv("SLURM_NNODES");
}

static struct config config_default(void) {
        struct config c;
        int r = config_init(&c);
        if (r < 0) {
                fprintf(stderr, "config_init: %s\n", strerror(-r));
                exit(1);
        }
        return c;
}

/* ---- stderr capture for log output ------------------------------------- */

static int saved_stderr = -1;
static char *stderr_file;

static void stderr_capture_begin(void) {
        int fd;

        fflush(stderr);
        fd = open(stderr_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        saved_stderr = dup(STDERR_FILENO);
        if (fd < 0 || saved_stderr < 0 || dup2(fd, STDERR_FILENO) < 0) {
                perror("capture stderr");
                exit(1);
        }
        close(fd);
}

/* Restore stderr; returns what was written (malloc'ed). */
static char *stderr_capture_end(void) {
        char *text = NULL;
        size_t len = 0;
        FILE *f;

        dup2(saved_stderr, STDERR_FILENO);
        close(saved_stderr);
        f = fopen(stderr_file, "r");
        if (!f || getdelim(&text, &len, '\0', f) < 0) {
                free(text);
                text = strdup("");
        }
        if (f)
                fclose(f);
        return text;
}

/* ---- log --------------------------------------------------------------- */

/* "YYYY-MM-DD HH:MM:SS.mmm ckptd[PID]: LEVEL: MSG" */
static int check_log_line(const char *line, const char *level, const char *msg) {
        char want[256];
        int y, mo, d, h, mi, s, ms, n = 0;

        if (sscanf(line, "%4d-%2d-%2d %2d:%2d:%2d.%3d %n", &y, &mo, &d, &h, &mi, &s, &ms,
                   &n) != 7 || n != 24)
                return -1;
        snprintf(want, sizeof(want), "ckptd[%ld]: %s: %s", (long)getpid(), level, msg);
        return strcmp(line + n, want) == 0 ? 0 : -1;
}

#define LOG_THREADS 4
#define LOG_LINES 500

static void *log_thread(void *arg) {
        long id = (long)arg;
        for (int i = 0; i < LOG_LINES; i++)
                log_error("thread %ld line %d %s", id, i,
                          "padding padding padding padding padding padding padding");
        return NULL;
}

static void test_log(void) {
        unsigned long long errors0;
        char *out, *line, *save = NULL;
        int n_lines = 0, bad = 0;
        pid_t pid;
        int status = -1;

        CHECK(log_level_parse("error") == LOG_ERR, "error");
        CHECK(log_level_parse("err") == LOG_ERR, "err");
        CHECK(log_level_parse("warning") == LOG_WARNING, "warning");
        CHECK(log_level_parse("warn") == LOG_WARNING, "warn");
        CHECK(log_level_parse("notice") == LOG_NOTICE, "notice");
        CHECK(log_level_parse("info") == LOG_INFO, "info");
        CHECK(log_level_parse("debug") == LOG_DEBUG, "debug");
        CHECK(log_level_parse("DEBUG") == LOG_DEBUG, "case");
        CHECK(log_level_parse("") == -EINVAL, "empty");
        CHECK(log_level_parse("verbose") == -EINVAL, "verbose");
        CHECK(log_level_parse("7") == -EINVAL, "number");
        CHECK(log_level_parse(NULL) == -EINVAL, "NULL");

        /* Journal mode is decided once per process, so it is checked in a
         * child whose stderr is the stream JOURNAL_STREAM names. */
        pid = fork();
        if (pid == 0) {
                struct stat st;
                char val[64];
                stderr_capture_begin();
                fstat(STDERR_FILENO, &st);
                snprintf(val, sizeof(val), "%llu:%llu", (unsigned long long)st.st_dev,
                         (unsigned long long)st.st_ino);
                setenv("JOURNAL_STREAM", val, 1);
                /* the stream, not the native socket (which a machine with
                 * journald has; test_journal.py covers that path) */
                log_set_target(LOG_TARGET_STDERR);
                log_set_level(LOG_INFO);
                log_warn("journal %d", 1);
                log_debug("hidden");
                out = stderr_capture_end();
                if (strcmp(out, "<4>journal 1\n") != 0) {
                        fprintf(stderr, "journal mode wrote '%s'\n", out);
                        _exit(1);
                }
                _exit(0);
        }
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                      WEXITSTATUS(status) == 0,
              "journal-mode line is '<4>journal 1'");

        /* A JOURNAL_STREAM that names another stream (inherited by a child
         * whose stderr was redirected) must not switch to "<N>" lines. */
        pid = fork();
        if (pid == 0) {
                setenv("JOURNAL_STREAM", "1:1", 1);
                stderr_capture_begin();
                log_warn("plain");
                out = stderr_capture_end();
                out[strcspn(out, "\n")] = '\0';
                _exit(check_log_line(out, "warning", "plain") == 0 ? 0 : 1);
        }
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                      WEXITSTATUS(status) == 0,
              "foreign JOURNAL_STREAM ignored");

        unsetenv("JOURNAL_STREAM");
        CHECK(log_last_error() == NULL, "no error logged yet");
        errors0 = log_error_count();

        log_set_level(LOG_NOTICE);
        CHECK(log_get_level() == LOG_NOTICE, "level %d", log_get_level());
        stderr_capture_begin();
        errno = EACCES;
        log_info("not shown");
        log_notice("shown %s", "here");
        log_error("bad thing: %m");
        CHECK(errno == EACCES, "log_msg keeps errno");
        log_warn("two\nlines");
        out = stderr_capture_end();
        line = strtok_r(out, "\n", &save);
        CHECK(line && check_log_line(line, "notice", "shown here") == 0, "notice line '%s'",
              line ? line : "");
        line = strtok_r(NULL, "\n", &save);
        CHECK(line && check_log_line(line, "error", "bad thing: Permission denied") == 0,
              "error line '%s'", line ? line : "");
        line = strtok_r(NULL, "\n", &save);
        CHECK(line && check_log_line(line, "warning", "two lines") == 0,
              "embedded newline flattened: '%s'", line ? line : "");
        CHECK(strtok_r(NULL, "\n", &save) == NULL, "info suppressed at notice level");
        free(out);
        CHECK(log_error_count() == errors0 + 1, "count %llu", log_error_count());
        CHECK_STR(log_last_error(), "bad thing: Permission denied");

        /* Out-of-range levels clamp rather than silence errors. */
        log_set_level(-5);
        CHECK(log_get_level() == LOG_ERR, "clamped to %d", log_get_level());
        log_set_level(99);
        CHECK(log_get_level() == LOG_DEBUG, "clamped to %d", log_get_level());

        /* A long message is truncated, and the remembered copy is bounded. */
        {
                char big[3000];
                memset(big, 'x', sizeof(big) - 1);
                big[sizeof(big) - 1] = '\0';
                stderr_capture_begin();
                log_error("%s", big);
                out = stderr_capture_end();
                CHECK(strlen(out) < 2300 && out[strlen(out) - 1] == '\n' &&
                              strstr(out, "...\n"),
                      "long line truncated with '...' (%zu bytes)", strlen(out));
                free(out);
                /* 512 bytes: a text field of the STATUS reply (docs/protocol.md) */
                CHECK(strlen(log_last_error()) == 512, "last error %zu bytes",
                      strlen(log_last_error()));
        }

        /* Lines from concurrent threads never interleave. */
        errors0 = log_error_count();
        stderr_capture_begin();
        {
                pthread_t t[LOG_THREADS];
                for (long i = 0; i < LOG_THREADS; i++)
                        pthread_create(&t[i], NULL, log_thread, (void *)i);
                for (int i = 0; i < LOG_THREADS; i++)
                        pthread_join(t[i], NULL);
        }
        out = stderr_capture_end();
        save = NULL;
        for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                const char *p = strstr(line, ": error: thread ");
                long id;
                int i, n = 0;
                n_lines++;
                if (!p || sscanf(p, ": error: thread %ld line %d %n", &id, &i, &n) != 2 ||
                    strcmp(p + n, "padding padding padding padding padding padding padding") != 0)
                        bad++;
        }
        free(out);
        CHECK(n_lines == LOG_THREADS * LOG_LINES && bad == 0, "%d lines, %d malformed",
              n_lines, bad);
        CHECK(log_error_count() == errors0 + LOG_THREADS * LOG_LINES, "count %llu",
              log_error_count() - errors0);
        log_set_level(LOG_INFO);
}

/* ---- parse helpers ----------------------------------------------------- */

static void check_size(const char *s, int want_r, uint64_t want) {
        uint64_t v = 12345;
        int r = config_parse_size(s, &v);
        CHECK(r == want_r, "config_parse_size(\"%s\") = %d, want %d", s, r, want_r);
        if (want_r == 0)
                CHECK(v == want, "config_parse_size(\"%s\") = %llu, want %llu", s,
                      (unsigned long long)v, (unsigned long long)want);
        else
                CHECK(v == 12345, "config_parse_size(\"%s\") wrote on failure", s);
}

static void check_duration(const char *s, int want_r, uint64_t want) {
        uint64_t v = 12345;
        int r = config_parse_duration_ms(s, &v);
        CHECK(r == want_r, "config_parse_duration_ms(\"%s\") = %d, want %d", s, r, want_r);
        if (want_r == 0)
                CHECK(v == want, "config_parse_duration_ms(\"%s\") = %llu, want %llu", s,
                      (unsigned long long)v, (unsigned long long)want);
}

static void check_bool(const char *s, int want_r, bool want) {
        bool v = !want;
        int r = config_parse_bool(s, &v);
        CHECK(r == want_r, "config_parse_bool(\"%s\") = %d, want %d", s, r, want_r);
        if (want_r == 0)
                CHECK(v == want, "config_parse_bool(\"%s\") = %d", s, v);
}

static void test_parse_helpers(void) {
        check_size("0", 0, 0);
        check_size("1", 0, 1);
        check_size("4096", 0, 4096);
        check_size("4K", 0, 4 * KiB);
        check_size("4k", 0, 4 * KiB);
        check_size("4KiB", 0, 4 * KiB);
        check_size("64M", 0, 64 * MiB);
        check_size("64MiB", 0, 64 * MiB);
        check_size("1G", 0, GiB);
        check_size("1gib", 0, GiB);
        check_size("2T", 0, 2 * TiB);
        check_size("2TiB", 0, 2 * TiB);
        check_size("18446744073709551615", 0, UINT64_MAX);
        check_size("16777215T", 0, 16777215 * TiB);
        check_size("16777216T", -ERANGE, 0);
        check_size("18446744073709551616", -ERANGE, 0);
        check_size("99999999999T", -ERANGE, 0);
        check_size("99999999999999999999999", -ERANGE, 0);
        check_size("-1", -EINVAL, 0);
        check_size("+1", -EINVAL, 0);
        check_size("1.5G", -EINVAL, 0);
        check_size("", -EINVAL, 0);
        check_size("10x", -EINVAL, 0);
        check_size("G", -EINVAL, 0);
        check_size(" 1G", -EINVAL, 0);
        check_size("1 G", -EINVAL, 0);
        check_size("1G ", -EINVAL, 0);
        check_size("1GB", -EINVAL, 0);
        check_size("1KK", -EINVAL, 0);
        check_size("0x10", -EINVAL, 0);
        check_size(NULL, -EINVAL, 0);

        check_duration("0", 0, 0);
        check_duration("250", 0, 250);
        check_duration("250ms", 0, 250);
        check_duration("30s", 0, 30000);
        check_duration("5m", 0, 300000);
        check_duration("5min", 0, 300000);
        check_duration("2h", 0, 7200000);
        check_duration("1.5s", -EINVAL, 0);
        check_duration("5M", -EINVAL, 0);
        check_duration("5S", -EINVAL, 0);
        check_duration("-1", -EINVAL, 0);
        check_duration("", -EINVAL, 0);
        check_duration("10x", -EINVAL, 0);
        check_duration("s", -EINVAL, 0);
        check_duration("5 s", -EINVAL, 0);
        check_duration("9999999999999999h", -ERANGE, 0);

        check_bool("yes", 0, true);
        check_bool("YES", 0, true);
        check_bool("true", 0, true);
        check_bool("on", 0, true);
        check_bool("1", 0, true);
        check_bool("no", 0, false);
        check_bool("False", 0, false);
        check_bool("off", 0, false);
        check_bool("0", 0, false);
        check_bool("", -EINVAL, false);
        check_bool("maybe", -EINVAL, false);
        check_bool("2", -EINVAL, false);
        check_bool("yes ", -EINVAL, false);
        check_bool("y", -EINVAL, false);
}

/* ---- defaults ---------------------------------------------------------- */

static void check_numeric_defaults(const struct config *c) {
        CHECK(c->socket_mode == 0660, "socket_mode %o", c->socket_mode);
        CHECK(c->socket_group == NULL, "socket_group %s", c->socket_group);
        CHECK(c->log_level == LOG_INFO, "log_level %d", c->log_level);
        CHECK(c->workers == 2, "workers %u", c->workers);
        CHECK(c->pool_size == GiB, "pool_size %llu", (unsigned long long)c->pool_size);
        CHECK(c->slot_size == 64 * MiB, "slot_size %llu", (unsigned long long)c->slot_size);
        CHECK(c->pool_wait_ms == 30000, "pool_wait_ms %llu",
              (unsigned long long)c->pool_wait_ms);
        CHECK(c->window_lease_ms == 20000, "window_lease_ms %llu",
              (unsigned long long)c->window_lease_ms);
        CHECK(c->fair_share && c->max_slots_per_uid == 0 && c->max_slots_per_connection == 0,
              "pool shares");
        CHECK(c->io_size == MiB, "io_size %llu", (unsigned long long)c->io_size);
        CHECK(c->queue_depth == 16, "queue_depth %u", c->queue_depth);
        CHECK(c->keep == 3, "keep %u", c->keep);
        CHECK(c->direct_io == true, "direct_io");
        CHECK(c->register_buffers == true, "register_buffers");
        CHECK(c->remote_endpoint == NULL && c->remote_region == NULL &&
                      c->remote_bucket == NULL && c->remote_prefix == NULL &&
                      c->remote_credentials_file == NULL && c->remote_profile == NULL &&
                      c->remote_access_key_id == NULL && c->remote_secret_access_key == NULL &&
                      c->remote_ca_file == NULL,
              "[remote] strings unset (endpoint '%s', bucket '%s')",
              c->remote_endpoint ? c->remote_endpoint : "(null)",
              c->remote_bucket ? c->remote_bucket : "(null)");
        CHECK(c->remote_addressing == 0, "remote_addressing %d", c->remote_addressing);
        CHECK(c->remote_part_size == 64 * MiB, "remote_part_size %llu",
              (unsigned long long)c->remote_part_size);
        CHECK(c->remote_concurrency == 8, "remote_concurrency %u", c->remote_concurrency);
        CHECK(c->remote_bandwidth == 0, "remote_bandwidth %llu",
              (unsigned long long)c->remote_bandwidth);
        CHECK(c->remote_keep == 3, "remote_keep %u", c->remote_keep);
        CHECK(c->scrub_enabled && c->scrub_idle_priority && c->scrub_rate == 50 * MiB &&
                      c->scrub_interval_ms == 24 * 3600 * 1000ull,
              "[scrub] defaults: enabled %d rate %llu interval %llu", c->scrub_enabled,
              (unsigned long long)c->scrub_rate, (unsigned long long)c->scrub_interval_ms);
        CHECK(c->remote_retry_attempts == 5, "remote_retry_attempts %u",
              c->remote_retry_attempts);
        CHECK(c->cluster_node_index == 0, "cluster_node_index %u", c->cluster_node_index);
        CHECK(c->cluster_node_count == 1, "cluster_node_count %u", c->cluster_node_count);
        CHECK(c->cluster_peers == NULL && c->cluster_npeers == 0, "cluster_peers: %u entries",
              c->cluster_npeers);
        CHECK(c->cluster_listen.host == NULL && c->cluster_listen.port == 0,
              "cluster_listen '%s' port %u", c->cluster_listen.host ? c->cluster_listen.host : "",
              c->cluster_listen.port);
        CHECK(c->cluster_replication_jump == 1, "replication_jump %u",
              c->cluster_replication_jump);
        CHECK(c->cluster_replication_factor == 1, "replication_factor %u",
              c->cluster_replication_factor);
        CHECK(c->cluster_placement == PLACEMENT_CLIQUE, "placement %d", c->cluster_placement);
        CHECK(c->cluster_psk_file == NULL, "psk_file %s", c->cluster_psk_file);
        CHECK(c->cluster_peer_connect_timeout_ms == 5000, "peer_connect_timeout %llu",
              (unsigned long long)c->cluster_peer_connect_timeout_ms);
        CHECK(c->client_connections_max == 1024, "client_connections_max %u",
              c->client_connections_max);
        CHECK(c->client_connections_per_uid == 256, "client_connections_per_uid %u",
              c->client_connections_per_uid);
        CHECK(c->open_files_per_uid == 16384, "open_files_per_uid %u", c->open_files_per_uid);
        CHECK(c->cluster_peer_handshake_timeout_ms == 5000, "peer_handshake_timeout %llu",
              (unsigned long long)c->cluster_peer_handshake_timeout_ms);
        CHECK(c->cluster_peer_keepalive_ms == 15000, "peer_keepalive %llu",
              (unsigned long long)c->cluster_peer_keepalive_ms);
        CHECK(c->cluster_peer_frame_mac, "peer_frame_mac defaults to yes");
        CHECK(c->cluster_peer_unauthenticated_max == 64, "peer_unauthenticated_max %u",
              c->cluster_peer_unauthenticated_max);
        CHECK(c->cluster_peer_unauthenticated_per_address == 4,
              "peer_unauthenticated_per_address %u",
              c->cluster_peer_unauthenticated_per_address);
        CHECK(!config_remote_enabled(c), "remote tier off by default");
}

static void check_paths(const char *what, const char *state, const char *sock) {
        struct config c = config_default();
        CHECK(strcmp(c.state_dir, state) == 0, "%s: state_dir '%s', want '%s'", what,
              c.state_dir, state);
        CHECK(strcmp(c.socket_path, sock) == 0, "%s: socket '%s', want '%s'", what,
              c.socket_path, sock);
        config_clear(&c);
}

/* The fallback socket (no runtime dir, not root) lives in the state dir and
 * moves with --state-dir; an explicit socket stays put. */
static int parse(struct config *c, FILE *err, int argc, const char **argv) {
        return config_parse_args(c, argc, (char **)argv, err);
}

#define ARGS(...) (const char *[]){ "ckptd", __VA_ARGS__, NULL }
#define NARGS(...) (int)(sizeof((const char *[]){ "ckptd", __VA_ARGS__ }) / sizeof(char *))
#define PARSE(c, cap, ...) parse(c, (cap)->f, NARGS(__VA_ARGS__), ARGS(__VA_ARGS__))

static void test_socket_follows_state_dir(void) {
        struct config c = config_default();
        struct capture cap;

        capture_open(&cap);
        CHECK(PARSE(&c, &cap, "--state-dir=/scratch/ck/") == 0, "state-dir");
        CHECK_STR(c.socket_path, "/scratch/ck/ckptd.sock");
        CHECK(PARSE(&c, &cap, "--socket=/tmp/s.sock", "--state-dir=/other") == 0, "x");
        CHECK_STR(c.socket_path, "/tmp/s.sock");
        CHECK_STR(capture_text(&cap), "");
        capture_close(&cap);
        config_clear(&c);
}

/* The rules for a user that is not root. */
static void test_defaults_user(void) {
        env_reset();
        check_paths("HOME only", "/home/tester/.local/state/ckptd",
                    "/home/tester/.local/state/ckptd/ckptd.sock");
        setenv("HOME", "/home/tester/", 1);
        check_paths("HOME with slash", "/home/tester/.local/state/ckptd",
                    "/home/tester/.local/state/ckptd/ckptd.sock");
        setenv("XDG_STATE_HOME", "/xdg/state", 1);
        check_paths("XDG_STATE_HOME", "/xdg/state/ckptd", "/xdg/state/ckptd/ckptd.sock");
        setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
        check_paths("XDG_RUNTIME_DIR", "/xdg/state/ckptd", "/run/user/1000/ckptd.sock");
        /* The XDG spec: relative values are invalid and ignored. */
        setenv("XDG_STATE_HOME", "relative/state", 1);
        setenv("XDG_RUNTIME_DIR", "relative/run", 1);
        check_paths("relative XDG", "/home/tester/.local/state/ckptd",
                    "/home/tester/.local/state/ckptd/ckptd.sock");
        setenv("STATE_DIRECTORY", "/var/lib/first:/var/lib/second", 1);
        setenv("RUNTIME_DIRECTORY", "/run/first:/run/second", 1);
        check_paths("systemd dirs", "/var/lib/first", "/run/first/ckptd.sock");
        env_reset();
        test_socket_follows_state_dir();
}

static void test_defaults(void) {
        struct config c;
        struct capture cap;

        env_reset();
        c = config_default();
        check_numeric_defaults(&c);
        capture_open(&cap);
        CHECK(config_validate(&c, cap.f) == 0, "defaults validate: %s", capture_text(&cap));
        capture_close(&cap);
        config_clear(&c);
        CHECK(c.state_dir == NULL && c.socket_path == NULL, "config_clear frees strings");
        config_clear(&c); /* twice is harmless */

        if (geteuid() == 0) {
                pid_t pid;
                int status = -1;

                check_paths("root", "/var/lib/ckptd", "/run/ckptd/ckptd.sock");
                setenv("XDG_STATE_HOME", "/xdg/state", 1);
                setenv("XDG_RUNTIME_DIR", "/run/user/0", 1);
                check_paths("root ignores XDG", "/var/lib/ckptd", "/run/ckptd/ckptd.sock");
                setenv("STATE_DIRECTORY", "/var/lib/ckptd-unit", 1);
                setenv("RUNTIME_DIRECTORY", "/run/ckptd-unit", 1);
                check_paths("root, systemd dirs", "/var/lib/ckptd-unit",
                            "/run/ckptd-unit/ckptd.sock");
                env_reset();

                /* The user rules, as nobody. */
                pid = fork();
                if (pid == 0) {
                        if (setresgid(65534, 65534, 65534) < 0 ||
                            setresuid(65534, 65534, 65534) < 0)
                                _exit(77);
                        test_defaults_user();
                        _exit(failures ? 1 : 0);
                }
                CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status),
                      "user-defaults child");
                if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
                        printf("note: cannot drop to uid 65534; user defaults not tested\n");
                else
                        CHECK(WEXITSTATUS(status) == 0, "user defaults (see above)");
        } else {
                test_defaults_user();
                printf("note: not root; root defaults not tested\n");
        }
}

/* ---- file -------------------------------------------------------------- */

static void test_file_all_types(void) {
        char *path = tmp_path("all.conf");
        struct config c = config_default();
        struct capture cap;
        int r;

        write_file(path,
                   "# a comment\n"
                   "; another comment\n"
                   "   # indented comment\n"
                   "\n"
                   "   \t\n"
                   "[daemon]\n"
                   "state_dir = /srv/ckpt\n"
                   "socket=/run/x/ckptd.sock\n"
                   "  socket_mode   =   0600  \n"
                   "socket_group = trainers\n"
                   "log_level = debug\n"
                   "workers = 8\r\n"
                   "[ pool ]\n"
                   "size = 4G\n"
                   "slot_size = 128M\n"
                   "wait_timeout = 2m\n"
                   "window_lease = 90s\n"
                   "fair_share = no\n"
                   "max_slots_per_uid = 24\n"
                   "max_slots_per_connection = 4\n"
                   "[local]\n"
                   "io_size = 512K\n"
                   "queue_depth = 64\n"
                   "keep = 5\n"
                   "direct_io = no\n"
                   "register_buffers = off\n"
                   "[pool]\n" /* a section may reopen */
                   "# last line without newline\n"
                   "");
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == 0, "load: %d %s", r, capture_text(&cap));
        CHECK_STR(capture_text(&cap), "");
        CHECK_STR(c.state_dir, "/srv/ckpt");
        CHECK_STR(c.socket_path, "/run/x/ckptd.sock");
        CHECK(c.socket_mode == 0600, "socket_mode %o", c.socket_mode);
        CHECK_STR(c.socket_group, "trainers");
        CHECK(c.log_level == LOG_DEBUG, "log_level %d", c.log_level);
        CHECK(c.workers == 8, "workers %u", c.workers);
        CHECK(c.pool_size == 4 * GiB, "pool_size");
        CHECK(c.slot_size == 128 * MiB, "slot_size");
        CHECK(c.pool_wait_ms == 120000, "wait %llu", (unsigned long long)c.pool_wait_ms);
        CHECK(c.window_lease_ms == 90000 && !c.fair_share && c.max_slots_per_uid == 24 &&
                      c.max_slots_per_connection == 4,
              "pool shares");
        CHECK(c.io_size == 512 * KiB, "io_size");
        CHECK(c.queue_depth == 64, "queue_depth");
        CHECK(c.keep == 5, "keep");
        CHECK(!c.direct_io, "direct_io");
        CHECK(!c.register_buffers, "register_buffers");
        CHECK(config_validate(&c, cap.f) == 0, "validate: %s", capture_text(&cap));
        capture_close(&cap);

        /* A later file changes only what it names; an empty socket_group
         * goes back to "unset". */
        write_file(path, "[daemon]\nsocket_group =\n[local]\nkeep = 7\n");
        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0, "second file: %s", capture_text(&cap));
        capture_close(&cap);
        CHECK(c.socket_group == NULL, "socket_group reset to NULL");
        CHECK(c.keep == 7 && c.queue_depth == 64 && c.pool_size == 4 * GiB, "merge");

        /* UTF-8 BOM and an empty file are fine. */
        write_file(path, "\xef\xbb\xbf[local]\nkeep = 9\n");
        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0 && c.keep == 9, "BOM: %s",
              capture_text(&cap));
        capture_close(&cap);
        write_file(path, "");
        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0, "empty file");
        capture_close(&cap);

        config_clear(&c);
        free(path);
}

/* Load text (written with mode) that must fail with want_r; the whole
 * error output must equal want (with "PATH" replaced by the file's path),
 * and c must be unchanged. */
static void check_file_error_mode(const char *text, mode_t mode, int want_r,
                                  const char *want_fmt) {
        char *path = tmp_path("bad.conf");
        struct config c = config_default();
        struct capture cap;
        char *want = NULL;
        const char *p;
        size_t wlen = 0;
        FILE *w = open_memstream(&want, &wlen);
        int r;

        for (p = want_fmt; *p; p++) {
                if (strncmp(p, "PATH", 4) == 0) {
                        fputs(path, w);
                        p += 3;
                } else
                        fputc(*p, w);
        }
        fclose(w);

        write_file_mode(path, text, mode);
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == want_r, "load returned %d, want %d, for:\n%s", r, want_r, text);
        CHECK(strcmp(capture_text(&cap), want) == 0, "for:\n%s\ngot:\n%swant:\n%s", text,
              capture_text(&cap), want);
        capture_close(&cap);
        /* Nothing applied, not even the good lines before the bad one. */
        check_numeric_defaults(&c);
        config_clear(&c);
        free(want);
        free(path);
}

static void check_file_error(const char *text, const char *want_fmt) {
        check_file_error_mode(text, 0644, -EINVAL, want_fmt);
}

static void test_file_errors(void) {
        check_file_error("[daemon]\nworkers = 4\n[bogus]\nkey = 1\n[pool]\nsize = 2G\n",
                         "PATH:3: unknown section [bogus] (known: [daemon], [pool], [local], "
                         "[remote], [cluster], [scrub], [metrics])\n");
        check_file_error("[pool]\nsize = 2G\n\n# c\ncolour = blue\n",
                         "PATH:5: unknown key 'colour' in section [pool]\n");
        /* A key of another section is unknown here. */
        check_file_error("[pool]\nkeep = 3\n", "PATH:2: unknown key 'keep' in section [pool]\n");
        check_file_error("[local]\nkeep = 3\n; x\nkeep = 4\n",
                         "PATH:4: duplicate key 'keep' in section [local] (first set on line 2)\n");
        /* The same key in a reopened section is still a duplicate. */
        check_file_error("[local]\nkeep = 3\n[pool]\n[local]\nkeep = 4\n",
                         "PATH:5: duplicate key 'keep' in section [local] (first set on line 2)\n");
        check_file_error("[pool\nsize = 1G\n",
                         "PATH:1: malformed section header '[pool' (expected [name])\n");
        check_file_error("[pool] x\n", "PATH:1: malformed section header '[pool] x' (expected [name])\n");
        check_file_error("[pool]\nsize 1G\n",
                         "PATH:2: expected 'key = value' or '[section]', got 'size 1G'\n");
        check_file_error("[pool]\n = 1G\n", "PATH:2: missing key name before '='\n");
        check_file_error("\nsize = 1G\n",
                         "PATH:2: key 'size' outside of a section (put it under [daemon], "
                         "[pool], [local], [remote], [cluster], [scrub] or [metrics])\n");
        check_file_error("[pool]\nsize =\n",
                         "PATH:2: missing value for [pool] size (expected a whole number of "
                         "bytes with an optional K, M, G or T suffix)\n");
        check_file_error("[daemon]\nstate_dir = \n",
                         "PATH:2: missing value for [daemon] state_dir (expected an absolute path)\n");
        check_file_error("[daemon]\nstate_dir = var/lib\n",
                         "PATH:2: [daemon] state_dir must be an absolute path, not 'var/lib'\n");
        check_file_error("[pool]\nsize = 1.5G\n",
                         "PATH:2: invalid size '1.5G' for [pool] size (expected a whole number "
                         "of bytes with an optional K, M, G or T suffix)\n");
        check_file_error("[pool]\nsize = 99999999999T\n",
                         "PATH:2: size '99999999999T' for [pool] size is too large\n");
        check_file_error("[pool]\nsize = 512K\n",
                         "PATH:2: [pool] size = 512K is out of range (1M..1T)\n");
        check_file_error("[pool]\nsize = 2T\n",
                         "PATH:2: [pool] size = 2T is out of range (1M..1T)\n");
        check_file_error("[pool]\nslot_size = 1536K\n",
                         "PATH:2: [pool] slot_size = 1536K is not a multiple of 1M\n");
        check_file_error("[pool]\nslot_size = 2G\n",
                         "PATH:2: [pool] slot_size = 2G is out of range (1M..1G)\n");
        check_file_error("[pool]\nwait_timeout = soon\n",
                         "PATH:2: invalid duration 'soon' for [pool] wait_timeout (expected a "
                         "whole number with an optional ms, s, m or h suffix; bare is ms)\n");
        check_file_error("[pool]\nwindow_lease = 25h\n",
                         "PATH:2: [pool] window_lease = 25h is out of range (0ms..24h)\n");
        /* [scrub]: a rate is unlimited (0) or at least 1M; an interval at least 1s */
        check_file_error("[scrub]\nrate = 512K\n",
                         "PATH:2: [scrub] rate = 512K is out of range (unlimited, or 1M..1T)\n");
        check_file_error("[scrub]\nenabled = yes\nrate = fast\n",
                         "PATH:3: invalid size 'fast' for [scrub] rate (expected a whole number "
                         "of bytes with an optional K, M, G or T suffix, or unlimited)\n");
        check_file_error("[scrub]\ninterval = 500ms\n",
                         "PATH:2: [scrub] interval = 500ms is out of range (1s..8760h)\n");
        check_file_error("[scrub]\nenabled = sometimes\n",
                         "PATH:2: invalid boolean 'sometimes' for [scrub] enabled (expected "
                         "yes/no, true/false, on/off or 1/0)\n");
        check_file_error("[pool]\nmax_slots_per_uid = 1025\n",
                         "PATH:2: [pool] max_slots_per_uid = 1025 is out of range (0..1024)\n");
        check_file_error("[pool]\nfair_share = half\n",
                         "PATH:2: invalid boolean 'half' for [pool] fair_share (expected yes/no, "
                         "true/false, on/off or 1/0)\n");
        check_file_error("[pool]\nwait_timeout = 25h\n",
                         "PATH:2: [pool] wait_timeout = 25h is out of range (0ms..24h)\n");
        check_file_error("[local]\nio_size = 6K\n",
                         "PATH:2: [local] io_size = 6K is not a multiple of 4K\n");
        check_file_error("[local]\nio_size = 128M\n",
                         "PATH:2: [local] io_size = 128M is out of range (4K..64M)\n");
        check_file_error("[local]\nqueue_depth = 0\n",
                         "PATH:2: [local] queue_depth = 0 is out of range (1..1024)\n");
        check_file_error("[local]\nqueue_depth = 16x\n",
                         "PATH:2: invalid number '16x' for [local] queue_depth (expected a "
                         "whole decimal number)\n");
        check_file_error("[local]\nkeep = 0\n",
                         "PATH:2: [local] keep = 0 is out of range (1..1000000)\n");
        check_file_error("[local]\nkeep = 99999999999\n",
                         "PATH:2: [local] keep = 99999999999 is out of range (1..1000000)\n");
        check_file_error("[local]\ndirect_io = maybe\n",
                         "PATH:2: invalid boolean 'maybe' for [local] direct_io (expected "
                         "yes/no, true/false, on/off or 1/0)\n");
        check_file_error("[daemon]\nworkers = 65\n",
                         "PATH:2: [daemon] workers = 65 is out of range (1..64)\n");
        check_file_error("[daemon]\nworkers = -1\n",
                         "PATH:2: invalid number '-1' for [daemon] workers (expected a whole "
                         "decimal number)\n");
        check_file_error("[daemon]\nsocket_mode = 0999\n",
                         "PATH:2: invalid mode '0999' for [daemon] socket_mode (expected octal "
                         "permission bits such as 0660)\n");
        check_file_error("[daemon]\nsocket_mode = 4755\n",
                         "PATH:2: [daemon] socket_mode = 4755 is out of range (0000..0777)\n");
        check_file_error("[daemon]\nlog_level = loud\n",
                         "PATH:2: invalid log level 'loud' for [daemon] log_level (expected "
                         "error, warning, notice, info or debug)\n");
        /* Inline comments are not a thing: the value is all of it. */
        check_file_error("[local]\nkeep = 3 # three\n",
                         "PATH:2: invalid number '3 # three' for [local] keep (expected a whole "
                         "decimal number)\n");
        /* Every error is reported, each on its own line number. */
        check_file_error("[pool]\nsize = x\n[local]\nkeep = 0\nnope = 1\n",
                         "PATH:2: invalid size 'x' for [pool] size (expected a whole number of "
                         "bytes with an optional K, M, G or T suffix)\n"
                         "PATH:4: [local] keep = 0 is out of range (1..1000000)\n"
                         "PATH:5: unknown key 'nope' in section [local]\n");
}

static void test_file_open_errors(void) {
        struct config c = config_default();
        struct capture cap;
        char *path = tmp_path("does-not-exist.conf");
        int r;

        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == -ENOENT, "missing file: %d", r);
        CHECK_STR(capture_text(&cap), ""); /* the caller decides whether it matters */
        capture_close(&cap);
        free(path);

        /* A directory opens but cannot be read. */
        capture_open(&cap);
        r = config_load_file(&c, tmpdir, cap.f);
        CHECK(r < 0 && r != -ENOENT, "directory: %d", r);
        CHECK(strncmp(capture_text(&cap), tmpdir, strlen(tmpdir)) == 0, "names the path: %s",
              capture_text(&cap));
        capture_close(&cap);
        check_numeric_defaults(&c);
        config_clear(&c);
}

/* ---- flags ------------------------------------------------------------- */


static void test_flags(void) {
        struct config c = config_default();
        struct capture cap;
        int r;

        capture_open(&cap);
        r = PARSE(&c, &cap, "--pool-size=8G", "--pool-slot-size", "256M", "--state-dir=/a/b",
                  "--daemon-socket", "/run/z.sock", "--socket-mode=0640", "--log-level", "warn",
                  "--daemon-workers=3", "--pool-wait-timeout=1500", "--local-io-size", "64K",
                  "--local-queue-depth=32", "--local-keep", "10", "--local-direct-io=false",
                  "--local-register-buffers", "0", "--config=/ignored.conf", "--socket-group",
                  "ckpt", "--daemon-log-level=error");
        CHECK(r == 0, "parse: %d %s", r, capture_text(&cap));
        CHECK_STR(capture_text(&cap), "");
        CHECK(c.pool_size == 8 * GiB, "pool_size");
        CHECK(c.slot_size == 256 * MiB, "slot_size");
        CHECK_STR(c.state_dir, "/a/b");
        CHECK_STR(c.socket_path, "/run/z.sock");
        CHECK(c.socket_mode == 0640, "mode %o", c.socket_mode);
        CHECK(c.log_level == LOG_ERR, "later flag wins: %d", c.log_level);
        CHECK(c.workers == 3, "workers");
        CHECK(c.pool_wait_ms == 1500, "wait");
        CHECK(c.io_size == 64 * KiB, "io_size");
        CHECK(c.queue_depth == 32, "qd");
        CHECK(c.keep == 10, "keep");
        CHECK(!c.direct_io && !c.register_buffers, "bools");
        CHECK_STR(c.socket_group, "ckpt");
        capture_close(&cap);

        /* "--config PATH" is skipped with its value. */
        capture_open(&cap);
        CHECK(PARSE(&c, &cap, "--config", "/x.conf", "--local-keep=4") == 0 && c.keep == 4,
              "--config PATH skipped: %s", capture_text(&cap));
        CHECK(PARSE(&c, &cap, "--local-keep=5", "--") == 0 && c.keep == 5, "trailing --");
        capture_close(&cap);

        capture_open(&cap);
        CHECK(PARSE(&c, &cap, "--help") == 1, "--help");
        CHECK(PARSE(&c, &cap, "-h") == 1, "-h");
        CHECK(PARSE(&c, &cap, "--local-keep=6", "--version") == 2, "--version");
        CHECK(c.keep == 5, "nothing applied with --version");
        CHECK_STR(capture_text(&cap), "");
        capture_close(&cap);
        config_clear(&c);
}

static void check_flag_error(const char *want, int argc, const char **argv) {
        struct config c = config_default();
        struct capture cap;
        int r;

        capture_open(&cap);
        r = config_parse_args(&c, argc, (char **)argv, cap.f);
        CHECK(r == -EINVAL, "%s: returned %d", argv[1], r);
        CHECK(strcmp(capture_text(&cap), want) == 0, "got: %swant: %s", capture_text(&cap),
              want);
        capture_close(&cap);
        check_numeric_defaults(&c); /* nothing applied */
        config_clear(&c);
}

#define FLAG_ERROR(want, ...) check_flag_error(want, NARGS(__VA_ARGS__), ARGS(__VA_ARGS__))

static void test_flag_errors(void) {
        FLAG_ERROR("unknown option '--pool-colour' (see --help)\n", "--pool-colour=red");
        /* Only [daemon] keys have the short spelling. */
        FLAG_ERROR("unknown option '--keep' (see --help)\n", "--keep=3");
        FLAG_ERROR("unknown option '--pool_size' (see --help)\n", "--pool_size=1G");
        FLAG_ERROR("unknown option '-x' (see --help)\n", "--local-keep=4", "-x");
        FLAG_ERROR("unexpected argument 'foo' (ckptd takes only options; see --help)\n",
                   "--local-keep=4", "foo");
        FLAG_ERROR("unexpected argument 'foo' (ckptd takes only options; see --help)\n", "--",
                   "foo");
        FLAG_ERROR("option '--local-keep' needs a value\n", "--local-keep");
        FLAG_ERROR("option '--state-dir' needs a value\n", "--state-dir", "--pool-size=1G");
        FLAG_ERROR("option '--config' needs a value\n", "--config");
        FLAG_ERROR("option '--config' needs a value\n", "--config=");
        FLAG_ERROR("--pool-size: [pool] size = 512K is out of range (1M..1T)\n", "--pool-size",
                   "512K");
        FLAG_ERROR("--local-keep: invalid number 'x' for [local] keep (expected a whole decimal "
                   "number)\n", "--pool-size=2G", "--local-keep=x");
        FLAG_ERROR("--pool-size: missing value for [pool] size (expected a whole number of "
                   "bytes with an optional K, M, G or T suffix)\n", "--pool-size=");
        FLAG_ERROR("--socket: [daemon] socket must be an absolute path, not 'rel.sock'\n",
                   "--socket=rel.sock");
}

static void test_path_from_args(void) {
        CHECK(config_path_from_args(NARGS("--pool-size=1G"), (char **)ARGS("--pool-size=1G")) ==
                      NULL, "absent");
        CHECK_STR(config_path_from_args(NARGS("--config=/a.conf"), (char **)ARGS("--config=/a.conf")),
                  "/a.conf");
        CHECK_STR(config_path_from_args(NARGS("--local-keep", "3", "--config", "/b.conf"),
                                        (char **)ARGS("--local-keep", "3", "--config", "/b.conf")),
                  "/b.conf");
        /* "--config" never takes an option as its value (as in the parser). */
        CHECK(config_path_from_args(NARGS("--config", "--local-keep=3"),
                                    (char **)ARGS("--config", "--local-keep=3")) == NULL,
              "option as --config value");
        CHECK(config_path_from_args(NARGS("--config"), (char **)ARGS("--config")) == NULL,
              "no value");
        /* A flag's separate value is skipped... */
        CHECK_STR(config_path_from_args(NARGS("--socket-group", "x", "--config=/c"),
                                        (char **)ARGS("--socket-group", "x", "--config=/c")),
                  "/c");
        /* ...and an option after a flag missing its value is still seen. */
        CHECK_STR(config_path_from_args(NARGS("--state-dir", "--config=/d"),
                                        (char **)ARGS("--state-dir", "--config=/d")),
                  "/d");
        CHECK_STR(config_path_from_args(NARGS("--config=/a", "--config=/b"),
                                        (char **)ARGS("--config=/a", "--config=/b")),
                  "/b");
}

/* Defaults < file < flags, and the socket that lives in the state dir
 * follows the state dir. */
static void test_precedence(void) {
        char *path = tmp_path("prec.conf");
        struct config c;
        struct capture cap;

        env_reset();
        write_file(path, "[local]\nkeep = 5\nqueue_depth = 8\n[pool]\nsize = 2G\n");
        c = config_default();
        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0, "load");
        CHECK(PARSE(&c, &cap, "--local-keep=9") == 0, "flags");
        CHECK(c.keep == 9, "flag beats file: %u", c.keep);
        CHECK(c.queue_depth == 8, "file beats default: %u", c.queue_depth);
        CHECK(c.pool_size == 2 * GiB && c.slot_size == 64 * MiB, "untouched default");
        CHECK_STR(capture_text(&cap), "");
        capture_close(&cap);
        config_clear(&c);

        /* A runtime-dir socket does not depend on the state dir. */
        setenv("RUNTIME_DIRECTORY", "/run/ckptd", 1);
        c = config_default();
        capture_open(&cap);
        CHECK(PARSE(&c, &cap, "--state-dir=/scratch/ck") == 0, "state-dir");
        CHECK_STR(c.socket_path, "/run/ckptd/ckptd.sock");
        capture_close(&cap);
        config_clear(&c);
        env_reset();
        free(path);
}

/* ---- validate ---------------------------------------------------------- */

static void check_invalid(const struct config *c, const char *want) {
        struct capture cap;
        capture_open(&cap);
        CHECK(config_validate(c, cap.f) == -EINVAL, "validate passed, want: %s", want);
        CHECK(strcmp(capture_text(&cap), want) == 0, "got: %swant: %s", capture_text(&cap),
              want);
        capture_close(&cap);
}

/* config_validate's refusals of node_count = n (> 1, given as text)
 * without [cluster] peers or psk_file: the nodes agree on each commit over
 * the peer links, so they need them with or without replication. */
#define NEEDS_PEERS(n)                                                                     \
        "[cluster] node_count = " n " needs [cluster] peers, the host:port of every node: " \
        "the nodes agree on each commit over them (or set node_count = 1: a single node)\n"
#define NEEDS_PSK_FILE(n)                                                                  \
        "[cluster] node_count = " n " needs [cluster] psk_file, the pre-shared key with "    \
        "which nodes authenticate each other (the same file on every node, mode 0600)\n"

static void test_validate(void) {
        struct config c = config_default(), v;
        struct capture cap;
        char longpath[200];

        v = c;
        v.slot_size = 2 * GiB;
        v.pool_size = GiB;
        check_invalid(&v, "[pool] slot_size = 2G is out of range (1M..1G)\n"
                          "[pool] slot_size = 2G is larger than [pool] size = 1G\n");
        v = c;
        v.pool_size = 32 * MiB;
        check_invalid(&v, "[pool] slot_size = 64M is larger than [pool] size = 32M\n");
        v = c;
        v.pool_size = 96 * MiB;
        check_invalid(&v, "[pool] size = 96M is not a multiple of [pool] slot_size = 64M\n");
        v = c;
        v.pool_size = 1025 * MiB;
        v.slot_size = MiB;
        check_invalid(&v, "[pool] size / slot_size = 1025 slots; at most 1024 fit in io_uring's "
                          "registered buffers: raise slot_size or lower size\n");
        v.pool_size = 1024 * MiB;
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "1024 slots is fine: %s", capture_text(&cap));
        capture_close(&cap);
        v = c;
        v.slot_size = 4 * MiB;
        v.pool_size = 64 * MiB;
        v.io_size = 8 * MiB;
        check_invalid(&v, "[local] io_size = 8M is larger than [pool] slot_size = 4M\n");
        v = c;
        v.max_slots_per_uid = 17; /* 1G / 64M = 16 slots */
        check_invalid(&v, "[pool] max_slots_per_uid = 17 is more than the pool's 16 slots\n");
        v = c;
        v.max_slots_per_connection = 17;
        check_invalid(&v, "[pool] max_slots_per_connection = 17 is more than the pool's 16 "
                          "slots\n");
        v.max_slots_per_connection = 16;
        v.max_slots_per_uid = 16;
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "16 of 16 slots is fine: %s", capture_text(&cap));
        capture_close(&cap);
        v = c;
        v.workers = 0;
        check_invalid(&v, "[daemon] workers = 0 is out of range (1..64)\n");
        v = c;
        v.state_dir = (char *)"relative";
        check_invalid(&v, "[daemon] state_dir must be an absolute path, not 'relative' (set "
                          "--state-dir or $HOME)\n");
        v = c;
        v.state_dir = (char *)"";
        check_invalid(&v, "[daemon] state_dir must be an absolute path, not '' (set "
                          "--state-dir or $HOME)\n");
        v = c;
        v.socket_path = (char *)"x.sock";
        check_invalid(&v, "[daemon] socket must be an absolute path, not 'x.sock' (set "
                          "--socket)\n");

        /* sun_path holds 108 bytes with the NUL: 107 characters fit. */
        memset(longpath, 'a', sizeof(longpath));
        longpath[0] = '/';
        longpath[107] = '\0';
        v = c;
        v.socket_path = longpath;
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "107-byte socket path: %s", capture_text(&cap));
        capture_close(&cap);
        longpath[107] = 'a';
        longpath[108] = '\0';
        check_invalid(&v, "[daemon] socket path is 108 bytes long; AF_UNIX allows at most 107: "
                          "choose a shorter --socket\n");
        config_clear(&c);
}

/* config_check_keys() is the per-key half of config_validate(): a value out
 * of its key's range fails it, a cross-field mismatch does not.
 * config_equal() compares values, not pointers. */
static void test_check_keys_equal(void) {
        struct config c = config_default(), v, w = config_default();
        struct capture cap;

        CHECK(config_equal(&c, &w), "two default configs differ");
        v = c;
        v.pool_size = 32 * MiB; /* smaller than slot_size: a cross-field error */
        capture_open(&cap);
        CHECK(config_check_keys(&v, cap.f) == 0, "cross-field error in the per-key check: %s",
              capture_text(&cap));
        capture_close(&cap);
        CHECK(!config_equal(&c, &v), "pool size change not seen");
        v = c;
        v.workers = 65;
        capture_open(&cap);
        CHECK(config_check_keys(&v, cap.f) == -EINVAL, "workers = 65 passed");
        CHECK_STR(capture_text(&cap), "[daemon] workers = 65 is out of range (1..64)\n");
        capture_close(&cap);
        v = c;
        v.remote_bucket = (char *)"Not_A_Bucket";
        capture_open(&cap);
        CHECK(config_check_keys(&v, cap.f) == -EINVAL, "bad bucket passed");
        capture_close(&cap);
        free(w.state_dir);
        w.state_dir = strdup(c.state_dir); /* another pointer, the same text */
        CHECK(w.state_dir && config_equal(&c, &w), "equal strings compared by pointer");
        config_clear(&w);
        config_clear(&c);
}

/* ---- reload ------------------------------------------------------------ */

static void test_reload(void) {
        struct config dst = config_default(), src = config_default();
        char *out;

        free(src.state_dir);
        src.state_dir = strdup("/elsewhere");
        src.socket_group = strdup("other");
        src.workers = 9;
        src.pool_size = 4 * GiB;
        src.slot_size = 128 * MiB;
        src.io_size = 4 * MiB;
        src.queue_depth = 99;
        src.direct_io = false;
        src.socket_mode = 0600;
        src.log_level = LOG_DEBUG;
        src.pool_wait_ms = 5000;
        src.window_lease_ms = 7000;
        src.max_slots_per_uid = 3;
        src.keep = 12;

        stderr_capture_begin();
        config_reload(&dst, &src);
        out = stderr_capture_end();

        CHECK(dst.log_level == LOG_DEBUG, "log_level reloaded");
        CHECK(dst.pool_wait_ms == 5000, "wait_timeout reloaded");
        CHECK(dst.window_lease_ms == 7000 && dst.max_slots_per_uid == 3, "pool shares reloaded");
        CHECK(dst.keep == 12, "keep reloaded");
        CHECK(strcmp(dst.state_dir, "/elsewhere") != 0 && dst.socket_group == NULL &&
                      dst.workers == 2 && dst.pool_size == GiB && dst.slot_size == 64 * MiB &&
                      dst.io_size == MiB && dst.queue_depth == 16 && dst.direct_io &&
                      dst.socket_mode == 0660,
              "non-reloadable keys untouched");
        CHECK(strstr(out, "notice: config: [daemon] log_level changed from info to debug\n"),
              "log: %s", out);
        CHECK(strstr(out, "notice: config: [pool] wait_timeout changed from 30s to 5s\n"),
              "log: %s", out);
        CHECK(strstr(out, "notice: config: [local] keep_latest changed from 3 to 12\n"), "log: %s",
              out);
        /* the others are kept, and the log says a restart is needed */
        CHECK(strstr(out, "warning: config: [daemon] workers changed but takes effect only after a "
                          "restart\n") &&
                      strstr(out, "warning: config: [daemon] state_dir changed but takes effect "
                                  "only after a restart\n"),
              "log: %s", out);
        CHECK(!strstr(out, "notice: config: [daemon] workers"), "workers not reloaded");
        free(out);

        /* Nothing changed: nothing logged. */
        stderr_capture_begin();
        config_reload(&dst, &dst);
        out = stderr_capture_end();
        CHECK_STR(out, "");
        free(out);

        config_clear(&dst);
        config_clear(&src);
}

/* ---- help -------------------------------------------------------------- */

static void test_help(void) {
        static const char *const want[] = {
                "--config=PATH",
                "--state-dir=PATH ", "state_dir = /var/lib/ckptd",
                "--socket=PATH ", "--socket-mode=MODE ", "socket_mode = 0660",
                "--socket-group=NAME ", "socket_group = (unset)",
                "--log-level=LEVEL ", "log_level = info", "--workers=N ", "workers = 2",
                "--pool-size=SIZE ", "size = 1G", "--pool-slot-size=SIZE ", "slot_size = 64M",
                "--pool-wait-timeout=DURATION ", "wait_timeout = 30s",
                "--local-io-size=SIZE ", "io_size = 1M", "--local-queue-depth=N ",
                "queue_depth = 16", "--local-keep=N ", "keep = 3", "--local-direct-io=BOOL ",
                "direct_io = yes", "--local-register-buffers=BOOL ", "register_buffers = yes",
                "(SIGHUP reloads it)",
        };
        struct capture cap;

        env_reset();
        setenv("STATE_DIRECTORY", "/var/lib/ckptd", 1);
        capture_open(&cap);
        config_print_help(cap.f);
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                CHECK(strstr(capture_text(&cap), want[i]), "help lacks '%s':\n%s", want[i],
                      capture_text(&cap));
        capture_close(&cap);
        env_reset();
}

/* ---- [remote] and [cluster] -------------------------------------------- */

static void test_remote_file(void) {
        char *path = tmp_path("remote.conf");
        struct config c = config_default();
        struct capture cap;
        char *peers = peer_list(65536), *all_keys;
        int r;

        env_reset();
        /* the largest cluster: one peers entry per node, and the key the
         * nodes authenticate each other with (node_count > 1 needs both) */
        if (asprintf(&all_keys,
                     "[remote]\n"
                     "endpoint = http://127.0.0.1:7480\n"
                     "region = default\n"
                     "bucket = ckpt-bucket.1\n"
                     "prefix = ckpt/cluster-a\n"
                     "addressing = path\n"
                     "credentials_file = /etc/ckptd/aws credentials\n"
                     "profile = training\n"
                     "access_key_id = AKIDEXAMPLE\n"
                     "secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"
                     "ca_file = /etc/ssl/store-ca.pem\n"
                     "part_size = 5M\n"
                     "concurrency = 256\n"
                     "bandwidth = 100M\n"
                     "keep = 10\n"
                     "retry_attempts = 1\n"
                     "[cluster]\n"
                     "node_index = 65535\n"
                     "node_count = 65536\n"
                     "peers = %s\n"
                     "psk_file = /etc/ckptd/peer.psk\n"
                     "[scrub]\n"
                     "enabled = no\n"
                     "rate = unlimited\n"
                     "interval = 90m\n"
                     "idle_priority = no\n",
                     peers) < 0)
                exit(1);
        write_file_mode(path, all_keys, 0600);
        free(all_keys);
        free(peers);
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == 0, "load: %d %s", r, capture_text(&cap));
        CHECK_STR(capture_text(&cap), "");
        CHECK_STR(c.remote_endpoint, "http://127.0.0.1:7480");
        CHECK_STR(c.remote_region, "default");
        CHECK_STR(c.remote_bucket, "ckpt-bucket.1");
        CHECK_STR(c.remote_prefix, "ckpt/cluster-a");
        CHECK(c.remote_addressing == 1, "addressing %d (path)", c.remote_addressing);
        CHECK_STR(c.remote_credentials_file, "/etc/ckptd/aws credentials");
        CHECK_STR(c.remote_profile, "training");
        CHECK_STR(c.remote_access_key_id, "AKIDEXAMPLE");
        CHECK_STR(c.remote_secret_access_key, "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
        CHECK_STR(c.remote_ca_file, "/etc/ssl/store-ca.pem");
        CHECK(c.remote_part_size == 5 * MiB, "part_size");
        CHECK(c.remote_concurrency == 256, "concurrency");
        CHECK(c.remote_bandwidth == 100 * MiB, "bandwidth");
        CHECK(c.remote_keep == 10, "keep");
        CHECK(c.remote_retry_attempts == 1, "retry_attempts");
        CHECK(!c.scrub_enabled && c.scrub_rate == 0 && c.scrub_interval_ms == 90 * 60 * 1000 &&
                      !c.scrub_idle_priority,
              "[scrub] enabled %d rate %llu interval %llu", c.scrub_enabled,
              (unsigned long long)c.scrub_rate, (unsigned long long)c.scrub_interval_ms);
        CHECK(c.cluster_node_index == 65535 && c.cluster_node_count == 65536, "cluster %u/%u",
              c.cluster_node_index, c.cluster_node_count);
        CHECK(c.cluster_npeers == 65536, "%u peers", c.cluster_npeers);
        CHECK(config_remote_enabled(&c), "remote tier on");
        CHECK(config_validate(&c, cap.f) == 0, "validate: %s", capture_text(&cap));
        CHECK(c.keep == 3 && c.pool_size == GiB, "other sections untouched");
        capture_close(&cap);

        /* Choices in any case, the other sizes' ends, and empty values that
         * unset: the tier goes off again, the optional paths back to NULL. */
        write_file_mode(path,
                        "[remote]\nendpoint =\nbucket =\naddressing = VIRTUAL\n"
                        "credentials_file =\nca_file =\naccess_key_id =\n"
                        "secret_access_key =\npart_size = 5G\nconcurrency = 1\n",
                        0644);
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == 0, "second load: %d %s", r, capture_text(&cap));
        capture_close(&cap);
        CHECK(c.remote_endpoint == NULL && c.remote_bucket == NULL &&
                      c.remote_credentials_file == NULL && c.remote_ca_file == NULL &&
                      c.remote_access_key_id == NULL && c.remote_secret_access_key == NULL,
              "empty values unset");
        CHECK(!config_remote_enabled(&c), "remote tier off again");
        CHECK(c.remote_addressing == 2, "addressing %d (virtual)", c.remote_addressing);
        CHECK(c.remote_part_size == 5 * GiB && c.remote_concurrency == 1, "part/concurrency");
        CHECK_STR(c.remote_prefix, "ckpt/cluster-a"); /* not named: kept */

        /* Accepted shapes at the edges of the rules. */
        write_file_mode(path,
                        "[remote]\nendpoint = HTTPS://S3.Example.com:443/\n"
                        "bucket = a-b\nprefix = x=1:a@b+c-d_e.f/G.H/..x/x..\n"
                        "[cluster]\nnode_index = 0\nnode_count = 1\npeers =\n",
                        0644);
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == 0, "edge load: %d %s", r, capture_text(&cap));
        CHECK(config_validate(&c, cap.f) == 0, "edge validate: %s", capture_text(&cap));
        capture_close(&cap);
        CHECK_STR(c.remote_prefix, "x=1:a@b+c-d_e.f/G.H/..x/x..");
        {
                char prefix[600], text[700];
                memset(prefix, 'p', sizeof(prefix));
                prefix[512] = '\0';
                snprintf(text, sizeof(text), "[remote]\nprefix = %s\n", prefix);
                write_file_mode(path, text, 0644);
                capture_open(&cap);
                r = config_load_file(&c, path, cap.f);
                CHECK(r == 0 && c.remote_prefix && strlen(c.remote_prefix) == 512,
                      "512-byte prefix: %d %s", r, capture_text(&cap));
                capture_close(&cap);
        }

        config_clear(&c);
        CHECK(c.remote_endpoint == NULL && c.remote_secret_access_key == NULL,
              "config_clear frees the [remote] strings");
        unlink(path);
        free(path);
}

static void test_remote_file_errors(void) {
        char prefix[600], line[700];

        /* endpoint */
        check_file_error("[remote]\nendpoint = ftp://store.example.com\n",
                         "PATH:2: [remote] endpoint 'ftp://store.example.com' must start with "
                         "https:// (or http:// for a store on a trusted network)\n");
        check_file_error("[remote]\nendpoint = s3.example.com\n",
                         "PATH:2: [remote] endpoint 's3.example.com' must start with https:// "
                         "(or http:// for a store on a trusted network)\n");
        /* A password is never repeated, with or without a scheme. */
        check_file_error("[remote]\nendpoint = https://key:hunter2@s3.example.com\n",
                         "PATH:2: [remote] endpoint URL must not contain user:password@; "
                         "configure credentials separately\n");
        check_file_error("[remote]\nendpoint = key:hunter2@s3.example.com\n",
                         "PATH:2: [remote] endpoint must start with https:// (or http:// for "
                         "a store on a trusted network)\n");
        check_file_error("[remote]\nendpoint = https://\n",
                         "PATH:2: [remote] endpoint https://: bad host name\n");
        check_file_error("[remote]\nendpoint = http://:7480\n",
                         "PATH:2: [remote] endpoint http://:7480: bad host name\n");
        check_file_error("[remote]\nendpoint = https://s3.example.com/bucket\n",
                         "PATH:2: [remote] endpoint https://s3.example.com/bucket: must be "
                         "scheme://host[:port] only, without a path, query or fragment (the "
                         "bucket is configured separately)\n");
        check_file_error("[remote]\nendpoint = https://s3.example.com?x=1\n",
                         "PATH:2: [remote] endpoint https://s3.example.com?x=1: must be "
                         "scheme://host[:port] only, without a path, query or fragment (the "
                         "bucket is configured separately)\n");
        check_file_error("[remote]\nendpoint = https://s3.example.com/#top\n",
                         "PATH:2: [remote] endpoint https://s3.example.com/#top: must be "
                         "scheme://host[:port] only, without a path, query or fragment (the "
                         "bucket is configured separately)\n");
        check_file_error("[remote]\nendpoint = http://127.0.0.1:99999\n",
                         "PATH:2: [remote] endpoint http://127.0.0.1:99999: port out of range\n");

        /* region */
        check_file_error("[remote]\nregion = us east/1\n",
                         "PATH:2: [remote] region 'us east/1' must be at most 64 letters, "
                         "digits, '-', '_' or '.' (such as us-east-1, or default for "
                         "radosgw)\n");

        /* bucket */
        check_file_error("[remote]\nbucket = ab\n",
                         "PATH:2: [remote] bucket 'ab' is 2 characters long; S3 allows 3 to "
                         "63\n");
        check_file_error("[remote]\nbucket = "
                         "a123456789012345678901234567890123456789012345678901234567890123\n",
                         "PATH:2: [remote] bucket "
                         "'a123456789012345678901234567890123456789012345678901234567890123' "
                         "is 64 characters long; S3 allows 3 to 63\n");
        check_file_error("[remote]\nbucket = Ckpt\n",
                         "PATH:2: [remote] bucket 'Ckpt' may contain only lowercase letters, "
                         "digits, '.' and '-'\n");
        check_file_error("[remote]\nbucket = my_bucket\n",
                         "PATH:2: [remote] bucket 'my_bucket' may contain only lowercase "
                         "letters, digits, '.' and '-'\n");
        check_file_error("[remote]\nbucket = -ckpt\n",
                         "PATH:2: [remote] bucket '-ckpt' must begin and end with a letter or "
                         "digit\n");
        check_file_error("[remote]\nbucket = ckpt.\n",
                         "PATH:2: [remote] bucket 'ckpt.' must begin and end with a letter or "
                         "digit\n");
        check_file_error("[remote]\nbucket = ck..pt\n",
                         "PATH:2: [remote] bucket 'ck..pt' must not contain '..'\n");
        check_file_error("[remote]\nbucket = 192.168.5.4\n",
                         "PATH:2: [remote] bucket '192.168.5.4' must not be formatted as an IP "
                         "address\n");

        /* prefix */
        check_file_error("[remote]\nprefix = /ckpt\n",
                         "PATH:2: [remote] prefix '/ckpt' must not begin or end with '/'\n");
        check_file_error("[remote]\nprefix = ckpt/\n",
                         "PATH:2: [remote] prefix 'ckpt/' must not begin or end with '/'\n");
        check_file_error("[remote]\nprefix = /\n",
                         "PATH:2: [remote] prefix '/' must not begin or end with '/'\n");
        check_file_error("[remote]\nprefix = a//b\n",
                         "PATH:2: [remote] prefix 'a//b' must not contain '//'\n");
        check_file_error("[remote]\nprefix = a/./b\n",
                         "PATH:2: [remote] prefix 'a/./b' must not have a '.' or '..' "
                         "segment\n");
        check_file_error("[remote]\nprefix = ..\n",
                         "PATH:2: [remote] prefix '..' must not have a '.' or '..' segment\n");
        check_file_error("[remote]\nprefix = a/..\n",
                         "PATH:2: [remote] prefix 'a/..' must not have a '.' or '..' "
                         "segment\n");
        check_file_error("[remote]\nprefix = cluster a\n",
                         "PATH:2: [remote] prefix 'cluster a' may contain only letters, digits "
                         "and . _ = : @ + - /\n");
        check_file_error("[remote]\nprefix = ckpt?x\n",
                         "PATH:2: [remote] prefix 'ckpt?x' may contain only letters, digits "
                         "and . _ = : @ + - /\n");
        memset(prefix, 'p', sizeof(prefix));
        prefix[513] = '\0';
        snprintf(line, sizeof(line), "[remote]\nprefix = %s\n", prefix);
        check_file_error(line, "PATH:2: [remote] prefix is 513 bytes long; at most 512\n");

        /* addressing */
        check_file_error("[remote]\naddressing = both\n",
                         "PATH:2: invalid value 'both' for [remote] addressing (expected auto, "
                         "path or virtual)\n");
        check_file_error("[remote]\naddressing =\n",
                         "PATH:2: missing value for [remote] addressing (expected auto, path "
                         "or virtual)\n");
        check_file_error("[remote]\naddressing = 1\n",
                         "PATH:2: invalid value '1' for [remote] addressing (expected auto, "
                         "path or virtual)\n");

        /* optional paths */
        check_file_error("[remote]\ncredentials_file = aws/credentials\n",
                         "PATH:2: [remote] credentials_file must be an absolute path, not "
                         "'aws/credentials'\n");
        check_file_error("[remote]\nca_file = ca.pem\n",
                         "PATH:2: [remote] ca_file must be an absolute path, not 'ca.pem'\n");

        /* numbers */
        check_file_error("[remote]\npart_size = 4M\n",
                         "PATH:2: [remote] part_size = 4M is out of range (5M..5G)\n");
        check_file_error("[remote]\npart_size = 5121M\n",
                         "PATH:2: [remote] part_size = 5121M is out of range (5M..5G)\n");
        check_file_error("[remote]\nconcurrency = 0\n",
                         "PATH:2: [remote] concurrency = 0 is out of range (1..256)\n");
        check_file_error("[remote]\nconcurrency = 257\n",
                         "PATH:2: [remote] concurrency = 257 is out of range (1..256)\n");
        check_file_error("[remote]\nbandwidth = 10MB/s\n",
                         "PATH:2: invalid size '10MB/s' for [remote] bandwidth (expected a "
                         "whole number of bytes with an optional K, M, G or T suffix)\n");
        check_file_error("[remote]\nkeep = 0\n",
                         "PATH:2: [remote] keep = 0 is out of range (1..1000000)\n");
        /* retention keys: keep_every is a step count, a duration or off;
         * [remote] takes a step count only */
        check_file_error("[local]\nkeep_every = 6x\n",
                         "PATH:2: [local] keep_every: '6x': a duration takes the unit s, m, h or "
                         "d (6h), a step count none\n");
        check_file_error("[local]\nkeep_every = 0\n",
                         "PATH:2: [local] keep_every: '0' is not a step count (1000) or a "
                         "duration (6h), or off\n");
        check_file_error("[remote]\nkeep_every = 6h\n",
                         "PATH:2: [remote] keep_every = 6h: the store's retention knows no "
                         "commit times; give a step count (1000)\n");
        check_file_error("[cluster]\nreplica_keep_every = soon\n",
                         "PATH:2: [cluster] replica_keep_every: 'soon' is not a step count "
                         "(1000) or a duration (6h), or off\n");
        {
                struct config kc;
                char kpath[] = "/tmp/test-config-keep-XXXXXX";
                int kfd = mkstemp(kpath);
                const char *text = "[local]\nkeep_latest = 4\nkeep_every = 6h\n[remote]\n"
                                   "keep = 5\nkeep_every = 1000\n[cluster]\n"
                                   "replica_keep_latest = 2\n";
                CHECK(kfd >= 0 && write(kfd, text, strlen(text)) == (ssize_t)strlen(text),
                      "write %s", kpath);
                close(kfd);
                CHECK(config_init(&kc) == 0, "init");
                CHECK(kc.keep == 3 && !strcmp(kc.keep_every, "off") && kc.replica_keep_latest == 0 &&
                      kc.replica_keep_every == NULL, "retention defaults");
                CHECK(config_load_file(&kc, kpath, stderr) == 0, "load retention keys");
                CHECK(kc.keep == 4 && !strcmp(kc.keep_every, "6h") && kc.remote_keep == 5 &&
                      !strcmp(kc.remote_keep_every, "1000") && kc.replica_keep_latest == 2,
                      "retention keys: keep %u every %s remote %u", kc.keep, kc.keep_every,
                      kc.remote_keep);
                config_clear(&kc);
                unlink(kpath);
        }
        check_file_error("[remote]\nretry_attempts = 0\n",
                         "PATH:2: [remote] retry_attempts = 0 is out of range (1..100)\n");
        check_file_error("[remote]\nretry_attempts = 101\n",
                         "PATH:2: [remote] retry_attempts = 101 is out of range (1..100)\n");
        check_file_error("[cluster]\nnode_count = 0\n",
                         "PATH:2: [cluster] node_count = 0 is out of range (1..65536)\n");
        check_file_error("[cluster]\nnode_count = 65537\n",
                         "PATH:2: [cluster] node_count = 65537 is out of range (1..65536)\n");
        check_file_error("[cluster]\nnode_index = 65536\n",
                         "PATH:2: [cluster] node_index = 65536 is out of range (0..65535)\n");
        check_file_error("[cluster]\nnode_index = -1\n",
                         "PATH:2: invalid number '-1' for [cluster] node_index (expected a "
                         "whole decimal number)\n");
        /* keys of the other remote-ish section are unknown here */
        check_file_error("[cluster]\nkeep = 3\n",
                         "PATH:2: unknown key 'keep' in section [cluster]\n");
}

/* A file that holds the secret must be private; one that does not hold it
 * (or holds it empty) may be readable. */
static void test_secret_file_mode(void) {
        static const char text[] = "[remote]\n"
                                   "access_key_id = AKIDEXAMPLE\n"
                                   "secret_access_key = hunter2-secret\n"
                                   "[local]\nkeep = 4\n";
        static const mode_t refused[] = { 0644, 0640, 0604, 0660, 0620, 0602, 0610, 0601, 0666 };
        static const mode_t fine[] = { 0600, 0400, 0700 };
        char *path = tmp_path("secret.conf");
        char want[512];
        struct capture cap;
        struct config c;
        int r;

        env_reset();
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                snprintf(want, sizeof(want),
                         "PATH:3: [remote] secret_access_key is set in a file that group or "
                         "others may access (mode %04o): make it private (chmod 600, owned by "
                         "the daemon's user), or give the secret in the environment "
                         "(AWS_SECRET_ACCESS_KEY) or a credentials file ([remote] "
                         "credentials_file)\n",
                         (unsigned)refused[i]);
                check_file_error_mode(text, refused[i], -EPERM, want);
        }
        /* The refusal stands when other lines are wrong too. */
        check_file_error_mode("[local]\nkeep = 0\n[remote]\nsecret_access_key = hunter2-secret\n",
                              0644, -EPERM,
                              "PATH:2: [local] keep = 0 is out of range (1..1000000)\n"
                              "PATH:4: [remote] secret_access_key is set in a file that group "
                              "or others may access (mode 0644): make it private (chmod 600, "
                              "owned by the daemon's user), or give the secret in the "
                              "environment (AWS_SECRET_ACCESS_KEY) or a credentials file "
                              "([remote] credentials_file)\n");

        for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
                write_file_mode(path, text, fine[i]);
                c = config_default();
                capture_open(&cap);
                r = config_load_file(&c, path, cap.f);
                CHECK(r == 0, "mode %04o: %d %s", (unsigned)fine[i], r, capture_text(&cap));
                CHECK_STR(capture_text(&cap), "");
                CHECK_STR(c.remote_secret_access_key, "hunter2-secret");
                CHECK(c.keep == 4, "mode %04o: rest applied", (unsigned)fine[i]);
                capture_close(&cap);
                config_clear(&c);
        }

        /* Without a secret (or with an empty one) the mode does not matter. */
        write_file_mode(path, "[remote]\naccess_key_id = AKIDEXAMPLE\nsecret_access_key =\n",
                        0644);
        c = config_default();
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == 0 && c.remote_access_key_id && c.remote_secret_access_key == NULL,
              "empty secret in a 0644 file: %d %s", r, capture_text(&cap));
        capture_close(&cap);
        config_clear(&c);

        /* A malformed line that may hold the secret is not repeated. */
        check_file_error("[remote]\nsecret_access_key: hunter2-secret\n",
                         "PATH:2: expected 'key = value' or '[section]' (the line is not "
                         "shown: it may hold a secret)\n");
        unlink(path);
        free(path);
}

static void test_remote_flags(void) {
        struct config c = config_default();
        struct capture cap;
        int r;

        env_reset();
        capture_open(&cap);
        r = PARSE(&c, &cap, "--remote-endpoint=https://s3.eu-west-1.amazonaws.com",
                  "--remote-region", "eu-west-1", "--remote-bucket=ckpt", "--remote-prefix",
                  "a/b", "--remote-addressing=virtual", "--remote-credentials-file=/c/creds",
                  "--remote-profile", "p", "--remote-access-key-id=AKIDEXAMPLE",
                  "--remote-ca-file", "/c/ca.pem", "--remote-part-size=128M",
                  "--remote-concurrency", "16", "--remote-bandwidth=1G", "--remote-keep=2",
                  "--remote-retry-attempts", "9", "--cluster-node-index=3",
                  "--cluster-node-count", "4");
        CHECK(r == 0, "parse: %d %s", r, capture_text(&cap));
        CHECK_STR(capture_text(&cap), "");
        CHECK_STR(c.remote_endpoint, "https://s3.eu-west-1.amazonaws.com");
        CHECK_STR(c.remote_region, "eu-west-1");
        CHECK_STR(c.remote_bucket, "ckpt");
        CHECK_STR(c.remote_prefix, "a/b");
        CHECK(c.remote_addressing == 2, "addressing %d", c.remote_addressing);
        CHECK_STR(c.remote_credentials_file, "/c/creds");
        CHECK_STR(c.remote_profile, "p");
        CHECK_STR(c.remote_access_key_id, "AKIDEXAMPLE");
        CHECK_STR(c.remote_ca_file, "/c/ca.pem");
        CHECK(c.remote_part_size == 128 * MiB && c.remote_concurrency == 16 &&
                      c.remote_bandwidth == GiB && c.remote_keep == 2 &&
                      c.remote_retry_attempts == 9,
              "numbers");
        CHECK(c.cluster_node_index == 3 && c.cluster_node_count == 4, "cluster");
        capture_close(&cap);
        config_clear(&c);
}

static void test_remote_flag_errors(void) {
        static const char refused[] =
                "--remote-secret-access-key: refused on the command line, which other users "
                "can read (ps): set [remote] secret_access_key in the config file (mode 0600), "
                "AWS_SECRET_ACCESS_KEY in the daemon's environment, or use a credentials file "
                "([remote] credentials_file)\n";

        /* The secret, in every spelling, even empty or without a value;
         * the value is never repeated (the output is compared whole). */
        FLAG_ERROR(refused, "--remote-secret-access-key=hunter2-secret");
        FLAG_ERROR(refused, "--remote-secret-access-key", "hunter2-secret");
        FLAG_ERROR(refused, "--remote-keep=4", "--remote-secret-access-key=");
        FLAG_ERROR(refused, "--remote-secret-access-key");
        FLAG_ERROR("unknown option '--secret-access-key' (see --help)\n",
                   "--secret-access-key=hunter2-secret");
        FLAG_ERROR("unknown option '--remote-secret_access_key' (see --help)\n",
                   "--remote-secret_access_key=x");

        FLAG_ERROR("--remote-bucket: [remote] bucket 'Ckpt' may contain only lowercase letters, "
                   "digits, '.' and '-'\n", "--remote-bucket=Ckpt");
        FLAG_ERROR("--remote-endpoint: [remote] endpoint 'localhost:7480' must start with "
                   "https:// (or http:// for a store on a trusted network)\n",
                   "--remote-endpoint", "localhost:7480");
        FLAG_ERROR("--remote-addressing: invalid value 'dns' for [remote] addressing (expected "
                   "auto, path or virtual)\n", "--remote-addressing=dns");
        FLAG_ERROR("--remote-part-size: [remote] part_size = 1M is out of range (5M..5G)\n",
                   "--remote-part-size=1M");
        FLAG_ERROR("--cluster-node-count: [cluster] node_count = 0 is out of range "
                   "(1..65536)\n", "--cluster-node-count=0");
        FLAG_ERROR("--remote-prefix: [remote] prefix 'a/' must not begin or end with '/'\n",
                   "--remote-prefix=a/");
        /* Only [daemon] keys have the short spelling. */
        FLAG_ERROR("unknown option '--endpoint' (see --help)\n", "--endpoint=http://x");
}

static void check_cluster_env(const char *nodeid, const char *nnodes, uint32_t want_index,
                              uint32_t want_count) {
        struct config c;

        env_reset();
        if (nodeid)
                setenv("SLURM_NODEID", nodeid, 1);
        if (nnodes)
                setenv("SLURM_NNODES", nnodes, 1);
        c = config_default();
        CHECK(c.cluster_node_index == want_index && c.cluster_node_count == want_count,
              "SLURM_NODEID=%s SLURM_NNODES=%s: %u/%u, want %u/%u", nodeid ? nodeid : "(unset)",
              nnodes ? nnodes : "(unset)", c.cluster_node_index, c.cluster_node_count,
              want_index, want_count);
        config_clear(&c);
}

static void test_cluster_env(void) {
        struct config c;
        struct capture cap;

        check_cluster_env(NULL, NULL, 0, 1);
        check_cluster_env("3", "8", 3, 8);
        check_cluster_env("0", "1", 0, 1);
        check_cluster_env("65535", "65536", 65535, 65536);
        check_cluster_env("7", NULL, 7, 1); /* each on its own; validate objects below */
        check_cluster_env(NULL, "16", 0, 16);
        /* Invalid values are ignored like unset ones. */
        check_cluster_env("", "", 0, 1);
        check_cluster_env("x", "many", 0, 1);
        check_cluster_env("-1", "-4", 0, 1);
        check_cluster_env(" 3", "8 ", 0, 1);
        check_cluster_env("3x", "0x8", 0, 1);
        check_cluster_env("65536", "65537", 0, 1);
        check_cluster_env("99999999999999999999999", "0", 0, 1);

        /* The file and flags beat the environment. */
        env_reset();
        setenv("SLURM_NODEID", "5", 1);
        setenv("SLURM_NNODES", "8", 1);
        c = config_default();
        capture_open(&cap);
        CHECK(PARSE(&c, &cap, "--cluster-node-index=1", "--cluster-node-count=2") == 0 &&
                      c.cluster_node_index == 1 && c.cluster_node_count == 2,
              "flags beat $SLURM_*: %s", capture_text(&cap));
        capture_close(&cap);
        config_clear(&c);

        /* Values that are each valid but inconsistent are a configuration
         * error, and the message says where the defaults came from.  A job
         * of 8 nodes from Slurm alone also lacks the peer links its
         * commits need: every message is printed. */
        setenv("SLURM_NODEID", "8", 1);
        c = config_default();
        check_invalid(&c, "[cluster] node_index = 8 must be less than [cluster] node_count = 8 "
                          "(their defaults come from $SLURM_NODEID and $SLURM_NNODES)\n"
                          NEEDS_PEERS("8") NEEDS_PSK_FILE("8"));
        config_clear(&c);
        env_reset();
}

static void test_remote_validate(void) {
        struct config c = config_default(), v;
        struct node_address four[4] = { { (char *)"n0", 7000 }, { (char *)"n1", 7000 },
                                         { (char *)"n2", 7000 }, { (char *)"n3", 7000 } };
        struct capture cap;

        /* A struct set by code: the same rules as the file. */
        v = c;
        v.remote_endpoint = (char *)"http://127.0.0.1:7480";
        check_invalid(&v, "[remote] bucket is required when [remote] endpoint is set\n");
        v.remote_bucket = (char *)"";
        check_invalid(&v, "[remote] bucket is required when [remote] endpoint is set\n");
        v.remote_bucket = (char *)"ckpt";
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "endpoint + bucket: %s", capture_text(&cap));
        CHECK(config_remote_enabled(&v), "enabled");
        capture_close(&cap);

        /* An empty endpoint is "off", like NULL; a bucket alone is fine. */
        v = c;
        v.remote_endpoint = (char *)"";
        v.remote_bucket = (char *)"ckpt";
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "empty endpoint: %s", capture_text(&cap));
        CHECK(!config_remote_enabled(&v), "empty endpoint is off");
        capture_close(&cap);

        v = c;
        v.remote_endpoint = (char *)"s3.example.com";
        v.remote_bucket = (char *)"Bad_Bucket";
        v.remote_prefix = (char *)"/x";
        v.remote_region = (char *)"eu west";
        v.remote_ca_file = (char *)"ca.pem";
        check_invalid(&v, "[remote] endpoint 's3.example.com' must start with https:// (or "
                          "http:// for a store on a trusted network)\n"
                          "[remote] region 'eu west' must be at most 64 letters, digits, '-', "
                          "'_' or '.' (such as us-east-1, or default for radosgw)\n"
                          "[remote] bucket 'Bad_Bucket' may contain only lowercase letters, "
                          "digits, '.' and '-'\n"
                          "[remote] prefix '/x' must not begin or end with '/'\n"
                          "[remote] ca_file must be an absolute path, not 'ca.pem'\n");

        v = c;
        v.remote_access_key_id = (char *)"AKIDEXAMPLE";
        check_invalid(&v, "[remote] access_key_id and secret_access_key must be set together "
                          "(secret_access_key is missing), or neither, to take them from the "
                          "environment or a credentials file\n");
        v = c;
        v.remote_secret_access_key = (char *)"hunter2-secret";
        check_invalid(&v, "[remote] access_key_id and secret_access_key must be set together "
                          "(access_key_id is missing), or neither, to take them from the "
                          "environment or a credentials file\n");
        v.remote_access_key_id = (char *)"";
        check_invalid(&v, "[remote] access_key_id and secret_access_key must be set together "
                          "(access_key_id is missing), or neither, to take them from the "
                          "environment or a credentials file\n");
        v.remote_access_key_id = (char *)"AKIDEXAMPLE";
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "both keys: %s", capture_text(&cap));
        capture_close(&cap);

        v = c;
        v.cluster_node_index = 4;
        v.cluster_node_count = 4;
        v.cluster_peers = four; /* node_count > 1 needs them */
        v.cluster_npeers = 4;
        v.cluster_psk_file = (char *)"/etc/ckptd/peer.psk";
        check_invalid(&v, "[cluster] node_index = 4 must be less than [cluster] node_count = 4 "
                          "(their defaults come from $SLURM_NODEID and $SLURM_NNODES)\n");
        v.cluster_node_index = 3;
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "3 of 4: %s", capture_text(&cap));
        capture_close(&cap);
        v.cluster_peers = NULL; /* or they would not match node_count */
        v.cluster_npeers = 0;
        v.cluster_node_count = 0;
        v.cluster_node_index = 0;
        check_invalid(&v, "[cluster] node_count = 0 is out of range (1..65536)\n"
                          "[cluster] node_index = 0 must be less than [cluster] node_count = 0 "
                          "(their defaults come from $SLURM_NODEID and $SLURM_NNODES)\n");

        v = c;
        v.remote_addressing = 3;
        v.remote_part_size = 4 * MiB;
        v.remote_concurrency = 0;
        v.remote_keep = 0;
        v.remote_retry_attempts = 101;
        check_invalid(&v, "[remote] addressing = 3 is out of range (auto..virtual)\n"
                          "[remote] part_size = 4M is out of range (5M..5G)\n"
                          "[remote] concurrency = 0 is out of range (1..256)\n"
                          "[remote] keep_latest = 0 is out of range (1..1000000)\n"
                          "[remote] retry_attempts = 101 is out of range (1..100)\n");
        config_clear(&c);
}

static void test_remote_reload(void) {
        struct config dst = config_default(), src = config_default();
        char *out;

        dst.remote_access_key_id = strdup("AKIDOLD");
        dst.remote_secret_access_key = strdup("old-secret-value");
        src.remote_access_key_id = strdup("AKIDNEW");
        src.remote_secret_access_key = strdup("new-secret-value");
        src.remote_endpoint = strdup("http://127.0.0.1:7480");
        src.remote_bucket = strdup("ckpt");
        src.remote_bandwidth = 100 * MiB;
        src.remote_keep = 7;
        src.remote_concurrency = 32;
        src.remote_part_size = 128 * MiB;
        src.cluster_node_index = 1;
        src.cluster_node_count = 2;

        stderr_capture_begin();
        config_reload(&dst, &src);
        out = stderr_capture_end();

        CHECK(dst.remote_bandwidth == 100 * MiB, "bandwidth reloaded");
        CHECK(dst.remote_keep == 7, "keep reloaded");
        CHECK(dst.remote_endpoint == NULL && dst.remote_bucket == NULL &&
                      dst.remote_concurrency == 8 && dst.remote_part_size == 64 * MiB &&
                      dst.cluster_node_index == 0 && dst.cluster_node_count == 1,
              "non-reloadable [remote]/[cluster] keys untouched");
        CHECK_STR(dst.remote_access_key_id, "AKIDOLD");
        CHECK_STR(dst.remote_secret_access_key, "old-secret-value");
        CHECK(strstr(out, "notice: config: [remote] bandwidth changed from 0 to 100M\n"),
              "log: %s", out);
        CHECK(strstr(out, "notice: config: [remote] keep_latest changed from 3 to 7\n"), "log: %s",
              out);
        CHECK(strstr(out, "warning: config: [remote] endpoint changed but takes effect only "
                          "after a restart\n") &&
                      strstr(out, "warning: config: [remote] secret_access_key changed but "
                                  "takes effect only after a restart\n") &&
                      strstr(out, "warning: config: [cluster] node_index changed but takes "
                                  "effect only after a restart\n"),
              "log: %s", out);
        CHECK(!strstr(out, "secret-value"), "the secret is logged: %s", out);
        free(out);

        /* Back to no cap: 0 is a value like any other. */
        src.remote_bandwidth = 0;
        stderr_capture_begin();
        config_reload(&dst, &src);
        out = stderr_capture_end();
        CHECK(dst.remote_bandwidth == 0, "bandwidth back to 0");
        CHECK(strstr(out, "notice: config: [remote] bandwidth changed from 100M to 0\n"),
              "log: %s", out);
        CHECK(!strstr(out, "secret-value"), "the secret is logged: %s", out);
        free(out);

        config_clear(&dst);
        config_clear(&src);
}

/* Help shows every [remote]/[cluster] key, the defaults in effect (here
 * from Slurm's variables), and nothing of the secret but its name. */
static void test_remote_help(void) {
        static const char *const want[] = {
                "\n[remote]\n", "--remote-endpoint=URL ", "endpoint = (unset)",
                "--remote-region=NAME ", "region = (unset)", "--remote-bucket=NAME ",
                "bucket = (unset)", "--remote-prefix=PREFIX ", "prefix = (unset)",
                "--remote-addressing=STYLE ", "addressing = auto",
                "--remote-credentials-file=PATH ", "credentials_file = (unset)",
                "--remote-profile=NAME ", "profile = (unset)", "--remote-access-key-id=KEY ",
                "access_key_id = (unset)", "(config file only)", " secret_access_key\n",
                "--remote-ca-file=PATH ", "ca_file = (unset)", "--remote-part-size=SIZE ",
                "part_size = 64M", "--remote-concurrency=N ", "concurrency = 8",
                "--remote-bandwidth=SIZE ", "bandwidth = 0", "--remote-keep=N ", "keep = 3",
                "--remote-retry-attempts=N ", "retry_attempts = 5", "\n[cluster]\n",
                "--cluster-node-index=N ", "node_index = 2", "--cluster-node-count=N ",
                "node_count = 4",
        };
        struct capture cap;
        const char *text, *p;

        env_reset();
        setenv("SLURM_NODEID", "2", 1);
        setenv("SLURM_NNODES", "4", 1);
        /* Nothing config reads, but help must not start showing it if a
         * default were ever taken from the environment. */
        setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value", 1);
        capture_open(&cap);
        config_print_help(cap.f);
        text = capture_text(&cap);
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                CHECK(strstr(text, want[i]), "help lacks '%s':\n%s", want[i], text);
        CHECK(!strstr(text, "--remote-secret-access-key"), "help offers the secret as a flag");
        CHECK(!strstr(text, "secret_access_key ="), "help shows a value for the secret");
        CHECK(!strstr(text, "env-secret-value"), "help shows the secret");
        /* bandwidth and keep say they reload; the help line after keep */
        p = strstr(text, "--remote-bandwidth=SIZE ");
        CHECK(p && strstr(p, "(SIGHUP reloads it)") &&
                      strstr(p, "(SIGHUP reloads it)") < strstr(p, "--remote-keep"),
              "bandwidth reloadable in help");
        capture_close(&cap);
        unsetenv("AWS_SECRET_ACCESS_KEY");
        env_reset();
}

/* ---- [cluster] peers and replication ----------------------------------- */

/* c's peers are exactly want (a NULL-terminated list of "host", "port"
 * pairs as host and decimal text). */
static void check_peers(const struct config *c, const char *const *want) {
        uint32_t n = 0;

        while (want[2 * n])
                n++;
        CHECK(c->cluster_npeers == n, "%u peers, want %u", c->cluster_npeers, n);
        if (c->cluster_npeers != n)
                return;
        CHECK((n == 0) == (c->cluster_peers == NULL), "peers list %p for %u entries",
              (void *)c->cluster_peers, n);
        for (uint32_t i = 0; i < n; i++) {
                const struct node_address *p = &c->cluster_peers[i];
                char port[16];
                snprintf(port, sizeof(port), "%u", p->port);
                CHECK(p->host && strcmp(p->host, want[2 * i]) == 0 &&
                              strcmp(port, want[2 * i + 1]) == 0,
                      "peer %u: '%s' port %s, want '%s' port %s", i, p->host ? p->host : "(null)",
                      port, want[2 * i], want[2 * i + 1]);
        }
}

#define PEERS(...) (const char *const[]){ __VA_ARGS__, NULL }

static void test_cluster_file(void) {
        char *path = tmp_path("cluster.conf");
        struct config c = config_default();
        struct topology t;
        struct capture cap;
        char buf[300];
        int r;

        env_reset();
        write_file(path, "[cluster]\n"
                         "node_index = 1\n"
                         "node_count = 5\n"
                         "peers = node0.example.com:7000, 10.0.0.2:7001,[fd00::3]:7002 ,\t"
                         "NODE-4:65535,[::FFFF:10.0.0.5]:1\n"
                         "listen = [::]:7001\n"
                         "replication_jump = 2\n"
                         "replication_factor = 3\n"
                         "placement = RING\n"
                         "psk_file = /etc/ckptd/peer.psk\n"
                         "peer_connect_timeout = 1500ms\n");
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == 0, "load: %d %s", r, capture_text(&cap));
        CHECK_STR(capture_text(&cap), "");
        /* hosts as written, IPv6 without its brackets */
        check_peers(&c, PEERS("node0.example.com", "7000", "10.0.0.2", "7001", "fd00::3", "7002",
                              "NODE-4", "65535", "::FFFF:10.0.0.5", "1"));
        CHECK_STR(c.cluster_listen.host, "::");
        CHECK(c.cluster_listen.port == 7001, "listen port %u", c.cluster_listen.port);
        CHECK(c.cluster_replication_jump == 2 && c.cluster_replication_factor == 3,
              "J %u F %u", c.cluster_replication_jump, c.cluster_replication_factor);
        CHECK(c.cluster_placement == PLACEMENT_RING, "placement %d", c.cluster_placement);
        CHECK_STR(c.cluster_psk_file, "/etc/ckptd/peer.psk");
        CHECK(c.cluster_peer_connect_timeout_ms == 1500, "timeout %llu",
              (unsigned long long)c.cluster_peer_connect_timeout_ms);
        CHECK(config_validate(&c, cap.f) == 0, "validate: %s", capture_text(&cap));
        capture_close(&cap);

        config_topology(&c, &t);
        CHECK(t.count == 5 && t.index == 1 && t.jump == 2 && t.factor == 3 &&
                      t.placement == PLACEMENT_RING,
              "config_topology: %u %u %u %u %d", t.count, t.index, t.jump, t.factor,
              (int)t.placement);
        CHECK_STR(node_address_format(&c.cluster_peers[2], buf, sizeof(buf)), "[fd00::3]:7002");
        CHECK_STR(node_address_format(&c.cluster_peers[0], buf, sizeof(buf)),
                  "node0.example.com:7000");
        CHECK_STR(node_address_format(&(struct node_address){ 0 }, buf, sizeof(buf)), "");
        CHECK_STR(node_address_format(&c.cluster_peers[0], buf, 5), "node");

        /* A later file that does not name them keeps them. */
        write_file(path, "[local]\nkeep = 4\n");
        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0, "second file: %s", capture_text(&cap));
        capture_close(&cap);
        check_peers(&c, PEERS("node0.example.com", "7000", "10.0.0.2", "7001", "fd00::3", "7002",
                              "NODE-4", "65535", "::FFFF:10.0.0.5", "1"));
        CHECK_STR(c.cluster_listen.host, "::");
        CHECK(c.cluster_listen.port == 7001 && c.keep == 4, "listen kept, keep applied");

        /* A failed load leaves the peers that were there, not defaults,
         * and not half of the new list. */
        {
                struct node_address *before = c.cluster_peers;
                write_file(path, "[cluster]\npeers = a:1,b:2,c:3,d:4,e:5\nplacement = clique\n"
                                 "replication_jump = 0\n");
                capture_open(&cap);
                CHECK(config_load_file(&c, path, cap.f) == -EINVAL, "bad load");
                capture_close(&cap);
                CHECK(c.cluster_peers == before && c.cluster_placement == PLACEMENT_RING &&
                              c.cluster_replication_jump == 2,
                      "nothing applied");
                check_peers(&c, PEERS("node0.example.com", "7000", "10.0.0.2", "7001", "fd00::3",
                                      "7002", "NODE-4", "65535", "::FFFF:10.0.0.5", "1"));
        }

        /* Empty values unset; names and ports at their limits are fine;
         * one host with several ports is several daemons (tests on one
         * machine). */
        {
                char label[64], name[300], text[800];
                memset(label, 'a', 63);
                label[63] = '\0';
                /* 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253 characters */
                snprintf(name, sizeof(name), "%s.%s.%s.%.61s", label, label, label, label);
                CHECK(strlen(name) == 253, "name length %zu", strlen(name));
                snprintf(text, sizeof(text),
                         "[cluster]\nnode_index = 0\nnode_count = 4\nlisten =\n"
                         "peers = %s:1,127.0.0.1:7001,127.0.0.1:7002,x:7001\n"
                         "psk_file = /k\nreplication_factor = 1\n", name);
                write_file(path, text);
                capture_open(&cap);
                r = config_load_file(&c, path, cap.f);
                CHECK(r == 0, "edge load: %d %s", r, capture_text(&cap));
                CHECK(config_validate(&c, cap.f) == 0, "edge validate: %s", capture_text(&cap));
                capture_close(&cap);
                check_peers(&c, PEERS(name, "1", "127.0.0.1", "7001", "127.0.0.1", "7002", "x",
                                      "7001"));
                CHECK(c.cluster_listen.host == NULL && c.cluster_listen.port == 0,
                      "listen unset");
                CHECK_STR(c.cluster_psk_file, "/k");
        }
        /* psk_file empties too (the edge file set one: node_count 4 needs it) */
        write_file(path, "[cluster]\npeers =\npsk_file =\n");
        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0, "empty peers: %s", capture_text(&cap));
        capture_close(&cap);
        check_peers(&c, PEERS(NULL));
        CHECK(c.cluster_psk_file == NULL, "psk_file unset");

        config_clear(&c);
        CHECK(c.cluster_peers == NULL && c.cluster_npeers == 0 && c.cluster_listen.host == NULL &&
                      c.cluster_psk_file == NULL,
              "config_clear frees the [cluster] values");
        config_clear(&c);
        unlink(path);
        free(path);
}

/* One bad value of key in [cluster]: the exact message and nothing
 * applied (check_file_error() checks the defaults afterwards). */
static void check_cluster_error(const char *key, const char *value, const char *want) {
        char text[1024], expect[1024];

        snprintf(text, sizeof(text), "[cluster]\nreplication_factor = 2\n%s = %s\n", key, value);
        snprintf(expect, sizeof(expect), "PATH:3: %s\n", want);
        check_file_error(text, expect);
}

#define HOST_RULES                                                                         \
        "is not a host name (letters, digits and '-' in dot-separated labels of 1 to 63 " \
        "characters, none beginning or ending with '-')"

static void test_cluster_file_errors(void) {
        char label[80], text[1024];

        check_cluster_error("peers", "a:1,,b:2",
                            "[cluster] peers: node 1's address is empty (expected host:port for "
                            "each node, separated by commas)");
        check_cluster_error("peers", "a:1,b:2,",
                            "[cluster] peers: node 2's address is empty (expected host:port for "
                            "each node, separated by commas)");
        check_cluster_error("peers", ", a:1",
                            "[cluster] peers: node 0's address is empty (expected host:port for "
                            "each node, separated by commas)");
        check_cluster_error("peers", "a:1, node1",
                            "[cluster] peers: node 1's address 'node1': no port (expected "
                            "host:port, such as node1:7000)");
        check_cluster_error("peers", "7000",
                            "[cluster] peers: node 0's address '7000': no host (expected "
                            "host:port, such as 0.0.0.0:7000)");
        check_cluster_error("peers", "node1:",
                            "[cluster] peers: node 0's address 'node1:': the port after ':' is "
                            "missing");
        check_cluster_error("peers", "node1:0",
                            "[cluster] peers: node 0's address 'node1:0': port 0 is out of range "
                            "(1..65535)");
        check_cluster_error("peers", "node1:65536",
                            "[cluster] peers: node 0's address 'node1:65536': port 65536 is out "
                            "of range (1..65535)");
        check_cluster_error("peers", "node1:7k",
                            "[cluster] peers: node 0's address 'node1:7k': port '7k' is not a "
                            "number 1..65535");
        check_cluster_error("peers", "node1:+70",
                            "[cluster] peers: node 0's address 'node1:+70': port '+70' is not a "
                            "number 1..65535");
        check_cluster_error("peers", "node1:123456",
                            "[cluster] peers: node 0's address 'node1:123456': port '123456' is "
                            "not a number 1..65535");
        check_cluster_error("peers", ":7000",
                            "[cluster] peers: node 0's address ':7000': the host is missing");
        check_cluster_error("peers", "no_de:7000",
                            "[cluster] peers: node 0's address 'no_de:7000': 'no_de' " HOST_RULES);
        check_cluster_error("peers", "a:1,no de:7000",
                            "[cluster] peers: node 1's address 'no de:7000': 'no de' " HOST_RULES);
        check_cluster_error("peers", "-node:1",
                            "[cluster] peers: node 0's address '-node:1': '-node' " HOST_RULES);
        check_cluster_error("peers", "node-.x:1",
                            "[cluster] peers: node 0's address 'node-.x:1': 'node-.x' " HOST_RULES);
        check_cluster_error("peers", "a..b:1",
                            "[cluster] peers: node 0's address 'a..b:1': 'a..b' " HOST_RULES);
        check_cluster_error("peers", "node.:1",
                            "[cluster] peers: node 0's address 'node.:1': 'node.' " HOST_RULES);
        memset(label, 'l', 64);
        label[64] = '\0';
        snprintf(text, sizeof(text),
                 "[cluster] peers: node 0's address '%s.x:1': '%s.x' " HOST_RULES, label, label);
        {
                char value[100];
                snprintf(value, sizeof(value), "%s.x:1", label);
                check_cluster_error("peers", value, text);
        }
        {
                char name[300], value[310];
                memset(name, 'n', 254);
                for (int i = 50; i < 254; i += 50)
                        name[i] = '.';
                name[254] = '\0';
                snprintf(value, sizeof(value), "%s:1", name);
                snprintf(text, sizeof(text),
                         "[cluster] peers: node 0's address '%s': the host name is 254 "
                         "characters long; DNS allows at most 253", value);
                check_cluster_error("peers", value, text);
        }
        check_cluster_error("peers", "10.1:7000",
                            "[cluster] peers: node 0's address '10.1:7000': '10.1' is not an "
                            "IPv4 address (four numbers 0..255, such as 10.0.0.1)");
        check_cluster_error("peers", "10.0.0.256:7000",
                            "[cluster] peers: node 0's address '10.0.0.256:7000': '10.0.0.256' "
                            "is not an IPv4 address (four numbers 0..255, such as 10.0.0.1)");
        check_cluster_error("peers", "::1:7000",
                            "[cluster] peers: node 0's address '::1:7000': an IPv6 address must "
                            "be in brackets, such as [fd00::1]:7000");
        check_cluster_error("peers", "fd00::1",
                            "[cluster] peers: node 0's address 'fd00::1': an IPv6 address must "
                            "be in brackets, such as [fd00::1]:7000");
        check_cluster_error("peers", "[::1:7000",
                            "[cluster] peers: node 0's address '[::1:7000': '[' without a "
                            "closing ']'");
        check_cluster_error("peers", "[::1]7000",
                            "[cluster] peers: node 0's address '[::1]7000': expected ':' and a "
                            "port after ']'");
        check_cluster_error("peers", "[::1]",
                            "[cluster] peers: node 0's address '[::1]': expected ':' and a port "
                            "after ']'");
        check_cluster_error("peers", "[]:7000",
                            "[cluster] peers: node 0's address '[]:7000': '' is not an IPv6 "
                            "address");
        check_cluster_error("peers", "[10.0.0.1]:7000",
                            "[cluster] peers: node 0's address '[10.0.0.1]:7000': '10.0.0.1' is "
                            "not an IPv6 address");
        check_cluster_error("peers", "[fe80::1%eth0]:7000",
                            "[cluster] peers: node 0's address '[fe80::1%eth0]:7000': "
                            "'fe80::1%eth0' is not an IPv6 address");

        /* Duplicates: the first entry (in list order) that repeats an
         * earlier one, however it is spelled. */
        check_cluster_error("peers", "node1:7000,node2:7000,Node1:7000",
                            "[cluster] peers: nodes 0 and 2 have the same address 'Node1:7000'; "
                            "each node needs its own (another host or port)");
        check_cluster_error("peers", "[::1]:9,[0:0::1]:9",
                            "[cluster] peers: nodes 0 and 1 have the same address '[0:0::1]:9'; "
                            "each node needs its own (another host or port)");
        check_cluster_error("peers", "a:1,b:1,c:1,b:1,a:1",
                            "[cluster] peers: nodes 1 and 3 have the same address 'b:1'; each "
                            "node needs its own (another host or port)");
        check_cluster_error("peers", "a:1,a:1,a:1",
                            "[cluster] peers: nodes 0 and 1 have the same address 'a:1'; each "
                            "node needs its own (another host or port)");
        check_cluster_error("peers", "10.0.0.1:5,x:5,10.0.0.1:5",
                            "[cluster] peers: nodes 0 and 2 have the same address '10.0.0.1:5'; "
                            "each node needs its own (another host or port)");

        /* listen: the same address rules */
        check_cluster_error("listen", "7000",
                            "[cluster] listen '7000': no host (expected host:port, such as "
                            "0.0.0.0:7000)");
        check_cluster_error("listen", "0.0.0.0:0",
                            "[cluster] listen '0.0.0.0:0': port 0 is out of range (1..65535)");
        check_cluster_error("listen", ":::7000",
                            "[cluster] listen ':::7000': an IPv6 address must be in brackets, "
                            "such as [fd00::1]:7000");
        check_cluster_error("listen", "a:1,b:2",
                            "[cluster] listen 'a:1,b:2': one address only (host:port)");

        /* the numbers and choices */
        check_cluster_error("replication_jump", "0",
                            "[cluster] replication_jump = 0 is out of range (1..65535)");
        check_cluster_error("replication_jump", "65536",
                            "[cluster] replication_jump = 65536 is out of range (1..65535)");
        check_cluster_error("replication_factor", "3",
                            "duplicate key 'replication_factor' in section [cluster] (first set "
                            "on line 2)");
        check_file_error("[cluster]\nreplication_factor = 0\n",
                         "PATH:2: [cluster] replication_factor = 0 is out of range (1..16)\n");
        check_file_error("[cluster]\nreplication_factor = 17\n",
                         "PATH:2: [cluster] replication_factor = 17 is out of range (1..16)\n");
        check_cluster_error("placement", "star",
                            "invalid value 'star' for [cluster] placement (expected clique or "
                            "ring)");
        check_cluster_error("placement", "",
                            "missing value for [cluster] placement (expected clique or ring)");
        check_cluster_error("placement", "1",
                            "invalid value '1' for [cluster] placement (expected clique or ring)");
        check_cluster_error("psk_file", "peer.psk",
                            "[cluster] psk_file must be an absolute path, not 'peer.psk'");
        check_cluster_error("peer_connect_timeout", "50ms",
                            "[cluster] peer_connect_timeout = 50ms is out of range (100ms..10m)");
        check_cluster_error("peer_connect_timeout", "11m",
                            "[cluster] peer_connect_timeout = 11m is out of range (100ms..10m)");
        check_cluster_error("peer_connect_timeout", "",
                            "missing value for [cluster] peer_connect_timeout (expected a whole "
                            "number with an optional ms, s, m or h suffix; bare is ms)");
        check_file_error("[cluster]\npeers = a:1\npeers = b:1\n",
                         "PATH:3: duplicate key 'peers' in section [cluster] (first set on line "
                         "2)\n");
}

/* The connection limits (issue 9): set from a file and from flags, and
 * their ranges. */
static void test_connection_limits(void) {
        struct config c = config_default();
        struct capture cap;
        char *path = tmp_path("limits.conf");

        write_file(path, "[daemon]\nclient_connections_max = 100\n"
                         "client_connections_per_uid = 100\nopen_files_per_uid = 64\n"
                         "[cluster]\npeer_handshake_timeout = 1500ms\n"
                         "peer_keepalive = 0\npeer_unauthenticated_max = 8\n"
                         "peer_unauthenticated_per_address = 1\n");

        capture_open(&cap);
        CHECK(config_load_file(&c, path, cap.f) == 0, "limits file: %s", capture_text(&cap));
        CHECK(config_validate(&c, cap.f) == 0, "limits validate: %s", capture_text(&cap));
        capture_close(&cap);
        CHECK(c.client_connections_max == 100 && c.client_connections_per_uid == 100,
              "client limits %u %u", c.client_connections_max, c.client_connections_per_uid);
        CHECK(c.open_files_per_uid == 64, "open_files_per_uid %u", c.open_files_per_uid);
        CHECK(c.cluster_peer_handshake_timeout_ms == 1500 && c.cluster_peer_keepalive_ms == 0,
              "peer timeouts %llu %llu", (unsigned long long)c.cluster_peer_handshake_timeout_ms,
              (unsigned long long)c.cluster_peer_keepalive_ms);
        CHECK(c.cluster_peer_unauthenticated_max == 8 &&
                      c.cluster_peer_unauthenticated_per_address == 1,
              "peer caps %u %u", c.cluster_peer_unauthenticated_max,
              c.cluster_peer_unauthenticated_per_address);
        unlink(path);
        free(path);

        capture_open(&cap);
        CHECK(PARSE(&c, &cap, "--client-connections-max=2000",
                    "--cluster-peer-unauthenticated-max", "16", "--open-files-per-uid=500") == 0,
              "limit flags: %s", capture_text(&cap));
        capture_close(&cap);
        CHECK(c.open_files_per_uid == 500, "--open-files-per-uid: %u", c.open_files_per_uid);
        CHECK(c.client_connections_max == 2000 && c.cluster_peer_unauthenticated_max == 16,
              "flags %u %u", c.client_connections_max, c.cluster_peer_unauthenticated_max);
        config_clear(&c);

        check_file_error("[daemon]\nclient_connections_max = 0\n",
                         "PATH:2: [daemon] client_connections_max = 0 is out of range "
                         "(1..1048576)\n");
        check_file_error("[daemon]\nclient_connections_per_uid = 0\n",
                         "PATH:2: [daemon] client_connections_per_uid = 0 is out of range "
                         "(1..1048576)\n");
        /* fewer than a save's directories and one shard could save nothing */
        check_file_error("[daemon]\nopen_files_per_uid = 3\n",
                         "PATH:2: [daemon] open_files_per_uid = 3 is out of range "
                         "(4..1048576)\n");
        check_file_error("[daemon]\nopen_files_per_uid = 1048577\n",
                         "PATH:2: [daemon] open_files_per_uid = 1048577 is out of range "
                         "(4..1048576)\n");
        check_cluster_error("peer_handshake_timeout", "50ms",
                            "[cluster] peer_handshake_timeout = 50ms is out of range "
                            "(100ms..10m)");
        check_cluster_error("peer_keepalive", "3h",
                            "[cluster] peer_keepalive = 3h is out of range (0ms..2h)");
        check_cluster_error("peer_unauthenticated_max", "0",
                            "[cluster] peer_unauthenticated_max = 0 is out of range (1..65536)");
        check_cluster_error("peer_unauthenticated_per_address", "65537",
                            "[cluster] peer_unauthenticated_per_address = 65537 is out of range "
                            "(1..65536)");

        /* a share larger than the total is the total: lowering only the
         * total must not need a second key */
        struct config v = config_default();
        v.client_connections_max = 10;
        v.cluster_peer_unauthenticated_max = 2;
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "shares above the totals: %s", capture_text(&cap));
        capture_close(&cap);
        config_clear(&v);
}

static void test_cluster_flags(void) {
        struct config c = config_default();
        struct capture cap;
        int r;

        capture_open(&cap);
        r = PARSE(&c, &cap, "--cluster-node-count=2", "--cluster-peers", "[::1]:7000,[::1]:7001",
                  "--cluster-listen=[::1]:7000", "--cluster-replication-factor", "2",
                  "--cluster-replication-jump=1", "--cluster-placement=ring",
                  "--cluster-psk-file=/run/psk", "--cluster-peer-connect-timeout", "2s");
        CHECK(r == 0, "parse: %d %s", r, capture_text(&cap));
        CHECK_STR(capture_text(&cap), "");
        check_peers(&c, PEERS("::1", "7000", "::1", "7001"));
        CHECK_STR(c.cluster_listen.host, "::1");
        CHECK(c.cluster_listen.port == 7000, "listen port");
        CHECK(c.cluster_replication_factor == 2 && c.cluster_placement == PLACEMENT_RING,
              "factor/placement");
        CHECK_STR(c.cluster_psk_file, "/run/psk");
        CHECK(c.cluster_peer_connect_timeout_ms == 2000, "timeout");
        CHECK(config_validate(&c, cap.f) == 0, "validate: %s", capture_text(&cap));
        /* a later flag replaces the whole list */
        CHECK(PARSE(&c, &cap, "--cluster-peers=h:1,h:2") == 0, "second list");
        check_peers(&c, PEERS("h", "1", "h", "2"));
        capture_close(&cap);
        config_clear(&c);

        FLAG_ERROR("--cluster-peers: [cluster] peers: node 1's address 'b': no port (expected "
                   "host:port, such as b:7000)\n", "--cluster-node-count=2",
                   "--cluster-peers=a:1,b");
        FLAG_ERROR("--cluster-peers: [cluster] peers: nodes 0 and 1 have the same address "
                   "'a:1'; each node needs its own (another host or port)\n",
                   "--cluster-peers=a:1,a:1");
        FLAG_ERROR("--cluster-listen: [cluster] listen 'x': no port (expected host:port, such as "
                   "x:7000)\n", "--cluster-listen", "x");
        FLAG_ERROR("--cluster-placement: invalid value 'mesh' for [cluster] placement (expected "
                   "clique or ring)\n", "--cluster-placement=mesh");
        FLAG_ERROR("--cluster-replication-factor: [cluster] replication_factor = 17 is out of "
                   "range (1..16)\n", "--cluster-replication-factor=17");
}

/* The largest list config allows parses (and its duplicate check does not
 * take quadratic time); one entry more is refused. */
static void test_cluster_many_peers(void) {
        struct config c = config_default();
        struct capture cap;
        char *list = peer_list(65536);
        size_t arg_len = strlen(list) + 32;
        char *arg = malloc(arg_len);
        int r;

        if (!arg)
                exit(1);
        snprintf(arg, arg_len, "--cluster-peers=%s", list);
        capture_open(&cap);
        r = PARSE(&c, &cap, "--cluster-node-count=65536", arg,
                  "--cluster-psk-file=/etc/ckptd/peer.psk");
        CHECK(r == 0, "65536 peers: %d %s", r, capture_text(&cap));
        CHECK(c.cluster_npeers == 65536 && c.cluster_peers &&
                      strcmp(c.cluster_peers[65535].host, "node65535.x") == 0 &&
                      c.cluster_peers[65535].port == 4,
              "65536 peers parsed");
        CHECK(config_validate(&c, cap.f) == 0, "validate: %s", capture_text(&cap));
        capture_close(&cap);
        config_clear(&c);

        snprintf(arg, arg_len, "--cluster-peers=%s,one:1", list);
        c = config_default();
        capture_open(&cap);
        CHECK(PARSE(&c, &cap, arg) == -EINVAL, "65537 peers");
        CHECK_STR(capture_text(&cap), "--cluster-peers: [cluster] peers lists 65537 addresses; "
                                      "at most 65536 (one per node)\n");
        capture_close(&cap);
        check_numeric_defaults(&c);
        config_clear(&c);
        free(list);
        free(arg);
}

static void test_cluster_validate(void) {
        struct config c = config_default(), v;
        struct node_address four[4] = { { (char *)"n0", 7000 }, { (char *)"n1", 7000 },
                                         { (char *)"n2", 7000 }, { (char *)"n3", 7000 } };
        struct node_address six[6] = { { (char *)"n0", 1 }, { (char *)"n1", 1 },
                                        { (char *)"n2", 1 }, { (char *)"n3", 1 },
                                        { (char *)"n4", 1 }, { (char *)"n5", 1 } };
        struct node_address bad[2] = { { (char *)"n0", 7000 }, { (char *)"n 1", 7000 } };
        struct capture cap;

        /* A replicating cluster that passes, as the base for the others. */
        v = c;
        v.cluster_node_count = 4;
        v.cluster_node_index = 3;
        v.cluster_peers = four;
        v.cluster_npeers = 4;
        v.cluster_replication_factor = 2;
        v.cluster_replication_jump = 2;
        v.cluster_psk_file = (char *)"/etc/ckptd/peer.psk";
        capture_open(&cap);
        CHECK(config_validate(&v, cap.f) == 0, "base: %s", capture_text(&cap));
        capture_close(&cap);

        {
                struct config w = v;
                w.cluster_npeers = 3;
                check_invalid(&w, "[cluster] peers lists 3 addresses but [cluster] node_count = "
                                  "4: give one host:port per node, node i's at position i "
                                  "(counting from 0)\n");
                /* peers without replication are still one per node */
                w.cluster_replication_factor = 1;
                check_invalid(&w, "[cluster] peers lists 3 addresses but [cluster] node_count = "
                                  "4: give one host:port per node, node i's at position i "
                                  "(counting from 0)\n");
        }
        {
                struct config w = v;
                w.cluster_peers = NULL;
                w.cluster_npeers = 0;
                w.cluster_psk_file = NULL;
                check_invalid(&w, "[cluster] replication_factor = 2 needs [cluster] peers, the "
                                  "host:port of every node, to send replicas to (or set "
                                  "replication_factor = 1: no replication)\n"
                                  "[cluster] replication_factor = 2 needs [cluster] psk_file, "
                                  "the pre-shared key with which nodes authenticate each other "
                                  "(the same file on every node, mode 0600)\n");
                w.cluster_psk_file = (char *)"";
                w.cluster_peers = four;
                w.cluster_npeers = 4;
                check_invalid(&w, "[cluster] replication_factor = 2 needs [cluster] psk_file, "
                                  "the pre-shared key with which nodes authenticate each other "
                                  "(the same file on every node, mode 0600)\n");
                /* Without replication both are still needed: the nodes
                 * agree on each commit over the peer links (issue 10). */
                w.cluster_replication_factor = 1;
                w.cluster_peers = NULL;
                w.cluster_npeers = 0;
                check_invalid(&w, NEEDS_PEERS("4") NEEDS_PSK_FILE("4"));
                w.cluster_peers = four;
                w.cluster_npeers = 4;
                check_invalid(&w, NEEDS_PSK_FILE("4"));
                w.cluster_psk_file = (char *)"/etc/ckptd/peer.psk";
                w.cluster_peers = NULL;
                w.cluster_npeers = 0;
                check_invalid(&w, NEEDS_PEERS("4"));
                w.cluster_peers = four;
                w.cluster_npeers = 4;
                capture_open(&cap);
                CHECK(config_validate(&w, cap.f) == 0, "F=1 with peers and psk_file: %s",
                      capture_text(&cap));
                capture_close(&cap);
        }

        /* The smallest cluster without replication, from the defaults:
         * both refusals, word for word, and nothing else. */
        {
                struct config w = c;
                w.cluster_node_count = 2;
                check_invalid(&w, "[cluster] node_count = 2 needs [cluster] peers, the "
                                  "host:port of every node: the nodes agree on each commit "
                                  "over them (or set node_count = 1: a single node)\n"
                                  "[cluster] node_count = 2 needs [cluster] psk_file, the "
                                  "pre-shared key with which nodes authenticate each other "
                                  "(the same file on every node, mode 0600)\n");
        }

        /* A peer's 4 MiB data frame goes into one pool extent. */
        {
                struct config w = v;
                w.slot_size = 2 * MiB;
                w.pool_size = 64 * MiB;
                w.io_size = MiB;
                check_invalid(&w, "[pool] slot_size = 2M is smaller than a peer's data frame "
                                  "(4 MiB): with [cluster] replication_factor = 2 it must be at "
                                  "least 4M\n");
                w.slot_size = 4 * MiB;
                capture_open(&cap);
                CHECK(config_validate(&w, cap.f) == 0, "4M slots: %s", capture_text(&cap));
                capture_close(&cap);
                /* a node that does not replicate receives no frames */
                w.slot_size = 2 * MiB;
                w.cluster_replication_factor = 1;
                capture_open(&cap);
                CHECK(config_validate(&w, cap.f) == 0, "F=1, 2M slots: %s", capture_text(&cap));
                capture_close(&cap);
        }

        /* The placement rule, with topology's message behind "[cluster] ". */
        {
                struct config w = v;
                w.cluster_node_count = 6;
                w.cluster_peers = six;
                w.cluster_npeers = 6;
                check_invalid(&w, "[cluster] placement = clique needs node_count to be a "
                                  "multiple of replication_jump * replication_factor = 2 * 2 = "
                                  "4, and node_count = 6 is not: node_count = 4 or 8 would work "
                                  "with these; for node_count = 6 and replication_factor = 2, "
                                  "replication_jump = 1 or 3 would work; or use placement = "
                                  "ring, which accepts these values\n");
                w.cluster_placement = PLACEMENT_RING;
                capture_open(&cap);
                CHECK(config_validate(&w, cap.f) == 0, "ring N=6 J=2 F=2: %s",
                      capture_text(&cap));
                capture_close(&cap);
                w.cluster_replication_jump = 5;
                w.cluster_replication_factor = 3;
                check_invalid(&w, "[cluster] placement = ring needs node_count > "
                                  "(replication_factor - 1) * replication_jump = 2 * 5 = 10 (or "
                                  "a node's replicas would come back to the node itself or land "
                                  "twice on one node), but node_count = 6: node_count = 11 or "
                                  "more, replication_jump at most 2, or replication_factor at "
                                  "most 2 would work\n");
                w.cluster_replication_factor = 8;
                w.cluster_replication_jump = 1;
                check_invalid(&w, "[cluster] replication_factor = 8 is larger than node_count = "
                                  "6: 8 copies need 8 distinct nodes; use replication_factor "
                                  "1..6\n");
        }

        /* A key out of range on its own is reported once, by its own rule. */
        {
                struct config w = v;
                w.cluster_replication_jump = 0;
                w.cluster_placement = 2;
                check_invalid(&w, "[cluster] replication_jump = 0 is out of range (1..65535)\n"
                                  "[cluster] placement = 2 is out of range (clique..ring)\n");
                w = v;
                w.cluster_replication_factor = 17;
                check_invalid(&w, "[cluster] replication_factor = 17 is out of range (1..16)\n");
                w = v;
                w.cluster_node_index = 4;
                check_invalid(&w, "[cluster] node_index = 4 must be less than [cluster] "
                                  "node_count = 4 (their defaults come from $SLURM_NODEID and "
                                  "$SLURM_NNODES)\n");
        }

        /* Addresses set by code: the parser's rules and messages. */
        {
                struct config w = c;
                w.cluster_node_count = 2;
                w.cluster_peers = bad;
                w.cluster_npeers = 2;
                w.cluster_psk_file = (char *)"/etc/ckptd/peer.psk"; /* node_count > 1 */
                check_invalid(&w, "[cluster] peers: node 1's address 'n 1:7000': 'n 1' " HOST_RULES
                                  "\n");
                bad[1].host = (char *)"N0";
                check_invalid(&w, "[cluster] peers: nodes 0 and 1 have the same address "
                                  "'N0:7000'; each node needs its own (another host or port)\n");
                bad[1].host = (char *)"fd00::1";
                bad[1].port = 0;
                check_invalid(&w, "[cluster] peers: node 1's address '[fd00::1]:0': port 0 is "
                                  "out of range (1..65535)\n");
                bad[1].host = NULL;
                bad[1].port = 1;
                check_invalid(&w, "[cluster] peers: node 1's address '': the host is "
                                  "missing\n");
                bad[1].host = (char *)"[fd00::1]";
                check_invalid(&w, "[cluster] peers: node 1's address '[[fd00::1]]:1': "
                                  "'[fd00::1]' is not an IPv6 address\n");
                bad[1].host = (char *)"fd00::1";
                capture_open(&cap);
                CHECK(config_validate(&w, cap.f) == 0, "fixed: %s", capture_text(&cap));
                capture_close(&cap);

                w.cluster_listen.host = (char *)"10.0.0.300";
                w.cluster_listen.port = 1;
                check_invalid(&w, "[cluster] listen '10.0.0.300:1': '10.0.0.300' is not an IPv4 "
                                  "address (four numbers 0..255, such as 10.0.0.1)\n");
                w.cluster_listen.host = (char *)"0.0.0.0";
                w.cluster_listen.port = 0;
                check_invalid(&w, "[cluster] listen '0.0.0.0:0': port 0 is out of range "
                                  "(1..65535)\n");
                w.cluster_listen.port = 7000;
                w.cluster_psk_file = (char *)"peer.psk";
                check_invalid(&w, "[cluster] psk_file must be an absolute path, not "
                                  "'peer.psk'\n");
                w.cluster_psk_file = (char *)"/etc/ckptd/peer.psk";
                w.cluster_peer_connect_timeout_ms = 0;
                check_invalid(&w, "[cluster] peer_connect_timeout = 0ms is out of range "
                                  "(100ms..10m)\n");
        }
        config_clear(&c);
}

static void test_cluster_reload(void) {
        struct config dst = config_default(), src;
        struct capture cap;
        char *out;

        capture_open(&cap);
        CHECK(PARSE(&dst, &cap, "--cluster-node-count=2", "--cluster-peers=a:1,b:1",
                    "--cluster-listen=0.0.0.0:1") == 0,
              "dst: %s", capture_text(&cap));
        capture_close(&cap);
        src = config_default();
        capture_open(&cap);
        CHECK(PARSE(&src, &cap, "--cluster-node-count=2", "--cluster-peers=a:1,b:1",
                    "--cluster-listen=0.0.0.0:1") == 0,
              "src: %s", capture_text(&cap));
        capture_close(&cap);

        /* Equal lists in other memory: nothing to say. */
        stderr_capture_begin();
        config_reload(&dst, &src);
        out = stderr_capture_end();
        CHECK_STR(out, "");
        free(out);

        capture_open(&cap);
        CHECK(PARSE(&src, &cap, "--cluster-peers=a:1,b:2", "--cluster-listen=0.0.0.0:2",
                    "--cluster-replication-factor=2", "--cluster-placement=ring",
                    "--cluster-psk-file=/k", "--cluster-peer-connect-timeout=1s") == 0,
              "src changes: %s", capture_text(&cap));
        capture_close(&cap);
        stderr_capture_begin();
        config_reload(&dst, &src);
        out = stderr_capture_end();
        check_peers(&dst, PEERS("a", "1", "b", "1"));
        CHECK(dst.cluster_listen.port == 1 && dst.cluster_replication_factor == 1 &&
                      dst.cluster_placement == PLACEMENT_CLIQUE && dst.cluster_psk_file == NULL &&
                      dst.cluster_peer_connect_timeout_ms == 5000,
              "[cluster] keys are not reloaded");
        static const char *const keys_changed[] = { "peers", "listen", "replication_factor",
                                                    "placement", "psk_file",
                                                    "peer_connect_timeout" };
        for (size_t i = 0; i < sizeof(keys_changed) / sizeof(keys_changed[0]); i++) {
                char want[160];
                snprintf(want, sizeof(want),
                         "warning: config: [cluster] %s changed but takes effect only after a "
                         "restart\n", keys_changed[i]);
                CHECK(strstr(out, want), "log lacks '%s': %s", want, out);
        }
        CHECK(!strstr(out, "replication_jump"), "jump did not change: %s", out);
        free(out);

        config_clear(&dst);
        config_clear(&src);
}

static void test_cluster_help(void) {
        static const char *const want[] = {
                "--cluster-peers=HOST:PORT,... ", "peers = (unset)",
                "--cluster-listen=HOST:PORT ", "listen = (unset)",
                "--cluster-replication-jump=N ", "replication_jump = 1",
                "--cluster-replication-factor=N ", "replication_factor = 1",
                "--cluster-placement=RULE ", "placement = clique",
                "--cluster-psk-file=PATH ", "psk_file = (unset)",
                "--cluster-peer-connect-timeout=DURATION ", "peer_connect_timeout = 5s",
        };
        struct capture cap;
        const char *text;

        env_reset();
        capture_open(&cap);
        config_print_help(cap.f);
        text = capture_text(&cap);
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                CHECK(strstr(text, want[i]), "help lacks '%s':\n%s", want[i], text);
        /* after the [cluster] heading */
        CHECK(strstr(text, "\n[cluster]\n") &&
                      strstr(text, "\n[cluster]\n") < strstr(text, "--cluster-peers="),
              "peers under [cluster]");
        capture_close(&cap);
}

int main(void) {
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return 1;
        }
        stderr_file = tmp_path("stderr");
        unsetenv("JOURNAL_STREAM");
        env_reset();

        test_log();
        test_parse_helpers();
        test_defaults();
        test_file_all_types();
        test_file_errors();
        test_file_open_errors();
        test_flags();
        test_flag_errors();
        test_path_from_args();
        test_precedence();
        test_validate();
        test_check_keys_equal();
        test_reload();
        test_help();
        test_remote_file();
        test_remote_file_errors();
        test_secret_file_mode();
        test_remote_flags();
        test_remote_flag_errors();
        test_cluster_env();
        test_remote_validate();
        test_remote_reload();
        test_remote_help();
        test_cluster_file();
        test_cluster_file_errors();
        test_cluster_flags();
        test_connection_limits();
        test_cluster_many_peers();
        test_cluster_validate();
        test_cluster_reload();
        test_cluster_help();

        unlink(stderr_file);
        free(stderr_file);
        {
                char *p = tmp_path("all.conf");
                unlink(p);
                free(p);
                p = tmp_path("bad.conf");
                unlink(p);
                free(p);
                p = tmp_path("prec.conf");
                unlink(p);
                free(p);
                p = tmp_path("cluster.conf");
                unlink(p);
                free(p);
        }
        rmdir(tmpdir);

        if (failures) {
                fprintf(stderr, "test-config: %d check(s) failed\n", failures);
                return 1;
        }
        printf("test-config: ok\n");
        return 0;
}
