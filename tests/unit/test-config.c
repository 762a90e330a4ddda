/* SPDX-License-Identifier: MIT */
/*
 * Unit test for config (and the bits of util/log it leans on): defaults
 * under each environment rule, the file format, every error a user can get
 * with its exact "path:line:" prefix, flags in both spellings, precedence,
 * the cross-field checks, SIGHUP reload, and the value parsers' edges.
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

static char *tmp_path(const char *name) {
        char *p;
        if (asprintf(&p, "%s/%s", tmpdir, name) < 0)
                exit(1);
        return p;
}

/* Environment the defaults depend on, reset to a known state. */
static void env_reset(void) {
        setenv("HOME", "/home/tester", 1);
        unsetenv("XDG_STATE_HOME");
        unsetenv("XDG_RUNTIME_DIR");
        unsetenv("STATE_DIRECTORY");
        unsetenv("RUNTIME_DIRECTORY");
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
                CHECK(strlen(log_last_error()) == 511, "last error %zu bytes",
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
        CHECK(c->io_size == MiB, "io_size %llu", (unsigned long long)c->io_size);
        CHECK(c->queue_depth == 16, "queue_depth %u", c->queue_depth);
        CHECK(c->keep == 3, "keep %u", c->keep);
        CHECK(c->direct_io == true, "direct_io");
        CHECK(c->register_buffers == true, "register_buffers");
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

/* Load text that must fail; the whole error output must equal want (with
 * "PATH" replaced by the file's path), and c must be unchanged. */
static void check_file_error(const char *text, const char *want_fmt) {
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

        write_file(path, text);
        capture_open(&cap);
        r = config_load_file(&c, path, cap.f);
        CHECK(r == -EINVAL, "load returned %d for:\n%s", r, text);
        CHECK(strcmp(capture_text(&cap), want) == 0, "for:\n%s\ngot:\n%swant:\n%s", text,
              capture_text(&cap), want);
        capture_close(&cap);
        /* Nothing applied, not even the good lines before the bad one. */
        check_numeric_defaults(&c);
        config_clear(&c);
        free(want);
        free(path);
}

static void test_file_errors(void) {
        check_file_error("[daemon]\nworkers = 4\n[bogus]\nkey = 1\n[pool]\nsize = 2G\n",
                         "PATH:3: unknown section [bogus] (known: [daemon], [pool], [local])\n");
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
                         "[pool] or [local])\n");
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
        src.keep = 12;

        stderr_capture_begin();
        config_reload(&dst, &src);
        out = stderr_capture_end();

        CHECK(dst.log_level == LOG_DEBUG, "log_level reloaded");
        CHECK(dst.pool_wait_ms == 5000, "wait_timeout reloaded");
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
        CHECK(strstr(out, "notice: config: [local] keep changed from 3 to 12\n"), "log: %s",
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

int main(void) {
        if (!mkdtemp(tmpdir)) {
                perror("mkdtemp");
                return 1;
        }
        stderr_file = tmp_path("stderr");
        unsetenv("JOURNAL_STREAM");

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
        test_reload();
        test_help();

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
        }
        rmdir(tmpdir);

        if (failures) {
                fprintf(stderr, "test-config: %d check(s) failed\n", failures);
                return 1;
        }
        printf("test-config: ok\n");
        return 0;
}
