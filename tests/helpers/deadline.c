/* SPDX-License-Identifier: MIT */
/*
 * ckpt-deadline — makes one libckpt call while the test holds ckptd stopped,
 * and reports how long it took, for tests/integration/test_client_deadlines.py.
 *
 *   ckpt-deadline CALL --job J --step S [--timeout MS] [--set-timeout MS]
 *
 * CALL is a libckpt function without its ckpt_ prefix: connect, save_begin,
 * shard_begin, shard_buffer, shard_commit, save_write, save_finish,
 * save_abort, wait, commit, latest, latest_rank, shard_list, read, map.
 * (job, step) must be committed with rank 0 holding a shard "a" before it
 * runs; the save-path calls work on step + 1; wait asks for tier committed.
 *
 * A conversation on stdin/stdout, one line each way, so the test can stop
 * and continue the daemon between the steps:
 *   helper: "ready"                  everything the call needs is set up
 *   test:   "go"                     (the daemon is stopped now)
 *   helper: "result RC MS MESSAGE"   the call's return, its wall time, and
 *                                    ckpt_last_error()
 *   test:   "after"                  (the daemon runs again)
 *   helper: "old RC MESSAGE"         ckpt_latest() on the same connection
 *                                    ("old none" after a failed connect)
 *   helper: "new RC STEP"            ckpt_latest() on a new connection
 *   helper: "resave RC"              save-path calls only: saving step + 1
 *                                    again on a new connection works (the
 *                                    daemon dropped the old connection's save)
 *
 * Uses only the libckpt 0.1 ABI, except ckpt_set_timeout() for
 * --set-timeout, which it looks up at run time: so the same binary also runs
 * against an older libckpt.so (LD_LIBRARY_PATH) and shows it hang.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static const char *job = "dl";
static uint64_t step = 1;
static uint32_t timeout_ms = 2000;
static long set_timeout_ms = -1;

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for the test's next line; exit when it went away. */
static void expect(const char *word) {
        char line[64];
        if (!fgets(line, sizeof(line), stdin) || strncmp(line, word, strlen(word)) != 0) {
                fprintf(stderr, "ckpt-deadline: expected '%s' on stdin\n", word);
                exit(2);
        }
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
        fflush(stdout);
}

static int setup_fail(int r, const char *what, struct ckpt_conn *c) {
        fprintf(stderr, "ckpt-deadline: setup %s: %d %s\n", what, r,
                c ? ckpt_last_error(c) : ckpt_strerror(r));
        exit(1);
}

static struct ckpt_conn *connect_or_die(void) {
        struct ckpt_conn *c;
        int r = ckpt_connect(NULL, &c);
        if (r < 0)
                setup_fail(r, "connect", NULL);
        if (set_timeout_ms >= 0) {
                int (*set)(struct ckpt_conn *, uint32_t) =
                        (int (*)(struct ckpt_conn *, uint32_t))dlsym(RTLD_DEFAULT,
                                                                     "ckpt_set_timeout");
                if (!set) {
                        fprintf(stderr, "ckpt-deadline: this libckpt has no ckpt_set_timeout\n");
                        exit(1);
                }
                set(c, (uint32_t)set_timeout_ms);
        }
        return c;
}

/* Begin the save of step + 1, rank 0.  A connection of an earlier run that
 * timed out may still hold it: the daemon notices the close only once it
 * runs again, so wait a moment for it to drop that save. */
static int save_begin_retry(struct ckpt_conn *c, struct ckpt_save **out) {
        int64_t until = now_ms() + 5000;
        int r;
        while ((r = ckpt_save_begin(c, job, step + 1, 0, 1, out)) == -EBUSY && now_ms() < until)
                usleep(20000);
        return r;
}

