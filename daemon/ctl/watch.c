/* SPDX-License-Identifier: MIT */
/*
 * ckptctl status --watch [--interval S]: STATUS again every interval, as a
 * block with a line (and where there is a fraction, a bar) per activity —
 * saves in flight, replication owed, uploads, restores, the scrub — and
 * the rates since the last block.  On a terminal each block replaces the
 * last (ANSI home + clear); otherwise blocks follow each other, a blank
 * line between, for a log or a pipe.
 *
 * It runs until SIGINT or SIGTERM and then exits 0: both are blocked and
 * taken with sigtimedwait() as the wait between blocks, so a signal never
 * interrupts a request half-way and the last block is always whole.  A
 * daemon that goes away is shown ("ckptd unreachable: ...") and connected
 * again at the next interval: a watch outlives a daemon restart.
 *
 * The bars: the pool's fill for saves, the scrub's pass; for replication
 * and uploads, which have no total, the share of the largest backlog seen
 * since the watch began that is cleared again (a backlog draining shows as
 * a bar filling up).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

#define WATCH_BAR_WIDTH 20
#define WATCH_INTERVAL_DEFAULT_MS 2000u
#define WATCH_INTERVAL_MIN_MS 100u

struct watch {
        uint32_t interval_ms;
        bool tty;
        bool have_prev;
        struct ckpt_rep_status prev;
        uint64_t prev_at_ms;
        uint32_t peak_owed, peak_pending; /* the largest backlogs seen */
};

static uint64_t watch_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* "[#####...............]  25%" of fraction (clamped to 0..1). */
static const char *bar(double fraction, char buf[48]) {
        if (fraction < 0)
                fraction = 0;
        if (fraction > 1)
                fraction = 1;
        int fill = (int)(fraction * WATCH_BAR_WIDTH + 0.5);
        snprintf(buf, 48, "[%.*s%.*s] %3d%%", fill, "####################",
                 WATCH_BAR_WIDTH - fill, "....................", (int)(fraction * 100 + 0.5));
        return buf;
}

/* Bytes per second of a counter since the last block ("-" for the first). */
static const char *rate(const struct watch *w, uint64_t now, uint64_t before, uint64_t dt_ms,
                        char buf[40]) {
        char b[32];
        if (!w->have_prev || dt_ms == 0 || now < before) {
                snprintf(buf, 40, "-");
                return buf;
        }
        snprintf(buf, 40, "%s/s", human_bytes((now - before) * 1000u / dt_ms, b));
        return buf;
}

static double cleared(uint32_t now, uint32_t peak) {
        return peak ? 1.0 - (double)now / peak : 1.0;
}

static void watch_block(struct watch *w, FILE *f, const struct ckpt_rep_status *s, uint64_t at) {
        char b1[48], b2[40], b3[40], b4[32], b5[32], b6[32];
        uint64_t dt = w->have_prev ? at - w->prev_at_ms : 0;
        const struct ckpt_rep_status *p = &w->prev;

        if (s->repl_steps_pending > w->peak_owed)
                w->peak_owed = s->repl_steps_pending;
        if (s->remote_steps_pending > w->peak_pending)
                w->peak_pending = s->remote_steps_pending;

        fprintf(f, "ckptd %s, up %s\n", s->daemon_version, human_duration(s->uptime_ms, b4));
        fprintf(f, "saves        %s of the pool; %u saves, %u shards, %s not yet on disk; "
                "%u waiting; written %s (%s)\n",
                bar(s->pool_bytes ? (double)s->pool_used_bytes / (double)s->pool_bytes : 0, b1),
                s->saves_active, s->shards_in_flight, human_bytes(s->bytes_in_flight, b4),
                s->slot_waiters, rate(w, s->bytes_written, p->bytes_written, dt, b2),
                human_bytes(s->bytes_written, b5));
        if (s->replication_enabled)
                fprintf(f, "replication  %s cleared; %u step copies owed (most %u); %u of %u "
                        "targets up%s\n", bar(cleared(s->repl_steps_pending, w->peak_owed), b1),
                        s->repl_steps_pending, w->peak_owed, s->peers_up, s->peers_total,
                        s->repl_steps_pending || s->peers_up < s->peers_total ? " (DEGRADED)"
                                                                               : "");
        else
                fprintf(f, "replication  off\n");
        if (s->remote_enabled) {
                fprintf(f, "uploads      %s cleared; %u steps pending (most %u), %u failed; "
                        "%u uploads active; up %s (%s)\n",
                        bar(cleared(s->remote_steps_pending, w->peak_pending), b1),
                        s->remote_steps_pending, w->peak_pending, s->remote_steps_failed,
                        s->remote_uploads_active,
                        rate(w, s->remote_bytes_uploaded, p->remote_bytes_uploaded, dt, b2),
                        human_bytes(s->remote_bytes_uploaded, b5));
                if (s->remote_error[0])
                        fprintf(f, "             error: %s\n", s->remote_error);
        } else {
                fprintf(f, "uploads      no object store configured\n");
        }
        fprintf(f, "restores     read %s (%s)", rate(w, s->bytes_read, p->bytes_read, dt, b2),
                human_bytes(s->bytes_read, b5));
        if (s->remote_enabled)
                fprintf(f, "; from the store %s (%s)",
                        rate(w, s->remote_bytes_downloaded, p->remote_bytes_downloaded, dt, b3),
                        human_bytes(s->remote_bytes_downloaded, b6));
        fputc('\n', f);
        if (s->scrub_state == CKPT_SCRUB_OFF)
                fprintf(f, "scrub        off\n");
        else
                fprintf(f, "scrub        %s pass %" PRIu64 " %s, %s of %s, %" PRIu64 " bad\n",
                        bar(s->scrub_bytes_total ? (double)s->scrub_bytes_verified /
                                                           (double)s->scrub_bytes_total
                                                 : 0, b1),
                        s->scrub_pass,
                        s->scrub_state == CKPT_SCRUB_RUNNING ? "running"
                        : s->scrub_state == CKPT_SCRUB_PAUSED ? "paused (saves open)"
                                                              : "waiting",
                        human_bytes(s->scrub_bytes_verified, b4),
                        human_bytes(s->scrub_bytes_total, b5), s->scrub_copies_bad);
        fprintf(f, "errors       %" PRIu64 "%s%s\n", s->errors, s->last_error[0] ? ", last: " : "",
                s->last_error);
        w->prev = *s;
        w->prev_at_ms = at;
        w->have_prev = true;
}

