/* SPDX-License-Identifier: MIT */
/*
 * Output and argument helpers every ckptctl command shares (ctl.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

void json_str(const char *s) {
        fputc('"', ctl.out);
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch == '"' || ch == '\\')
                        fprintf(ctl.out, "\\%c", ch);
                else if (ch < 0x20)
                        fprintf(ctl.out, "\\u%04x", ch);
                else
                        fputc(ch, ctl.out);
        }
        fputc('"', ctl.out);
}

const char *human_bytes(uint64_t b, char buf[32]) {
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        double v = (double)b;
        int u = 0;
        while (v >= 1024 && u < 5) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, 32, "%" PRIu64 " B", b);
        else
                snprintf(buf, 32, "%.1f %s", v, units[u]);
        return buf;
}

const char *human_duration(uint64_t ms, char buf[32]) {
        uint64_t s = ms / 1000;
        if (s >= 86400)
                snprintf(buf, 32, "%" PRIu64 "d %" PRIu64 "h", s / 86400, s % 86400 / 3600);
        else if (s >= 3600)
                snprintf(buf, 32, "%" PRIu64 "h %" PRIu64 "m", s / 3600, s % 3600 / 60);
        else if (s >= 60)
                snprintf(buf, 32, "%" PRIu64 "m %" PRIu64 "s", s / 60, s % 60);
        else
                snprintf(buf, 32, "%" PRIu64 ".%01" PRIu64 "s", s, ms % 1000 / 100);
        return buf;
}

/* "1500", "1500ms" or "2s" -> milliseconds. */
int parse_timeout(const char *s, uint32_t *ms_out) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        unsigned long long scale = !strcmp(end, "s") ? 1000 : 1;
        if (*s < '0' || *s > '9' || errno || (*end && strcmp(end, "ms") && strcmp(end, "s")) ||
            v > UINT32_MAX / scale) {
                ctl_fail(EXIT_USAGE, EINVAL, "--timeout '%s': want milliseconds (1500, 1500ms) "
                         "or seconds (2s) below 2^32 ms; 0: wait forever", s);
                return -EINVAL;
        }
        *ms_out = (uint32_t)(v * scale);
        return 0;
}

int ctl_fail(int status, int err, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fprintf(stderr, "ckptctl: %s\n", msg);
        if (ctl.json) {
                /* straight to stdout: the command's buffered output is
                 * dropped on failure, the error document is all there is */
                FILE *saved = ctl.out;
                const char *name = err ? strerrorname_np(err) : NULL;
                ctl.out = stdout;
                fprintf(stdout, "{\"error\":{\"errno\":");
                if (name)
                        json_str(name);
                else
                        fprintf(stdout, "null");
                fprintf(stdout, ",\"code\":%d,\"exit\":%d,\"message\":", err, status);
                json_str(msg);
                fprintf(stdout, "}}\n");
                fflush(stdout);
                ctl.out = saved;
        }
        return status;
}

int ctl_report(int r, const char *what) {
        return ctl_fail(EXIT_DAEMON_ERROR, -r, "%s: %s", what,
                        ctl.wire.errmsg[0] ? ctl.wire.errmsg : strerror(-r));
}

int ctl_need_proto(uint16_t version, const char *what) {
        if (ctl.wire.proto >= version)
                return 0;
        return ctl_fail(EXIT_DAEMON_ERROR, EPROTONOSUPPORT, "this ckptd speaks protocol "
                        "version %u, %s version %u: upgrade ckptd", ctl.wire.proto, what,
                        version);
}

int ctl_usage(const char *usage) {
        return ctl_fail(EXIT_USAGE, EINVAL, "usage: %s", usage);
}

int ctl_job_name(struct ckpt_name *name, const char *job) {
        if (ckpt_name_set(name, job) < 0) {
                ctl_fail(EXIT_USAGE, EINVAL, "'%s' is not a valid job name", job);
                return -EINVAL;
        }
        return 0;
}

const char *fmt_time(int64_t t, char buf[32]) {
        if (t <= 0)
                return "-";
        time_t tt = (time_t)t;
        struct tm tm;
        gmtime_r(&tt, &tm);
        strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
        return buf;
}

int parse_u64(const char *what, const char *str, uint64_t max, uint64_t *value) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(str, &end, 10);
        if (errno || *end || !*str || str[0] == '-' || v > max) {
                ctl_fail(EXIT_USAGE, EINVAL, "%s must be an integer from 0 to %" PRIu64 ", not '%s'",
                         what, max, str);
                return -EINVAL;
        }
        *value = v;
        return 0;
}