int main(int argc, char **argv) {
        static const struct option longopts[] = {
                { "job", required_argument, NULL, 'j' },
                { "step", required_argument, NULL, 's' },
                { "timeout", required_argument, NULL, 'T' },
                { "set-timeout", required_argument, NULL, 'S' },
                {}
        };
        int o;
        while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
                switch (o) {
                case 'j': job = optarg; break;
                case 's': step = strtoull(optarg, NULL, 10); break;
                case 'T': timeout_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
                case 'S': set_timeout_ms = strtol(optarg, NULL, 10); break;
                default: return 2;
                }
        }
        if (optind + 1 != argc) {
                fprintf(stderr, "usage: ckpt-deadline CALL --job J --step S [--timeout MS]\n");
                return 2;
        }
        const char *call = argv[optind];
        bool saving = !strncmp(call, "save_", 5) || !strncmp(call, "shard_b", 7) ||
                      !strcmp(call, "shard_commit");
        struct ckpt_conn *c = NULL;
        struct ckpt_save *s = NULL;
        struct ckpt_shard *sh = NULL;
        static char data[4096], buf[4096];
        int r;

        /* ---- set up, while the daemon runs ---- */
        if (strcmp(call, "connect") != 0)
                c = connect_or_die();
        if (saving && strcmp(call, "save_begin") != 0 &&
            (r = save_begin_retry(c, &s)) < 0)
                setup_fail(r, "save_begin", c);
        if ((!strcmp(call, "shard_buffer") || !strcmp(call, "shard_commit")) &&
            (r = ckpt_shard_begin(s, "a", sizeof(data), &sh)) < 0)
                setup_fail(r, "shard_begin", c);
        if (!strcmp(call, "shard_commit")) {
                void *win;
                uint64_t off, len;
                if ((r = ckpt_shard_buffer(sh, &win, &off, &len)) < 0)
                        setup_fail(r, "shard_buffer", c);
                memset(win, 'x', len);
        }
        say("ready");
        expect("go");

        /* ---- the call under test, against the stopped daemon ---- */
        int64_t t0 = now_ms();
        struct ckpt_save *s2;
        struct ckpt_shard *sh2;
        struct ckpt_shard_info *list;
        size_t count;
        uint64_t got_step, newest, off, len;
        uint32_t world;
        const void *addr;
        uint64_t size;
        void *win;
        if (!strcmp(call, "connect"))
                r = ckpt_connect(NULL, &c);
        else if (!strcmp(call, "save_begin"))
                r = ckpt_save_begin(c, job, step + 1, 0, 1, &s2);
        else if (!strcmp(call, "shard_begin"))
                r = ckpt_shard_begin(s, "a", sizeof(data), &sh2);
        else if (!strcmp(call, "shard_buffer"))
                r = ckpt_shard_buffer(sh, &win, &off, &len);
        else if (!strcmp(call, "shard_commit"))
                r = ckpt_shard_commit(sh);
        else if (!strcmp(call, "save_write"))
                r = ckpt_save_write(s, "a", data, sizeof(data));
        else if (!strcmp(call, "save_finish")) {
                r = ckpt_save_finish(s);
                s = NULL; /* freed, also on error */
        } else if (!strcmp(call, "save_abort")) {
                ckpt_save_abort(s);
                s = NULL;
                r = *ckpt_last_error(c) ? -ETIMEDOUT : 0; /* void: its message says */
        } else if (!strcmp(call, "wait"))
                r = ckpt_wait(c, job, step, CKPT_COMMITTED, timeout_ms);
        else if (!strcmp(call, "commit"))
                r = ckpt_commit(c, job, step, timeout_ms);
        else if (!strcmp(call, "latest"))
                r = ckpt_latest(c, job, &got_step, &world);
        else if (!strcmp(call, "latest_rank"))
                r = ckpt_latest_rank(c, job, 0, CKPT_STEP_LATEST, &got_step, &world, &newest);
        else if (!strcmp(call, "shard_list")) {
                r = ckpt_shard_list(c, job, step, 0, &list, &count);
                if (r == 0)
                        ckpt_shard_list_free(list);
        } else if (!strcmp(call, "read")) {
                int64_t n = ckpt_read(c, job, step, 0, "a", 0, buf, sizeof(buf));
                r = n < 0 ? (int)n : 0;
        } else if (!strcmp(call, "map")) {
                r = ckpt_map(c, job, step, 0, "a", &addr, &size);
                if (r == 0)
                        ckpt_unmap(addr, size);
        } else {
                fprintf(stderr, "ckpt-deadline: unknown call '%s'\n", call);
                return 2;
        }
        int64_t took = now_ms() - t0;
        say("result %d %" PRId64 " %s", r, took, ckpt_last_error(r < 0 && !strcmp(call, "connect")
                                                                         ? NULL
                                                                         : c));

        /* ---- afterwards, with the daemon running again ---- */
        expect("after");
        if (c && !(r < 0 && !strcmp(call, "connect"))) {
                int q = ckpt_latest(c, job, &got_step, &world);
                say("old %d %s", q, ckpt_last_error(c));
        } else {
                c = NULL;
                say("old none");
        }
        struct ckpt_conn *fresh = connect_or_die();
        int q = ckpt_latest(fresh, job, &got_step, &world);
        say("new %d %" PRIu64, q, q == 0 ? got_step : 0);
        if (saving) {
                q = save_begin_retry(fresh, &s2);
                if (q == 0)
                        ckpt_save_abort(s2);
                say("resave %d", q);
        }
        ckpt_disconnect(fresh);
        if (s)
                ckpt_save_abort(s);
        ckpt_disconnect(c);
        return 0;
}