/* "2", "0.5", "2s", "500ms" -> milliseconds; 0 or -EINVAL (reported). */
static int parse_interval(const char *s, uint32_t *ms_out) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        double scale = !strcmp(end, "ms") ? 1 : 1000;
        if (errno || end == s || (*end && strcmp(end, "s") && strcmp(end, "ms")) ||
            v * scale < WATCH_INTERVAL_MIN_MS || v * scale > 86400000.0) {
                ctl_fail(EXIT_USAGE, EINVAL, "--interval '%s': want seconds (2, 0.5, 2s) or "
                         "milliseconds (500ms), from 0.1 s to a day", s);
                return -EINVAL;
        }
        *ms_out = (uint32_t)(v * scale);
        return 0;
}

int status_watch(int nargs, char **args) {
        struct watch w = { .interval_ms = WATCH_INTERVAL_DEFAULT_MS };
        sigset_t stop, old;

        for (int i = 0; i < nargs; i++) {
                const char *v = NULL;
                if (!strcmp(args[i], "--watch"))
                        continue;
                if (!strcmp(args[i], "--interval") && i + 1 < nargs)
                        v = args[++i];
                else if (!strncmp(args[i], "--interval=", 11))
                        v = args[i] + 11;
                else
                        return ctl_usage("status [--watch [--interval S]]");
                if (parse_interval(v, &w.interval_ms) < 0)
                        return EXIT_USAGE;
        }
        if (ctl.json)
                return ctl_fail(EXIT_USAGE, EINVAL, "status --watch is for people; scripts "
                                "poll 'ckptctl status --json'");
        w.tty = isatty(STDOUT_FILENO);
        sigemptyset(&stop);
        sigaddset(&stop, SIGINT);
        sigaddset(&stop, SIGTERM);
        sigprocmask(SIG_BLOCK, &stop, &old);

        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        for (;;) {
                char *text = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&text, &len);
                if (!f)
                        break;
                char when[32];
                time_t t = time(NULL);
                struct tm tm;
                gmtime_r(&t, &tm);
                strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
                fprintf(f, "%s, every %.1f s (Ctrl-C stops)\n", when, w.interval_ms / 1000.0);

                int r = 0;
                if (ctl.wire.fd < 0)
                        r = wire_open_within(&ctl.wire, ctl.socket_path, "connect",
                                             ctl.timeout_ms, NULL);
                if (r == 0) {
                        struct ckpt_request req = { .hdr.type = CKPT_MSG_STATUS };
                        r = wire_call(&ctl.wire, &req, rep, NULL);
                }
                if (r < 0) {
                        const char *why = ctl.wire.errmsg[0] ? ctl.wire.errmsg : strerror(-r);
                        fprintf(f, "ckptd unreachable at %s: %s; trying again every %.1f s\n",
                                ctl.socket_path, why, w.interval_ms / 1000.0);
                        wire_close(&ctl.wire);
                        ctl.wire.errmsg[0] = '\0';
                        w.have_prev = false; /* rates start over with the next daemon */
                } else {
                        watch_block(&w, f, &rep->status, watch_now_ms());
                }
                fclose(f);
                if (w.tty)
                        fputs("\033[H\033[2J", stdout);
                fwrite(text, 1, len, stdout);
                if (!w.tty)
                        fputc('\n', stdout);
                fflush(stdout);
                free(text);

                struct timespec ts = { .tv_sec = w.interval_ms / 1000,
                                       .tv_nsec = (long)(w.interval_ms % 1000) * 1000000L };
                int sig;
                do
                        sig = sigtimedwait(&stop, NULL, &ts);
                while (sig < 0 && errno == EINTR);
                if (sig > 0)
                        break;
        }
        free(rep);
        sigprocmask(SIG_SETMASK, &old, NULL);
        return 0;
}
